"""Hoisting loop invariants: an expression inside a `for` loop over `range`, `tl.range` or
`tl.static_range` whose names are not rebound anywhere in the loop and that has no side effects is
computed once, on a new `name = expr` line just before the loop, and its uses read the name.

Only where the tree shows it valid: every name of the expression is a kernel parameter, a module
global, or bound before the loop in an enclosing block; every call is a pure `tl` function (or a
`.to` cast). A `tl.load` is hoisted only from a loop with no store, atomic, barrier, helper call,
inline assembly or early exit (`return`, `break`, `continue`) that runs at least once (literal
bounds), and only from a statement directly in the loop's body (never from under an `if`);
otherwise the load stays and only its address may move.
Divisions are not moved out from under a branch either (the branch may keep the divisor nonzero).
Expressions are never reassociated (`a + i + b` keeps `a + i` and `b` as they are), and expressions
of constants and constexpr parameters alone are left to the compiler. Each hoisted expression goes
before the outermost loop it is invariant in; repeats of it in that loop share the one name.
"""

from __future__ import annotations

import ast

from kernelsmith.pysource import parse
from kernelsmith.search.mutators.rewrites import MARK, Rewrite
from kernelsmith.search.mutators.rewrites.analysis import Decline, Site, call_name
from kernelsmith.search.mutators.rewrites.explain import sentence
from kernelsmith.search.mutators.rewrites.loads import WRITES
from kernelsmith.search.mutators.rewrites.wrap import apply, free_name, module_alias

LOOPS = ("range", "static_range")
PURE = {
    "abs", "arange", "broadcast_to", "cast", "cdiv", "cos", "div_rn", "exp", "exp2", "expand_dims",
    "fdiv", "fma", "full", "log", "log2", "max_constancy", "max_contiguous", "maximum", "minimum",
    "multiple_of", "num_programs", "program_id", "reshape", "rsqrt", "sigmoid", "sin", "sqrt",
    "sqrt_rn", "trans", "view", "where", "zeros", "zeros_like",
}
TENSOR = ("arange", "full", "zeros", "zeros_like", "program_id", "num_programs", "load")
FORBIDDEN = (ast.NamedExpr, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
             ast.Await, ast.Yield, ast.YieldFrom, ast.Starred, ast.JoinedStr)
DIVIDE = (ast.Div, ast.FloorDiv, ast.Mod)
TRIVIAL = (ast.Name, ast.Constant, ast.Attribute, ast.List, ast.Tuple, ast.Slice, ast.Dict, ast.Set)


def _stored(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _range_loop(st: ast.stmt) -> bool:
    return isinstance(st, ast.For) and call_name(st.iter) in LOOPS and not st.orelse


def _runs_once(loop: ast.For) -> bool:
    """True when the loop's bounds are int literals giving at least one iteration."""
    args = loop.iter.args
    if loop.iter.keywords or not 1 <= len(args) <= 3:
        return False
    if not all(isinstance(a, ast.Constant) and type(a.value) is int for a in args):
        return False
    values = [a.value for a in args]
    start, stop, step = (0, values[0], 1) if len(values) == 1 else (*values[:2], 1) if len(values) == 2 \
        else values
    return step != 0 and len(range(start, stop, step)) > 0


class _Hoister:
    """Finds the hoistable expressions of one kernel and the edits that move them."""

    def __init__(self, site: Site):
        self.site = site
        kernel = site.kernel
        self.tl = module_alias(site.tree, "triton.language")
        self.jit = {n.name for n in ast.walk(site.tree) if isinstance(n, ast.FunctionDef)}
        self.params = {a.arg for a in kernel.args.args + kernel.args.kwonlyargs}
        self.constexpr = {
            a.arg for a in kernel.args.args + kernel.args.kwonlyargs
            if a.annotation is not None and ast.unparse(a.annotation).endswith("constexpr")
        }
        self.local = _stored(kernel) | self.params
        self.claimed: list[tuple[int, int]] = []
        self.groups: list[tuple[ast.For, str, list[ast.expr]]] = []  # (loop, dump, occurrences)
        self.kept_loads: list[str] = []
        self.loops = 0

    # -- what may move ------------------------------------------------------------------------
    def _pure_call(self, node: ast.Call, loads_ok: bool) -> bool:
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == self.tl:
            if f.attr == "load":
                return loads_ok and not any(k.arg == "volatile" for k in node.keywords)
            return f.attr in PURE
        return isinstance(f, ast.Attribute) and f.attr == "to"  # a cast of a value: pure

    def _invariant(self, expr: ast.expr, bound: set[str], avail: set[str], loads_ok, guarded=False):
        """True when `expr` gives the same value on every iteration of its loop and may run earlier
        (`guarded`: it sits under a branch, which may be what keeps a division's divisor nonzero)."""
        for n in ast.walk(expr):
            if isinstance(n, FORBIDDEN):
                return False
            if guarded and (isinstance(n, ast.BinOp) and isinstance(n.op, DIVIDE) or call_name(n) in
                            ("cdiv", "fdiv", "div_rn")):
                return False
            if isinstance(n, ast.Name):
                if n.id in bound or (n.id in self.local and n.id not in avail):
                    return False
            elif isinstance(n, ast.Call) and not self._pure_call(n, loads_ok):
                return False
        return True

    def _worth_it(self, expr: ast.expr) -> bool:
        """An operation on runtime values or tensors (constants and constexprs fold at compile time)."""
        if isinstance(expr, TRIVIAL):
            return False
        names = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
        runtime = names & (self.local - self.constexpr)
        return bool(runtime) or any(call_name(n) in TENSOR for n in ast.walk(expr))

    # -- walking the kernel -------------------------------------------------------------------
    def _inside_claimed(self, node: ast.AST) -> bool:
        s, e = self.site.span(node)
        return any(cs <= s and e <= ce for cs, ce in self.claimed)

    def _collect(self, node: ast.AST, bound, avail, loads_ok, found: dict, guarded=False) -> None:
        """Maximal hoistable expressions under `node` (an expression or a statement)."""
        if isinstance(node, ast.expr):
            if self._inside_claimed(node):
                return
            if (
                isinstance(getattr(node, "ctx", None), ast.Load) or not hasattr(node, "ctx")
            ) and self._worth_it(node):
                if self._invariant(node, bound, avail, loads_ok, guarded):
                    found.setdefault(ast.dump(node), []).append(node)
                    return
                if call_name(node) == "load" and self._invariant(node, bound, avail, True, guarded):
                    self.kept_loads.append(self.site.text(node))
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                # a load or division under a nested statement may be guarded by it: it stays
                self._collect(child, bound, avail, False, found, True)
            elif isinstance(child, (ast.expr, ast.keyword)):
                self._collect(child, bound, avail, loads_ok, found, guarded)

    def _loop(self, loop: ast.For, avail: set[str]) -> None:
        self.loops += 1
        bound = _stored(loop)
        writes = False
        for n in ast.walk(loop):
            name = call_name(n)
            if name in WRITES or name.startswith(("atomic_", "inline_asm")):
                writes = True
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in self.jit:
                writes = True
            if isinstance(n, (ast.Return, ast.Break, ast.Continue)):
                writes = True  # a later load may rely on the early exit: loads stay
        loads_ok = not writes and _runs_once(loop)
        found: dict[str, list[ast.expr]] = {}
        for st in loop.body:
            self._collect(st, bound, avail, loads_ok, found)
        for key, nodes in found.items():
            self.groups.append((loop, key, nodes))
            self.claimed += [self.site.span(n) for n in nodes]

    def block(self, body: list[ast.stmt], avail: set[str]) -> None:
        """Visit a block in order: each range loop, then what is bound before the next statement."""
        avail = set(avail)
        for st in body:
            if _range_loop(st):
                self._loop(st, avail)
                self.block(st.body, avail | _stored(st.target))
            else:
                for field in ("body", "orelse", "finalbody"):
                    inner = getattr(st, field, None)
                    if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                        self.block(inner, avail | (_stored(st.target) if isinstance(st, ast.For) else set()))
            if isinstance(st, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                avail |= _stored(st)


def _name_for(expr: ast.expr, tl: str | None, taken: set[str], site: Site) -> str:
    """A readable new name from the calls and names the expression reads (`row * stride` ->
    `row_stride`), free in the file and in this rewrite."""
    words = []
    for n in ast.walk(expr):
        word = call_name(n) if isinstance(n, ast.Call) else n.id if isinstance(n, ast.Name) else ""
        word = word.lower()
        if word and word != (tl or "") and word not in ("to",) and word not in words:
            words.append(word)
    want = "_".join(words[:3]) or "invariant"
    name = free_name(site, want)
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def _tidy(code: str, inserts: list, uses: list) -> str:
    """`code` with the new lines and the uses replaced; `x * (a * b)` reads `x * name`, not
    `x * (name)`, where dropping the parentheses leaves the same tree (never a call's own)."""
    plain = apply(code, inserts + uses)
    data = code.encode()
    bare = [(s - 1, e + 1, t) if data[s - 1 : s] == b"(" and data[e : e + 1] == b")" else (s, e, t)
            for s, e, t in uses]
    try:
        tidy = apply(code, inserts + bare)
    except Decline:
        return plain
    return tidy if ast.dump(parse(tidy)) == ast.dump(parse(plain)) else plain


def hoist(site: Site) -> Rewrite:
    """`site`'s kernel with its loop-invariant expressions computed once before their loops."""
    kernel = site.kernel
    h = _Hoister(site)
    h.block(kernel.body, set(h.params))
    if not h.groups:
        if not h.loops:
            raise Decline(f"{kernel.name}: no for loop over range, tl.range or tl.static_range")
        why = f"{kernel.name}: nothing in its loops is invariant and free of side effects"
        if h.kept_loads:
            why += (
                f" (`{' '.join(h.kept_loads[0].split())}` is invariant but stays: its loop stores or "
                "calls a helper, its trip count is not a literal, or the load is under a branch)"
            )
        raise Decline(why)
    edits, taken, texts = [], set(), []
    lines: dict[int, list[str]] = {}  # the new lines before each loop, in order of appearance
    for loop, _, nodes in h.groups:
        text = site.text(nodes[0])
        name = _name_for(nodes[0], h.tl, taken, site)
        value = text if "\n" not in text else f"({text})"
        indent = " " * loop.col_offset
        lines.setdefault(loop.lineno, []).append(f"{indent}{name} = {value}  {MARK} loop invariant\n")
        edits += [(*site.span(n), name) for n in nodes]
        texts.append(" ".join(text.split()))
    inserts = [(site.line_start(n), site.line_start(n), "".join(new)) for n, new in lines.items()]
    code = _tidy(site.code, inserts, edits)
    explain = sentence("hoist", kernel.name, None, {}, detail=(len(texts), texts))
    return Rewrite("hoist", kernel.name, code, explain, None, {})


def has_loop(site: Site) -> bool:
    """True when `site`'s kernel has a loop the hoisting looks into."""
    return any(_range_loop(n) for n in ast.walk(site.kernel) if isinstance(n, ast.stmt))
