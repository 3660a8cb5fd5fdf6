"""The referee: is a candidate kernel correct, honest, and how much faster than the base?

`Referee(task)` owns one isolated worker process (see process.py / worker.py) and turns every
outcome, including crashes and hangs, into a `Verdict`.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

from kernelsmith.errors import KernelsmithError
from kernelsmith.paths import cache_dir
from kernelsmith.referee.backend import device_info, usable_device
from kernelsmith.referee.checks.diagnose import key_line
from kernelsmith.referee.memory import device_memory_cap
from kernelsmith.referee.proc.autotune_share import checked_table, table_size
from kernelsmith.referee.proc.compile_cache import BASE_SEED_LIMIT, read_folder
from kernelsmith.referee.proc.pinned import task_files
from kernelsmith.referee.proc.process import WorkerDied, WorkerProcess, WorkerTimeout, Zygote
from kernelsmith.referee.proc.warm import referee_folders, worker_env
from kernelsmith.referee.proc.warm import take as take_warm
from kernelsmith.referee.timing.phase_clock import PhaseClock
from kernelsmith.referee.verdict import NO_TIMING_LINE, Verdict
from kernelsmith.safefs import write_file
from kernelsmith.sandbox import hide_environ
from kernelsmith.scratch import ScratchDir, remove_tree

__all__ = ["Referee", "RefereeError", "Verdict", "device_info", "NO_TIMING_LINE"]

TIMINGS = ("full", "screen", "staged", "none")
INIT_TIMEOUT_S = 300.0
DEFAULT_TIMEOUT_S = {"cuda": 300.0, "interpret": 600.0}
# Rejections that say a candidate computed wrong numbers or did not build, nothing about what it did
# to the worker (which the judge checks after every evaluation whatever the verdict: its cached
# inputs' fingerprints, process-global settings, processes left running). See `_keeps_worker`.
HONEST_FAILURES = frozenset({"compile_error", "incorrect", "wrong_on_fresh_shape", "shape_mismatch",
                             "dtype_mismatch", "unwritten_output"})


class RefereeError(KernelsmithError):
    """The referee itself cannot work (broken harness or base file), not a bad candidate. `stage`
    "run": the task loaded, and the base or the harness failed on a listed shape."""

    def __init__(self, message: str, stage: str = "load"):
        super().__init__(message)
        self.stage = stage

    def verdict(self) -> Verdict:
        """The base's rejection this error stands for: a crash on a listed shape (its first message
        the line saying why, where one does: diagnose.key_line), else a load error (import_error)."""
        text = str(self)
        if self.stage != "run":
            return Verdict.rejected("import_error", text)
        why = key_line(text)
        return Verdict.rejected("crash", text, details={"messages": [why]} if why else {})


class Referee:
    """Evaluates candidates for one Task in an isolated, recycled worker process."""

    ADOPTS_WARM = True  # takes a fork server warm.warm started for its device and GPU

    def __init__(self, task, *, device: str = "auto", gpu: int | None = None, seed: int = 0,
                 timeout_s: float | None = None, workdir: Path | None = None,
                 prefork: bool | None = None, zygote: bool = True, input_cache_bytes: int | None = None,
                 shared_regions: bool = True, device_memory_bytes: int | None = None):
        self.device = usable_device(device)
        self.task = task
        # Tokens handed to this process stay in its /proc/<pid>/environ; candidates must not read it.
        hide_environ()
        # The files a new worker reads (base, its siblings, harness, stubs) as they are now.
        self.pinned = task_files(task)
        self.gpu = gpu
        self.seed = int(seed)
        self.timeout_s = float(timeout_s or DEFAULT_TIMEOUT_S[self.device])
        self._tmp = None
        # A fork server started for this device and GPU while the run was setting up (warm.py).
        adopted = take_warm(self.device, gpu) if workdir is None and zygote else None
        if adopted is not None:
            self._tmp = adopted[0]
            workdir = Path(self._tmp.name)
        elif workdir is None:
            self._tmp = ScratchDir("kernelsmith-referee-", owned=True)
            workdir = Path(self._tmp.name)
        # `workdir` holds three folders: `work` (the sandbox's only writable one: workers and their
        # fork server run there), `sources` (candidate files, written here) and `logs`.
        self.workdir, self.sources, self.logs = referee_folders(Path(workdir).resolve())
        # Bytes each worker may keep of the listed shapes' inputs and outputs (input_cache.py);
        # None: bounded by the free device memory on CUDA (memory.py), 256 MiB elsewhere.
        self.input_cache_bytes = input_cache_bytes
        # The device bytes the referee's processes may plan with (memory.py); None: what the
        # device reports free, or $KERNELSMITH_DEVICE_MEMORY.
        self.device_memory_bytes = (device_memory_cap() if device_memory_bytes is None
                                    else int(device_memory_bytes))
        # False: every tensor between judge and runner travels in message files (no shared regions).
        self.shared_regions = bool(shared_regions)
        self.device_info: dict | None = None
        self._base_profiles: dict = {}
        # Device numbers measured by the first worker before any candidate ran in it; later workers
        # get them from here (never from cache_dir()/device.json, which a candidate can rewrite).
        self.calibration: dict = {}
        # A spare worker boots while the current one evaluates, so replacing a worker after a
        # rejection costs nothing. Off on CUDA: a booting process must not disturb a measurement.
        self.prefork = (self.device == "interpret") if prefork is None else bool(prefork)
        self._worker: WorkerProcess | None = None
        self._spare: tuple[WorkerProcess, str] | None = None
        # A fork server with torch and Triton imported: a fresh worker costs a fork, not an import.
        self.use_zygote = zygote
        self._zygote: Zygote | None = adopted[1] if adopted is not None else None
        self.workers_started = 0
        # The first worker's private base binaries, read when it had run nothing but the base;
        # handed to every later worker so a replacement loads the base instead of compiling it.
        self._base_seed: dict[str, str] | None = None
        self.last_seeded = 0
        # The base's autotune choices (autotune_share.py), made by the first worker's oracle (and
        # later ones, for new keys), handed to every later worker: the base is tuned once per run.
        self._autotune: dict = {}
        # The last worker's oracle at boot: {"kernels", "given", "tuned", "compiled"}.
        self.last_autotune: dict = {}
        self.boot_phases: dict | None = None

    # -- worker lifecycle ---------------------------------------------------------------------
    def _spec(self) -> dict:
        op = self.task.operator
        return {"root": str(self.task.root), "file": op.file, "entry": op.entry, "harness": str(op.harness),
                "variant": op.variant,
                "stubs": {k: str(v) for k, v in (self.task.target.stubs or {}).items()},
                "device": self.device, "workdir": str(self.workdir), "seed": self.seed,
                "base_profiles": self._base_profiles, "calibration": self.calibration,
                "base_cache_seed": self._base_seed or {}, "base_autotune": self._autotune,
                "input_cache_bytes": self.input_cache_bytes,
                "shared_regions": self.shared_regions, "device_memory_bytes": self.device_memory_bytes}

    def _env(self) -> dict[str, str]:
        return worker_env(self.device, self.gpu)

    def _spawn(self) -> tuple[WorkerProcess, str]:
        """Start a worker and send its init request (answered later, see _ready)."""
        clock = PhaseClock()
        if self.use_zygote and (self._zygote is None or not self._zygote.alive()):
            if self._zygote is not None:
                self._zygote.close()
            self._zygote = Zygote(self._env(), self.workdir, log=self.logs / "zygote.log")
            try:
                self._zygote.wait_ready()  # a Python with torch and Triton imported, in the sandbox
            except OSError:
                pass  # the fork below fails too and falls back to a plain worker
            clock.mark("zygote_start")
            # Its imports, each a phase; "zygote_start" keeps the rest (the interpreter, the sandbox).
            imports = {f"import {k}": v for k, v in self._zygote.import_s.items()}
            rest = clock.phases["zygote_start"] - sum(imports.values())
            clock.phases["zygote_start"] = round(max(0.0, rest), 4)
            clock.phases.update(imports)
        self.pinned.restore()  # a rejected candidate's rewrite of them must not reach this worker
        worker = WorkerProcess(self._env(), self.workdir, zygote=self._zygote)
        clock.mark("fork" if worker.forked else "worker_process")
        worker.spawn_phases = clock
        self.workers_started += 1
        try:
            nonce = worker.send({"op": "init", "fd": worker.fd_in_child, "spec": self._spec()})
        except WorkerDied as e:
            worker.kill()
            raise RefereeError(f"the referee's worker failed to start: {e}") from None
        return worker, nonce

    def _ready(self, spawned: tuple[WorkerProcess, str], retry: bool = True) -> WorkerProcess:
        """Wait for a spawned worker's init answer; RefereeError if it cannot load the task."""
        worker, nonce = spawned
        try:
            reply = worker.wait(nonce, INIT_TIMEOUT_S)
        except (WorkerDied, WorkerTimeout) as e:
            worker.kill()
            raise RefereeError(f"the referee's worker failed to start: {e}") from None
        if not reply.get("ok"):
            worker.kill()
            if reply.get("stage") == "run":
                raise RefereeError(f"the base of {self.task.operator.file} failed on a listed shape in the "
                                   f"worker:\n{reply.get('error')}", stage="run")
            raise RefereeError(f"cannot load {self.task.operator.file} and its harness in the worker:\n"
                               f"{reply.get('error')}")
        worker.base_cache = reply.get("base_cache")
        worker.runner_cache = reply.get("runner_cache")  # the runner's private base folder
        changed = self.pinned.restore()
        if changed:
            # Rewritten while this worker started (it may have loaded them): it is not used.
            self._kill(worker)
            if not retry:
                raise RefereeError("the task's files keep changing while workers start: "
                                   + ", ".join(changed))
            return self._ready(self._spawn(), retry=False)
        self.device_info = reply.get("device")
        self.last_seeded = int(reply.get("seeded") or 0)  # base binaries the worker loaded, not compiled
        self.last_autotune = reply.get("autotune") or {}
        self._keep_autotune(reply)
        if self.boot_phases is None:  # the first worker's, in seconds: this side's, then the worker's own
            clock = getattr(worker, "spawn_phases", None) or PhaseClock()
            clock.mark("init_answer")
            inside = reply.get("boot_phases") or {}
            # What the init answer took beyond the worker's own phases: imports, the runner's fork.
            rest = clock.phases["init_answer"] - sum(inside.values())
            clock.phases["init_answer"] = round(max(0.0, rest), 4)
            self.boot_phases = {**clock.phases, **inside}
        self._base_profiles = reply.get("base_profiles") or self._base_profiles
        if self._base_seed is None and worker.base_cache and self.device != "interpret":
            # Now, before this worker has seen any candidate, its private folder holds base
            # binaries only (compile_cache.py).
            files = read_folder(worker.base_cache, BASE_SEED_LIMIT)
            self._base_seed = {k: base64.b64encode(v).decode() for k, v in (files or {}).items()}
        if not self.calibration and reply.get("calibration"):
            self.calibration = reply["calibration"]
            self._record_calibration()
        return worker

    def _record_calibration(self) -> None:
        """Keep the device numbers in cache_dir()/device.json as a record (never read back)."""
        try:
            path = cache_dir() / "device.json"
            data = {"device": self.device_info, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    **self.calibration}
            tmp = path.with_suffix(f".{id(self)}.tmp")
            tmp.write_text(json.dumps(data, indent=2))
            tmp.replace(path)
        except OSError:
            pass  # only a record

    def _start(self) -> WorkerProcess:
        spawned, self._spare = self._spare, None
        if spawned is not None and spawned[0].proc.poll() is not None:
            self._kill(spawned[0])  # the spare died waiting (its fork server with it): not used
            spawned = None
        spawned = spawned or self._spawn()
        try:
            return self._ready(spawned)
        except RefereeError:
            if not spawned[0].forked:
                raise
            # A forked worker that cannot start (say, a device runtime that dislikes fork) falls
            # back to a freshly spawned interpreter for the rest of this Referee's life.
            self.use_zygote = False
            if self._zygote is not None:
                self._zygote.close()
                self._zygote = None
            return self._ready(self._spawn())

    def start(self) -> None:
        """Boot the worker now (CUDA context, base compiled and profiled) instead of at the first
        evaluation; RefereeError when the task cannot load."""
        if self._worker is None:
            self._worker = self._start()

    def _recycle(self) -> None:
        if self._worker is not None:
            self._kill(self._worker)
            self._worker = None

    @staticmethod
    def _kill(worker: WorkerProcess, close: bool = False) -> None:
        """Stop a worker and delete its private base kernel cache."""
        worker.close() if close else worker.kill()
        for folder in (getattr(worker, "base_cache", None), getattr(worker, "runner_cache", None)):
            if folder:
                remove_tree(folder, tries=1)

    # -- evaluation ---------------------------------------------------------------------------
    def evaluate(self, code: str | None, *, candidate_id: int = 0, timing: str = "full",
                 seed: int | None = None, fresh_compile: bool = False,
                 contender_at: float | None = None,
                 contender_shapes: dict[str, float] | None = None, promote_at: float | None = None,
                 rendered: bool = False) -> Verdict:
        """The verdict for `code` (a full copy of the operator file; None = the base itself).

        `seed`: the run seed for this evaluation's inputs (default: the Referee's), so a final
        re-measurement with new inputs needs no second Referee (and no second cold start).
        `fresh_compile`: compile the candidate in an empty Triton cache, never loading a binary
        found on disk (the final re-measurement of a winner).
        `timing="staged"` (the search): a screen on representative shapes, then on every shape
        for a candidate near `contender_at`, then the full device-time measurement with its A/A
        control in the same call when the all-shape screen geomean reaches `contender_at`
        (timing/staged.py; `details.timing_depth` says how deep it went). `contender_shapes`: the best's
        speedup per listed shape (keyed by the shape's sorted JSON), which scales the bar to the
        representative shapes' screen. `promote_at`: an all-shape screen geomean from which the full
        measurement is taken even where the screen loses a shape (search/rules.py PROMOTE_MARGIN).
        `rendered`: kernelsmith wrote `code` from the base's own by setting launch values (the params
        mutator, the sweep), no model did; its honest failure keeps the worker (`_keeps_worker`).
        """
        if timing not in TIMINGS:
            raise ValueError(f"timing must be one of {TIMINGS}, got {timing!r}")
        start = time.monotonic()
        verdict = self._evaluate(code, int(candidate_id), timing, self.seed if seed is None else int(seed),
                                 fresh_compile, contender_at, contender_shapes, promote_at, rendered=rendered)
        verdict.eval_s = round(time.monotonic() - start, 3)
        if verdict.device == {} and self.device_info:
            verdict.device = dict(self.device_info)
        verdict.finalize()
        # Whatever the candidate did to the worker dies with it, unless `_keeps_worker` says it did
        # nothing (a replacement costs a fork, a CUDA context and the base loaded again).
        if not verdict.accepted and not self._keeps_worker(verdict, rendered):
            self._recycle()
        return verdict

    def _keeps_worker(self, verdict: Verdict, rendered: bool) -> bool:
        """Whether the worker judges the next candidate after this rejection: a malformed proposal
        never reached it; a rendered candidate (the base's code, launch values set by kernelsmith)
        whose violations are all HONEST_FAILURES leaves it as an accepted candidate does, once no
        pinned task file changed. On the H200 a replacement took 3.5-4 s: 90 of the 120 GPU-s of
        LMDeploy's router sweep, whose 24 blocks below its 192 experts give wrong answers."""
        if verdict.reason == "malformed_proposal":
            return True
        honest = bool(verdict.violations) and set(verdict.violations) <= HONEST_FAILURES
        return rendered and honest and self._worker is not None and not self.pinned.restore()

    def _evaluate(self, code: str | None, cid: int, timing: str, seed: int, fresh: bool = False,
                  contender_at: float | None = None, contender_shapes: dict | None = None,
                  promote_at: float | None = None, retried: bool = False, rendered: bool = False) -> Verdict:
        if code is not None and (not isinstance(code, str) or not code.strip()):
            return Verdict.rejected("malformed_proposal", "the candidate is empty or not text")
        source_path = None
        if code is not None:
            # In a folder candidate code cannot write, without following any link (safefs.py).
            source_path = self.sources / f"c{cid}" / Path(self.task.operator.file).name
            write_file(source_path, code)
        if self._worker is None:
            try:
                self._worker = self._start()
            except RefereeError as e:
                if code is None:
                    return e.verdict()
                raise
        if self.prefork and self._spare is None:
            self._spare = self._spawn()
        msg = {"op": "evaluate", "source_path": str(source_path) if source_path else None,
               "candidate_id": cid, "timing": timing, "seed": seed, "fresh_compile": fresh,
               "contender_at": contender_at, "contender_shapes": contender_shapes, "promote_at": promote_at,
               "rendered": bool(rendered)}
        try:
            reply = self._worker.request(msg, self.timeout_s)
        except WorkerTimeout as e:
            tail = self._worker.log_tail(20)
            self._recycle()
            text = f"{e} (wall-clock limit; process group killed)\n{tail}"
            return Verdict.rejected("timeout", text.strip())
        except WorkerDied as e:
            self._recycle()
            if not retried:
                # The judge died, not (only) the runner: its fork server, the host or a signal from
                # outside may have killed it. Judged once more on a new worker; a second death is
                # the candidate's own.
                again = self._evaluate(code, cid, timing, seed, fresh, contender_at, contender_shapes,
                                       promote_at, retried=True, rendered=rendered)
                again.details.setdefault("messages", []).insert(0, f"judged again after: {e}"[:2000])
                return again
            return Verdict.rejected("crash", str(e))
        if not reply.get("ok"):
            self._recycle()
            if reply.get("infrastructure") and not retried:
                # The referee's own machinery failed, not the candidate: judged again on a new worker.
                return self._evaluate(code, cid, timing, seed, fresh, contender_at, contender_shapes,
                                      promote_at, retried=True, rendered=rendered)
            return Verdict.rejected("crash", reply.get("error"))
        self._keep_autotune(reply)
        verdict = Verdict.from_json(reply["verdict"])
        verdict.device = dict(self.device_info or {})
        return verdict

    def _keep_autotune(self, reply: dict) -> None:
        """Keep a worker's table of the base's autotune choices where it holds more than the one kept
        (the judge's: made by its oracle, which never runs candidate code)."""
        table = reply.get("base_autotune")
        try:
            table = checked_table(table)
        except ValueError:
            return
        if table_size(table) > table_size(self._autotune):
            self._autotune = table

    # -- context manager ----------------------------------------------------------------------
    def close(self) -> None:
        """Stop the worker and remove the temporary work folder."""
        if self._worker is not None:
            self._kill(self._worker, close=True)
            self._worker = None
        if self._spare is not None:
            self._kill(self._spare[0])
            self._spare = None
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None
        if self._tmp is not None:
            self._tmp.remove()  # retried: a killed worker's processes may still add a file
            self._tmp = None

    def __enter__(self) -> Referee:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
