"""Launch signatures: what an entry launcher launches under a params config, per listed shape, from
its code text (the launcher is target code: never run, never imported). A partial evaluator of its
straight-line code: literals (knobs' take the config's values), names bound earlier, the arguments
as the harness's recorded inputs (meta tensors: sizes, reshapes exact), arithmetic, comparisons,
`min`, `max`, `abs`, `int`, `len`, `(triton.)next_power_of_2`, `(triton.)cdiv`, conditionals whose
test evaluates (a platform switch takes its CUDA branch on CUDA; a test no knob reaches is followed
both ways). Each value carries a taint (does a knob reach it?); a launch's signature is its kernel
and its tainted arguments' values (constexprs, num_warps/num_stages, grid entries, scalars). What a
knob reaches that this cannot follow (a loop, an undecidable branch, an unknown call, a tensor sized
by a knob, a module-level knob read elsewhere, a helper holding a knob used as a value) raises
Unsupported: no signature, never a dedupe. The entry may be dotted (`Function.apply` runs `forward`);
its calls into helpers holding a knob or a launch, and into helpers of other modules of the checkout
(`calculate_settings`), are followed (launch/inline.py); an override knob (a launch option computed
in another file) replaces the argument's value unless it keeps the computed one.
"""

from __future__ import annotations

import ast
import re

from kernelsmith.launch.follow import Sources, entry_function
from kernelsmith.launch.inline import HelperCalls, Names, holding, is_launch
from kernelsmith.launch.syntax import _call_name, folded, jit_functions, line_offsets
from kernelsmith.launch.values import (
    MAX_PATHS,
    PURE,
    UNKNOWN,
    Dtype,
    Global,
    Items,
    LocalFn,
    Mapping,
    Unsupported,
    _State,
    attribute,
    binop,
    chain,
    deep,
    from_input,
    index,
    items,
    module_bindings,
    module_knob,
    plain,
    plain_ok,
    platform,
    pure,
    tensor_method,
    truth,
    unary,
    undecided,
)
from kernelsmith.pysource import parse

_DEFS = ast.FunctionDef | ast.AsyncFunctionDef
class LaunchEvaluator(HelperCalls):
    """The launch signature of `entry` in `code` for knob values; see the module docstring."""

    def __init__(self, code: str, tunables: list, entry: str, cuda: bool = True,
                 sources: Sources | None = None):
        tree = parse(code)
        self.cuda = cuda  # which platform switches are decided (launch_values.platform)
        self.sources = sources or Sources(None, None)
        funcs = [n for n in ast.walk(tree) if isinstance(n, _DEFS)]
        own = self.sources.own(code, tree)
        fn = entry_function(own, entry)
        if fn is None or "." not in entry and len([f for f in funcs if f.name == entry]) != 1:
            raise Unsupported(f"no single function {entry!r}")
        self.fn = fn
        self.jit = jit_functions(tree)
        self.kparams = {f.name: [a.arg for a in f.args.posonlyargs + f.args.args]
                        for f in funcs if f.name in self.jit}
        off = line_offsets(code.encode())
        self.span = lambda n: (off[n.lineno - 1] + n.col_offset, off[n.end_lineno - 1] + n.end_col_offset)
        consts = {self.span(n): n for n in ast.walk(tree) if isinstance(n, ast.Constant)}
        exprs = {self.span(n): n for n in ast.walk(tree) if isinstance(n, ast.expr)}
        self.knob_at: dict[int, tuple[str, int]] = {}  # id(literal or `65536 // 2`) -> (key, base)
        self.override_at: dict[int, tuple[str, int]] = {}  # id(launch argument) -> (key, base)
        self.option_at: dict[int, list] = {}  # insertion offset -> [(option, key, base)]
        sites = set()
        for t in tunables:
            for s, e in t.sites:
                if s == e:
                    if not (m := re.search(r"(\w+)=", t.fmt)):
                        raise Unsupported(f"knob {t.key}: an insertion of unknown form")
                    self.option_at.setdefault(s, []).append((m.group(1), t.key, t.base))
                elif t.computed and (s, e) in exprs:
                    self.override_at[id(exprs[(s, e)])] = (t.key, t.base)
                elif (s, e) in consts:
                    self.knob_at[id(consts[(s, e)])] = (t.key, t.base)
                elif (s, e) in exprs and folded(exprs[(s, e)]) is not None:  # an expression of literals
                    self.knob_at[id(exprs[(s, e)])] = (t.key, t.base)
                else:
                    raise Unsupported(f"knob {t.key}: a site that is no literal")
                sites.add(s)
        # Module functions the entry's calls are followed into: those holding a knob or a launch.
        self.holding = holding(own, self.jit, sites, self.span)
        helpers = [f for f in funcs if id(f) in self.holding]
        inside = {id(n) for f in [self.fn, *helpers] for n in ast.walk(f)}
        # Names a value may hide a knob behind (`fn = helper; fn(x)`): tainted, so no signature then.
        self.hiding = {f.name for f in helpers} | {c.name for c in own.classes.values()
                                                   if any(id(f) in self.holding for f in ast.walk(c))}
        self.module_knobs: set[str] = set()
        for t in tunables:
            if t.key.startswith("config") or t.scope not in (None, self.fn.name, *(f.name for f in helpers)):
                raise Unsupported(f"knob {t.key} lives outside {entry}")
            if t.scope is None:
                self.module_knobs.add(module_knob(t, tree, inside))
        # The module whose names are read: this file's, or a helper's of another module while it runs.
        self.own = self.here = Names(own, module_bindings(tree.body, {}, cuda))
        self.names: dict[str, Names] = {own.name: self.own}  # per module evaluated
        self.depth = 0  # helpers being evaluated

    # -- the entry point ---------------------------------------------------------------------------
    def signature(self, values: dict, inputs: dict) -> tuple:
        """The launches (tainted arguments' values) of every path for one shape's inputs."""
        self.values = values
        for names in self.names.values():
            names.memo.clear()
        env = {}
        a = self.fn.args
        params = a.posonlyargs + a.args + a.kwonlyargs
        defaults = [None] * (len(a.posonlyargs + a.args) - len(a.defaults)) + a.defaults + a.kw_defaults
        scratch = _State({})
        for p, d in zip(params, defaults, strict=True):
            if p.arg in inputs:
                env[p.arg] = (from_input(inputs[p.arg]), False)
            elif d is not None:
                env[p.arg] = self.eval(d, scratch)
            else:
                env[p.arg] = (UNKNOWN, False)
        if a.vararg:
            env[a.vararg.arg] = (Items(()), False)
        if a.kwarg:
            extra = {k: (from_input(v), False) for k, v in inputs.items() if k not in env}
            env[a.kwarg.arg] = (Mapping(extra), False)
        states = self.block(self.fn.body, [_State(env)])
        return tuple(tuple(s.launches) for s in states)

    # -- statements ------------------------------------------------------------------------------
    def block(self, stmts: list, states: list[_State]) -> list[_State]:
        for stmt in stmts:
            nxt = []
            for st in states:
                nxt.extend([st] if st.done else self.stmt(stmt, st))
            states = nxt
            if len(states) > MAX_PATHS:
                raise Unsupported("too many paths through undecidable tests")
        return states

    def stmt(self, s: ast.stmt, st: _State) -> list[_State]:
        call = s.value if isinstance(s, ast.Expr | ast.Assign | ast.Return) else None
        if isinstance(call, ast.Call) and (helper := self._helper(call)) is not None:
            try:
                return self._helper_stmt(s, call, st, helper)
            except Unsupported:
                if helper[1] is self.own:
                    raise  # a knob lives there: no signature
                # another module's helper the evaluator cannot follow: an unknown call, as before
        if isinstance(s, ast.Expr | ast.Assert | ast.Pass | ast.Import | ast.ImportFrom):
            if isinstance(s, ast.Expr):
                self.eval(s.value, st)
            elif isinstance(s, ast.Assert):
                v, t = self.eval(s.test, st)
                if t and (ok := truth(v)) is UNKNOWN:
                    raise Unsupported("an assert a knob reaches is undecidable")
                if t and not ok:
                    st.launches.append(("assert", s.lineno))
                    st.done = True
            return [st]
        if isinstance(s, ast.Assign | ast.AnnAssign | ast.AugAssign):
            if s.value is None:
                return [st]
            if isinstance(s, ast.AugAssign):
                value = binop(s.op, self.eval(s.target, st), self.eval(s.value, st))
            else:
                value = self.eval(s.value, st)
            for target in s.targets if isinstance(s, ast.Assign) else [s.target]:
                self.bind(target, value, st)
            return [st]
        if isinstance(s, ast.If):
            return self._if(s, st)
        if isinstance(s, ast.Return | ast.Raise):
            # Where the path ends is part of it (two returns of a branch a knob chose differ).
            st.launches.append((type(s).__name__.lower(), s.lineno))
            if isinstance(s, ast.Return) and s.value is not None:
                st.ret = self.eval(s.value, st)
                if deep(*st.ret) and not self.depth:  # a helper returns its knob's value to its caller
                    raise Unsupported("the launcher returns a knob-dependent value")
            st.done = True
            return [st]
        if isinstance(s, ast.With):
            for item in s.items:
                v = self.eval(item.context_expr, st)
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, (UNKNOWN, v[1] or st.ctx), st)
            return self.block(s.body, [st])
        if isinstance(s, ast.FunctionDef):  # a closure: only a grid call evaluates it; elsewhere tainted
            st.env[s.name] = (LocalFn(s), True)
            return [st]
        # Loops, try, match ...: fine only when no knob, no launch and nothing knob-dependent is inside.
        if self._touches(s, st):
            raise Unsupported(f"a knob reaches a {type(s).__name__} statement")
        st.launches.append(("stmt", s.lineno))
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store | ast.Del):
                st.env[n.id] = (UNKNOWN, st.ctx)
        return [st]

    def _touches(self, node: ast.AST, st: _State) -> bool:
        for n in ast.walk(node):
            if id(n) in self.knob_at or id(n) in self.override_at:
                return True
            if isinstance(n, ast.Call) and self._kernel(n) is not None:
                return True
            if isinstance(n, ast.Name) and n.id not in st.env and self.here is self.own and (
                    n.id in self.module_knobs or n.id in self.hiding):
                return True  # a module knob, or a helper holding a knob or a launch
            if isinstance(n, ast.Name) and deep(*st.env.get(n.id, (0, False))):
                return True
        return False

    def _if(self, s: ast.If, st: _State) -> list[_State]:
        v, t = self.eval(s.test, st)
        if (ok := truth(v)) is UNKNOWN and (ok := platform(s.test, self.cuda)) is UNKNOWN:
            if t:
                raise Unsupported("a test a knob reaches is undecidable")
            return self.block(s.body, [st.fork()]) + self.block(s.orelse, [st.fork()])
        outer = st.ctx
        st.ctx = outer or t
        out = self.block(s.body if ok else s.orelse, [st])
        for o in out:
            o.ctx = outer
        return out

    def bind(self, target, value: tuple, st: _State) -> None:
        v, t = value[0], value[1] or st.ctx
        if isinstance(target, ast.Name):
            st.env[target.id] = (v, t)
        elif isinstance(target, ast.Tuple | ast.List):
            elts = items(v)
            if elts is not None and len(elts) == len(target.elts):
                for sub, (iv, it) in zip(target.elts, elts, strict=True):
                    self.bind(sub, (iv, it or t), st)
            else:
                for sub in target.elts:
                    self.bind(sub.value if isinstance(sub, ast.Starred) else sub, (UNKNOWN, t), st)
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            d, dt = st.env.get(target.value.id, (UNKNOWN, False))
            key = self.eval(target.slice, st)
            if isinstance(d, Mapping) and isinstance(key[0], str):
                st.env[target.value.id] = (Mapping({**d.vals, key[0]: (v, t or key[1])}), dt)
            elif deep(v, t) or key[1]:
                raise Unsupported("a knob-dependent store into a container")
            elif isinstance(d, Mapping | Items):  # an item we do not follow: the container is unknown now
                st.env[target.value.id] = (UNKNOWN, deep(d, dt))
        elif deep(v, t):
            raise Unsupported("a knob-dependent value stored into an attribute")

    # -- expressions -----------------------------------------------------------------------------
    def eval(self, n: ast.AST, st: _State) -> tuple:
        """(value, tainted) of an expression; UNKNOWN where it cannot be computed."""
        if id(n) in self.override_at:  # an override knob: its value replaces the argument's
            key, base = self.override_at[id(n)]
            if (v := self.values.get(key, base)) != base:
                return v, True
        if id(n) in self.knob_at:
            key, base = self.knob_at[id(n)]
            return self.values.get(key, base), True
        if isinstance(n, ast.Constant):
            return n.value, False
        if isinstance(n, ast.Name):
            return self._name(n.id, st)
        if isinstance(n, ast.Tuple | ast.List):
            vals = [self.eval(e, st) for e in n.elts if not isinstance(e, ast.Starred)]
            if len(vals) < len(n.elts):
                return UNKNOWN, any(self._touches(e, st) for e in n.elts)
            return Items(tuple(vals)), False
        if isinstance(n, ast.Dict):
            keys = [self.eval(k, st) if k is not None else (UNKNOWN, False) for k in n.keys]
            vals = [self.eval(v, st) for v in n.values]
            if all(isinstance(k, str) for k, _ in keys) and not any(t for _, t in keys):
                return Mapping({k: v for (k, _), v in zip(keys, vals, strict=True)}), False
            return UNKNOWN, any(deep(*x) for x in keys + vals)
        if isinstance(n, ast.BinOp):
            return binop(n.op, self.eval(n.left, st), self.eval(n.right, st))
        if isinstance(n, ast.UnaryOp):
            return unary(n.op, *self.eval(n.operand, st))
        if isinstance(n, ast.BoolOp):
            taint = False
            for i, e in enumerate(n.values):
                v, t = self.eval(e, st)
                taint |= t
                if (ok := truth(v)) is UNKNOWN:  # the rest may run or not: evaluated, for what they reach
                    rest = n.values[i + 1:]
                    undecided(taint, rest)
                    return UNKNOWN, any([deep(v, taint)] + [deep(*self.eval(x, st)) for x in rest])
                if ok == isinstance(n.op, ast.Or):
                    return v, taint
            return v, taint
        if isinstance(n, ast.Compare):
            return chain(n.ops, [self.eval(x, st) for x in [n.left, *n.comparators]])
        if isinstance(n, ast.IfExp):
            v, t = self.eval(n.test, st)
            ok = truth(v)
            if ok is UNKNOWN:
                ok = platform(n.test, self.cuda)
            if ok is not UNKNOWN:
                bv, bt = self.eval(n.body if ok else n.orelse, st)
                return bv, bt or t
            undecided(t, [n.body, n.orelse])
            a, b = self.eval(n.body, st), self.eval(n.orelse, st)
            same = type(a[0]) is type(b[0]) and plain_ok(a[0]) and a[0] == b[0]
            return (a[0] if same else UNKNOWN), t or deep(*a) or deep(*b)
        if isinstance(n, ast.Attribute):
            return attribute(*self.eval(n.value, st), n.attr)
        if isinstance(n, ast.Subscript):
            return index(self.eval(n.value, st), self.eval(n.slice, st))
        if isinstance(n, ast.Call):
            return self._call(n, st)
        if isinstance(n, ast.Lambda):
            return LocalFn(n), True
        if isinstance(n, ast.NamedExpr):
            value = self.eval(n.value, st)
            self.bind(n.target, value, st)
            return value
        return UNKNOWN, self._touches(n, st)

    def _name(self, name: str, st: _State) -> tuple:
        if name in st.env:
            return st.env[name]
        here = self.here
        if here is self.own and name in self.hiding:
            return UNKNOWN, True  # a function or class holding a knob, used as a value
        knob = here is self.own and name in self.module_knobs
        if name in here.defs:
            if name not in here.memo:
                here.memo[name] = (UNKNOWN, knob)  # a cycle reads unknown
                defs = here.defs[name]
                one = defs[0] if len(defs) == 1 and defs[0] is not None else None
                here.memo[name] = self.eval(one, _State({})) if one is not None else (UNKNOWN, knob)
            return here.memo[name]
        if name in here.module.funcs:
            return UNKNOWN, False
        return Global(name), False

    # -- attributes, subscripts, calls -----------------------------------------------------------
    def _call(self, n: ast.Call, st: _State) -> tuple:
        if (kernel := self._kernel(n)) is not None:
            self._launch(n, kernel, st)
            return UNKNOWN, False
        if (helper := self._helper(n)) is not None:
            try:
                (after, ret), *more = self._inline(n, st, helper)
                if more or after.done:
                    raise Unsupported(f"{ast.unparse(n.func)}, called in an expression, has several paths")
                st.launches[:] = after.launches
                return ret
            except Unsupported:
                if helper[1] is self.own:
                    raise  # a knob lives there: no signature
                # another module's helper the evaluator cannot follow: an unknown call, as before
        if any(isinstance(a, ast.Starred) for a in n.args) or any(k.arg is None for k in n.keywords):
            if any(self._touches(a, st) for a in n.args + n.keywords):
                raise Unsupported("a knob reaches an unpacked call")
            st.launches.append(("call", n.lineno, n.col_offset))
            return UNKNOWN, False
        import torch

        obj, ot = self.eval(n.func.value, st) if isinstance(n.func, ast.Attribute) else (None, False)
        # A method of a dict holding a knob's value is tainted.
        f, ft = attribute(obj, ot, n.func.attr) if obj is not None else self.eval(n.func, st)
        ft = ft or deep(obj, ot)
        args = [self.eval(a, st) for a in n.args]
        kw = {k.arg: self.eval(k.value, st) for k in n.keywords}
        taint = any(deep(*a) for a in args) or any(deep(*a) for a in kw.values())
        if isinstance(f, LocalFn):
            return self._call_local(f.node, args, kw, st)
        known = isinstance(obj, torch.Tensor)
        if known and (out := tensor_method(obj, n.func.attr, args, kw, ot or taint))[0] is not UNKNOWN:
            return out
        if isinstance(f, Global) and f.name in PURE and not kw:
            return pure(f.name.rsplit(".", 1)[-1], args), taint
        if isinstance(f, Global) and f.name.startswith("torch.") and f.name.endswith("_like") and args:
            if isinstance(args[0][0], torch.Tensor):
                dtype = kw.get("dtype", (None, False))[0]
                dtype = getattr(torch, dtype.name) if isinstance(dtype, Dtype) else None
                return torch.empty_like(args[0][0], dtype=dtype), taint
        if taint or ft:
            raise Unsupported(f"a knob reaches a call of {ast.unparse(n.func)}")
        # A call it does not know may do anything but depend on a knob: where it runs is part of the path.
        st.launches.append(("call", n.lineno, n.col_offset))
        return UNKNOWN, False

    def _call_local(self, fn: ast.AST, args: list, kw: dict, st: _State) -> tuple:
        """A lambda or def of the launcher called with evaluated arguments (a grid callable)."""
        a = fn.args
        names = [p.arg for p in a.posonlyargs + a.args]
        if a.vararg or a.kwarg or a.kwonlyargs or len(args) > len(names):
            raise Unsupported("a launcher callable with an unusual signature")
        env = dict(st.env)
        defaults = dict(zip(names[len(names) - len(a.defaults):], a.defaults, strict=True))
        for i, name in enumerate(names):
            env[name] = args[i] if i < len(args) else kw[name] if name in kw else (
                self.eval(defaults[name], st) if name in defaults else (UNKNOWN, False))
        child = _State(env, ctx=st.ctx)
        if isinstance(fn, ast.Lambda):
            child.ret = self.eval(fn.body, child)
        elif len(out := self.block(fn.body, [child])) != 1 or out[0].ret is None:
            raise Unsupported("a launcher callable with several paths or no return")
        else:
            child = out[0]
        st.launches.extend(child.launches)  # what it ran (its calls, launches) is part of the path
        return child.ret

    def _kernel(self, n: ast.Call) -> str | None:
        return _call_name(n.func.value) if is_launch(n, self.jit) else None

    def _launch(self, n: ast.Call, kernel: str, st: _State) -> None:
        """Record a launch: the kernel and its tainted arguments' values (grid entries by index)."""
        params = self.kparams.get(kernel, [])
        bound: dict[str, tuple] = {}
        for i, a in enumerate(n.args):
            if isinstance(a, ast.Starred):
                v, t = self.eval(a.value, st)
                if not isinstance(v, Items):
                    if t or self._touches(a, st):
                        raise Unsupported("a knob reaches an unpacked launch argument")
                    continue
                for j, item in enumerate(v.vals):
                    bound[f"*{i}.{j}"] = (item[0], item[1] or t)
                continue
            bound[params[i] if i < len(params) else f"#{i}"] = self.eval(a, st)
        for k in n.keywords:
            v, t = self.eval(k.value, st)
            if k.arg is not None:
                bound[k.arg] = (v, t)
            elif isinstance(v, Mapping):
                bound.update({key: (iv, it or t) for key, (iv, it) in v.vals.items()})
            elif t or self._touches(k.value, st):
                raise Unsupported("a knob reaches a **kwargs launch argument")
        last = max(n.args + n.keywords, key=lambda x: (x.end_lineno, x.end_col_offset), default=None)
        pos = self.span(last)[1] if last is not None else self.span(n)[1] - 1
        for option, key, base in self.option_at.get(pos, []):
            if option not in bound:
                bound[option] = (self.values.get(key, base), True)
        g, gt = self.eval(n.func.slice, st)
        if isinstance(g, LocalFn):
            g, gt = self._call_local(g.node, [(Mapping(dict(bound)), False)], {}, st)
        grid = tuple((v, t or gt) for v, t in g.vals) if isinstance(g, Items) else ((g, gt),)
        args = tuple(sorted((k, plain(v, f"{kernel} argument {k}")) for k, (v, t) in bound.items()
                            if deep(v, t)))
        entries = tuple((i, plain(v, f"{kernel} grid entry {i}")) for i, (v, t) in enumerate(grid) if t)
        st.launches.append((kernel, args, entries))
