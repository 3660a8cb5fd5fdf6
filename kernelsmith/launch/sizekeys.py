"""What a per-call launch choice depends on: the argument sizes a per-shape table should key on.

A block size tiles some dimension of the problem, and its best value follows that dimension only:
LMDeploy's sampler walks each row's vocabulary in BLOCK_N steps (`tl.range(0, num_tokens, BLOCK_N)`,
`num_tokens` from `scores.size()`), so its table keys on `scores.shape[1]`, not on batch x vocab.
Read from the launcher's syntax tree (never by running it):
- a value computed from sizes (`BLOCK_C = next_power_of_2(n_cols)`, `min(cdiv(BLOCK_C, 1024), 8)`)
  depends on the sizes its expression reads;
- a literal (`BLOCK_N = 128`) depends on the sizes it is combined with: grid entries it divides
  (`cdiv(d, BLOCK)`) and, inside the kernel, the scalar arguments of statements its value flows into
  (`s_off < num_tokens`); pointers and strides are no sizes;
- `num_warps`/`num_stages` follow the block sizes of the same launch.
Sizes are traced back to the launcher's own arguments (`x.shape[i]`, `x.size(i)`, unpacked
`a, b = x.size()`, reshapes, `x.numel()`, integer arguments), so the key can be computed at the top
of the launcher and, from fake tensors, for every harness shape.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass

from kernelsmith.launch.syntax import _KNOB, Tunable, jit_functions
from kernelsmith.pysource import parse

Atom = tuple  # ("shape", arg, dim) | ("numel", arg) | ("rows", arg): numel // shape[-1] | ("value", arg)
_SAME_SHAPE = {"contiguous", "float", "half", "bfloat16", "to", "clone", "detach", "type_as", "cuda"}
_FACTORIES = {"empty", "zeros", "ones", "full", "arange", "rand", "randn", "randint", "tensor"}
_NOT_SIZES = {"stride", "dim", "ndim", "data_ptr", "element_size", "dtype", "device", "is_contiguous"}


@dataclass(frozen=True)
class SizeKey:
    """The launcher `scope` and the argument sizes (`atoms`) whose product keys its table."""

    scope: str
    atoms: tuple[Atom, ...]

    @property
    def expr(self) -> str:
        """The key as source text over the launcher's arguments (`scores.shape[1]`)."""
        return " * ".join(_atom_text(a) for a in self.atoms)

    def size(self, inputs: dict) -> int:
        """The key's value for one call's arguments (tensors, fake tensors, or integers)."""
        out = 1
        for a in self.atoms:
            v = inputs[a[1]]
            if a[0] == "rows":
                out *= int(v.numel()) // max(1, int(v.shape[-1]))
            elif a[0] == "shape":
                out *= int(v.shape[a[2]])
            else:
                out *= int(v.numel()) if a[0] == "numel" else int(v)
        return out


def _atom_text(a: Atom) -> str:
    if a[0] == "shape":
        return f"{a[1]}.shape[{a[2]}]"
    if a[0] == "rows":
        return f"{a[1]}.numel() // {a[1]}.shape[-1]"
    return f"{a[1]}.numel()" if a[0] == "numel" else a[1]


def _base_name(node) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _int(node) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and _int(node.operand) is not None:
        return -_int(node.operand)
    return None


class _Launcher:
    """Sizes of the values of one launcher function, flow-insensitively (every binding of a name)."""

    def __init__(self, fn: ast.FunctionDef):
        a = fn.args
        self.params = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
        tensorish = {
            n.value.id
            for n in ast.walk(fn)
            if isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.value, ast.Name)
        }
        self.scalars = {p for p in self.params if p not in tensorish}
        # tensor name -> ("param", p) | ("dims", [atoms per dim]) | ("any", atoms for every dim)
        self.tensors: dict[str, tuple] = {p: ("param", p) for p in self.params if p in tensorish}
        self.env: dict[str, set] = {}
        self.shape_of: dict[str, str] = {}  # `s = x.shape`: s[i] is x's dimension i
        self.dicts: dict[str, dict[str, ast.expr]] = {}  # `config = {"num_warps": ...}` (launch **config)
        for _ in range(2):  # twice: a name used before a later binding sees it too
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        self._bind(target, node.value)
                elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                    self._bind(node.target, node.value)

    def dim(self, name: str, i: int | None) -> set:
        kind = self.tensors.get(name)
        if kind is None:
            return set()
        if kind[0] == "param":
            return {("shape", kind[1], i)} if i is not None else {("numel", kind[1])}
        if kind[0] == "dims" and i is not None and -len(kind[1]) <= i < len(kind[1]):
            return set(kind[1][i])
        return set(kind[1]) if kind[0] == "any" else set().union(*kind[1])

    def _tensor(self, value) -> tuple | None:
        """What a tensor-valued expression's dimensions are, or None when it is no tensor we know."""
        if isinstance(value, ast.Name) and value.id in self.tensors:
            return self.tensors[value.id]
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
            src = _base_name(value.func.value)
            method = value.func.attr
            if src in self.tensors and isinstance(value.func.value, ast.Name):
                if method in _SAME_SHAPE:
                    return self.tensors[src]
                if method in ("reshape", "view") and value.args:
                    # (-1, x.shape[-1]) flattens the leading dimensions: rows, not every element
                    rows = len(value.args) == 2 and self.atoms(value.args[1]) == self.dim(src, -1) != set()
                    param = self.tensors[src][0] == "param"
                    lead = {("rows", src)} if rows and param else self.dim(src, None)
                    dims = [lead if _int(x) == -1 else self.atoms(x) for x in value.args]
                    return ("dims", dims)
                if method not in _NOT_SIZES and method not in ("size", "numel"):
                    return ("any", self.dim(src, None))
            if method.endswith("_like") and value.args and _base_name(value.args[0]) in self.tensors:
                return self.tensors[_base_name(value.args[0])]
            if method in _FACTORIES and src == "torch":  # a new tensor: a pointer to a kernel, no size
                return ("dims", [self.atoms(x) for x in value.args if not isinstance(x, ast.Starred)])
        return None

    def _bind(self, target, value) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            shape_of = None
            if isinstance(value, ast.Attribute) and value.attr == "shape":
                shape_of = _base_name(value.value)
            elif isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and not value.args:
                shape_of = _base_name(value.func.value) if value.func.attr == "size" else None
            for i, t in enumerate(target.elts):
                if isinstance(t, ast.Name):
                    if shape_of is not None:
                        self.env.setdefault(t.id, set()).update(self.dim(shape_of, i))
                    elif isinstance(value, (ast.Tuple, ast.List)) and i < len(value.elts):
                        self._bind(t, value.elts[i])
            return
        if not isinstance(target, ast.Name):
            return
        if isinstance(value, ast.Attribute) and value.attr == "shape" and isinstance(value.value, ast.Name):
            self.shape_of[target.id] = value.value.id
            return
        if isinstance(value, ast.Dict):
            keys = [k.value if isinstance(k, ast.Constant) else None for k in value.keys]
            entries = zip(keys, value.values, strict=True)
            self.dicts[target.id] = {k: v for k, v in entries if isinstance(k, str)}
        tensor = self._tensor(value)
        if tensor is not None and target.id not in self.params:
            self.tensors[target.id] = tensor
            return
        self.env.setdefault(target.id, set()).update(self.atoms(value))

    def atoms(self, node) -> set:
        """The argument sizes an expression reads."""
        if isinstance(node, ast.Name):
            if node.id in self.scalars:
                return {("value", node.id)}
            return set(self.env.get(node.id, set()))
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute):
            if node.value.attr == "shape" and isinstance(node.value.value, ast.Name):
                return self.dim(node.value.value.id, _int(node.slice))
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) in self.shape_of:
            return self.dim(self.shape_of[node.value.id], _int(node.slice))
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                if func.attr == "size" and func.value.id in self.tensors:
                    return self.dim(func.value.id, _int(node.args[0]) if node.args else None)
                if func.attr == "numel":
                    return self.dim(func.value.id, None)
                if func.attr in _NOT_SIZES:
                    return set()
            if isinstance(func, ast.Name) and func.id == "len" and node.args:
                name = _base_name(node.args[0])
                return self.dim(name, 0) if name else set()
            args = [*node.args, *(k.value for k in node.keywords)]
            return set().union(set(), *(self.atoms(x) for x in args))
        if isinstance(node, ast.Attribute):
            return set()  # x.stride, x.dtype, a module's constant
        return set().union(set(), *(self.atoms(c) for c in ast.iter_child_nodes(node)))


def _own_exprs(stmt: ast.stmt) -> list[ast.AST]:
    """The expressions a statement evaluates itself (not those of its nested statements)."""
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.target, stmt.iter]
    if isinstance(stmt, (ast.If, ast.While)):
        return [stmt.test]
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.With, ast.Try, ast.ClassDef)):
        return []
    return [stmt]


def _call_attr(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _names(nodes) -> set[str]:
    return {n.id for x in nodes for n in ast.walk(x) if isinstance(n, ast.Name)}


def kernel_partners(kernel: ast.FunctionDef, param: str) -> set[str]:
    """Kernel parameters combined with `param`'s value: in any statement its value flows into."""
    params = {a.arg for a in kernel.args.posonlyargs + kernel.args.args}
    tainted, partners = {param}, set()
    stmts = [s for s in ast.walk(kernel) if isinstance(s, ast.stmt) and s is not kernel]
    for _ in range(4):  # to a fixed point across loop bodies
        before = len(tainted)
        for s in stmts:
            exprs = _own_exprs(s)
            used = _names(exprs)
            if not used & tainted:
                continue
            partners |= used & params
            calls = [c for x in exprs for c in ast.walk(x) if isinstance(c, ast.Call)]
            if any(_call_attr(c) == "load" for c in calls):
                continue  # loaded data is no index: what is computed from it is not tiled by the knob
            if isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = s.targets if isinstance(s, ast.Assign) else [s.target]
                tainted |= _names(targets)
            elif isinstance(s, (ast.For, ast.AsyncFor)):
                tainted |= _names([s.target])
        if len(tainted) == before:
            break
    return partners - {param}


def _grid_entries(fn: ast.FunctionDef, call: ast.Call) -> list[ast.expr]:
    """The axes of a launch's grid (`kernel[grid](...)`), following a grid bound to a name in `fn`."""
    grid = call.func.slice
    entries = grid.elts if isinstance(grid, (ast.Tuple, ast.List)) else [grid]
    if isinstance(grid, ast.Name):
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and _names(node.targets) == {grid.id}:
                v = node.value
                entries = v.elts if isinstance(v, (ast.Tuple, ast.List)) else [v]
    return entries


def _launches(fn: ast.FunctionDef, kernel: str) -> list[ast.Call]:
    return [
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Subscript)
        and _base_name(n.func.value) == kernel
    ]


def _bound_args(call: ast.Call, kparams: list[str]) -> dict[str, ast.expr]:
    out = {
        kparams[i]: a for i, a in enumerate(call.args) if i < len(kparams) and not isinstance(a, ast.Starred)
    }
    out.update({k.arg: k.value for k in call.keywords if k.arg})
    return out


def _usage_atoms(t: Tunable, fn, lc: _Launcher, kernels: dict) -> set:
    """Sizes a launch choice is combined with at its launches: grid entries and kernel partners."""
    found: set = set()
    for kname in t.kernels:
        kernel = kernels.get(kname)
        kparams = [a.arg for a in kernel.args.posonlyargs + kernel.args.args] if kernel else []
        for call in _launches(fn, kname):
            bound = _bound_args(call, kparams)
            mine = [p for p, v in bound.items() if p in t.names or _names([v]) & t.names]
            if t.kind in ("num_warps", "num_stages"):  # options: the launch's block sizes instead
                mine = [p for p in bound if _KNOB.match(p) and p not in ("num_warps", "num_stages")]
            entries = _grid_entries(fn, call)
            knob_names = t.names.union(*(_names([bound[p]]) for p in mine))
            for e in entries:
                if _names([e]) & knob_names:
                    found |= lc.atoms(e)
            for p in mine:
                if kernel is not None:
                    for partner in kernel_partners(kernel, p):
                        if partner in bound:
                            found |= lc.atoms(bound[partner])
    return found


def size_key(code: str, tunables: list[Tunable], entry: str) -> SizeKey | None:
    """The sizes the entry's per-call tunables depend on; None when they live elsewhere or read none."""
    tree = parse(code)
    funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    jit = jit_functions(tree)
    kernels = {k: funcs[k] for k in jit if k in funcs}
    tabled = [t for t in tunables if t.per_call and len(t.domain) > 1]
    if not tabled or any(t.scope != entry for t in tabled) or entry not in funcs:
        return None
    fn = funcs[entry]
    lc = _Launcher(fn)
    per: dict[str, set] = {}
    for t in tabled:
        var = t.key.split(":", 1)[1].split("|")[0].split("#")[0]
        name, _, item = var.partition(".")
        if item and name in lc.dicts and item in lc.dicts[name]:  # an entry of a `**config` dict
            per[t.key] = lc.atoms(lc.dicts[name][item])
        else:
            per[t.key] = lc.atoms(ast.Name(id=var)) if not item and "[" not in var else set()
        if not per[t.key] and t.kind not in ("num_warps", "num_stages"):
            per[t.key] = _usage_atoms(t, fn, lc, kernels)
    for t in tabled:  # warps and stages without sizes of their own follow their launch's blocks
        if not per[t.key] and t.kind in ("num_warps", "num_stages"):
            options = ("num_warps", "num_stages")
            blocks = [o for o in tabled if o.kernels & t.kernels and o.kind not in options]
            per[t.key] = set().union(*(per[o.key] for o in blocks)) or _usage_atoms(t, fn, lc, kernels)
    atoms = set().union(*per.values())
    numel = {a[1] for a in atoms if a[0] == "numel"}
    atoms = {a for a in atoms if not (a[0] == "shape" and a[1] in numel)}
    if not atoms:
        return None
    return SizeKey(entry, tuple(sorted(atoms, key=lambda a: (a[1], a[0], str(a[2:])))))


def resolve(harness, shapes: list[dict], key: SizeKey) -> tuple[SizeKey, list[int]] | None:
    """(the key keeping the sizes that vary over the harness shapes, its value per shape), from fake
    tensors (nothing allocated); None when no size varies or the harness cannot be read so."""
    try:
        from kernelsmith.harness.facts import fake_mode_for

        with fake_mode_for(harness):
            inputs = [harness.make_inputs(dict(s), "cpu", 0) for s in shapes]
            values = {}
            for a in key.atoms:
                try:
                    vals = [SizeKey(key.scope, (a,)).size(x) for x in inputs]
                except Exception:  # an argument some shape leaves None, or no size at all
                    continue
                raw = [x[a[1]] for x in inputs] if a[0] == "value" else []
                if all(type(v) is int for v in raw) and len(set(vals)) > 1:  # floats and flags are no sizes
                    values[a] = vals
    except Exception:  # a harness that fake tensors cannot run: no per-shape tables then
        return None
    if not values:
        return None
    atoms = tuple(values)
    return SizeKey(key.scope, atoms), [math.prod(v[i] for v in values.values()) for i in range(len(shapes))]


def grid_key(code: str, tunables: list[Tunable], entry: str, first: SizeKey) -> SizeKey | None:
    """The second level of a table's key: the sizes of the launch grid's other axes (the token or
    batch count: how many programs a block choice leaves), where `first` does not already read them."""
    tree = parse(code)
    funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if entry not in funcs:
        return None
    fn = funcs[entry]
    lc = _Launcher(fn)
    tabled = [t for t in tunables if t.per_call and len(t.domain) > 1 and t.scope == entry]
    knobs = set().union(*(t.names for t in tabled)) if tabled else set()
    found: set = set()
    for kname in set().union(*(t.kernels for t in tabled)) if tabled else set():
        for call in _launches(fn, kname):
            entries = _grid_entries(fn, call)
            for e in entries:
                if not _names([e]) & knobs:  # an axis the knobs do not divide
                    found |= lc.atoms(e)
    found -= set(first.atoms)
    if not found:
        return None
    return SizeKey(entry, tuple(sorted(found, key=lambda a: (a[1], a[0], str(a[2:])))))
