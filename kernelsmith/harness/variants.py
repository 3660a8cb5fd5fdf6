"""Harness variants: the same harness under other shape mixes, declared as data in the harness.

    VARIANTS = {"peaked": {"shapes": [...], "cpu_shapes": [...]}}

`OP@peaked` runs the operator with those shapes in place of SHAPES and CPU_SHAPES; make_inputs,
reference and every other field stay the harness's. A mix that needs other inputs says so in a
shape field its make_inputs reads. The parent reads VARIANTS from the syntax tree (harness/static.py)
and the sandboxed children from the imported module (harness/model.py), both through this module.
"""

from __future__ import annotations

import re
from pathlib import Path

from kernelsmith.errors import ConfigError

FIELD = "VARIANTS"
KEYS = ("shapes", "cpu_shapes")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\Z")


def shape_list(value, path: Path, field: str, required: bool) -> list[dict]:
    """`value` as a list of shape dicts; ConfigError naming `field` when it is not one (or is
    missing and `required`)."""
    if value is None:
        if required:
            raise ConfigError(path, "missing (a list of shape dicts)", field)
        return []
    if not isinstance(value, (list, tuple)) or not value:
        raise ConfigError(path, "must be a non-empty list of shape dicts", field)
    for i, s in enumerate(value):
        if not isinstance(s, dict):
            raise ConfigError(path, f"must be a dict, got {type(s).__name__}", f"{field}[{i}]")
    return [dict(s) for s in value]


def parse_variants(value, path: Path) -> dict[str, tuple[list[dict], list[dict]]]:
    """A harness's VARIANTS (None: none) as name -> (shapes, cpu_shapes), every mistake a
    ConfigError naming the harness file and the field."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(path, "must map a variant name to {shapes, cpu_shapes}", FIELD)
    out = {}
    for name, spec in value.items():
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise ConfigError(path, f"{name!r} is not a valid variant name (letters, digits, _ . -)", FIELD)
        where = f"{FIELD}.{name}"
        if not isinstance(spec, dict):
            raise ConfigError(path, "must be a mapping {shapes, cpu_shapes}", where)
        unknown = sorted(str(k) for k in set(spec) - set(KEYS))
        if unknown:
            raise ConfigError(path, f"unknown field(s) {', '.join(unknown)} (known: {', '.join(KEYS)})",
                              f"{where}.{unknown[0]}")
        out[name] = (shape_list(spec.get("shapes"), path, f"{where}.shapes", True),
                     shape_list(spec.get("cpu_shapes"), path, f"{where}.cpu_shapes", False))
    return out


def variant_shapes(variants: dict[str, tuple[list[dict], list[dict]]], name: str,
                   path: Path) -> tuple[list[dict], list[dict]]:
    """(shapes, cpu_shapes) of variant `name` of parsed VARIANTS; ConfigError listing the known ones."""
    if name not in variants:
        known = ", ".join(sorted(variants)) or "none"
        raise ConfigError(path, f"no variant {name!r} (known: {known})", FIELD)
    return variants[name]
