"""Pair-prefix sharing: which episodes of a window run their common prefix once, and in which batches.

The chosen and rejected episodes of a pair (and the several responses to one prompt of an RL
rollout) share their system prompt, context turns and context clips. For a causal language
model the states of that shared prefix do not depend on what follows, so a group of such
episodes can run the prefix once and each continuation on its cached keys and values
(`RewardModel.collate_groups`). The model says how long a prefix two prepared episodes may share
(`RewardModel.shared_prefix`: equal tokens and equal audio); this module groups a window's
episodes by it and plans batches of groups.

Grouping is greedy over the window in input order (pairs and rollout groups arrive together): an
episode joins the open group whose leader shares the longest prefix with it when it shares at
least KEEP of the group's prefix (so the responses of a rollout stay together when two of them
happen to share a few more tokens, while the next pair, which shares only the system prompt with
this one, opens its own group); otherwise it opens a group. Only groups
of two or more episodes with a prefix of at least `min_prefix` tokens are returned as groups;
the rest are scored as usual.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sdscore.models.base import Prepared

#: prefixes shorter than this are not worth a second forward call
MIN_PREFIX = 16
#: how many of the most recent groups an episode is compared with
LOOKBACK = 16
#: an episode joins a group only if it shares at least this share of the group's prefix
KEEP = 0.9


@dataclass
class PrefixGroup:
    """Positions (into the grouped list) of episodes sharing their first `prefix` tokens."""

    members: list[int] = field(default_factory=list)
    prefix: int = 0


def group_by_prefix(
    items: Sequence[Prepared], shared: Callable[[Prepared, Prepared], int], *, max_group: int,
    min_prefix: int = MIN_PREFIX, lookback: int = LOOKBACK,
) -> tuple[list[PrefixGroup], list[int]]:
    """(groups of ≥ 2 episodes sharing ≥ min_prefix tokens, positions of the ungrouped episodes).

    shared(a, b): tokens a and b may share (the model's rule; at most min(len) − 1, so every
    member keeps a continuation). A group holds at most max_group episodes.
    """
    if max_group < 1:
        raise ValueError(f"max_group must be >= 1, got {max_group}")
    open_groups: list[PrefixGroup] = []
    closed: list[PrefixGroup] = []
    for pos, item in enumerate(items):
        best, best_len = None, 0
        for group in open_groups[-lookback:]:
            if len(group.members) >= max_group:
                continue
            length = min(shared(items[group.members[0]], item), group.prefix or 1 << 62)
            if length < min_prefix:
                continue
            if length >= KEEP * group.prefix and length > best_len:
                best, best_len = group, length
        if best is None:
            open_groups.append(PrefixGroup([pos], 0))
        else:
            best.members.append(pos)
            best.prefix = best_len
        if len(open_groups) > 4 * lookback:  # keep the candidate list short; old groups are done
            closed.extend(open_groups[:-lookback])
            open_groups = open_groups[-lookback:]
    groups = [g for g in closed + open_groups if len(g.members) > 1]
    grouped = {m for g in groups for m in g.members}
    return sorted(groups, key=lambda g: g.members[0]), [p for p in range(len(items)) if p not in grouped]


def plan_group_batches(
    groups: Sequence[PrefixGroup], lengths: Sequence[int], max_batch: int, max_tokens: int | None = None,
) -> list[list[int]]:
    """Indices into `groups`, in batches: at most max_batch episodes and, when max_tokens is set, at
    most max_tokens padded positions (groups × longest prefix + episodes × longest continuation);
    a group too large for either limit gets a batch of its own. Longest groups first, so similar
    lengths share a batch. lengths: every episode's token count (positions as in the groups)."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")

    def longest_cont(g: PrefixGroup) -> int:
        return max(lengths[m] - g.prefix for m in g.members)

    order = sorted(range(len(groups)), key=lambda i: -(groups[i].prefix + longest_cont(groups[i])))
    batches: list[list[int]] = []
    current: list[int] = []
    episodes = prefix = cont = 0
    for i in order:
        g = groups[i]
        grown_episodes = episodes + len(g.members)
        grown_prefix, grown_cont = max(prefix, g.prefix), max(cont, longest_cont(g))
        tokens = (len(current) + 1) * grown_prefix + grown_episodes * grown_cont
        if current and (grown_episodes > max_batch or (max_tokens is not None and tokens > max_tokens)):
            batches.append(current)
            current, episodes, prefix, cont = [], 0, 0, 0
            grown_episodes, grown_prefix, grown_cont = len(g.members), g.prefix, longest_cont(g)
        current.append(i)
        episodes, prefix, cont = grown_episodes, grown_prefix, grown_cont
    if current:
        batches.append(current)
    return batches
