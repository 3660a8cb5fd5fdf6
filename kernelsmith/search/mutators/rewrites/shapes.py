"""The shape walk behind tile widening (widen.py): every value of a kernel gets a kind (uniform,
per row, per column, tile) once the program id of one axis is a vector of rows, and the text of
each statement that must change (broadcasts, axis-1 reductions, `tl.where`, row masks) is built
from the original source spans."""

from __future__ import annotations

import ast

from kernelsmith.search.mutators.rewrites.analysis import Decline, Site, pid_calls
from kernelsmith.search.mutators.rewrites.wrap import KernelWrap, free_name, paren

KNOB = "ROWS_GROUP"
S, R, C, T = "uniform", "row", "column", "tile"
REDUCE = {"sum", "max", "min", "argmax", "argmin", "xor_sum", "prod"}
HINTS = {"multiple_of", "max_contiguous", "max_constancy"}
ELEMENTWISE = {
    "exp", "exp2", "log", "log2", "sqrt", "sqrt_rn", "rsqrt", "abs", "maximum", "minimum", "where",
    "sigmoid", "cos", "sin", "fma", "floor", "ceil", "erf", "clamp", "fdiv", "div_rn", "cast", "umulhi",
    "tanh", "pow", "cdiv", "fast_expf", "fast_dividef",
}


# Modules of elementwise math functions (every libdevice function maps each element, broadcasting
# its arguments); a kernel file imports them under any name, often in a try/if by Triton version.
MATH_MODULES = ("triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice",
                "triton.language.math", "triton.language.extra.hip.libdevice")


def math_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(function names imported from a math module, names bound to a math module itself)."""
    functions, modules = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if node.module in MATH_MODULES:
                    functions.add(alias.asname or alias.name)
                elif f"{node.module}.{alias.name}" in MATH_MODULES:
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules.update(a.asname for a in node.names if a.name in MATH_MODULES and a.asname)
    return functions, modules


OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
       ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>"}


class Grow(Exception):
    """A value carried around a loop widens inside it: start again with its first value widened."""

    def __init__(self, name: str, kind: str):
        super().__init__(name)
        self.name, self.kind = name, kind


def join(*kinds: str) -> str:
    """The kind of a value computed from values of these kinds."""
    out = S
    for k in kinds:
        out = k if out in (S, k) else out if k == S else T
    return out


def _atom(text: str) -> str:
    return paren(text)


class ShapeWalk:
    """One walk over a kernel body for widening along `axis` (see the module docstring)."""

    def __init__(self, site: Site, axis: int, force: dict[str, str] | None = None):
        self.site, self.axis = site, axis
        self.force = force or {}  # loop-carried names whose first value must already be widened
        self.loops = 0
        self.data = site.code.encode()
        self.wrap = KernelWrap(site, [axis])
        self.tl = self.wrap.tl
        self.count = self.wrap.count[axis]
        self.rows, self.ok = free_name(site, "rows"), free_name(site, "rows_ok")
        self.knob = free_name(site, KNOB)
        self.env: dict[str, str] = {}
        self.edits: dict[tuple[int, int], str] = {}
        self.widened = False
        self.functions = {n.name: n for n in ast.walk(site.tree) if isinstance(n, ast.FunctionDef)}
        self.jit = set(self.functions)
        self.math_functions, self.math_modules = math_names(site.tree)

    # -- expressions ----------------------------------------------------------------------------
    def seg(self, node) -> str:
        s, e = self.site.span(node)
        return self.data[s:e].decode()

    def splice(self, node, parts: list[tuple[int, int, str]]) -> str:
        """The node's text with byte spans (absolute) replaced."""
        s, e = self.site.span(node)
        out = self.data[s:e]
        for a, b, text in sorted(parts, reverse=True):
            out = out[: a - s] + text.encode() + out[b - s :]
        return out.decode()

    def to(self, text: str, kind: str, target: str) -> str:
        """`text` (of `kind`) broadcast to `target`."""
        if target == T and kind == R:
            return f"{_atom(text)}[:, None]"
        if target == T and kind == C:
            return f"{_atom(text)}[None, :]"
        if kind not in (S, target):
            raise Decline(f"a {kind} value cannot become a {target} value")
        return text

    def guard(self, kind: str) -> str:
        return self.ok if kind == R else f"{self.ok}[:, None]"

    def emit(self, node) -> tuple[str, str]:
        """(new text, kind) of an expression."""
        if isinstance(node, (ast.Constant, ast.JoinedStr)):
            return self.seg(node), S
        if isinstance(node, ast.Name):
            return self.seg(node), self.env.get(node.id, S)
        if isinstance(node, ast.Attribute):
            return self.seg(node), S  # .dtype, .element_ty, tl.float32: never a tensor
        if isinstance(node, (ast.BinOp, ast.BoolOp, ast.Compare, ast.UnaryOp)):
            children = {
                ast.BinOp: lambda n: [n.left, n.right],
                ast.BoolOp: lambda n: n.values,
                ast.Compare: lambda n: [n.left, *n.comparators],
                ast.UnaryOp: lambda n: [n.operand],
            }[type(node)](node)
            return self.elementwise(node, children)
        if isinstance(node, ast.IfExp):
            return self.ifexp(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, (ast.Tuple, ast.List)):
            texts = [self.emit(e) for e in node.elts]
            if any(k != S for _, k in texts):
                raise Decline(f"a tuple of per-row values (`{self.seg(node)}`)")
            return self.seg(node), S
        if isinstance(node, ast.Subscript):
            raise Decline(f"the kernel indexes a tensor (`{self.seg(node)}`): it already has 2-D tiles")
        raise Decline(f"`{self.seg(node)}` is an expression the widening does not follow")

    def elementwise(self, node, children: list) -> tuple[str, str]:
        done = [(c, *self.emit(c)) for c in children]
        kind = join(*(k for _, _, k in done))
        parts = [(*self.site.span(c), self.to(t, k, kind)) for c, t, k in done]
        return self.splice(node, parts), kind

    def ifexp(self, node: ast.IfExp) -> tuple[str, str]:
        test, tk = self.emit(node.test)
        body, bk = self.emit(node.body)
        orelse, ok = self.emit(node.orelse)
        kind = join(tk, bk, ok)
        if tk == S:
            if bk != ok and kind != S:
                raise Decline(f"`{self.seg(node)}` picks between values of different shapes")
            parts = [(*self.site.span(node.body), body), (*self.site.span(node.orelse), orelse)]
            return self.splice(node, parts), kind
        # A per-row condition: both sides are computed and picked per element.
        args = [self.to(t, k, kind) for t, k in ((test, tk), (body, bk), (orelse, ok))]
        return f"{self.tl}.where({', '.join(args)})", kind

    def _tl_name(self, func) -> str | None:
        """`tl.exp` / `tl.math.exp` -> "exp"; None for anything that is not triton.language."""
        if not isinstance(func, ast.Attribute):
            return None
        base = func.value
        while isinstance(base, ast.Attribute):
            base = base.value
        return func.attr if isinstance(base, ast.Name) and base.id == self.tl else None

    def call(self, node: ast.Call) -> tuple[str, str]:
        if self._is_math(node.func):
            return self.elementwise(node, list(node.args) + [k.value for k in node.keywords])
        name = self._tl_name(node.func)
        if name is None:
            return self.other_call(node)
        if name in ("program_id", "num_programs"):
            axis = next(a for c, a, _ in pid_calls(node) if c is node)
            if axis != self.axis:
                return self.seg(node), S
            return (self.rows, R) if name == "program_id" else (self.count, S)
        if name == "arange":
            return self.seg(node), C
        if name in ("zeros", "full"):
            shape = node.args[0] if node.args else None
            if isinstance(shape, (ast.List, ast.Tuple)) and len(shape.elts) == 1:
                return self.seg(node), C
            raise Decline(f"`{self.seg(node)}` makes a tensor that is not a 1-D tile")
        if name in ("load", "store"):
            return self.memory(node, name)
        if name in REDUCE:
            return self.reduce(node, name)
        if name in HINTS or name in ("static_assert", "static_print", "device_assert"):
            texts = [self.emit(a) for a in node.args]
            if any(k in (R, T) for _, k in texts):
                raise Decline(f"tl.{name} on a per-row value")
            return self.seg(node), texts[0][1] if name in HINTS and texts else S
        if name in ELEMENTWISE or name in ("range", "static_range"):
            return self.elementwise(node, list(node.args) + [k.value for k in node.keywords])
        raise Decline(f"tl.{name}: the widening does not know how it broadcasts")

    def _is_math(self, func) -> bool:
        """A libdevice / tl.math function: a name imported from one, an attribute of a name bound
        to one, or any function under `libdevice` in a `tl` attribute chain."""
        if isinstance(func, ast.Name):
            return func.id in self.math_functions and func.id not in self.jit
        if isinstance(func, ast.Attribute):
            chain, base = [], func.value
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            return isinstance(base, ast.Name) and (
                (base.id in self.math_modules and not chain) or (base.id == self.tl and "libdevice" in chain))
        return False

    def other_call(self, node: ast.Call) -> tuple[str, str]:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ("to", "cast"):
            recv, kind = self.emit(func.value)
            for a in node.args + [k.value for k in node.keywords]:
                if self.emit(a)[1] != S:
                    raise Decline(f"`{self.seg(node)}`: a per-row dtype")
            return self.splice(node, [(*self.site.span(func.value), recv)]), kind
        known = ("float", "int", "bool", "min", "max", "range")
        if isinstance(func, ast.Name) and (func.id in known or func.id in self.jit):
            args = node.args + [k.value for k in node.keywords]
            if all(self.emit(a)[1] == S for a in args):
                return self.seg(node), S
            if func.id in self.jit and self._elementwise_helper(func.id, set()):
                return self.elementwise(node, args)
            raise Decline(f"`{func.id}(...)` is called with per-row or per-column values")
        raise Decline(f"`{self.seg(node)}`: a call the widening does not follow")

    def _elementwise_helper(self, name: str, seen: set[str]) -> bool:
        """Whether the file's jit function `name` maps its arguments element by element: only
        assignments and a return of arithmetic, comparisons, casts and elementwise math on its
        parameters and constants (Liger's `silu(x)`), so a tile argument gives a tile result."""
        fn = self.functions.get(name)
        if fn is None or name in seen or fn.args.vararg or fn.args.kwarg:
            return False
        seen = seen | {name}
        body = fn.body[1:] if fn.body and isinstance(fn.body[0], ast.Expr) else fn.body
        exprs = []
        for st in body:
            if isinstance(st, ast.Assign) and all(isinstance(t, ast.Name) for t in st.targets):
                exprs.append(st.value)
            elif isinstance(st, ast.Return) and st.value is not None:
                exprs.append(st.value)
            else:
                return False
        return all(self._elementwise_expr(e, seen) for e in exprs)

    def _elementwise_expr(self, node, seen: set[str]) -> bool:
        """Whether `node` computes element by element from its names (see `_elementwise_helper`)."""
        if isinstance(node, (ast.Name, ast.Constant)):
            return True
        if isinstance(node, ast.Attribute):  # a dtype read or a tl constant (tl.float32), never `.T`
            root = node
            while isinstance(root, ast.Attribute):
                root = root.value
            return node.attr in ("dtype", "element_ty") or (isinstance(root, ast.Name) and root.id == self.tl)
        parts = {ast.BinOp: lambda n: [n.left, n.right], ast.UnaryOp: lambda n: [n.operand],
                 ast.BoolOp: lambda n: n.values, ast.Compare: lambda n: [n.left, *n.comparators],
                 ast.IfExp: lambda n: [n.test, n.body, n.orelse]}
        if type(node) in parts:
            return all(self._elementwise_expr(c, seen) for c in parts[type(node)](node))
        if not isinstance(node, ast.Call):
            return False
        f, args = node.func, node.args + [k.value for k in node.keywords]
        if isinstance(f, ast.Attribute) and f.attr in ("to", "cast"):
            args = [f.value, *args]
        elif not (self._is_math(f) or self._tl_name(f) in ELEMENTWISE
                  or (isinstance(f, ast.Name) and f.id in self.jit and self._elementwise_helper(f.id, seen))):
            return False
        return all(self._elementwise_expr(a, seen) for a in args)

    def _arg(self, node: ast.Call, pos: int, kw: str):
        if len(node.args) > pos:
            return node.args[pos]
        return next((k.value for k in node.keywords if k.arg == kw), None)

    def memory(self, node: ast.Call, name: str) -> tuple[str, str]:
        names = ("pointer", "mask", "other") if name == "load" else ("pointer", "value", "mask")
        args = {n: self._arg(node, i, n) for i, n in enumerate(names)}
        done = {n: (a, *self.emit(a)) for n, a in args.items() if a is not None}
        kind = join(*(k for _, _, k in done.values()))
        if kind == S:
            return self.seg(node), S
        if kind == C:
            parts = [(*self.site.span(a), self.to(t, k, kind)) for a, t, k in done.values()]
            return self.splice(node, parts), (C if name == "load" else S)
        self.widened = True
        parts = []
        for n, (a, t, k) in done.items():
            if n != "mask":
                parts.append((*self.site.span(a), self.to(t, k, kind)))
        guard = self.guard(kind)
        mask = done.get("mask")
        if mask is not None and not (isinstance(mask[0], ast.Constant) and mask[0].value is None):
            parts.append((*self.site.span(mask[0]), f"{guard} & {_atom(self.to(mask[1], mask[2], kind))}"))
        elif mask is not None:
            parts.append((*self.site.span(mask[0]), guard))
        else:
            last = max(node.args + [k.value for k in node.keywords], key=lambda n: self.site.span(n))
            end = self.site.span(last)[1]
            parts.append((end, end, f", mask={guard}"))
        return self.splice(node, parts), (kind if name == "load" else S)

    def reduce(self, node: ast.Call, name: str) -> tuple[str, str]:
        if any(k.arg == "keep_dims" for k in node.keywords) or not node.args:
            raise Decline(f"`{self.seg(node)}`: a reduction with keep_dims or without its input")
        text, kind = self.emit(node.args[0])
        if kind == C:
            return self.seg(node), S
        if kind != T:
            raise Decline(f"`{self.seg(node)}` reduces a {kind} value")
        parts = [(*self.site.span(node.args[0]), text)]
        axis = self._arg(node, 1, "axis")
        if axis is None or isinstance(axis, ast.Constant) and axis.value is None:
            if axis is None:
                end = self.site.span(node.args[-1] if not node.keywords else node.keywords[-1].value)[1]
                parts.append((end, end, ", axis=1"))
            else:
                parts.append((*self.site.span(axis), "1"))
        elif isinstance(axis, ast.Constant) and axis.value in (0, -1):
            parts.append((*self.site.span(axis), "1"))
        else:
            raise Decline(f"`{self.seg(node)}`: a reduction along an axis it cannot read")
        return self.splice(node, parts), R

    # -- statements -----------------------------------------------------------------------------
    def edit(self, node, text: str) -> None:
        if text != self.seg(node):
            self.edits[self.site.span(node)] = text

    def grow(self, name: str, value, text: str, kind: str, want: str) -> str:
        """The first value of a loop-carried name, widened to `want` (a zeros/full tile, or a
        per-row vector of a number)."""
        tl, knob = self.tl, self.knob
        is_call = isinstance(value, ast.Call) and self._tl_name(value.func) in ("zeros", "full")
        shape = value.args[0] if is_call and value.args else None
        if kind == C and want == T and isinstance(shape, (ast.List, ast.Tuple)) and len(shape.elts) == 1:
            return self.splice(value, [(*self.site.span(shape), f"[{knob}, {self.seg(shape.elts[0])}]")])
        if kind == S and want == R and isinstance(value, ast.Constant) and type(value.value) in (int, float):
            dtype = "float32" if isinstance(value.value, float) else "int32"
            return f"{tl}.full([{knob}], {text}, {tl}.{dtype})"
        raise Decline(f"`{name}` widens inside a loop and its first value cannot be widened")

    def bind(self, target, value, text: str, kind: str) -> tuple[str, str]:
        """(text, kind) of a value bound to `target`, with loop-carried names handled."""
        if not isinstance(target, ast.Name):
            return text, kind
        name, want = target.id, self.force.get(target.id)
        if want is not None and name not in self.env and kind != want and join(kind, want) == want:
            return self.grow(name, value, text, kind, want), want
        if self.loops and name in self.env and self.env[name] != kind:
            raise Grow(name, join(self.env[name], kind))
        return text, kind

    def assign(self, target, kind: str) -> None:
        if not isinstance(target, ast.Name):
            if kind != S:
                raise Decline(f"`{self.seg(target)}` is assigned a per-row value through unpacking")
            for n in ast.walk(target):
                if isinstance(n, ast.Name):
                    self.env[n.id] = S
            return
        self.env[target.id] = kind

    def block(self, body: list[ast.stmt]) -> None:
        for st in body:
            self.statement(st)

    def statement(self, st: ast.stmt) -> None:
        if isinstance(st, ast.Expr):
            text, _ = self.emit(st.value)
            self.edit(st.value, text)
        elif isinstance(st, (ast.Assign, ast.AnnAssign)):
            text, kind = self.emit(st.value)
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            if len(targets) == 1:
                text, kind = self.bind(targets[0], st.value, text, kind)
            self.edit(st.value, text)
            for t in targets:
                self.assign(t, kind)
        elif isinstance(st, ast.AugAssign):
            text, kind = self.emit(st.value)
            if not isinstance(st.target, ast.Name):
                raise Decline(f"`{self.seg(st)}` updates something other than a name")
            name = st.target.id
            have = self.env.get(name, S)
            grown = join(have, kind)
            if grown == have:
                self.edit(st.value, self.to(text, kind, have))
            elif self.loops:
                raise Grow(name, grown)
            elif type(st.op) in OPS:  # outside loops a new value of a wider shape is fine
                left, right = self.to(name, have, grown), _atom(self.to(text, kind, grown))
                self.edits[self.site.span(st)] = f"{name} = {left} {OPS[type(st.op)]} {right}"
                self.env[name] = grown
            else:
                raise Decline(f"`{self.seg(st)}` would change the shape of `{name}` in place")
        elif isinstance(st, ast.If):
            if self.emit(st.test)[1] != S:
                raise Decline(f"`if {self.seg(st.test)}` branches on a per-row value")
            before = dict(self.env)
            self.block(st.body)
            after_body, self.env = self.env, dict(before)
            self.block(st.orelse)
            for name in set(after_body) | set(self.env):
                a, b = after_body.get(name, before.get(name)), self.env.get(name, before.get(name))
                if a != b and None not in (a, b):
                    raise Decline(f"`{name}` is a {a} value on one branch and a {b} value on the other")
                self.env[name] = a or b
        elif isinstance(st, ast.For):
            if self.emit(st.iter)[1] != S:
                raise Decline(f"a loop over `{self.seg(st.iter)}` depends on the row")
            self.assign(st.target, S)
            self.loops += 1
            try:
                for _ in range(3):
                    before = dict(self.env)
                    self.block(st.body)
                    if self.env == before:
                        break
                else:
                    raise Decline("a loop whose values keep changing shape")
            finally:
                self.loops -= 1
            self.block(st.orelse)
        elif isinstance(st, ast.Pass) or isinstance(st, ast.Assert) and self.emit(st.test)[1] == S:
            return
        elif isinstance(st, ast.Raise) and all(self.env.get(n.id, S) == S for n in ast.walk(st)
                                                if isinstance(n, ast.Name)):
            return  # under a uniform branch (a per-row one declines above): unchanged, as compiled
        else:
            raise Decline(f"a `{type(st).__name__.lower()}` statement the widening does not follow")
