"""`kernelsmith harness new`: a harness skeleton written from the entry function's signature.

The signature is read from the syntax tree (no target code runs). Tensor arguments get the rank,
shape fields and element type the code that uses them says (harness/tensors.py, handoff.py:
`B, H, S, D = q.shape` makes four fields; an index tensor is drawn with torch.randint below the
size it indexes); floats, ints, bools, strings become constants, ints that size something shape
fields, None and enum defaults stay the entry's (harness/args.py); `make_inputs` is seeded;
`reference` raises NotImplementedError with a TODO that `harness check` reports as "reference not
written".
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from kernelsmith.errors import ConfigError
from kernelsmith.harness.args import classify
from kernelsmith.harness.handoff import SameFile, tensor_uses
from kernelsmith.harness.tensors import by_name
from kernelsmith.pysource import entry_def, parse


def entry_arguments(source: str, entry: str, where: str) -> list[tuple[str, str | None, str | None]]:
    """(name, annotation, default) for each argument the (dotted) entry takes from the harness."""
    return _arguments(entry_function(source, entry, where), entry)


def entry_function(source: str, entry: str, where: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """The def the (dotted) entry runs in `source` (pysource.entry_def: a top-level function, a
    method, an autograd Function's `forward` for `.apply`); ConfigError naming `where` when absent."""
    try:
        tree = parse(source)
    except SyntaxError as e:
        raise ConfigError(where, f"does not parse: {e.msg} (line {e.lineno})") from None
    node = entry_def(tree, entry)
    if node is None:
        what = "function or method" if "." in entry else "top-level function"
        raise ConfigError(where, f"no {what} {entry!r}", "entry")
    return node


def _bound_first(node, entry: str) -> bool:
    """Whether the def's first parameter is not the harness's to give: `ctx` of an autograd
    Function's `forward` (for `.apply`), `self`/`cls` of a method that is not a staticmethod."""
    if "." not in entry:
        return False
    if entry.endswith(".apply") and node.name == "forward":
        return True
    return not any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)


def _arguments(node, entry: str = "") -> list[tuple[str, str | None, str | None]]:
    args = node.args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = list(zip(positional, defaults, strict=True))
    if pairs and _bound_first(node, entry):
        pairs = pairs[1:]
    pairs += list(zip(args.kwonlyargs, args.kw_defaults, strict=True))
    return [(a.arg, ast.unparse(a.annotation) if a.annotation is not None else None,
             ast.unparse(d) if d is not None else None) for a, d in pairs if a.arg != "self"]


def returned_tuple(node) -> list[str] | None:
    """The items of the tuple the def returns (its last `return` of a tuple, nested defs aside),
    as source text, or None when it returns no tuple literal."""
    found = None
    todo = list(node.body)
    while todo:
        n = todo.pop(0)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple):
            found = [ast.unparse(e) for e in n.value.elts]
        todo.extend(ast.iter_child_nodes(n))
    return found


def skeleton(repo: str, file: str, entry: str, args: list[tuple[str, str | None, str | None]],
             fn: ast.FunctionDef | ast.AsyncFunctionDef | None = None,
             reach=None) -> str:
    """The text of a harness module for `entry(args)`; `fn`, the entry's syntax tree, lets its
    body say which arguments are tensors, of what rank and element type, and which strings it
    compares with; `reach` (harness.handoff's) lets the functions and kernels it hands tensors to
    say it too."""
    fn = fn if fn is not None else parse("def f(): pass").body[0]
    kinds = classify(fn, args)
    sizes = [a for a in kinds if a.kind == "size"]
    gpu = {a.name: int(a.gpu) for a in sizes}
    cpu = {a.name: int(a.value) for a in sizes}
    plans = _tensor_plans(fn, reach, [a.name for a in kinds if a.kind == "tensor"],
                          {"dtype"} | {a.name for a in kinds if a.kind != "size"}, gpu, cpu)
    first = plans[0] if plans else None
    vary = f"VARY = {{{_q(first.fields[0])}: {[1, 7, 333] if len(first.fields) <= 2 else [1, 3, 7]}}}" \
        if first else "VARY = {}  # TODO: sizes that vary"
    lines = [
        f'"""Harness for {repo}\'s {entry}({", ".join(a for a, _, _ in args)}) in {file}.',
        "",
        "Written by `kernelsmith harness new`: every TODO is yours. Then run `kernelsmith harness check`.",
        '"""',
        "",
        "import torch",
        "",
        "# GPU shapes: the fields size the inputs in make_inputs (TODO: real sizes, several cases).",
        f"SHAPES = [{_dict_text({**gpu, 'dtype': 'bfloat16'})}]",
        "# Interpreter shapes (CPU): tiny, float16/float32 only (the interpreter's bf16 math is wrong).",
        f"CPU_SHAPES = [{_dict_text({**cpu, 'dtype': 'float16'})},\n"
        f"              {_dict_text({**cpu, 'dtype': 'float32'})}]",
        *_outputs_comment(fn),
        "# an output it fills only partly (a cache written at some slots) also goes in INPLACE.",
        "OUTPUTS = None",
        "INPLACE = []",
        vary,
        "",
        "",
        "def make_inputs(shape: dict, device: str, seed: int) -> dict:",
        f'    """Keyword arguments for {entry} (TODO: the shapes and value ranges each argument needs)."""',
        "    g = torch.Generator(device=device).manual_seed(seed)",
        '    dtype = getattr(torch, shape["dtype"])',
    ]
    for t in plans:
        lines += t.lines()
    for a in kinds:
        if a.kind == "default":
            lines.append(f"    # {a.name}: {a.why} (add it below to test another value)")
    lines.append("    return {")
    for a in kinds:
        if a.kind == "tensor":
            lines.append(f'        "{a.name}": {a.name},')
        elif a.kind == "size":
            lines.append(f'        "{a.name}": shape["{a.name}"],  # {a.why}')
        elif a.kind != "default":
            lines.append(f'        "{a.name}": {a.value},  # {a.why}')
    lines.append("    }")
    # Arguments left at the entry's default come last, as keywords with a default of their own.
    params = ", ".join([a.name for a in kinds if a.kind != "default"]
                       + (["*"] if any(a.kind == "default" for a in kinds) else [])
                       + [f"{a.name}=None" for a in kinds if a.kind == "default"])
    moved = [t.bytes_term() for t in plans]
    lines += [
        "",
        "",
        f"def reference({params}):",
        '    """The expected output(s), computed independently of the kernel (float32 is fine: values',
        "    are compared after a cast; the output's dtype and shape are the base's).\"\"\"",
        '    raise NotImplementedError("TODO: write the reference")',
        "",
        "",
        "def bytes_moved(shape: dict) -> int:",
        '    """The fewest bytes the op must move (TODO: add the outputs it writes)."""',
        '    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8',
        "    return " + (" + ".join(moved) or "size"),
        "",
    ]
    return "\n".join(lines)


# Default sizes of a tensor's dimensions by its rank: about 16M elements on the GPU, a few hundred
# under the interpreter (16 rows where a kernel may tl.dot them).
GPU_DIMS = {1: [1 << 24], 2: [4096, 4096], 3: [32, 4096, 128], 4: [4, 32, 1024, 128]}
CPU_DIMS = {1: [192], 2: [3, 64], 3: [2, 3, 32], 4: [1, 2, 16, 32]}


@dataclass
class _TensorPlan:
    """How make_inputs makes one tensor argument: its shape fields, element type, value range."""

    name: str
    fields: list[str]
    dtype: str          # "" (the shape's dtype) | int32 | int64 | bool
    why: str
    high: str = ""      # the shape field bounding an integer tensor's values

    def lines(self) -> list[str]:
        dims = ", ".join(f'shape["{f}"]' for f in self.fields)
        dims = f"({dims},)" if len(self.fields) == 1 else f"({dims})"
        out = [f"    # {self.name}: {self.why}"]
        if not self.dtype:
            out.append(f"    {self.name} = torch.randn({dims}, generator=g, device=device).to(dtype)")
        elif self.dtype == "bool":
            out.append(f"    {self.name} = torch.randint(0, 2, {dims}, generator=g, device=device).bool()")
        else:
            out.append(f'    {self.name} = torch.randint(0, shape["{self.high}"], {dims}, generator=g, '
                       f"device=device, dtype=torch.{self.dtype})")
        return out

    def bytes_term(self) -> str:
        size = {"": "size", "bool": "1", "int32": "4", "int64": "8"}[self.dtype]
        return size + " * " + " * ".join(f'shape["{f}"]' for f in self.fields)


def _tensor_plans(fn, reach, tensors: list[str], taken: set[str], gpu: dict, cpu: dict) -> list[_TensorPlan]:
    """A plan per tensor argument, adding its shape fields (and index bounds) to `gpu` and `cpu`."""
    uses = tensor_uses(fn, tensors, reach)
    plans = []
    for t in tensors:
        u = uses[t]
        by_name(u)
        rank = u.rank or 2
        names = u.names(rank)
        fields = []
        for i, n in enumerate(names):
            default = (f"{t}_rows", f"{t}_cols")[i] if rank == 2 else f"{t}_dim{i}"
            f = n if n and n not in taken and n not in tensors else default
            dims_gpu = GPU_DIMS.get(rank, [2] * (rank - 4) + GPU_DIMS[4])
            dims_cpu = CPU_DIMS.get(rank, [1] * (rank - 4) + CPU_DIMS[4])
            gpu.setdefault(f, dims_gpu[i])
            cpu.setdefault(f, dims_cpu[i])
            fields.append(f)
        said = f"[{', '.join(fields)}]" + ("" if u.rank else " (TODO: nothing in the entry says its rank)")
        plans.append(_TensorPlan(t, fields, u.dtype, said))
    by = {p.name: p for p in plans}
    for p in plans:
        if p.dtype:
            p.why += f", {p.dtype}: {uses[p.name].dtype_why}"
        if p.dtype in ("int32", "int64"):
            p.high, why = _index_bound(uses[p.name], by, gpu)
            if not why:
                gpu.setdefault(p.high, 64)
                cpu.setdefault(p.high, 2)
                why = (f"TODO: nothing in the entry says what its values index; {p.high} bounds them: "
                       "set it to that size")
            p.why += f"; values in [0, {p.high}): {why}"
    return plans


def _index_bound(u, plans: dict, fields: dict) -> tuple[str, str]:
    """The shape field that bounds an index tensor's values and why, or (a new field's name, "")."""
    for bound, why in u.bounds:
        if bound[0] == "dim" and bound[1] in plans:
            dims = plans[bound[1]].fields
            if -len(dims) <= bound[2] < len(dims):
                return dims[bound[2]], why
        elif bound[0] == "name" and bound[1] in fields:
            return bound[1], why
    return f"{u.name}_high", ""


def _outputs_comment(fn) -> list[str]:
    """What OUTPUTS may say, with the positions of the tuple the entry returns where it returns one."""
    lines = []
    items = returned_tuple(fn) if fn is not None else None
    if items:
        listed = ", ".join(f"{i}: {text}" for i, text in enumerate(items))
        lines.append(f"# The entry returns a tuple ({listed[:300]}).")
    return lines + ["# None: the tensors the entry returns, in order (other returned values are left out).",
                    "# Else the names of inputs it writes, e.g. [\"out\"], or positions of the tuple it",
                    "# returns, e.g. (0, 2); or define call(entry, inputs) returning what to compare;"]


def _q(text: str) -> str:
    return f'"{text}"'


def _dict_text(d: dict) -> str:
    return "{" + ", ".join(f"{_q(k)}: {_q(v) if isinstance(v, str) else v}" for k, v in d.items()) + "}"


def write_skeleton(target, op_name: str, root: Path, reach_of=None) -> Path:
    """Write the skeleton to the path the operator's yaml entry names; never overwrite a file.
    `reach_of(code, tree)` gives the reach of calls out of the operator file (its own functions
    when None)."""
    op = target.operator(op_name)
    path = Path(op.harness)
    if path.exists():
        raise ConfigError(path, f"already exists: `harness new` never overwrites a harness ({op_name})")
    source = Path(root) / op.file
    if not source.is_file():
        raise ConfigError(target.path, f"{op.file} not found in checkout {root}", f"operators.{op_name}.file")
    text = source.read_text(errors="replace")
    fn = entry_function(text, op.entry, str(source))
    path.parent.mkdir(parents=True, exist_ok=True)
    tree = parse(text)
    reach = reach_of(text, tree) if reach_of is not None else SameFile(tree)
    path.write_text(skeleton(target.repo, op.file, op.entry, _arguments(fn, op.entry), fn, reach))
    return path
