"""SpeakerSleuth's LALM-judge method: an audio-language model asked about a speaker's turns.

Questions (one prompt family each, lalm_prompts): detection (YES/NO: one voice across the turns?),
localization ("Turn 3, Turn 5" / "None"), discrimination (which option fills the masked turn: A/B/C)
and ranking ("A > B > C"). By default all turns go in one call with the reference clip first
(--no-reference leaves it out; --with-text-context interleaves the interlocutors' turns as text);
per_turn asks one call per turn against the reference (the paper's Appendix C variant), and for
discrimination shows the options next to the reference only.

Candidates are shown in an order drawn per row from (seed, dataset, instance_id), so a row's order
does not depend on batching; permutations="all" asks every order. The orders, the parsed answers
(letters as shown) and the raw replies are kept in the results; with several orders the row's choice
is the candidate picked most often (ties: the earliest order asked) and its ranking sorts candidates
by mean position (ties: manifest order). A reply no parser accepts, after the client's re-asks, is
that row's error, with the raw reply kept.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any


from sdscore.errors import JudgeError, SdscoreError
from sdscore.llm_judges.answers import option_letters, parse_choice, parse_ranking, parse_turns, parse_yes_no
from sdscore.llm_judges.audio_request import DEFAULT_AUDIO_RATE, DEFAULT_MAX_REQUEST_BYTES, AudioRequest
from sdscore.llm_judges.client import ChatClient
from sdscore.llm_judges.reply_error import ReplyError
from sdscore.progress import Progress
from sdscore.protocols.consistency.choices import LALM_TASKS, PERMUTATIONS
from sdscore.protocols.consistency.lalm_prompts import ConsistencyPrompt, family_of, load_consistency_prompt

#: most orders `permutations="all"` asks per row (5 candidates: 120)
MAX_ORDERS = 120
_ROW_TASKS = {"detection": ("detection", "localization"), "discrimination": ("discrimination", "ranking")}


@dataclass(frozen=True)
class _Call:
    row: int
    request: AudioRequest
    parse: Callable[[str], Any]
    order: tuple[int, ...] | None = None  # candidate indices in the order shown (option A first)


def _turns_parser(numbers: dict[int, int], n_shown: int) -> Callable[[str], list[int]]:
    """Shown turn numbers → the target's turn indices; naming an interlocutor's turn is a ReplyError."""
    def parse(text: str) -> list[int]:
        shown = [t + 1 for t in parse_turns(text, n_shown)]
        other = [n for n in shown if n not in numbers]
        if other:
            raise ReplyError(f"the reply names turn {other[0]}, which is not the target speaker's: {text!r}", raw=text)
        return sorted(numbers[n] for n in shown)
    return parse


def _orders(rng: random.Random, n: int, permutations: str) -> list[tuple[int, ...]]:
    if permutations == "one":
        return [tuple(rng.sample(range(n), n))]
    if math.factorial(n) > MAX_ORDERS:
        raise JudgeError(f"permutations 'all' with {n} candidates would ask {math.factorial(n)} orders "
                         f"(at most {MAX_ORDERS})")
    return list(itertools.permutations(range(n)))


def _majority(picks: list[int]) -> int:
    """The most frequent pick; ties go to the one asked first (Counter keeps first-seen order)."""
    return Counter(picks).most_common(1)[0][0]


def _mean_position_order(rankings: list[list[int]], n: int) -> list[int]:
    """Candidates sorted by mean position over the rankings (ties: manifest order)."""
    totals = [0.0] * n
    for ranking in rankings:
        for position, candidate in enumerate(ranking):
            totals[candidate] += position
    return sorted(range(n), key=lambda c: (totals[c], c))


class LalmConsistencyJudge:
    """Asks one LALM (a ChatClient at an OpenAI-compatible audio endpoint) SpeakerSleuth's questions.

    task: auto (detection rows → detection, discrimination rows → discrimination) or one of
    detection | localization (detection rows) | discrimination | ranking (discrimination rows);
    a row of the other kind fails with a message saying so."""

    def __init__(self, client: ChatClient, task: str = "auto", *, reference: bool = True,
                 text_context: bool = False, per_turn: bool = False, permutations: str = "one", seed: int = 0,
                 prompt_file: str | None = None, audio_rate: int = DEFAULT_AUDIO_RATE,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, max_audio_seconds: float | None = None):
        if task not in LALM_TASKS:
            raise ValueError(f"unknown LALM task {task!r}; expected one of {list(LALM_TASKS)}")
        if permutations not in PERMUTATIONS:
            raise ValueError(f"permutations must be one of {list(PERMUTATIONS)}, got {permutations!r}")
        if per_turn and not reference:
            raise ValueError("per-turn judging compares each turn with the reference; it cannot run without one")
        if per_turn and text_context:
            raise ValueError("per-turn judging shows one clip at a time; text context does not apply")
        if prompt_file is not None and task == "auto":
            raise ValueError("a prompt file is for one question; name the task (detection, localization, ...)")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        self.client, self.task, self.reference, self.text_context = client, task, reference, text_context
        self.per_turn, self.permutations, self.seed = per_turn, permutations, seed
        self.audio_rate, self.max_request_bytes, self.max_audio_seconds = audio_rate, max_request_bytes, max_audio_seconds
        tasks = ("detection", "discrimination") if task == "auto" else (task,)
        self.prompts: dict[str, ConsistencyPrompt] = {
            t: load_consistency_prompt(family_of(t, per_turn), prompt_file,
                                       text_context and t in ("detection", "localization"))
            for t in tasks
        }

    def row_task(self, manifest_task: str | None) -> str:
        """The question asked of a row of this manifest task (JudgeError when the task does not fit)."""
        if manifest_task not in _ROW_TASKS:
            raise JudgeError(f"task must be 'detection' or 'discrimination', got {manifest_task!r}")
        if self.task == "auto":
            return manifest_task
        if self.task not in _ROW_TASKS[manifest_task]:
            raise JudgeError(f"--task {self.task} asks {'detection' if self.task in _ROW_TASKS['detection'] else 'discrimination'}"
                             f" rows; this row is a {manifest_task} instance")
        return self.task

    # --- planning: the calls of one row -------------------------------------------------------

    def _target(self, row: dict) -> str:
        return row.get("speaker_name") or row.get("speaker_id") or "the target speaker"

    def _context(self, row: dict) -> list[tuple[str, str | None]] | None:
        if not self.text_context:
            return None
        speakers, texts = row.get("dialogue_speakers"), row.get("dialogue_texts")
        if speakers is None or texts is None or len(speakers) != len(texts):
            raise JudgeError("text context needs dialogue_speakers and dialogue_texts of equal length")
        n_audio = sum(t is None for t in texts)
        if n_audio != len(row["turn_paths"]):
            raise JudgeError(f"dialogue_texts leaves {n_audio} turns to audio (null) but turn_paths has "
                             f"{len(row['turn_paths'])}")
        target = self._target(row)
        return [(s or (target if t is None else "another speaker"), t) for s, t in zip(speakers, texts)]

    def plan(self, index: int, row: dict) -> list[_Call]:
        """The calls for one manifest row; JudgeError says why the row cannot be asked."""
        task = self.row_task(row["task"])
        prompt = self.prompts[task]
        turns = row["turn_paths"] or []
        if not turns or any(p is None for p in turns):
            raise JudgeError("turn_paths must list at least one audio path (and no nulls)")
        reference = row.get("reference_path") if self.reference else None
        needs_reference = self.per_turn or (self.reference and "reference" in prompt.sections)
        if needs_reference and reference is None:
            raise JudgeError("no reference_path (judge with --no-reference to leave the reference out)")
        target = self._target(row)
        if task in ("detection", "localization"):
            if self.per_turn:
                return [_Call(index, prompt.clip_request(reference, clip, target), parse_yes_no) for clip in turns]
            context = self._context(row)
            request, numbers = prompt.turns_request(turns, reference, target, context)
            n_shown = len(context) if context is not None else len(turns)
            parse = parse_yes_no if task == "detection" else _turns_parser(numbers, n_shown)
            return [_Call(index, request, parse)]
        candidates, labels = row.get("candidate_paths") or [], row.get("candidate_scenarios") or []
        if len(candidates) < 2 or len(candidates) != len(labels) or any(p is None for p in candidates):
            raise JudgeError(f"discrimination needs candidate_paths and candidate_scenarios of equal length >= 2, "
                             f"got {len(candidates)} and {len(labels)}")
        if len(set(labels)) != len(labels):
            raise JudgeError(f"candidate_scenarios must be distinct labels, got {labels}")
        letters = option_letters(len(candidates))
        rng = random.Random(f"{self.seed}\x1f{row.get('dataset')}\x1f{row.get('instance_id')}")
        parse = (lambda text, ls=letters: parse_choice(text, ls)) if task == "discrimination" else \
            (lambda text, ls=letters: parse_ranking(text, ls))
        calls = []
        for order in _orders(rng, len(candidates), self.permutations):
            shown = [candidates[c] for c in order]
            if self.per_turn:
                request = prompt.options_request(reference, shown, letters, target)
            else:
                if row.get("masked_turn") is None:
                    raise JudgeError("masked_turn is needed to show where the candidates belong")
                request = prompt.masked_request(turns, row["masked_turn"], shown, letters, reference, target)
            calls.append(_Call(index, request, parse, order))
        return calls

    # --- asking -------------------------------------------------------------------------------

    def _ask(self, call: _Call) -> tuple[Any, str | None, float | None, Exception | None]:
        """(parsed, raw reply, cost, error) of one call."""
        try:
            messages = call.request.messages(self.audio_rate, self.max_request_bytes, self.max_audio_seconds)
            result = self.client.complete(messages, parse=call.parse)
        except ReplyError as error:
            return None, error.raw, None, error
        except SdscoreError as error:
            return None, None, None, error
        return result.parsed, result.content, result.cost, None

    def score(self, rows: list[dict], progress: Progress | None = None) -> list[dict]:
        """LALM result fields per row (see _assemble), in order; a row that fails carries its error."""
        plans: list[list[_Call] | None] = []
        problems: list[str | None] = []
        for index, row in enumerate(rows):
            if row.get("error") is not None:
                plans.append(None)
                problems.append(row["error"])
                continue
            try:
                plans.append(self.plan(index, row))
                problems.append(None)
            except JudgeError as error:
                plans.append(None)
                problems.append(str(error))
        calls = [call for plan in plans if plan for call in plan]
        answers: dict[int, tuple] = {}
        with ThreadPoolExecutor(max_workers=self.client.concurrency, thread_name_prefix="sdscore-lalm") as pool:
            for done, (call, answer) in enumerate(zip(calls, pool.map(self._ask, calls)), start=1):
                answers[id(call)] = answer
                if progress is not None:
                    progress("consistency: lalm judge", done, len(calls))
        return [self._assemble(row, plan, [answers[id(c)] for c in plan] if plan else [], problem)
                for row, plan, problem in zip(rows, plans, problems)]

    def _assemble(self, row: dict, plan: list[_Call] | None, replies: list[tuple], problem: str | None) -> dict:
        out: dict[str, Any] = {"lalm_task": None, "option_orders": None, "answers": None, "raw_replies": None,
                               "cost": None, "error": problem}
        if plan is None:
            return out
        task = self.row_task(row["task"])
        out["lalm_task"] = task
        out["raw_replies"] = [raw for _, raw, _, _ in replies]
        costs = [cost for _, _, cost, _ in replies]
        out["cost"] = None if any(c is None for c in costs) else float(sum(costs))
        if plan[0].order is not None:
            out["option_orders"] = [list(c.order) for c in plan]
        out["answers"] = [_answer_text(task, parsed, self.per_turn) if error is None else None
                          for parsed, _, _, error in replies]
        failed = [(k, error) for k, (_, _, _, error) in enumerate(replies) if error is not None]
        if failed:
            k, error = failed[0]
            out["error"] = f"call {k + 1} of {len(plan)}: {error}" if len(plan) > 1 else str(error)
            return out
        parsed = [p for p, _, _, _ in replies]
        if task in ("detection", "localization"):
            if self.per_turn:
                flagged = [t for t, same in enumerate(parsed) if not same]
                out.update(flagged_turns=flagged, inconsistent_pred=bool(flagged))
            elif task == "detection":
                out["inconsistent_pred"] = not parsed[0]
            else:
                out.update(flagged_turns=parsed[0], inconsistent_pred=bool(parsed[0]))
            return out
        labels = row["candidate_scenarios"]
        letters = option_letters(len(labels))
        if task == "discrimination":
            picks = [call.order[letters.index(letter)] for call, letter in zip(plan, parsed)]
            out["choice"] = labels[_majority(picks)]
        else:
            rankings = [[call.order[letters.index(x)] for x in ranking] for call, ranking in zip(plan, parsed)]
            out["ranking"] = [labels[c] for c in _mean_position_order(rankings, len(labels))]
        return out


def _answer_text(task: str, parsed: Any, per_turn: bool) -> str:
    """A parsed answer as stored: YES/NO; the target's flagged turns, 1-based, as "1,3" (or "none");
    the option letter as shown; a ranking of letters as "B>A>C"."""
    if task == "detection" or per_turn and task == "localization":
        return "YES" if parsed else "NO"
    if task == "localization":
        return ",".join(str(t + 1) for t in parsed) or "none"
    if task == "discrimination":
        return parsed
    return ">".join(parsed)
