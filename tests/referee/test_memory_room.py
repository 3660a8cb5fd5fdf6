"""Room made for a step by what is measured, not by what is counted (memory.py), on the CPU.

LMDeploy fill_kv_cache at batch 512 x history 2048 (bf16) on an 80 GB H100 (dev/notes/
gpu-2026-12-06.md): at the judge's own timing of the base the judge held 42.6 GB by its count
(four cached trials of the shape, 28.3 GB; the regions shared with the runner and the oracle,
14.3 GB, the runner's to_peer sized to the three input sets it had just timed on), needed 26.3 GB,
measured 18.2 GB free, evicted the other shapes (8.4 GB counted) and stopped there: the room
measured after that was 24.0 GB, and the verdict was out_of_memory for a shape that fits the card
alone. Here the same two situations in miniature: an eviction that gives back less than it held,
and the runner's regions, idle while the oracle times the base, between the shape and the cap.
"""

import pytest
import torch
from test_judge_timing import Judge, StandInRunner, TakesItsTime
from test_timing_logic import FakeBackend, FakeSession, _verdict_dict

from kernelsmith.harness.model import load_harness
from kernelsmith.referee.checks import correctness as C
from kernelsmith.referee.checks.input_cache import InputCache, listed_seed
from kernelsmith.referee.link.shared_region import JudgeRegions, room_for
from kernelsmith.referee.memory import RESERVE_BYTES, DeviceMemoryShort, Gauge, MemoryPlanner
from kernelsmith.referee.proc.judge import RemoteFn
from kernelsmith.referee.timing import ab as timing

KIB, MIB = 1 << 10, 1 << 20


# -- an eviction that gives back less than it held -----------------------------------------------------
class Fragmenting:
    """A device whose allocator gives back `given` of what each eviction frees (the rest stays in
    blocks still partly in use); `other`: bytes held beside the cache (regions, contexts)."""

    def __init__(self, cache: InputCache, total: int, other: int, given: float = 0.7):
        self.cache, self.total, self.other, self.stuck = cache, total, other, 0
        evict = cache.evict

        def evict_partly(key):
            n = evict(key)
            self.stuck += n - int(n * given)
            return n
        cache.evict = evict_partly

    def free(self) -> int:
        """What mem_get_info would say: the reserve is the planner's, not the device's."""
        return self.total - self.cache.bytes() - self.other - self.stuck + RESERVE_BYTES


def _trial(cache: InputCache, shape: dict, trial, kib: int):
    entry = cache.get(shape, listed_seed(0, shape, trial), lambda: {"cache": torch.zeros(kib * KIB // 4)})
    entry.expected = (torch.zeros(kib * KIB // 4),)
    entry.seal("expected")
    entry.base_outs = (torch.zeros(kib * KIB // 4),)
    entry.seal("base_outs")
    return entry


def test_a_step_is_given_room_by_what_the_device_gives_back_not_by_what_was_evicted():
    """The H100's numbers in KiB for GB: the other shapes' entries (81 counted) give back 57, short
    of the need; the step then needs the trial its timing does not use (the arena redraw of trial
    1) dropped too, not the outputs of the trials it times."""
    cache = InputCache(None)
    big, small = {"batch": 512}, {"batch": 64}
    for t in range(3):
        _trial(cache, small, t, 9)  # 81 KiB of the other shapes
    timed = [_trial(cache, big, t, 24) for t in range(3)]  # 3 x 72 KiB: what its timing uses
    _trial(cache, big, "1.7", 24)  # the arena redraw of trial 1: no timing uses it
    regions = 143 * KIB
    device = Fragmenting(cache, total=182 * KIB + cache.bytes() + regions, other=regions)
    planner = MemoryPlanner(Gauge(device.free), cache)
    need = 263 * KIB
    planner.make_room(big, need, keep=[e.key for e in timed], keep_outputs=False,
                      what="the judge's own timing of the base")
    assert planner.room() >= need
    evicted, regenerate = planner.decisions
    assert evicted["action"] == "evicted" and evicted["shapes"] == [small]
    assert evicted["free_bytes"] == 182 * KIB
    # The room measured after the eviction, not the room counted (182 + 81 = 263).
    assert regenerate["action"] == "regenerate" and regenerate["free_bytes"] < need
    assert regenerate["bytes"] == 72 * KIB  # the redraw alone: the timed trials keep their outputs
    assert [k for k in cache.entries] == [e.key for e in timed]
    assert all(e.expected is not None and e.base_outs is not None for e in timed)


def test_what_cannot_fit_by_measure_is_still_named():
    cache = InputCache(None)
    big = {"batch": 512}
    timed = [_trial(cache, big, t, 24) for t in range(3)]
    device = Fragmenting(cache, total=100 * KIB + cache.bytes(), other=0)
    planner = MemoryPlanner(Gauge(device.free), cache)
    with pytest.raises(DeviceMemoryShort) as e:
        planner.make_room(big, 300 * KIB, keep=[x.key for x in timed], keep_outputs=False, what="a step")
    # The timed trials' outputs were dropped too (144 KiB, all given back): 244 KiB is all there is.
    assert e.value.free == 244 * KIB and e.value.need == 300 * KIB and all(x.expected is None for x in timed)
    assert "shape batch=512: a step needs 300.00 KiB" in str(e.value)


# -- the runner's regions, idle while the oracle times the base ------------------------------------------
# The fill_kv_cache pattern: a cache written in place at four slots, the rest of it untouched.
SLOTS = """
import torch

SHAPES = CPU_SHAPES = [{"rows": 65536}, {"rows": 1048576}]
OUTPUTS = ["cache"]
INPLACE = ["cache"]


def make_inputs(shape, device, seed):
    g = torch.Generator().manual_seed(seed)
    return {"cache": torch.rand(shape["rows"], generator=g), "src": torch.rand(4, generator=g),
            "slots": torch.randperm(shape["rows"], generator=g)[:4].clone()}


def reference(cache, src, slots):
    out = cache.clone()
    out[slots] = src
    return out
"""


def _fill(cache, src, slots):
    cache[slots] = src


class RegionChild:
    """A child's link as the judge holds it: the judge's own regions (CPU memfds) grown as
    Channel.send grows them for a request and its reply, closed by `drop_regions`."""

    def __init__(self):
        self.chan = type("Chan", (), {})()
        self.chan.regions = JudgeRegions("cpu")
        self.dropped = 0

    def carry(self, values, reply_bytes: int) -> None:
        sets = values if isinstance(values, list) else [values]
        tensors = [t for v in sets for t in C.tensors_of(v).values()]
        self.chan.regions.ensure("to_peer", room_for(tensors))
        self.chan.regions.ensure("from_peer", reply_bytes)

    def drop_regions(self) -> int:
        self.dropped += 1
        return self.chan.regions.drop()


class RegionRunner(StandInRunner, RegionChild):
    """The stand-in runner behind regions the judge grows for each request."""

    def __init__(self, *args, **kw):
        StandInRunner.__init__(self, *args, **kw)
        RegionChild.__init__(self)

    def request(self, msg, values=None, reply_bytes=0, pin=()):
        self.carry(values, reply_bytes)
        return super().request(msg, values, reply_bytes, pin)


class SlotsJudge(Judge):
    """The judge of the SLOTS harness, with its runner and its oracle behind regions; the oracle's
    timing of the base sends the three input sets, as OracleLink.time_base does."""

    def __init__(self, tmp_path, cap: int | None):
        super().__init__(FakeBackend([0.2, 0.1, 0.2]))
        tmp_path.mkdir(parents=True, exist_ok=True)
        (tmp_path / "slots.py").write_text(SLOTS)
        self.harness = load_harness(tmp_path / "slots.py")
        self.base_fn = self._aa = _fill
        runner = FakeSession(TakesItsTime([0.2, 0.1, 0.2]))
        runner.harness, runner.base_fn, runner._aa = self.harness, _fill, _fill
        self.link, self.oracle = RegionRunner(runner, _fill), RegionChild()
        self.inputs = InputCache(None)
        self.runner_ready = True
        chans = (self.link.chan, self.oracle.chan)
        self.memory = MemoryPlanner(Gauge(lambda: None, cap, held=lambda: self.inputs.bytes() + sum(
            c.regions.nbytes() for c in chans)), self.inputs)

    def call(self, fn, inputs, dirty, rec, sizes=(), pristine=None):
        """The base on the oracle's side: the set goes there, its outputs come back."""
        self.oracle.carry(inputs, room_for(C.tensors_of(inputs).values()))
        fn(**inputs)
        return tuple(inputs[n] for n in self.harness.outputs)

    def base_timing(self, originals, seed):
        self.oracle.carry(originals, 0)
        return super().base_timing(originals, seed)

    def booted(self) -> dict:
        """Every shape's trials made with their reference and base outputs (as the worker's boot
        does), and one correctness call per shape through the runner's regions."""
        for shape in self.harness.shapes_for("interpret"):
            for t in range(3):
                entry = self.listed(shape, 0, t)
                self.listed_base(entry)
            self.link.carry(entry.originals, room_for(C.tensors_of(entry.originals).values()))
        return self.memory.sizes_of(self.harness.shapes_for("interpret")[-1]).__dict__


def _slots_timed(tmp_path, cap):
    judge = SlotsJudge(tmp_path, cap)
    judge.booted()
    judge.memory.begin()
    out = _verdict_dict(judge)
    timing.time_candidate(judge, RemoteFn("cand"), cid=1, seed=0, mode="screen", out=out)
    return judge, out


@pytest.fixture(autouse=True)
def _few_reps(monkeypatch):
    monkeypatch.setitem(timing.SCREEN, "min_reps", 4)
    monkeypatch.setitem(timing.SCREEN, "max_reps", 4)


def test_the_runners_regions_make_way_for_the_oracles_timing_of_the_base(tmp_path):
    """The cap: the largest shape's three timed input sets, the regions of both children as the
    correctness calls left them, and what the oracle's timing of the base needs (its copies, its
    to_peer grown to three sets): room for the runner's timing with one copy, not for the runner's
    regions grown to three sets beside the oracle's timing. The runner is stopped while the oracle
    times: its regions are closed (its next request makes them again), and the shape is timed."""
    booted = SlotsJudge(tmp_path / "booted", None)
    booted.booted()
    big = booted.harness.shapes_for("interpret")[-1]
    sizes = booted.memory.sizes_of(big)
    sets = timing.INPUT_SETS * sizes.inputs
    runner, oracle = booted.link.chan.regions, booted.oracle.chan.regions
    own_base = sizes.base_timing(timing.INPUT_SETS) + oracle.growth("to_peer", sets)
    runner_timed = runner.nbytes() + runner.growth("to_peer", sets) - runner.regions["to_peer"].capacity
    cap = sets + runner.nbytes() + oracle.nbytes() + own_base + 2 * MIB
    assert cap < sets + runner_timed + oracle.nbytes() + own_base  # the runner's timed regions: no room
    judge, out = _slots_timed(tmp_path / "tight", cap)
    assert out["timed"] and out["violations"] == [], out["details"]
    dropped = [d for d in judge.memory.decisions if d["action"] == "dropped_regions"]
    assert [d["step"] for d in dropped] == ["the judge's own timing of the base"]
    assert dropped[0]["shape"] == big
    assert dropped[0]["bytes"] == runner_timed and judge.link.dropped == 1
    assert all(s["speedup"] is not None for s in out["shapes"])
    again, _ = _slots_timed(tmp_path / "again", cap)
    assert again.memory.decisions == judge.memory.decisions  # the same cap: the same choices


@pytest.mark.parametrize(("cap_mib", "sets"), [(80, 2), (56, 1)])
def test_a_shape_whose_input_sets_do_not_fit_with_one_copy_is_timed_on_fewer_sets(tmp_path, cap_mib, sets):
    """The largest shape (4 MiB in, 4 MiB out) at caps where one copy of its three timed input sets
    does not fit even with every other cached entry gone: it is timed on fewer sets (the verdict's
    memory decisions say how many, of how many), not refused, and every later timing of the shape
    keeps that count."""
    judge, out = _slots_timed(tmp_path / "t", cap_mib * MIB)
    assert out["timed"] and out["violations"] == [], out["details"]
    assert all(s["speedup"] is not None for s in out["shapes"])
    big = judge.harness.shapes_for("interpret")[-1]
    fewer = [d for d in judge.memory.decisions if d["action"] == "fewer_sets"]
    steps = range(timing.INPUT_SETS - 1, sets - 1, -1)
    assert [(d["sets"], d["of"]) for d in fewer] == [(n, n + 1) for n in steps]
    assert all(d["shape"] == big and d["need_bytes"] > d["free_bytes"] for d in fewer)
    assert judge.memory.timing_sets(big, 0, timing.INPUT_SETS) == sets
    judge.memory.begin()
    timing.time_candidate(judge, RemoteFn("cand"), cid=2, seed=0, mode="screen", out=_verdict_dict(judge))
    assert not [d for d in judge.memory.decisions if d["action"] == "fewer_sets"]  # the count is kept
    again, _ = _slots_timed(tmp_path / "again", cap_mib * MIB)
    assert [d for d in again.memory.decisions if d["action"] == "fewer_sets"] == fewer


# -- a referee on a simulated device: the regions closed and made again through the real children -------
SHARED_CAP = 30_000_000  # test_memory.CACHES: above the largest shape alone (21M is not), below it
# beside both children's regions as the largest shape's calls grow them


def test_a_shape_that_fits_alone_is_judged_with_the_idle_childs_regions_closed(tmp_path, monkeypatch):
    from test_memory import CACHES
    from tiny_project import tiny_task

    from kernelsmith.referee import Referee

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    task = tiny_task(tmp_path / "t", "fill_slots", "fill_slots", CACHES)
    with Referee(task, device="interpret", seed=3, timeout_s=300, device_memory_bytes=SHARED_CAP) as ref:
        verdicts = [ref.evaluate(None, timing="none") for _ in range(2)]
    for v in verdicts:
        assert v.accepted, (v.violations, v.details.get("messages"))
        memory = v.details["memory"]
        dropped = {d["step"] for d in memory["decisions"] if d["action"] == "dropped_regions"}
        # The oracle's during the runner's correctness trials, the runner's while the oracle makes
        # the reference and the base's outputs again.
        assert "a correctness trial" in dropped and dropped & {"the reference", "the base's outputs"}
        assert set(memory["held"]) == {"cache", "runner_regions", "oracle_regions"}
        assert sum(memory["held"].values()) == memory["held_bytes"] <= SHARED_CAP
        assert v.details["channel"]["shared_bytes"] > 0  # the regions made again carried the tensors
