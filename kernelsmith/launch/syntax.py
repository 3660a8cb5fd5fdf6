"""The `Tunable` record and the syntax helpers behind the launch finder (launch/finder.py).

Which names are launch choices and of what kind, where a file's lines start, which functions are
Triton kernels and which of them loop (`num_stages` matters there), and small AST readers.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass, field
from enum import StrEnum

TRITON_DEFAULTS = {"num_warps": 4, "num_stages": 3}  # what a CUDA launch gets without the keyword
_KNOB = re.compile(r"^(num_warps|num_stages|\w*(BLOCK|TILE|CHUNK|SPLIT|GROUP|WARPS|STAGES)\w*)$", re.I)
_JIT = re.compile(r"\b(jit|autotune|heuristics)\b")
# Calls whose integer arguments are part of a launch value's arithmetic; any other call (x.size(-1),
# get_device_props(...)) holds indices or semantics, never a choice.
_ARITH = {"next_power_of_2", "int", "round", "ceil", "floor", "abs"}
_OTHER_PLATFORM = re.compile(r"hip|rocm|amd|npu|xpu|musa|mlu|mps")
# Device names a platform switch compares with (`infer_device() == "xpu"`, `x.device.type != "cuda"`).
_DEVICE_NAMES = {"cuda", "cpu", "hip", "rocm", "npu", "xpu", "musa", "mlu", "mps"}
_ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)  # size thresholds; == / != switch modes, never tuned
# The integer arithmetic that builds a size from literals (`65536 // 2`, `8 * 32`).
_FOLDS = {ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


class Computed(StrEnum):
    """The value of an override knob that leaves the launch argument as the code computes it.

    No number, so never equal to a literal value (0 included). A string, so json, the archive and
    printed configs hold it as "computed", which reads back equal to it."""

    AS_COMPUTED = "computed"

    def __repr__(self) -> str:
        return "AS_COMPUTED"


AS_COMPUTED = Computed.AS_COMPUTED


def knob_order(value: int | str) -> int:
    """A knob value as a number to sort and compare by: itself, the computed value -1 (before every
    literal: knob values are positive)."""
    return -1 if value == AS_COMPUTED else value


@dataclass
class Tunable:
    """One integer in the file the search may change, with its valid values."""

    key: str  # stable across candidates: scope, name and occurrence (never offsets)
    kind: str  # num_warps | num_stages | block | group | scale | int
    base: int | Computed  # the value in the code it was found in
    sites: list[tuple[int, int]]  # byte spans of the integer literal(s) holding the value
    scope: str | None  # enclosing function (None: module level or a triton.Config list)
    names: set[str] = field(default_factory=set)  # what asserts may call it
    domain: list[int | Computed] = field(default_factory=list)
    kernels: set[str] = field(default_factory=set)  # the kernels whose launches it configures
    users: set[str] = field(default_factory=set)  # module-level values: the functions reading them
    fmt: str = "{}"  # text written at each site: the value, or `, num_warps={}` for an absent option
    # An override of a launch option computed in another file (`calculate_settings(n)` imported from
    # a utils module): the argument's own text, written back for AS_COMPUTED (the base).
    computed: str = ""
    helper: bool = False  # a literal inside a helper a launch value is returned from (shared by callers)

    @property
    def per_call(self) -> bool:
        """True when the value may differ per call (it lives in a launcher: a size table can vary it)."""
        return self.scope is not None and not self.key.startswith("config") and not self.helper

    def text(self, value: int | str) -> str:
        """The source text that sets this tunable to `value` (an int or an expression)."""
        if self.computed and value == AS_COMPUTED:
            return self.computed
        return self.fmt.format(value)

    def show(self, value: int | str) -> str:
        """`value` in words for a description (an override's base reads "computed")."""
        return "computed" if self.computed and value == AS_COMPUTED else str(value)


def kind_of(name: str) -> str:
    """The tunable kind a keyword or variable name implies."""
    low = name.lower()
    if low.endswith("warps"):
        return "num_warps"
    if low.endswith("stages"):
        return "num_stages"
    if "group" in low:
        return "group"
    if any(k in low for k in ("block", "tile", "chunk", "split")):
        return "block"
    return "int"


def node_span(offsets: list[int], node: ast.AST) -> tuple[int, int]:
    """Byte span of `node` in the code whose `line_offsets` are `offsets`."""
    return offsets[node.lineno - 1] + node.col_offset, offsets[node.end_lineno - 1] + node.end_col_offset


def line_offsets(data: bytes) -> list[int]:
    offsets, pos = [], 0
    for line in data.splitlines(keepends=True):
        offsets.append(pos)
        pos += len(line)
    offsets.append(pos)
    return offsets


def jit_functions(tree: ast.AST) -> set[str]:
    """Names of functions decorated with triton.jit / autotune / heuristics."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(_JIT.search(ast.unparse(d)) for d in node.decorator_list):
                names.add(node.name)
    return names


def is_int(node) -> bool:
    """True for an integer literal (never a bool)."""
    return isinstance(node, ast.Constant) and type(node.value) is int


def _call_name(func) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def constant(node) -> bool:
    """True for an integer literal or an expression of integer literals only (`65536 // 2`, `4096 - 1`)."""
    if is_int(node):
        return True
    return isinstance(node, ast.BinOp) and constant(node.left) and constant(node.right)


def folded(node) -> int | None:
    """The integer a literal, or an expression of literals that builds a size, is (`65536 // 2`: 32768;
    `8 * 32`): one value, so one knob, written back as one literal. None for anything else: names,
    calls, offsets and masks (`+`, `-`, `%`), a true division's float."""
    if is_int(node):
        return node.value
    if not isinstance(node, ast.BinOp) or type(node.op) not in _FOLDS:
        return None
    a, b = folded(node.left), folded(node.right)
    if a is None or b is None or isinstance(node.op, ast.FloorDiv) and b == 0:
        return None
    value = _FOLDS[type(node.op)](a, b)
    return value if value.bit_length() <= 64 else None


def _literals(value) -> list[ast.expr]:
    """The integer literals a value is: itself (a literal, or an expression of literals `folded`
    gives one integer for), or the literal branches of a conditional expression (only the CUDA
    branch of a platform switch such as `16 if _is_hip else 32`)."""
    if folded(value) is not None:
        return [value]
    if isinstance(value, ast.IfExp):
        branches = {"body": value.body, "orelse": value.orelse}
        cuda = _cuda_branch(value.test)
        return [c for name, b in branches.items() if cuda in (None, name) for c in _literals(b)]
    return []


def _computed(value) -> bool:
    """True when a value, or a branch of it that runs on CUDA, is computed rather than a literal (or
    an expression of literals only)."""
    if constant(value):
        return False
    if isinstance(value, ast.IfExp):
        cuda = _cuda_branch(value.test)
        branches = {"body": value.body, "orelse": value.orelse}
        return any(_computed(b) for name, b in branches.items() if cuda in (None, name))
    return True


def _device_compare(test) -> str | None:
    """Which branch runs on an NVIDIA GPU when `test` compares a device query with device names
    (`infer_device() == "xpu"`, `x.device.type != "cuda"`, `DEVICE in ("npu", "xpu")`)."""
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return None
    op, (left, right) = test.ops[0], (test.left, test.comparators[0])
    if isinstance(left, ast.Constant | ast.Tuple | ast.List | ast.Set):
        left, right = right, left
    names = right.elts if isinstance(right, ast.Tuple | ast.List | ast.Set) else [right]
    words = [n.value.lower() for n in names if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    if not isinstance(left, ast.Name | ast.Attribute | ast.Call) or len(words) != len(names) or not words:
        return None
    if not set(words) <= _DEVICE_NAMES:
        return None
    if isinstance(op, ast.Eq | ast.In):
        holds = "cuda" in words
    elif isinstance(op, ast.NotEq | ast.NotIn):
        holds = "cuda" not in words
    else:
        return None
    return "body" if holds else "orelse"


def _cuda_branch(test) -> str | None:
    """Which branch of `a if test else b` (or of an `if` statement) runs on an NVIDIA GPU when `test`
    is a platform flag or compares the device with device names."""
    flip = False
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, flip = test.operand, not flip
    if (branch := _device_compare(test)) is not None:
        return branch if not flip else {"body": "orelse", "orelse": "body"}[branch]
    if not isinstance(test, (ast.Name, ast.Attribute, ast.Call)):
        return None
    text = ast.unparse(test).lower()
    if _OTHER_PLATFORM.search(text):
        return "body" if flip else "orelse"
    if re.search(r"cuda|nvidia", text):
        return "orelse" if flip else "body"
    return None


def mark_dead(tree: ast.AST) -> None:
    """Tag (`_ks_dead`) every node of an `if` branch that never runs on an NVIDIA GPU: the other
    branch of a platform switch (`if infer_device() == "xpu": ...`). What is bound or launched there
    is no choice on CUDA."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (live := _cuda_branch(node.test)) is not None:
            for stmt in node.orelse if live == "body" else node.body:
                for sub in ast.walk(stmt):
                    sub._ks_dead = True  # noqa: B010 - a private tag on our own parse tree


def dead(node: ast.AST) -> bool:
    """True for a node `mark_dead` tagged."""
    return getattr(node, "_ks_dead", False)


@dataclass
class CallPart:
    """Item `index` of what `call` returns (`BLOCK, warps = settings(n)`), as a bound value."""

    call: ast.Call
    index: int

    @property
    def lineno(self) -> int:
        return self.call.lineno

    @property
    def col_offset(self) -> int:
        return self.call.col_offset


def _pairs(target, value) -> list[tuple[str, ast.expr | CallPart]]:
    """(name, value) bound by one assignment, tuple unpacking of a tuple of values or of a call's
    result (`BLOCK_SIZE, num_warps = calculate_settings(n)`) included."""
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    if (
        isinstance(target, (ast.Tuple, ast.List))
        and isinstance(value, (ast.Tuple, ast.List))
        and len(target.elts) == len(value.elts)
        and not any(isinstance(e, ast.Starred) for e in value.elts)
    ):
        return [p for t, v in zip(target.elts, value.elts, strict=True) for p in _pairs(t, v)]
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, ast.Call):
        if not any(isinstance(e, ast.Starred) for e in target.elts):
            return [(t.id, CallPart(value, i)) for i, t in enumerate(target.elts) if isinstance(t, ast.Name)]
    return []


def _dict_entries(value) -> list[tuple[str, ast.expr]] | None:
    """Entries of a `{"num_warps": ...}` literal or a `dict(num_warps=...)` call; None for anything else."""
    if isinstance(value, ast.Dict):
        if all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in value.keys):
            return [(k.value, v) for k, v in zip(value.keys, value.values, strict=True)]
        return None
    if isinstance(value, ast.Call) and _call_name(value.func) == "dict" and not value.args:
        if all(kw.arg for kw in value.keywords):
            return [(kw.arg, kw.value) for kw in value.keywords]
    return None


def _is_count(name: str) -> bool:
    """A count of blocks/groups/... (`n_blocks`, `num_groups`, `col_tiles`) rather than a size or a warp
    or stage setting: a literal count is still a choice (`num_splits = 8`), one computed is not."""
    low = name.lower()
    if "warps" in low or "stages" in low:
        return False
    return low.startswith(("n_", "num_", "nblock", "ntile")) or low.endswith(
        ("blocks", "tiles", "chunks", "groups", "splits")
    )


def _pipelined(node) -> bool:
    """A loop the compiler can pipeline (tl.static_range is unrolled instead)."""
    if isinstance(node, ast.While):
        return True
    return isinstance(node, ast.For) and not (
        isinstance(node.iter, ast.Call) and _call_name(node.iter.func) == "static_range"
    )


def kernel_loops(tree: ast.AST) -> dict[str, bool]:
    """For each Triton function: does it, or a Triton function it calls, run a pipelinable loop?"""
    jit = jit_functions(tree)
    funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in jit}
    own = {name: any(_pipelined(s) for s in ast.walk(f)) for name, f in funcs.items()}
    calls = {
        name: {_call_name(c.func) for c in ast.walk(f) if isinstance(c, ast.Call)} & set(funcs)
        for name, f in funcs.items()
    }
    out = {}
    for name in funcs:
        seen, todo = set(), [name]
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo.extend(calls[n])
        out[name] = any(own[n] for n in seen)
    return out

