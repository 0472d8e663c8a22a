"""Team-draft interleaving and multileaving (docs/SPEC.md §12), for serving code
that shows one list merged from several rankers.

`team_draft` merges the rankers' lists in rounds (Radlinski, Kurup and
Joachims 2008; for more than two rankers, Schuth et al. 2014's team-draft
multileaving): in each round the rankers pick in an order drawn at random (a
coin for two), each taking its highest-ranked item not yet in the list; a
ranker with nothing new left is skipped. The result holds the items to show
and, per item, the index of the ranker that contributed it, which is what
`Impression.interleaving` carries so that rankwatch credits each ranker with
the feedback on its own items.

This module knows nothing of events or the wire; `rankwatch.events` turns
its result into the protobuf field.
"""

from __future__ import annotations

import dataclasses
import random
from typing import List, Mapping, Optional, Sequence, Set, Tuple, Union

#: The most rankers one list may merge: the server's default `max_interleaved_rankers`.
MAX_RANKERS = 8
#: Names starting with it are the server's own groups (such as `__overflow__`).
RESERVED_PREFIX = "__"

#: Each ranker's name and its ranked item ids (best first), in the order the
#: rankers are to be listed: a mapping (its order is kept) or a sequence of pairs.
Rankings = Union[Mapping[str, Sequence[str]], Sequence[Tuple[str, Sequence[str]]]]


@dataclasses.dataclass(frozen=True)
class Interleaved:
    """A merged list: what to show, and who contributed each item."""

    items: Tuple[str, ...]
    """The item ids to show, rank 1 first."""
    rankers: Tuple[str, ...]
    """The rankers' names, in the order the caller gave them."""
    teams: Tuple[int, ...]
    """One per item: the index in `rankers` of the ranker that contributed it."""

    def team_of(self, rank: int) -> str:
        """The name of the ranker that contributed the item at `rank` (1 first)."""
        return self.rankers[self.teams[rank - 1]]


def team_draft(rankings: Rankings, length: int, rng: Optional[random.Random] = None) -> Interleaved:
    """Merges the rankers' lists by team draft into at most `length` items.

    `rankings` names 2 to `MAX_RANKERS` distinct rankers, none empty or
    starting with `RESERVED_PREFIX`, each with its items best first; the
    result lists the rankers in that same order. The list is shorter than
    `length` when the rankers run out of distinct items. `rng` draws each
    round's order (pass a seeded `random.Random` to repeat a draw); by
    default the `random` module's own generator, which is seeded again in a
    child process after a fork.
    """
    rankers, lists = _validated(rankings, length)
    shuffle = (rng if rng is not None else random).shuffle
    shown: List[str] = []
    teams: List[int] = []
    taken: Set[str] = set()
    next_rank = [0] * len(lists)
    while len(shown) < length:
        order = list(range(len(lists)))
        shuffle(order)
        picked = False
        for team in order:
            item = _best_left(lists[team], next_rank, team, taken)
            if item is None:
                continue
            shown.append(item)
            teams.append(team)
            taken.add(item)
            picked = True
            if len(shown) == length:
                break
        if not picked:
            break
    return Interleaved(tuple(shown), rankers, tuple(teams))


def _best_left(ranked: Sequence[str], next_rank: List[int], team: int, taken: Set[str]) -> Optional[str]:
    """The highest-ranked item of `ranked` not yet taken (`None`: none left);
    moves the ranker's cursor past the items already taken."""
    rank = next_rank[team]
    while rank < len(ranked) and ranked[rank] in taken:
        rank += 1
    next_rank[team] = rank
    return ranked[rank] if rank < len(ranked) else None


def _validated(rankings: Rankings, length: int) -> Tuple[Tuple[str, ...], List[Sequence[str]]]:
    """The rankers' names and lists, in the caller's order, once they pass the server's rules."""
    pairs = list(rankings.items()) if isinstance(rankings, Mapping) else [tuple(pair) for pair in rankings]
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ValueError(f"length must be a positive int, not {length!r}")
    names = [name for name, _ in pairs]
    if len(names) < 2 or len(names) > MAX_RANKERS:
        raise ValueError(f"team draft merges 2 to {MAX_RANKERS} rankers, not {len(names)}")
    for index, name in enumerate(names):
        if not isinstance(name, str) or not name:
            raise ValueError(f"ranker {index} has no name ({name!r}); name it as its model would be named")
        if name.startswith(RESERVED_PREFIX):
            raise ValueError(f"ranker name {name!r} starts with {RESERVED_PREFIX!r}, which the server reserves")
        if name in names[:index]:
            raise ValueError(f"ranker name {name!r} is given twice; each ranker is named once")
    lists = []
    for name, ranked in pairs:
        if isinstance(ranked, str):
            raise ValueError(f"ranker {name!r}: give a sequence of item ids, not the string {ranked!r}")
        lists.append(list(ranked))
    return tuple(names), lists
