"""The runner: the untrusted half of a referee worker, where candidate code runs.

A child of the judge (judge.py), in the same sandbox. It loads the base and the candidate, runs
them on the inputs the judge sends (through channel.py's shared memory), returns their outputs
and the post-call values of every input, runs the interleaved timing loop and returns the raw
per-call times, and reports what the integrity monitor (integrity.py) saw. Everything it says is
a claim the judge checks or can only use to reject: it holds no answer channel, decides no verdict
field and never learns a request nonce.
"""

from __future__ import annotations

import base64
import os
import site
import sys
import time
import traceback
from contextlib import ExitStack, nullcontext
from pathlib import Path

import torch

from kernelsmith.harness.model import load_harness
from kernelsmith.loader import load_operator_module
from kernelsmith.referee.backend import get_backend
from kernelsmith.referee.checks import correctness as C
from kernelsmith.referee.checks.integrity import Monitor, Record, thread_idents, violations_vs_base
from kernelsmith.referee.checks.settings import GlobalSettings
from kernelsmith.referee.checks.shape_trials import Rejected, classify_exception
from kernelsmith.referee.checks.snapshot import Snapshot
from kernelsmith.referee.checks.trials import FreshOutputs
from kernelsmith.referee.link.channel import Channel
from kernelsmith.referee.link.serve import serve as serve_requests
from kernelsmith.referee.proc.autotune_share import Tuning, checked_table
from kernelsmith.referee.proc.compile_cache import CompileCaches


def preload_lazy_torch() -> None:
    """Import the torch modules that torch imports lazily on a first dispatch-mode switch.

    Their classes are built on first import; built during a watched call (KernelBench tasks' first
    candidate, since the inputs are cached), the class set-up reads as the candidate patching the
    runtime.
    """
    import torch._subclasses.functional_tensor  # noqa: F401
    import torch._subclasses.schema_check_mode  # noqa: F401
    import torch.fx.experimental.proxy_tensor  # noqa: F401


class RunnerSession:
    """The runner's state: monitor, base module, the loaded candidate and its Record."""

    def __init__(self, spec: dict):
        self.device = spec["device"]
        self.workdir = Path(spec["workdir"])
        # Its private base folder is made by the judge (which tells the parent to delete it).
        self.caches = CompileCaches(Path(spec["runner_cache"]))
        seed = spec.get("base_cache_seed") or {}
        self.caches.seed({k: base64.b64decode(v) for k, v in seed.items()})
        self.backend = get_backend(self.device)
        self.backend.init_context()
        self.dev = self.backend.device
        self.root, self.file, self.entry = Path(spec["root"]), spec["file"], spec["entry"]
        self.stubs = {k: Path(v) for k, v in (spec.get("stubs") or {}).items()}
        roots = [sys.prefix, sys.base_prefix, *site.getsitepackages(), site.getusersitepackages(),
                 str(self.root), *[p for p in sys.path if p]]
        self.monitor = Monitor(self.device, roots)
        preload_lazy_torch()
        self.monitor.install()
        self.tuning = Tuning()  # the kernels of what loads from here on: the harness, base, A/A, candidates
        self.shared_tuning: dict = {}  # the base's autotune choices the judge gave (autotune_share.py)
        self.harness = load_harness(spec["harness"], spec.get("variant"))
        self.monitor.wrap_reference(self.harness.module)
        self.base_code = (self.root / self.file).read_text()
        self.monitor.allowed_files.add(os.path.realpath(self.root / self.file))
        with self.caches.base(), self.monitor.watch(ops=False) as rec:
            self.base_mod = load_operator_module(self.root, self.file, tag="base", stubs=self.stubs)
        self.base_import = rec
        self.base_fn = self._entry_fn(self.base_mod)
        if not callable(self.base_fn):
            raise RuntimeError(f"{self.file} defines no function {self.entry!r}")
        self.monitor.own_modules.add(self.base_mod.__name__)
        # The base runs with the oracle's choices: it is never tuned here.
        self.share_tuning(spec.get("base_autotune") or {})
        self._aa_fn = None
        self.fresh_outputs = FreshOutputs()
        self.calibration = self.backend.calibrate([], spec.get("calibration"))
        self.profiles = {k: Record.from_json(v) for k, v in (spec.get("base_profiles") or {}).items()}
        self.slots: dict[str, torch.Tensor] = {}
        self._reset_candidate()

    def _reset_candidate(self) -> None:
        self.fn, self.mod, self.rec, self.stack = None, None, Record(), ExitStack()
        self.base_rec = Record()
        self.snapshot = self.settings = None
        self.threads_before: set[int] = set()

    def _entry_fn(self, mod):
        return self.harness.callable_of(mod, self.entry)

    def trusted(self, fn) -> bool:
        """Whether `fn` is the base or its A/A copy (compiled in the runner's private cache)."""
        return fn is self.base_fn or (self._aa_fn is not None and fn is self._aa_fn)

    def base_compiles(self):
        """Context: Triton compiles into the runner's private base cache."""
        return self.caches.base()

    def aa_fn(self):
        """The A/A control: the base file loaded again as a separate module."""
        if self._aa_fn is None:
            path = self.workdir / "aa" / Path(self.file).name
            with self.caches.base():
                mod = load_operator_module(self.root, self.file, code=self.base_code, tag="aa",
                                           source_path=path, stubs=self.stubs)
            self._aa_fn = self._entry_fn(mod)
            self.tuning.seed(self.shared_tuning)  # the A/A copy runs with the base's choices
        return self._aa_fn

    def share_tuning(self, table: dict) -> int:
        """Take the base's autotune choices (the judge's table): every kernel of that name but a
        candidate's own runs with them wherever it has not chosen itself. Returns how many were put."""
        for name, entry in checked_table(table).items():
            self.shared_tuning[name] = entry
        return self.tuning.seed(self.shared_tuning)

    def named(self, name: str):
        """The function a request names: the loaded candidate, the base or the A/A copy."""
        fn = {"cand": self.fn, "base": self.base_fn}.get(name)
        if name == "aa":
            fn = self.aa_fn()
        if fn is None:
            raise RuntimeError(f"no function {name!r} is loaded")
        return fn

    # -- requests -----------------------------------------------------------------------------
    def place(self, inputs: dict, same: list[str]) -> dict:
        """The received inputs, those named in `same` moved into the previous call's storage."""
        for name in same:
            slot, new = self.slots.get(name), inputs.get(name)
            if isinstance(new, torch.Tensor) and slot is not None and \
                    (slot.shape, slot.dtype, slot.stride()) == (new.shape, new.dtype, new.stride()):
                slot.copy_(new)
                inputs[name] = slot
        self.slots = C.tensors_of(inputs)
        return inputs

    def call(self, fn, inputs: dict, dirty: float, watch: bool, sizes: list[int] = ()) -> tuple:
        """One call with poisoned write-only outputs (as Session.call did in one process)."""
        names = self.harness.outputs
        for name in [n for n in (names or []) if n not in self.harness.inplace]:
            C.poison(inputs[name])
        # Outputs the harness names are the caller's buffers, not allocated by the entry: blocks of
        # their sizes would only take device memory (three multi-GB caches for LMDeploy's KV cache).
        C.dirty_allocator(self.dev, dirty, sizes if names is None else ())
        self.backend.synchronize()
        with self.caches.base() if self.trusted(fn) else nullcontext():
            if not watch:
                ret = fn(**inputs)
                self.backend.synchronize()
            else:
                with self.monitor.watch(self.rec, garbage=dirty):
                    ret = fn(**inputs)
                    self.backend.synchronize()
        outs = C.as_tuple(ret) if names is None else tuple(inputs[n] for n in names)
        if watch and names is None:
            self.fresh_outputs.note(fn, outs, inputs)
        return outs

    def profile(self, key: str, inputs: dict, warm: bool) -> dict:
        """The base's Record on one listed shape (made now, before any candidate is loaded)."""
        run = C.clone_inputs(inputs)
        self.call(self.base_fn, run, float("nan"), False)  # compile outside the profile
        if key not in self.profiles:
            saved, self.rec = self.rec, Record()
            try:
                self.call(self.base_fn, C.clone_inputs(inputs), float("nan"), True)
                self.profiles[key] = self.rec
            finally:
                self.rec = saved
        if warm and self.backend.timed:
            self.call(self.aa_fn(), C.clone_inputs(inputs), float("nan"), False)
        return self.profiles[key].to_json()

    def load(self, msg: dict) -> None:
        """Import the candidate beside the base under the monitor (Rejected for import failures)."""
        self._reset_candidate()
        self.base_rec.merge(self.base_import)
        for key in msg.get("shapes") or []:
            if key in self.profiles:
                self.base_rec.merge(self.profiles[key])
        if msg.get("fresh"):  # before the settings are taken: switching the cache folder is ours
            self.stack.enter_context(self.caches.fresh())
        self.snapshot = Snapshot(extra={"harness": self.harness.module})
        self.settings = GlobalSettings()
        self.threads_before = thread_idents()
        self.fresh_outputs.reset()
        if msg.get("source_path") is None:
            self.fn = self.base_fn
            self.rec.merge(self.base_import)
            return
        path = Path(msg["source_path"])
        code = path.read_text(encoding="utf-8")
        self.monitor.allowed_files.add(os.path.realpath(path))
        self.monitor.candidate_files.update({str(path), os.path.realpath(path)})
        try:
            with self.monitor.watch(ops=False) as rec:
                self.mod = load_operator_module(self.root, self.file, code=code, tag=f"c{int(msg['cid'])}",
                                                source_path=path, stubs=self.stubs)
        except BaseException as e:  # noqa: BLE001 - any import failure is the candidate's
            raise Rejected("import_error", f"importing the candidate failed: {type(e).__name__}: {e}",
                           classify_exception(e)[1]) from None
        self.rec.merge(rec)
        self.monitor.own_modules.add(self.mod.__name__)
        try:
            fn = self._entry_fn(self.mod)
        except Exception as e:  # noqa: BLE001 - the harness rejects the module's shape
            raise Rejected("import_error", f"{type(e).__name__}: {e}") from None
        if not callable(fn):
            raise Rejected("import_error", f"{self.entry!r} is not a function in the candidate")
        self.fn = fn

    def integrity(self, msg: dict) -> list[list[str]]:
        """What the monitor saw, as (violation, message) pairs (the judge may only reject on them)."""
        found = [list(x) for x in violations_vs_base(
            self.rec, self.base_rec, library_base=bool(msg["library_base"]), complete=bool(msg["complete"]))]
        if self.fresh_outputs.finding:
            found.insert(0, ["reused_output", self.fresh_outputs.finding])
        if thread_idents() - self.threads_before:
            found.append(["extra_threads", "a thread started by the candidate is still running"])
        changed = self.snapshot.changes() if self.snapshot else []
        if changed:
            found.append(["monkeypatch", "replaced: " + ", ".join(changed[:6])])
        return found

    def settle(self) -> list[str]:
        """After timing: settings changed since loading that the base does not change; then unload."""
        changed = self.settings.changes() if self.settings else []
        late = [c for c in changed if c not in self.base_rec.settings]
        self.fresh_outputs.reset()
        if self.mod is not None:
            sys.modules.pop(self.mod.__name__, None)
        self.stack.close()
        self.fn = None
        return late

    def time(self, msg: dict, sets: list[dict]) -> dict:
        """The interleaved timing loop on the judge's input sets: raw per-call times, last output."""
        from kernelsmith.referee.timing.ab import time_loop

        fn = self.named(msg["fn"])
        copies = msg.get("copies")
        try:
            return time_loop(self, fn, sets, int(msg["si"]), int(msg["cid"]), int(msg["seed"]), msg["mode"],
                             bool(msg["host"]), int(copies) if copies is not None else None)
        finally:
            # Its copies of the sets are garbage now: the device memory goes back for the oracle's
            # timing of the base and the judge's next steps (memory.py).
            sets.clear()
            self.backend.release()

    def audit(self, sets: list[dict]) -> list:
        """The candidate on every set back to back, then one synchronize: its outputs per set."""
        names = self.harness.outputs
        rets = [self.fn(**s) for s in sets]
        self.backend.synchronize()
        return [C.as_tuple(r) if names is None else tuple(s[n] for n in names)
                for r, s in zip(rets, sets, strict=True)]


def serve(chan: Channel, own_userns: bool = False) -> int:
    """Answer the judge's requests until it says exit or goes away (`own_userns`: reported at init,
    before any candidate code has run here)."""
    session: RunnerSession | None = None

    def init(msg: dict, values) -> tuple[dict, object]:
        nonlocal session
        session = RunnerSession(msg["spec"])
        chan.device = session.dev
        return {"base_cache": str(session.caches.private), "own_userns": own_userns}, None

    def exit_(msg: dict, values) -> tuple[dict, object]:
        if session is not None:
            session.caches.remove()
        return {}, None

    def load(msg: dict, values) -> tuple[dict, object]:
        session.load(msg)
        return {}, None

    def call(msg: dict, values) -> tuple[dict, object]:
        inputs = session.place(values, msg.get("same") or [])
        outs = session.call(session.named(msg["fn"]), inputs, float(msg["dirty"]), bool(msg["watch"]),
                            msg.get("sizes") or [])
        return {}, {"outs": outs, "inputs": C.tensors_of(inputs)}

    def time_sets(msg: dict, values) -> tuple[dict, object]:
        t0 = time.monotonic()
        r = session.time(msg, values)
        out = {"last": r.pop("last_outs", None)}
        return {**r, "runner_s": time.monotonic() - t0}, out

    def settle(msg: dict, values) -> tuple[dict, object]:
        report = session.tuning.report()  # before the candidate's module is unloaded
        return {"late": session.settle(), "autotune": report}, None

    def failed(e: BaseException) -> dict:
        if isinstance(e, Rejected):
            return {"ok": False, "rejected": [e.reason, str(e.message), e.error]}
        name, text = classify_exception(e)  # candidate code raised: the judge decides what it means
        return {"ok": False, "raised": [name, text], "error": traceback.format_exc()[-2000:]}

    def unsendable(op: str, e: Exception) -> dict:  # an output that cannot travel (sparse, meta, ...)
        return {"ok": False, "raised": ["crash", f"cannot return the outputs: {type(e).__name__}: {e}"]}

    handlers = {
        "init": init,
        "exit": exit_,
        "profile": lambda msg, values: (
            {"record": session.profile(msg["key"], values, bool(msg.get("warm")))}, None),
        "load": load,
        "call": call,
        "time": time_sets,
        "audit": lambda msg, values: ({}, {"outs": session.audit(values)}),
        "integrity": lambda msg, values: ({"found": session.integrity(msg)}, None),
        "autotune": lambda msg, values: ({"seeded": session.share_tuning(msg["table"])}, None),
        "settle": settle,
    }
    # The judge makes room on the device (memory.py): the runner's freed memory goes back.
    return serve_requests(chan, "runner", handlers, failed, unsendable,
                          release=lambda: session.backend.release())


def start(sock, log_fds: tuple[int, int]) -> None:
    """In the forked child: keep only the channel and the log, drop into a user namespace of its
    own where one can be made (no capability over the judge's), then serve. Never returns."""
    code = 70
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(log_fds[0], 1)
        os.dup2(log_fds[1], 2)
        close_fds_except({0, 1, 2, sock.fileno()})
        sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
        own = _own_user_namespace()
        chan = Channel(sock, "cpu", trusted_peer=True)
        code = serve(chan, own)
    except BaseException:  # noqa: BLE001 - report, then leave without the judge's cleanup
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def close_fds_except(keep: set[int]) -> None:
    """Close every descriptor of this process but `keep`."""
    for fd in _open_fds():
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _open_fds() -> list[int]:
    try:
        return [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 1024))


def _own_user_namespace() -> bool:
    """Enter a new user namespace (mapping our own ids): capabilities there are none in the judge's,
    so even inside the sandbox (where the judge's namespace grants them) nothing here can ptrace
    the non-dumpable judge or read its memory or descriptors. False where the kernel refuses."""
    from kernelsmith.sandbox.launch import CLONE_NEWUSER, SandboxSetupError, map_ids, unshare

    uid, gid = os.geteuid(), os.getegid()
    try:
        unshare(CLONE_NEWUSER, "unshare(CLONE_NEWUSER) for the runner")
        map_ids(uid, uid, gid, gid)
    except (SandboxSetupError, OSError):
        return False
    return True
