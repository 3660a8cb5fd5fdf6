"""KernelBench problem files: a PyTorch `Model`, `get_inputs()` and `get_init_inputs()`.

A problem's sizes are its module-level numeric constants (`batch_size = 16`, `dim = 16384`); they
are the task's shape. Two optional names, absent from upstream KernelBench files, serve small
problems shipped for tests: `CPU_SIZES` (a dict of smaller sizes for the Triton interpreter) and
`VARY` (size names the referee may redraw to catch shape specialisation, as a harness's VARY).
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field
from pathlib import Path

from kernelsmith.errors import ConfigError
from kernelsmith.pysource import parse

REQUIRED = ("Model", "get_inputs", "get_init_inputs")
DTYPES = ("float32", "float16", "bfloat16")
_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow, ast.Mod: operator.mod,
}


@dataclass
class Problem:
    """One KernelBench problem file, validated without running it."""

    name: str
    path: Path
    source: str
    sizes: dict[str, int | float]
    cpu_sizes: dict[str, int | float] = field(default_factory=dict)
    vary: dict[str, list] = field(default_factory=dict)

    def shape(self, device: str, dtype: str = "float32") -> dict:
        """The task's shape on `device`: the problem's sizes (CPU_SIZES under the interpreter)."""
        sizes = dict(self.sizes)
        if device != "cuda":
            sizes.update(self.cpu_sizes)
        return {**sizes, "dtype": dtype}


def _const(node: ast.AST, names: dict):
    """Evaluate a constant size expression: numbers, earlier sizes and + - * / // ** %."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
            and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_const(node.operand, names)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_const(node.left, names), _const(node.right, names))
    raise ValueError("not a constant size")


def _literal_dict(node: ast.AST, path: Path, name: str) -> dict:
    try:
        value = ast.literal_eval(node)
    except ValueError:
        raise ConfigError(path, "must be a literal dict", name) from None
    if not isinstance(value, dict):
        raise ConfigError(path, f"must be a dict, got {type(value).__name__}", name)
    return value


def read_problem(path: str | Path) -> Problem:
    """Parse and validate a KernelBench problem file; mistakes are ConfigErrors naming the field."""
    path = Path(path).resolve()
    try:
        source = path.read_text()
    except OSError as e:
        raise ConfigError(path, f"cannot read: {e}") from None
    try:
        tree = parse(source, str(path))
    except SyntaxError as e:
        raise ConfigError(path, f"syntax error at line {e.lineno}: {e.msg}") from None
    defined: dict[str, ast.AST] = {}
    sizes: dict[str, int | float] = {}
    extras: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            defined[node.name] = node
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            target = node.targets[0].id
            if target in ("CPU_SIZES", "VARY"):
                extras[target] = node.value
                continue
            try:
                sizes[target] = _const(node.value, sizes)
            except (ValueError, ZeroDivisionError):
                pass  # not a size (a list, a string, a call): left to the problem's own code
    for name in REQUIRED:
        if name not in defined:
            kind = "class" if name == "Model" else "function"
            raise ConfigError(path, f"missing: a KernelBench problem defines {kind} {name}", name)
    if not isinstance(defined["Model"], ast.ClassDef):
        raise ConfigError(path, "must be a class (an nn.Module)", "Model")
    cpu_sizes = _literal_dict(extras["CPU_SIZES"], path, "CPU_SIZES") if "CPU_SIZES" in extras else {}
    vary = _literal_dict(extras["VARY"], path, "VARY") if "VARY" in extras else {}
    for key, value in cpu_sizes.items():
        if key not in sizes:
            raise ConfigError(path, f"{key!r} is not a module-level size of this problem", f"CPU_SIZES.{key}")
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ConfigError(path, "must be a number", f"CPU_SIZES.{key}")
    for key, values in vary.items():
        if key not in sizes:
            raise ConfigError(path, f"{key!r} is not a module-level size of this problem", f"VARY.{key}")
        if not isinstance(values, (list, tuple)) or not values:
            raise ConfigError(path, "must be a non-empty list of values", f"VARY.{key}")
    return Problem(name=path.stem, path=path, source=source, sizes=sizes, cpu_sizes=cpu_sizes,
                   vary={k: list(v) for k, v in vary.items()})


def list_problems(folder: str | Path) -> list[Problem]:
    """Every problem file in `folder` (files starting with `_` skipped), sorted by KernelBench id."""
    folder = Path(folder).resolve()
    if not folder.is_dir():
        raise ConfigError(folder, "tasks folder not found", "TASKS_DIR")
    files = [p for p in folder.glob("*.py") if not p.name.startswith("_")]
    if not files:
        raise ConfigError(folder, "no KernelBench problem files (*.py) in this folder", "TASKS_DIR")
    return [read_problem(p) for p in sorted(files, key=_problem_order)]


def _problem_order(path: Path):
    head = path.stem.split("_", 1)[0]
    return (0, int(head), path.stem) if head.isdigit() else (1, 0, path.stem)
