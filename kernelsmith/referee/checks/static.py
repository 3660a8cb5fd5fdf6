"""Static (AST) checks of a candidate's source: known reward-hack constructs the base does not use.

These complement the run-time monitor: a construct is flagged only when the candidate uses it and
the base file does not (a base that legitimately uses streams or numpy is not penalised).
"""

from __future__ import annotations

import ast
import functools

from kernelsmith.pysource import entry_def, entry_parts, parse

# (violation, description) by dotted-name prefix of a referenced name or attribute chain.
_NAME_RULES: list[tuple[str, str, str]] = [
    ("torch.compile", "library_fallback", "torch.compile"),
    ("torch._dynamo", "library_fallback", "torch._dynamo"),
    ("torch._inductor", "library_fallback", "torch._inductor"),
    ("torch.jit", "library_fallback", "torch.jit"),
    ("torch.utils.cpp_extension", "library_fallback", "inline C++/CUDA extension"),
    ("load_inline", "library_fallback", "inline C++/CUDA extension"),
    ("torch.ops", "library_fallback", "torch.ops custom/library operator"),
    ("torch.backends", "precision_downgrade", "torch.backends precision/algorithm switches"),
    ("torch.set_float32_matmul_precision", "precision_downgrade", "matmul precision switch"),
    ("torch.set_flush_denormal", "precision_downgrade", "flush-to-zero for denormals"),
    # Process-global settings: left changed, they reach every later candidate and the base.
    ("torch.set_default_dtype", "monkeypatch", "changes torch's default dtype"),
    ("torch.set_default_tensor_type", "monkeypatch", "changes torch's default tensor type"),
    ("torch.set_default_device", "monkeypatch", "changes torch's default device"),
    ("torch.use_deterministic_algorithms", "monkeypatch", "changes torch's determinism setting"),
    ("torch.set_deterministic_debug_mode", "monkeypatch", "changes torch's determinism setting"),
    ("torch.set_num_threads", "monkeypatch", "changes torch's thread count"),
    ("torch.set_num_interop_threads", "monkeypatch", "changes torch's thread count"),
    ("os.putenv", "monkeypatch", "writes the process environment"),
    ("os.unsetenv", "monkeypatch", "writes the process environment"),
    ("triton.knobs.setenv", "monkeypatch", "writes the process environment"),
    ("triton.knobs.refresh_knobs", "monkeypatch", "changes triton.knobs"),
    ("cupy", "library_fallback", "cupy"), ("numba", "library_fallback", "numba"),
    ("ctypes", "library_fallback", "ctypes"), ("cffi", "library_fallback", "cffi"),
    ("jax", "library_fallback", "jax"), ("tensorflow", "library_fallback", "tensorflow"),
    ("scipy", "library_fallback", "scipy"),
    ("torch.cuda.Stream", "extra_streams", "torch.cuda.Stream"),
    ("torch.cuda.stream", "extra_streams", "torch.cuda.stream"),
    ("torch.cuda.ExternalStream", "extra_streams", "torch.cuda.ExternalStream"),
    ("torch.cuda.set_stream", "extra_streams", "torch.cuda.set_stream"),
    ("torch.Stream", "extra_streams", "torch.Stream"),
    ("threading", "extra_threads", "threading"), ("_thread", "extra_threads", "_thread"),
    ("concurrent", "extra_threads", "concurrent.futures"),
    ("multiprocessing", "extra_threads", "multiprocessing"), ("subprocess", "extra_threads", "subprocess"),
    ("asyncio", "extra_threads", "asyncio"), ("os.fork", "extra_threads", "os.fork"),
    ("os.system", "extra_threads", "os.system"), ("os.popen", "extra_threads", "os.popen"),
    ("socket", "network_access", "socket"), ("urllib", "network_access", "urllib"),
    ("http", "network_access", "http"), ("requests", "network_access", "requests"),
    ("httpx", "network_access", "httpx"),
    ("torch.save", "file_access", "torch.save"), ("torch.load", "file_access", "torch.load"),
    ("pickle", "file_access", "pickle"), ("shelve", "file_access", "shelve"),
    ("tempfile", "file_access", "tempfile"), ("open", "file_access", "open()"),
    ("numpy.save", "file_access", "numpy.save"), ("numpy.load", "file_access", "numpy.load"),
    ("kernelsmith", "reference_call", "imports the referee"),
    ("sys._getframe", "reference_call", "stack-frame inspection"),
    ("inspect.currentframe", "reference_call", "stack-frame inspection"),
    ("inspect.stack", "reference_call", "stack-frame inspection"),
    ("gc", "reference_call", "garbage-collector object walk"),
    ("sys.modules", "reference_call", "reaches other modules through sys.modules"),
    ("sys.settrace", "monkeypatch", "sys.settrace"), ("sys.setprofile", "monkeypatch", "sys.setprofile"),
    ("sys.addaudithook", "monkeypatch", "audit hook"), ("builtins", "monkeypatch", "builtins"),
    ("importlib.reload", "monkeypatch", "importlib.reload"),
    ("torch.utils._python_dispatch", "monkeypatch", "torch dispatch internals"),
    ("torch._C", "monkeypatch", "torch._C internals"),
    ("torch.Tensor._make_subclass", "tensor_subclass", "_make_subclass"),
    ("torch.Tensor._make_wrapper_subclass", "tensor_subclass", "_make_wrapper_subclass"),
]
_ATTR_RULES = {
    "f_back": ("reference_call", "stack-frame inspection"),
    "f_locals": ("reference_call", "stack-frame inspection"),
    "f_globals": ("reference_call", "stack-frame inspection"),
    "__torch_function__": ("tensor_subclass", "__torch_function__ override"),
    "__torch_dispatch__": ("tensor_subclass", "__torch_dispatch__ override"),
    "_make_subclass": ("tensor_subclass", "_make_subclass"),
    "_make_wrapper_subclass": ("tensor_subclass", "_make_wrapper_subclass"),
}
# Modules a kernel file imports that the referee watches for attribute assignment (patching).
_PATCHABLE = ("torch", "triton", "time", "numpy", "builtins", "sys", "os", "gc", "threading")
# torch compute calls that make a try/except handler a library fallback.
_TORCH_PREFIXES = ("torch.", "F.", "torch.nn.functional.")
_ALLOC_PREFIXES = ("torch.empty", "torch.zeros", "torch.cuda")
_ENVIRON = ("os.environ", "os.environb")
_MAPPING_WRITES = ("update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__")
# triton.knobs hook chains (launch_enter_hook.add(...)) and groups (compilation.reset()).
_KNOB_WRITES = ("add", "remove", "reset")


class _Visitor(ast.NodeVisitor):
    def __init__(self):
        self.aliases: dict[str, str] = {}
        self.features: dict[str, tuple[str, str]] = {}

    def add(self, key: str, violation: str, why: str) -> None:
        self.features.setdefault(key, (violation, why))

    def visit_Import(self, node):
        for a in node.names:
            self.aliases[(a.asname or a.name).split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            self._name(a.name)

    def visit_ImportFrom(self, node):
        mod = node.module or ""
        if node.level:
            return  # relative imports stay inside the target package
        for a in node.names:
            full = f"{mod}.{a.name}" if mod else a.name
            self.aliases[a.asname or a.name] = full
            self._name(full)

    def _dotted(self, node) -> str | None:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        head = self.aliases.get(node.id, node.id)
        return ".".join([head, *reversed(parts)])

    def _name(self, dotted: str) -> None:
        if dotted.startswith("np."):
            dotted = "numpy." + dotted[3:]
        for prefix, violation, why in _NAME_RULES:
            if dotted == prefix or dotted.startswith(prefix + "."):
                self.add(f"name:{prefix}", violation, why)

    def visit_Attribute(self, node):
        if node.attr in _ATTR_RULES:
            self.add(f"attr:{node.attr}", *_ATTR_RULES[node.attr])
        dotted = self._dotted(node)
        if dotted:
            self._name(dotted)
            if isinstance(node.ctx, (ast.Store, ast.Del)) and dotted.split(".")[0] in _PATCHABLE:
                self.add(f"patch:{dotted}", "monkeypatch", f"assigns {dotted}")
        self.generic_visit(node)

    def visit_Name(self, node):
        if node.id in ("open", "__import__", "exec", "eval"):
            if node.id == "open":
                self.add("name:open", "file_access", "open()")
        else:
            self._name(self.aliases.get(node.id, node.id))

    def visit_Subscript(self, node):
        target = self._dotted(node.value) if isinstance(node.value, (ast.Attribute, ast.Name)) else None
        if target in _ENVIRON and isinstance(node.ctx, (ast.Store, ast.Del)):
            self.add("env-write", "monkeypatch", "writes the process environment")
        self.generic_visit(node)

    def visit_Call(self, node):
        fn = self._dotted(node.func) if isinstance(node.func, (ast.Attribute, ast.Name)) else None
        owner, _, method = (fn or "").rpartition(".")
        if owner in _ENVIRON and method in _MAPPING_WRITES:
            self.add("env-write", "monkeypatch", "writes the process environment")
        if owner.startswith("triton.knobs.") and method in _KNOB_WRITES:
            self.add(f"patch:{fn}", "monkeypatch", f"changes triton.knobs ({fn})")
        if fn in ("setattr", "delattr") and node.args:
            first = node.args[0]
            target = self._dotted(first) if isinstance(first, (ast.Attribute, ast.Name)) else None
            if target and target.split(".")[0] in _PATCHABLE:
                self.add(f"patch:{target}", "monkeypatch", f"setattr on {target}")
        self.generic_visit(node)

    def visit_ClassDef(self, node):
        for base in node.bases:
            dotted = self._dotted(base) if isinstance(base, (ast.Attribute, ast.Name)) else None
            if dotted in ("torch.Tensor", "torch.nn.Parameter"):
                self.add("subclass:Tensor", "tensor_subclass", f"class {node.name} subclasses {dotted}")
        self.generic_visit(node)

    def visit_Try(self, node):
        for handler in node.handlers:
            for sub in ast.walk(handler):
                if isinstance(sub, ast.Call):
                    fn = self._dotted(sub.func) if isinstance(sub.func, (ast.Attribute, ast.Name)) else None
                    if fn and fn.startswith(_TORCH_PREFIXES) and not fn.startswith(_ALLOC_PREFIXES):
                        self.add("try_fallback", "library_fallback",
                                 f"an except-handler computes with {fn} (try/except fallback)")
        self.generic_visit(node)

    visit_TryStar = visit_Try


def features(code: str) -> dict[str, tuple[str, str]]:
    """key -> (violation, description) for every flagged construct in `code` (SyntaxError propagates)."""
    v = _Visitor()
    v.visit(parse(code))
    return v.features


@functools.lru_cache(maxsize=4)
def _base_features(base_code: str) -> dict[str, tuple[str, str]]:
    """`features` of the base, parsed once per worker (read only: never changed by a caller)."""
    return features(base_code)


@functools.lru_cache(maxsize=4)
def _base_dump(base_code: str) -> str:
    return ast.dump(parse(base_code))


def static_violations(code: str, base_code: str) -> list[tuple[str, str]]:
    """(violation, message) for constructs the candidate uses and the base does not."""
    cand = features(code)
    try:
        base = _base_features(base_code)
    except SyntaxError:
        base = {}
    found = {(viol, f"static check: {why}") for key, (viol, why) in cand.items() if key not in base}
    return sorted(found)


def defines(code: str, name: str) -> bool:
    """Whether module-level code defines `name` (def, class, assignment or import); for a dotted
    entry (`Class.method`, `Function.apply`), its first name, and where that is a class of this
    module, the def the entry runs."""
    tree = parse(code)
    if "." in name:
        first = entry_parts(name)[0]
        own = any(isinstance(n, ast.ClassDef) and n.name == first for n in tree.body)
        return _defines(tree, first) and (not own or entry_def(tree, name) is not None)
    return _defines(tree, name)


def _defines(tree: ast.Module, name: str) -> bool:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(t)):
                    return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                return True
    return False


def same_program(code: str, base_code: str) -> bool:
    """Whether the candidate's AST equals the base's (only comments/whitespace changed)."""
    try:
        return ast.dump(parse(code)) == _base_dump(base_code)
    except SyntaxError:
        return False
