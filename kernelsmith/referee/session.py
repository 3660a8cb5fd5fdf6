"""The judge's evaluation of one candidate: load, correctness, integrity, then timing.

Runs in the judge (the worker process, kernelsmith.referee.proc.worker), which never imports or runs
candidate code, nor target-repository code: the candidate runs in the judge's runner child
(runner.py, reached through judge.RunnerLink); the harness and the base run in its oracle child
(oracle.py, reached through oracle_link.OracleLink), which makes the inputs, the reference and the
base's outputs. The judge caches them, compares the outputs the runner returns, and decides every
verdict field; the runner's integrity findings can only add rejections, and its times are checked
(timing/claims.py).
"""

from __future__ import annotations

import base64
import json
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

from kernelsmith.harness.facts import MalformedFacts, shape_key
from kernelsmith.interpreter import standins
from kernelsmith.referee.backend import get_backend
from kernelsmith.referee.checks import correctness as C
from kernelsmith.referee.checks import static
from kernelsmith.referee.checks.input_cache import InputCache, default_budget, fresh_copy
from kernelsmith.referee.checks.shape_trials import TRIALS, Rejected, ShapeTrials, classify_exception
from kernelsmith.referee.link.errors import BaseRunFailed, CandidateError, InfrastructureError, RunnerFailed
from kernelsmith.referee.memory import DeviceMemoryShort, Gauge, MemoryPlanner, device_oom, region_growth
from kernelsmith.referee.proc.autotune_share import checked_report, table_size
from kernelsmith.referee.proc.compile_cache import BASE_SEED_LIMIT, CompileCaches, make_private, read_folder
from kernelsmith.referee.proc.judge import RemoteFn, RunnerLink, RunnerTemplate, holds_capabilities
from kernelsmith.referee.proc.oracle_link import BASE, OracleLink, harness_from_facts
from kernelsmith.referee.runners import RunnerSwaps
from kernelsmith.referee.timing.claims import JudgeTiming
from kernelsmith.referee.timing.phase_clock import PhaseClock
from kernelsmith.referee.verdict import REJECTIONS, in_progress

WATCHED = True  # `rec` of a call the runner's monitor watches (the Record lives in the runner)



@contextmanager
def base_runs():
    """Failures of the base, or of the harness's make_inputs or reference, on the listed shapes at a
    worker's start, as BaseRunFailed: the task loaded, so it is not a load error (the referee's
    machinery failing stays InfrastructureError)."""
    try:
        yield
    except (InfrastructureError, BaseRunFailed):
        raise
    except Exception as e:  # noqa: BLE001 - harness or base code failed on a shape
        raise BaseRunFailed(f"{type(e).__name__}: {e}") from e

def _region_bytes(chans) -> int:
    """Bytes the judge's regions and pins of these channels hold."""
    return sum(c.regions.nbytes() for c in chans if c.regions is not None)


class Session(RunnerSwaps, ShapeTrials, JudgeTiming):
    """The judge's state: the harness's facts, the input cache, the backend, its runner and oracle."""

    def __init__(self, spec: dict, template: RunnerTemplate, oracle: OracleLink):
        clock = PhaseClock()
        self.spec, self.template, self.oracle = spec, template, oracle
        self.link = link = self._spawn_runner()
        # `dirty`: the runner must be replaced before the next evaluation (it loaded code no one but
        # kernelsmith wrote from the base); `loaded_any`: it has loaded any candidate code at all.
        self.dirty = self.loaded_any = False
        self.pending: RunnerLink | None = None  # the next runner, started and not yet waited for
        self.runner_folders: list[str] = []
        self.device = spec["device"]
        self.workdir = Path(spec["workdir"])
        # Made now, before any candidate code runs (in the runner): see compile_cache.py. The base
        # compiles there in the oracle, which also loads the binaries an earlier worker compiled
        # (handed over by the parent): a replacement worker is cheap.
        self.caches = CompileCaches(make_private(self.workdir / ".triton-base"))
        self.backend = get_backend(self.device)
        self.backend.init_context()
        self.dev = self.backend.device
        self.use_regions = bool(spec.get("shared_regions", True))
        link.set_device(str(self.dev), regions=self.use_regions)
        oracle.set_device(str(self.dev), regions=self.use_regions)
        clock.mark("device_init")
        self.root, self.file, self.entry = Path(spec["root"]), spec["file"], spec["entry"]
        # The harness and the base are target-repository code: only the oracle imports them. The
        # judge reads the base's text (for the static checks) and the harness's facts, checked.
        facts, self.seeded, own_userns = oracle.start_session({**spec,
                                                               "base_cache": str(self.caches.private)})
        if not own_userns and holds_capabilities():
            raise RuntimeError("the referee's oracle could not enter a user namespace of its own, and the "
                               "judge holds capabilities it could use against the judge; refusing to run")
        try:
            self.harness = harness_from_facts(facts, spec["harness"], oracle)
        except MalformedFacts as e:
            raise RuntimeError(f"the harness process answered malformed facts: {e}") from None
        self.reference = self.harness.reference
        self.base_code = (self.root / self.file).read_text()
        self.base_fn = BASE
        clock.mark("load")
        # Device numbers that drive verdicts (roofline, spin length): measured in this process now,
        # or handed over by the parent from an earlier worker's start; never read from a file.
        self.calibration = self.backend.calibrate(self._peak_dtypes(), spec.get("calibration"))
        oracle.request({"op": "calibrate", "calibration": self.calibration})
        clock.mark("calibration")
        self._profile_seed = int(spec.get("seed", 0))
        # Inputs, reference and base outputs of the listed shapes, made once per (shape, seed),
        # within the device memory measured free (memory.py).
        budget = spec.get("input_cache_bytes")
        self.inputs = InputCache(default_budget(self.device) if budget is None else int(budget))
        cap = spec.get("device_memory_bytes")
        self.runner_ready = False  # the runner answers requests (a "release" among them)
        self._runner_decisions: list[dict] = []  # memory decisions for the runner started after a verdict
        self.memory = MemoryPlanner(Gauge(self.backend.free_memory, None if cap is None else int(cap),
                                          self._held_bytes, self._release_memory, self._held_parts),
                                    self.inputs)
        runner_seed = spec.get("base_cache_seed") or {}
        with base_runs():
            runner_seed = self._compile_base(runner_seed, clock)
        # The runner boots beside the judge (its own device context, monitor, base and A/A), with
        # the judge's device numbers (two processes calibrating at once would disturb both).
        self._runner_seed = runner_seed
        self._profiles: dict = dict(spec.get("base_profiles") or {})
        self.runner_cache = self._send_init(link)
        self._ready_runner(link)
        self.runner_ready = True
        clock.mark("runner_start")
        with base_runs():
            self._profile_base(clock)
        # The interpreter's stand-ins serve kernels, which run in the oracle: its device names them.
        standins.USED.update(oracle.stand_ins())
        self.boot_phases = clock.phases
        self.boot_memory = self.memory.report()["decisions"]

    def _compile_base(self, runner_seed: dict, clock: PhaseClock) -> dict:
        """The base binaries the runner starts with (compiled here for the run's first worker), and
        the base's autotune choices (made here where no earlier worker's were handed over)."""
        compile_now = self.backend.compiles and not self.seeded
        # Autotuned kernels are tuned in the oracle before the runner starts, which is then given
        # their choices instead of tuning the base again (autotune_share.py).
        tune_now = self.oracle.autotuned > 0 and not self.spec.get("base_autotune")
        if compile_now or tune_now:
            # The run's first worker: its oracle compiles (and tunes) the base for every listed shape
            # now, before any candidate, and the runner starts with those binaries and choices.
            for shape in self.harness.shapes_for(self.device):
                self._boot(shape, lambda shape=shape: self._base_call(shape, "compiling the base"))
        if compile_now:
            files = read_folder(self.caches.private, BASE_SEED_LIMIT) or {}
            runner_seed = {k: base64.b64encode(v).decode() for k, v in files.items()}
        self.autotune, self.autotune_boot = self.oracle.autotune()  # after the base calls chose
        if compile_now or tune_now:
            clock.mark("base_compile")
        return runner_seed

    def _share_tuning(self) -> None:
        """Before a runner call: hand the runner the base's autotune choices it lacks (the oracle
        tuned a new key meanwhile, a fresh shape's), so it never tunes the base or what it shares."""
        if self.oracle.chosen > table_size(self.autotune):
            self.autotune = self.oracle.autotune()[0]
        size = table_size(self.autotune)
        if size > self.link.tuning_sent:
            self.link.request({"op": "autotune", "table": self.autotune})
            self.link.tuning_sent = size

    def _profile_base(self, clock: PhaseClock) -> None:
        """The base's profiles and the run's cached inputs, reference and base outputs."""
        # What the base does per shape, recorded by the runner's monitor before any candidate is
        # loaded there (or handed over by the parent); base and A/A compile now where kernels do.
        for si, shape in enumerate(self.harness.shapes_for(self.device)):
            # The first shape always runs in both processes: a first call's one-off set-up (the
            # interpreter's too) is paid here, not by the first candidate of a replacement worker.
            self._boot(shape, lambda shape=shape, si=si: self.base_profile(
                shape, warm=self.backend.compiles or si == 0))
        clock.mark("base_compile_and_profile")
        # The run's inputs, reference and base outputs for every listed shape and trial, made now
        # (input_cache.py): the first candidate finds everything made.
        for shape in self.harness.shapes_for(self.device):
            for t in range(TRIALS):
                self._boot(shape, lambda shape=shape, t=t: self.listed_base(
                    self.listed(shape, self._profile_seed, t)))
        clock.mark("input_cache")

    # -- device memory (memory.py) ---------------------------------------------------------------
    def _boot(self, shape: dict, step) -> None:
        """A boot step on one shape. A shape the device cannot hold is left to the evaluations,
        whose verdicts name it (out_of_memory): the boot does not fail for it."""
        try:
            step()
        except DeviceMemoryShort as e:
            self.memory.decisions.append({"shape": shape, "step": e.what, "action": "skipped_at_boot",
                                          "need_bytes": e.need, "free_bytes": e.free})

    def _held_parts(self) -> dict[str, int]:
        """Device bytes the judge holds for the referee, by holder: its cache, and the regions and
        pins of its channels to the runner (a booting replacement's too) and to the oracle."""
        runner = [self.link.chan] + ([self.pending.chan] if self.pending is not None else [])
        return {"cache": self.inputs.bytes(), "runner_regions": _region_bytes(runner),
                "oracle_regions": _region_bytes([self.oracle.chan])}

    def _held_bytes(self) -> int:
        """Device bytes the judge holds for the referee (`_held_parts` in all)."""
        return sum(self._held_parts().values())

    def _release_memory(self) -> None:
        """The judge's and the runner's cached device blocks back to the device (the oracle gives
        its own back after every request)."""
        self.backend.release()
        if self.runner_ready and not self.link._dead():
            try:
                self.link.request({"op": "release"})
            except (RunnerFailed, CandidateError):
                pass  # nothing was given back: the room measured next says so

    def call_need(self, shape: dict, link) -> int | None:
        """Device bytes one call on `shape` in a child (`link`: the runner's or the oracle's) needs
        beyond the cache (None before the shape's first entry)."""
        sizes = self.memory.sizes_of(shape)
        if sizes is None:
            return None
        return sizes.call() + region_growth(link, sizes.inputs, sizes.reply)

    def profile_need(self, shape: dict, link) -> int | None:
        """Device bytes the runner's profile of the base on `shape` needs beyond the cache, with the
        growth of the regions that carry its set (None before the shape's first entry)."""
        sizes = self.memory.sizes_of(shape)
        if sizes is None:
            return None
        return sizes.profile() + region_growth(link, sizes.inputs, 0)

    def _base_call(self, shape: dict, what: str) -> None:
        """The base once on the run's first trial of `shape`, in the oracle (compiling it there)."""
        entry = self.listed(shape, self._profile_seed, 0)
        self.with_room(shape, self.call_need(shape, self.oracle), [entry.key], what,
                       lambda: self.call(self.base_fn, fresh_copy(entry.originals), float("nan"), None),
                       idle=self.idle_while("oracle"))

    def _memory_short(self, out: dict, e: DeviceMemoryShort) -> None:
        """The verdict of an evaluation a shape did not fit the device for: what it needed, what was free."""
        out["violations"].append("out_of_memory")
        out["details"]["messages"].append(str(e))
        out["details"]["memory_short"] = e.as_dict()

    def _peak_dtypes(self) -> list[str]:
        """The dtypes whose matmul rate the flops roofline needs (none without `flops`)."""
        if not self.harness.flops:
            return []
        names = {s.get("dtype") for s in self.harness.shapes_for(self.device)}
        return sorted(n for n in names if isinstance(n, str))

    def base_timing(self, originals: list[dict], seed: int) -> tuple[float, float, list[int]]:
        """Check (b)'s base timing, in the oracle (the base is target code; no candidate runs there)."""
        return self.oracle.time_base(originals, seed)

    # -- calls --------------------------------------------------------------------------------
    def call(self, fn, inputs: dict, dirty: float, rec, sizes: list[int] = (),
             pristine: dict | None = None, untimed: bool = False) -> tuple:
        """One call of `fn` with poisoned outputs; returns its outputs (private to the judge).

        `fn`: `BASE`, the trusted base run by the oracle on a copy of `inputs` (which the judge's
        callers hand it and never read back), or a RemoteFn run by the runner (watched by its
        monitor when `rec` is not None), after which `inputs` holds the post-call values.
        `sizes`: byte sizes of the expected outputs, used to dirty the allocator for them.
        `pristine`: the cached inputs `inputs` copies bit for bit (write-only outputs aside): the
        runner gets them from its pinned copy (shared_region.py) instead of a transfer.
        `untimed`: a call never timed (a fresh shape's): the base's new autotune keys are not
        benchmarked in the oracle.
        """
        if isinstance(fn, RemoteFn):
            self._share_tuning()
            return self.link.call(fn, inputs, dirty, rec is not None, sizes, self.harness.outputs, pristine)
        if fn is not BASE:
            raise TypeError(f"the judge runs no function itself: {fn!r}")
        return self.oracle.call_base(inputs, dirty, sizes, untimed)

    def expected(self, inputs: dict) -> tuple:
        """The reference outputs for `inputs` (on copies, so the reference cannot disturb them)."""
        return C.as_tuple(self.reference(**C.clone_inputs(inputs)))

    def base_profiles(self) -> dict:
        """The per-shape base profiles as plain data (for the parent to hand to later workers)."""
        return dict(self._profiles)

    def base_profile(self, shape: dict, warm: bool = False, judge: bool = True) -> None:
        """Have the runner record what the base does on one call for this shape (its launches, ops,
        files, threads); `warm`: also compile the base (and the A/A copy) there, and here (`judge`)."""
        key = json.dumps(shape, sort_keys=True)
        if key in self._profiles and not warm:
            return
        # The run's first trial inputs: the first candidate's check of this shape finds them made.
        entry = self.listed(shape, self._profile_seed, 0)
        originals = entry.originals
        if warm and judge:
            self._base_call(shape, "warming the base")  # the judge's own base
        reply, _ = self.with_room(shape, self.profile_need(shape, self.link),
                                  [entry.key], "profiling the base", lambda: self.link.request(
                                      self._profile_request(shape, warm), originals,
                                      pin=list(C.tensors_of(originals).values())),
                                  idle=self.idle_while("runner"))
        if key not in self._profiles:
            self._profiles[key] = reply["record"]

    # -- the evaluation -----------------------------------------------------------------------
    def evaluate(self, code: str | None, source_path: str | None, cid: int, timing: str, seed: int,
                 fresh: bool = False, contender_at: float | None = None,
                 contender_shapes: dict[str, float] | None = None, promote_at: float | None = None,
                 rendered: bool = False) -> dict:
        """The verdict (as a dict) for one candidate; never raises for candidate failures.

        `fresh`: the candidate compiles in a new, empty Triton cache folder and runs in a runner that
        has run no other candidate (the final check).
        `rendered`: kernelsmith wrote `code` from the base's by setting launch values (params, sweep):
        it holds no code the base lacks, so the runner may run the next candidate too; after any
        other candidate code (a model's, a rewrite, a user's file) the runner is replaced.
        `timing="staged"`: screen timing on representative shapes, then on every shape, then,
        where the screen geomean reaches `contender_at`, the full measurement (device time, A/A
        control) right away, on the same loaded candidate (timing/staged.py); from `promote_at` even
        where the screen loses a shape.
        """
        out = in_progress()
        loaded = False
        took, runner_clock = time.monotonic(), PhaseClock()
        # This evaluation's memory decisions (details.memory), from those made for its runner's
        # warm-up after the previous verdict on.
        self.memory.begin(self._runner_decisions)
        self._runner_decisions = []
        self.dirty = self.dirty or (fresh and self.loaded_any)
        try:
            self._take_next_runner(runner_clock)
        except RunnerFailed as e:
            raise InfrastructureError(e.message) from None
        started_s = round(time.monotonic() - took, 4)
        self.link.chan.reset_stats()
        try:
            loaded = self._evaluate(out, code, source_path, cid, timing, seed, fresh, contender_at,
                                    contender_shapes, rendered, promote_at)
        except RunnerFailed as e:
            out["violations"].append(e.reason)
            out["details"]["messages"].append(e.message)
            out["error"] = out["error"] or e.message
        except (Rejected, CandidateError) as e:  # from the runner's integrity or settle answers
            out["violations"].append(getattr(e, "reason", "crash"))
            out["details"]["messages"].append(str(e)[:2000])
        if loaded and not self.link._dead():
            try:
                settled = self.link.request({"op": "settle"})[0]
                late = settled.get("late")
                late = [str(x)[:300] for x in late] if isinstance(late, list) else []
                # Each autotune choice the runner ran with: given (the base's) or its own tuning.
                tuned = checked_report(settled.get("autotune"))
                if tuned:
                    out["details"]["autotune"] = tuned
            except (RunnerFailed, Rejected, CandidateError) as e:
                out["violations"].append(getattr(e, "reason", "protocol"))
                late = []
            # Watched calls cover loading and correctness; this also covers the timed calls.
            if late and "monkeypatch" not in out["violations"]:
                out["violations"].append("monkeypatch")
                out["details"]["messages"].append("changed process-global settings that outlive the call: "
                                                  + "; ".join(late[:5]))
        if self.link.sweep():
            out["details"]["messages"].append("processes the candidate left running were killed")
        tampered = self.inputs.verify()
        regions = self.link.chan.regions
        if regions is not None:
            if tampered:  # the pins were made from the changed originals
                regions.pins.drop_all()
            elif regions.pins.tampered():  # CUDA pins are writable through IPC: compared, restored
                out["violations"].append("protocol")
                out["details"]["messages"].append(
                    "the runner wrote the judge's shared copy of cached inputs (restored)")
        if tampered:
            out["violations"].append("input_mutation")
            out["details"]["messages"].append(
                "the referee's cached inputs or reference outputs changed during this evaluation "
                "(shapes " + "; ".join(tampered[:3]) + "): written through another buffer")
        out["details"]["input_cache"] = self.inputs.report()
        out["details"]["memory"] = {**self.memory.report(), "boot_decisions": self.boot_memory,
                                    "judge_allocator": self.backend.allocator_bytes()}
        # A runner that loaded this candidate's code judges nothing more: replaced now, its
        # successor booting until the next evaluation (details.runner: what waiting for it cost).
        out["details"]["runner"] = {"pid": self.link.pid, "fresh_wait_s": started_s,
                                    "spawned": self.template.spawned, "phase_s": runner_clock.phases}
        mark = len(self.memory.decisions)
        try:
            self.start_next_runner()
        except RunnerFailed as e:
            out["details"]["messages"].append(f"the next runner could not be started: {e.message}")
        self._runner_decisions = self.memory.decisions[mark:]
        # What crossed to the runner and back, and the judge's seconds spent copying it.
        out["details"]["channel"] = dict(self.link.chan.stats)
        if self.regions_off:
            out["details"]["channel"]["regions_off"] = self.regions_off
        return out

    def _evaluate(self, out: dict, code: str | None, source_path: str | None, cid: int, timing: str,
                  seed: int, fresh: bool, contender_at: float | None,
                  contender_shapes: dict[str, float] | None = None, rendered: bool = False,
                  promote_at: float | None = None) -> bool:
        """Fill `out`; True once the runner has loaded the candidate (it must then be settled)."""
        msgs = out["details"]["messages"]
        clock = PhaseClock()
        out["details"]["phase_s"] = clock.phases  # the first calls of each shape include compilation
        self.inputs.begin()  # this evaluation's cache hits and misses (details.input_cache)
        loaded = False
        shapes = self.harness.shapes_for(self.device)
        try:
            for shape in shapes:
                # A shape the boot could not profile for lack of memory (`_boot`): profiled now, in a
                # runner no candidate code has reached yet (none is loaded until every shape is).
                if shape_key(shape) not in self._profiles and not self.loaded_any:
                    out["details"]["failed_shape"] = shape
                    self.base_profile(shape)
            if code is not None:
                try:
                    compile(code, str(source_path), "exec")
                except SyntaxError as e:
                    raise Rejected("compile_error", f"syntax error at line {e.lineno}: {e.msg}",
                                   "".join(traceback.format_exception_only(type(e), e))) from None
                for viol, msg in static.static_violations(code, self.base_code):
                    out["violations"].append(viol)
                    msgs.append(msg)
                out["details"]["same_as_base"] = static.same_program(code, self.base_code)
                if not static.defines(code, self.entry):
                    raise Rejected("import_error",
                                   f"the candidate does not define the entry function {self.entry!r}")
            loaded = True
            if code is not None:
                self.loaded_any = True
                self.dirty = self.dirty or fresh or not rendered
            self.link.request({"op": "load", "source_path": source_path, "cid": cid, "fresh": bool(fresh),
                               "shapes": [json.dumps(sh, sort_keys=True) for sh in shapes]})
            fn = RemoteFn("cand")
            clock.mark("load")
            for si, shape in enumerate(shapes):
                out["details"]["failed_shape"] = shape  # until it passes (diagnose.py names it)
                began = time.perf_counter()
                checked = self.check_shape(fn, shape, si, cid, seed, WATCHED)
                # Which shape a verdict's seconds go to (inputs made, evictions, the calls).
                checked["check_s"] = round(time.perf_counter() - began, 3)
                out["shapes"].append(checked)
            clock.mark("correctness")
            for shape in C.fresh_shapes_for(self.harness, self.device, seed, cid):
                out["details"]["failed_shape"] = shape
                self.check_fresh(fn, shape, cid, seed, WATCHED)
                out["fresh_shapes"].append(shape)
            clock.mark("fresh_shapes")
            out["details"].pop("failed_shape", None)
            out["correct"] = True
        except Rejected as r:
            out["violations"].append(r.reason)
            msgs.append(r.message)
            out["error"] = r.error
        except RunnerFailed:
            raise
        except DeviceMemoryShort as e:
            self._memory_short(out, e)
        except Exception as e:  # noqa: BLE001 - candidate code raised (in the runner): a verdict
            name, text = classify_exception(e)
            shape = out["details"].get("failed_shape")
            if device_oom(text) and isinstance(shape, dict):
                self._memory_short(out, DeviceMemoryShort(
                    shape, self.call_need(shape, self.link), self.memory.room() or 0,
                    "a correctness call", self.memory.sizes_of(shape)))
                out["error"] = text
            else:
                out["violations"].append(name)
                out["error"] = text
                msgs.append(text.strip().splitlines()[-1] if text.strip() else name)
        if not loaded:
            return False
        # Integrity, as the runner's monitor saw it: findings can only reject.
        reply, _ = self.link.request({"op": "integrity", "complete": out["correct"],
                                      "library_base": code is not None and self.harness.library_base})
        for item in reply.get("found") or []:
            viol, msg = (item + ["", ""])[:2] if isinstance(item, list) else ("protocol", repr(item))
            out["violations"].append(viol if viol in REJECTIONS else "protocol")
            msgs.append(str(msg)[:2000])
        clock.mark("integrity")
        try:
            if out["correct"] and not out["violations"] and timing != "none" and self.backend.timed:
                from kernelsmith.referee.timing.ab import time_candidate

                def timer(mode, indices, host):
                    return time_candidate(self, fn, cid, seed, mode, out, host=host, indices=indices)

                if timing == "staged":
                    from kernelsmith.referee.timing.staged import run_staged

                    sizes = [self.shape_size(shape, seed) for shape in shapes]
                    best = [(contender_shapes or {}).get(shape_key(s)) for s in shapes]
                    run_staged(timer, out, sizes, contender_at, clock.mark, best_shapes=best,
                               promote_at=promote_at)
                else:
                    timer(timing, None, True)
                    clock.mark(f"{timing}_timing")
        except RunnerFailed:
            raise
        except DeviceMemoryShort as e:
            self._memory_short(out, e)
        except Exception as e:  # noqa: BLE001
            name, text = classify_exception(e)
            out["violations"].append(name)
            out["error"] = text
        return True
