"""The worker's evaluation of one candidate: load, correctness, integrity, then timing.

Runs inside the isolated worker process only (kernelsmith.referee.worker); everything here may
be crashed, hung or tampered with by candidate code, which is why the parent process keeps the
clock and recycles the worker after any rejection.
"""

from __future__ import annotations

import base64
import json
import os
import site
import sys
import time
import traceback
from contextlib import nullcontext
from pathlib import Path

import torch

from ..target.harness import load_harness
from ..target.loader import load_operator_module
from . import correctness as C
from . import static
from .backend import get_backend
from .compile_cache import CompileCaches, make_private
from .input_cache import InputCache, default_budget, fresh_copy
from .integrity import Monitor, Record, thread_idents, violations_vs_base
from .settings import GlobalSettings
from .shape_trials import TRIALS, Rejected, ShapeTrials, classify_exception
from .snapshot import Snapshot
from .trials import FreshOutputs


def _preload_lazy_torch() -> None:
    """Import the torch modules that torch imports lazily on a first dispatch-mode switch.

    Their classes are built on first import; built during a watched call (KernelBench tasks' first
    candidate, since the inputs are cached), the class set-up reads as the candidate patching the
    runtime.
    """
    import torch._subclasses.functional_tensor  # noqa: F401
    import torch._subclasses.schema_check_mode  # noqa: F401
    import torch.fx.experimental.proxy_tensor  # noqa: F401


class PhaseClock:
    """Seconds spent per named phase, in order (where an evaluation's or a boot's time went)."""

    def __init__(self):
        self.phases: dict[str, float] = {}
        self._last = time.monotonic()

    def mark(self, name: str) -> None:
        """Charge the time since the previous mark to `name`."""
        now = time.monotonic()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self._last, 4)
        self._last = now


class Session(ShapeTrials):
    """One worker's state: the harness, the base module, the monitor and the backend."""

    def __init__(self, spec: dict):
        clock = PhaseClock()
        self.device = spec["device"]
        self.workdir = Path(spec["workdir"])
        # Made now, before any candidate code runs in this process: see compile_cache.py.
        self.caches = CompileCaches(make_private(self.workdir / ".triton-base"))
        # The base binaries an earlier worker compiled (handed over by the parent): loading them
        # instead of compiling again makes a replacement worker cheap.
        seed = spec.get("base_cache_seed") or {}
        self.seeded = self.caches.seed({k: base64.b64decode(v) for k, v in seed.items()})
        self.backend = get_backend(self.device)
        self.backend.init_context()
        self.dev = self.backend.device
        clock.mark("device_init")
        self.root, self.file, self.entry = Path(spec["root"]), spec["file"], spec["entry"]
        self.stubs = {k: Path(v) for k, v in (spec.get("stubs") or {}).items()}
        roots = [sys.prefix, sys.base_prefix, *site.getsitepackages(), site.getusersitepackages(),
                 str(self.root), *[p for p in sys.path if p]]
        self.monitor = Monitor(self.device, roots)
        _preload_lazy_torch()
        self.monitor.install()
        self.harness = load_harness(spec["harness"])
        self.reference = self.harness.reference  # the referee's own handle; the module's is wrapped
        self.monitor.wrap_reference(self.harness.module)
        self.base_code = (self.root / self.file).read_text()
        self.monitor.allowed_files.add(os.path.realpath(self.root / self.file))
        with self.caches.base(), self.monitor.watch(ops=False) as rec:
            self.base_mod = load_operator_module(self.root, self.file, tag="base", stubs=self.stubs)
        self.base_import = rec
        # A harness may say how to call a loaded module (`bind(module)`, KernelBench tasks).
        self.bind = self.harness.bind
        self.base_fn = self._entry_fn(self.base_mod)
        if not callable(self.base_fn):
            raise RuntimeError(f"{self.file} defines no function {self.entry!r}")
        self.monitor.own_modules.add(self.base_mod.__name__)
        self._aa_fn = None
        self.fresh_outputs = FreshOutputs()
        clock.mark("load")
        # Device numbers that drive verdicts (roofline, spin length): measured in this process now,
        # or handed over by the parent from an earlier worker's start; never read from a file.
        self.calibration = self.backend.calibrate(self._peak_dtypes(), spec.get("calibration"))
        clock.mark("calibration")
        # What the base does per shape, measured before any candidate code is loaded here (or
        # handed over by the parent from an earlier worker's start, which is the same thing).
        # Where kernels compile, base and A/A are compiled now too, so the timed shapes never
        # compile them after candidate code has run in this process.
        self._profile_seed = int(spec.get("seed", 0))
        # Inputs, reference and base outputs of the listed shapes, made once per (shape, seed).
        budget = spec.get("input_cache_bytes")
        self.inputs = InputCache(default_budget(self.device) if budget is None else int(budget))
        self._profiles = {k: Record.from_json(v) for k, v in (spec.get("base_profiles") or {}).items()}
        for si, shape in enumerate(self.harness.shapes_for(self.device)):
            self.base_profile(shape, si, warm=self.backend.compiles)
        clock.mark("base_compile_and_profile")
        # The run's inputs, reference and base outputs for every listed shape and trial, made now,
        # before any candidate code has run in this process (input_cache.py): the base outputs
        # come from an untouched process, and the first candidate finds everything made.
        for shape in self.harness.shapes_for(self.device):
            for t in range(TRIALS):
                self.listed_base(self.listed(shape, self._profile_seed, t))
        clock.mark("input_cache")
        self.boot_phases = clock.phases

    def _peak_dtypes(self) -> list[str]:
        """The dtypes whose matmul rate the flops roofline needs (none without `flops`)."""
        if not self.harness.flops:
            return []
        names = {s.get("dtype") for s in self.harness.shapes_for(self.device)}
        return sorted(n for n in names if isinstance(n, str))

    def trusted(self, fn) -> bool:
        """Whether `fn` is the base or its A/A copy (compiled only in the private cache)."""
        return fn is self.base_fn or (self._aa_fn is not None and fn is self._aa_fn)

    def base_compiles(self):
        """Context: Triton compiles into this worker's private base cache (see compile_cache.py)."""
        return self.caches.base()

    def _entry_fn(self, mod):
        """What to call for a loaded module: the harness's `bind(module)`, else the entry."""
        return self.bind(mod) if self.bind is not None else getattr(mod, self.entry, None)

    # -- calls --------------------------------------------------------------------------------
    def _write_only(self) -> list[str]:
        return [n for n in (self.harness.outputs or []) if n not in self.harness.inplace]

    def call(self, fn, inputs: dict, dirty: float, rec: Record | None, sizes: list[int] = ()) -> tuple:
        """One call of `fn` with poisoned outputs; returns its outputs (plain tensors cloned).

        `sizes`: byte sizes of the expected outputs, used to dirty the allocator for them.
        """
        for name in self._write_only():
            C.poison(inputs[name])
        # Always, not only for self-allocated outputs: scratch buffers must not start clean either.
        C.dirty_allocator(self.dev, dirty, sizes)
        self.backend.synchronize()
        with self.caches.base() if self.trusted(fn) else nullcontext():
            if rec is None:
                ret = fn(**inputs)
                self.backend.synchronize()
            else:
                with self.monitor.watch(rec, garbage=dirty):
                    ret = fn(**inputs)
                    self.backend.synchronize()
        names = self.harness.outputs
        outs = C.as_tuple(ret) if names is None else tuple(inputs[n] for n in names)
        if rec is not None and names is None:
            self.fresh_outputs.note(fn, outs, inputs)
        return tuple(o.clone() if type(o) is torch.Tensor else o for o in outs)

    def expected(self, inputs: dict) -> tuple:
        """The reference outputs for `inputs` (on copies, so the reference cannot disturb them)."""
        return C.as_tuple(self.reference(**C.clone_inputs(inputs)))

    def base_profiles(self) -> dict:
        """The per-shape base profiles as plain data (for the parent to hand to later workers)."""
        return {k: r.to_json() for k, r in self._profiles.items()}

    def base_profile(self, shape: dict, si: int, warm: bool = False) -> Record:
        """What the base does on one call for this shape (its launches, ops, files, threads).

        `warm`: also compile the base (and, where timing happens, the A/A copy) for this shape.
        """
        key = json.dumps(shape, sort_keys=True)
        if key not in self._profiles or warm:
            # The run's first trial inputs: the first candidate's check of this shape finds them made.
            inputs = fresh_copy(self.listed(shape, self._profile_seed, 0).originals)
            self.call(self.base_fn, inputs, float("nan"), None)  # compile outside the profile
            if key not in self._profiles:
                rec = Record()
                self.call(self.base_fn, inputs, float("nan"), rec)
                self._profiles[key] = rec
            if warm and self.backend.timed:
                self.call(self.aa_fn(), inputs, float("nan"), None)
        return self._profiles[key]

    # -- the evaluation -----------------------------------------------------------------------
    def load_candidate(self, code: str, cid: int, source_path: Path):
        """Static checks, then import the candidate beside the base under the monitor."""
        if not static.defines(code, self.entry):
            raise Rejected("import_error", f"the candidate does not define the entry function {self.entry!r}")
        self.monitor.allowed_files.add(os.path.realpath(source_path))
        self.monitor.candidate_files.update({str(source_path), os.path.realpath(source_path)})
        tag = f"c{cid}"
        try:
            with self.monitor.watch(ops=False) as rec:
                mod = load_operator_module(self.root, self.file, code=code, tag=tag, source_path=source_path,
                                           stubs=self.stubs)
        except BaseException as e:  # noqa: BLE001 - any import failure is the candidate's
            raise Rejected("import_error", f"importing the candidate failed: {type(e).__name__}: {e}",
                           classify_exception(e)[1]) from None
        self.monitor.own_modules.add(mod.__name__)
        try:
            fn = self._entry_fn(mod)
        except Exception as e:  # noqa: BLE001 - the harness rejects the module's shape
            raise Rejected("import_error", f"{type(e).__name__}: {e}") from None
        if not callable(fn):
            raise Rejected("import_error", f"{self.entry!r} is not a function in the candidate")
        return mod, fn, rec

    def evaluate(self, code: str | None, source_path: str | None, cid: int, timing: str, seed: int,
                 fresh: bool = False, contender_at: float | None = None) -> dict:
        """The verdict (as a dict) for one candidate; never raises for candidate failures.

        `fresh`: the candidate compiles in a new, empty Triton cache folder (the final check).
        `timing="staged"`: screen timing on representative shapes, then on every shape, then,
        where the screen geomean reaches `contender_at`, the full measurement (device time, A/A
        control) right away, on the same loaded candidate (staging.py).
        """
        with self.caches.fresh() if fresh else nullcontext():
            return self._evaluate(code, source_path, cid, timing, seed, contender_at)

    def _evaluate(self, code: str | None, source_path: str | None, cid: int, timing: str, seed: int,
                  contender_at: float | None = None) -> dict:
        out = {"accepted": False, "correct": False, "violations": [], "error": None, "shapes": [],
               "fresh_shapes": [], "timed": False, "geomean_speedup": None,
               "timing": {"metric": None, "aa_ratio": None, "noisy": None}, "details": {"messages": []}}
        msgs = out["details"]["messages"]
        snap = Snapshot(extra={"harness": self.harness.module})
        settings = GlobalSettings()  # before the candidate is loaded
        clock = PhaseClock()
        out["details"]["phase_s"] = clock.phases  # the first calls of each shape include compilation
        self.inputs.begin()  # this evaluation's cache hits and misses (details.input_cache)
        threads_before = thread_idents()
        self.fresh_outputs.reset()  # outputs held across this evaluation's calls (trials.py)
        mod, rec, base_rec = None, Record(), Record()
        base_rec.merge(self.base_import)
        try:
            if code is None:
                fn = self.base_fn
                rec.merge(self.base_import)
            else:
                try:
                    compile(code, str(source_path), "exec")
                except SyntaxError as e:
                    raise Rejected("compile_error", f"syntax error at line {e.lineno}: {e.msg}",
                                   "".join(traceback.format_exception_only(type(e), e))) from None
                for viol, msg in static.static_violations(code, self.base_code):
                    out["violations"].append(viol)
                    msgs.append(msg)
                out["details"]["same_as_base"] = static.same_program(code, self.base_code)
                mod, fn, imp = self.load_candidate(code, cid, Path(source_path))
                rec.merge(imp)
            clock.mark("load")
            shapes = self.harness.shapes_for(self.device)
            for si, shape in enumerate(shapes):
                out["details"]["failed_shape"] = shape  # until it passes (diagnose.py names it)
                base_rec.merge(self.base_profile(shape, si))
                out["shapes"].append(self.check_shape(fn, shape, si, cid, seed, rec))
            clock.mark("correctness")
            fresh = C.fresh_shapes_for(self.harness, self.device, seed, cid)
            for shape in fresh:
                out["details"]["failed_shape"] = shape
                self.check_fresh(fn, shape, cid, seed, rec)
                out["fresh_shapes"].append(shape)
            clock.mark("fresh_shapes")
            out["details"].pop("failed_shape", None)
            out["correct"] = True
        except Rejected as r:
            out["violations"].append(r.reason)
            msgs.append(r.message)
            out["error"] = r.error
        except Exception as e:  # noqa: BLE001 - candidate code raised: a verdict, not a worker crash
            name, text = classify_exception(e)
            out["violations"].append(name)
            out["error"] = text
            msgs.append(text.strip().splitlines()[-1] if text.strip() else name)
        if self.fresh_outputs.finding:
            out["violations"].append("reused_output")
            msgs.append(self.fresh_outputs.finding)
        # Integrity is judged on everything observed, whether or not the answers were right.
        # A pure-library base (KernelBench) is the timing reference; the policy judges candidates.
        library_base = code is not None and self.harness.library_base
        found = violations_vs_base(rec, base_rec, library_base=library_base, complete=out["correct"])
        for viol, msg in found:
            out["violations"].append(viol)
            msgs.append(msg)
        if thread_idents() - threads_before:
            out["violations"].append("extra_threads")
            msgs.append("a thread started by the candidate is still running")
        changed = snap.changes()
        if changed:
            out["violations"].append("monkeypatch")
            msgs.append("replaced: " + ", ".join(changed[:6]))
        clock.mark("integrity")
        try:
            if out["correct"] and not out["violations"] and timing != "none" and self.backend.timed:
                from .timing import time_candidate

                def timer(mode, indices, host):
                    return time_candidate(self, fn, cid, seed, mode, out, host=host, indices=indices)

                if timing == "staged":
                    from .staging import run_staged

                    sizes = [self.shape_size(shape, seed) for shape in self.harness.shapes_for(self.device)]
                    run_staged(timer, out, sizes, contender_at, clock.mark)
                else:
                    timer(timing, None, True)
                    clock.mark(f"{timing}_timing")
        except Exception as e:  # noqa: BLE001
            name, text = classify_exception(e)
            out["violations"].append(name)
            out["error"] = text
        finally:
            self.fresh_outputs.reset()
            if mod is not None:
                sys.modules.pop(mod.__name__, None)
        tampered = self.inputs.verify()
        if tampered:
            out["violations"].append("input_mutation")
            msgs.append("the referee's cached inputs or reference outputs changed during this evaluation "
                        "(shapes " + "; ".join(tampered[:3]) + "): written through another buffer")
        out["details"]["input_cache"] = self.inputs.report()
        # Watched calls cover loading and correctness; this also covers the timed calls.
        late = [c for c in settings.changes() if c not in base_rec.settings]
        if late and "monkeypatch" not in out["violations"]:
            out["violations"].append("monkeypatch")
            out["details"]["messages"].append("changed process-global settings that outlive the call: "
                                              + "; ".join(late[:5]))
        return out

    def aa_fn(self):
        """The A/A control: the base file loaded again as a separate module."""
        if self._aa_fn is None:
            path = self.workdir / "aa" / Path(self.file).name
            with self.caches.base():
                mod = load_operator_module(self.root, self.file, code=self.base_code, tag="aa",
                                           source_path=path, stubs=self.stubs)
            self._aa_fn = self._entry_fn(mod)
        return self._aa_fn
