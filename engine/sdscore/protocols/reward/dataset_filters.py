"""SDiaReward's rule-based dataset filters (its Appendix, Phase 1), with a count of what was dropped.

A pair is kept when both of its episodes:
- have an even number of turns that alternate user / assistant, starting with the user (a leading
  system turn is not counted);
- have at most `max_turns` turns (16);
- have no turn whose audio is longer than `max_turn_seconds` (60 s), read from the files' headers.

Each dropped pair is counted under the first rule it breaks, checked in that order. A pair whose
audio cannot be read is dropped too, under its own reason. This is a corpus step
(`sdscore corpus filter-sdiareward`), not part of reading: reading never opens audio.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import polars as pl

from sdscore.audio.checks import header_seconds
from sdscore.runtime.compute_budget import cores, thread_pool_size

MAX_TURNS = 16
MAX_TURN_SECONDS = 60.0
REASONS = ("odd number of turns", "roles do not alternate user/assistant", f"more than {MAX_TURNS} turns",
           f"a turn longer than {MAX_TURN_SECONDS:g} s", "audio unreadable")


def _structure_problem(turns: list[dict] | None, max_turns: int) -> str | None:
    roles = [t["role"] for t in turns or []]
    if roles and roles[0] == "system":
        roles = roles[1:]
    if len(roles) % 2:
        return REASONS[0]
    if any(role != ("user" if k % 2 == 0 else "assistant") for k, role in enumerate(roles)):
        return REASONS[1]
    if len(roles) > max_turns:
        return f"more than {max_turns} turns"
    return None


def filter_pairs(pairs: pl.DataFrame, *, max_turns: int = MAX_TURNS, max_turn_seconds: float | None = MAX_TURN_SECONDS,
                 num_threads: int | None = None) -> tuple[pl.DataFrame, dict[str, int]]:
    """(the kept pairs, {reason: pairs dropped}) of a REWARD_PAIRS frame with resolved audio paths;
    max_turn_seconds None skips the duration rule (and every header read)."""
    problems: list[str | None] = []
    for chosen, rejected in pairs.select("chosen", "rejected").iter_rows():
        problems.append(_structure_problem(chosen, max_turns) or _structure_problem(rejected, max_turns))
    if max_turn_seconds is not None:
        paths = sorted({t["audio_path"] for side in ("chosen", "rejected") for turns in pairs[side].to_list()
                        for t in turns or [] if t.get("audio_path")})
        # header reads: the compute budget's cores(), at most 8, unless num_threads says
        with ThreadPoolExecutor(thread_pool_size(num_threads or min(8, cores()), items=len(paths))) as pool:
            seconds = dict(zip(paths, pool.map(header_seconds, paths)))
        for i, (chosen, rejected) in enumerate(pairs.select("chosen", "rejected").iter_rows()):
            if problems[i] is not None:
                continue
            lengths = [seconds[t["audio_path"]] for turns in (chosen, rejected) for t in turns or []
                       if t.get("audio_path")]
            if any(s is None for s in lengths):
                problems[i] = REASONS[4]
            elif any(s > max_turn_seconds for s in lengths):
                problems[i] = f"a turn longer than {max_turn_seconds:g} s"
    kept = pairs.filter(pl.Series([p is None for p in problems], dtype=pl.Boolean))
    return kept, dict(Counter(p for p in problems if p is not None))
