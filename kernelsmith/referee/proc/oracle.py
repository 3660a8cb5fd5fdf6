"""The oracle: the referee worker's process for target-repository code (the harness and the base).

A child of the judge, forked beside the runner before the judge touches a device, in the same
sandbox and a user namespace of its own, keeping no descriptor but its channel and the log. It
loads the harness and the operator's base file, which the judge never imports, and serves through
channel.py what the judge used to compute in its own process: the harness's facts as plain data,
`make_inputs`, the reference, calls of the base, and the judge's own timing of the base (check (b)
of timing/claims.py). It never loads candidate code and holds no answer channel; the judge decodes
its replies as hostile (oracle_link.py), so a hostile harness can misreport about itself, never
reach the judge's comparisons or verdict fields.
"""

from __future__ import annotations

import base64
import os
import sys
import traceback
from contextlib import nullcontext
from pathlib import Path

from kernelsmith.harness.model import load_harness
from kernelsmith.interpreter import standins
from kernelsmith.loader import load_operator_module
from kernelsmith.referee.backend import get_backend
from kernelsmith.referee.checks import correctness as C
from kernelsmith.referee.checks.diagnose import interpreter_failure
from kernelsmith.referee.link.channel import Channel
from kernelsmith.referee.link.serve import serve as serve_requests
from kernelsmith.referee.proc import parallel_tune
from kernelsmith.referee.proc.autotune_share import Tuning, checked_table, table_size
from kernelsmith.referee.proc.compile_cache import CompileCaches
from kernelsmith.referee.timing.claims import time_base


class OracleSession:
    """The oracle's state: the harness, the base, the base's private Triton cache and its autotuning."""

    def __init__(self, spec: dict):
        self.tuning = Tuning()  # the kernels of what loads from here on: the harness and the base
        self.device = spec["device"]
        self.backend = get_backend(self.device)
        self.backend.init_context()
        self.dev = self.backend.device
        if self.device == "cuda":  # the base's tuning compiles its configs at once (parallel_tune.py)
            parallel_tune.install(parallel_tune.compile_threads())
        # The judge made this folder, empty; the base compiles only here (compile_cache.py).
        self.caches = CompileCaches(Path(spec["base_cache"]))
        seed = spec.get("base_cache_seed") or {}
        self.seeded = self.caches.seed({k: base64.b64decode(v) for k, v in seed.items()})
        root, file, entry = Path(spec["root"]), spec["file"], spec["entry"]
        stubs = {k: Path(v) for k, v in (spec.get("stubs") or {}).items()}
        self.harness = load_harness(spec["harness"], spec.get("variant"))
        with self.caches.base():
            self.base_mod = load_operator_module(root, file, tag="base", stubs=stubs)
        # A harness may say how to call a loaded module (`bind(module)`, KernelBench tasks), call the
        # entry itself (`call`) and pick what is compared (target/entry.py).
        self.base_fn = self.harness.callable_of(self.base_mod, entry)
        if not callable(self.base_fn):
            raise RuntimeError(f"{file} defines no function {entry!r}")
        # An earlier worker's choices (handed on by the parent): the base is not tuned again.
        self.tuning.seed(checked_table(spec.get("base_autotune") or {}))
        # Its autotuned kernels, found once: every base call asks how many choices they hold.
        self.tuners = [t for _, own, t in self.tuning.kernels() if not own]
        self._made, self._chosen = -1, 0

    def chosen(self) -> int:
        """How many choices the base's table holds (made again only after a kernel chose anew)."""
        made = sum(len(t.cache) for t in self.tuners)
        if made != self._made:
            self._made, self._chosen = made, table_size(self.tuning.table())
        return self._chosen

    def autotune(self) -> dict:
        """The base's autotune choices as a table, how many were given and made here, and how many
        configs compiled on the parallel threads."""
        return {"table": self.tuning.table(), **self.tuning.counts(),
                "compiled": parallel_tune.COMPILED[0]}

    def sizes(self, shape: dict) -> dict:
        """The harness's bytes_moved and flops of one shape (None where it has no such function)."""
        h = self.harness
        return {"shape": shape, "bytes_moved": int(h.bytes_moved(shape)) if h.bytes_moved else None,
                "flops": int(h.flops(shape)) if h.flops else None}

    def facts(self) -> dict:
        """The harness as plain data (oracle_link.harness_from_facts checks every field)."""
        h = self.harness
        return {"shapes": h.shapes, "cpu_shapes": h.cpu_shapes, "outputs": h.outputs,
                "positions": h.positions, "call": h.call is not None, "inplace": h.inplace,
                "tolerance": h.tolerance, "vary": h.vary, "nondeterministic": h.nondeterministic,
                "library_base": h.library_base, "bytes_moved": h.bytes_moved is not None,
                "flops": h.flops is not None,
                "sizes": [self.sizes(s) for s in h.shapes_for(self.device)]}

    def call(self, inputs: dict, dirty: float, sizes: list[int], untimed: bool = False) -> tuple:
        """One call of the base with poisoned write-only outputs (as the judge's Session did);
        `untimed`: a call never timed (a fresh shape's), whose new autotune keys take the first
        config that runs (parallel_tune.first_that_runs)."""
        h = self.harness
        for name in [n for n in (h.outputs or []) if n not in h.inplace]:
            C.poison(inputs[name])
        # Named outputs are the caller's buffers: no blocks of their sizes (as in runner.call).
        C.dirty_allocator(self.dev, dirty, sizes if h.outputs is None else ())
        self.backend.synchronize()
        quick = parallel_tune.first_that_runs(self.tuners) if untimed else nullcontext()
        with self.caches.base(), quick:
            ret = self.base_fn(**inputs)
            self.backend.synchronize()
        return C.as_tuple(ret) if h.outputs is None else tuple(inputs[n] for n in h.outputs)

    def release(self) -> None:
        """Give freed device memory back: what the oracle made now lives in the judge's cache, and
        its own caching allocator would otherwise hold as much again on the device."""
        self.backend.release()

    def time_base(self, originals: list[dict], seed: int) -> dict:
        """Check (b)'s own base time on copies of `originals` (the judge has stopped the runner)."""
        before = self.backend.late_reps()
        ms, host_ms = time_base(self.backend, self.base_fn, self.harness.inplace, originals, seed,
                                self.caches.base)
        return {"ms": ms, "host_ms": host_ms, "late": self.backend.late_since(before)}


def serve(chan: Channel, own_userns: bool = False) -> int:
    """Answer the judge's requests until it says exit or goes away."""
    session: OracleSession | None = None

    def init(msg: dict, values) -> tuple[dict, object]:
        nonlocal session
        session = OracleSession(msg["spec"])
        chan.device = session.dev
        return {"facts": session.facts(), "seeded": session.seeded, "own_userns": own_userns,
                "autotuned": len(session.tuners)}, None

    def calibrate(msg: dict, values) -> tuple[dict, object]:
        session.backend.calibrate([], msg.get("calibration"))
        return {}, None

    def failed(e: BaseException) -> dict:
        gap = interpreter_failure(e)  # a kernel line the interpreter cannot run: said last
        return {"ok": False, "error": traceback.format_exc()[-6000:] + (f"\n{gap}" if gap else "")}

    def unsendable(op: str, e: Exception) -> dict:
        return {"ok": False, "error": f"cannot return the answer to {op!r}: {type(e).__name__}: {e}"[:2000]}

    def base(msg: dict, values) -> tuple[dict, object]:
        outs = session.call(values, float(msg["dirty"]), msg.get("sizes") or [], msg.get("untimed") is True)
        # How many autotune choices the base has now: the judge fetches new ones (autotune_share.py).
        return {"chosen": session.chosen()}, outs

    def release() -> None:  # what the oracle made now lives in the judge's cache (memory.py)
        if session is not None:
            session.release()

    handlers = {
        "init": init,
        "calibrate": calibrate,
        "inputs": lambda msg, values: ({}, session.harness.make_inputs(msg["shape"], session.dev,
                                                                       int(msg["seed"]))),
        "reference": lambda msg, values: ({}, C.as_tuple(session.harness.reference(**values))),
        "base": base,
        "autotune": lambda msg, values: (session.autotune(), None),
        "time_base": lambda msg, values: (session.time_base(values, int(msg["seed"])), None),
        "sizes": lambda msg, values: (session.sizes(msg["shape"]), None),
        "stand_ins": lambda msg, values: ({"stand_ins": sorted(standins.USED)}, None),
    }
    # Harness or base code failing (BaseException too) is the judge's to judge: it is answered.
    return serve_requests(chan, "oracle", handlers, failed, unsendable, catch=BaseException, release=release,
                          release_after=frozenset({"inputs", "reference", "base", "time_base"}))


def start(sock, log_fds: tuple[int, int]) -> None:
    """In the forked child: keep only the channel and the log, drop into a user namespace of its own
    where one can be made (as the runner does: runner.start), then serve. Never returns."""
    from kernelsmith.referee.proc.runner import _open_fds, _own_user_namespace

    code = 70
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(log_fds[0], 1)
        os.dup2(log_fds[1], 2)
        for fd in _open_fds():
            if fd > 2 and fd != sock.fileno():
                try:
                    os.close(fd)
                except OSError:
                    pass
        sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
        own = _own_user_namespace()
        code = serve(Channel(sock, "cpu", trusted_peer=True), own)
    except BaseException:  # noqa: BLE001 - report, then leave without the judge's cleanup
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
