"""HarnessFacts: what the search and `export` read of a harness, gathered in a sandboxed child.

The harness is target code; the search process never imports it. A child in the sandbox
(kernelsmith/harness/gather.py) imports it once and reports plain data: SHAPES, CPU_SHAPES, VARY,
OUTPUTS, the reference's source text, and per listed shape the metadata of
`make_inputs(shape, "cpu", 0)` under torch's FakeTensorMode (a tensor's shape, stride and dtype, or
a scalar). That answer is hostile input: `HarnessFacts.from_json` checks every type and size.
`make_inputs` rebuilds the inputs of a recorded shape as `device="meta"` tensors (nothing
allocated), so the search's size analysis (space.py, sizekeys.py) runs on them unchanged.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

MAX_SHAPES = 1000  # per list (SHAPES, CPU_SHAPES)
MAX_INPUTS = 256  # names one make_inputs returns
MAX_DIMS = 16
MAX_DIM = 1 << 48  # a dimension or stride (meta tensors allocate nothing, but numel must stay an int64)
MAX_INT = 1 << 63
MAX_TEXT = 1000  # a string value, a shape error
MAX_ITEMS = 1024  # a shape's fields, a list's items (VARY's values)
MAX_DEPTH = 4
REFERENCE_LIMIT = 64 << 10  # characters of the reference's source
SCALARS = ("int", "float", "bool", "none", "str", "dtype")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,100}\Z")
_DTYPE_RE = re.compile(r"[a-z][a-z0-9_]{0,40}\Z")


class MalformedFacts(ValueError):
    """The child's answer is not what a harness could have produced; says which part."""


class Opaque:
    """An input value that is neither a tensor nor a scalar (a list, an object): it has no size."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<{self.type_name} from the harness>"


def fake_mode_for(harness):
    """The mode to call `harness.make_inputs` in for sizes only: torch's FakeTensorMode for a
    harness imported here, none for HarnessFacts (its inputs are meta tensors already; creating a
    FakeTensorMode imports torch._dynamo, seconds)."""
    if isinstance(harness, HarnessFacts):
        import contextlib

        return contextlib.nullcontext()
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode()


def shape_key(shape: dict) -> str:
    """The identity of a shape dict (as JSON carries it: a tuple and a list are the same)."""
    return json.dumps(shape, sort_keys=True)


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise MalformedFacts(what)


def _is_int(v) -> bool:
    return type(v) is int and -MAX_INT <= v < MAX_INT


def plain(value, what: str, depth: int = 0):
    """`value` if it is plain data within the limits (str keys, short strings, finite nesting)."""
    _check(depth <= MAX_DEPTH, f"{what}: nested too deep")
    if value is None or type(value) in (bool, float) or _is_int(value):
        return value
    if isinstance(value, str):
        _check(len(value) <= MAX_TEXT, f"{what}: a string longer than {MAX_TEXT} characters")
        return value
    if isinstance(value, list):
        _check(len(value) <= MAX_ITEMS, f"{what}: more than {MAX_ITEMS} items")
        return [plain(v, what, depth + 1) for v in value]
    if isinstance(value, dict):
        _check(len(value) <= MAX_ITEMS, f"{what}: more than {MAX_ITEMS} fields")
        _check(all(isinstance(k, str) and len(k) <= 100 for k in value), f"{what}: a field name is not text")
        return {k: plain(v, what, depth + 1) for k, v in value.items()}
    raise MalformedFacts(f"{what}: a value of type {type(value).__name__}")


def _shapes(value, what: str, required: bool) -> list[dict]:
    if value is None and not required:
        return []
    _check(isinstance(value, list) and len(value) <= MAX_SHAPES and (value or not required),
           f"{what}: not a list of up to {MAX_SHAPES} shapes")
    _check(all(isinstance(s, dict) for s in value), f"{what}: a shape is not a dict")
    return [plain(s, what) for s in value]


def _dtype(name, what: str):
    import torch

    _check(isinstance(name, str) and bool(_DTYPE_RE.match(name)) and isinstance(getattr(torch, name, None),
                                                                              torch.dtype),
           f"{what}: not a torch dtype name")
    return getattr(torch, name)


def _input(meta, what: str) -> dict:
    """One input's metadata, checked (the form `describe` in harness/gather.py writes)."""
    _check(isinstance(meta, dict) and meta.get("kind") in ("tensor", "other", *SCALARS),
           f"{what}: unknown kind")
    kind = meta["kind"]
    if kind == "tensor":
        dims, stride = meta.get("shape"), meta.get("stride")
        _check(isinstance(dims, list) and isinstance(stride, list) and len(dims) == len(stride) <= MAX_DIMS
               and all(_is_int(d) and 0 <= d <= MAX_DIM for d in dims + stride), f"{what}: bad tensor sizes")
        _check(math.prod(dims) <= MAX_DIM, f"{what}: more than 2**48 elements")
        _dtype(meta.get("dtype"), what)
        return {"kind": kind, "shape": dims, "stride": stride, "dtype": meta["dtype"]}
    if kind == "other":
        name = meta.get("type")
        _check(isinstance(name, str) and len(name) <= 100, f"{what}: bad type name")
        return {"kind": kind, "type": name}
    value = meta.get("value")
    expected = {"int": _is_int(value), "float": type(value) is float, "bool": type(value) is bool,
                "none": value is None, "str": isinstance(value, str) and len(value) <= MAX_TEXT,
                "dtype": isinstance(value, str)}[kind]
    _check(expected, f"{what}: not a {kind}")
    if kind == "dtype":
        _dtype(value, what)
    return {"kind": kind, "value": value}


def _record(rec, i: int) -> tuple[str, dict | str]:
    what = f"inputs[{i}]"
    _check(isinstance(rec, dict) and isinstance(rec.get("shape"), dict), f"{what}: no shape")
    key = shape_key(plain(rec["shape"], what))
    if "error" in rec:
        _check(isinstance(rec["error"], str) and len(rec["error"]) <= MAX_TEXT, f"{what}: bad error text")
        return key, rec["error"]
    made = rec.get("inputs")
    _check(isinstance(made, dict) and len(made) <= MAX_INPUTS, f"{what}: no inputs")
    _check(all(isinstance(k, str) and _NAME_RE.match(k) for k in made),
           f"{what}: an input name is not a name")
    return key, {k: _input(v, f"{what}.{k}") for k, v in made.items()}


def printable_source(text: str) -> str:
    """Source text with every control or invisible character but newline and tab escaped."""
    return "".join(c if c.isprintable() or c in "\n\t" else c.encode("unicode_escape").decode("ascii")
                   for c in text)


@dataclass
class HarnessFacts:
    """What the search and `export` read of a harness, as plain data (see the module docstring)."""

    path: Path
    shapes: list[dict]
    cpu_shapes: list[dict]
    outputs: list[str] | None
    vary: dict[str, list]
    reference_source: str | None
    # shape_key(shape) -> {input name: metadata} for make_inputs(shape, "cpu", 0), or why it failed
    inputs: dict[str, dict | str] = field(default_factory=dict, repr=False)
    positions: list[int] | None = None  # OUTPUTS as positions of the returned tuple
    call: bool = False  # the harness calls the entry itself (`call(entry, inputs)`)

    def shapes_for(self, device: str) -> list[dict]:
        """GPU shapes on CUDA; CPU_SHAPES (or SHAPES when absent) under the interpreter (as Harness)."""
        if device == "cuda":
            return self.shapes
        return self.cpu_shapes or self.shapes

    def make_inputs(self, shape: dict, device: str, seed: int) -> dict:
        """The recorded inputs of `shape` as meta tensors and scalars (sizes, dtypes and values of
        `make_inputs(shape, "cpu", 0)`); raises for a shape, or a seed, that was not recorded."""
        import torch

        if seed != 0:
            raise ValueError(f"{self.path}: only seed 0's inputs were recorded, not seed {seed}")
        made = self.inputs.get(shape_key(shape))
        if made is None:
            raise KeyError(f"{self.path}: no recorded inputs for shape {shape_key(shape)}")
        if isinstance(made, str):
            raise RuntimeError(f"{self.path}: make_inputs{shape_key(shape)} failed in its child: {made}")
        out = {}
        for name, m in made.items():
            if m["kind"] == "tensor":
                out[name] = torch.empty_strided(m["shape"], m["stride"], dtype=getattr(torch, m["dtype"]),
                                                device="meta")
            elif m["kind"] == "dtype":
                out[name] = getattr(torch, m["value"])
            elif m["kind"] == "other":
                out[name] = Opaque(m["type"])
            else:
                out[name] = m["value"]
        return out

    def to_json(self) -> dict:
        """The facts as the child answered them (what a Ray actor rebuilds them from)."""
        return {"shapes": self.shapes, "cpu_shapes": self.cpu_shapes, "outputs": self.outputs,
                "positions": self.positions, "call": self.call,
                "vary": self.vary, "reference_source": self.reference_source,
                "inputs": [{"shape": json.loads(k), **({"error": v} if isinstance(v, str) else {"inputs": v})}
                           for k, v in self.inputs.items()]}

    @classmethod
    def from_json(cls, data, path: str | Path) -> HarnessFacts:
        """Facts from a child's answer, every type and size checked; MalformedFacts otherwise."""
        _check(isinstance(data, dict), "not an object")
        outputs = data.get("outputs")
        _check(outputs is None or (isinstance(outputs, list) and len(outputs) <= MAX_INPUTS
                                   and all(isinstance(o, str) and _NAME_RE.match(o) for o in outputs)),
               "outputs: not a list of input names")
        vary = data.get("vary")
        _check(isinstance(vary, dict) and len(vary) <= MAX_ITEMS
               and all(isinstance(k, str) and isinstance(v, list) and v for k, v in vary.items()),
               "vary: not a map of shape fields to non-empty lists")
        positions = data.get("positions")
        _check(positions is None or (isinstance(positions, list) and 0 < len(positions) <= MAX_INPUTS
                                     and all(_is_int(p) and 0 <= p < MAX_ITEMS for p in positions)
                                     and len(set(positions)) == len(positions)),
               "positions: not a list of distinct return positions")
        _check(outputs is None or positions is None, "outputs and positions: both given")
        _check(type(data.get("call", False)) is bool, "call: not true or false")
        src = data.get("reference_source")
        _check(src is None or (isinstance(src, str) and len(src) <= REFERENCE_LIMIT),
               f"reference_source: not text of up to {REFERENCE_LIMIT} characters")
        records = data.get("inputs")
        _check(isinstance(records, list) and len(records) <= 2 * MAX_SHAPES, "inputs: not a list of records")
        return cls(
            path=Path(path), shapes=_shapes(data.get("shapes"), "shapes", True),
            cpu_shapes=_shapes(data.get("cpu_shapes"), "cpu_shapes", False),
            outputs=None if outputs is None else list(outputs), vary=plain(vary, "vary"),
            positions=None if positions is None else list(positions), call=data.get("call", False),
            reference_source=None if src is None else printable_source(src),
            inputs=dict(_record(r, i) for i, r in enumerate(records)),
        )
