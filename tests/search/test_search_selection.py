"""Selection: feature cells, elites, the exploitation/exploration mix, inspirations, migration."""

from __future__ import annotations

import random

from kernelsmith.search.selection import Population, SelectionConfig, features, fitness

BASE = "def f(x):\n    BLOCK = 64\n    k[g](x, BLOCK=BLOCK, num_warps=1)\n"


def _row(cid, island, speedup, code, mutator="params", accepted=True):
    return {
        "id": cid,
        "island": island,
        "mutator": mutator,
        "code": code,
        "status": "evaluated",
        "accepted": int(accepted),
        "speedup": speedup,
        "verdict": {"timing": {"noisy": False}},
    }


def _pop(exploit=0.7, islands=2):
    pop = Population(SelectionConfig(islands=islands, exploit=exploit, elite_size=2), BASE)
    rows = [_row(1, 0, 1.0, BASE, "base")]
    rows += [
        _row(i, i % 2, 1.0 + i / 10, BASE.replace("64", str(64 << i)).replace("=1)", f"={1 << (i % 3)})"))
        for i in range(2, 8)
    ]
    rows.append(_row(9, 0, None, BASE + "x = 1\n", accepted=False))
    pop.rebuild(rows, [])
    return pop


def test_features_and_fitness():
    assert features(BASE, 3) == (1, 4, 1)
    big = BASE.replace("64", "4096").replace("num_warps=1", "num_warps=8") + "\n" * 0 + "y = 2\n" * 3
    assert features(big, 3) == (4, 7, 3)
    assert fitness(_row(1, 0, 1.3, BASE)) == 1.3 and fitness(_row(1, 0, None, BASE, accepted=False)) is None
    assert fitness(_row(1, 0, None, BASE)) == 1.0  # accepted without timing


def test_elites_and_islands():
    pop = _pop()
    assert [r["id"] for r in pop.elites(0)] == [6, 4] and [r["id"] for r in pop.elites(1)] == [7, 5]
    assert pop.best()["id"] == 7 and 9 not in pop.rows  # rejected rows never parent anything
    assert 1 in pop.members[0] and 1 in pop.members[1]  # the base is on every island


def test_exploit_mix_and_inspirations():
    elites = {r["id"] for r in _pop().elites(0)}
    parents = [_pop(exploit=1.0).sample(0, random.Random(s))[0]["id"] for s in range(30)]
    assert set(parents) <= elites
    explore = {_pop(exploit=0.0).sample(0, random.Random(s))[0]["id"] for s in range(60)}
    assert explore - elites  # the grid reaches beyond the elites
    parent, insp = _pop().sample(1, random.Random(0))
    ids = [r["id"] for r in insp]
    assert (
        parent["id"] not in ids
        and len(ids) == len(set(ids))
        and ids[0] == max(i for i in (7, 6) if i != parent["id"])
    )


def test_ring_migration():
    pop = _pop()
    assert pop.migrate(1) == [] and pop.migrate(3) == [(6, 1), (7, 0)]
    assert 6 in pop.members[1] and 7 in pop.members[0]
