"""Run-time integrity monitoring inside the worker: launches, torch ops, threads, files, patches.

One `Monitor` is installed per worker before any operator module is imported. It hooks Triton's
launch path (JITFunction.run, the interpreter's InterpretedFunction.run and the autotuner, on
triton 3.6 to 3.9), thread creation, torch.save/torch.load, and a `sys.addaudithook` for files,
sockets, processes, introspection and class patching. While a `watch()` block is active it records
what the watched code did (torch ops through a TorchDispatchMode, which also fills every tensor the
code allocates with garbage). Only Triton's own work inside a launch (compilation, benchmarking,
the interpreter's own tensor copies) is excluded: candidate code that Triton calls back during a
launch (heuristics, autotune hooks and pruners, grid lambdas, subclass methods, and the listeners and
hooks set in `triton.knobs`) is recorded like any other candidate code. Each watched block also
compares the process-global settings (settings.py: environment, triton.knobs, torch switches) before
and after it: a change that outlives the block would reach every later candidate and the base.
"""

from __future__ import annotations

import _thread
import functools
import os
import re
import sys
import threading
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelsmith.referee.checks import settings as global_settings
from kernelsmith.referee.checks.launch_callbacks import CallbackSwaps
from kernelsmith.referee.checks.record import Record, compute_ops, op_name, violations_vs_base

# Record and its rules live in record.py; re-exported for the callers that import them from here.
__all__ = ["Monitor", "Record", "compute_ops", "fill_garbage", "op_name", "thread_idents",
           "violations_vs_base"]

_PROC_PID = re.compile(r"^/proc/(\d+)/")  # /proc/self resolves to /proc/<own pid>
_PROCESS_EVENTS = ("subprocess.Popen", "os.system", "os.fork", "os.forkpty", "os.posix_spawn",
                   "os.spawn", "os.exec", "os.startfile", "pty.spawn")
# File-system changes other than open(): a write the sandbox refuses (EROFS) is still recorded.
_WRITE_EVENTS = ("os.mkdir", "os.rename", "os.remove", "os.rmdir", "os.truncate", "os.link", "os.symlink",
                 "shutil.rmtree")
_INTROSPECTION_EVENTS = ("sys._getframe", "sys._current_frames", "gc.get_objects", "gc.get_referrers",
                         "gc.get_referents")
_TAMPER_EVENTS = ("sys.settrace", "sys.setprofile", "sys.addaudithook", "object.__setattr__",
                  "object.__delattr__")

_ALLOC_OPS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}


def fill_garbage(t: torch.Tensor, value: float) -> None:
    """Fill fresh memory with a visible value: `value` for floats, a sentinel for integers."""
    if t.is_floating_point():
        if t.element_size() == 1:
            t.view(torch.uint8).fill_(0x7F)  # NaN in the float8 formats
        else:
            t.fill_(value)
    elif t.dtype == torch.bool:
        t.fill_(True)
    elif not t.is_complex():
        info = torch.iinfo(t.dtype)
        t.fill_(max(info.min, min(info.max, -0x5A5A5A5A)))


class _OpRecorder(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """False: torch would wrap __torch_dispatch__ in Dynamo's `disable`, which imports torch._dynamo
        at the first op (5 s on the H200, once per fork server); nothing here is ever compiled."""
        return False

    def __init__(self, monitor: Monitor, garbage: float | None):
        super().__init__()
        self.monitor = monitor
        self.garbage = garbage

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        rec = self.monitor.current
        out = func(*args, **(kwargs or {}))
        if rec is not None and not self.monitor.exempt():
            name = op_name(func)
            rec.ops.add(name)
            self.monitor.check_stream(rec)
            # Memory the candidate allocates starts as garbage, whatever the allocator would hand
            # out: an output it never writes, or scratch it reads before writing, shows up.
            if self.garbage is not None and name in _ALLOC_OPS and isinstance(out, torch.Tensor):
                fill_garbage(out, self.garbage)
        return out


class Monitor:
    """Hooks installed once per worker; `watch()` collects a Record for one block of code."""

    def __init__(self, device: str, allowed_read_roots: list[str]):
        self.device = device
        self.current: Record | None = None
        self.in_triton = 0
        # Innermost first: ("launch", frame) entered Triton's machinery, ("user", None) a callback
        # of candidate code that Triton's machinery runs; see `exempt`.
        self._scopes: list[tuple[str, object]] = []
        self._tuners: tuple[type, ...] = ()
        self.allowed_read_roots = [os.path.realpath(p) for p in allowed_read_roots if p]
        self.allowed_files: set[str] = set()
        self.own_modules: set[str] = set()
        self.candidate_files: set[str] = set()
        self._in_audit = False
        self.expected_stream = None
        self._installed = False

    # -- installation -------------------------------------------------------------------------
    def install(self) -> None:
        """Hook Triton launches, thread starts and the audit events (idempotent)."""
        if self._installed:
            return
        self._installed = True
        self._hook_triton()
        self._hook_threads()
        self._hook_torch_files()
        with _OpRecorder(self, None):
            # A torch without _should_skip_dynamo imports torch._dynamo at the first dispatched op, and
            # that import re-wraps torch: done here, before anything is snapshot (the zygote did it).
            torch.zeros(1).add_(1)

        sys.addaudithook(self._audit)

    def _hook_triton(self) -> None:
        from triton.runtime import jit

        classes = [jit.JITFunction]
        try:
            from triton.runtime import interpreter
            classes.append(interpreter.InterpretedFunction)
        except ImportError:  # pragma: no cover - every supported triton has the interpreter
            pass
        try:
            # An autotuned launch counts once; its benchmarking runs count as Triton's own work.
            from triton.runtime import autotuner
            classes += [autotuner.Autotuner, autotuner.Heuristics]
            self._tuners = (autotuner.Autotuner, autotuner.Heuristics)
        except ImportError:  # pragma: no cover
            pass
        for cls in classes:
            original = cls.run
            if getattr(original, "__ks_hook__", False):
                continue
            cls.run = self._wrap_launch(original)

    def _wrap_launch(self, original):
        monitor = self

        def run(fn_self, *args, **kwargs):
            rec = monitor.current
            if rec is not None and not monitor.exempt() and not kwargs.get("warmup", False):
                rec.launches += 1
                monitor.check_stream(rec)
            monitor.in_triton += 1
            monitor._scopes.append(("launch", sys._getframe()))
            try:
                # The op recorder stays on: `exempt` tells the interpreter's own tensor copies and
                # the autotuner's benchmarking from candidate code that Triton calls back.
                with monitor._callbacks_recorded(fn_self):
                    return original(fn_self, *args, **kwargs)
            finally:
                monitor._scopes.pop()
                monitor.in_triton -= 1

        run.__ks_hook__ = True
        run.__wrapped__ = original
        return run

    # -- what inside a launch is Triton's own work ----------------------------------------------
    def exempt(self) -> bool:
        """Whether the code running now is Triton's own launch work, not the candidate's.

        Inside a launch, a callback of the candidate (`_as_candidate`) or any frame of a candidate
        file above the innermost launch (a heuristics or grid lambda, a hook, a subclass method, a
        property of an argument) makes it the candidate's again.
        """
        if not self.in_triton or not self._scopes:
            return False
        kind, launch_frame = self._scopes[-1]
        if kind == "user":
            return False
        if self._in_audit or not self.candidate_files:
            return True
        self._in_audit = True  # sys._getframe raises an audit event of its own
        try:
            frame = sys._getframe(1)
            while frame is not None and frame is not launch_frame:
                if frame.f_code.co_filename in self.candidate_files:
                    return False
                frame = frame.f_back
            return True
        finally:
            self._in_audit = False

    def _as_candidate(self, fn):
        """`fn` wrapped so that what it does is recorded even when Triton's machinery calls it."""
        monitor = self

        @functools.wraps(fn)
        def callback(*args, **kwargs):
            monitor._scopes.append(("user", None))
            try:
                return fn(*args, **kwargs)
            finally:
                monitor._scopes.pop()

        callback.__ks_user__ = fn
        return callback

    @contextmanager
    def _callbacks_recorded(self, launcher):
        """While a launch runs, the candidate-supplied callables Triton may call in it are recorded.

        Covers what has no frame in a candidate file (a functools.partial, eval'd code, a builtin):
        for an Autotuner or Heuristics every callable attribute, heuristic value and config pre_hook
        not defined in Triton itself; for every launch the listeners and hooks set in triton.knobs
        (autotuning and compilation listeners, JIT and launch hooks), which Triton calls from inside.
        Each is put back afterwards unless the launch itself replaced it meanwhile.
        """
        swaps = CallbackSwaps(self._as_candidate)
        if self.current is not None:
            try:
                if type(launcher) in self._tuners:
                    swaps.swap_launcher_callbacks(launcher)
                swaps.swap_knob_callbacks()
            except Exception:  # noqa: BLE001 - an odd launcher object: its frames are still checked
                pass
        try:
            yield
        finally:
            swaps.restore()

    def _hook_threads(self) -> None:
        monitor = self
        for owner, attr in ((threading, "_start_new_thread"), (threading, "_start_joinable_thread"),
                            (_thread, "start_new_thread"), (_thread, "start_joinable_thread")):
            original = getattr(owner, attr, None)
            if original is None or getattr(original, "__ks_hook__", False):
                continue

            def make(orig):
                def start(*args, **kwargs):
                    rec = monitor.current
                    if rec is not None and not monitor.exempt():
                        rec.threads += 1
                    return orig(*args, **kwargs)
                start.__ks_hook__ = True
                return start

            setattr(owner, attr, make(original))

    def _hook_torch_files(self) -> None:
        """torch.save/torch.load open files from C++, where the audit hook cannot see them."""
        monitor = self
        for name, writes in (("save", True), ("load", False)):
            original = getattr(torch, name)
            if getattr(original, "__ks_hook__", False):
                continue

            def make(orig, writes, name):
                def wrapper(*args, **kwargs):
                    rec = monitor.current
                    if rec is not None and not monitor.exempt():
                        target = args[1] if writes and len(args) > 1 else (args[0] if args else None)
                        path_like = isinstance(target, (str, bytes, os.PathLike))
                        where = os.fsdecode(target) if path_like else "a stream"
                        (rec.writes if writes else rec.files).add(f"torch.{name}({where})")
                    return orig(*args, **kwargs)
                wrapper.__ks_hook__ = True
                wrapper.__wrapped__ = orig
                return wrapper

            setattr(torch, name, make(original, writes, name))

    def wrap_reference(self, module) -> None:
        """Replace the harness module's `reference` so a call from watched code is recorded."""
        original = getattr(module, "reference", None)
        if original is None or getattr(original, "__ks_hook__", False):
            return
        monitor = self

        def reference(*args, **kwargs):
            rec = monitor.current
            if rec is not None:
                rec.reference_calls += 1
            return original(*args, **kwargs)

        reference.__ks_hook__ = True
        module.reference = reference

    # -- recording ----------------------------------------------------------------------------
    def check_stream(self, rec: Record) -> None:
        """Note work issued on a CUDA stream other than the one the referee set."""
        if self.device != "cuda" or self.expected_stream is None:
            return
        stream = torch.cuda.current_stream()
        if stream.cuda_stream != self.expected_stream:
            rec.streams.add(hex(stream.cuda_stream))

    def _audit(self, event: str, args) -> None:
        rec = self.current
        if rec is None or self.exempt():
            return
        try:
            if event == "open":
                self._record_open(rec, args)
            elif event in _WRITE_EVENTS:
                for path in args[:2]:
                    if isinstance(path, (str, bytes, os.PathLike)):
                        rec.writes.add(os.path.realpath(os.fsdecode(path)))
            elif event.startswith("socket."):
                rec.network.add(event)
            elif event.startswith(_PROCESS_EVENTS):
                rec.processes.add(event)
            elif event == "sys._getframe":
                if self._called_from_candidate():
                    rec.introspection.add(event)
            elif event in _INTROSPECTION_EVENTS:
                rec.introspection.add(event)
            elif event in _TAMPER_EVENTS:
                if event.startswith("object."):
                    obj, name = args[0], args[1]
                    owner = getattr(obj, "__module__", "") or ""
                    if owner in self.own_modules or name == "__class__":
                        return  # a class the watched module defined itself, or a lazy-module swap
                    rec.tamper.add(f"{getattr(obj, '__qualname__', type(obj).__name__)}.{name}")
                else:
                    rec.tamper.add(event)
        except Exception:  # an audit hook must never raise into the code it watches
            pass

    def _called_from_candidate(self) -> bool:
        """Whether candidate code itself (directly or through `inspect`) asked for a frame.

        Library code such as logging also calls sys._getframe; that is not introspection.
        """
        if self._in_audit:
            return False
        self._in_audit = True
        try:
            frame = sys._getframe(2)  # 0: this method, 1: the audit hook, 2: the caller
            for _ in range(2):
                if frame is None:
                    return False
                if frame.f_code.co_filename in self.candidate_files:
                    return True
                if not frame.f_code.co_filename.endswith("inspect.py"):
                    return False
                frame = frame.f_back
            return False
        finally:
            self._in_audit = False

    def _record_open(self, rec: Record, args) -> None:
        path, mode, flags = (list(args) + [None, None, None])[:3]
        if not isinstance(path, (str, bytes, os.PathLike)):
            return
        path = os.path.realpath(os.fsdecode(path))
        writing = bool(mode and any(c in str(mode) for c in "wax+")) or bool(
            isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))
        if writing:
            rec.writes.add(path)
            return
        other = _PROC_PID.match(path)
        if other and int(other.group(1)) != os.getpid():  # another process's environ, memory, fds
            rec.files.add(path)
            return
        if path in self.allowed_files or path.startswith(("/proc/", "/sys/", "/dev/")):
            return
        if path.endswith((".py", ".pyc", ".so")) and any(path.startswith(r) for r in self.allowed_read_roots):
            return
        rec.files.add(path)

    @contextmanager
    def watch(self, record: Record | None = None, ops: bool = True, garbage: float | None = None):
        """Record what the block does into `record` (a new one when None); yields the record.

        `garbage`: fill every tensor the block allocates with this value (None: leave them).
        """
        rec = record if record is not None else Record()
        before = global_settings.capture()  # outside the op recorder: reading them runs no op anyway
        prev = self.current
        self.current = rec
        if self.device == "cuda":
            self.expected_stream = torch.cuda.current_stream().cuda_stream
        mode = _OpRecorder(self, garbage) if ops else None
        try:
            if mode is not None:
                with mode:
                    yield rec
            else:
                yield rec
        finally:
            self.current = prev
            # Also when the block raised: a setting changed before the failure outlives it just the same.
            rec.settings.update(global_settings.diff(before, global_settings.capture()))


def thread_idents() -> set[int]:
    """Idents of the Python threads alive now."""
    return {t.ident for t in threading.enumerate()}
