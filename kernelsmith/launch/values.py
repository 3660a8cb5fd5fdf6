"""The values the launch evaluator (launch/evaluate.py) computes with, and its arithmetic.

Each value travels with a taint (does a knob reach it?); UNKNOWN is what cannot be computed.
Tensors are meta tensors of the harness's recorded inputs: their sizes and reshapes are exact.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from kernelsmith.launch.syntax import _OTHER_PLATFORM, _cuda_branch

MAX_PATHS = 16  # paths through undecidable tests, per shape
PURE = {"min", "max", "abs", "int", "len", "next_power_of_2", "cdiv", "triton.next_power_of_2",
        "triton.cdiv"}
_SAME = {"contiguous", "clone", "detach", "cuda"}
_RESHAPE = {"reshape", "view", "flatten", "unsqueeze", "squeeze", "expand", "transpose", "permute", "t"}
_DTYPES = {"float16", "bfloat16", "float32", "float64", "half", "float", "int8", "int16", "int32", "int64",
           "uint8", "bool", "long", "float8_e4m3fn", "float8_e5m2"}


class Unsupported(Exception):
    """A knob reaches something the evaluator cannot follow."""


class _Unknown:
    def __repr__(self) -> str:
        return "?"


UNKNOWN = _Unknown()


@dataclass(frozen=True)
class Dtype:
    name: str


@dataclass(frozen=True)
class Global:
    """A name the launcher does not bind (a module, a builtin, an import), dotted with attributes."""

    name: str


@dataclass
class Items:
    """A tuple or list: (value, tainted) per item."""

    vals: tuple


@dataclass
class Mapping:
    """A dict with string keys: (value, tainted) per entry."""

    vals: dict


@dataclass
class LocalFn:
    """A lambda or def in the launcher (a grid callable)."""

    node: ast.AST


@dataclass
class _State:
    env: dict
    launches: list = field(default_factory=list)
    done: bool = False
    ctx: bool = False  # inside a branch a knob chose
    ret: tuple | None = None

    def fork(self) -> _State:
        return _State(dict(self.env), list(self.launches), self.done, self.ctx, self.ret)


def plain(v, what: str = "a launch argument"):
    """A signature-ready value, or Unsupported for one no signature can hold."""
    if v is None or type(v) in (int, float, bool, str) or isinstance(v, Dtype):
        return v
    if isinstance(v, Items):
        return tuple(plain(x, what) for x, _ in v.vals)
    kind = "cannot be computed" if v is UNKNOWN else f"is a {type(v).__name__}"
    raise Unsupported(f"{what} depends on a knob and {kind}")


def deep(v, t: bool = False) -> bool:
    """Whether a knob reaches a value or anything it holds (a tuple's items, a dict's entries)."""
    if t or isinstance(v, LocalFn):
        return True
    if isinstance(v, Items | Mapping):
        return any(deep(x, xt) for x, xt in (v.vals if isinstance(v, Items) else v.vals.values()))
    return False


def truth(v):
    if v is None or type(v) in (int, float, bool, str):
        return bool(v)
    return bool(v.vals) if isinstance(v, Items | Mapping) else UNKNOWN


def next_power_of_2(n: int) -> int:
    """Triton's next_power_of_2 (0 for 0)."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


def plain_ok(v) -> bool:
    return v is None or type(v) in (int, float, bool, str) or isinstance(v, Dtype)


def items(v) -> tuple | None:
    import torch

    if isinstance(v, Items):
        return v.vals
    if isinstance(v, torch.Size):
        return tuple((int(d), False) for d in v)
    return None


def binop(op, left: tuple, right: tuple) -> tuple:
    (a, ta), (b, tb) = left, right
    t = deep(a, ta) or deep(b, tb)  # a tuple holding a knob's value taints what is made of it
    if type(a) not in (int, float, bool) or type(b) not in (int, float, bool):
        return UNKNOWN, t
    try:
        if isinstance(op, ast.Pow | ast.LShift) and abs(b) > 256:
            return UNKNOWN, t
        ops = {ast.Add: a.__add__, ast.Sub: a.__sub__, ast.Mult: a.__mul__, ast.FloorDiv: a.__floordiv__,
               ast.Mod: a.__mod__, ast.Div: a.__truediv__, ast.Pow: a.__pow__, ast.LShift: a.__lshift__,
               ast.RShift: a.__rshift__, ast.BitAnd: a.__and__, ast.BitOr: a.__or__}
        out = ops[type(op)](b) if type(op) in ops else NotImplemented
    except (ZeroDivisionError, ValueError, OverflowError, TypeError):
        return UNKNOWN, t
    return (UNKNOWN if out is NotImplemented else out), t


def _known(v) -> bool:
    """A value whose identity with None is known (never an unresolved global: `torch.version.hip`)."""
    import torch

    return plain_ok(v) or isinstance(v, Items | Mapping | LocalFn | torch.Tensor)


def compare(op, a, b):
    """One comparison of known values; UNKNOWN where it cannot be told."""
    if isinstance(op, ast.Is | ast.IsNot):
        if (a is None or b is None) and _known(a) and _known(b):
            same = a is None and b is None
            return same if isinstance(op, ast.Is) else not same
        return UNKNOWN
    if isinstance(op, ast.In | ast.NotIn):
        if not isinstance(b, Items) or not plain_ok(a) or not all(plain_ok(x) for x, _ in b.vals):
            return UNKNOWN
        return (a in [x for x, _ in b.vals]) == isinstance(op, ast.In)
    if not (plain_ok(a) and plain_ok(b)):
        return UNKNOWN
    try:
        return {ast.Eq: lambda: a == b, ast.NotEq: lambda: a != b, ast.Lt: lambda: a < b,
                ast.LtE: lambda: a <= b, ast.Gt: lambda: a > b, ast.GtE: lambda: a >= b}[type(op)]()
    except TypeError:
        return UNKNOWN


def pure(name: str, args: list[tuple]):
    vals = [v for v, _ in args]
    if name in ("min", "max") and len(vals) == 1 and isinstance(vals[0], Items):
        vals = [v for v, _ in vals[0].vals]
    if name == "len" and len(vals) == 1:
        elts = items(vals[0])
        if elts is not None:
            return len(elts)
        return int(vals[0].shape[0]) if hasattr(vals[0], "shape") and vals[0].dim() else UNKNOWN
    if not vals or not all(type(v) in (int, float, bool) for v in vals):
        return UNKNOWN
    if name in ("min", "max"):
        return min(vals) if name == "min" else max(vals)
    if name in ("abs", "int") and len(vals) == 1:
        return abs(vals[0]) if name == "abs" else int(vals[0])
    if name == "next_power_of_2" and len(vals) == 1 and type(vals[0]) is int:
        return next_power_of_2(vals[0])
    if name == "cdiv" and len(vals) == 2 and all(type(v) is int for v in vals) and vals[1]:
        return -(-vals[0] // vals[1])
    return UNKNOWN


def tensor_method(x, method: str, args: list, kw: dict, taint: bool) -> tuple:
    """A method of a (meta) tensor the evaluator knows: sizes, strides, reshapes, casts, copies."""
    import torch

    vals = [v for v, _ in args]
    if method in ("to", "float", "half", "bfloat16"):  # a cast or a move: the sizes stay
        dtype = {"float": "float32", "half": "float16", "bfloat16": "bfloat16"}.get(method)
        given = [*vals, kw.get("dtype", (None, False))[0]]
        dtype = dtype or next((v.name for v in given if isinstance(v, Dtype)), None)
        return (x.to(getattr(torch, dtype)) if dtype else x), taint
    if not kw and all(type(v) is int for v in vals):
        try:
            if method in ("size", "stride"):
                out = getattr(x, method)(*vals)
                return (Items(tuple((int(d), False) for d in out)) if isinstance(out, tuple)
                        else int(out)), taint
            if method in ("numel", "dim", "element_size", "is_contiguous"):
                return getattr(x, method)(), taint
            if method in _SAME or method in _RESHAPE:
                return getattr(x, method)(*vals), taint
        except (RuntimeError, TypeError, ValueError, IndexError):
            return UNKNOWN, taint
    if taint:
        raise Unsupported(f"a knob reaches tensor.{method}")
    return UNKNOWN, False


def attribute(v, t: bool, attr: str) -> tuple:
    """`v.attr`: a module's dtype or dotted name, a tensor's shape, ndim or dtype."""
    import torch

    if isinstance(v, Global):
        if v.name == "torch" and attr in _DTYPES:
            return Dtype(str(getattr(torch, attr)).removeprefix("torch.")), t
        return Global(f"{v.name}.{attr}"), t
    if isinstance(v, Dtype) and attr == "itemsize":
        return getattr(torch, v.name).itemsize, t
    if isinstance(v, torch.Tensor):
        if attr == "shape":
            return Items(tuple((int(d), False) for d in v.shape)), t
        if attr == "ndim":
            return v.dim(), t
        if attr == "dtype":
            return Dtype(str(v.dtype).removeprefix("torch.")), t
    return UNKNOWN, deep(v, t)


def index(value: tuple, key: tuple) -> tuple:
    """`v[k]` of a tuple, list or dict whose item is known."""
    (v, t), (k, kt) = value, key
    t = t or kt
    if isinstance(v, Items) and type(k) is int and -len(v.vals) <= k < len(v.vals) or (
            isinstance(v, Mapping) and isinstance(k, str) and k in v.vals):
        iv, it = v.vals[k]
        return iv, it or t
    return UNKNOWN, deep(v, t) or deep(k, kt)


def module_knob(t, tree: ast.Module, inside: set[int]) -> str:
    """The module-level name a knob sets; Unsupported unless only the launcher (`inside`) reads it."""
    var = re.split(r"[|#]", t.key.split(":", 1)[1])[0]
    if not var.isidentifier():
        raise Unsupported(f"module-level knob {t.key} is no plain name")
    own = {id(x) for s in tree.body if isinstance(s, ast.Assign) for x in ast.walk(s.value)
           if any(isinstance(g, ast.Name) and g.id == var for g in s.targets)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id == var and isinstance(n.ctx, ast.Load):
            if id(n) not in inside and id(n) not in own:
                raise Unsupported(f"module-level knob {var} is read outside the launcher")
    return var


def module_bindings(body: list, out: dict, cuda: bool, top: bool = True) -> dict:
    """name -> [value expression per module-level binding] (None: one not evaluable, e.g. in a branch);
    of a platform switch (`if infer_device() == "xpu": ...`) only the branch taken here binds."""
    for s in body:
        if isinstance(s, ast.Assign | ast.AnnAssign) and s.value is not None:
            for t in s.targets if isinstance(s, ast.Assign) else [s.target]:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out.setdefault(n.id, []).append(s.value if top and isinstance(t, ast.Name) else None)
        elif isinstance(s, ast.If) and (taken := platform(s.test, cuda)) is not UNKNOWN:
            module_bindings(s.body if taken else s.orelse, out, cuda, top)
        elif isinstance(s, ast.If | ast.Try | ast.With | ast.For | ast.While):
            for part in ("body", "orelse", "finalbody"):
                module_bindings(getattr(s, part, []), out, cuda, top=False)
            for h in getattr(s, "handlers", []):
                module_bindings(h.body, out, cuda, top=False)
        elif isinstance(s, ast.Import | ast.ImportFrom | ast.ClassDef):
            names = [(a.asname or a.name).split(".")[0] for a in getattr(s, "names", [])]
            for name in names + ([s.name] if isinstance(s, ast.ClassDef) else []):
                if name in out or isinstance(s, ast.ClassDef):
                    out.setdefault(name, []).append(None)
    return out


def from_input(v):
    """A launcher argument as the evaluator holds it: a tensor, a dtype, a scalar, else UNKNOWN."""
    import torch

    if isinstance(v, torch.Tensor):
        return v
    if isinstance(v, torch.dtype):
        return Dtype(str(v).removeprefix("torch."))
    return v if v is None or type(v) in (int, float, bool, str) else UNKNOWN


def chain(ops: list, vals: list[tuple]) -> tuple:
    """A comparison chain `a < b <= c` of evaluated operands."""
    taint = any(deep(v, t) for v, t in vals)
    for op, (a, _), (b, _) in zip(ops, vals, vals[1:], strict=False):
        ok = compare(op, a, b)
        if ok is UNKNOWN or not ok:
            return ok, taint
    return True, taint


def unary(op, v, t: bool) -> tuple:
    """`-v`, `+v`, `~v`, `not v`."""
    t = deep(v, t)
    if isinstance(op, ast.Not):
        ok = truth(v)
        return (UNKNOWN if ok is UNKNOWN else not ok), t
    if type(v) not in (int, float, bool) or isinstance(op, ast.Invert) and type(v) is float:
        return UNKNOWN, t
    return {ast.USub: lambda x: -x, ast.UAdd: lambda x: +x, ast.Invert: lambda x: ~x}[type(op)](v), t


def platform(test, cuda: bool):
    """The branch a platform switch takes here (True: its body), else UNKNOWN. On CUDA its CUDA
    branch; elsewhere (the interpreter on a CPU) only a switch on another platform (`_is_hip`) is
    decided, its not-that-platform branch."""
    branch = _cuda_branch(test)
    if branch is None or not cuda and not _OTHER_PLATFORM.search(ast.unparse(test).lower()):
        return UNKNOWN
    return branch == "body"


def undecided(tainted: bool, parts: list) -> None:
    """Parts whose running a knob decides, undecidably: fine only without calls (side effects)."""
    if tainted and any(isinstance(c, ast.Call) for x in parts for c in ast.walk(x)):
        raise Unsupported("calls that run or not by a test a knob reaches, undecidable")
