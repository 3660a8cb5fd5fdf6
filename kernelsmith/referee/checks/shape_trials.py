"""The correctness trials one worker runs on a candidate: listed shapes (three trials each) and fresh shapes.

Runs inside the isolated worker only, as part of session.Session (which supplies `call`, `expected`,
the harness, the base and the input cache); a failed check raises `Rejected` with the verdict's reason.
"""

from __future__ import annotations

import json
import traceback

import torch

from kernelsmith.referee.checks import correctness as C
from kernelsmith.referee.checks.correctness import unwritten_hint
from kernelsmith.referee.checks.diagnose import interpreter_failure
from kernelsmith.referee.checks.input_cache import ListedInputs, fresh_copy, listed_seed
from kernelsmith.referee.checks.record import Record
from kernelsmith.referee.checks.trials import fitting_draw, into_arena
from kernelsmith.referee.memory import DeviceMemoryShort, device_oom, region_growth

TRIALS = 3


def _nbytes(tensors) -> list[int]:
    return [t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor)]


class Rejected(Exception):
    """Stop evaluating: the candidate is rejected for a named reason."""

    def __init__(self, reason: str, message: str, error: str | None = None):
        super().__init__(message)
        self.reason, self.message, self.error = reason, message, error


def host_memory_refused(exc: BaseException) -> bool:
    """Whether `exc` says the host refused memory (Python's and NumPy's MemoryError, torch's CPU
    allocator); a CUDA out-of-memory error is not this."""
    text = str(exc)
    return isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and (
        "DefaultCPUAllocator: can't allocate memory" in text or "std::bad_alloc" in text))


def host_memory_note() -> str:
    """The out_of_memory message: this process's host memory cap, as the sandbox set it."""
    import resource

    from kernelsmith.sandbox.limits import MEMORY_ENV, format_size

    cap = resource.getrlimit(resource.RLIMIT_DATA)[0]
    if cap == resource.RLIM_INFINITY:
        return "out of host memory (no cap was set: the machine itself ran out)"
    return (f"out of host memory: the candidate's processes are capped at {format_size(cap)} each "
            f"(RLIMIT_DATA; ${MEMORY_ENV} sets the cap)")


def classify_exception(exc: BaseException) -> tuple[str, str]:
    """(violation, error text) for an exception raised by candidate code."""
    from kernelsmith.referee.link.errors import CandidateError

    if isinstance(exc, CandidateError):  # raised in the runner, classified there
        return (exc.name if exc.name in ("crash", "compile_error", "out_of_memory") else "crash"), exc.text
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    lines = text.strip().splitlines()
    gap = interpreter_failure(exc)  # a kernel line the interpreter cannot run: said last
    text = "\n".join(lines[-40:] + ([gap] if gap else []))
    try:
        from triton.compiler.errors import CompilationError
    except ImportError:  # pragma: no cover
        CompilationError = ()  # noqa: N806
    if isinstance(exc, CompilationError):
        return "compile_error", text
    if host_memory_refused(exc):
        return "out_of_memory", host_memory_note() + "\n" + text
    if isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower():
        return "crash", "CUDA out of memory\n" + text
    return "crash", text


class ShapeTrials(ListedInputs):
    """Correctness checks of a candidate's outputs; mixed into session.Session."""

    def check_outputs(self, outs: tuple, expected: tuple, where: str,
                      like: tuple | None = None, known: list | None = None) -> list[C.Check]:
        """Compare every output with the reference; raises Rejected on the first problem.

        `like`: the base's outputs on the same inputs, whose dtypes and shapes the outputs must have
        (the tolerance is keyed by that dtype); values are compared with the reference. `known`:
        input_cache.known_checks of `outs` (an output bit for bit the base's has the base's Check).
        """
        if len(outs) != len(expected) or (like is not None and len(like) != len(outs)):
            n = len(expected) if like is None else len(like)
            raise Rejected("incorrect", f"{where}: {len(outs)} outputs, expected {n}")
        names = self.harness.output_labels(len(outs))
        checks = []
        for i, (name, o, e) in enumerate(zip(names, outs, expected, strict=False)):
            b = like[i] if like is not None and isinstance(like[i], torch.Tensor) else None
            if known is not None and known[i] is not None:
                checks.append(known[i][0])
                continue
            chk = C.compare(o, e, self._tol(e if b is None else b), f"{where} {name}", like=b)
            if chk.problem == "incorrect":
                why = C.precision_downgrade(o, e, chk.mean_abs_err, None)
                if why:
                    raise Rejected("precision_downgrade", f"{where} {name}: {why}; {chk.message}")
            if chk.problem == "unwritten_output" and b is not None and self.harness.outputs:
                chk.message += unwritten_hint(name, b, e, self.harness.inplace)
            if chk.problem:
                raise Rejected(chk.problem, chk.message)
            checks.append(chk)
        return checks

    def base_outputs(self, inputs: dict, sizes: list[int]) -> tuple:
        """The trusted base's outputs on a copy of `inputs` (a fresh shape's: not cached)."""
        return self.call(self.base_fn, C.clone_inputs(inputs), float("nan"), None, sizes, untimed=True)

    def check_shape(self, fn, shape: dict, si: int, cid: int, seed: int, rec: Record) -> dict:
        """Trials on one listed shape: reference match, poisoning, inputs unchanged, determinism,
        bitwise identity to the base, precision, and pointer-reuse caching.

        The trials' inputs, reference and base outputs come from the worker's cache (the same for
        every candidate of the run: seeds per run seed, shape and trial); the candidate gets clones.
        """
        where = "shape " + ",".join(f"{k}={v}" for k, v in shape.items())
        arena, prev_outs, identical, max_err = None, None, True, 0.0
        for t in range(TRIALS):
            # One trial per call: nothing of it but its outputs and inputs outlives it, so the next
            # trial's room (memory.py) evicting its cache entry gives the device the bytes back.
            prev_outs, inputs, same, err = self._trial(fn, shape, seed, t, where, arena, prev_outs, rec)
            identical, max_err = identical and same, max(max_err, err)
            if t == 0:
                arena = C.tensors_of(inputs)
            del inputs
        return {"shape": shape, "max_abs_err": max_err, "bitwise_identical": identical}

    def _trial(self, fn, shape: dict, seed: int, t: int, where: str, arena, prev_outs, rec: Record) -> tuple:
        """Trial `t` on a listed shape: (its outputs, its inputs, bit for bit the base's, the largest
        error)."""
        protected = self.harness.written
        identical, max_err = True, 0.0  # a base trial is the base's own outputs
        entry = self.listed(shape, seed, t)
        # `originals` and `expected` are the cache's own: read here, never handed to the candidate.
        originals, expected = entry.originals, self.listed_expected(entry)
        self.room_for_trial(shape, entry)
        inputs = fresh_copy(originals)
        if t == 1 and arena:
            # Same storage, new values: a result cached by data_ptr shows up as stale output.
            # Sizes may follow the seed: redraws look for inputs that fit (arena_draw).
            taken = self.arena_draw(shape, seed, arena, inputs)
            if taken:
                entry = originals = expected = inputs = None  # the first draw's: let go of first
                entry = self.listed(shape, seed, f"1.{taken}")
                originals, expected = entry.originals, self.listed_expected(entry)
                inputs = fresh_copy(originals)
            inputs = into_arena(arena, inputs)
        sizes = _nbytes(expected)
        outs = self.trial_call(shape, entry, fn, inputs, float("nan"), rec, sizes, pristine=originals)
        # The interface is the base's: its outputs on this entry (cached, made by the base only).
        base_outs, base_err, known = outs, None, None
        if fn is not self.base_fn:
            base_outs, base_err = self.listed_base(entry)
            known = self.known_checks(entry, outs)
        try:
            checks = self.check_outputs(outs, expected, f"{where} trial {t}", base_outs, known)
        except Rejected as r:
            pairs = zip(outs, prev_outs or (), strict=False)
            stale = prev_outs is not None and len(prev_outs) == len(outs) and all(
                type(a) is torch.Tensor and C.same_bits(a, b) for a, b in pairs)
            if t == 1 and stale:
                raise Rejected("cached_result", f"{where}: returned the previous call's result for "
                               "new data at the same address (a result cached across calls)") from r
            raise
        for name, orig in C.tensors_of(originals).items():
            if name not in protected and not C.same_bits(inputs[name], orig):
                raise Rejected("input_mutation", f"{where}: input {name!r} was modified")
        for name, orig in C.tensors_of(originals).items():
            if name in self.harness.inplace or name not in (self.harness.outputs or []):
                inputs[name].copy_(orig)
        outs2 = self.trial_call(shape, entry, fn, inputs, 1.0e4, rec, sizes, pristine=originals)
        for a, b in zip(outs, outs2, strict=False):
            atol, rtol = self._tol(a)
            same = C.same_bits(a, b) if not self.harness.nondeterministic else \
                torch.allclose(a.float(), b.float(), atol=atol, rtol=rtol, equal_nan=True)
            if not same:
                raise Rejected("nondeterministic", f"{where}: two runs on the same inputs disagree "
                               "(uninitialised memory or a race)")
        if fn is not self.base_fn:
            identical = all(k is not None for k in known) if known is not None else \
                all(C.same_bits(a, b) for a, b in zip(outs, base_outs, strict=False))
        for i, (o, e, chk) in enumerate(zip(outs, expected, checks, strict=False)):
            if known is not None and known[i] is not None:
                msg = known[i][1]
            else:
                msg = C.precision_downgrade(o, e, chk.mean_abs_err, base_err[i] if base_err else None)
            if msg:
                raise Rejected("precision_downgrade", f"{where}: {msg}")
            max_err = max(max_err, chk.max_abs_err)
        return outs, inputs, identical, max_err

    def arena_draw(self, shape: dict, seed: int, arena: dict, inputs: dict) -> int:
        """Which redraw of trial 1 fits trial 0's storage `arena` (trials.fitting_draw), found once
        per shape and seed: the redraws not taken are not cached (on a paged cache whose size
        follows the seed most of 64 are not), only the one taken, as trial "1.k"."""
        draws = self.__dict__.setdefault("_arena_draws", {})
        key = (json.dumps(shape, sort_keys=True), int(seed))
        if key not in draws:
            draws[key] = fitting_draw(arena, inputs, lambda k: self.harness.make_inputs(
                shape, self.dev, listed_seed(seed, shape, f"1.{k}")))
        return draws[key]

    def trial_need(self, shape: dict) -> int | None:
        """Device bytes one correctness trial on `shape` needs beyond the cache (memory.py; None
        before the shape's first entry)."""
        planner = getattr(self, "memory", None)
        sizes = planner.sizes_of(shape) if planner is not None else None
        if sizes is None:
            return None
        return sizes.call() + region_growth(self.link, sizes.inputs, sizes.reply)

    def room_for_trial(self, shape: dict, entry) -> None:
        """Room on the device for one correctness trial's calls on `shape` (memory.py)."""
        need = self.trial_need(shape)
        if need is not None:
            self.memory.make_room_or_try(shape, need, [entry.key], what="a correctness trial",
                                         idle=self.idle_while("runner"))

    def trial_call(self, shape: dict, entry, fn, inputs: dict, *args, **kw) -> tuple:
        """`call` in a correctness trial on `entry`. A call the device runs out of memory in (the
        runner's work, or the judge's copies of its reply; `inputs` is written back only after a
        reply is taken in) is made again once with every other cache entry dropped and the
        processes' cached blocks given back (memory.py); out of memory again, it is DeviceMemoryShort."""
        planner = getattr(self, "memory", None)
        try:
            return self.call(fn, inputs, *args, **kw)
        except Exception as e:
            if planner is None or not device_oom(getattr(e, "text", None) or str(e)):
                raise
        planner.evict_all(shape, [entry.key], "a correctness trial", self.idle_while("runner"))
        try:
            return self.call(fn, inputs, *args, **kw)
        except Exception as e:
            if not device_oom(getattr(e, "text", None) or str(e)):
                raise
        raise DeviceMemoryShort(shape, self.trial_need(shape), planner.room() or 0, "a correctness trial",
                                planner.sizes_of(shape)) from None

    def _tol(self, t: torch.Tensor) -> tuple[float, float]:
        return self.harness.tolerance_for(str(t.dtype).replace("torch.", ""))

    def check_fresh(self, fn, shape: dict, cid: int, seed: int, rec: Record) -> None:
        """One trial on a VARY shape: the candidate must be right there too."""
        trial_seed = C.derive_seed(seed, cid, "fresh", json.dumps(shape, sort_keys=True))
        inputs = self.harness.make_inputs(shape, self.dev, trial_seed)
        expected = self.expected(inputs)
        where = "fresh shape " + ",".join(f"{k}={v}" for k, v in shape.items())
        sizes = _nbytes(expected)
        like = None if fn is self.base_fn else self.base_outputs(inputs, sizes)
        try:
            outs = self.call(fn, inputs, float("nan"), rec, sizes, untimed=True)
            self.check_outputs(outs, expected, where, outs if like is None else like)
        except Rejected as r:
            if r.reason in ("incorrect", "unwritten_output", "shape_mismatch", "dtype_mismatch"):
                raise Rejected("wrong_on_fresh_shape", r.message) from None
            raise
        except Exception as e:  # a candidate specialised to the listed shapes may simply fail here
            name, text = classify_exception(e)
            if name == "crash" and "out of memory" not in text.lower():
                raise Rejected("wrong_on_fresh_shape", f"fails on fresh shape {shape}", text) from None
            raise

