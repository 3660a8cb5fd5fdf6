"""The oracle (referee/proc/oracle.py) and the judge's side of it (referee/proc/oracle_link.py), with a real
forked oracle: the harness's facts arrive as checked data, its functions and the base run there,
check (b)'s base timing runs there, and whatever it answers that is not plain data is refused."""

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from kernelsmith.harness.facts import MalformedFacts
from kernelsmith.harness.model import load_harness
from kernelsmith.referee.backend.interpret import InterpretBackend
from kernelsmith.referee.proc import oracle_link
from kernelsmith.referee.proc.oracle_link import OracleFailed, OracleLink, harness_from_facts

ROOT = Path(__file__).resolve().parents[2]
MINISERVE = ROOT / "examples" / "miniserve"
HARNESS = ROOT / "targets" / "demo" / "rms_norm.py"


def _spec(tmp_path, harness=HARNESS) -> dict:
    return {"root": str(MINISERVE), "file": "miniserve/kernels/rms_norm.py", "entry": "rms_norm",
            "harness": str(harness), "device": "interpret", "base_cache": str(tmp_path / "base")}


@pytest.fixture
def oracle(monkeypatch, tmp_path):
    """A started oracle forked from this process (left dumpable: this is the test process)."""
    monkeypatch.setattr(oracle_link, "make_non_dumpable", lambda: True)
    made = []

    def start(harness=HARNESS):
        link = OracleLink()
        made.append(link)
        link.set_device("cpu")
        facts, _, _ = link.start_session(_spec(tmp_path, harness))
        return link, harness_from_facts(facts, harness, link)
    yield start
    for link in made:
        link.close()


def test_the_harness_arrives_as_facts_and_its_functions_run_in_the_oracle(oracle):
    link, h = oracle()
    here = load_harness(HARNESS)
    assert h.module is None and h.bind is None  # nothing of the harness is imported here
    assert (h.shapes, h.cpu_shapes, h.outputs, h.vary, h.inplace) == \
        (here.shapes, here.cpu_shapes, here.outputs, here.vary, here.inplace)
    assert h.tolerance_for("float16") == here.tolerance_for("float16")
    assert h.flops is None and all(h.bytes_moved(s) == here.bytes_moved(s) for s in h.shapes_for("interpret"))
    shape = h.shapes_for("interpret")[0]
    made, mine = h.make_inputs(shape, "cpu", 5), here.make_inputs(shape, "cpu", 5)
    assert made.keys() == mine.keys()
    for k, v in mine.items():
        assert torch.equal(made[k], v) if isinstance(v, torch.Tensor) else made[k] == v
    expected = h.reference(**made)
    assert isinstance(expected, tuple) and torch.equal(expected[0], here.reference(**mine))
    out = link.call_base(made, float("nan"), [])
    assert isinstance(out, tuple) and out[0].dtype == expected[0].dtype
    assert torch.allclose(out[0].float(), expected[0].float(), atol=1e-2, rtol=1e-2)


def test_check_b_times_the_base_in_the_oracle(monkeypatch, oracle):
    calls = []

    def time_calls(self, fns, reps, order_seed):
        for f in fns:
            f(0)
        calls.append(reps)
        return [[0.25] * reps for _ in fns]
    # Patched before the fork: the oracle's interpreter backend "times" the base it runs.
    monkeypatch.setattr(InterpretBackend, "time_calls", time_calls, raising=False)
    monkeypatch.setattr(InterpretBackend, "host_time", lambda self, fn, n: 0.5, raising=False)
    link, h = oracle()
    sets = [h.make_inputs(h.shapes_for("interpret")[0], "cpu", s) for s in range(3)]
    assert link.time_base(sets, 7) == (0.25, 0.5, [0, 0])
    assert calls == []  # timed there, not here


def test_a_malformed_base_timing_is_refused(monkeypatch, oracle):
    monkeypatch.setattr(InterpretBackend, "time_calls", lambda self, fns, reps, seed: [[math.nan] * reps],
                        raising=False)
    monkeypatch.setattr(InterpretBackend, "host_time", lambda self, fn, n: 0.5, raising=False)
    link, h = oracle()
    sets = [h.make_inputs(h.shapes_for("interpret")[0], "cpu", 0)]
    with pytest.raises(OracleFailed, match="base timing is malformed"):
        link.time_base(sets, 7)


def test_an_input_that_is_not_data_is_refused(oracle, tmp_path):
    harness = tmp_path / "objects.py"
    harness.write_text(HARNESS.read_text() + (
        "\n\n_make = make_inputs\n\n\ndef make_inputs(shape, device, seed):\n"
        "    return {**_make(shape, device, seed), 'eps': object()}\n"))
    link, h = oracle(harness)
    with pytest.raises(OracleFailed, match="make_inputs: a value the judge does not take"):
        h.make_inputs(h.shapes_for("interpret")[0], "cpu", 0)


def test_a_failing_harness_is_an_oracle_failure_with_its_text(monkeypatch, tmp_path):
    monkeypatch.setattr(oracle_link, "make_non_dumpable", lambda: True)
    harness = tmp_path / "broken.py"
    harness.write_text("raise ValueError('the harness breaks at import')\n")
    link = OracleLink()
    try:
        with pytest.raises(OracleFailed, match="the harness breaks at import"):
            link.start_session(_spec(tmp_path, harness))
    finally:
        link.close()


GOOD = {"shapes": [{"n": 4}], "cpu_shapes": [], "outputs": None, "vary": {}, "inplace": [],
        "tolerance": {"float16": {"atol": 0.01, "rtol": 0}}, "nondeterministic": False, "library_base": False,
        "bytes_moved": True, "flops": False, "sizes": [{"shape": {"n": 4}, "bytes_moved": 16, "flops": None}]}


@pytest.mark.parametrize("bad", [
    {"tolerance": {"float16": {"atol": "1e9"}}}, {"tolerance": {"float16": {"atol": math.inf}}},
    {"tolerance": {"float16": {"atol": -1.0}}}, {"tolerance": {"float16": {"eps": 1.0}}},
    {"tolerance": []}, {"inplace": ["not a name"]}, {"inplace": "cache"}, {"nondeterministic": 1},
    {"library_base": "yes"}, {"bytes_moved": None}, {"sizes": [{"shape": {"n": 4}, "bytes_moved": -1}]},
    {"sizes": [{"shape": {"n": 4}, "bytes_moved": 1.5}]}, {"sizes": [{"bytes_moved": 1}]},
    {"shapes": "n=4"}, {"outputs": ["a b"]}, {"vary": {"n": []}},
    {"positions": [0, 0]}, {"positions": ["0"]}, {"positions": [-1]}, {"positions": []}, {"call": "yes"},
    {"outputs": ["out"], "positions": [0]},
])
def test_malformed_facts_are_refused(bad):
    link = SimpleNamespace(sizes={}, make_inputs=None, reference=None, bytes_moved=None, flops=None)
    harness_from_facts(GOOD, "h.py", link)  # the good ones pass
    with pytest.raises(MalformedFacts):
        harness_from_facts({**GOOD, **bad}, "h.py", link)


def test_the_oracle_out_of_device_memory_taking_in_a_request_is_a_memory_shortfall(monkeypatch, oracle):
    """Read by the judge as the device's out-of-memory error (input_cache.with_room makes room), and
    the oracle goes on answering."""
    from kernelsmith.referee.link.shared_region import PeerRegions
    from kernelsmith.referee.memory import device_oom

    inbound = PeerRegions.inbound

    def no_room_for_large(self, off, n, device):  # the region probe's 1 KiB still fits
        if n > 4096:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.12 GiB.")
        return inbound(self, off, n, device)

    monkeypatch.setattr(PeerRegions, "inbound", no_room_for_large)  # before the fork: the oracle's too
    link, h = oracle()
    assert link.chan.regions is not None
    with pytest.raises(OracleFailed) as e:
        h.reference(x=torch.zeros(4096))  # refused before the harness sees it
    assert device_oom(str(e.value)) and "the oracle, taking in a request" in str(e.value)
    assert "Tried to allocate 2.12 GiB" in str(e.value)
    assert isinstance(link.stand_ins(), set)
