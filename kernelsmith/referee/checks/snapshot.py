"""Monkeypatch detection: a snapshot of the functions a candidate could swap (timers, torch, triton)."""

from __future__ import annotations

import importlib
import sys
import types

# Modules and classes whose callables must not change while a candidate is loaded or running.
WATCHED = (
    "builtins", "time", "gc", "os", "sys", "threading", "_thread", "random", "importlib",
    "torch", "torch.Tensor", "torch.nn.functional", "torch.cuda", "torch.cuda.Event", "torch.cuda.Stream",
    "torch.testing", "torch.autograd", "torch.utils._python_dispatch",
    "triton", "triton.language", "triton.testing", "triton.runtime.jit", "triton.runtime.jit.JITFunction",
    "triton.runtime.autotuner.Autotuner", "triton.runtime.autotuner.Heuristics",
    "triton.runtime.autotuner.Config", "triton.runtime.interpreter.InterpretedFunction",
    "numpy", "numpy.random",
    "kernelsmith.harness.model", "kernelsmith.loader", "kernelsmith.referee.checks.integrity",
    "kernelsmith.referee.checks.record", "kernelsmith.referee.checks.launch_callbacks",
    "kernelsmith.referee.checks.launch_callbacks.CallbackSwaps", "kernelsmith.referee.checks.correctness",
    "kernelsmith.referee.session", "kernelsmith.referee.checks.shape_trials",
    "kernelsmith.referee.timing.ab", "kernelsmith.referee.checks.snapshot",
    "kernelsmith.referee.proc.worker", "kernelsmith.referee.checks.trials",
    "kernelsmith.referee.checks.trials.FreshOutputs", "kernelsmith.interpreter.standins",
    "kernelsmith.referee.backend.cuda", "kernelsmith.referee.backend.interpret",
    "kernelsmith.referee.proc.runner", "kernelsmith.referee.proc.runner.RunnerSession",
    "kernelsmith.referee.link.channel",
    "kernelsmith.referee.link.channel.Channel",
)


def _resolve(path: str):
    """A module or a class inside a module, by dotted path; None if it does not exist."""
    if path in sys.modules:
        return sys.modules[path]
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        mod = sys.modules.get(".".join(parts[:i]))
        if mod is None:
            try:
                mod = importlib.import_module(".".join(parts[:i]))
            except Exception:
                continue
        obj = mod
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def _live(obj) -> dict[str, object]:
    """`obj`'s own attribute mapping (no copy), or an empty one."""
    try:
        return vars(obj)
    except TypeError:
        return {}


def _is_watched(value) -> bool:
    """Whether a patch would replace `value`: a callable, static/class method or property."""
    if isinstance(value, types.ModuleType):
        return False  # lazily imported submodules appear as attributes; not a patch
    return callable(value) or isinstance(value, (staticmethod, classmethod, property))


class Snapshot:
    """Every callable attribute of the watched modules and classes (plus extra objects), compared by
    identity. A copy of all their attributes is kept: where names and objects are all the same ones
    (the usual case, checked in C), nothing was replaced, and only otherwise are the callables sorted
    out. Never compared with `==`, which a candidate's object could answer as it likes."""

    def __init__(self, extra: dict[str, object] | None = None):
        self.targets: dict[str, object] = {}
        for path in WATCHED:
            obj = _resolve(path)
            if obj is not None:
                self.targets[path] = obj
        self.targets.update(extra or {})
        # Copies, holding every value: no id in them can be reused while the snapshot lives.
        self.before = {path: dict(_live(obj)) for path, obj in self.targets.items()}
        self.before_ids = {path: _ids(attrs) for path, attrs in self.before.items()}

    def changes(self) -> list[str]:
        """'module.attr' for every callable replaced, removed or added since the snapshot."""
        out = []
        for path, obj in self.targets.items():
            now_all = _live(obj)  # compared at once: the object holds its own values meanwhile
            if _ids(now_all) == self.before_ids[path]:
                continue  # the same name objects holding the same objects, in the same order
            # Some attribute changed: only the names whose objects differ are looked at. Flagged:
            # a callable replaced or removed, and a callable where there was none.
            old_all = self.before[path]
            for name, value in old_all.items():
                new = now_all.get(name, _GONE)
                if new is not value and (_is_watched(value) or (new is not _GONE and _is_watched(new))):
                    out.append(f"{path}.{name}")
            added = now_all.keys() - old_all.keys()
            out += [f"{path}.{name}" for name in added if _is_watched(now_all[name])]
        return sorted(out)


_GONE = object()


def _ids(attrs: dict[str, object]) -> tuple[list[int], list[int]]:
    """The ids of the names and of the values (both held by the copies: no id is reused)."""
    return list(map(id, attrs)), list(map(id, attrs.values()))
