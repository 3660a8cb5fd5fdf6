"""How the referee calls an operator's entry and what of its return value it compares.

Entries as users find them: a function (`rms_norm`), a dotted name (`Class.method`), or an autograd
`Function.apply`, whose inputs are bound to `forward`'s parameters (without `ctx`), since
`Function.apply` takes positional arguments only. The harness may call the entry itself
(`call(entry, inputs)`, returning what to compare) and may name positions of the returned tuple in
`OUTPUTS` (`OUTPUTS = (0, 2)`); without either, the tensors of a returned tuple are compared and
other values (a block size, a warp count, a mode string, None) are left out.
"""

from __future__ import annotations

import inspect

from kernelsmith.errors import ConfigError
from kernelsmith.pysource import entry_parts


class OutputsError(ConfigError):
    """A position OUTPUTS declares is not a tensor in what the entry returned (names the field)."""


def resolve_entry(module, entry: str):
    """The callable a (dotted) entry names in a loaded module; AttributeError naming the missing part."""
    obj = module
    parts = entry_parts(entry)
    for i, part in enumerate(parts):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            where = getattr(module, "__file__", None) or getattr(module, "__name__", "the module")
            missing = ".".join(parts[: i + 1])
            raise AttributeError(f"{where} defines no {missing!r} (entry {entry!r})") from None
    return keyword_apply(obj) if is_autograd_apply(obj) else obj


def is_autograd_apply(obj) -> bool:
    """Whether `obj` is `apply` of a torch.autograd.Function subclass (bound to that class)."""
    import torch

    cls = getattr(obj, "__self__", None)
    return (getattr(obj, "__name__", None) == "apply" and isinstance(cls, type)
            and issubclass(cls, torch.autograd.Function))


def keyword_apply(apply):
    """`Function.apply` called with keyword inputs: bound to `forward`'s parameters after `ctx`
    (defaults filled in), then passed by position."""
    params = list(inspect.signature(apply.__self__.forward).parameters.values())[1:]
    signature = inspect.Signature(params)

    def call(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return apply(*bound.args, **bound.kwargs)

    call.__signature__ = signature
    call.__name__ = f"{apply.__self__.__name__}.apply"
    return call


def parse_outputs(value, path) -> tuple[list[str] | None, list[int] | None]:
    """A harness's OUTPUTS as (input names, return positions): None, a name or a list of names
    (inputs the entry writes), or an int or a list of ints (positions of the returned tuple)."""
    if value is None:
        return None, None
    items = [value] if isinstance(value, (str, int)) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise ConfigError(path, "must be None, input names, or positions of the returned tuple (ints)",
                          "OUTPUTS")
    if all(isinstance(o, str) for o in items):
        return list(items), None
    for i, o in enumerate(items):
        if type(o) is not int or o < 0:
            raise ConfigError(path, f"{o!r}: OUTPUTS holds either input names or positions of the returned "
                              "tuple (ints from 0), not both", f"OUTPUTS[{i}]")
    if len(set(items)) != len(items):
        raise ConfigError(path, "a position is named twice", "OUTPUTS")
    return None, list(items)


def as_values(ret) -> tuple:
    """A return value as a tuple of values (a single value is a tuple of one)."""
    return tuple(ret) if isinstance(ret, (tuple, list)) else (ret,)


def picked(ret, positions: list[int] | None, path) -> tuple:
    """What is compared of `ret`: the values at `positions` (each must be a tensor: OutputsError
    naming the harness and the field otherwise), else its tensors in order."""
    import torch

    values = as_values(ret)
    if positions is None:
        return tuple(v for v in values if isinstance(v, torch.Tensor))
    out = []
    for i, p in enumerate(positions):
        if p >= len(values):
            raise OutputsError(path, f"position {p}, but the entry returned {len(values)} value(s)",
                               f"OUTPUTS[{i}]")
        if not isinstance(values[p], torch.Tensor):
            kind = type(values[p]).__name__
            raise OutputsError(path, f"position {p} of what the entry returned is a {kind}, not a tensor: "
                               "name only tensor positions", f"OUTPUTS[{i}]")
        out.append(values[p])
    return tuple(out)


def entry_caller(fn, *, call=None, names: list[str] | None = None, positions: list[int] | None = None,
                 path=None):
    """`fn` as the referee calls it, `fn(**inputs)`: through the harness's `call(entry, inputs)` hook
    where it has one, returning what is compared (the tuple `picked` makes). With OUTPUTS naming
    inputs the inputs are compared after the call, so what it returns does not matter."""
    if call is None and names is not None:
        return fn

    def run(**inputs):
        ret = call(fn, inputs) if call is not None else fn(**inputs)
        return ret if names is not None else picked(ret, positions, path)

    run.__wrapped_entry__ = fn
    return run
