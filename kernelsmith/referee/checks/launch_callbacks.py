"""The candidate callables Triton may call during a launch, swapped for recording wrappers and put back.

Used by integrity.Monitor: what Triton calls back from inside a launch has no frame in a candidate
file when it is a functools.partial, eval'd code or a builtin, so the Monitor wraps each such
callable for the launch's duration (see `Monitor._callbacks_recorded`).
"""

from __future__ import annotations

import os

try:
    from triton import knobs as _knobs
except ImportError:  # pragma: no cover - every supported triton (3.6 to 3.9) has knobs
    _knobs = None

# Callables in triton.knobs that Triton calls during a launch or a compile, as (group, attribute);
# each is looked up with getattr, so one this Triton lacks (3.6 has no autotuning listener) is skipped.
_KNOB_CALLBACKS = (("autotuning", "listener"), ("compilation", "listener"), ("runtime", "jit_cache_hook"),
                   ("runtime", "jit_post_compile_hook"), ("runtime", "add_stages_inspection_hook"),
                   ("build", "impl"))
_KNOB_HOOK_CHAINS = ("launch_enter_hook", "launch_exit_hook", "kernel_load_start_hook",
                     "kernel_load_end_hook", "kernel_unload_hook")


def _package_dir(name: str) -> str:
    import importlib.util

    spec = importlib.util.find_spec(name)
    return os.path.dirname(spec.origin) + os.sep if spec and spec.origin else "\0"


_TRITON_DIR = _package_dir("triton")


class CallbackSwaps:
    """The callables swapped for `wrap(callable)` during one launch; `restore` puts them back."""

    def __init__(self, wrap):
        self.wrap = wrap
        self.swapped: list[tuple[object, object, object, object, bool]] = []

    def swap(self, container, key, value) -> None:
        """Put a recording wrapper in place of `container[key]` (or its attribute `key`)."""
        if not callable(value) or isinstance(value, type) or _is_triton_code(value):
            return
        if hasattr(value, "__ks_user__"):
            return  # already wrapped by an enclosing launch
        wrapped = self.wrap(value)
        if isinstance(container, (dict, list)):
            own = True
            container[key] = wrapped
        else:
            own = key in vars(container)  # False: a class-level value, shadowed only while swapped
            setattr(container, key, wrapped)
        self.swapped.append((container, key, value, wrapped, own))

    def swap_knob_callbacks(self) -> None:
        """The listeners and hooks set in triton.knobs."""
        if _knobs is None:
            return
        for group_name, attr in _KNOB_CALLBACKS:
            group = getattr(_knobs, group_name, None)
            value = getattr(group, attr, None) if group is not None else None
            if value is not None:
                self.swap(group, attr, value)
        runtime = getattr(_knobs, "runtime", None)
        for attr in _KNOB_HOOK_CHAINS:
            calls = getattr(getattr(runtime, attr, None), "calls", None)
            if isinstance(calls, list):
                for i, hook in enumerate(list(calls)):
                    self.swap(calls, i, hook)

    def swap_launcher_callbacks(self, launcher) -> None:
        """An Autotuner's or Heuristics' callable attributes, heuristic values and config pre_hooks."""
        state = vars(launcher)
        for name, value in list(state.items()):
            if name in ("fn", "base_fn", "src") or isinstance(value, type):
                continue  # the kernel itself: a launch of its own (or candidate frames, if custom)
            self.swap(launcher, name, value)
        values = state.get("values")
        if isinstance(values, dict):  # Heuristics
            for key, value in list(values.items()):
                self.swap(values, key, value)
        for config in state.get("configs") or ():  # Autotuner: per-config pre_hook
            if hasattr(config, "pre_hook"):
                self.swap(config, "pre_hook", config.pre_hook)

    def restore(self) -> None:
        """Undo every swap, newest first."""
        for container, key, original, wrapped, own in reversed(self.swapped):
            _restore(container, key, original, wrapped, own)


def _restore(container, key, original, wrapped, own: bool) -> None:
    """Undo one swap of `_callbacks_recorded`, unless the slot no longer holds our wrapper."""
    if isinstance(container, list):
        if key < len(container) and container[key] is wrapped:
            container[key] = original
    elif isinstance(container, dict):
        if container.get(key) is wrapped:
            container[key] = original
    elif vars(container).get(key) is wrapped:
        if own:
            setattr(container, key, original)
        else:
            delattr(container, key)  # back to the class-level value


def _is_triton_code(fn) -> bool:
    """Whether `fn` is a plain function or method defined in the triton package itself."""
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    return code is not None and code.co_filename.startswith(_TRITON_DIR)

