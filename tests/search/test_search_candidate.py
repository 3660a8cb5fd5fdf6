"""Candidate: archive rows decoded once, the verdict rules asked of it, the column view kept."""

from __future__ import annotations

import pickle

import pytest

from kernelsmith.referee.verdict import Verdict, row_trusted_speedup
from kernelsmith.search.archive import Archive, NewRow
from kernelsmith.search.candidate import Candidate


def _verdict(speedup=1.4, noisy=False, aa=1.002, accepted=True, mode=None):
    timing = {"metric": "device", "aa_ratio": aa, "noisy": noisy}
    if mode:
        timing["mode"] = mode
    return Verdict(accepted=accepted, correct=accepted, violations=[] if accepted else ["incorrect"],
                   geomean_speedup=speedup, timed=True, timing=timing,
                   shapes=[{"shape": {"n": 4}, "speedup": speedup}]).finalize().to_json()


@pytest.fixture
def archive(tmp_path):
    with Archive(tmp_path / "a.sqlite") as a:
        yield a


def test_rows_come_back_as_candidates_with_typed_fields_and_their_columns(archive):
    base = archive.add(NewRow("base = 1\n", mutator="base"))
    cid = archive.add(NewRow("x = 2\n", mutator="params", parent_id=base, island=1, generation=3, diff="d",
                      params={"values": {"BLOCK": 64}}))
    c = archive.get(cid)
    assert isinstance(c, Candidate) and c.status == "pending" and c.verdict is None and c.depth is None
    assert (c.id, c.parent_id, c.code, c.diff, c.mutator, c.island, c.generation) == (
        cid, base, "x = 2\n", "d", "params", 1, 3)
    assert c["parent_id"] == base and c["params"] == {"values": {"BLOCK": 64}} and c.params == c["params"]
    assert set(c) >= {"id", "verdict", "timing", "speedup", "code_hash", "inspiration_ids"}
    archive.set_verdict(cid, _verdict(), "fb", timing="full")
    c = archive.get(cid)
    assert isinstance(c.verdict, Verdict) and c.verdict.geomean_speedup == 1.4 and c.depth == "full"
    assert c["verdict"] == _verdict()  # the stored JSON, as written
    assert c.accepted is True and c.evaluated and not c.is_base and c.referee_ran
    assert archive.base().is_base and archive.all()[1] == c and c == dict(c)


def test_the_trusted_speedup_rule_is_the_verdicts(archive):
    base = archive.add(NewRow("base = 1\n", mutator="base"))
    ids = {}
    for name, v, depth in [("full", _verdict(), "full"), ("noisy", _verdict(noisy=True), "full"),
                           ("screen", _verdict(aa=None, mode="screen"), "screen"),
                           ("rejected", _verdict(accepted=False), "full")]:
        ids[name] = archive.add(NewRow(f"{name} = 1\n", mutator="params", parent_id=base))
        archive.set_verdict(ids[name], v, None, timing=depth)
    got = {name: archive.get(cid) for name, cid in ids.items()}
    assert got["full"].trusted_speedup == 1.4 and got["full"].verdict.trusted_speedup() == 1.4
    for name in ("noisy", "screen", "rejected"):
        assert got[name].trusted_speedup is None, name
        assert got[name].trusted_speedup == row_trusted_speedup(dict(got[name]))  # the same rule
    assert got["noisy"].noisy and got["noisy"].verdict.noisy and not got["full"].noisy
    # Per-shape numbers: any timed depth, but never a noisy or rejected one.
    assert got["screen"].shape_timings_usable and got["full"].shape_timings_usable
    assert not got["noisy"].shape_timings_usable and not got["rejected"].shape_timings_usable
    # Export's gains: timed at any depth and not noisy.
    assert got["screen"].measured_speedup == 1.4 and got["noisy"].measured_speedup is None


def test_with_columns_keeps_fields_and_view_in_step_and_candidates_pickle(archive):
    cid = archive.add(NewRow("x = 2\n", mutator="llm"))
    archive.set_verdict(cid, _verdict(), None, timing="full")
    c = archive.get(cid)
    hidden = c.with_columns(status="pending", verdict=None, speedup=None, accepted=0, timing=None)
    assert hidden.verdict is None and hidden["verdict"] is None and not hidden.accepted
    assert hidden.trusted_speedup is None and c.trusted_speedup == 1.4  # the original is unchanged
    assert pickle.loads(pickle.dumps(c)) == c
    assert Candidate.of(c) is c and Candidate.of(dict(c)) == c
    with pytest.raises(TypeError):
        {c}  # noqa: B018 - like the dict it stands for, a row is not hashable


def test_only_code_kernelsmith_rendered_from_the_base_counts_as_rendered(archive):
    """The referee keeps its worker after a rendered candidate's honest failure: the params
    mutator's and the sweep's configs are; a model's rewrite is not, nor a params retune of it."""
    base = archive.add(NewRow("base = 1\n", mutator="base"))
    params = archive.add(NewRow("x = 2\n", mutator="params", parent_id=base,
                                params={"values": {"BLOCK": 64}}))
    grid = archive.add(NewRow("x = 3\n", mutator="grid", parent_id=base, params={"values": {"BLOCK": 32}}))
    llm = archive.add(NewRow("x = 4\n", mutator="llm", parent_id=base, params={"kind": "rewrite"}))
    retune = archive.add(NewRow("x = 5\n", mutator="params", parent_id=llm,
                                params={"on": llm, "values": {"B": 8}}))
    assert [archive.get(i).rendered for i in (base, params, grid, llm, retune)] == [
        False, True, True, False, False]
