"""Compile-only warm-up on CPU: a candidate's kernels land in Triton's cache for a GPU target."""

from __future__ import annotations

import os
from pathlib import Path

from kernelsmith.onboard.config import load_target
from kernelsmith.onboard.task import make_task
from kernelsmith.referee.verdict import Verdict
from kernelsmith.search.precompile import Precompiler

ROOT = Path(__file__).resolve().parents[2]
HARNESS = """
import torch
SHAPES = [{"tokens": 2, "d": 64, "dtype": "float16"}]
OUTPUTS = ["out"]
def make_inputs(shape, device, seed):
    x = torch.randn(shape["tokens"], 2 * shape["d"]).to(device=device, dtype=getattr(torch, shape["dtype"]))
    return {"out": torch.empty(shape["tokens"], shape["d"], dtype=x.dtype, device=device), "x": x}
def reference(out, x):
    d = x.shape[-1] // 2
    return (torch.nn.functional.silu(x[:, :d].float()) * x[:, d:].float()).to(out.dtype)
"""



def _demo_silu_task(tmp_path):
    """The demo's silu_and_mul with the tiny HARNESS above."""
    yaml = tmp_path / "t.yaml"
    (tmp_path / "h.py").write_text(HARNESS)
    yaml.write_text(
        "repo: a/b\noperators:\n  - name: silu\n    file: miniserve/kernels/silu_and_mul.py\n"
        "    entry: silu_and_mul\n    harness: h.py\n"
    )
    return make_task(load_target(yaml), "silu", ROOT / "examples" / "miniserve", "0" * 40)


def _repo_task(tmp_path, op: str, rel_file: str, harness: str):
    """Operator `op` (entry of the same name) of the file at tmp_path/repo/rel_file."""
    (tmp_path / "h.py").write_text(harness)
    yaml = tmp_path / "t.yaml"
    yaml.write_text(f"repo: a/b\noperators:\n  - name: {op}\n    file: {rel_file}\n"
                    f"    entry: {op}\n    harness: h.py\n")
    return make_task(load_target(yaml), op, tmp_path / "repo", "0" * 40)

def test_candidate_compiles_for_the_gpu_target_without_a_gpu(tmp_path, monkeypatch):
    cache = tmp_path / "triton-cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    task = _demo_silu_task(tmp_path)
    pc = Precompiler(task, ("cuda", 90, 32), 1)  # a folder of its own, removed on close
    workdir = Path(pc.spec["workdir"])
    try:
        pc.submit(7, task.base_code.replace("BLOCK = 64", "BLOCK = 1024"))
        pc.submit(8, "this is not python")
        replies = [pc.futures[c].result(timeout=120) for c in (7, 8)]
        pc.submit(9, task.base_code)
        pc.wait(9, timeout=120)  # queued behind nothing: runs, and wait returns when it is done
    finally:
        pc.close()
    assert replies[0]["ok"] and not replies[1]["ok"] and "NameError" in replies[1]["error"]
    assert pc.stats["jobs"] in (2, 3) and pc.stats["failed"] == 1
    assert workdir.parent.name.startswith("kernelsmith-precompile-") and not workdir.parent.exists()
    assert list(cache.rglob("_silu_and_mul_kernel.cubin"))
    assert '"arch": 90' in next(cache.rglob("_silu_and_mul_kernel.json")).read_text()
    ttirs = [p.read_text() for p in cache.rglob("_silu_and_mul_kernel.ttir")]
    assert any("end = 1024" in t for t in ttirs)  # the candidate's BLOCK


def _nice_of_group(pgid: int, module: str) -> list[tuple[int, int]]:
    """(niceness, scheduling policy) of the Python processes of group `pgid` running `module`
    (Linux /proc); the sandbox's own wrapper processes, which only wait, are left out."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            argv = (stat.parent / "cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        python = Path(argv[0]).name.startswith("python")
        args = argv[2:] if argv[1:2] == ["-P"] else argv[1:]  # children start with -P (pycmd.py)
        if int(fields[2]) == pgid and python and args[:2] == ["-m", module]:  # pgrp 3rd, nice 17th
            out.append((int(fields[16]), int(fields[38])))  # policy: the stat file's 41st field
    return out


def test_compile_processes_run_at_a_lower_priority_than_the_gpu_workers(tmp_path):
    """A GPU worker's timing loop must enqueue each call inside its spin; compile processes (and the
    ptxas they start) yield the cores to it."""
    from kernelsmith.referee.proc.compile_child import COMPILE_NICE

    task = _demo_silu_task(tmp_path)
    pc = Precompiler(task, ("cuda", 90, 32), 1, tmp_path / "work")
    try:
        pc.submit(7, task.base_code)
        assert pc.futures[7].result(timeout=120)["ok"]
        child = next(iter(pc.running.values()), None) if pc.running else None
        procs = [c.proc for c in pc.children] + ([child[0].proc] if child else [])
        nice = [n for p in procs for n in _nice_of_group(p.pid, "kernelsmith.referee.proc.compile_child")]
    finally:
        pc.close()
    assert nice and all(n == min(19, os.nice(0) + COMPILE_NICE) for n, _ in nice)
    assert all(policy == os.SCHED_IDLE for _, policy in nice)  # a waking GPU worker preempts them


UTILS = """
import functools
import torch

CAPABILITY = torch.cuda.get_device_capability()  # asked at import, as LMDeploy's utils do


@functools.lru_cache
def get_device_props(device=None):
    if device is None:
        device = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(device)
    return {"sms": props.multi_processor_count, "major": props.major}
"""

OPERATOR = """
import torch
import triton
import triton.language as tl

from .utils import get_device_props


@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def scale(x, out):
    sms = get_device_props(x.device.index)["sms"]  # a grid sized by the SM count
    grid = (min(sms, triton.cdiv(x.numel(), 128)),)
    _scale_kernel[grid](x, out, x.numel(), BLOCK=128)
    return out
"""

SCALE_HARNESS = """
import torch
SHAPES = [{"n": 1000, "dtype": "float16"}]
OUTPUTS = ["out"]
def make_inputs(shape, device, seed):
    x = torch.randn(shape["n"]).to(device=device, dtype=getattr(torch, shape["dtype"]))
    return {"x": x, "out": torch.empty_like(x)}
def reference(x, out):
    return x * 2
"""


def test_launchers_that_ask_torch_about_the_gpu_compile_ahead_too(tmp_path, monkeypatch):
    """Kernel files that query the device (at import and per call, like LMDeploy's) compile in the
    precompiler with the parent's device facts; without them the job fails and the worker compiles."""
    cache = tmp_path / "triton-cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    pkg = tmp_path / "repo" / "eng" / "kernels"
    pkg.mkdir(parents=True)
    for init in (pkg / "__init__.py", pkg.parent / "__init__.py"):
        init.write_text("raise ImportError('the package __init__ must not run')\n")
    (pkg / "utils.py").write_text(UTILS)
    (pkg / "scale.py").write_text(OPERATOR)
    task = _repo_task(tmp_path, "scale", "eng/kernels/scale.py", SCALE_HARNESS)
    facts = {"major": 9, "minor": 0, "multi_processor_count": 132, "name": "NVIDIA H200",
             "total_memory": 150 << 30}
    replies = {}
    for name, device in (("without", None), ("with", facts)):
        pc = Precompiler(task, ("cuda", 90, 32), 1, tmp_path / name, device=device)
        try:
            pc.submit(1, task.base_code)
            replies[name] = pc.futures[1].result(timeout=120)
        finally:
            pc.close()
    assert not replies["without"]["ok"]
    assert replies["with"]["ok"], replies["with"]
    assert list(cache.rglob("_scale_kernel.cubin"))


POW2_OPERATOR = """
import triton
import triton.language as tl


@triton.jit
def _double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def double(x, out):
    _double_kernel[(1,)](x, out, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    return out
"""

POW2_HARNESS = SCALE_HARNESS.replace(
    'SHAPES = [{"n": 1000, "dtype": "float16"}]',
    'SHAPES = [{"n": 64, "dtype": "float16"}]\nVARY = {"n": [100, 300, 700]}',
)


def test_the_fresh_shapes_the_referee_will_draw_compile_ahead_too(tmp_path, monkeypatch):
    """A new size is a new specialization: the candidate's fresh shapes (run seed + candidate id)
    compile in the precompiler as well, so the referee's fresh-shape check does not compile."""
    from kernelsmith.referee.checks.correctness import fresh_shapes_for

    cache = tmp_path / "triton-cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    pkg = tmp_path / "repo" / "eng"
    pkg.mkdir(parents=True)
    (pkg / "double.py").write_text(POW2_OPERATOR)
    task = _repo_task(tmp_path, "double", "eng/double.py", POW2_HARNESS)
    fresh = fresh_shapes_for(task.harness, "cuda", 5, 11)
    assert len(fresh) == 3 and all(s["n"] in (100, 300, 700) for s in fresh)
    pc = Precompiler(task, ("cuda", 90, 32), 1, tmp_path / "work", seed=5)
    try:
        pc.submit(11, task.base_code)
        reply = pc.futures[11].result(timeout=120)
    finally:
        pc.close()
    assert reply["ok"] and reply["fresh"] == 3, reply
    ttirs = [p.read_text() for p in cache.rglob("_double_kernel.ttir")]
    blocks = {b for b in (64, 128, 512, 1024) if any(f"end = {b}" in t for t in ttirs)}
    assert blocks == {64} | {1 << (s["n"] - 1).bit_length() for s in fresh}


def test_a_compile_past_the_limit_is_stopped_and_its_slot_refilled(tmp_path, monkeypatch):
    """wait(limit=...) kills a job that runs longer than the limit and says how long it ran; the
    pool gets a fresh compile process, and later jobs still compile."""
    import time

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    task = _demo_silu_task(tmp_path)
    pc = Precompiler(task, ("cuda", 90, 32), 2, tmp_path / "work")
    try:
        pc.submit(5, task.base_code)
        warm = pc.futures[5].result(timeout=120)["pid"]
        before = {c.proc.pid for c in pc.children}
        pc.submit(3, "import time\ntime.sleep(120)\n" + task.base_code)  # a build that never ends
        while 3 not in pc.running:  # started (a job still queued is left to the worker instead)
            time.sleep(0.01)
        t0 = time.monotonic()
        over = pc.wait(3, timeout=60, limit=1.0)
        took = time.monotonic() - t0
        assert over is not None and 1.0 < over < 10 and took < 10
        assert len(pc.children) == 2 and all(c.alive() for c in pc.children)
        (fresh_pid,) = {c.proc.pid for c in pc.children} - before - {warm}  # the replacement
        warm_pids = {c.proc.pid for c in pc.children} - {fresh_pid}
        pc.submit(4, task.base_code)
        reply = pc.futures[4].result(timeout=120)
        # A warm process takes the next job, not the one still importing torch.
        assert reply["ok"] and reply["pid"] in warm_pids and reply["pid"] != fresh_pid, reply
    finally:
        pc.close()


SLOW_LAUNCHER = POW2_OPERATOR.replace(
    "def double(x, out):\n",
    "def double(x, out):\n    import time\n    time.sleep(1.0)  # CPU work per call\n",
)


def test_the_compile_limit_is_floored_by_the_bases_own_job(tmp_path, monkeypatch):
    """A launcher that is slow on the CPU makes every job slow, the base's too: the limit is then
    at least LIMIT_OVER_BASE base jobs, so honest candidates are not cut; without the base's
    time the same limit cuts them."""
    import time

    from kernelsmith.search.precompile import LIMIT_OVER_BASE

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    pkg = tmp_path / "repo" / "eng"
    pkg.mkdir(parents=True)
    (pkg / "double.py").write_text(SLOW_LAUNCHER)
    task = _repo_task(tmp_path, "double", "eng/double.py", POW2_HARNESS.replace("VARY", "_VARY"))
    candidate = task.base_code.replace("x.numel(), BLOCK=", "x.numel(), num_warps=2, BLOCK=")

    def run(calibrated: bool):
        pc = Precompiler(task, ("cuda", 90, 32), 2, tmp_path / f"work{calibrated}")
        try:
            if calibrated:
                pc.calibrate(task.base_code)
                pc.futures[0].result(timeout=120)
            pc.submit(2, candidate)
            while 2 not in pc.running:
                time.sleep(0.01)
            over = pc.wait(2, timeout=120, limit=0.5)
            return over, pc.base_s, pc.typical_s()
        finally:
            pc.close()

    over, base_s, typical = run(calibrated=False)
    assert over is not None and base_s is None and typical is None  # a cut job is no typical build
    over, base_s, typical = run(calibrated=True)
    assert over is None and 1.0 < base_s and LIMIT_OVER_BASE * base_s > 0.5
    assert typical is not None and typical >= 1.0  # the median of the base's and the candidate's builds


def test_a_compile_limit_counts_the_job_not_the_process_start(tmp_path, monkeypatch):
    """A new compile process first imports torch and makes the listed shapes' inputs (20 s for a
    big sampler); only the job itself counts against the limit, so a slow start cuts nobody."""
    import time

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    pkg = tmp_path / "repo" / "eng"
    pkg.mkdir(parents=True)
    (pkg / "double.py").write_text(POW2_OPERATOR)
    slow_inputs = POW2_HARNESS.replace(
        "def make_inputs(shape, device, seed):\n",
        "def make_inputs(shape, device, seed):\n    import time\n    time.sleep(3.0)\n",
    )
    task = _repo_task(tmp_path, "double", "eng/double.py", slow_inputs)
    pc = Precompiler(task, ("cuda", 90, 32), 1, tmp_path / "work")
    try:
        pc.submit(2, task.base_code)
        while 2 not in pc.running:  # taken by the pool (a job still queued is left to the worker)
            time.sleep(0.01)
        assert pc.wait(2, timeout=120, limit=2.0) is None  # 3 s of inputs + a compile: not cut
    finally:
        pc.close()
    assert pc.stats["ok"] == 1 and pc.stats["seconds"] < 3.0  # the job's own time


def test_what_a_candidate_prints_is_not_taken_for_a_reply(tmp_path, monkeypatch):
    """Candidate code that prints (at import, per call, from C through fd 1) leaves the compile
    process's replies in step: each job still gets its own."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    task = _demo_silu_task(tmp_path)
    chatty = (
        'import os\nprint("{\\"ok\\": true}")\nos.write(1, b"{\\"ok\\": true}\\n")\n' + task.base_code
    )
    pc = Precompiler(task, ("cuda", 90, 32), 1, tmp_path / "work")
    try:
        pc.submit(2, chatty)
        pc.submit(3, "this is not python")
        replies = [pc.futures[c].result(timeout=120) for c in (2, 3)]
    finally:
        pc.close()
    assert replies[0]["ok"] and not replies[1]["ok"] and "NameError" in replies[1]["error"], replies


def test_close_stops_a_job_still_compiling(tmp_path, monkeypatch):
    """close() kills the compile processes that are busy too: the pool's threads (which Python
    joins at exit) end at once instead of waiting for a slow compile (a finished run once hung)."""
    import time

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    task = _demo_silu_task(tmp_path)
    pc = Precompiler(task, ("cuda", 90, 32), 1, tmp_path / "work")
    pc.submit(3, "import time\ntime.sleep(120)\n" + task.base_code)
    while 3 not in pc.running or pc.running[3][1] is None:  # the process has taken the job
        time.sleep(0.01)
    busy = pc.running[3][0]
    fut = pc.futures[3]
    t0 = time.monotonic()
    pc.close()
    reply = fut.result(timeout=20)
    assert time.monotonic() - t0 < 10 and not busy.alive() and not reply["ok"], reply


def test_a_ray_actors_gate_cuts_a_job_past_the_limit_in_real_compile_processes(tmp_path, monkeypatch):
    """ray_pool.CompileGate with the real compile processes (compiling for an sm_90 target on this
    CPU): a candidate whose job stalls past the limit (floored at 4 base jobs) is killed there and
    gets the timeout verdict without reaching the referee; an ordinary one reaches it."""
    import time

    from kernelsmith.search.ray_pool import CompileGate

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    task = _demo_silu_task(tmp_path)

    def compile_processes(task, *, workers, seed=None, n_gpus=1):
        return Precompiler(task, ("cuda", 90, 32), workers, seed=seed)

    judged = []

    class Recording:
        def evaluate(self, code, **kw):
            judged.append(kw["candidate_id"])
            return Verdict(accepted=True, correct=True).finalize()

    gate = CompileGate.build(task, "cuda", 0, 0.5, True, n_gpus=1, factory=compile_processes)
    stall = task.base_code.replace("    BLOCK = 64\n", "    __import__('time').sleep(60)\n    BLOCK = 64\n")
    assert stall != task.base_code
    try:
        t0 = time.monotonic()
        slow = gate.evaluate(Recording(), stall, {"candidate_id": 1, "timing": "none"})
        waited = time.monotonic() - t0
        quick = gate.evaluate(Recording(), task.base_code.replace("BLOCK = 64", "BLOCK = 128"),
                              {"candidate_id": 2, "timing": "none"})
        base_s = gate.precompiler.base_s
    finally:
        gate.close()
    assert not slow.accepted and slow.reason == "timeout" and "--compile-limit" in slow.error
    assert slow.details["compile_limit_s"] == 0.5 and base_s and slow.details["compile_s"] >= 4 * base_s
    assert waited < 60 and quick.accepted and judged == [2]


def test_a_queued_job_is_waited_for_and_cut_when_asked(tmp_path, monkeypatch):
    """One compile process busy with the base: a candidate submitted behind it is still queued. By
    default `wait` drops it (the worker compiles it); with queued=True (a Ray actor, which submits
    and waits at once) it waits for the job and the limit still cuts it."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    task = _demo_silu_task(tmp_path)
    stall = task.base_code.replace("    BLOCK = 64\n", "    __import__('time').sleep(60)\n    BLOCK = 64\n")
    for queued in (False, True):
        pc = Precompiler(task, ("cuda", 90, 32), 1, tmp_path / f"work{queued}")
        try:
            pc.calibrate(task.base_code)
            pc.submit(1, stall)
            over = pc.wait(1, timeout=120, limit=0.5, queued=queued)
        finally:
            pc.close()
        if queued:
            assert over is not None and pc.base_s and over >= 4 * pc.base_s
        else:
            assert over is None and pc.stats["jobs"] <= 1  # dropped before it ran


def test_ready_says_when_a_candidates_compile_is_settled(tmp_path, monkeypatch):
    """`ready` (what a GPU worker asks before taking a candidate): not while the job is queued or
    compiling, yes once it is done, yes for a job running past the compile limit (floored at 4 base
    jobs), and yes for a candidate with no job."""
    import time

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    task = _demo_silu_task(tmp_path)
    stall = task.base_code.replace("    BLOCK = 64\n", "    __import__('time').sleep(60)\n    BLOCK = 64\n")
    pc = Precompiler(task, ("cuda", 90, 32), 2, tmp_path / "work")
    try:
        assert pc.ready(9)  # never submitted: nothing to wait for
        pc.calibrate(task.base_code)
        pc.submit(1, stall)
        pc.submit(2, task.base_code.replace("BLOCK = 64", "BLOCK = 128"))
        assert not pc.ready(1, limit=0.5) and not pc.ready(2, limit=0.5)
        pc.futures[2].result(timeout=120)
        assert pc.ready(2, limit=0.5)
        assert not pc.ready(1, limit=None)  # no limit: a stalled job is never settled early
        deadline = time.monotonic() + 120
        while not pc.ready(1, limit=0.5):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        base_s = pc.base_s
        over = pc.wait(1, timeout=1, limit=0.5)
    finally:
        pc.close()
    assert base_s and over is not None and over >= 4 * base_s
