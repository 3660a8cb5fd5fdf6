"""Tunables of a Triton operator file, found from its syntax tree, and code rendered from values.

Found: `num_warps` / `num_stages` and BLOCK_* / GROUP_*-style keyword arguments at kernel launch
sites (literals, or names bound to integer literals, each literal of an `if`/`else` heuristic on
its own), integer names that drive the launch grid, and the entries of `triton.Config(...)` lists.
Domains are powers of two reaching far past the base value, cut by the file's own asserts
(`assert BLOCK <= 4096`, `tl.static_assert(...)`) and by device limits.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass, field

from ...pysource import reachable

MAX_WARPS = 32  # 1024 threads per block on NVIDIA GPUs
MAX_NUMEL = 1 << 20  # Triton's largest tensor (TRITON_MAX_TENSOR_NUMEL)
_KNOB = re.compile(r"^(num_warps|num_stages|\w*(BLOCK|TILE|CHUNK|SPLIT|GROUP|WARPS|STAGES)\w*)$", re.I)
_JIT = re.compile(r"\b(jit|autotune|heuristics)\b")


@dataclass
class Tunable:
    """One integer in the file the search may change, with its valid values."""

    key: str  # stable across candidates: scope, name and occurrence (never offsets)
    kind: str  # num_warps | num_stages | block | group | int
    base: int  # the value in the code it was found in
    sites: list[tuple[int, int]]  # byte spans of the integer literal(s) holding the value
    scope: str | None  # enclosing function (None: module level or a triton.Config list)
    names: set[str] = field(default_factory=set)  # what asserts may call it
    domain: list[int] = field(default_factory=list)

    @property
    def per_call(self) -> bool:
        """True when the value may differ per call (it lives in a function: a size table can vary it)."""
        return self.scope is not None and not self.key.startswith("config")


def kind_of(name: str) -> str:
    """The tunable kind a keyword or variable name implies."""
    low = name.lower()
    if low in ("num_warps", "warps") or low.endswith("num_warps"):
        return "num_warps"
    if low in ("num_stages", "stages") or low.endswith("num_stages"):
        return "num_stages"
    if "group" in low:
        return "group"
    if any(k in low for k in ("block", "tile", "chunk", "split")):
        return "block"
    return "int"


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def domain_for(kind: str, base: int) -> list[int]:
    """Default values for a tunable of `kind` whose base value is `base` (base always included)."""
    if kind == "num_warps":
        values = [1, 2, 4, 8, 16, MAX_WARPS]
    elif kind == "num_stages":
        values = list(range(1, 7))
    elif kind == "group":
        values = [1 << k for k in range(0, 8) if (1 << k) <= max(64, base * 8)]
    elif kind == "block":
        # Never below 16 (no GPU gains from tinier tiles) unless the base is; 256x above the base.
        lo = max(min(16, _pow2_floor(base)), _pow2_floor(base) >> 6)
        hi = min(MAX_NUMEL, max(4096, _pow2_floor(base) << 8))
        values = [1 << k for k in range(lo.bit_length() - 1, hi.bit_length())]
    elif base > 0 and base & (base - 1) == 0:
        values = [base << k for k in range(0, 5)] + [base >> k for k in range(1, 5) if base >> k >= 1]
    else:
        values = [max(1, base // 4), max(1, base // 2), base * 2, base * 4]
    return sorted(set(values) | {base})


def _constraints(tree: ast.AST) -> dict[str, list]:
    """name -> [(op, value)] from `assert` statements and tl.static_assert / device_assert calls."""
    found: dict[str, list] = defaultdict(list)
    tests = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            tests.append(node.test)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("static_assert", "device_assert")
            and node.args
        ):
            tests.append(node.args[0])
    while tests:
        t = tests.pop()
        if isinstance(t, ast.BoolOp) and isinstance(t.op, ast.And):
            tests.extend(t.values)
            continue
        if not isinstance(t, ast.Compare) or len(t.ops) != 1:
            continue
        left, op, right = t.left, t.ops[0], t.comparators[0]
        if (
            isinstance(op, (ast.In, ast.NotIn))
            and isinstance(left, ast.Name)
            and isinstance(right, (ast.Tuple, ast.List, ast.Set))
        ):
            vals = [e.value for e in right.elts if isinstance(e, ast.Constant) and isinstance(e.value, int)]
            found[left.id].append(("in" if isinstance(op, ast.In) else "not in", vals))
            continue
        flip = {ast.Lt: ast.Gt, ast.LtE: ast.GtE, ast.Gt: ast.Lt, ast.GtE: ast.LtE}
        if isinstance(right, ast.Name) and _is_int(left) and type(op) in flip:
            left, right, op = right, left, flip[type(op)]()
        if isinstance(left, ast.Name) and _is_int(right):
            found[left.id].append((type(op).__name__, right.value))
    return found


def _allowed(value: int, rules: list) -> bool:
    ops = {
        "Lt": value.__lt__,
        "LtE": value.__le__,
        "Gt": value.__gt__,
        "GtE": value.__ge__,
        "Eq": value.__eq__,
        "NotEq": value.__ne__,
    }
    for op, arg in rules:
        if op == "in" and value not in arg or op == "not in" and value in arg:
            return False
        if op in ops and not ops[op](arg):
            return False
    return True


def _is_int(node) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _call_name(func) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


class _Finder(ast.NodeVisitor):
    """Collects tunables; `offsets` turns (line, col) into byte offsets."""

    def __init__(self, offsets: list[int], jit_names: set[str]):
        self.offsets = offsets
        self.jit = jit_names
        self.scope: list[str] = []
        self.assigns: dict[tuple[str | None, str], list[ast.Constant]] = defaultdict(list)
        self.found: dict[str, Tunable] = {}
        self.n_configs = 0

    def span(self, node) -> tuple[int, int]:
        return (
            self.offsets[node.lineno - 1] + node.col_offset,
            self.offsets[node.end_lineno - 1] + node.end_col_offset,
        )

    def add(self, key: str, kind: str, node: ast.Constant, scope: str | None, names: set[str]) -> None:
        if key in self.found:
            t = self.found[key]
            if self.span(node) not in t.sites:
                t.sites.append(self.span(node))
            t.names |= names
            return
        if node.value <= 0:
            return
        self.found[key] = Tunable(key, kind, node.value, [self.span(node)], scope, set(names))

    def current(self) -> str | None:
        return self.scope[-1] if self.scope else None

    def visit_FunctionDef(self, node):
        if node.name in self.jit:
            return  # inside a kernel every integer is code, not a launch choice
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node):
        name = _call_name(node.func)
        if name == "Config" and node.args and isinstance(node.args[0], ast.Dict):
            self._config(node)
        elif isinstance(node.func, ast.Subscript):
            self._launch(node)
        self.generic_visit(node)

    def _config(self, node):
        i = self.n_configs
        self.n_configs += 1
        d = node.args[0]
        for k, v in zip(d.keys, d.values, strict=True):
            if isinstance(k, ast.Constant) and isinstance(k.value, str) and _is_int(v):
                self.add(f"config[{i}].{k.value}", kind_of(k.value), v, None, {k.value})
        for kw in node.keywords:
            if kw.arg in ("num_warps", "num_stages") and _is_int(kw.value):
                self.add(f"config[{i}].{kw.arg}", kw.arg, kw.value, None, {kw.arg})

    def _launch(self, node):
        kernel = _call_name(node.func.value)
        if kernel not in self.jit and "kernel" not in kernel.lower():
            return
        scope = self.current()
        for kw in node.keywords:
            if kw.arg is None or not _KNOB.match(kw.arg):
                continue
            kind = kind_of(kw.arg)
            if _is_int(kw.value):
                self.add(f"{scope}:{kernel}.{kw.arg}", kind, kw.value, scope, {kw.arg})
            elif isinstance(kw.value, ast.Name):
                self._bound(kw.value.id, kind, {kw.arg, kw.value.id})
        grid = node.func.slice
        for sub in ast.walk(grid):
            if isinstance(sub, ast.Name):
                self._bound(sub.id, kind_of(sub.id), {sub.id}, grid_only=True)

    def _bound(self, var: str, kind: str, names: set[str], grid_only: bool = False) -> None:
        """A launch argument or grid term that is a name: each integer literal bound to it."""
        for scope in (self.current(), None):
            literals = self.assigns.get((scope, var))
            if not literals:
                continue
            if grid_only and kind == "int" and not _KNOB.match(var):
                return  # a plain integer in the grid is more likely a shape than a choice
            for n, lit in enumerate(literals):
                suffix = f"#{n}" if len(literals) > 1 else ""
                self.add(f"{scope}:{var}{suffix}", kind, lit, scope, names)
            return


def _line_offsets(data: bytes) -> list[int]:
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


def has_loops(code: str) -> bool:
    """True when a kernel has a loop (only then can num_stages pipeline anything)."""
    tree = ast.parse(code)
    jit = jit_functions(tree)
    return any(
        isinstance(sub, (ast.For, ast.While))
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name in jit
        for sub in ast.walk(node)
    )


def discover(code: str) -> list[Tunable]:
    """Every tunable of `code`, in source order, with its domain (raises SyntaxError on bad code)."""
    tree = ast.parse(code)
    finder = _Finder(_line_offsets(code.encode()), jit_functions(tree))
    # Assignments first (a launch may come before a module-level constant is read), then launches.
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(node):
                sub._ks_scope = node.name  # noqa: B010 - a private tag on our own parse tree
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and _is_int(node.value)
        ):
            scope = getattr(node, "_ks_scope", None)
            if scope not in finder.jit:
                finder.assigns[(scope, node.targets[0].id)].append(node.value)
    finder.visit(tree)
    _thresholds(tree, finder)
    rules = _constraints(tree)
    out = sorted(finder.found.values(), key=lambda t: t.sites[0])
    for t in out:
        dom = domain_for(t.kind, t.base)
        for name in t.names:
            dom = [v for v in dom if _allowed(v, rules.get(name, []))]
        t.domain = sorted(set(dom) | {t.base})
    return out


def _thresholds(tree: ast.AST, finder: _Finder) -> None:
    """Integer thresholds of `if` tests whose branches set a tunable (size heuristics)."""
    bound = {(t.scope, n) for t in finder.found.values() for n in t.names}
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or func.name in finder.jit:
            continue
        k = 0
        for node in ast.walk(func):
            if not isinstance(node, ast.If) or getattr(node, "_ks_scope", None) != func.name:
                continue
            targets = {
                t.id
                for st in node.body + node.orelse
                if isinstance(st, ast.Assign)
                for t in st.targets
                if isinstance(t, ast.Name)
            }
            if not any((func.name, n) in bound for n in targets):
                continue
            for cmp in ast.walk(node.test):
                if isinstance(cmp, ast.Compare):
                    for c in cmp.comparators:
                        if _is_int(c) and c.value > 1:
                            finder.add(f"{func.name}:if[{k}]", "int", c, func.name, set())
                            k += 1


def relevant(tunables: list[Tunable], code: str, entry: str) -> list[Tunable]:
    """The tunables that can affect `entry`: in functions it reaches, or at module level."""
    reach = reachable(code, entry)
    return [t for t in tunables if t.scope is None or t.scope in reach]


def values_of(tunables: list[Tunable]) -> dict[str, int]:
    """{key: value} as found in the code."""
    return {t.key: t.base for t in tunables}


def render(code: str, tunables: list[Tunable], values: dict[str, int | str]) -> str:
    """`code` with each tunable's literal(s) replaced by `values[key]` (an int or an expression)."""
    data = code.encode()
    edits = []
    for t in tunables:
        if t.key in values and values[t.key] != t.base:
            edits.extend((s, e, str(values[t.key])) for s, e in t.sites)
    for s, e, text in sorted(edits, reverse=True):
        data = data[:s] + text.encode() + data[e:]
    return data.decode()


def label(t: Tunable) -> str:
    """A short name for a tunable (its variable or keyword name, occurrence kept)."""
    return re.split(r"[:.]", t.key)[-1]


def _function_nodes(tree: ast.AST) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def render_table(
    code: str, tunables: list[Tunable], limits: list[int | None], rows: list[dict], values: dict[str, int]
) -> str:
    """`code` choosing per-call tunables from a table by problem size (the largest tensor argument's
    element count): rows[i] serves sizes up to limits[i] (None: the rest). Other tunables take
    `values`. A one-row table renders as plain literals."""
    per_call = [t for t in tunables if t.per_call and any(t.key in r for r in rows)]
    if len(rows) == 1 or not per_call:
        return render(code, tunables, {**values, **(rows[0] if rows else {})})
    names = {t.key: label(t) for t in per_call}
    if len(set(names.values())) < len(names):
        names = {t.key: t.key for t in per_call}
    data = code.encode()
    tree = ast.parse(code)
    offsets = _line_offsets(data)
    funcs = _function_nodes(tree)
    edits: list[tuple[int, int, str]] = []
    for t in tunables:
        if t in per_call:
            edits.extend((s, e, f"_ks_cfg[{names[t.key]!r}]") for s, e in t.sites)
        elif t.key in values and values[t.key] != t.base:
            edits.extend((s, e, str(values[t.key])) for s, e in t.sites)
    scopes = sorted({t.scope for t in per_call}, key=lambda n: funcs[n].lineno)
    for name in scopes:
        fn = funcs[name]
        body = fn.body
        first = (
            body[1]
            if len(body) > 1
            and isinstance(body[0], ast.Expr)
            and isinstance(getattr(body[0], "value", None), ast.Constant)
            else body[0]
        )
        indent = " " * first.col_offset
        a = fn.args
        params = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg not in ("self", "cls")]
        if a.vararg:
            params.append("*" + a.vararg.arg)
        edits.append(
            (
                offsets[first.lineno - 1],
                offsets[first.lineno - 1],
                f"{indent}_ks_cfg = _ks_config({', '.join(params)})\n",
            )
        )
    head = funcs[scopes[0]]
    start = min([head.lineno] + [d.lineno for d in head.decorator_list])
    lines = code.splitlines()
    while start > 1 and lines[start - 2].lstrip().startswith("#"):
        start -= 1  # keep comments attached to the def (e.g. a `# kernelsmith: hotspot` mark)
    table = "".join(
        f"    ({limit!r}, {{{', '.join(f'{names[k]!r}: {v}' for k, v in row.items() if k in names)}}}),\n"
        for limit, row in zip(limits, rows, strict=True)
    )
    helper = (
        "# kernelsmith: launch configurations by problem size (element count of the largest tensor\n"
        "# argument); each row serves sizes up to its limit.\n"
        f"_KS_CONFIGS = (\n{table})\n\n\n"
        "def _ks_config(*args):\n"
        '    size = max((a.numel() for a in args if hasattr(a, "numel")), default=0)\n'
        "    for limit, config in _KS_CONFIGS:\n"
        "        if limit is None or size <= limit:\n"
        "            return config\n"
        "    return _KS_CONFIGS[-1][1]\n\n\n"
    )
    edits.append((offsets[start - 1], offsets[start - 1], helper))
    for s, e, text in sorted(edits, key=lambda x: (x[0], x[1]), reverse=True):
        data = data[:s] + text.encode() + data[e:]
    return data.decode()
