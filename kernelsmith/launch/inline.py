"""The launch evaluator's calls into helpers (launch/evaluate.py): the functions and methods of the
operator's file that hold a knob or a launch (`rms_norm_forward` behind `Function.apply`, a warp
ladder `get_num_warps(BLOCK)`), and functions of other modules of the checkout (`calculate_settings`
in a utils module), run on the caller's evaluated arguments with their own module's names. A helper
with several paths forks the caller at a statement (`x = helper(...)`, `helper(...)`, `return
helper(...)`); inside an expression it must have one. A helper of another module the evaluator
cannot follow stays an unknown call (no knob lives there); one of this file raises Unsupported.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from kernelsmith.launch.follow import Callee, Module, Sources, callee
from kernelsmith.launch.syntax import _call_name
from kernelsmith.launch.values import UNKNOWN, Unsupported, _State, deep, module_bindings

_DEFS = ast.FunctionDef | ast.AsyncFunctionDef
MAX_DEPTH = 8  # helper calls followed inside one another


@dataclass
class Names:
    """A module's names as the evaluator reads them: module-level bindings, memoised per signature."""

    module: Module
    defs: dict
    memo: dict = field(default_factory=dict)


def is_launch(n: ast.AST, jit: set[str]) -> bool:
    """`kernel[grid](...)` of a Triton function of the file (or a name saying it is a kernel)."""
    if not isinstance(n, ast.Call) or not isinstance(n.func, ast.Subscript):
        return False
    name = _call_name(n.func.value)
    return name in jit or "kernel" in name.lower()


def holding(own: Module, jit: set[str], sites: set[int], span) -> set[int]:
    """The functions and methods of the file (ids of their defs; no kernels) that hold a knob's site
    or a kernel launch, or call one that does: the entry's calls are followed into these."""
    fns = [f for f in ast.walk(own.tree) if isinstance(f, _DEFS) and f.name not in jit]
    holds = {id(f) for f in fns if any(
        isinstance(n, ast.expr) and span(n)[0] in sites or is_launch(n, jit) for n in ast.walk(f))}
    none = Sources(None, None)
    calls = {id(f): {id(c.fn) for n in ast.walk(f) if isinstance(n, ast.Call)
                     and isinstance(c := callee(own, n.func, none), Callee)} for f in fns}
    grew = True
    while grew:
        grew = False
        for f in fns:
            if id(f) not in holds and calls[id(f)] & holds:
                holds.add(id(f))
                grew = True
    return holds


class HelperCalls:
    """LaunchEvaluator's part that runs helpers (see the module docstring)."""

    def _helper_stmt(self, s: ast.stmt, call: ast.Call, st: _State, helper: tuple) -> list[_State]:
        """`x = helper(...)`, `helper(...)` or `return helper(...)`: one state per path through it."""
        out = []
        for path, ret in self._inline(call, st, helper):
            if isinstance(s, ast.Assign):
                for target in s.targets:
                    self.bind(target, ret, path)
            elif isinstance(s, ast.Return) and not path.done:
                path.launches.append(("return", s.lineno))
                path.ret, path.done = ret, True
                if deep(*ret) and not self.depth:
                    raise Unsupported("the launcher returns a knob-dependent value")
            out.append(path)
        return out

    def _helper(self, n: ast.Call) -> tuple | None:
        """(function, its module's names) a call runs when the entry's calls are followed into it: a
        function of this file holding a knob or a launch, or one of another module of the checkout
        (e.g. `calculate_settings`); else None."""
        found = callee(self.here.module, n.func, self.sources)
        if not isinstance(found, Callee) or found.fn.name in self.jit:
            return None
        if found.module is self.own.module:
            return (found.fn, self.own) if id(found.fn) in self.holding else None
        if found.module.name not in self.names:
            defs = module_bindings(found.module.tree.body, {}, self.cuda)
            self.names[found.module.name] = Names(found.module, defs)
        return found.fn, self.names[found.module.name]

    def _inline(self, n: ast.Call, st: _State, helper: tuple) -> list[tuple[_State, tuple]]:
        """(the caller's state after, the value returned) per path through the helper `n` calls; a path
        the helper raises on ends the caller's too."""
        fn, module = helper
        if self.depth >= MAX_DEPTH:
            raise Unsupported(f"helpers nested deeper than {MAX_DEPTH} calls")
        if any(isinstance(a, ast.Starred) for a in n.args) or any(k.arg is None for k in n.keywords):
            raise Unsupported(f"{fn.name} called with *args or **kwargs")
        a = fn.args
        names = [p.arg for p in a.posonlyargs + a.args]
        if isinstance(n.func, ast.Attribute) and n.func.attr == "apply" and fn.name == "forward":
            names = names[1:]  # Function.apply(...) runs forward(ctx, ...): ctx is no argument
        if a.vararg or a.kwarg or len(n.args) > len(names):
            raise Unsupported(f"{fn.name}: a helper with an unusual signature")
        args = dict(zip(names, [self.eval(x, st) for x in n.args], strict=False))
        args.update({k.arg: self.eval(k.value, st) for k in n.keywords})
        defaults = dict(zip(names[len(names) - len(a.defaults):], a.defaults, strict=True))
        defaults.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None})
        env = {p.arg: args[p.arg] if p.arg in args else self.eval(defaults[p.arg], _State({}))
               if p.arg in defaults else (UNKNOWN, False) for p in a.posonlyargs + a.args + a.kwonlyargs}
        self.depth += 1
        caller, self.here = self.here, module
        try:
            paths = self.block(fn.body, [_State(env, ctx=st.ctx)])
        finally:
            self.depth -= 1
            self.here = caller
        out = []
        for p in paths:
            after = st.fork()
            after.launches.extend(p.launches)
            after.done = bool(p.launches) and p.launches[-1][0] == "raise"
            out.append((after, p.ret if p.ret is not None else (None, False)))
        return out

