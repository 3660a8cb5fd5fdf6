"""The params mutator's start-up on a countable space (nearby.py): launch sets nearest the incumbent
first, by a distance on what the launcher launches; the best set sooner than TPE's random start-up
on a clamped space; only where the start-up is a fair share of the space; the same on resume. The
clamped space's 11 launch sets are few enough to be enumerated (rules.ENUMERATE_LAUNCHES), where the
walk never ends: the start-up's own rules are tested with enumeration off (`searched`)."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
from test_search_launch_twins import HIDDEN, _drive, _launched, _task

from kernelsmith.search import rules
from kernelsmith.search.mutators import params as params_mod
from kernelsmith.search.mutators.nearby import MISMATCH, coordinates, distance
from kernelsmith.search.mutators.params import ParamsMutator


@pytest.fixture
def searched(monkeypatch):
    """The clamped space searched as a large one would be: no enumeration."""
    monkeypatch.setattr(rules, "ENUMERATE_LAUNCHES", 0)


def _sig(*warps, kernel="k"):
    """A signature shaped as launch_eval's: per shape, one path, one launch with its num_warps."""
    return tuple((((kernel, (("num_warps", w),), ()),),) for w in warps)


def test_a_halved_warp_count_on_one_shape_is_one_step():
    a = coordinates(_sig(32, 16, 32))
    assert distance(a, a) == 0.0
    assert distance(a, coordinates(_sig(32, 8, 32))) == 1.0
    assert distance(a, coordinates(_sig(8, 8, 16))) == 2.0 + 1.0 + 1.0
    assert distance(a, coordinates(_sig(32, 16, 32, kernel="other"))) == 3 * MISMATCH
    assert distance(a, coordinates(_sig(32, 16))) == 3 * MISMATCH  # kernel, option, value missing


def test_values_without_a_finite_scale_are_compared_as_text():
    """A launcher is target code: whatever its text computes (nan, inf, ints past a float's range,
    negatives, None) gives a finite distance, equal values none."""
    hostile = [float("nan"), float("inf"), -float("inf"), 10**400, -(10**400), -3, 0, None, "x" * 10_000]
    coords = [coordinates(_sig(32, v)) for v in hostile]
    for a in coords:
        assert distance(a, a) == 0.0  # nan too: compared as text
        for b in coords:
            d = distance(a, b)
            assert math.isfinite(d) and d >= 0.0
    assert distance(coordinates(_sig(32, float("nan"))), coordinates(_sig(32, float("nan")))) == 0.0
    assert distance(coordinates(_sig(32, 0)), coordinates(_sig(32, -3))) == 3.0


def _steps(a: tuple, b: tuple) -> float:
    """Warp triples' distance, written out: log2 steps summed over the shapes."""
    return sum(abs(math.log2(x) - math.log2(y)) for x, y in zip(a, b, strict=True))


def _speed(rows: list[dict], mutator) -> dict[tuple, float]:
    """{warp triple: geomean} of the rows judged (the base's row has no params)."""
    base = {"values": mutator.base_values}
    return {_launched(mutator, r["params"] or base): r["verdict"]["geomean_speedup"] for r in rows}


def test_each_start_up_move_is_the_untried_set_nearest_the_fastest_so_far(searched):
    """On the clamped space (11 launch sets, a start-up of 6), every `near` proposal launches the
    untried warp triple nearest (log2 steps) the fastest triple judged before it, ties aside."""
    mutator = ParamsMutator(_task(), device="cuda")
    rows = _drive(mutator, 10, seed=3)
    every = _every(mutator)
    assert len(every) == 11
    near = [i for i, r in enumerate(rows) if (r["params"] or {}).get("op") == "near"]
    assert near == list(range(1, mutator.n_startup + 1))
    for i in near:
        before = _speed(rows[:i], mutator)
        best = max(before, key=before.get)
        incumbent = best if before[best] > 1.0 else _launched(mutator, {"values": mutator.base_values})
        mine = _launched(mutator, rows[i]["params"])
        nearest = min(_steps(incumbent, t) for t in every - set(before))
        assert _steps(incumbent, mine) == nearest
    assert all((r["params"] or {}).get("op") != "near" for r in rows[mutator.n_startup + 1:])


def _every(mutator) -> set[tuple]:
    """Every warp triple a single config of the clamped space launches."""
    keys = [t.key for t in mutator.tunables]
    combos = itertools.product(*(t.domain for t in mutator.tunables))
    return {_launched(mutator, {"values": dict(zip(keys, c, strict=True))}) for c in combos}


def _oracle(triple: tuple) -> float:
    """_drive's geomean for a warp triple (speed peaks at hidden / 512 warps)."""
    logs = [math.log((1 + abs(5 - math.log2(h / 512))) / (1 + abs(math.log2(w) - math.log2(h / 512))))
            for w, h in zip(triple, HIDDEN, strict=True)]
    return math.exp(sum(logs) / len(logs))


def _to_best(monkeypatch, share: float, seeds) -> list[int]:
    """Proposals until the space's fastest single-config launch set was judged, per seed."""
    monkeypatch.setattr(params_mod, "NEAR_SHARE", share)
    out = []
    for seed in seeds:
        mutator = ParamsMutator(_task(), device="cuda")
        best = max(_every(mutator), key=_oracle)
        rows = _drive(mutator, 11, seed=seed)
        out.append(next((i for i, r in enumerate(rows) if r["params"] and not r["params"].get("table")
                        and _launched(mutator, r["params"]) == best), len(rows)))  # never: counts as all
    return out


def test_the_walk_reaches_the_fastest_set_sooner_than_random_start_up_draws(monkeypatch, searched):
    """The clamped space's fastest set lies a few steps from the base: the walk judges it within 3
    proposals at every seed; TPE's start-up draws (the walk off) take longer at the median."""
    seeds = range(6)
    walk = _to_best(monkeypatch, params_mod.NEAR_SHARE, seeds)
    draws = _to_best(monkeypatch, 1.0, seeds)  # 11 sets x 1.0 > the start-up's 6: no walk
    assert max(walk) <= 3, walk
    assert statistics.median(draws) > statistics.median(walk), (walk, draws)


@pytest.mark.parametrize("share, walks", [(0.5, True), (0.6, False)])
def test_the_walk_needs_the_start_up_to_be_a_share_of_the_space(monkeypatch, searched, share, walks):
    """11 launch sets, a start-up of 6: a walk while 11 x NEAR_SHARE <= 6, TPE's draws beyond."""
    monkeypatch.setattr(params_mod, "NEAR_SHARE", share)
    mutator = ParamsMutator(_task(), device="cuda")
    rows = _drive(mutator, 3, seed=0)
    assert mutator.n_startup == 6
    assert [(r["params"] or {}).get("op") == "near" for r in rows[1:]] == [walks] * 3


def test_a_resumed_run_walks_on_from_its_archive(searched):
    """A mutator told the first rows (a resumed run) counts the walk's moves made and proposes what
    the running one did next, through the walk's end and into the sampler."""
    whole = _drive(ParamsMutator(_task(), device="cuda"), 9, seed=4)
    resumed = _drive(ParamsMutator(_task(), device="cuda"), 6, seed=4, rows=[dict(r) for r in whole[:4]])
    assert [r["code"] for r in resumed] == [r["code"] for r in whole]
    assert [r["params"]["op"] for r in whole[1:8]] == ["near"] * 6 + [whole[7]["params"]["op"]]
    assert whole[7]["params"]["op"] != "near"
