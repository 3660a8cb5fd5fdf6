"""How an entry uses each tensor argument, for `harness new`: its rank and the names of its
dimensions, whether it holds floats, integers or bools, and for integers the size that bounds them.

Read from the syntax tree only (no target code runs): the entry's body and the `name: ... [a, b, c]`
lines of its docstring (harness.handoff reads the functions and kernels it hands tensors to). Code
says more than a docstring: `B, H, S, D = q.shape` names four dimensions; `q.shape[3]`,
`q.stride(3)` say at least four; `q.view(-1, D)` names the last one. What is said of a name after
it is rebound to something of another shape (`x = x.view(-1, n)`) is not about the argument.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

# Methods that return a tensor of the same shape: rebinding a name to one keeps what is known.
SAME_SHAPE = {"contiguous", "float", "half", "bfloat16", "to", "clone", "detach", "requires_grad_", "int",
              "long", "bool", "cuda", "cpu"}
INT_DTYPES = {"int8": "int32", "int16": "int32", "int32": "int32", "int": "int32", "uint8": "int32",
              "int64": "int64", "long": "int64"}
INDEX_NAME = re.compile(r"(.+_)?(index|indices|idx|ids|id)|.*_indices|indices_.+|.*offsets|cu_seqlens.*|"
                        r".*seq_lens|position_ids|positions|slot_mapping|block_tables?|.*_table|.*_loc")
INDEXING = {"index_select", "gather", "scatter", "scatter_", "index_add_", "index_copy_", "scatter_add_"}
MASK_NAME = re.compile(r"(.+_)?mask")
DOC_SHAPE = re.compile(r"[\[(]\s*([^\[\]()]*,[^\[\]()]*)[\])]")
DOC_DTYPE = re.compile(r"\b(int8|int16|int32|int64|long|bool|boolean)\b")


@dataclass
class TensorUse:
    """What the code says of one tensor argument."""

    name: str
    rank: int = 0                                   # at least; 0: nothing said
    exact: bool = False                             # the rank is known, not a lower bound
    dims: dict[int, str] = field(default_factory=dict)  # position (negative: from the end) -> name
    dtype: str = ""                                 # "" (float) | int32 | int64 | bool
    dtype_why: str = ""
    # What may bound its values (an index's range), first first: (("name", n) or ("dim", tensor, i), why).
    bounds: list[tuple[tuple, str]] = field(default_factory=list)

    def names(self, rank: int) -> list[str | None]:
        """The names of `rank` dimensions, in order (None where nothing names one)."""
        out: list[str | None] = [None] * rank
        for pos, name in self.dims.items():
            i = pos if pos >= 0 else rank + pos
            if 0 <= i < rank and out[i] is None:
                out[i] = name
        return out


def read_uses(fn: ast.AST, names: list[str]) -> dict[str, TensorUse]:
    """What `fn`'s body and docstring say of `names` (harness.handoff adds what its callees say)."""
    uses = {n: TensorUse(n) for n in names}
    _read_body(fn, uses)
    _read_docstring(fn, uses)
    return uses


def _cutoffs(fn: ast.AST, names) -> dict[str, int]:
    """For each name, the line from which it is bound to something of another shape."""
    out: dict[str, int] = {}
    for node in ast.walk(fn):
        # `x += y` keeps x's shape: only assignments rebind
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and t.id in names and not _same_shape(node.value, t.id):
                    out[t.id] = min(out.get(t.id, node.lineno + 1), node.lineno + 1)
    return out


def _same_shape(value: ast.AST, name: str) -> bool:
    return _unwrap(value) == name


def _unwrap(node) -> str | None:
    """`idx` for `idx`, `idx.long()`, `idx.to(torch.int64)`: the name under same-shape calls."""
    while _same_shape_call(node):
        node = node.func.value
    return _name(node)


def _same_shape_call(node) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
        and node.func.attr in SAME_SHAPE


def _base(node) -> str:
    """`m` for `m`, `m[:, None]`, `m.bool()`: the tensor a mask expression reads ("" if none)."""
    while isinstance(node, ast.Subscript) or _same_shape_call(node):
        node = node.value if isinstance(node, ast.Subscript) else node.func.value
    return _name(node) or ""


def _name(node) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def _int(node) -> int | None:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _int(node.operand)
        return -v if v is not None else None
    return node.value if isinstance(node, ast.Constant) and type(node.value) is int else None


def _read_body(fn: ast.AST, uses: dict[str, TensorUse]) -> None:
    cut = _cutoffs(fn, uses)
    shape_alias: dict[str, str] = {}   # `shape = x.shape`

    def live(name, node) -> TensorUse | None:
        if name not in uses or getattr(node, "lineno", 0) >= cut.get(name, 1 << 30):
            return None
        return uses[name]

    def shape_of(node) -> str | None:
        """The argument whose `.shape` / `.size()` `node` is."""
        if isinstance(node, ast.Attribute) and node.attr == "shape":
            return _name(node.value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "size" \
                and not node.args:
            return _name(node.func.value)
        return shape_alias.get(_name(node) or "")

    def dim_of(node) -> tuple[str, int] | None:
        """(argument, position) for `x.shape[i]`, `x.size(i)`."""
        if isinstance(node, ast.Subscript) and shape_of(node.value) and _int(node.slice) is not None:
            return shape_of(node.value), _int(node.slice)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "size" \
                and len(node.args) == 1 and _int(node.args[0]) is not None:
            return _name(node.func.value), _int(node.args[0])
        return None

    def at_least(u: TensorUse, pos: int) -> None:
        if pos >= 0:  # `x.shape[-1]` says no rank: `x` may have any number of leading dimensions
            u.rank = max(u.rank, pos + 1)

    def say_int(u: TensorUse, dtype: str, why: str) -> None:
        if not u.dtype:
            u.dtype, u.dtype_why = dtype, why

    def say_bound(u: TensorUse, bound, why: str) -> None:
        u.bounds.append((bound, why))

    def bound_of(node):
        d = dim_of(node)
        if d is not None and d[0] in uses:
            return ("dim", *d)
        return ("name", node.id) if isinstance(node, ast.Name) else None

    nodes = sorted((n for n in ast.walk(fn) if hasattr(n, "lineno")), key=lambda n: (n.lineno, n.col_offset))
    for node in nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            t, v = node.targets[0], node.value
            owner = shape_of(v)
            if isinstance(t, ast.Name) and isinstance(v, ast.Attribute) and v.attr == "shape" \
                    and owner in uses:
                shape_alias[t.id] = owner
            elif isinstance(t, (ast.Tuple, ast.List)) and owner and live(owner, node):
                u = uses[owner]
                if not any(isinstance(e, ast.Starred) for e in t.elts):
                    u.rank, u.exact = len(t.elts), True
                    for i, e in enumerate(t.elts):
                        if isinstance(e, ast.Name) and e.id != "_":
                            u.dims.setdefault(i, e.id)
            elif isinstance(t, ast.Name) and dim_of(v) and live(dim_of(v)[0], node):
                owner, pos = dim_of(v)
                uses[owner].dims.setdefault(pos, t.id)
        d = dim_of(node)
        if d is not None and live(d[0], node):
            at_least(uses[d[0]], d[1])
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            _read_method(node, live, at_least, say_int, say_bound)
        if isinstance(node, ast.Call):
            _read_call(node, live, say_int, say_bound, uses)
        index = _unwrap(node.slice) if isinstance(node, ast.Subscript) else None
        if index is not None and live(index, node) and _name(node.value):
            u = uses[index]  # `x[mask]` selects: a bool tensor; `x[idx]` gathers: an integer one
            say_int(u, "bool" if MASK_NAME.fullmatch(index) else "int32", f"it indexes {node.value.id}")
            if node.value.id in uses and u.dtype != "bool":
                say_bound(u, ("dim", node.value.id, 0), f"it indexes {node.value.id}")
        inverted = isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert)
        if inverted and live(_base(node.operand), node):
            say_int(uses[_base(node.operand)], "bool", "the entry negates it with ~")
        if isinstance(node, ast.Compare):
            _read_compare(node, live, say_int, say_bound, bound_of, uses)


def _read_method(node: ast.Call, live, at_least, say_int, say_bound) -> None:
    """`x.stride(i)`, `x.view(-1, D)`, `x.to(torch.int32)`, `x.long()`, `src.index_select(0, x)`."""
    owner, attr, args = _name(node.func.value), node.func.attr, node.args
    u = live(owner or "", node)
    if u is not None:
        if attr == "stride" and len(args) == 1 and _int(args[0]) is not None:
            at_least(u, _int(args[0]))
        elif attr in ("view", "reshape") and len(args) >= 2 and _name(args[-1]):
            u.dims.setdefault(-1, args[-1].id)
        elif attr in ("int", "long", "bool"):
            dtype = {"int": "int32", "long": "int64", "bool": "bool"}[attr]
            say_int(u, dtype, f"the entry calls .{attr}() on it")
        elif attr == "to" and args and _dtype(args[0]):
            say_int(u, _dtype(args[0]), f"the entry converts it .to(torch.{_dtype_word(args[0])})")
    if attr in INDEXING and len(args) >= 2 and live(_name(args[1]) or "", node) and _int(args[0]) is not None:
        idx = live(args[1].id, node)
        say_int(idx, "int64", f"it is the index of {ast.unparse(node.func)}")
        if owner is not None and live(owner, node) is not None:
            say_bound(idx, ("dim", owner, _int(args[0])), f"it indexes {owner}'s dimension {_int(args[0])}")
    if attr in ("masked_fill", "masked_fill_", "masked_select") and args and live(_base(args[0]), node):
        say_int(live(_base(args[0]), node), "bool", f"it is the mask of {attr}")


def _read_call(node: ast.Call, live, say_int, say_bound, uses) -> None:
    """`torch.where(m, ...)`, `torch.gather(src, d, idx)`, `one_hot(idx, n)`, `f(idx, E)`."""
    fname = node.func.attr if isinstance(node.func, ast.Attribute) else _name(node.func)
    args = node.args
    if fname == "where" and len(args) == 3 and live(_base(args[0]), node):
        say_int(uses[_base(args[0])], "bool", "it is the condition of torch.where")
    if fname in ("gather", "index_select") and isinstance(node.func, ast.Attribute) \
            and _name(node.func.value) == "torch" and len(args) >= 3 and live(_name(args[2]) or "", node):
        idx, src, d = uses[args[2].id], _name(args[0]), _int(args[1])
        say_int(idx, "int64", f"it is the index of torch.{fname}")
        if src in uses and d is not None:
            say_bound(idx, ("dim", src, d), f"it indexes {src}'s dimension {d}")
    if fname in ("one_hot", "bincount") and args and live(_name(args[0]) or "", node):
        idx = uses[args[0].id]
        say_int(idx, "int64", f"the entry calls {fname} on it")
        counted = [k.value for k in node.keywords if k.arg in ("num_classes", "minlength")]
        n = args[1] if len(args) > 1 else counted[0] if counted else None
        if isinstance(n, ast.Name):
            say_bound(idx, ("name", n.id), f"{fname} counts {n.id} classes")
    # A tensor handed on beside one other name (`routing(top_k_index, E)`): if it holds indices and
    # that name is a size, the size they index.
    passed = [a.id for a in args if isinstance(a, ast.Name) and live(a.id, node)]
    others = [a.id for a in args if isinstance(a, ast.Name) and a.id not in uses]
    for p in passed if len(others) == 1 else ():
        why = f"the entry passes it with {others[0]} to {ast.unparse(node.func)}"
        say_bound(uses[p], ("name", others[0]), why)


def _read_compare(node: ast.Compare, live, say_int, say_bound, bound_of, uses) -> None:
    """`x.dim() == 4`, `x.ndim == 4`, `x.dtype == torch.int32`, `idx < E`."""
    left, op, right = node.left, node.ops[0], node.comparators[0]
    if len(node.ops) != 1:
        return
    for a, b in ((left, right), (right, left)):
        r = _int(b)
        owner = None
        if isinstance(a, ast.Call) and isinstance(a.func, ast.Attribute) and a.func.attr == "dim":
            owner = _name(a.func.value)
        elif isinstance(a, ast.Attribute) and a.attr == "ndim":
            owner = _name(a.value)
        if owner and r is not None and isinstance(op, ast.Eq) and live(owner, node):
            uses[owner].rank, uses[owner].exact = r, True
        if isinstance(a, ast.Attribute) and a.attr == "dtype" and live(_name(a.value) or "", node):
            kinds = [_dtype(e) for e in (b.elts if isinstance(b, (ast.Tuple, ast.List, ast.Set)) else [b])]
            if kinds and all(kinds) and isinstance(op, (ast.Eq, ast.In)):
                say_int(uses[a.value.id], kinds[0], f"the entry checks its dtype is {ast.unparse(b)}")
    name = _name(left)
    if name and live(name, node) and isinstance(op, (ast.Lt, ast.LtE, ast.GtE)):
        if isinstance(op, ast.GtE) and _int(right) == 0:
            say_int(uses[name], "int32", "the entry compares it with 0")
        elif isinstance(op, ast.Lt) and bound_of(right) is not None:
            if bound_of(right)[0] == "dim":  # below a size (a Name may be a float threshold)
                say_int(uses[name], "int32", f"the entry compares it with {ast.unparse(right)}")
            say_bound(uses[name], bound_of(right), f"the entry checks it is below {ast.unparse(right)}")


def _dtype_word(node) -> str:
    return node.attr if isinstance(node, ast.Attribute) else ""


def _dtype(node) -> str:
    """int32 / int64 / bool for `torch.int32`, `torch.long`, `torch.bool`; "" otherwise."""
    word = _dtype_word(node)
    return "bool" if word == "bool" else INT_DTYPES.get(word, "")


def _read_docstring(fn: ast.AST, uses: dict[str, TensorUse]) -> None:
    """`name: ... [batch, heads, seq, dim] int32` lines: dimension names and dtype, where the code
    gives no rank or the same one."""
    doc = ast.get_docstring(fn) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    for u in uses.values() if doc else ():
        m = re.search(rf"^\s*{re.escape(u.name)}\b[^:\n]{{0,40}}:(.*)$", doc, re.M)
        if m is None:
            continue
        shape = DOC_SHAPE.search(m.group(1))
        if shape is not None:
            parts = [p.strip() for p in shape.group(1).split(",")]
            parts = parts[:-1] if parts[-1] == "" else parts
            if not (u.exact and u.rank != len(parts)) and u.rank <= len(parts):
                u.rank, u.exact = len(parts), True
                for i, p in enumerate(parts):
                    if p.isidentifier():
                        u.dims.setdefault(i, p)
        word = DOC_DTYPE.search(m.group(1))
        if word is not None and not u.dtype:
            w = word.group(1)
            u.dtype = "bool" if w.startswith("bool") else INT_DTYPES[w]
            u.dtype_why = f"its docstring says {w}"


def by_name(u: TensorUse) -> None:
    """Where the code says nothing of the element type, the name: `*_index`, `*_ids`, `*mask`."""
    if u.dtype:
        return
    if INDEX_NAME.fullmatch(u.name):
        u.dtype, u.dtype_why = "int32", "an index tensor, by its name"
    elif MASK_NAME.fullmatch(u.name):
        u.dtype, u.dtype_why = "bool", "a mask, by its name"
