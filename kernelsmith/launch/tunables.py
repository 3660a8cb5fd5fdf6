"""Tunables of a Triton operator file, found from its syntax tree, and code rendered from values.

What counts as a tunable (launch arguments, the constants of the expressions computing them, options
left to Triton, grid names, size thresholds, triton.Config entries) is in launch/finder.py. Here: their
domains, powers of two reaching far past the base value, cut by the file's own asserts
(`assert BLOCK <= 4096`, `tl.static_assert(...)`) and by device limits, with `num_stages` varying
only where the launched kernel has a loop to pipeline; which of them an entry reaches; rendering.
"""

from __future__ import annotations

import ast
import itertools
import math
from collections import defaultdict

from kernelsmith.launch.finder import find
from kernelsmith.launch.follow import Sources, Unfollowed
from kernelsmith.launch.syntax import (
    AS_COMPUTED,
    TRITON_DEFAULTS,
    Tunable,
    is_int,
    kernel_loops,
    knob_order,
    line_offsets,
)
from kernelsmith.pysource import parse, reachable

MAX_WARPS = 32  # 1024 threads per block on NVIDIA GPUs
MAX_NUMEL = 1 << 20  # Triton's largest tensor (TRITON_MAX_TENSOR_NUMEL)
SCALE_REACH = 6  # divisors and multipliers range 64x either way


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def domain_for(kind: str, base: int) -> list[int]:
    """Default values for a tunable of `kind` whose base value is `base` (base always included)."""
    pow2 = base > 0 and base & (base - 1) == 0
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
    elif kind == "scale" and pow2:
        # A divisor or multiplier (elements per warp, rows per program): 64x either way.
        values = [base << k for k in range(SCALE_REACH + 1) if base << k <= MAX_NUMEL]
        values += [base >> k for k in range(1, SCALE_REACH + 1) if base >> k >= 1]
    elif pow2:
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
        if isinstance(right, ast.Name) and is_int(left) and type(op) in flip:
            left, right, op = right, left, flip[type(op)]()
        if isinstance(left, ast.Name) and is_int(right):
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


def has_loops(code: str) -> bool:
    """True when a kernel has a loop (only then can num_stages pipeline anything)."""
    return any(kernel_loops(parse(code)).values())


def discover(code: str, sources: Sources | None = None) -> list[Tunable]:
    """Every tunable of `code`, in source order, with its domain (raises SyntaxError on bad code).
    With `sources` (the checkout's modules), values returned by helpers of other files are followed."""
    return _survey(code, sources)[0]


def _survey(code: str, sources: Sources | None) -> tuple[list[Tunable], list[Unfollowed]]:
    tree = parse(code)
    found, loops, notes = find(tree, code, sources)
    rules = _constraints(tree)
    for t in found:
        # An override's base is no number: its domain is the launch option's, around Triton's default.
        dom = domain_for(t.kind, t.base) if not t.computed else domain_for(t.kind, TRITON_DEFAULTS[t.kind])
        if t.kind == "num_stages" and t.kernels and not any(loops.get(k, True) for k in t.kernels):
            dom = [t.base]  # nothing to pipeline: every value compiles to the same kernel
        for name in t.names:
            dom = [v for v in dom if _allowed(v, rules.get(name, []))]
        t.domain = sorted(set(dom) | {t.base}, key=knob_order)
    return found, notes


def relevant(tunables: list[Tunable], code: str, entry: str) -> list[Tunable]:
    """The tunables that can affect `entry`: in functions it reaches, or module-level ones it may read."""
    reach = reachable(code, entry)
    return [t for t in tunables if t.scope in reach or t.scope is None and (not t.users or t.users & reach)]


def entry_knobs(code: str, entry: str, sources: Sources | None = None) -> tuple[list[Tunable], list[str]]:
    """(the tunables `entry` reaches, the launch values it reaches that could not be followed, in words)."""
    found, notes = _survey(code, sources)
    reach = reachable(code, entry)
    return relevant(found, code, entry), [str(n) for n in notes if n.scope in reach]


def sources_of(task) -> Sources:
    """The checkout modules a task's operator file may import (none for a task with no checkout)."""
    root = getattr(task, "root", None)
    return Sources(root, task.operator.file if root is not None else None)


def space_points(tunables: list[Tunable]) -> int:
    """How many launch configurations `tunables` make (the product of their domains)."""
    return math.prod(len(t.domain) for t in tunables)


def space_configs(tunables: list[Tunable]):
    """Every launch configuration `tunables` make, as {key: value} dicts, in grid order."""
    keys = [t.key for t in tunables]
    return (dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(t.domain for t in tunables)))


def values_of(tunables: list[Tunable]) -> dict[str, int]:
    """{key: value} as found in the code."""
    return {t.key: t.base for t in tunables}


def render(code: str, tunables: list[Tunable], values: dict[str, int | str]) -> str:
    """`code` with each tunable's literal(s) replaced by `values[key]` (an int or an expression)."""
    data = code.encode()
    edits = []
    for t in tunables:
        if t.key in values and values[t.key] != t.base:
            edits.extend((s, e, t.text(values[t.key])) for s, e in t.sites)
    for s, e, text in sorted(edits, reverse=True):
        data = data[:s] + text.encode() + data[e:]
    return data.decode()


def label(t: Tunable) -> str:
    """A short name for a tunable: its variable or keyword name, with role and occurrence kept."""
    head, bar, role = t.key.rsplit(":", 1)[-1].partition("|")
    return head.rsplit(".", 1)[-1] + bar + role


def _function_nodes(tree: ast.AST) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


TABLE_VAR = "_ks_cfg"  # the launcher's local holding the table row that serves the call


def tabled_names(code: str) -> set[str]:
    """The names `code` assigns from a per-size table `render_table` wrote (`NAME = _ks_cfg['NAME']`
    or `_ks_cfg.get(...)`); none where it does not parse."""
    try:
        tree = parse(code)
    except (SyntaxError, ValueError):
        return set()

    def from_table(v) -> bool:
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "get":
            v = v.func
        return isinstance(v, (ast.Subscript, ast.Attribute)) and isinstance(v.value, ast.Name) \
            and v.value.id == TABLE_VAR

    return {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) and from_table(node.value)
            for t in node.targets if isinstance(t, ast.Name)}


def render_table(
    code: str,
    tunables: list[Tunable],
    limits: list[int | None],
    rows: list[dict],
    values: dict[str, int],
    key: str | None = None,
    limits2: list[int | None] | None = None,
    key2: str | None = None,
) -> str:
    """`code` choosing per-call tunables from a table by problem size: `key`, an expression over the
    launcher's arguments (`scores.shape[1]`, see sizekeys.py), else the largest tensor argument's
    element count. rows[i] serves sizes up to limits[i] (None: the rest) and, with a second level
    (`key2`, e.g. the token count), second sizes up to limits2[i]; the first row admitting both
    serves. Other tunables take `values`. A one-row table renders as plain literals."""
    two = key is not None and key2 is not None and limits2 is not None and any(x is not None for x in limits2)
    per_call = [t for t in tunables if t.per_call and any(t.key in r for r in rows)]
    if len(rows) == 1 or not per_call:
        return render(code, tunables, {**values, **(rows[0] if rows else {})})
    names = {t.key: label(t) for t in per_call}
    if len(set(names.values())) < len(names):
        names = {t.key: t.key for t in per_call}
    data = code.encode()
    tree = parse(code)
    offsets = line_offsets(data)
    funcs = _function_nodes(tree)
    edits: list[tuple[int, int, str]] = []
    for t in tunables:
        if t in per_call and t.computed:  # rows that keep the computed value leave it out
            edits.extend((s, e, f"{TABLE_VAR}.get({names[t.key]!r}, {t.computed})") for s, e in t.sites)
        elif t in per_call:
            edits.extend((s, e, t.text(f"{TABLE_VAR}[{names[t.key]!r}]")) for s, e in t.sites)
        elif t.key in values and values[t.key] != t.base:
            edits.extend((s, e, t.text(values[t.key])) for s, e in t.sites)
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
        args = f"{key}, {key2}" if two else key if key is not None else ", ".join(params)
        at = offsets[first.lineno - 1]
        edits.append((at, at, f"{indent}{TABLE_VAR} = _ks_config({args})\n"))
    head = funcs[scopes[0]]
    start = min([head.lineno] + [d.lineno for d in head.decorator_list])
    lines = code.splitlines()
    while start > 1 and lines[start - 2].lstrip().startswith("#"):
        start -= 1  # keep comments attached to the def (e.g. a `# kernelsmith: hotspot` mark)
    # Every row sets every tabled value (one a row leaves out keeps `values`, else the base).
    full = [{t.key: row.get(t.key, values.get(t.key, t.base)) for t in per_call} for row in rows]
    computed = {t.key for t in per_call if t.computed}
    full = [{k: v for k, v in row.items() if k not in computed or v != AS_COMPUTED} for row in full]
    configs = [f"{{{', '.join(f'{names[k]!r}: {v}' for k, v in row.items())}}}" for row in full]
    if two:
        table = "".join(
            f"    (({limit!r}, {limit2!r}), {config}),\n"
            for limit, limit2, config in zip(limits, limits2, configs, strict=True)
        )
        head = (
            f"# kernelsmith: launch configurations by {key}, then by {key2}\n"
            "# (what they depend on); each row is ((first up to, second up to), config),\n"
            "# the first row admitting both sizes serves (None: any size).\n"
            f"_KS_CONFIGS = (\n{table})\n\n\n"
            "def _ks_config(size, size2):\n"
            "    for (limit, limit2), config in _KS_CONFIGS:\n"
            "        if (limit is None or size <= limit) and (limit2 is None or size2 <= limit2):\n"
            "            return config\n"
            "    return _KS_CONFIGS[-1][1]\n\n\n"
        )
        return _apply(data, [*edits, (offsets[start - 1], offsets[start - 1], head)])
    table = "".join(f"    ({limit!r}, {config}),\n" for limit, config in zip(limits, configs, strict=True))
    if key is not None:
        head = (
            f"# kernelsmith: launch configurations by {key} (what they depend on);\n"
            "# each row serves sizes up to its limit.\n"
            f"_KS_CONFIGS = (\n{table})\n\n\n"
            "def _ks_config(size):\n"
        )
    else:
        head = (
            "# kernelsmith: launch configurations by problem size (element count of the largest tensor\n"
            "# argument); each row serves sizes up to its limit.\n"
            f"_KS_CONFIGS = (\n{table})\n\n\n"
            "def _ks_config(*args):\n"
            '    size = max((a.numel() for a in args if hasattr(a, "numel")), default=0)\n'
        )
    helper = (
        head
        + "    for limit, config in _KS_CONFIGS:\n"
        "        if limit is None or size <= limit:\n"
        "            return config\n"
        "    return _KS_CONFIGS[-1][1]\n\n\n"
    )
    return _apply(data, [*edits, (offsets[start - 1], offsets[start - 1], helper)])


def _apply(data: bytes, edits: list[tuple[int, int, str]]) -> str:
    for s, e, text in sorted(edits, key=lambda x: (x[0], x[1]), reverse=True):
        data = data[:s] + text.encode() + data[e:]
    return data.decode()
