"""A new key's autotune configs compile on parallel threads before Triton benchmarks them, and the
benchmarks still choose; a key met only where nothing is timed takes the first config that runs
(kernelsmith/referee/proc/parallel_tune.py). Real compiles for sm_90 on this CPU: Triton's driver is
replaced by the compile-only stand-in the compile processes use."""

import json
import os
import subprocess
import sys

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from kernelsmith.referee.proc import parallel_tune

# Four configs, one of which fails a compile-time assertion; a benchmark that records, at each call,
# how many binaries the kernel already holds and on which thread each compile ran.
CHILD = r'''
import json, sys, threading
import triton
import triton.language as tl
import torch
from kernelsmith.referee.proc import parallel_tune
from kernelsmith.referee.proc.compile_child import install_fake_driver

if sys.argv[2] == "stand-in":
    install_fake_driver(["cuda", 90, 32])
on = parallel_tune.install(int(sys.argv[1]))
compiled_on, cached_at_bench = [], []


def bench(kernel_call, quantiles=None, **_):
    cached_at_bench.append(len(_kern.fn.device_caches[0][0]))
    kernel_call()
    return [float(len(cached_at_bench)), 0.0, 0.0]  # the first config benchmarked is the fastest


CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((64, 1), (128, 2), (256, 4), (512, 4))]


@triton.autotune(configs=CONFIGS, key=["n"], do_bench=bench)
@triton.jit
def _kern(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK <= 256)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


import triton.compiler as _compiler  # JITFunction binds `compile` from here when it first runs

compile_fn = _compiler.compile


def recording_compile(*a, **k):
    compiled_on.append(threading.current_thread().name)
    return compile_fn(*a, **k)


_compiler.compile = recording_compile
x = torch.empty(1000, device="cpu" if sys.argv[2] == "stand-in" else "cuda")
_kern[(1,)](x, torch.empty_like(x), 1000)
print(json.dumps({"on": on, "compiled_on": compiled_on, "cached_at_bench": cached_at_bench,
                  "best": str(_kern.cache[(1000, "torch.float32", "torch.float32")]),
                  "submitted": parallel_tune.COMPILED[0]}))
'''


def _tune(tmp_path, threads: int, driver: str = "stand-in") -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / f"cache{threads}")
    if driver == "stand-in":
        env["CUDA_VISIBLE_DEVICES"] = ""
    script = tmp_path / "tune_child.py"  # Triton reads a kernel's source from its file
    script.write_text(CHILD)
    out = subprocess.run([sys.executable, str(script), str(threads), driver], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_each_config_compiles_on_the_threads_before_the_first_benchmark(tmp_path):
    seen = _tune(tmp_path, 2)
    assert seen["on"] and seen["submitted"] == 4
    # The three good configs were compiled on the pool before any benchmark ran; the failing one is
    # left to its benchmark, which compiles it again on the main thread and fails it.
    assert seen["cached_at_bench"][0] == 3, seen
    assert sum(name.startswith("ks-compile") for name in seen["compiled_on"]) == 4, seen
    assert seen["compiled_on"][-1] == "MainThread"
    assert seen["best"].startswith("BLOCK: 64,"), seen


@pytest.mark.gpu
def test_on_the_gpu_the_configs_compile_on_the_threads_too(tmp_path):
    """Triton's own CUDA driver and the installed Triton's AsyncCompileMode (its API differs between
    releases): the same account as with the stand-in driver."""
    seen = _tune(tmp_path, 2, driver="cuda")
    assert seen["on"] and seen["submitted"] == 4 and seen["cached_at_bench"][0] == 3, seen
    assert sum(name.startswith("ks-compile") for name in seen["compiled_on"]) == 4, seen
    assert seen["best"].startswith("BLOCK: 64,"), seen


def test_one_thread_leaves_triton_as_it_is(tmp_path):
    seen = _tune(tmp_path, 1)
    assert not seen["on"] and seen["submitted"] == 0
    assert seen["cached_at_bench"][0] == 0 and set(seen["compiled_on"]) == {"MainThread"}
    assert seen["best"].startswith("BLOCK: 64,")


@pytest.mark.parametrize("cores, threads", [(2, 1), (3, 1), (4, 2), (16, 14), (128, 16)])
def test_compile_threads_leave_two_cores(cores, threads):
    assert parallel_tune.compile_threads(cores) == threads


# -- a key met only on calls never timed takes the first config that runs ---------------------------
STARTED: list[int] = []  # the MARK of each config whose launch began (its pre_hook ran)
BENCHED: list[int] = []  # one entry per config the kernel's own benchmarker timed


def _started(mark):
    def hook(nargs):
        STARTED.append(mark)
        if mark == 0:  # as when a config asks for more shared memory than the GPU has
            raise OutOfResources(1 << 20, 228 << 10, "shared memory")
    return hook


def _own_bench(kernel_call, quantiles=None, **_):
    kernel_call()
    BENCHED.append(len(BENCHED))
    return [3.0 - len(BENCHED)] * 3  # the later a config, the faster: the last one wins


@triton.autotune(configs=[triton.Config({"MARK": m}, pre_hook=_started(m)) for m in (0, 1, 2)], key=["n"],
                 do_bench=_own_bench)
@triton.jit
def _marked_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, MARK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2 + MARK * 0, mask=offs < n)


def _launch(n):
    x = torch.randn(n, device="cuda" if torch.cuda.is_available() else "cpu")  # else the interpreter
    out = torch.empty_like(x)
    _marked_kernel[(1,)](x, out, n, BLOCK=128)
    assert torch.equal(out, x * 2)


def test_an_untimed_key_takes_the_first_config_that_runs_and_compiles_no_other():
    STARTED.clear()
    BENCHED.clear()
    before = dict(vars(_marked_kernel))
    with parallel_tune.first_that_runs([_marked_kernel]):
        _launch(100)
    # Config 0 could not run, config 1 ran and was taken; config 2 never started; no benchmark ran.
    assert _marked_kernel.cache[(100, "torch.float32", "torch.float32")] is _marked_kernel.configs[1]
    assert STARTED == [0, 1, 1] and BENCHED == []  # the chosen config launched once more for the call
    assert {k: vars(_marked_kernel).get(k) for k in ("do_bench", "prune_configs")} == \
        {k: before.get(k) for k in ("do_bench", "prune_configs")}
    # Outside, a new key is benchmarked as Triton does it: every config, the fastest taken.
    STARTED.clear()
    _launch(37)
    assert len(BENCHED) == 2 and _marked_kernel.cache[(37, "torch.float32", "torch.float32")] \
        is _marked_kernel.configs[2]
