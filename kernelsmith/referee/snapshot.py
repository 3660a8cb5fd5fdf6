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
    "kernelsmith.target.harness", "kernelsmith.target.loader", "kernelsmith.referee.integrity",
    "kernelsmith.referee.record", "kernelsmith.referee.launch_callbacks",
    "kernelsmith.referee.launch_callbacks.CallbackSwaps", "kernelsmith.referee.correctness",
    "kernelsmith.referee.session", "kernelsmith.referee.shape_trials", "kernelsmith.referee.timing",
    "kernelsmith.referee.snapshot", "kernelsmith.referee.worker", "kernelsmith.referee.trials",
    "kernelsmith.referee.trials.FreshOutputs", "kernelsmith.referee.backend.standins",
    "kernelsmith.referee.backend.cuda", "kernelsmith.referee.backend.interpret",
    "kernelsmith.referee.runner", "kernelsmith.referee.runner.RunnerSession", "kernelsmith.referee.channel",
    "kernelsmith.referee.channel.Channel",
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


def _entries(obj) -> dict[str, int]:
    try:
        items = list(vars(obj).items())
    except TypeError:
        return {}
    out = {}
    for name, value in items:
        if isinstance(value, types.ModuleType):
            continue  # lazily imported submodules appear as attributes; not a patch
        if callable(value) or isinstance(value, (staticmethod, classmethod, property)):
            out[name] = id(value)
    return out


class Snapshot:
    """ids of every callable attribute of the watched modules and classes (plus extra objects)."""

    def __init__(self, extra: dict[str, object] | None = None):
        self.targets: dict[str, object] = {}
        for path in WATCHED:
            obj = _resolve(path)
            if obj is not None:
                self.targets[path] = obj
        self.targets.update(extra or {})
        self.before = {path: _entries(obj) for path, obj in self.targets.items()}

    def changes(self) -> list[str]:
        """'module.attr' for every callable replaced, removed or added since the snapshot."""
        out = []
        for path, obj in self.targets.items():
            now = _entries(obj)
            old = self.before[path]
            for name, ident in old.items():
                if now.get(name) != ident:
                    out.append(f"{path}.{name}")
            for name in now.keys() - old.keys():
                out.append(f"{path}.{name}")
        return sorted(out)
