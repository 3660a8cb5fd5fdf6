"""The rotation of input buffers among the functions of one measurement (referee/timing/rotation.py)."""

from collections import Counter

import pytest
import torch

from kernelsmith.referee.timing.rotation import Rotation


def _originals(sets=3):
    return [{"x": torch.full((4,), float(s)), "out": torch.zeros(4), "eps": [s]} for s in range(sets)]


@pytest.mark.parametrize("n_fns", [2, 3])
def test_every_run_of_calls_reads_every_copy_of_every_set_once(n_fns):
    rot = Rotation(_originals(), n_fns)
    ptr = {rot.own[c][s]["x"].data_ptr(): (s, c) for c in range(n_fns) for s in range(3)}
    period = 3 * n_fns  # sets x copies
    for j in range(n_fns):
        for _run in range(2):  # two whole runs in a row
            seen = Counter()
            for _ in range(period):
                k, inputs = rot.inputs(j)
                s, c = ptr[inputs["x"].data_ptr()]
                assert s == k and inputs["x"][0].item() == k  # the copy holds the set it claims
                seen[(s, c)] += 1
            assert seen == {(s, c): 1 for s in range(3) for c in range(n_fns)}


def test_the_calls_of_one_repetition_use_different_copies_and_other_values_stay_with_their_function():
    rot = Rotation(_originals(), 3)
    for _ in range(9):
        views = [rot.inputs(j) for j in range(3)]
        assert len({k for k, _ in views}) == 1  # one input set per repetition
        assert len({v["out"].data_ptr() for _, v in views}) == 3  # written buffers: one copy each
        for j, (k, v) in enumerate(views):
            assert v["eps"] is rot.values[j][k]["eps"] and v["eps"] == [k]
        assert len({id(v["eps"]) for _, v in views}) == 3


def test_align_puts_the_functions_back_on_one_input_set_per_repetition():
    rot = Rotation(_originals(), 3)
    for _ in range(4):  # a probe that calls the first two only
        rot.inputs(0), rot.inputs(1)
    rot.align()
    assert rot.peek(0)[0] == rot.peek(2)[0]
    views = [rot.inputs(j) for j in range(3)]
    assert len({k for k, _ in views}) == 1 and len({v["x"].data_ptr() for _, v in views}) == 3


def test_changed_names_the_read_only_tensors_written_on_any_copy():
    originals = _originals()
    rot = Rotation(originals, 2)
    assert rot.changed(originals, {"out"}) == []
    rot.own[1][2]["out"].fill_(7.0)  # written: allowed
    assert rot.changed(originals, {"out"}) == []
    rot.own[1][2]["x"][0] = -1.0
    assert rot.changed(originals, {"out"}) == ["x"]
