"""Triton compilation on CPU cores ahead of evaluation, so the GPUs are not idle while kernels compile.

This module schedules the jobs (a pool of compile processes, the compile limit); the compile
process itself is referee/proc/compile_child.py, started through referee/proc/child.py like the workers.

While a GPU times one candidate, child processes (no GPU visible, in the same "candidate" sandbox
as the referee's workers: kernelsmith/sandbox) run the next candidates' entry on CPU
tensors of the harness's GPU shapes with Triton's driver replaced by a stand-in for the real GPU
target and every launch turned into a compile-only warm-up. The compiled kernels land in Triton's
on-disk cache under the same keys the referee's worker computes (same source, specialization,
target and options), so the worker loads them instead of compiling. The candidate's fresh shapes
(the referee's correctness check on redrawn sizes, known from the run seed and the candidate id)
are compiled too: a new size is often a new specialization, and on real kernels those compiles
were most of a candidate's referee time. It is only an accelerator:
any failure here just leaves the compiling to the worker. Set KERNELSMITH_PRECOMPILE=0 to turn it off.
"""

from __future__ import annotations

import collections
import json
import os
import statistics
import subprocess
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

from kernelsmith.safefs import open_dir, write_file
from kernelsmith.sandbox.limits import spare_cores
from kernelsmith.scratch import ScratchDir

JOB_TIMEOUT_S = 180.0
BASE_JOB = 0  # the base's own compile job (archive ids start at 1): how long an honest job takes
LIMIT_OVER_BASE = 4.0  # a compile limit never cuts a job shorter than this many base jobs
RECENT_BUILDS = 64  # successful builds whose median is the typical build (typical_s)


MAX_COMPILE_PROCESSES = 24


def compile_processes(n_gpus: int, cores: int | None = None) -> int:
    """Compile processes a machine affords beside `n_gpus` GPU workers and the search's own process.

    Real kernels' verdicts are compile-bound (the sampler's GPU was busy 21% with five processes on
    16 cores), so every core not needed by a GPU worker or the loop compiles.
    """
    return spare_cores(2 + n_gpus, MAX_COMPILE_PROCESSES, cores)


def device_facts() -> dict | None:
    """What launchers ask torch about GPU 0 (capability, SM count, name, memory), or None."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        p = torch.cuda.get_device_properties(0)
        return {"major": p.major, "minor": p.minor, "multi_processor_count": p.multi_processor_count,
                "name": p.name, "total_memory": p.total_memory}
    except Exception:
        return None


class _Child:
    """One compile process, fed candidate files over stdin (one JSON line per job)."""

    def __init__(self, spec: dict):
        from kernelsmith.sandbox.spawn import start_candidate_python

        env = dict(os.environ)
        env.pop("TRITON_INTERPRET", None)
        env["CUDA_VISIBLE_DEVICES"] = ""
        # CPU threads for torch's ops on inputs: a share, so the compile processes together leave
        # half the cores to the GPU workers booting beside them (their boot took 7.8 s with two
        # processes, 12-17 s with four on the H200 host).
        env["OMP_NUM_THREADS"] = str(spec.get("threads") or 1)
        self.killed = False
        self.ready = False
        # The compile process (referee/proc/compile_child.py) in the candidate sandbox, like the workers.
        self.proc = start_candidate_python(
            "kernelsmith.referee.proc.compile_child", [json.dumps(spec)], env, Path(spec["workdir"]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def run(self, path: str, fresh: list[dict], timeout: float, started=None) -> dict:
        """Compile one candidate file; `started()` is called when the process takes the job (after
        its imports and inputs, which a compile limit must not count)."""
        result: dict = {}

        def talk():
            if not self.ready:  # the process says once that its imports and inputs are done
                if not self.proc.stdout.readline():
                    result.update({"ok": False, "error": "compile process exited"})
                    return
                self.ready = True
            if started is not None:
                started()
            self.proc.stdin.write(json.dumps({"path": path, "fresh": fresh}) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
            result.update(json.loads(line) if line else {"ok": False, "error": "compile process exited"})

        t = threading.Thread(target=talk, daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive():
            self.kill()
            return {"ok": False, "error": "timeout"}
        return result

    def alive(self) -> bool:
        # `killed` first: poll() answers None while another thread is inside kill()'s wait().
        return not self.killed and self.proc.poll() is None

    def kill(self) -> None:
        from kernelsmith.sandbox.spawn import kill_group

        self.killed = True
        kill_group(self.proc.pid)
        self.proc.wait()


class Precompiler:
    """A pool of compile processes; `submit` a candidate, `wait` for it before evaluating."""

    def __init__(self, task, target: tuple[str, int, int], workers: int, workdir: Path | None = None,
                 device: dict | None = None, seed: int | None = None):
        # Without a folder of its own choosing it makes one and removes it on close: every run's
        # compiled candidates would otherwise stay in /tmp on a self-hosted runner.
        self._tmp = None
        if workdir is None:
            self._tmp = ScratchDir("kernelsmith-precompile-")
            workdir = Path(self._tmp.name)
        # The compile processes write only `work`; candidate files go to `sources`, which they
        # cannot write, so a link one of them planted never redirects the next file written.
        root = Path(workdir).resolve()
        workdir, self.sources = root / "work", root / "sources"
        for folder in (workdir, self.sources):
            os.close(open_dir(folder, create=True))
        self.spec = {
            "device": device,
            "root": str(task.root),
            "file": task.operator.file,
            "entry": task.operator.entry,
            "harness": str(task.operator.harness),
            "variant": task.operator.variant,
            "target": list(target),
            "workdir": str(workdir),
            "stubs": {k: str(v) for k, v in (task.target.stubs or {}).items()},
            "threads": max(1, (os.cpu_count() or 2) // (2 * max(1, workers))),
        }
        # The referee's run seed: with it each candidate's fresh shapes are known here. Only the
        # shapes reach the child (never the seed: the inputs' values stay unknown to candidate code).
        self.seed = seed
        self.harness = task.harness
        self.pool = ThreadPoolExecutor(max_workers=workers)
        self.children: list[_Child] = []
        self.lock = threading.Lock()
        self.futures: dict[int, Future] = {}
        # cid -> (its child, when the child took the job; None while it still imports or makes inputs)
        self.running: dict[int, tuple[_Child, float | None]] = {}
        self.base_s: float | None = None  # seconds of the base's job, once calibrate() ran it
        self.stats = {"jobs": 0, "ok": 0, "failed": 0, "seconds": 0.0}
        self._recent_ok: collections.deque[float] = collections.deque(maxlen=RECENT_BUILDS)
        # Started now: each child imports torch and Triton while the GPUs boot and time the base.
        self.children = [_Child(self.spec) for _ in range(workers)]

    @classmethod
    def maybe(cls, task, workers: int, seed: int | None = None, n_gpus: int = 1) -> Precompiler | None:
        """A precompiler for CUDA runs (at most `workers` processes, fewer where the cores are
        short), or None (no GPU, or KERNELSMITH_PRECOMPILE=0)."""
        if os.environ.get("KERNELSMITH_PRECOMPILE", "1") == "0":
            return None
        facts = device_facts()
        cores = os.cpu_count() or 2
        if facts is None or cores < 4:
            return None
        target = ("cuda", facts["major"] * 10 + facts["minor"], 32)  # backend, capability, warp size
        return cls(task, target, max(1, min(workers, compile_processes(n_gpus, cores))),
                   device=facts, seed=seed)

    def _child(self) -> _Child:
        with self.lock:
            while self.children:
                c = self.children.pop()
                if c.alive():
                    return c
        return _Child(self.spec)

    def _compile(self, cid: int, code: str) -> dict:
        path = self.sources / f"c{cid}" / Path(self.spec["file"]).name
        write_file(path, code)
        child = self._child()
        with self.lock:
            self.running[cid] = (child, None)
        began = [time.monotonic()]

        def started():
            with self.lock:
                began[0] = time.monotonic()
                self.running[cid] = (child, began[0])

        reply = child.run(str(path), self._fresh_shapes(cid), JOB_TIMEOUT_S, started)
        reply["pid"] = child.proc.pid  # which compile process ran it (inside, pids are the sandbox's own)
        with self.lock:
            took = time.monotonic() - began[0]
            self.running.pop(cid, None)
            self.stats["jobs"] += 1
            self.stats["ok" if reply.get("ok") else "failed"] += 1
            self.stats["seconds"] += took
            if reply.get("ok"):
                self._recent_ok.append(took)
                if cid == BASE_JOB:
                    self.base_s = took
            if child.alive():
                self.children.append(child)
        return reply

    def _fresh_shapes(self, cid: int) -> list[dict]:
        if self.seed is None or self.harness is None:
            return []
        from kernelsmith.referee.checks.correctness import fresh_shapes_for

        return fresh_shapes_for(self.harness, "cuda", self.seed, cid)

    def calibrate(self, base_code: str) -> None:
        """Compile the base as a job of its own: its time floors the compile limit (a launcher
        that does slow CPU work per call, or a big kernel, is not a slow candidate), and its
        kernels land in the cache the GPU workers read."""
        self.submit(BASE_JOB, base_code)

    def submit(self, cid: int, code: str) -> None:
        """Start compiling candidate `cid` in the background."""
        if cid not in self.futures:
            self.futures[cid] = self.pool.submit(self._compile, cid, code)

    def _limit(self, limit: float | None) -> float | None:
        """The compile limit in force (never less than LIMIT_OVER_BASE base jobs); call under the lock."""
        if limit and self.base_s:
            return max(limit, LIMIT_OVER_BASE * self.base_s)
        return limit

    def typical_s(self) -> float | None:
        """The median seconds of the recent successful builds, or None before any."""
        with self.lock:
            return statistics.median(self._recent_ok) if self._recent_ok else None

    def ready(self, cid: int, limit: float | None = None) -> bool:
        """Whether candidate `cid`'s compile is settled: no job for it, its job done, or running past
        `limit` (`wait` then cuts it at once). A job still queued or compiling is not, so a GPU
        worker takes a candidate that is (search/evaluator.py) instead of idling behind a slow build."""
        fut = self.futures.get(cid)
        return fut is None or fut.done() or self._overrun(cid, limit) is not None

    def _overrun(self, cid: int, limit: float | None) -> tuple[object, float] | None:
        """(its compile process, seconds) when `cid`'s job has run past the limit in force, else None.
        No cut while the job has not begun, or before the base's own time is in."""
        with self.lock:
            child, start = self.running.get(cid, (None, None))
            limit = self._limit(limit)
            base = self.futures.get(BASE_JOB)
            if start is None or not limit or (base is not None and not base.done()):
                return None
        seconds = time.monotonic() - start
        return (child, seconds) if seconds > limit else None

    def wait(self, cid: int, timeout: float, limit: float | None = None, queued=False) -> float | None:
        """Wait (at most `timeout` s) for candidate `cid`'s compile job, since compiling it again
        would take as long. Returns the job's seconds when it ran past `limit` seconds of its own
        (never less than LIMIT_OVER_BASE base jobs; the job is then killed), else None. A job not
        started yet is dropped (the worker compiles it), unless `queued` (a Ray actor's, just sent)."""
        fut = self.futures.pop(cid, None)
        if fut is None or not queued and fut.cancel():
            return None
        end = time.monotonic() + timeout
        while True:
            try:
                fut.result(timeout=max(0.0, min(0.25, end - time.monotonic())))
                return None
            except FutureTimeout:
                pass
            except Exception:
                return None
            over = self._overrun(cid, limit)
            if over is not None:
                child, seconds = over
                child.kill()  # its reply thread sees the process end and drops it
                with self.lock:
                    # Starts now, at the back: the next job takes a warm process first (a new one
                    # first imports torch and makes the inputs, 20 s for the sampler's).
                    self.children.insert(0, _Child(self.spec))
                return seconds
            if time.monotonic() >= end:
                return None

    def close(self) -> None:
        """Stop the compile processes."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        with self.lock:
            # The children still compiling too: the pool's threads wait on them, and Python joins
            # those threads at exit (a run that finished its report hung there for a slow compile).
            busy = [child for child, _ in self.running.values()]
            for c in self.children + busy:
                c.kill()
            self.children.clear()
        if self._tmp is not None:
            self._tmp.remove()
            self._tmp = None


def compile_timeout_verdict(seconds: float, limit: float):
    """The verdict of a candidate whose kernels took longer than the compile limit to build."""
    from kernelsmith.referee.verdict import Verdict

    v = Verdict.rejected(
        "timeout",
        f"compiling the candidate's kernels took more than {limit:g} s (stopped after {seconds:.0f} s; "
        "the search's --compile-limit): a kernel this slow to build stalls a serving engine's first "
        "call, and usually spills registers (a huge block on few warps)",
    )
    # eval_s stays 0: no GPU time was spent (efficiency counts eval_s as referee GPU time).
    v.details = {"compile_limit_s": limit, "compile_s": round(seconds, 3)}
    return v
