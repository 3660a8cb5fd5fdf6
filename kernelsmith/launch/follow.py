"""Where a launch value comes from when the launcher does not bind it: the helper function it calls,
in the operator's own file or in a module of the target repository the file imports.

Modules are read from the checkout as text (through safefs: never through a link) and parsed; target
code is never imported or run here. `Sources` finds a dotted module under the folder the operator
file's imports resolve from (the loader's rule) and parses it once; `callee` resolves the function
a call names: a function of the same file, one imported from a module of the repository (`from
pkg.utils import calculate_settings`, `from . import utils; utils.f(...)`), a method of a class of
the file (`Class.method`). Anything else (a method of a value, a builtin, a function of a library
outside the checkout) is no helper; `callee` says why where the launch value needs one.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from kernelsmith import safefs
from kernelsmith.loader import _import_root
from kernelsmith.pysource import entry_def, parse

MAX_MODULE_BYTES = 4 << 20  # a module larger than this is not read (no repository helper is)
MAX_REEXPORTS = 4  # `from .a import f` in a package `__init__` re-exporting f, followed this deep

_DEFS = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass
class Module:
    """A parsed module: its dotted name, repository-relative path, tree and what it binds."""

    name: str
    rel: str
    tree: ast.Module
    code: str
    package: tuple[str, ...]  # where its relative imports resolve from
    funcs: dict[str, ast.FunctionDef] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    # local name -> (module, attribute): `from m import a as n` -> (m, a); `import m as n` -> (m, None)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, rel: str, tree: ast.Module, code: str, package: tuple[str, ...]) -> Module:
        mod = cls(name, rel, tree, code, package)
        for s in tree.body:
            if isinstance(s, _DEFS):
                mod.funcs[s.name] = s
            elif isinstance(s, ast.ClassDef):
                mod.classes[s.name] = s
        for s in ast.walk(tree):
            if isinstance(s, ast.Import):
                for a in s.names:
                    if a.asname:
                        mod.imports[a.asname] = (a.name, None)
                    else:  # `import a.b` binds `a`
                        top = a.name.split(".")[0]
                        mod.imports[top] = (top, None)
            elif isinstance(s, ast.ImportFrom):
                base = _absolute(s.module, s.level, package)
                for a in s.names:
                    if base is not None and a.name != "*":
                        mod.imports[a.asname or a.name] = (base, a.name)
        return mod


def _absolute(module: str | None, level: int, package: tuple[str, ...]) -> str | None:
    """The dotted name a (relative) `from` import names; None when it climbs out of the package."""
    if not level:
        return module
    if level - 1 > len(package) or not package:
        return None
    parts = list(package[: len(package) - (level - 1)]) + (module.split(".") if module else [])
    return ".".join(parts)


class Sources:
    """The modules of one checkout an operator file may import, parsed on demand (never run).

    `root` None (code with no checkout, e.g. a rewritten candidate judged alone) follows helpers of
    the same file only."""

    def __init__(self, root: Path | None, rel_file: str | None):
        self.root = Path(root).resolve() if root is not None else None
        self.rel_file = rel_file
        if self.root is not None and rel_file:
            self.base, self.package = _import_root(self.root, rel_file)
        else:
            self.base, self.package = None, ()
        self._modules: dict[str, Module | str] = {}

    def own(self, code: str, tree: ast.Module) -> Module:
        """The operator file itself (its code as given: the base's or a candidate's)."""
        stem = Path(self.rel_file).stem if self.rel_file else "<operator>"
        name = ".".join((*self.package, stem)) if self.package else stem
        return Module.of(name, self.rel_file or "<operator>", tree, code, self.package)

    def module(self, dotted: str) -> Module | str:
        """The parsed module `dotted` of the checkout, or why it cannot be read."""
        if dotted not in self._modules:
            self._modules[dotted] = self._read(dotted)
        return self._modules[dotted]

    def _read(self, dotted: str) -> Module | str:
        parts = dotted.split(".")
        if self.base is None:
            return f"{dotted}: no checkout to read it from"
        if not all(p.isidentifier() for p in parts):
            return f"{dotted}: not a module name"
        for rel_parts, package in ((parts[:-1] + [parts[-1] + ".py"], tuple(parts[:-1])),
                                   (parts + ["__init__.py"], tuple(parts))):
            path = self.base.joinpath(*rel_parts)
            try:
                code = safefs.read_text(path, MAX_MODULE_BYTES)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except (safefs.UnsafePath, OSError, UnicodeDecodeError) as e:
                return f"{dotted}: not read ({e})"
            rel = path.relative_to(self.root).as_posix()
            try:
                tree = parse(code, rel)
            except (SyntaxError, ValueError, RecursionError, MemoryError):  # null bytes, absurd nesting
                return f"{dotted} ({rel}): does not parse"
            return Module.of(dotted, rel, tree, code, package)
        return f"{dotted}: not a module of the repository"


@dataclass(frozen=True)
class Callee:
    """A helper function a call reaches: its module and definition."""

    module: Module
    fn: ast.FunctionDef


def entry_function(mod: Module, entry: str) -> ast.FunctionDef | None:
    """The function an entry names: `f`, `Class.method`, or `Function.apply` (its `forward`)."""
    return entry_def(mod.tree, entry) if "." in entry else mod.funcs.get(entry)


def callee(mod: Module, func: ast.expr, sources: Sources) -> Callee | str | None:
    """The helper `func` (a call's callee) names, why it cannot be followed, or None where it is no
    function of the repository at all (a method of a value, a builtin)."""
    if isinstance(func, ast.Name):
        if func.id in mod.funcs:
            return Callee(mod, mod.funcs[func.id])
        if func.id in mod.imports:
            return _imported(mod.imports[func.id], sources, 0)
        return None
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        owner = func.value.id
        if owner in mod.classes:
            fn = entry_def(mod.tree, f"{owner}.{func.attr}")
            return Callee(mod, fn) if fn is not None else f"{owner}.{func.attr}: no such method"
        if owner in mod.imports:
            target, attr = mod.imports[owner]
            dotted = target if attr is None else f"{target}.{attr}"
            if attr is not None and not isinstance(sources.module(dotted), Module):
                return None  # `from pkg import obj`: an object's method, not a module's function
            return _imported((dotted, func.attr), sources, 0)
    return None


class HelperReach:
    """`harness new`'s reach (harness.handoff): the functions and kernels of the operator file and
    of the checkout's modules it imports that a call names."""

    def __init__(self, sources: Sources, code: str, tree: ast.Module):
        self.sources, self.own = sources, sources.own(code, tree)

    def callee(self, where: Module | None, func: ast.expr) -> tuple[ast.FunctionDef, Module] | None:
        """(def, its module) for a call of `func` made in `where` (None: the operator file)."""
        got = callee(where or self.own, func, self.sources)
        return (got.fn, got.module) if isinstance(got, Callee) else None


def _imported(ref: tuple[str, str | None], sources: Sources, depth: int) -> Callee | str | None:
    """The function `from module import attr` binds, through package re-exports."""
    dotted, attr = ref
    if attr is None:
        return None  # a module called like a function: nothing to follow
    shown = f"{dotted}.{attr}"
    mod = sources.module(dotted)
    if isinstance(mod, str):
        top = dotted.split(".")[0]
        if sources.package and top != sources.package[0]:
            return None  # a library outside the repository (torch, triton): no helper of the target
        return mod
    if attr in mod.funcs:
        return Callee(mod, mod.funcs[attr])
    if attr in mod.imports and depth < MAX_REEXPORTS:
        return _imported(mod.imports[attr], sources, depth + 1)
    return f"{shown}: not a function defined in {mod.rel}"


def returns(fn: ast.FunctionDef) -> list[ast.Return]:
    """The `return` statements of `fn` itself (not of functions nested in it)."""
    out, todo = [], list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Return):
            out.append(node)
        elif not isinstance(node, _DEFS | ast.ClassDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))
    return sorted(out, key=lambda r: (r.lineno, r.col_offset))


@dataclass
class Trace:
    """The launch argument being followed, and the helpers of other files that choose its value."""

    scope: str | None
    kernel: str
    arg: str
    foreign: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Unfollowed:
    """A launch value (or part of one) the finder could not follow to where it is chosen, and why."""

    scope: str | None
    kernel: str
    arg: str
    why: str

    def __str__(self) -> str:
        return f"{self.kernel} launched in {self.scope or 'the module'}, {self.arg}: {self.why}"


def _item(value: ast.expr, index: int) -> ast.expr | None:
    if isinstance(value, ast.Tuple | ast.List) and not any(isinstance(e, ast.Starred) for e in value.elts):
        return value.elts[index] if index < len(value.elts) else None
    return None


def _default(fn: ast.FunctionDef, name: str) -> ast.expr | None:
    a = fn.args
    positional = a.posonlyargs + a.args
    pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults, strict=True))
    pairs += [(p, d) for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None]
    return next((d for p, d in pairs if p.arg == name), None)


class Follower:
    """The launch finder's part that follows a value out of the function binding it: into the helper
    a call returns it from, to the calls that pass a parameter, and into modules of the checkout.
    A helper of the same file holds knobs (rendered where the value is computed); one of another file
    only tells whether literals there choose the value (`trace.foreign`)."""

    def note(self, why: str) -> None:
        """Record that the launch argument being followed cannot be followed further, and why."""
        if self.trace is not None:
            self.notes.append(Unfollowed(self.trace.scope, self.trace.kernel, self.trace.arg, why))

    def _probe(self, module: Module):
        """A finder over another module of the checkout, following on behalf of this one."""
        probe = type(self)(module.tree, module.code, self.sources, module)
        probe.trace = self.trace
        return probe

    def _returned(self, call: ast.Call, index: int | None, scope, kind, names, kernel, seen) -> None:
        """What the helper `call` names returns (its item `index` where the result is unpacked)."""
        found = callee(self.module, call.func, self.sources)
        if found is None:
            return  # a method of a value, a builtin, a library's function: sizes and semantics
        shown = ast.unparse(call.func)
        if isinstance(found, str):
            self.note(f"{shown}() cannot be followed: {found}")
            return
        mark = (found.module.name, found.fn.name, index)
        if mark in seen:
            return
        seen.add(mark)
        finder = self if found.module is self.module else self._probe(found.module)
        finder.helpers.add(found.fn.name)
        var = "return" if index is None else f"return[{index}]"
        for ret in returns(found.fn):
            if getattr(ret, "_ks_dead", False) or ret.value is None:
                continue
            value = ret.value if index is None else _item(ret.value, index)
            if value is None:
                self.note(f"{shown}() returns `{ast.unparse(ret.value)}`, whose item {index} is not told")
            elif isinstance(value, ast.Name):
                finder._resolve(value.id, kind, names | {value.id}, kernel, seen, found.fn.name)
            else:
                finder._values(var, found.fn.name, [value], kind, names, kernel, seen)
        if finder is not self:
            self._adopt(finder, f"{found.module.name}.{found.fn.name}")

    def _adopt(self, probe, where: str) -> None:
        """What a probe of another module found: literals choosing the value there, and what not followed."""
        self.notes.extend(probe.notes)
        if probe.found or probe.exprs:
            self.trace.foreign.append(where)

    def _unbound(self, var: str, kind, names, kernel, seen, scope) -> None:
        """A name no assignment binds in `scope` or at module level: a parameter, an import, else unknown."""
        fn = self.funcs.get(scope) if scope is not None else None
        a = fn.args if fn is not None else None
        if a is not None and var in [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]:
            self._param(fn, var, kind, names, kernel, seen)
        elif var in self.module.imports:
            dotted, attr = self.module.imports[var]
            mod = self.sources.module(dotted) if attr is not None else None
            if isinstance(mod, Module):
                probe = self._probe(mod)
                probe._resolve(attr, kind, names, kernel, seen, None)
                self._adopt(probe, f"{dotted}.{attr}")
            elif isinstance(mod, str) and self._ours(dotted):
                self.note(f"{var} is imported from {dotted}, which cannot be read: {mod}")
        else:
            self.note(f"{var} is not assigned in {scope or 'the module'} nor at module level")

    def _ours(self, dotted: str) -> bool:
        """A module of the repository (its package's top name), not a library it uses."""
        return not self.sources.package or dotted.split(".")[0] == self.sources.package[0]

    def _param(self, fn: ast.FunctionDef, var: str, kind, names, kernel, seen) -> None:
        """A parameter's values: the arguments the calls of `fn` in this file pass (traced where they
        are made), and its default where a call leaves it out."""
        if (fn.name, f"param {var}") in seen:
            return
        seen.add((fn.name, f"param {var}"))
        a = fn.args
        positional = [p.arg for p in a.posonlyargs + a.args]
        index = positional.index(var) if var in positional else None
        calls = self.calls_to.get(fn.name, [])
        if not calls:
            self.note(f"{var} is a parameter of {fn.name}, which no function of this file calls: its "
                      "caller chooses it")
            return
        omitted = False
        for call, caller in calls:
            arg = next((k.value for k in call.keywords if k.arg == var), None)
            starred = any(isinstance(x, ast.Starred) for x in call.args) or any(
                k.arg is None for k in call.keywords)
            if arg is None and index is not None and index < len(call.args) and not any(
                    isinstance(x, ast.Starred) for x in call.args[: index + 1]):
                arg = call.args[index]
            if arg is None and starred:
                self.note(f"{var}: {fn.name} is called with *args or **kwargs in {caller or 'the module'}")
            elif arg is None:
                omitted = True
            elif isinstance(arg, ast.Name):
                self._resolve(arg.id, kind, names | {arg.id}, kernel, seen, caller)
            else:
                self._values(f"{fn.name}.{var}", caller, [arg], kind, names, kernel, seen)
        default = _default(fn, var)
        if omitted and default is not None:
            self._values(var, fn.name, [default], kind, names, kernel, seen)
