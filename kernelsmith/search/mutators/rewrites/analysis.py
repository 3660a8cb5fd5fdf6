"""What a structural rewrite must know about a kernel and its launch, read from the syntax tree.

A `Site` is one kernel launched exactly once in the file, from a function the entry reaches, with
a grid written as a tuple (inline or bound to a name once). `check_kernel` says why the programs of
a kernel cannot be regrouped, or None: atomics (programs that talk to each other), inline assembly,
program ids read in helpers it calls or along a computed axis, and program ids that pick an address
which is then loaded and used as an index (a pointer table or gather the rewrite cannot model).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

from kernelsmith.launch.syntax import jit_functions, line_offsets, node_span
from kernelsmith.pysource import parse, reachable

PID_CALLS = ("program_id", "num_programs")


class Decline(Exception):
    """A rewrite that cannot be shown valid here; the message says why."""


@dataclass
class Site:
    """One launch `kernel[grid](...)` of a kernel defined in the file."""

    code: str
    tree: ast.Module
    kernel: ast.FunctionDef
    launcher: ast.FunctionDef
    call: ast.Call
    stmt: ast.stmt  # the statement holding the launch
    grid: list[ast.expr]  # one expression per grid axis
    grid_node: ast.expr  # the tuple or list node holding them
    grid_stmt: ast.stmt | None  # where the grid is bound, when the launch names it
    offsets: list[int]
    # Each axis's size as text that holds at the launch: the grid's own text, or for a grid
    # `lambda meta: (...)` with `meta["K"]` replaced by the launch's argument K.
    launch_sizes: list[str] | None = None

    def span(self, node) -> tuple[int, int]:
        """Byte span of a node in the code."""
        return node_span(self.offsets, node)

    def text(self, node) -> str:
        s, e = self.span(node)
        return self.code.encode()[s:e].decode()

    def launch_size(self, axis: int) -> str:
        """Grid axis `axis`'s size as an expression valid at the launch (see `launch_sizes`)."""
        return self.launch_sizes[axis] if self.launch_sizes else self.text(self.grid[axis])

    def line_start(self, lineno: int) -> int:
        return self.offsets[lineno - 1]


def call_name(node: ast.AST) -> str:
    """`tl.load(...)` -> "load"; `f(...)` -> "f"; anything else -> ""."""
    if not isinstance(node, ast.Call):
        return ""
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def pid_calls(fn: ast.AST) -> list[tuple[ast.Call, int | None, str]]:
    """(call, axis or None when not a literal, "program_id" | "num_programs") in `fn`."""
    out = []
    for node in ast.walk(fn):
        name = call_name(node)
        if name in PID_CALLS:
            by_keyword = (k.value for k in node.keywords if k.arg == "axis")
            arg = node.args[0] if node.args else next(by_keyword, None)
            axis = arg.value if isinstance(arg, ast.Constant) and type(arg.value) is int else None
            out.append((node, axis, name))
    return out


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _has_pid(node: ast.AST) -> bool:
    return any(call_name(n) == "program_id" for n in ast.walk(node))


def _pointer(call: ast.Call) -> ast.expr | None:
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == "pointer"), None)


def _assignments(fn: ast.AST):
    """(target names, value) for every binding in `fn` (assignments, augmented ones, for loops)."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            yield set().union(*(_names(t) for t in node.targets)), node.value
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            yield _names(node.target), node.value
        elif isinstance(node, ast.For):
            yield _names(node.target), node.iter


def data_dependent_index(kernel: ast.FunctionDef) -> str | None:
    """The first name loaded from a program-id-dependent address that then addresses memory, or None."""
    pid: set[str] = set()
    data: set[str] = set()
    binds = list(_assignments(kernel))
    changed = True
    while changed:
        changed = False
        for targets, value in binds:
            used = _names(value)
            new_pid = targets - pid if (_has_pid(value) or used & pid) else set()
            loads = [c for c in ast.walk(value) if call_name(c) == "load" and _pointer(c) is not None]
            fed = any(_has_pid(_pointer(c)) or _names(_pointer(c)) & pid for c in loads) or used & data
            new_data = targets - data if fed else set()
            if new_pid or new_data:
                pid |= new_pid
                data |= new_data
                changed = True
    for node in ast.walk(kernel):
        if call_name(node) in ("load", "store") and (ptr := _pointer(node)) is not None:
            hit = sorted(_names(ptr) & data)
            if hit:
                return hit[0]
    return None


def check_kernel(kernel: ast.FunctionDef, funcs: dict[str, ast.FunctionDef], jit: set[str]) -> str | None:
    """Why the programs of `kernel` cannot be regrouped (see the module docstring), or None."""
    seen, todo = set(), [kernel.name]
    while todo:
        name = todo.pop()
        if name in seen or name not in funcs:
            continue
        seen.add(name)
        fn = funcs[name]
        for node in ast.walk(fn):
            cname = call_name(node)
            if cname.startswith("atomic_"):
                return f"{name} calls tl.{cname}: its programs may depend on each other"
            if cname.startswith("inline_asm"):
                return f"{name} runs inline assembly the rewrite cannot read"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in jit:
                todo.append(node.func.id)
        calls = pid_calls(fn)
        if name != kernel.name and calls:
            return f"helper {name} reads tl.{calls[0][2]}: only the kernel's own program ids are modelled"
        if any(axis is None or not 0 <= axis <= 2 for _, axis, _ in calls):
            return f"{name} reads a program id along an axis that is not a literal 0, 1 or 2"
    hit = data_dependent_index(kernel)
    if hit is not None:
        return (
            f"{kernel.name}: `{hit}` is loaded from an address chosen by the program id and then used "
            "as an index (a data-dependent index the rewrite cannot model)"
        )
    return None


def _enclosing_stmt(fn: ast.FunctionDef, node: ast.AST) -> ast.stmt:
    """The innermost statement of `fn` that holds `node`."""
    inside = [
        st
        for st in ast.walk(fn)
        if isinstance(st, ast.stmt)
        and st is not fn
        and (st.lineno, st.col_offset) <= (node.lineno, node.col_offset)
        and (st.end_lineno, st.end_col_offset) >= (node.end_lineno, node.end_col_offset)
    ]
    return max(inside, key=lambda st: (st.lineno, st.col_offset))


def _starts_line(code_lines: list[str], st: ast.stmt) -> bool:
    return code_lines[st.lineno - 1][: st.col_offset].strip() == ""


def _lambda_grid(kname: str, grid: ast.Lambda, call: ast.Call, code: str, offsets: list[int]):
    """(the lambda's tuple of sizes, each size's text at the launch, None) for a grid
    `lambda meta: (...)` that reads only `meta["K"]` of keywords K the launch passes by name
    (a name, attribute or constant, so the size can be computed at the launch too), else
    (grid, None, why not)."""
    params = grid.args
    if (len(params.args) != 1 or params.vararg or params.kwarg or params.kwonlyargs
            or not isinstance(grid.body, (ast.Tuple, ast.List))):
        return grid, None, f"{kname}: its grid is a lambda other than `lambda meta: (sizes...)`"
    meta = params.args[0].arg
    passed = {k.arg: k.value for k in call.keywords if k.arg is not None}
    reads = {id(n.value): n for n in ast.walk(grid.body)
             if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == meta}
    data = code.encode()
    span = functools.partial(node_span, offsets)
    for name in (n for n in ast.walk(grid.body) if isinstance(n, ast.Name) and n.id == meta):
        read = reads.get(id(name))
        key = read.slice.value if read is not None and isinstance(read.slice, ast.Constant) else None
        if not isinstance(key, str):
            return grid, None, f"{kname}: its grid lambda uses `{meta}` other than as {meta}[\"NAME\"]"
        if not isinstance(passed.get(key), (ast.Name, ast.Attribute, ast.Constant)):
            return grid, None, (f"{kname}: its grid reads {meta}[{key!r}], which the launch does not pass "
                                "by name as a plain value (an autotuned or computed one)")
    sizes = []
    for elt in grid.body.elts:
        start, end = span(elt)
        parts = sorted((span(r), span(passed[r.slice.value])) for r in reads.values()
                       if start <= span(r)[0] and span(r)[1] <= end)
        text = data[start:end]
        for (a, b), (va, vb) in reversed(parts):
            text = text[: a - start] + data[va:vb] + text[b - start :]
        sizes.append(text.decode())
    return grid.body, sizes, None


def _opaque_arguments(kname: str, kernel: ast.FunctionDef, call: ast.Call) -> str | None:
    """Why the launch's arguments cannot be followed, or None.

    `*args` hides which parameter each value binds. `**options` is followed when every parameter
    without a default is passed by position or by name: the dict can then hold only defaulted
    parameters and launch options (Liger passes `**kernel_args`, empty but on XPU), which the
    rewritten launch passes on unchanged."""
    if any(isinstance(a, ast.Starred) for a in call.args):
        return f"{kname}: launched with *args the rewrite cannot follow"
    spread = [k for k in call.keywords if k.arg is None]
    if not spread:
        return None
    params = [a.arg for a in kernel.args.args]
    required = params[: len(params) - len(kernel.args.defaults)]
    named = set(params[: len(call.args)]) | {k.arg for k in call.keywords}
    unbound = [p for p in required if p not in named]
    if unbound:
        return (f"{kname}: launched with **{ast.unparse(spread[0].value)}, and its parameters "
                f"{', '.join(unbound)} are not passed by position or by name: the rewrite cannot follow")
    return None


def find_sites(code: str, entry: str) -> tuple[list[Site], list[str]]:
    """(the launch sites a rewrite may transform, why each other kernel launch is declined)."""
    tree = parse(code)
    jit = jit_functions(tree)
    funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    reach = reachable(code, entry)
    launches: dict[str, list[tuple[ast.FunctionDef, ast.Call]]] = {}
    for fn in funcs.values():
        if fn.name in jit:
            continue
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Subscript)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in jit
            ):
                launches.setdefault(node.func.value.id, []).append((fn, node))
    lines = code.splitlines()
    offsets = line_offsets(code.encode())
    sites, declined = [], []
    for kname, where in launches.items():
        if not any(fn.name in reach for fn, _ in where):
            continue
        kernel = funcs[kname]
        if len(where) > 1:
            declined.append(f"{kname}: launched from {len(where)} places; the rewrite handles one launch")
            continue
        launcher, call = where[0]
        reason = check_kernel(kernel, funcs, jit)
        if reason is None:
            reason = _opaque_arguments(kname, kernel, call)
        grid_node, grid_stmt = call.func.slice, None
        if reason is None and isinstance(grid_node, ast.Name):
            binds = [
                st
                for st in ast.walk(launcher)
                if isinstance(st, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == grid_node.id for t in st.targets)
            ]
            if len(binds) == 1 and len(binds[0].targets) == 1:
                grid_stmt, grid_node = binds[0], binds[0].value
            else:
                reason = f"{kname}: its grid `{grid_node.id}` is bound {len(binds)} times (one tuple needed)"
        sizes, grid_whole = None, grid_node  # the node a whole new grid replaces (a lambda too)
        if reason is None and isinstance(grid_node, ast.Lambda):
            grid_node, sizes, reason = _lambda_grid(kname, grid_node, call, code, offsets)
        if reason is None and not isinstance(grid_node, (ast.Tuple, ast.List)):
            reason = f"{kname}: its grid is not a tuple of sizes (a computed value)"
        stmt = _enclosing_stmt(launcher, call)
        if reason is None and not all(_starts_line(lines, s) for s in (stmt, grid_stmt) if s is not None):
            reason = f"{kname}: its launch shares a line with other code"
        if reason is not None:
            declined.append(reason)
            continue
        sites.append(
            Site(code, tree, kernel, launcher, call, stmt, list(grid_node.elts), grid_whole, grid_stmt,
                 offsets, sizes)
        )
    return sites, declined
