"""Text edits shared by the rewrites that regroup a kernel's programs (coarsening, persistent launch).

The kernel's own body is left untouched: the kernel becomes a `@triton.jit` helper `<kernel>_body`
that takes the program ids (and program counts) of the regrouped axes as arguments, and a new
kernel of the old name and signature loops over the former programs and calls it (Triton inlines
the call). An early `return` in the body still ends only that one former program. The diff a
reviewer sees is the helper's def line, the lines that read program ids, the new kernel and the
launch; everything is edited at spans located in the syntax tree, so formatting and comments stay.
"""

from __future__ import annotations

import ast

from kernelsmith.pysource import parse
from kernelsmith.search.mutators.rewrites.analysis import Decline, Site, pid_calls

WIDTH = 100


def module_alias(tree: ast.Module, module: str) -> str | None:
    """The name `module` is imported under (`import triton.language as tl` -> "tl"), or None."""
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == module:
                    return a.asname or (module if "." not in module else None)
    return None


def language(site: Site) -> str:
    """The name triton.language goes by in the file (a rewrite needs it)."""
    tl = module_alias(site.tree, "triton.language")
    if tl is None:
        raise Decline("the file does not import triton.language under a name")
    return tl


def constexpr(site: Site) -> str:
    """How the kernel spells `tl.constexpr` in its annotations."""
    for a in site.kernel.args.args:
        if a.annotation is not None and ast.unparse(a.annotation).endswith("constexpr"):
            return site.text(a.annotation)
    return f"{language(site)}.constexpr"


def cdiv(site: Site, a: str, b: str) -> str:
    """Ceil-division text: triton.cdiv where the file imports triton, plain arithmetic otherwise."""
    if module_alias(site.tree, "triton") == "triton":
        return f"triton.cdiv({a}, {b})"
    return f"({a} + {b} - 1) // {b}"


def capped(site: Site, knob: str, size: str) -> str:
    """`knob` capped at `size` rounded up to a power of two (knobs size `tl.arange` tiles)."""
    if module_alias(site.tree, "triton") == "triton":
        return f"min({knob}, triton.next_power_of_2({size}))"
    return f"min({knob}, 1 << ({size} - 1).bit_length())"


def paren(text: str) -> str:
    """`text` safe as an operand of * and //."""
    try:
        node = parse(text, mode="eval").body
    except SyntaxError:
        return f"({text})"
    atom = isinstance(node, (ast.Name, ast.Call, ast.Attribute, ast.Constant, ast.Subscript))
    return text if atom else f"({text})"


def free_name(site: Site, want: str) -> str:
    """`want`, or `want` with underscores appended until no name of the file uses it."""
    used = {n.id for n in ast.walk(site.tree) if isinstance(n, ast.Name)}
    args = (n for n in ast.walk(site.tree) if isinstance(n, ast.arguments))
    used |= {a.arg for n in args for a in n.args + n.kwonlyargs}
    used |= {n.name for n in ast.walk(site.tree) if isinstance(n, ast.FunctionDef)}
    while want in used:
        want += "_"
    return want


def wrap_list(items: list[str], indent: str, head: str = "", tail: str = "") -> str:
    """`indent + head` + items joined by ", ", broken into lines of at most WIDTH columns (continued
    at `indent`, or four deeper after a `head`), + `tail`."""
    more = indent + ("    " if head else "")
    lines, cur = [], indent + head
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else "")
        fresh = cur in (indent + head, more)
        if not fresh and len(cur) + 1 + len(piece) > WIDTH:
            lines.append(cur)
            cur = more + piece
        else:
            cur = cur + piece if fresh else f"{cur} {piece}"
    lines.append(cur + tail)
    return "\n".join(lines)


class KernelWrap:
    """The helper/new-kernel split of one site's kernel, for the grid axes in `axes`."""

    def __init__(self, site: Site, axes: list[int]):
        self.site = site
        self.axes = sorted(axes)
        self.tl = language(site)
        self.helper = free_name(site, f"{site.kernel.name}_body")
        self.pid = {a: free_name(site, f"program_id_{a}") for a in self.axes}
        self.count = {a: free_name(site, f"num_programs_{a}") for a in self.axes}
        args = site.kernel.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
            raise Decline(f"{site.kernel.name}: a signature with *args, **kwargs or keyword-only parameters")
        self.params = [a.arg for a in args.args]
        n_plain = len(args.args) - len(args.defaults)
        n_positional = len(site.call.args)
        if n_positional > n_plain:
            raise Decline(f"{site.kernel.name}: defaulted parameters are passed by position")
        self.n_plain = n_plain

    def helper_call(self, pids: dict[int, str], indent: str) -> str:
        """The call of the helper for the former program whose ids are `pids` (text per axis)."""
        items = [pids[a] for a in self.axes] + [self.count[a] for a in self.axes] + self.params
        return wrap_list(items, indent, f"{self.helper}(", ")")

    def kernel_edits(self, extra_params: list[str], body: str) -> list[tuple[int, int, str]]:
        """Edits turning the kernel into the helper and adding the new kernel after it."""
        site, k = self.site, self.site.kernel
        code = site.code.encode()
        edits = []
        # The helper: a plain @triton.jit (the new kernel keeps autotune/heuristics/jit options).
        decos = k.decorator_list
        deco_start = site.span(decos[0])[0] - 1  # the "@"
        deco_text = code[deco_start : site.span(decos[-1])[1]].decode()
        jit_name = next((site.text(d.func if isinstance(d, ast.Call) else d) for d in decos
                         if "jit" in ast.unparse(d)), "triton.jit")
        if [ast.unparse(d) for d in decos] != [jit_name]:
            edits.append((deco_start, site.span(decos[-1])[1], f"@{jit_name}"))
        def_line = code[site.line_start(k.lineno) :].split(b"\n", 1)[0].decode()
        at = def_line.find(f"def {k.name}")
        if at < 0:
            raise Decline(f"{k.name}: its def line could not be located")
        name_start = site.line_start(k.lineno) + len(def_line[:at].encode()) + 4
        edits.append((name_start, name_start + len(k.name.encode()), self.helper))
        first = k.args.args[0]
        new = [self.pid[a] for a in self.axes] + [self.count[a] for a in self.axes]
        if first.lineno == k.lineno:
            pos = site.span(first)[0]
            edits.append((pos, pos, ", ".join(new) + ", "))
        else:
            indent = " " * first.col_offset
            pos = site.line_start(first.lineno)
            edits.append((pos, pos, f"{indent}{', '.join(new)},\n"))
        for call, axis, what in pid_calls(k):
            if axis in self.pid:
                s, e = site.span(call)
                edits.append((s, e, (self.pid if what == "program_id" else self.count)[axis]))
        # The new kernel: the old name, decorators and parameters, plus the program counts and knobs.
        params = [self._param_text(a, d) for a, d in zip(k.args.args, [None] * self.n_plain + k.args.defaults,
                                                          strict=True)]
        added = [self.count[a] for a in self.axes] + extra_params
        params = params[: self.n_plain] + added + params[self.n_plain :]
        sig = wrap_list(params, "    ", "", ",")
        wrapper = f"\n\n{deco_text}\ndef {k.name}(\n{sig}\n):\n{body}"
        end = site.offsets[k.end_lineno]  # the start of the line after the kernel
        newline = "" if code[:end].endswith(b"\n") else "\n"
        edits.append((end, end, f"{newline}{wrapper}"))
        return edits

    def _param_text(self, arg: ast.arg, default) -> str:
        text = self.site.text(arg)
        if default is None:
            return text
        return text + (" = " if arg.annotation is not None else "=") + self.site.text(default)

    def launch_edits(self, grid: str | dict[int, str], kwargs: list[str], lines: list[str]) -> list:
        """Edits of the launch: the grid (whole tuple text, or text per axis), keyword arguments
        appended after the last argument, and `lines` inserted above the launch (or its grid)."""
        site = self.site
        edits = []
        if isinstance(grid, str):
            edits.append((*site.span(site.grid_node), grid))
        else:
            for axis, text in grid.items():
                edits.append((*site.span(site.grid[axis]), text))
        call = site.call
        values = call.args + [k.value for k in call.keywords]
        last = max(values, key=lambda n: (n.end_lineno, n.end_col_offset), default=None)
        if last is None:
            raise Decline(f"{site.kernel.name}: a launch without arguments")
        pos = site.span(last)[1]
        kw_nodes = {id(k.value): k for k in call.keywords}
        start_node = kw_nodes.get(id(last), last)
        start_line = site.code.splitlines()[start_node.lineno - 1]
        own_line = start_line[: start_node.col_offset].strip() == "" and start_node.lineno > call.lineno
        if own_line:
            indent = " " * start_node.col_offset
            edits.append((pos, pos, "".join(f",\n{indent}{kw}" for kw in kwargs)))
        else:
            edits.append((pos, pos, "".join(f", {kw}" for kw in kwargs)))
        first = min((s for s in (site.stmt, site.grid_stmt) if s is not None), key=lambda s: s.lineno)
        indent = " " * first.col_offset
        at = site.line_start(first.lineno)
        edits.append((at, at, "".join(f"{indent}{line}\n" for line in lines)))
        return edits

    def divide_axis(self, axis: int, knob: str, count: str, line: str) -> list:
        """Launch edits that divide grid `axis` by `knob` (ceil), pass the original size as `count`
        and the knob itself, with `line` (the knob's assignment) above the launch. The knob is
        capped at the axis's size rounded up to a power of two: a call with fewer programs than
        the knob (one token when decoding) runs them as the base does, not masked in a wider tile."""
        size = self.site.text(self.site.grid[axis])  # in the grid (a lambda's may read its argument)
        size = paren(size) if "\n" not in size else f"({size})"
        at_launch = self.site.launch_size(axis)
        return self.launch_edits(
            {axis: cdiv(self.site, size, capped(self.site, knob, size))},
            [f"{count}={at_launch}", f"{knob}={capped(self.site, knob, paren(at_launch))}"],
            [line],
        )


def apply(code: str, edits: list[tuple[int, int, str]]) -> str:
    """`code` with byte-span edits applied (spans must not overlap)."""
    data = code.encode()
    spans = sorted(edits, key=lambda x: (x[0], x[1]))
    for (_, e1, _), (s2, _, _) in zip(spans, spans[1:], strict=False):
        if s2 < e1:
            raise Decline("two edits of the rewrite overlap")
    for s, e, text in sorted(edits, key=lambda x: (x[0], x[1]), reverse=True):
        data = data[:s] + text.encode() + data[e:]
    out = data.decode()
    parse(out)  # a rewrite never proposes code that does not parse
    return out
