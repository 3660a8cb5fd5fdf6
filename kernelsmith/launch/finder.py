"""Where launch choices live in a Triton operator file's syntax tree: the finder behind `discover`.

Found in launcher functions (never inside a kernel), for arguments of kernel launches whose names
say they are launch choices (`num_warps`, `num_stages`, BLOCK_* / GROUP_* / TILE_* / SPLIT_* ...),
given by keyword, by position (against the kernel's signature) or through a `**config` dict:
- literals, and names bound to literals (each literal of an `if`/`else` or `a if c else b` alone;
  only the CUDA branch of a platform switch such as `16 if _is_hip else 32`);
- the integer constants of the expressions that compute such a value: caps and floors
  (`min(next_power_of_2(N), 512)`, `max(..., 4)`), divisors and multipliers (`cdiv(BLOCK_N, 2048)`),
  thresholds of conditional expressions; names inside them that are launch choices themselves
  (`max_warps`) are followed. Offsets (`+`, `-`, `%`) and arguments of other calls (`x.size(-1)`)
  are semantics, never choices;
- an expression of literals only (`65536 // 2`, `8 * 32`) as the one literal it computes, where
  it is a launch value or a part of one: one knob whose value is the whole expression's, written
  back as one literal (`65536 // 2` -> `16384`); one of no integer value (`65536 / 2`) or of
  offsets (`4096 - 1`) is none;
- `num_warps` (and `num_stages` where the kernel loops) at a launch that leaves them to Triton's
  defaults: changing one inserts the keyword;
- integer names that drive the launch grid, size thresholds of `if` tests that choose a tunable,
  and the entries of `triton.Config(...)` lists.
Never a knob: a count (named `n_*`/`num_*`/`*_blocks`..., or a grid dimension itself) computed from
the inputs in some branch, literal branches included (`max_num_blocks = 1` when decoding); a
BLOCK-named value passed to a kernel parameter that is no `tl.constexpr` (it cannot size a tile);
a value passed to a kernel parameter the kernel never reads (`num_warps` given by position to a
parameter of that name is one: Triton takes launch options from keywords only);
anything on a branch that never runs on CUDA (`if infer_device() == "xpu": ...`, `32 if
device.type == "xpu" else ...`).
Values bound elsewhere are followed (launch/follow.py): returned by a helper (`num_warps =
get_num_warps(BLOCK)`, `BLOCK, num_warps = calculate_settings(n)`), passed by the calls of the
launcher (`_launch(x, BLOCK=128)`, its default where a call leaves it out), imported. A helper of this
file holds knobs where the value is computed (shared by its callers: never tabled per call); a launch
option chosen in another file of the checkout is overridden at the launch (`num_warps=num_warps` ->
`num_warps=8`, base AS_COMPUTED). What cannot be followed is recorded (`Unfollowed`), and said.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict

from kernelsmith.launch.follow import Follower, Sources, Trace, Unfollowed
from kernelsmith.launch.syntax import (
    _ARITH,
    _KNOB,
    _ORDER,
    AS_COMPUTED,
    TRITON_DEFAULTS,
    CallPart,
    Tunable,
    _call_name,
    _computed,
    _cuda_branch,
    _dict_entries,
    _is_count,
    _literals,
    _pairs,
    constant,
    dead,
    folded,
    is_int,
    jit_functions,
    kernel_loops,
    kind_of,
    line_offsets,
    mark_dead,
    node_span,
)

# Re-exported: callers (rewrites/analysis.py among them) import these from here.
__all__ = ["Tunable", "Unfollowed", "find", "is_int", "jit_functions", "kernel_loops", "line_offsets"]
# Names in a cap or floor followed although not named like a launch choice: `min(MAX_FUSED_SIZE, ...)`.
_LIMIT = re.compile(r"^(MAX|MIN)_\w+$", re.I)


def _unread_params(kernel: ast.FunctionDef) -> set[str]:
    """The parameters of a kernel that its body never reads."""
    read = {n.id for stmt in kernel.body for n in ast.walk(stmt) if isinstance(n, ast.Name)}
    return {a.arg for a in kernel.args.posonlyargs + kernel.args.args + kernel.args.kwonlyargs} - read


class _Finder(Follower, ast.NodeVisitor):
    """Collects tunables of one parsed file; `offsets` turns (line, col) into byte offsets. With
    `sources`, values returned by helpers of other modules of the checkout are followed too."""

    def __init__(self, tree: ast.AST, code: str, sources: Sources | None = None, module=None):
        self.data = code.encode()
        self.offsets = line_offsets(self.data)
        mark_dead(tree)
        self.sources = sources or Sources(None, None)
        self.module = module or self.sources.own(code, tree)
        self.jit = jit_functions(tree)
        funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        # Kernels whose decorators choose launch options (autotune configs, heuristics on num_warps).
        self.autotuned = {
            f.name
            for f in funcs
            if any(re.search(r"autotune|num_warps|num_stages", ast.unparse(d)) for d in f.decorator_list)
        }
        self.params = {
            f.name: [a.arg for a in f.args.posonlyargs + f.args.args] for f in funcs if f.name in self.jit
        }
        self.constexprs = {  # parameters that can size a tile (tl.arange needs a constexpr)
            f.name: {
                a.arg
                for a in f.args.posonlyargs + f.args.args + f.args.kwonlyargs
                if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)
            }
            for f in funcs
            if f.name in self.jit
        }
        self.unread = {f.name: _unread_params(f) for f in funcs if f.name in self.jit}
        self.loops = kernel_loops(tree)
        self.scope: list[str] = []
        self.defs: dict[tuple[str | None, str], list[ast.expr]] = defaultdict(list)
        self.dicts: dict[tuple[str | None, str], list[tuple[str, ast.expr]]] = {}
        self.exprs: list[tuple] = []  # constants of launch-value expressions, numbered in finish()
        self.defaults: list[tuple] = []  # launches that leave options to Triton, handled in finish()
        self.found: dict[str, Tunable] = {}
        self.n_configs = 0
        self.funcs = {f.name: f for f in reversed(funcs)}  # the first definition of a name wins
        self.helpers: set[str] = set()  # functions a launch value is returned from
        self.notes: list[Unfollowed] = []
        self.trace: Trace | None = None  # the launch argument being followed
        self.calls_to: dict[str, list[tuple[ast.Call, str | None]]] = defaultdict(list)
        self._collect(tree)

    def _collect(self, tree: ast.AST) -> None:
        """Every value bound to a name outside the kernels, per scope, in source order; the calls of
        each function by name (where a parameter's values come from)."""
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    sub._ks_scope = node.name  # noqa: B010 - a private tag on our own parse tree
        for node in ast.walk(tree):
            scope = getattr(node, "_ks_scope", None)
            if scope in self.jit or dead(node):
                continue
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                self.calls_to[node.func.id].append((node, scope))
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                pairs = _pairs(node.targets[0], node.value)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                pairs = _pairs(node.target, node.value)
            else:
                continue
            for name, value in pairs:
                self.defs[(scope, name)].append(value)
                entries = _dict_entries(value)
                if entries is not None:
                    self.dicts[(scope, name)] = entries
        for values in self.defs.values():
            values.sort(key=lambda v: (v.lineno, v.col_offset))

    def span(self, node) -> tuple[int, int]:
        return node_span(self.offsets, node)

    def add(self, key, kind, node, scope, names, kernels=(), users=()) -> None:
        """Record the literal `node` (or expression of literals, `65536 // 2`) as (one site of) tunable
        `key`, whose value it is."""
        self.add_span(key, kind, folded(node), self.span(node), scope, names, kernels, users)

    def add_span(self, key, kind, base, span, scope, names, kernels=(), users=(), fmt="{}",
                 computed="") -> None:
        t = self.found.get(key)
        if t is None:
            if not computed and base <= 0:
                return
            t = self.found[key] = Tunable(key, kind, base, [], scope, set(), fmt=fmt, computed=computed,
                                          helper=scope in self.helpers)
        if span not in t.sites:
            t.sites.append(span)
        t.names |= set(names)
        t.kernels |= {k for k in kernels if k}
        t.users |= {u for u in users if u}

    def current(self) -> str | None:
        return self.scope[-1] if self.scope else None

    def lookup(self, table: dict, name: str, scope: str | None):
        """(scope, entry) for `name` in function `scope`, else at module level; None if unbound."""
        for where in (scope, None):
            if (where, name) in table:
                return where, table[(where, name)]
        return None

    def visit_FunctionDef(self, node):
        if node.name in self.jit:
            return  # inside a kernel every integer is code, not a launch choice
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node):
        if dead(node):
            return  # a launch on another platform's branch
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
            if isinstance(k, ast.Constant) and isinstance(k.value, str) and is_int(v):
                self.add(f"config[{i}].{k.value}", kind_of(k.value), v, None, {k.value})
        for kw in node.keywords:
            if kw.arg in ("num_warps", "num_stages") and is_int(kw.value):
                self.add(f"config[{i}].{kw.arg}", kw.arg, kw.value, None, {kw.arg})

    def _launch(self, node):
        kernel = _call_name(node.func.value)
        if kernel not in self.jit and "kernel" not in kernel.lower():
            return
        scope = self.current()
        present, opaque = set(), False
        params = self.params.get(kernel, [])
        for i, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                opaque = True
                break
            if i < len(params):
                present.add(params[i])
                self._argument(kernel, params[i], arg, positional=True)
        for kw in node.keywords:
            if kw.arg is not None:
                present.add(kw.arg)
                self._argument(kernel, kw.arg, kw.value)
                continue
            found = self.lookup(self.dicts, kw.value.id, scope) if isinstance(kw.value, ast.Name) else None
            if found is None:
                opaque = True  # **kwargs from elsewhere may set anything
                continue
            dscope, entries = found
            for k, v in entries:
                present.add(k)
                if _KNOB.match(k):
                    self.trace = Trace(scope, kernel, k)
                    self._values(f"{kw.value.id}.{k}", dscope, [v], kind_of(k), {k}, kernel, set())
                    self._chosen_elsewhere(kernel, k, v)
        if kernel in self.jit and kernel not in self.autotuned and not opaque:
            self.defaults.append((node, kernel, scope, present))  # after every explicit option is known
        grid = node.func.slice
        exprs = [grid]
        if isinstance(grid, ast.Name) and (bound := self.lookup(self.defs, grid.id, scope)):
            exprs += [e for e in bound[1] if isinstance(e, ast.expr)]
        # A grid dimension itself is a count of programs; a name inside one (`cdiv(n, BLOCK)`) sizes a tile.
        dims = {e.id for g in exprs for e in (g.elts if isinstance(g, ast.Tuple) else [g])
                if isinstance(e, ast.Name)}
        for g in exprs:
            for sub in ast.walk(g):
                if isinstance(sub, ast.Name) and _KNOB.match(sub.id):
                    self.trace = Trace(scope, kernel, f"grid ({sub.id})")
                    self._resolve(sub.id, kind_of(sub.id), {sub.id}, kernel, set(), scope,
                                  count=sub.id in dims)
        self.trace = None

    def _argument(self, kernel: str, name: str, value, positional: bool = False) -> None:
        """A launch argument named like a launch choice: its literal, its name's values, or its expression."""
        if not _KNOB.match(name):
            return
        if name in self.unread.get(kernel, ()) and (positional or name not in TRITON_DEFAULTS):
            # A kernel parameter its body never reads: the value changes nothing the kernel does.
            # Triton takes launch options from keywords only, so `num_warps` given by position to a
            # parameter of that name is such a parameter, not the launch's warps.
            return
        scope, kind = self.current(), kind_of(name)
        if kind == "block" and kernel in self.params and name in self.params[kernel]:
            if name not in self.constexprs[kernel]:
                return  # a plain runtime int (a page size, a bound): it cannot size a tile
        self.trace = Trace(scope, kernel, name)
        if folded(value) is not None:
            self.add(f"{scope}:{kernel}.{name}", kind, value, scope, {name}, {kernel})
        elif isinstance(value, ast.Name):
            self._resolve(value.id, kind, {name, value.id}, kernel, set(), scope)
        else:
            self._expr(scope, name, value, kind, {name}, kernel, set())
        self._chosen_elsewhere(kernel, name, value)
        self.trace = None

    def _chosen_elsewhere(self, kernel: str, name: str, value: ast.expr) -> None:
        """A launch option whose value a helper of another file chooses (its literals cannot change in
        this file) is overridden at the launch: a knob whose base (AS_COMPUTED) keeps the argument as
        it is and whose other values replace it (`num_warps=num_warps` -> `num_warps=8`). A block
        size is never overridden (a kernel's tile may have to cover the row): that is said instead."""
        where = sorted(set(self.trace.foreign))
        if not where or constant(value):
            return
        if name not in TRITON_DEFAULTS:
            self.note(f"chosen in {', '.join(where)} (another file, which a candidate of this file cannot "
                      "change); a tile size is not overridden at the launch")
            return
        span = self.span(value)
        text = self.data[span[0]:span[1]].decode()
        self.add_span(f"{self.trace.scope}:{kernel}.{name}", name, AS_COMPUTED, span, self.trace.scope,
                      {name}, {kernel}, computed=text)

    def _defaults(self, node, kernel: str, scope: str | None, present: set[str]) -> None:
        """Launch options the call leaves to Triton: a change inserts the keyword after the last argument.
        Another launch of the kernel in the same function that sets the option keeps its own key."""
        last = max(node.args + node.keywords, key=lambda n: (n.end_lineno, n.end_col_offset), default=None)
        if last is not None:
            pos, sep = self.span(last)[1], ", "
        else:
            pos, sep = self.span(node)[1] - 1, ""
        for opt, base in TRITON_DEFAULTS.items():
            if opt in present or opt == "num_stages" and not self.loops.get(kernel):
                continue
            key = f"{scope}:{kernel}.{opt}"
            if key in self.found and self.found[key].fmt == "{}":
                key += "#default"
            self.add_span(key, opt, base, (pos, pos), scope, {opt}, {kernel}, fmt=f"{sep}{opt}={{}}")

    def _resolve(self, var: str, kind: str, names: set[str], kernel: str, seen: set, scope: str | None,
                 count=False) -> None:
        """Every value bound to `var` (in function `scope`, else at module level; a parameter's from
        the calls that pass it); `count`: the name is a grid dimension (a number of programs)."""
        found = self.lookup(self.defs, var, scope)
        if found is None:
            self._unbound(var, kind, names, kernel, seen, scope)
            return
        if (found[0], var) in seen:
            return
        seen.add((found[0], var))
        self._values(var, found[0], found[1], kind, names | {var}, kernel, seen, count)

    def _values(self, var, scope, values, kind, names, kernel, seen, count=False) -> None:
        if (count or _is_count(var.rsplit(".", 1)[-1])) and any(_computed(v) for v in values):
            # A count computed from the inputs in some branch (`max_num_blocks = 1` when decoding,
            # else `cdiv(max_q_len, block_size) + 1`): its literal is a special case of the inputs,
            # not a choice. A count that is only ever literal (`num_splits = 8`) stays one.
            return
        users = {self.current()} if scope is None else set()
        lits = [c for v in values if isinstance(v, ast.expr) for c in _literals(v)]
        for n, lit in enumerate(lits):
            suffix = f"#{n}" if len(lits) > 1 else ""
            self.add(f"{scope}:{var}{suffix}", kind, lit, scope, names, {kernel}, users)
        for v in values:
            self._expr(scope, var, v, kind, names, kernel, seen)

    def _expr(self, scope, var, node, kind, names, kernel, seen) -> None:
        """Constants of the expression computing `var`, each with its role (cap, floor, div, mul, if)."""
        if _is_count(var.rsplit(".", 1)[-1]):
            return  # `n_blocks = cdiv(n, 128)`: the divisor must match the kernel's own tile, not a choice
        users = {self.current()} if scope is None else set()
        todo: list[tuple[ast.AST, str | None]] = [(node, None)]
        while todo:
            n, role = todo.pop()
            if constant(n):
                # Literals only: one value, as one literal would be (`65536 // 2` is 32768, never a
                # multiplier and a divisor that launch the same); no choice where it is no integer
                # (`65536 / 2`) or has no role (the value itself: _literals took it), nor `x * 1`.
                value = folded(n)
                if role is not None and value is not None and (role in ("cap", "floor") or value > 1):
                    self.exprs.append((scope, var, role, n, kind, names, kernel, users))
                continue
            if isinstance(n, CallPart):
                self._returned(n.call, n.index, scope, kind, names, kernel, seen)
            elif isinstance(n, ast.Name):
                if _KNOB.match(n.id):
                    self._resolve(n.id, kind_of(n.id), {n.id}, kernel, seen, scope)
                elif role in ("cap", "floor") and _LIMIT.match(n.id):
                    self._resolve(n.id, kind, {n.id}, kernel, seen, scope)
            elif isinstance(n, ast.IfExp):
                for cmp in ast.walk(n.test):
                    if isinstance(cmp, ast.Compare) and all(isinstance(op, _ORDER) for op in cmp.ops):
                        todo.extend((c, "if") for c in [cmp.left, *cmp.comparators] if is_int(c))
                # literal branches of the value itself are its own values (_literals), not parts;
                # the branch a platform switch never takes on CUDA is no part at all
                live = {"body": n.body, "orelse": n.orelse}
                if (cuda := _cuda_branch(n.test)) is not None:
                    live = {cuda: live[cuda]}
                todo.extend((b, role) for b in live.values())
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("min", "max"):
                todo.extend((a, "cap" if n.func.id == "min" else "floor") for a in n.args)
            elif isinstance(n, ast.Call) and _call_name(n.func) == "cdiv" and len(n.args) == 2:
                todo.extend([(n.args[0], "mul"), (n.args[1], "div")])
            elif isinstance(n, ast.Call) and _call_name(n.func) in _ARITH:
                todo.extend((a, None) for a in n.args)
            elif isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult):
                todo.extend([(n.left, "mul"), (n.right, "mul")])
            elif isinstance(n, ast.BinOp) and isinstance(n.op, (ast.FloorDiv, ast.Div)):
                todo.extend([(n.left, "mul"), (n.right, "div")])
            elif isinstance(n, ast.BinOp):
                todo.extend([(n.left, None), (n.right, None)])  # offsets (+, -, %) are semantics
            elif isinstance(n, ast.Call):
                self._returned(n, None, scope, kind, names, kernel, seen)

    def finish(self) -> None:
        """Add the expression constants, numbered per (scope, variable, role) in source order, and the
        options launches leave to Triton."""
        for launch in self.defaults:
            self._defaults(*launch)
        groups: dict[tuple, dict] = defaultdict(dict)
        for scope, var, role, node, kind, names, kernel, users in self.exprs:
            entry = groups[(scope, var, role)].setdefault(self.span(node), [node, kind, set(), set(), set()])
            entry[2] |= names
            entry[3].add(kernel)
            entry[4] |= users
        for (scope, var, role), group in groups.items():
            for n, span in enumerate(sorted(group)):
                node, kind, names, kernels, users = group[span]
                # A cap or floor is a value of the variable's own kind (asserts on it apply); a divisor
                # or multiplier scales it; a threshold is a size.
                kind = kind if role in ("cap", "floor") else "scale" if role in ("div", "mul") else "int"
                names = names if role in ("cap", "floor") else set()
                suffix = f"#{n}" if len(group) > 1 else ""
                self.add(f"{scope}:{var}|{role}{suffix}", kind, node, scope, names, kernels, users)


def _thresholds(tree: ast.AST, finder: _Finder) -> None:
    """Integer size thresholds of `if` tests whose branches set a tunable (size heuristics)."""
    bound = {(t.scope, n) for t in finder.found.values() for n in t.names}
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or func.name in finder.jit:
            continue
        k = 0
        for node in ast.walk(func):
            if not isinstance(node, ast.If) or getattr(node, "_ks_scope", None) != func.name or dead(node):
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
                if isinstance(cmp, ast.Compare) and all(isinstance(op, _ORDER) for op in cmp.ops):
                    for c in [cmp.left, *cmp.comparators]:
                        if is_int(c) and c.value > 1:
                            finder.add(f"{func.name}:if[{k}]", "int", c, func.name, set())
                            k += 1


def find(tree: ast.AST, code: str, sources: Sources | None = None):
    """(tunables without domains, in source order, one per literal; {kernel: loops?}; the launch
    values that could not be followed) of a parsed file."""
    finder = _Finder(tree, code, sources)
    finder.visit(tree)
    finder.finish()
    _thresholds(tree, finder)
    out, taken = [], set()
    for t in sorted(finder.found.values(), key=lambda t: t.sites[0]):
        spans = {s for s in t.sites if s[0] < s[1]}  # insertion points may be shared
        if not spans & taken:  # one literal, one tunable
            taken |= spans
            out.append(t)
    # A grid name that is also a launch argument was said for the argument already.
    said = {(n.scope, n.kernel, n.why) for n in finder.notes if not n.arg.startswith("grid")}
    notes = [n for n in finder.notes
             if not n.arg.startswith("grid") or (n.scope, n.kernel, n.why) not in said]
    return out, finder.loops, list(dict.fromkeys(notes))
