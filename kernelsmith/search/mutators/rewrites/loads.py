"""Merging repeated loads: a `tl.load` whose exact expression was already loaded earlier in the same
block, with nothing in between that could change its address or the memory behind it, reuses the
first value instead of loading again.

Only where the tree shows it safe: both loads in sibling statements of one block (the first in a
simple statement), no name of the load's arguments rebound in between, no store, atomic, barrier,
helper call or volatile load in between. The first value gets a name (its assignment's own name
where the first load is a whole assignment; otherwise a new `loaded_<n>` line above it).
"""

from __future__ import annotations

import ast

from kernelsmith.search.mutators.rewrites import MARK, Rewrite
from kernelsmith.search.mutators.rewrites.analysis import Decline, Site, call_name
from kernelsmith.search.mutators.rewrites.explain import sentence
from kernelsmith.search.mutators.rewrites.wrap import apply, free_name

WRITES = ("store", "debug_barrier", "inline_asm_elementwise")
SIMPLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr)


def _bound(node: ast.AST) -> set[str]:
    """Names a statement (or any statement inside it) binds."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
    return out


def _writes(node: ast.AST, jit: set[str]) -> bool:
    """True when a statement may write memory or synchronise (stores, atomics, helpers)."""
    for n in ast.walk(node):
        name = call_name(n)
        if name in WRITES or name.startswith("atomic_"):
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in jit:
            return True
    return False


def _loads(node: ast.AST) -> list[ast.Call]:
    return [
        n for n in ast.walk(node)
        if call_name(n) == "load" and not any(k.arg == "volatile" for k in n.keywords)
    ]


def _blocks(fn: ast.FunctionDef):
    for node in ast.walk(fn):
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def merge_loads(site: Site) -> Rewrite:
    """`site`'s kernel with each repeated load reusing the first one's value."""
    kernel, code = site.kernel, site.code
    jit = {n.name for n in ast.walk(site.tree) if isinstance(n, ast.FunctionDef)}
    edits, merged, lines = [], 0, []
    used_spans: set[tuple[int, int]] = set()
    for block in _blocks(kernel):
        for i, first_st in enumerate(block):
            if not isinstance(first_st, SIMPLE):
                continue
            for first in _loads(first_st):
                key = ast.dump(first)
                deps = _names(first)
                if site.span(first) in used_spans:
                    continue
                # The first value's name: its assignment's own, else a new line above the statement.
                own = (
                    isinstance(first_st, ast.Assign)
                    and first_st.value is first
                    and len(first_st.targets) == 1
                    and isinstance(first_st.targets[0], ast.Name)
                    and first_st.targets[0].id not in deps
                )
                name = first_st.targets[0].id if own else None
                if _bound(first_st) & deps:
                    continue
                stop = deps | ({name} if name else set())
                repeats = []
                for later in block[i + 1 :]:
                    hits = [n for n in _loads(later) if ast.dump(n) == key]
                    changes = _writes(later, jit) or bool(_bound(later) & stop)
                    # A simple statement evaluates its loads before it stores or rebinds anything.
                    if hits and (isinstance(later, SIMPLE) or not changes):
                        repeats += hits
                    if changes:
                        break
                if not repeats:
                    continue
                if name is None:
                    name = free_name(site, f"loaded_{merged}")
                    indent = " " * first_st.col_offset
                    at = site.line_start(first_st.lineno)
                    edits.append((at, at, f"{indent}{name} = {site.text(first)}  {MARK} loaded once\n"))
                    edits.append((*site.span(first), name))
                    used_spans.add(site.span(first))
                for r in repeats:
                    if site.span(r) not in used_spans:
                        used_spans.add(site.span(r))
                        edits.append((*site.span(r), name))
                merged += 1
                lines.append(site.text(first))
    if not merged:
        raise Decline(f"{kernel.name}: no load repeats an earlier one with nothing in between")
    if not any(MARK in e[2] for e in edits):
        first_line = site.line_start(kernel.body[0].lineno)
        indent = " " * kernel.body[0].col_offset
        edits.append((first_line, first_line, f"{indent}{MARK} repeated loads reuse the first value\n"))
    explain = sentence("merge_loads", kernel.name, None, {}, detail=(merged, lines))
    return Rewrite("merge_loads", kernel.name, apply(code, edits), explain, None, {})


def has_repeated_loads(site: Site) -> bool:
    """True when merge_loads has something to merge in `site`'s kernel."""
    try:
        merge_loads(site)
    except Decline:
        return False
    return True
