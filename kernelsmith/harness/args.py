"""What each argument of an entry is, for `harness new`: a tensor, a constant (float, int, bool,
string), a shape field (an int that sizes something) or left at the entry's default (an enum
member or another expression the harness cannot name). Read from the syntax tree only: a None
default stays None, then the annotation, the default, how the body uses the name, the name itself;
a tensor only where one of them says tensor, or nothing says anything else."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

# Attributes and methods that only a tensor (or array) has: using one says "tensor".
TENSOR_ATTRS = {
    "shape", "stride", "numel", "dtype", "device", "contiguous", "is_contiguous", "view", "reshape",
    "size", "dim", "ndim", "data_ptr", "element_size", "new_empty", "new_zeros", "new_ones", "clone",
    "unsqueeze", "squeeze", "flatten", "transpose", "permute", "expand", "T", "float", "half", "to",
    "copy_", "zero_", "fill_", "view_as", "reshape_as", "is_cuda", "storage_offset", "detach", "long", "int",
    "bool",
}
FLOAT_NAME = re.compile(r"(eps|epsilon|.*_eps|.*_epsilon|alpha|beta|.*scale|softcap|.*_softcap|temperature|"
                        r"p|.*_p|dropout.*|label_smoothing|momentum|offset|threshold|lambd|.*factor|theta|"
                        r".*_theta|.*_weight_decay|weight_decay|lr|min_p|top_p|clip.*)\Z")
SIZE_NAME = re.compile(r"(?!block)(n|n_.+|num_.+|.+_size|.+_len|.+_length|seq_len|.+_dim|head_dim|hidden|"
                       r"hidden_.+|max_.+|batch|tokens|rows|cols)\Z")
INT_NAME = re.compile(r"(dim|axis|k|top_k|ignore_index|rank|world_size|seed|.+_idx|.+_index|stride.*|"
                      r"block.*|group.*|.+_id|step|layer.*)\Z", re.I)
BOOL_NAME = re.compile(r"(is_.+|has_.+|use_.+|enable_.+|.+_flag|inplace|in_place|causal|training|"
                       r"return_.+|trans.*|reverse|normalize.*|.+_first|interleaved|neox.*)\Z")
STR_NAME = re.compile(r"(.*mode|reduction|activation|act|act_type|impl|backend|kind|layout|.+_type|"
                      r".+_method|method|format|.+_format)\Z")
INT_VALUES = {"dim": "-1", "axis": "-1", "ignore_index": "-100"}
SIZE_VALUES = (4096, 64)  # GPU, CPU


@dataclass
class Arg:
    """One argument as the skeleton passes it."""

    name: str
    kind: str       # tensor | float | int | size | bool | str | none | dtype | default | object
    value: str      # Python text of the constant (a size's CPU value; a default's text)
    why: str        # the evidence, for the skeleton's comment
    gpu: str = ""   # a size's GPU value


def _base_annotation(ann: str) -> str:
    """`Optional[float]`, `float | None`, `"float"` -> `float`."""
    ann = ann.strip("'\"")
    m = re.fullmatch(r"(?:typing\.)?Optional\[(.+)\]", ann)
    ann = m.group(1) if m else ann
    parts = [p.strip() for p in ann.split("|") if p.strip() != "None"]
    return parts[0] if len(parts) == 1 else ann


def _uses(fn: ast.AST) -> tuple[set[str], dict[str, list]]:
    """Names the body uses as tensors, and for each name the constants it is compared with."""
    tensors: set[str] = set()
    compared: dict[str, list] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr in TENSOR_ATTRS:
            tensors.add(node.value.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr.endswith("_like") and node.args and isinstance(node.args[0], ast.Name):
            tensors.add(node.args[0].id)  # torch.empty_like(x)
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            names = [s.id for s in sides if isinstance(s, ast.Name)]
            consts = [s.value for s in sides if isinstance(s, ast.Constant) and s.value is not None]
            for s in sides:
                if isinstance(s, (ast.Tuple, ast.List, ast.Set)):
                    consts += [e.value for e in s.elts if isinstance(e, ast.Constant) and e.value is not None]
            for n in names:
                compared.setdefault(n, []).extend(consts)
    return tensors, compared


def _literal(name: str, value, why: str) -> Arg | None:
    """A constant (or a shape field, for a size) from a literal value; None for other values."""
    if isinstance(value, bool):
        return Arg(name, "bool", repr(value), why)
    if isinstance(value, int):
        if SIZE_NAME.match(name):
            return Arg(name, "size", repr(value), why + "; a size: a shape field", gpu=repr(value))
        return Arg(name, "int", repr(value), why)
    if isinstance(value, float):
        return Arg(name, "float", repr(value), why)
    if isinstance(value, str):
        return Arg(name, "str", json.dumps(value), why)
    return None


def _size(name: str, why: str) -> Arg:
    return Arg(name, "size", str(SIZE_VALUES[1]), why, gpu=str(SIZE_VALUES[0]))


def _a(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def _eval(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError):
        return NotImplemented


def _by_name(name: str, compared: list) -> Arg | None:
    strings = [c for c in compared if isinstance(c, str)]
    if strings:
        return Arg(name, "str", json.dumps(strings[0]), "a string: one the entry compares it with")
    if BOOL_NAME.match(name):
        return Arg(name, "bool", "False", "a flag, by its name")
    if FLOAT_NAME.match(name):
        value = "1e-06" if "eps" in name else "0.0" if name == "offset" else "1.0"
        return Arg(name, "float", value, "a float, by its name (TODO: a value the entry accepts)")
    if SIZE_NAME.match(name):
        return _size(name, "a size, by its name: a shape field")
    if INT_NAME.match(name):
        return Arg(name, "int", INT_VALUES.get(name, "1"), "an integer, by its name")
    if STR_NAME.match(name):
        return Arg(name, "str", '""', "a string, by its name (TODO: a value the entry accepts)")
    return None


def classify(fn: ast.FunctionDef | ast.AsyncFunctionDef,
             args: list[tuple[str, str | None, str | None]]) -> list[Arg]:
    """Each of `args` (name, annotation, default text) of the entry `fn`, classified."""
    tensors, compared = _uses(fn)
    out = []
    for name, ann, default in args:
        out.append(_one(name, ann, default, name in tensors, compared.get(name, [])))
    return out


def _one(name: str, ann: str | None, default: str | None, used_as_tensor: bool, compared: list) -> Arg:
    base = _base_annotation(ann) if ann is not None else None
    if default == "None":  # `scale: float = None`: the entry computes its own (1/sqrt(d), say)
        if used_as_tensor or (ann is not None and "Tensor" in ann):
            return Arg(name, "none", "None",
                       "an optional tensor, None: the entry's default (TODO: a tensor here tests that path)")
        typed = base in ("float", "int", "bool", "str")
        more = f" (TODO: {_a(base)} here tests the other path)" if typed else ""
        return Arg(name, "none", "None", "None: the entry's default" + more)
    if ann is not None and "Tensor" in ann:
        return Arg(name, "tensor", "", "annotated a tensor")
    if base is not None:
        m = re.fullmatch(r"(?:typing\.)?Literal\[(.+)\]", base)
        values = _eval(f"({m.group(1)},)") if m else NotImplemented
        if values is not NotImplemented:
            got = _literal(name, values[0], "the first value of its Literal")
            if got is not None:
                return got
        if base in ("torch.dtype", "dtype"):
            return Arg(name, "dtype", "dtype", "a dtype: the shape's")
    if base in ("float", "int", "bool", "str"):
        got = _literal(name, _eval(default), f"{_a(base)}: its default") if default is not None else None
        if got is not None:
            return got
        if base == "int" and SIZE_NAME.match(name):
            return _size(name, "an int that sizes something: a shape field")
        guess = _by_name(name, compared)
        if guess is not None and guess.kind == base:
            return guess
        value = {"float": "1.0", "int": "1", "bool": "False", "str": '""'}[base]
        return Arg(name, base, value, f"annotated {base} (TODO: a value the entry accepts)")
    if default is not None:
        got = _literal(name, _eval(default), "its default")
        if got is not None:
            return got
        # An enum member or another expression of the kernel's module: the entry's own default.
        return Arg(name, "default", default, f"left at the entry's default, {default}")
    if used_as_tensor:
        return Arg(name, "tensor", "", "used as a tensor")
    if ann is not None:  # a class the harness cannot name without importing the target's module
        return Arg(name, "object", "None", f"a {ann} (TODO: a value of that type)")
    guess = _by_name(name, compared)
    return guess if guess is not None else Arg(name, "tensor", "", "nothing says otherwise")
