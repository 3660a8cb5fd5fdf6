"""The judge's side of the oracle (oracle.py): the fork, requests, and the harness as checked data.

The judge imports no target-repository code. Its harness is a `Harness` built here from the
oracle's facts, every field checked (`harness_from_facts`), whose `make_inputs`, `reference`,
`bytes_moved` and `flops` are requests to the oracle; the base is `BASE`, a call the oracle runs.
Everything the oracle answers is hostile input: decoded by channel.py (no pickle), tensors must be
plain tensors, and any failure is `OracleFailed`, an error of the harness or the base (what a
harness raising in the judge was before), never a verdict field the oracle chose.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import torch

from kernelsmith.harness.facts import _NAME_RE, HarnessFacts, MalformedFacts, shape_key
from kernelsmith.harness.model import Harness
from kernelsmith.interpreter.standins import NAMES
from kernelsmith.referee.link.channel import Foreign, pair
from kernelsmith.referee.link.errors import DeviceOutOfMemory, PeerGone, ProtocolError
from kernelsmith.referee.link.shared_region import room_for
from kernelsmith.referee.proc.autotune_share import checked_table
from kernelsmith.referee.proc.judge import ChildLink, make_non_dumpable


class OracleFailed(RuntimeError):
    """The oracle (the harness or the base in it) failed a request, died, or answered nonsense."""


class OracleBase:
    """Stands, in the judge, for the base loaded in the oracle."""

    def __repr__(self) -> str:
        return "<oracle's base>"


BASE = OracleBase()


def _plain(value, what: str):
    """`value` if it holds only plain tensors and plain values; OracleFailed otherwise."""
    if isinstance(value, Foreign) or (isinstance(value, torch.Tensor) and type(value) is not torch.Tensor):
        raise OracleFailed(f"{what}: a value the judge does not take from the harness process "
                           f"({value!r:.80})")
    if isinstance(value, dict):
        for v in value.values():
            _plain(v, what)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _plain(v, what)
    return value


def _count(value, what: str) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not 0 <= value < 1 << 63:
        raise MalformedFacts(f"{what}: not a count")
    return value


def _tolerance(value) -> dict:
    if not (isinstance(value, dict) and len(value) <= 64):
        raise MalformedFacts("tolerance: not a map of dtype names")
    out = {}
    for dtype, tol in value.items():
        ok = isinstance(dtype, str) and _NAME_RE.match(dtype) and isinstance(tol, dict) \
            and set(tol) <= {"atol", "rtol"} \
            and all(type(v) in (int, float) and math.isfinite(v) and v >= 0 for v in tol.values())
        if not ok:
            raise MalformedFacts(f"tolerance.{str(dtype)[:40]}: not {{atol, rtol}} of finite "
                                 "non-negative numbers")
        out[dtype] = {k: float(v) for k, v in tol.items()}
    return out


def harness_from_facts(data, path: str | Path, link: OracleLink) -> Harness:
    """The judge's Harness: the oracle's facts, every type checked (MalformedFacts otherwise), with
    its functions as requests to `link`."""
    if not isinstance(data, dict):
        raise MalformedFacts("not an object")
    base = HarnessFacts.from_json({k: data[k] for k in ("shapes", "cpu_shapes", "outputs", "positions",
                                                        "call", "vary") if k in data}
                                  | {"reference_source": None, "inputs": []}, path)
    inplace = data.get("inplace")
    if not (isinstance(inplace, list) and len(inplace) <= 256
            and all(isinstance(n, str) and _NAME_RE.match(n) for n in inplace)):
        raise MalformedFacts("inplace: not a list of input names")
    flags = {k: data.get(k) for k in ("nondeterministic", "library_base", "bytes_moved", "flops")}
    if not all(type(v) is bool for v in flags.values()):
        raise MalformedFacts("nondeterministic, library_base, bytes_moved, flops: not true or false")
    sizes = data.get("sizes")
    if not (isinstance(sizes, list) and len(sizes) <= 2000):
        raise MalformedFacts("sizes: not a list")
    for i, rec in enumerate(sizes):
        if not (isinstance(rec, dict) and isinstance(rec.get("shape"), dict)):
            raise MalformedFacts(f"sizes[{i}]: no shape")
        link.sizes[shape_key(rec["shape"])] = (_count(rec.get("bytes_moved"), f"sizes[{i}]"),
                                               _count(rec.get("flops"), f"sizes[{i}]"))
    return Harness(
        path=Path(path), module=None, shapes=base.shapes, cpu_shapes=base.cpu_shapes, outputs=base.outputs,
        inplace=list(inplace), tolerance=_tolerance(data.get("tolerance")), vary=base.vary,
        nondeterministic=flags["nondeterministic"], make_inputs=link.make_inputs, reference=link.reference,
        bytes_moved=link.bytes_moved if flags["bytes_moved"] else None,
        flops=link.flops if flags["flops"] else None, bind=None, library_base=flags["library_base"],
        positions=base.positions)


class OracleLink(ChildLink):
    """The judge's handle on its oracle: the fork, requests, and death."""

    request_errors = (OracleFailed,)

    def __init__(self):
        make_non_dumpable()  # inherited by the oracle: a candidate cannot read or write its memory
        mine, theirs = pair()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            mine.close()
            from kernelsmith.referee.proc.oracle import start

            start(theirs, (1, 2))  # never returns
        theirs.close()
        super().__init__(pid, mine)
        self.sizes: dict[str, tuple[int | None, int | None]] = {}
        self.chosen = 0  # the base's autotune choices in the oracle, as its last base call said
        self.autotuned = 0  # the base's autotuned kernels (of several configs), as the oracle's init said

    def set_device(self, device: str, regions: bool = True) -> None:
        """Where received tensors go (the judge's device), and whether they cross through regions
        shared with the oracle (probed: where that fails, message files)."""
        self.chan.device = device
        if not regions:
            return
        self.chan.share_regions(device)
        probe = torch.arange(256, dtype=torch.int32, device=device)
        try:
            _, out = self.request({"op": "echo"}, {"t": probe}, reply_bytes=probe.numel() * 4)
            back = out.get("t") if isinstance(out, dict) else None
            good = type(back) is torch.Tensor and back.shape == probe.shape and back.dtype == probe.dtype \
                and bool(torch.equal(back, probe))
        except OracleFailed:
            good = False
        if not good:
            self.chan.regions.close()
            self.chan.regions = None
            self.request({"op": "regions_off"})
        self.chan.reset_stats()

    # -- requests -----------------------------------------------------------------------------
    def _gone(self) -> OracleFailed:
        self._wait_dead()
        return OracleFailed(f"the harness process (the oracle) ended (status {self.status})")

    def request(self, msg: dict, values=None, reply_bytes: int = 0) -> tuple[dict, object]:
        """Send one request and wait for its reply (no limit: the parent's wall clock ends a hang)."""
        if self._dead():
            raise OracleFailed(f"the harness process (the oracle) ended (status {self.status})")
        try:
            self.chan.send(msg, values, reply_bytes=reply_bytes)
        except OSError:
            raise self._gone() from None
        while True:
            try:
                reply, out = self.chan.recv(timeout=1.0)
            except TimeoutError:
                if self._dead():
                    raise self._gone() from None
                continue
            except PeerGone:
                raise self._gone() from None
            except DeviceOutOfMemory as e:  # memory.py's to handle (input_cache.with_room)
                raise OracleFailed(f"the judge, taking in the harness process's reply: {e}") from None
            except (ProtocolError, OSError, ValueError) as e:
                raise OracleFailed(f"the harness process's reply is malformed: {e}") from None
            if reply.get("ok") is True:
                return reply, out
            raised = reply.get("raised")  # ["crash", text]: its device had no room for the request
            error = raised[1] if isinstance(raised, list) and len(raised) == 2 else reply.get("error")
            error = str(error)[-6000:]
            raise OracleFailed(f"the harness process failed {msg.get('op')!r}:\n{error}")

    def start_session(self, spec: dict) -> tuple[dict, int, bool]:
        """Load the harness and the base there: (its facts, base binaries it seeded, own user namespace)."""
        reply, _ = self.request({"op": "init", "spec": spec})
        seeded, autotuned = reply.get("seeded"), reply.get("autotuned")
        self.autotuned = autotuned if type(autotuned) is int and autotuned >= 0 else 0
        return reply.get("facts"), seeded if type(seeded) is int else 0, reply.get("own_userns") is True

    def make_inputs(self, shape: dict, device: str, seed: int) -> dict:
        """The harness's make_inputs(shape, its device, seed), made in the oracle."""
        _, out = self.request({"op": "inputs", "shape": shape, "seed": int(seed)})
        if not (isinstance(out, dict) and all(isinstance(k, str) for k in out)):
            raise OracleFailed("make_inputs did not return a dict of keyword arguments")
        return _plain(out, "make_inputs")

    def reference(self, **inputs) -> tuple:
        """The harness's reference outputs on `inputs`, as a tuple."""
        _, out = self.request({"op": "reference"}, inputs, reply_bytes=room_for(
            [t for t in inputs.values() if isinstance(t, torch.Tensor)]))
        if not isinstance(out, tuple):
            raise OracleFailed("the reference's outputs are not a tuple")
        return _plain(out, "reference")

    def call_base(self, inputs: dict, dirty: float, sizes, untimed: bool = False) -> tuple:
        """The base's outputs on `inputs` (write-only outputs poisoned, the allocator dirtied there);
        `untimed`: a call never timed (a fresh shape's: its new autotune keys are not benchmarked)."""
        tensors = [t for t in inputs.values() if isinstance(t, torch.Tensor)]
        reply, out = self.request({"op": "base", "dirty": dirty, "sizes": list(sizes), "untimed": untimed},
                                  inputs, reply_bytes=room_for(tensors, sizes))
        if not isinstance(out, tuple):
            raise OracleFailed("the base's outputs are not a tuple")
        if type(reply.get("chosen")) is int:
            self.chosen = reply["chosen"]
        return _plain(out, "the base")

    def autotune(self) -> tuple[dict, dict]:
        """(the base's autotune choices as a table, {"kernels", "given", "tuned", "compiled"} counts)
        in the oracle (autotune_share.py, parallel_tune.py)."""
        reply, _ = self.request({"op": "autotune"})
        try:
            table = checked_table(reply.get("table"))
        except ValueError as e:
            raise OracleFailed(f"the harness process's autotune table is malformed: {e}") from None
        counts = {k: reply.get(k) for k in ("kernels", "given", "tuned", "compiled")}
        if not all(type(v) is int and v >= 0 for v in counts.values()):
            raise OracleFailed("the harness process's autotune counts are malformed")
        return table, counts

    def time_base(self, originals: list[dict], seed: int) -> tuple[float, float, list[int]]:
        """Check (b)'s base timing, run in the oracle: (median ms, host ms per call, late reps)."""
        reply, _ = self.request({"op": "time_base", "seed": int(seed)}, originals)
        ms, host_ms, late = reply.get("ms"), reply.get("host_ms"), reply.get("late")
        if not (all(type(x) is float and math.isfinite(x) and x > 0 for x in (ms, host_ms))
                and isinstance(late, list) and len(late) == 2
                and all(type(n) is int and n >= 0 for n in late)):
            raise OracleFailed("the harness process's base timing is malformed")
        return ms, host_ms, late

    def _sizes(self, shape: dict) -> tuple[int | None, int | None]:
        key = shape_key(shape)
        if key not in self.sizes:
            reply, _ = self.request({"op": "sizes", "shape": shape})
            try:
                self.sizes[key] = (_count(reply.get("bytes_moved"), "bytes_moved"),
                                   _count(reply.get("flops"), "flops"))
            except MalformedFacts as e:
                raise OracleFailed(str(e)) from None
        return self.sizes[key]

    def bytes_moved(self, shape: dict) -> int:
        """The harness's bytes_moved(shape)."""
        n = self._sizes(shape)[0]
        if n is None:
            raise OracleFailed("the harness has no bytes_moved")
        return n

    def flops(self, shape: dict) -> int:
        """The harness's flops(shape)."""
        n = self._sizes(shape)[1]
        if n is None:
            raise OracleFailed("the harness has no flops")
        return n

    def stand_ins(self) -> set[str]:
        """The interpreter stand-ins the base used there (known names only)."""
        reply, _ = self.request({"op": "stand_ins"})
        names = reply.get("stand_ins")
        return {n for n in names if n in NAMES} if isinstance(names, list) else set()


