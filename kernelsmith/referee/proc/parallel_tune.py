"""How the oracle tunes the base's autotuned kernels quickly: a timed key's configs compiled on
threads before Triton benchmarks them; an untimed key's first config that runs, nothing benchmarked.

Triton's autotuner, on a new key, benchmarks its configs one after another, and each config's first
launch compiles it: Liger-Kernel's fused_moe has three kernels of 32 to 40 configs at 1-3 s a compile
each, so tuning the base took minutes in the oracle, all of it on one core. Here, at the moment the
autotuner has pruned its configs for a new key (and before the first benchmark), every config is
compiled through `fn.warmup` under Triton's AsyncCompileMode on a thread pool: Triton's compiler
releases the GIL in its passes and ptxas is a subprocess, so the threads compile at once, and the
benchmarks then find each binary in the kernel's cache. Which config wins is untouched: the same
benchmarks choose. A config that fails to compile here is left to its benchmark, which fails it as
before (Triton counts it as infinitely slow).

Installed only in the oracle (the base's tuning, the run's one), on a GPU: a runner may not start
threads while a candidate runs (the integrity check counts them), and under the interpreter nothing
compiles.

A key met only on a call that is never timed (a fresh shape's correctness trial: every candidate
draws its own, and Liger's fused_moe makes each inner size a key of its own) needs no benchmarks:
any config that runs gives a right answer. There (`first_that_runs`) the autotuner takes the first
of its configs that compiles and runs, and compiles no other.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from kernelsmith.sandbox.limits import spare_cores

MAX_THREADS = 16
COMPILED = [0]  # configs this process submitted to its compile threads (for the autotune counts)


def compile_threads(cores: int | None = None) -> int:
    """Compile threads for the oracle's tuning: all cores but two (the judge's and the search's
    process), at most MAX_THREADS. It tunes while the run's first worker starts, before any
    candidate compiles: Liger's fused_moe tuned its first key in 59.6 s with 14 threads on a 16-core
    H100 machine, in more than 80 s with 8, and in more than 150 s one config after another."""
    return spare_cores(2, MAX_THREADS, cores)


def precompile(tuner, configs: list, kwargs: dict, pool) -> int:
    """Compile each of `configs` of `tuner` (an Autotuner inside its `run`, arguments bound) on `pool`;
    returns how many were submitted. Errors are left to the benchmarks."""
    from triton.runtime._async_compile import AsyncCompileMode, active_mode

    if active_mode.get() is not None:  # the kernel's own code compiles asynchronously already
        return 0
    args = list(tuner.nargs.values())  # run() bound them in arg_names order
    meta = {k: v for k, v in kwargs.items() if k not in ("warmup", "grid")}
    grid = kwargs.get("grid", (1,))
    submitted = 0
    with AsyncCompileMode(pool, ignore_errors=True):
        for config in configs:
            try:
                tuner.fn.warmup(*args, grid=grid, **meta, **config.all_kwargs())
                submitted += 1
            except Exception:  # noqa: BLE001 - e.g. a config clashing with a given argument: its benchmark says so
                continue
    return submitted


def install(threads: int) -> bool:
    """Make every autotuner of this process compile a new key's configs on `threads` threads before
    benchmarking them; False where that cannot be (one thread, or a Triton without AsyncCompileMode)."""
    if threads < 2:
        return False
    try:
        from triton.runtime import _async_compile  # noqa: F401 - Triton 3.4 and later
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return False
    if getattr(Autotuner.prune_configs, "_ks_parallel", False):
        return True
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ks-compile")
    prune = Autotuner.prune_configs

    def prune_configs(self, kwargs):
        configs = prune(self, kwargs)
        # run() and warmup() call this with the arguments bound; only a benchmark of several needs it.
        if len(configs) > 1 and getattr(self, "nargs", None):
            COMPILED[0] += precompile(self, configs, kwargs, pool)
        return configs

    prune_configs._ks_parallel = True
    prune_configs._ks_original = prune
    Autotuner.prune_configs = prune_configs
    return True


class _FirstThatRuns:
    """One autotuner's stand-in benchmarker: the first config of a key that runs wins; the others
    are neither compiled nor run (their "time" is infinite)."""

    def __init__(self, tuner):
        self.tuner, self.found = tuner, False
        self.prune = getattr(type(tuner).prune_configs, "_ks_original", type(tuner).prune_configs)

    def prune_configs(self, kwargs):
        self.found = False  # called once per new key, right before its benchmarks
        return self.prune(self.tuner, kwargs)

    def do_bench(self, kernel_call, quantiles=None, **_):
        if self.found:
            return [math.inf, math.inf, math.inf]
        kernel_call()  # a config that cannot compile raises here; the autotuner counts it infinite
        self.found = True
        return [0.0, 0.0, 0.0]


@contextmanager
def first_that_runs(tuners):
    """While inside: each of `tuners` (Autotuners) meeting a new key takes the first of its configs
    that runs instead of benchmarking them all (for calls that are never timed)."""
    saved = []
    for tuner in tuners:
        space = vars(tuner)
        saved.append((tuner, {k: space[k] for k in ("do_bench", "prune_configs") if k in space}))
        quick = _FirstThatRuns(tuner)
        space["do_bench"], space["prune_configs"] = quick.do_bench, quick.prune_configs
    try:
        yield
    finally:
        for tuner, before in saved:
            space = vars(tuner)
            for k in ("do_bench", "prune_configs"):
                space.pop(k, None)
            space.update(before)
