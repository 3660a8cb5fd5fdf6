"""Device memory measured, not assumed (memory.py), on the CPU: a simulated memory cap stands for the
free memory a device reports. Shapes that do not fit together get fewer rotation copies and evict
each other's cached data, and the verdict says so; a shape that does not fit alone is named with its
need and the memory free; the choices are the same on every run."""

import json

import pytest
import torch
from test_judge_timing import Judge, StandInRunner
from test_timing_logic import FILL_HARNESS, FakeBackend, FakeSession, _rms, _verdict_dict
from tiny_project import tiny_task

from kernelsmith.cli import main
from kernelsmith.harness.model import load_harness
from kernelsmith.referee.checks.diagnose import NOT_A_CANDIDATE, base_failure
from kernelsmith.referee.checks.input_cache import InputCache, ListedInputs
from kernelsmith.referee.link.errors import CandidateError
from kernelsmith.referee.memory import (
    MEMORY_ENV,
    RESERVE_BYTES,
    DeviceMemoryShort,
    Gauge,
    MemoryPlanner,
    ShapeBytes,
)
from kernelsmith.referee.proc.judge import RemoteFn
from kernelsmith.referee.timing import ab as timing
from kernelsmith.referee.timing.rotation import Rotation

KIB = 1 << 10


def _planner(cache: InputCache, cap: int) -> MemoryPlanner:
    """A planner whose device is `cap` bytes, of which the cache holds what it holds."""
    return MemoryPlanner(Gauge(lambda: None, cap, held=cache.bytes), cache)


def _fill(cache: InputCache, shape: dict, seed: int, kib: int):
    return cache.get(shape, seed, lambda: {"x": torch.zeros(kib * KIB // 4)})


# -- the planner ---------------------------------------------------------------------------------
def test_room_comes_from_other_shapes_most_recent_first_then_from_this_shapes_unused_data():
    cache = InputCache(None)
    a, b, c = {"s": "a"}, {"s": "b"}, {"s": "c"}
    for shape, seed in ((a, 0), (b, 0), (c, 0), (c, 1), (a, 1)):
        _fill(cache, shape, seed, 100)
    planner = _planner(cache, 600 * KIB)  # 500 KiB held: 100 free
    planner.make_room(c, 250 * KIB, keep=[cache.key(c, 1)], what="a step")
    # a's newer entry (the most recent other) and b went; a's older one stays: enough with them.
    assert [k for k in cache.entries] == [cache.key(a, 0), cache.key(c, 0), cache.key(c, 1)]
    (evicted,) = planner.decisions
    assert evicted["action"] == "evicted" and evicted["shapes"] == [a, b] and evicted["bytes"] == 200 * KIB
    planner.make_room(c, 500 * KIB, keep=[cache.key(c, 1)], what="a bigger step")
    assert list(cache.entries) == [cache.key(c, 1)]  # then c's own entry the step does not use
    assert [d["action"] for d in planner.decisions] == ["evicted", "evicted", "regenerate"]


@pytest.mark.parametrize("entries", ["four shapes", "four trials of one shape"])
def test_entries_asked_for_in_the_same_order_every_verdict_are_hits_where_most_of_them_fit(entries):
    """A verdict asks for its entries (each shape's trials) in one order, every time. With room for
    three of four, evicting the least recent first dropped each entry just before its turn: no hit
    at all, every input set made again (10-13 s a shape on the decode harness). Most recent first
    keeps two or three of the four each time, among other shapes' entries and a shape's own."""
    cache = InputCache(None)
    planner = _planner(cache, 350 * KIB)
    order = [({"s": i}, 0) if entries == "four shapes" else ({"s": 0}, i) for i in range(4)]
    hits = []
    for _ in range(4):  # verdicts
        before = cache.stats["hits"]
        for shape, seed in order:
            if cache.key(shape, seed) not in cache.entries:
                planner.make_room(shape, 100 * KIB, what="making its inputs")
            _fill(cache, shape, seed, 100)
        hits.append(cache.stats["hits"] - before)
    assert hits == [0, 3, 3, 2]  # least recent first: [0, 0, 0, 0]


def test_a_first_try_made_elsewhere_gets_only_the_second_try():
    """`with_room(failed=...)` (a new runner's warm-up, answered out of memory): every other entry is
    dropped and the step made once; a failure not for memory is raised as it was, nothing dropped."""
    from types import SimpleNamespace

    cache = InputCache(None)
    a, b = {"s": "a"}, {"s": "b"}
    _fill(cache, a, 0, 100)
    keep = _fill(cache, b, 0, 100)
    holder = SimpleNamespace(memory=_planner(cache, 600 * KIB))
    calls = []
    crash = CandidateError("crash", "RuntimeError: the base broke")
    with pytest.raises(CandidateError):
        ListedInputs.with_room(holder, b, None, [keep.key], "warming", lambda: calls.append(1), failed=crash)
    assert calls == [] and len(cache.entries) == 2
    oom = CandidateError("crash", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert ListedInputs.with_room(holder, b, None, [keep.key], "warming", lambda: calls.append(1) or "ok",
                                  failed=oom) == "ok"
    assert calls == [1] and list(cache.entries) == [keep.key]
    (dropped,) = holder.memory.decisions
    assert dropped["step"] == "warming" and dropped["shapes"] == [a]


def test_a_step_that_cannot_fit_names_the_shape_its_need_and_the_free_memory():
    cache = InputCache(None)
    shape = {"batch": 512, "history": 2048}
    entry = _fill(cache, shape, 0, 64)
    planner = _planner(cache, 1 << 20)
    planner.note_sizes(shape, ShapeBytes(64 * KIB, 32 * KIB, False))
    with pytest.raises(DeviceMemoryShort) as e:
        planner.make_room(shape, 2 << 20, keep=[entry.key], what="timing with one copy")
    text = str(e.value)
    assert "shape batch=512,history=2048: timing with one copy needs 2.00 MiB" in text
    assert "960.00 KiB is free" in text and "one input set 64.00 KiB" in text
    assert e.value.as_dict()["need_bytes"] == 2 << 20 and e.value.as_dict()["free_bytes"] == 960 * KIB


def _copies_chosen(cap: int) -> tuple[list[int], list[dict]]:
    cache = InputCache(None)
    planner = _planner(cache, cap)
    per_copy = 100 * KIB
    shape = {"n": 1}
    got = [planner.timing_copies(shape, 7, lambda c: 50 * KIB + c * per_copy, 3) for _ in range(2)]
    return got, planner.decisions


def test_timing_gets_all_copies_where_they_fit_else_the_most_that_fit_the_same_way_every_time():
    assert _copies_chosen(400 * KIB) == ([3, 3], [])
    got, decisions = _copies_chosen(300 * KIB)
    assert got == [2, 2] and decisions[0]["action"] == "fewer_copies" and decisions[0]["copies"] == 2
    assert decisions[0]["need_bytes"] == 350 * KIB and decisions[0]["free_bytes"] == 300 * KIB
    assert _copies_chosen(300 * KIB) == (got, decisions)  # deterministic
    assert _copies_chosen(160 * KIB)[0] == [1, 1]
    with pytest.raises(DeviceMemoryShort):
        _copies_chosen(100 * KIB)


def test_a_shapes_copies_never_grow_back_within_a_run():
    cache = InputCache(None)
    room = {"cap": 300 * KIB}
    planner = MemoryPlanner(Gauge(lambda: None, None, lambda: 0), cache)
    planner.gauge.cap = room["cap"]
    need = lambda c: 50 * KIB + c * 100 * KIB  # noqa: E731
    assert planner.timing_copies({"n": 1}, 7, need, 3) == 2
    planner.gauge.cap = 10 << 20  # memory came back: the shape keeps the copies it was measured with
    assert planner.timing_copies({"n": 1}, 7, need, 3) == 2
    assert planner.timing_copies({"n": 1}, 8, need, 3) == 3  # another seed (the final re-measurement)
    assert planner.timing_copies({"n": 1}, 9, need, 2) == 2  # a screen (two functions) fits ...
    assert planner.timing_copies({"n": 1}, 9, need, 3) == 3  # ... and sets no limit for the full timing


def test_an_entry_dropped_mid_evaluation_is_checked_for_tampering_at_once():
    cache = InputCache(None)
    cache.begin()
    entry = _fill(cache, {"n": 1}, 0, 4)
    entry.originals["x"][3] = 1.0  # a write through another buffer
    assert cache.evict(entry.key) == 4 * KIB
    assert cache.verify() == [json.dumps({"n": 1})]


# -- fewer rotation copies ------------------------------------------------------------------------
def _sets(n=3):
    return [{"x": torch.full((4,), float(s)), "eps": [s]} for s in range(n)]


def test_with_fewer_copies_every_function_still_reads_every_copy_of_every_set():
    rot = Rotation(_sets(), 3, copies=2)
    assert rot.copies == 2
    ptr = {rot.own[c][s]["x"].data_ptr(): (s, c) for c in range(2) for s in range(3)}
    for j in range(3):
        seen = {ptr[rot.inputs(j)[1]["x"].data_ptr()] for _ in range(6)}
        assert seen == {(s, c) for s in range(3) for c in range(2)}
    rot = Rotation(_sets(), 3, copies=1)
    views = [rot.inputs(j)[1] for j in range(3)]
    assert len({v["x"].data_ptr() for v in views}) == 1  # one copy: a repetition shares it
    assert len({id(v["eps"]) for v in views}) == 3  # non-tensor values stay with their function


@pytest.mark.parametrize("seed", range(6))
def test_with_one_copy_the_candidates_own_timed_output_is_checked(tmp_path, seed):
    """The base's call after the candidate's, on the same copy, rewrites the buffer the candidate
    wrote: its output is cloned before that, so a wrong in-place output is still caught."""
    (tmp_path / "fill.py").write_text(FILL_HARNESS)
    s = FakeSession(FakeBackend([0.2, 0.1]))
    s.harness = load_harness(tmp_path / "fill.py")
    s.base_fn = lambda cache, src: cache.copy_(src)
    sets = s.timing_sets({"n": 64}, seed, timing.INPUT_SETS)
    r = timing.time_loop(s, lambda cache, src: cache.copy_(src * 2), [o for o, _ in sets], 0, 1, seed,
                         "screen", copies=1)
    (out,) = r["last_outs"]
    assert torch.equal(out, sets[r["last_set"]][0]["src"] * 2)


# -- the judge's timing under a cap ----------------------------------------------------------------
class CountingRunner(StandInRunner):
    """The stand-in runner, noting the copies each timing request asks for; `oom_above`: a request
    for more copies runs out of device memory (as the runner's allocator would)."""

    def __init__(self, *args, oom_above: int | None = None, **kw):
        super().__init__(*args, **kw)
        self.copies, self.oom_above = [], oom_above

    def request(self, msg, values=None, reply_bytes=0, pin=()):
        if msg["op"] == "time":
            self.copies.append(msg.get("copies"))
            if self.oom_above is not None and msg["copies"] > self.oom_above:
                raise CandidateError("crash", "CUDA out of memory\ntorch.OutOfMemoryError: CUDA out of "
                                              "memory. Tried to allocate 2.00 GiB")
        return super().request(msg, values, reply_bytes, pin)


def _judge(cap: int | None, oom_above: int | None = None) -> Judge:
    judge = Judge(FakeBackend([0.2, 0.1, 0.2]))
    judge.link = CountingRunner(judge.link.session, judge.link.cand, oom_above=oom_above)
    judge.memory = MemoryPlanner(Gauge(lambda: None, cap, held=judge.inputs.bytes), judge.inputs)
    return judge


def _timed(judge: Judge, mode: str = "full"):
    judge.memory.begin()
    out = _verdict_dict(judge)
    timing.time_candidate(judge, RemoteFn("cand"), cid=1, seed=0, mode=mode, out=out)
    return out, judge.memory.report()["decisions"]


@pytest.fixture(autouse=True)
def _few_reps(monkeypatch):
    monkeypatch.setitem(timing.FULL, "min_reps", 12)
    monkeypatch.setitem(timing.FULL, "max_reps", 12)
    monkeypatch.setitem(timing.FULL, "host_calls", 3)


def test_a_shape_set_that_does_not_fit_with_all_copies_is_timed_with_fewer_and_the_verdict_says_so():
    roomy = _judge(cap=1 << 30)
    out, decisions = _timed(roomy)
    assert out["timed"] and decisions == [] and roomy.link.copies == [3, 3]
    # The cap: the first shape's cached entries, and room for two copies of its sets.
    first = roomy.harness.shapes_for("interpret")[0]
    held = sum(e.nbytes for k, e in roomy.inputs.entries.items() if k[0] == json.dumps(first, sort_keys=True))
    cap = held + roomy.memory.sizes_of(first).timing(2, timing.INPUT_SETS)
    tight = _judge(cap=cap)
    out, decisions = _timed(tight)
    assert out["timed"] and out["violations"] == [] and out["geomean_speedup"] > 1.5
    fewer = [d for d in decisions if d["action"] == "fewer_copies"]
    assert fewer[0]["shape"] == first and fewer[0]["copies"] == 2 and fewer[0]["of"] == 3
    assert tight.link.copies[0] == 2  # what the runner was asked for that shape
    again = _judge(cap=cap)
    assert _timed(again)[1] == decisions and again.link.copies == tight.link.copies  # deterministic


def test_a_timing_the_device_runs_out_of_memory_in_is_made_again_with_fewer_copies():
    judge = _judge(cap=1 << 30, oom_above=1)
    out, decisions = _timed(judge, mode="screen")
    assert out["timed"] and out["violations"] == []
    assert judge.link.copies == [2, 1, 2, 1]  # each shape: two copies, out of memory, then one
    assert [d["copies"] for d in decisions if d["action"] == "fewer_copies"] == [1, 1]


def test_a_shape_whose_timing_cannot_fit_even_alone_is_named():
    judge = _judge(cap=1 << 30)
    judge.memory.gauge.cap = 0  # nothing fits, whatever is evicted
    with pytest.raises(DeviceMemoryShort) as e:
        _timed(judge)
    assert str(e.value).startswith("shape tokens=3,hidden=256,dtype=float16: ")


# -- a referee on a simulated device ----------------------------------------------------------------
# fill_slots (tests/referee/tiny/kern.py) on caches of 0.5, 1 and 2 MiB: the kernel writes 4 rows,
# the rest of each cache must stay as it was (the LMDeploy fill_kv_cache pattern, small enough for
# the interpreter). Everything cached takes about 59 MB of the simulated device with the channels'
# regions and pins; the largest shape alone needs about 25 MB.
CACHES = '''
import torch

SHAPES = [{"blocks": 1048576, "d": 8}]
CPU_SHAPES = [{"blocks": 16384, "d": 8}, {"blocks": 32768, "d": 8}, {"blocks": 65536, "d": 8}]
OUTPUTS = ["cache"]
INPLACE = ["cache"]


def make_inputs(shape, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    cache = torch.randn(shape["blocks"], shape["d"], generator=g, device=device)
    src = torch.randn(4, shape["d"], generator=g, device=device)
    slots = torch.randperm(shape["blocks"], generator=g, device=device)[:4].to(torch.int32)
    return {"cache": cache, "src": src, "slots": slots}


def reference(cache, src, slots):
    out = cache.clone()
    out[slots.long()] = src
    return out
'''
TOGETHER_CAP = 40_000_000
ALONE_CAP = "21M"


def _decisions(tmp_path, name: str, evaluations: int = 1) -> list:
    from kernelsmith.referee import Referee

    task = tiny_task(tmp_path / name, "fill_slots", "fill_slots", CACHES)
    with Referee(task, device="interpret", seed=3, timeout_s=300, device_memory_bytes=TOGETHER_CAP) as ref:
        verdicts = [ref.evaluate(None, timing="none") for _ in range(evaluations)]
    for v in verdicts:
        assert v.accepted, (v.violations, v.details.get("messages"))
        # A verdict judged again on a replacement worker (the first one died) comes from a worker
        # that booted with the base's profiles handed over: other cache and region history, other
        # decisions. The same choices are promised for the same sizes and the same history.
        messages = v.details.get("messages") or []
        assert not [m for m in messages if m.startswith("judged again after")], messages
    return [v.details["memory"] for v in verdicts]


def _first_difference(ours: list, theirs: list) -> str:
    """Where two runs' `details.memory` first differ, in words (an assertion's message)."""
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        for key in sorted(set(a) | set(b)):
            x, y = a.get(key), b.get(key)
            if x == y:
                continue
            if isinstance(x, list) and isinstance(y, list):
                pairs = enumerate(zip(x, y, strict=False))
                at = next((j for j, (p, q) in pairs if p != q), min(len(x), len(y)))
                return (f"evaluation {i}, {key} (of {len(x)} and {len(y)}) from #{at}: "
                        f"{x[at:at + 2]} != {y[at:at + 2]}")
            return f"evaluation {i}, {key}: {x} != {y}"
    return "no difference"


def test_shapes_that_do_not_fit_together_evict_each_other_and_the_verdict_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    first = _decisions(tmp_path, "a")
    for memory in first:
        assert memory["cap_bytes"] == TOGETHER_CAP and 0 <= memory["least_free_bytes"] < TOGETHER_CAP
        evicted = [d for d in memory["decisions"] if d["action"] == "evicted"]
        assert evicted and all(d["shape"] not in d["shapes"] and d["bytes"] > 0 for d in evicted)
        assert all(d["need_bytes"] > d["free_bytes"] for d in evicted)
    again = _decisions(tmp_path, "b")
    assert again == first, _first_difference(again, first)  # the same cap and seed: the same choices


def test_a_shape_that_alone_exceeds_the_device_is_named_with_its_need_and_the_free_memory(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv(MEMORY_ENV, ALONE_CAP)
    task = tiny_task(tmp_path, "fill_slots", "fill_slots", CACHES)
    code = main(["evaluate", str(task.target.path), "fill_slots", "--checkout", str(task.root),
                 "--device", "interpret", "--timing", "none", "--json"])
    out, err = capsys.readouterr()
    verdict = json.loads(out[:out.rindex("}") + 1])
    assert code == 2 and verdict["violations"] == ["out_of_memory"]
    short = verdict["details"]["memory_short"]
    assert short["shape"] == {"blocks": 65536, "d": 8} and short["need_bytes"] > short["free_bytes"] >= 0
    assert "shape blocks=65536,d=8: " in verdict["details"]["messages"][0]
    assert "check: out_of_memory" in err and "shape: blocks=65536,d=8" in err
    assert "of device memory;" in err and " is free" in err
    assert NOT_A_CANDIDATE not in err and "the harness or the environment" not in err


def test_base_failure_of_a_shape_too_large_for_the_device():
    text = base_failure({"reason": "out_of_memory", "violations": ["out_of_memory"],
                         "details": {"memory_short": {
                             "shape": {"batch": 512, "max_history": 2048}, "what": "timing with one copy",
                             "need_bytes": 30 << 30, "free_bytes": 21 << 30,
                             "input_set_bytes": 5 << 29, "output_bytes": 5 << 29}}})
    assert "shape: batch=512,max_history=2048" in text
    assert "what: timing with one copy needs 30.00 GiB of device memory; 21.00 GiB is free" in text
    assert "one input set: 2.50 GiB" in text and NOT_A_CANDIDATE not in text


def test_outputs_are_compared_in_chunks_with_the_same_verdict(monkeypatch):
    """A multi-gigabyte output is compared chunk by chunk (bounded float32 temporaries): the same
    problem, counts and errors as in one piece, wherever in the output the problem lies."""
    from kernelsmith.referee.checks import correctness as C

    g = torch.Generator().manual_seed(0)
    base = torch.randn(1000, 37, generator=g).half()
    ref = base.float() + torch.randn(1000, 37, generator=g) * 1e-3
    wrong, holes = base.clone(), base.clone()
    wrong[999, 30] += 1.0  # in the last chunk
    holes[2, 3] = float("nan")  # in the first
    whole = [C.compare(o, ref, (1e-2, 1e-2), "x", like=base) for o in (base, wrong, holes)]
    monkeypatch.setattr(C, "COMPARE_CHUNK", 1000)
    chunked = [C.compare(o, ref, (1e-2, 1e-2), "x", like=base) for o in (base, wrong, holes)]
    assert [c.problem for c in chunked] == [None, "incorrect", "unwritten_output"]
    for a, b in zip(whole, chunked, strict=True):
        assert (a.problem, a.message, a.max_abs_err) == (b.problem, b.message, b.max_abs_err)
        assert b.mean_abs_err == pytest.approx(a.mean_abs_err, rel=1e-6)


def test_fingerprints_summed_in_slices_are_the_same(monkeypatch):
    """A fingerprint sums a large tensor a slice of rows at a time (its int64 copy stays bounded):
    the numbers are those of one piece."""
    from kernelsmith.referee.checks import input_cache as IC

    g = torch.Generator().manual_seed(1)
    tensors = [torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8)
               for n in (7, 256, 4 * 64 * 5 + 4 * 17 + 3, 4 * 64 * 3000 + 5)]
    whole = IC.fingerprints(tensors)
    monkeypatch.setattr(IC, "FINGERPRINT_ROWS", 7)
    assert IC.fingerprints(tensors) == whole


def test_bitwise_equality_in_slices(monkeypatch):
    from kernelsmith.referee.checks import correctness as C

    a = torch.arange(1000, dtype=torch.float32)
    b = a.clone()
    b[999] = torch.nextafter(b[999], torch.tensor(1e9))
    monkeypatch.setattr(C, "EQUAL_CHUNK", 64)
    assert C.same_bits(a, a.clone()) and not C.same_bits(a, b)
    assert C.same_bits(a > 3, a.clone() > 3) and not C.same_bits(a > 3, a > 4)


# -- the device running out of memory inside a request ----------------------------------------------
# What an 80 GB card did with LMDeploy fill_kv_cache at batch 512 x history 2048: the judge's copy
# of the runner's reply (the caches written in place come back) did not fit. That is a shortfall of
# device memory the planner handles, never a malformed reply blamed on the base.
CUDA_OOM = "CUDA out of memory. Tried to allocate 2.12 GiB. GPU 0 has a total capacity of 79.18 GiB"


def test_the_judge_running_out_of_memory_taking_in_a_reply_is_a_memory_shortfall(monkeypatch):
    import subprocess

    from kernelsmith.referee.link.channel import Channel, pair
    from kernelsmith.referee.link.shared_region import JudgeRegions
    from kernelsmith.referee.memory import device_oom
    from kernelsmith.referee.proc.judge import RunnerLink

    judge_sock, runner_sock = pair()
    child = subprocess.Popen(["sleep", "30"])  # stands for the runner's process (only its pid is read)
    try:
        link = RunnerLink(child.pid, judge_sock)
        link.set_device("cpu")
        runner = Channel(runner_sock, "cpu", trusted_peer=True)
        cache = torch.randn(512, 64)
        link.chan.send({"op": "call"}, {"cache": cache}, reply_bytes=2 * cache.numel() * 4)
        _, got = runner.recv(timeout=5)

        def no_room(self, off, n):
            raise torch.OutOfMemoryError(CUDA_OOM)

        monkeypatch.setattr(JudgeRegions, "received", no_room)
        runner.send({"ok": True}, {"outs": (), "inputs": got})
        with pytest.raises(CandidateError) as e:
            link.receive()
        assert device_oom(e.value.text) and "Tried to allocate 2.12 GiB" in e.value.text
        from kernelsmith.referee.link.errors import DeviceOutOfMemory

        runner.send({"ok": True}, {"outs": (), "inputs": got})  # the channel is still in step
        with pytest.raises(DeviceOutOfMemory):
            link.chan.recv(timeout=5)
        monkeypatch.undo()
        runner.send({"ok": True}, {"outs": (), "inputs": got})
        reply, out = link.receive()
        assert reply["ok"] and torch.equal(out["inputs"]["cache"], cache)
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("child", ["runner", "oracle"])
def test_a_child_running_out_of_memory_taking_in_a_request_says_so(monkeypatch, child):
    """The runner and the oracle answer alike: a crash the judge reads as device memory to make room for."""
    import importlib
    import threading

    from kernelsmith.referee.link.channel import Channel, pair
    from kernelsmith.referee.link.shared_region import PeerRegions
    from kernelsmith.referee.memory import device_oom

    served_by = importlib.import_module(f"kernelsmith.referee.proc.{child}")

    judge_sock, child_sock = pair()
    judge = Channel(judge_sock, "cpu", trusted_peer=False)
    served_chan = Channel(child_sock, "cpu", trusted_peer=True)
    judge.share_regions("cpu")

    def no_room(self, off, n, device):
        raise torch.OutOfMemoryError(CUDA_OOM)

    monkeypatch.setattr(PeerRegions, "inbound", no_room)
    served = threading.Thread(target=served_by.serve, args=(served_chan,))
    served.start()
    judge.send({"op": "call"}, {"cache": torch.randn(512, 64)}, reply_bytes=1 << 17)
    reply, _ = judge.recv(timeout=10)
    judge.send({"op": "exit"})
    served.join(10)
    assert not served.is_alive()
    assert reply["ok"] is False and reply["raised"][0] == "crash" and device_oom(reply["raised"][1])
    assert f"the {child}, taking in a request" in reply["raised"][1]
    assert "Tried to allocate 2.12 GiB" in reply["raised"][1]


# A candidate that runs out of device memory on the largest cache (the runner's allocator failing as
# on the 80 GB card), `OOMS` times: once, the trial is made again with room made; always, the shape
# is named with its need and the memory free.
OOM_CANDIDATE = '''

_fill_slots = fill_slots
_ooms = [OOMS]


def fill_slots(cache, src, slots):
    if cache.shape[0] == 65536 and _ooms[0] > 0:
        _ooms[0] -= 1
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.12 GiB.")
    _fill_slots(cache, src, slots)
'''


def test_a_correctness_call_out_of_device_memory_is_made_again_with_room_else_named(tmp_path, monkeypatch):
    from tiny_project import TINY

    from kernelsmith.referee import Referee

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    task = tiny_task(tmp_path / "t", "fill_slots", "fill_slots", CACHES)
    base = (TINY / "kern.py").read_text()
    with Referee(task, device="interpret", seed=3, timeout_s=300, device_memory_bytes=TOGETHER_CAP) as ref:
        once = ref.evaluate(base + OOM_CANDIDATE.replace("OOMS", "1"), candidate_id=2, timing="none")
        always = ref.evaluate(base + OOM_CANDIDATE.replace("OOMS", "100"), candidate_id=3, timing="none")
    assert once.accepted, (once.violations, once.details.get("messages"))
    retried = [d for d in once.details["memory"]["decisions"] if d["step"] == "a correctness trial"
               and d["action"] == "evicted" and "ran out of memory" in d.get("note", "")]
    assert retried and retried[0]["shape"] == {"blocks": 65536, "d": 8}
    assert always.violations == ["out_of_memory"]
    short = always.details["memory_short"]
    assert short["shape"] == {"blocks": 65536, "d": 8} and short["what"] == "a correctness trial"
    assert short["need_bytes"] > 0 and short["free_bytes"] >= 0
    assert "shape blocks=65536,d=8: a correctness trial needs" in always.details["messages"][0]


def test_a_trial_on_caches_written_in_place_plans_for_both_processes_copies():
    """fill_kv_cache at batch 512 x history 2048 on an 80 GB card, scaled to KiB: a set of two caches
    (the in-place outputs) and a little more. A correctness trial holds, beyond the cache, the
    judge's copy of the set, its copies of the reply (the caches come back), three outputs, and the
    runner's received set: the room made must cover all of it, or the judge runs out of memory."""
    cache = InputCache(None)
    shape = {"batch": 512, "min_history": 2048, "max_history": 2048}
    caches, rest = 2 * 64 * KIB, 4 * KIB
    entry = cache.get(shape, 0, lambda: {"k": torch.zeros(64 * KIB // 2, dtype=torch.bfloat16),
                                         "v": torch.zeros(64 * KIB // 2, dtype=torch.bfloat16),
                                         "x": torch.zeros(rest // 4)})
    sizes = ShapeBytes(caches + rest, caches, False)
    peak = (2 * sizes.inputs + 3 * sizes.outputs) + sizes.inputs  # the judge's, then the runner's
    assert sizes.call() >= peak
    planner = _planner(cache, cache.bytes() + peak - 1)
    planner.note_sizes(shape, sizes)
    with pytest.raises(DeviceMemoryShort):  # one byte short of both processes' copies: not planned
        planner.make_room(shape, sizes.call(), keep=[entry.key], what="a correctness trial")
    planner = _planner(cache, cache.bytes() + sizes.call())
    planner.make_room(shape, sizes.call(), keep=[entry.key], what="a correctness trial")
    assert planner.decisions == []


# A base whose first call in every process runs out of device memory: what a new runner's warm-up
# met on the 80 GB card when the judge's cache had grown into the device since the first runner
# booted (LMDeploy fill_kv_cache at batch 512 x history 2048, the final re-measurement).
OOM_FIRST_CALL = '''

_fill_slots_once = fill_slots
_first = [True]


def fill_slots(cache, src, slots):
    if _first[0]:
        _first[0] = False
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.12 GiB.")
    _fill_slots_once(cache, src, slots)
'''


def test_a_new_runner_out_of_memory_in_its_warm_up_is_made_room_for_not_the_candidates_crash(
        tmp_path, monkeypatch):
    from kernelsmith.onboard.task import load_task
    from kernelsmith.referee import Referee
    from kernelsmith.referee.runners import WARM_STEP

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    task = tiny_task(tmp_path / "t", "fill_slots", "fill_slots", CACHES)
    kern = task.root / "tiny" / "kern.py"
    kern.write_text(kern.read_text() + OOM_FIRST_CALL)
    task, base = load_task(str(task.target.path), "fill_slots", checkout=str(task.root)), kern.read_text()
    with Referee(task, device="interpret", seed=3, timeout_s=300, device_memory_bytes=TOGETHER_CAP) as ref:
        loaded = ref.evaluate(base + "\n# a model's edit\n", candidate_id=2, timing="none")
        fresh = ref.evaluate(base + "\n# another edit\n", candidate_id=3, timing="none")
    for v in (loaded, fresh):
        assert v.accepted, (v.violations, v.details.get("messages"))
    warm = [d for d in fresh.details["memory"]["decisions"] if d["step"] == WARM_STEP]
    assert warm and "ran out of memory" in warm[-1].get("note", ""), fresh.details["memory"]["decisions"]
    assert warm[-1]["shape"] == {"blocks": 16384, "d": 8}  # the first listed shape, the warm-up's


def test_a_profile_of_the_base_is_planned_for_what_the_runner_holds_not_for_a_correctness_trial():
    """The decode harness on an 80 GB card, scaled to KiB: a new runner's warm-up (the base's profile)
    holds the set it received and two copies in the runner, nothing in the judge; planned as a
    correctness trial (twice that and more) it evicted other shapes' entries at every new runner."""
    cache = InputCache(None)
    big, other = {"batch": 512, "max_history": 2048}, {"batch": 128, "max_history": 4096}
    entry = cache.get(big, 0, lambda: {"k": torch.zeros(16 * KIB), "v": torch.zeros(16 * KIB)})
    _fill(cache, other, 0, 64)
    inplace = ShapeBytes(128 * KIB, 128 * KIB, False)
    assert inplace.profile() == 3 * inplace.inputs < inplace.call()
    returned = ShapeBytes(128 * KIB, 8 * KIB, True)
    assert returned.profile() == 3 * returned.inputs + 3 * returned.outputs
    planner = _planner(cache, cache.bytes() + inplace.profile())
    planner.note_sizes(big, inplace)
    planner.make_room(big, inplace.profile(), keep=[entry.key], what="warming a new runner")
    assert planner.decisions == [] and len(cache.entries) == 2  # the other shape's entry stays
    with pytest.raises(DeviceMemoryShort):  # the old plan: a correctness trial and a set more
        planner.make_room(big, inplace.call() + inplace.inputs, keep=[entry.key], what="warming a new runner")


# -- a plan is an upper bound where the device measures the room ------------------------------------
# The decode harness's final check on an 80 GB H100: the reference of batch 512 x history 2048 was
# planned at 25.54 GiB (every copy on both sides) with 22.87 GiB free after every eviction, and the
# verdict said out_of_memory without trying a step that needs about two thirds of its plan.
def _measured_planner(cache: InputCache, free: int) -> MemoryPlanner:
    """A planner whose room is a device's own measure of `free` bytes (no cap)."""
    return MemoryPlanner(Gauge(lambda: free - cache.bytes() + RESERVE_BYTES), cache)


def test_a_step_planned_not_to_fit_is_tried_on_a_measured_device_but_not_under_a_cap():
    cache = InputCache(None)
    shape = {"batch": 512}
    entry = _fill(cache, shape, 0, 64)
    planner = _measured_planner(cache, 100 * KIB)
    planner.make_room_or_try(shape, 1 << 20, keep=[entry.key], what="the reference")
    (tried,) = planner.decisions
    assert tried["action"] == "tried_short" and tried["need_bytes"] == 1 << 20
    assert tried["free_bytes"] < 1 << 20 and "only the device running out of memory" in tried["note"]
    with pytest.raises(DeviceMemoryShort):  # a cap is the user's limit: never exceeded on purpose
        _planner(cache, 100 * KIB).make_room_or_try(shape, 1 << 20, keep=[entry.key], what="the reference")


@pytest.mark.parametrize("ooms, verdict", [(0, "ok"), (1, "ok"), (2, "short")])
def test_a_step_tried_short_is_judged_by_the_device_alone(ooms, verdict):
    """`with_room` on a measured device: the step planned short runs; running out of memory once, it
    runs again with every other entry dropped; twice, it is DeviceMemoryShort naming its plan."""
    from types import SimpleNamespace

    cache = InputCache(None)
    other, shape = {"s": "other"}, {"s": "big"}
    _fill(cache, other, 0, 64)
    keep = _fill(cache, shape, 0, 64)
    holder = SimpleNamespace(memory=_measured_planner(cache, 10 * KIB))
    left = [ooms]

    def step():
        if left[0]:
            left[0] -= 1
            raise torch.OutOfMemoryError(CUDA_OOM)
        return "ok"

    if verdict == "ok":
        assert ListedInputs.with_room(holder, shape, 1 << 20, [keep.key], "the reference", step) == "ok"
    else:
        with pytest.raises(DeviceMemoryShort) as e:
            ListedInputs.with_room(holder, shape, 1 << 20, [keep.key], "the reference", step)
        assert e.value.need == 1 << 20 and e.value.what == "the reference"
    actions = [d["action"] for d in holder.memory.decisions]
    assert actions[:2] == ["evicted", "tried_short"] and actions[2:] == (["evicted"] if ooms else [])


def test_a_trials_cached_data_is_let_go_of_before_the_next_trial_makes_room():
    """Evicting a trial's cache entry gives the device back its bytes only where nothing else holds
    them: the next trial's reference step (the first to make room for it) must find the previous
    trial's inputs, reference and base outputs unreferenced (on the decode harness three 4.26 GiB
    sets stayed held: evicted, counted free, not free)."""
    import gc
    import weakref

    from kernelsmith.referee.checks.record import Record
    from kernelsmith.referee.checks.shape_trials import ShapeTrials

    held, alive = [], []

    class Trials(ShapeTrials, FakeSession):
        link = None

        def call(self, fn, inputs, dirty, rec, sizes=(), pristine=None, untimed=False):
            out = fn(**inputs)
            return out if isinstance(out, tuple) else (out,)

        def listed_expected(self, entry):
            if entry.expected is None and held:  # a later trial's reference: room is made here
                for key in [k for k in self.inputs.entries if k != entry.key]:
                    self.inputs.evict(key)
                gc.collect()
                alive.append(sum(r() is not None for r in held))
                held.clear()
            return super().listed_expected(entry)

        def listed_base(self, entry):
            out = super().listed_base(entry)
            held.extend(weakref.ref(t) for t in (*entry.originals.values(), *entry.expected, *entry.base_outs)
                        if isinstance(t, torch.Tensor))
            return out

    trials = Trials(FakeBackend([0.1]))
    trials.memory = MemoryPlanner(Gauge(lambda: None), trials.inputs)
    shape = trials.harness.shapes_for("interpret")[0]
    result = trials.check_shape(lambda **kw: _rms(**kw), shape, 0, 1, 5, Record())  # not the base
    assert result["shape"] == shape
    assert alive == [0, 0]  # trials 1 and 2 found nothing of the trial before them alive
