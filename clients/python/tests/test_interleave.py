"""Team-draft interleaving and multileaving: who picks, what they pick, and when it stops."""

from __future__ import annotations

import collections
import math
import random
from typing import Dict, List, Sequence

import pytest

from rankwatch import events
from rankwatch.interleave import MAX_RANKERS, Interleaved, team_draft


class FixedOrder(random.Random):
    """A generator whose shuffles put the rankers in the orders given, one per round."""

    def __init__(self, *orders: Sequence[int]) -> None:
        super().__init__(0)
        self.orders = [list(order) for order in orders]
        self.rounds = 0

    def shuffle(self, x: List[int]) -> None:  # type: ignore[override]
        x[:] = self.orders[self.rounds % len(self.orders)]
        self.rounds += 1


def random_rankings(rng: random.Random, n_rankers: int) -> Dict[str, List[str]]:
    """Rankers over a shared pool of items, so that their lists overlap; some run short."""
    pool = [f"item-{i}" for i in range(30)]
    return {f"ranker-{r}": rng.sample(pool, rng.randint(0, 15)) for r in range(n_rankers)}


def assert_team_draft(rankings: Dict[str, List[str]], mixed: Interleaved, length: int) -> None:
    """Every item is the highest-ranked item not yet shown of the ranker its team names,
    the rankers with items left take turns, and the list stops only at `length` or
    when no ranker has a new item."""
    names = list(rankings)
    assert mixed.rankers == tuple(names)
    assert len(mixed.items) == len(mixed.teams) <= length
    assert len(set(mixed.items)) == len(mixed.items)
    for rank, (item, team) in enumerate(zip(mixed.items, mixed.teams)):
        shown = set(mixed.items[:rank])
        left = [candidate for candidate in rankings[names[team]] if candidate not in shown]
        assert left and left[0] == item, (rank, item, names[team])
    # Rounds: a ranker with items left has never been skipped, so it picked in
    # every round so far and trails no ranker by more than one pick.
    picks = [0] * len(names)
    for rank, team in enumerate(mixed.teams):
        picks[team] += 1
        shown = set(mixed.items[:rank + 1])
        for other, name in enumerate(names):
            if set(rankings[name]) - shown:
                assert picks[other] >= max(picks) - 1, (rank, picks)
    distinct = {item for ranked in rankings.values() for item in ranked}
    assert len(mixed.items) == min(length, len(distinct))


@pytest.mark.parametrize("n_rankers", [2, 3, 5, MAX_RANKERS])
def test_every_item_is_its_rankers_best_left_at_its_pick(n_rankers: int) -> None:
    rng = random.Random(n_rankers)
    for _ in range(300):
        rankings = random_rankings(rng, n_rankers)
        length = rng.randint(1, 40)
        assert_team_draft(rankings, team_draft(rankings, length, rng), length)


def test_two_rankers_take_turns_in_the_order_of_each_rounds_coin() -> None:
    rankings = {"a": ["x", "y", "z", "v"], "b": ["y", "x", "w", "u"]}
    mixed = team_draft(rankings, 6, FixedOrder([0, 1], [1, 0], [1, 0]))
    # a takes x; b's best, y, is free; then b first: x, y taken, so w; a: y taken, z; then b: u, a: v.
    assert mixed == Interleaved(("x", "y", "w", "z", "u", "v"), ("a", "b"), (0, 1, 1, 0, 1, 0))
    assert [mixed.team_of(rank) for rank in (1, 2, 3)] == ["a", "b", "b"]


def test_an_exhausted_ranker_is_skipped_and_the_others_fill_the_list() -> None:
    rankings = {"short": ["a"], "long": ["a", "b", "c", "d"]}
    assert team_draft(rankings, 4, FixedOrder([0, 1])) == Interleaved(("a", "b", "c", "d"), ("short", "long"),
                                                                      (0, 1, 1, 1))
    # Picking second, the short ranker finds its only item taken and never picks.
    assert team_draft(rankings, 4, FixedOrder([1, 0])).teams == (1, 1, 1, 1)


def test_the_list_stops_at_length_or_when_no_ranker_has_a_new_item() -> None:
    rankings = [("a", ["x", "y"]), ("b", ["y", "x"]), ("c", ["x"])]
    assert len(team_draft(rankings, 1, random.Random(1)).items) == 1
    assert sorted(team_draft(rankings, 10, random.Random(1)).items) == ["x", "y"]
    assert team_draft({"a": [], "b": []}, 5).items == ()
    # The last round is cut at `length`: only the first of its pickers gets in.
    assert team_draft({"a": ["x", "y"], "b": ["z", "w"]}, 3, FixedOrder([1, 0])).teams == (1, 0, 1)


def test_each_ranker_gets_the_first_pick_about_one_time_in_n() -> None:
    for n_rankers in (2, 3, 4):
        rng = random.Random(100 + n_rankers)
        rankings = {f"r{r}": [f"item-{r}-{i}" for i in range(5)] for r in range(n_rankers)}
        draws = 12_000
        first = collections.Counter(team_draft(rankings, 5, rng).teams[0] for _ in range(draws))
        assert sorted(first) == list(range(n_rankers))
        share, sd = 1 / n_rankers, math.sqrt(draws * (1 / n_rankers) * (1 - 1 / n_rankers))
        for team in range(n_rankers):
            assert abs(first[team] - draws * share) < 5 * sd, (n_rankers, first)


def test_default_generator_flips_both_ways() -> None:
    firsts = {team_draft({"a": ["x"], "b": ["y"]}, 2).teams for _ in range(200)}
    assert firsts == {(0, 1), (1, 0)}


def test_a_seeded_generator_repeats_the_draw() -> None:
    rankings = random_rankings(random.Random(7), 4)
    draws = [[team_draft(rankings, 12, rng) for _ in range(20)] for rng in (random.Random(42), random.Random(42))]
    assert draws[0] == draws[1]
    assert len({mixed.teams for mixed in draws[0]}) > 1


def test_rankers_are_listed_in_the_callers_order_whatever_the_form() -> None:
    as_pairs = team_draft([("zeta", ["x"]), ("alpha", ["y"])], 2, random.Random(3))
    as_mapping = team_draft({"zeta": ["x"], "alpha": ["y"]}, 2, random.Random(3))
    assert as_pairs == as_mapping and as_pairs.rankers == ("zeta", "alpha")


@pytest.mark.parametrize("rankings, length, message", [
    ({"a": ["x"]}, 3, "2 to 8 rankers, not 1"),
    ({f"r{i}": ["x"] for i in range(MAX_RANKERS + 1)}, 3, "2 to 8 rankers, not 9"),
    ([("a", ["x"]), ("a", ["y"])], 3, "given twice"),
    ({"a": ["x"], "__overflow__": ["y"]}, 3, "reserves"),
    ({"a": ["x"], "": ["y"]}, 3, "no name"),
    ({"a": ["x"], "b": "xyz"}, 3, "not the string"),
    ({"a": ["x"], "b": ["y"]}, 0, "positive"),
])
def test_rankings_the_server_would_refuse_raise(rankings, length: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        team_draft(rankings, length)


def test_the_impression_carries_the_rankers_and_teams() -> None:
    mixed = team_draft({"v7": ["a", "b", "c"], "v8": ["c", "d", "a"]}, 4, random.Random(5))
    shown = events.impression(user_id="u1", items=mixed.items, interleaving=mixed).impression
    assert list(shown.item_ids) == list(mixed.items)
    assert (list(shown.interleaving.rankers), list(shown.interleaving.teams)) == (["v7", "v8"], list(mixed.teams))

    by_hand = events.impression(user_id="u1", items=["a", "c"], interleaving={"rankers": ["x", "y"], "teams": [1, 0]})
    assert list(by_hand.impression.interleaving.teams) == [1, 0]
    assert not events.impression(user_id="u1", items=["a"]).impression.HasField("interleaving")


@pytest.mark.parametrize("items, interleaving, message", [
    (["a", "b"], {"rankers": ["x", "y"], "teams": [0]}, "1 teams for 2 items"),
    (["a", "b"], {"rankers": ["x", "y"], "teams": [0, 2]}, "team 2 at rank 2"),
    (["a"], {"rankers": ["x", "y"], "teams": [True]}, "team True"),
    (["a"], {"rankers": ["x", "y"]}, "is not team_draft's result"),
    (["b", "a"], Interleaved(("a", "b"), ("x", "y"), (0, 1)), "items=interleaved.items"),
])
def test_an_interleaving_that_does_not_fit_its_items_raises_at_the_call(items, interleaving, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        events.impression(user_id="u1", items=items, interleaving=interleaving)


def test_the_engine_credits_each_ranker_of_an_interleaving_the_helper_made() -> None:
    """Team-drafted lists sent as the helper builds them, clicks on v8's items
    only: the real engine (the binary's replay) counts a win for v8 in each."""
    import datetime

    import rankwatch

    start = datetime.datetime(2026, 11, 1, 10, 0, tzinfo=datetime.timezone.utc)
    built = []
    rng = random.Random(11)
    for n in range(40):
        mixed = team_draft({"v7": ["a", "b", "c", "d"], "v8": ["d", "e", "a", "f"]}, 4, rng)
        at = start + datetime.timedelta(seconds=n)
        shown = events.impression(user_id=f"u{n}", items=mixed.items, request_id=f"r{n}",
                                  surface="home", model="mixed", interleaving=mixed, time=at)
        built.append(shown)
        clicked = next(item for item, team in zip(mixed.items, mixed.teams) if mixed.rankers[team] == "v8")
        built.append(events.interaction(user_id=f"u{n}", item_id=clicked, request_id=f"r{n}",
                                        time=at + datetime.timedelta(seconds=1)))
    report = rankwatch.replay(built)
    [experiment] = report["interleaving"]
    assert (experiment["surface"], experiment["a"], experiment["b"]) == ("home", "v7", "v8")
    assert (experiment["lists"], experiment["wins_a"], experiment["wins_b"], experiment["ties"]) == (40, 0, 40, 0)
    assert experiment["preference"] == -1.0
    assert experiment["first_a"] + experiment["first_b"] == 40
