"""A target's pinned release (the yaml's `package:` field): its spec, wheel folder and Python."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kernelsmith.errors import ConfigError

PYTHON = "3.11"  # the wheel's Python tag; fixed so every machine picks the same wheel
SPEC_RE = re.compile(r"^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)\Z")
_PY_RE = re.compile(r"^3\.[0-9]{1,2}\Z")


@dataclass(frozen=True)
class Package:
    """A pinned release: `spec` (name==version), the repository folder its wheel's top level sits
    in (`prefix`, e.g. `python` for SGLang), and the Python version its wheel is picked for."""

    spec: str
    prefix: str = ""
    python: str = PYTHON

    @property
    def name(self) -> str:
        """The distribution name."""
        return self.spec.split("==")[0]

    @property
    def version(self) -> str:
        """The pinned version."""
        return self.spec.split("==")[1]


def check_spec(spec: str, file: object, field: str) -> str:
    """`spec` if it pins one version (name==version), else a ConfigError naming file and field."""
    if not isinstance(spec, str) or not SPEC_RE.match(spec):
        raise ConfigError(file, f"{spec!r} must pin one release as name==version (e.g. lmdeploy==0.16.0)",
                          field)
    return spec


def parse_package(raw, path: Path) -> Package | None:
    """The yaml's `package:` field: a spec string, or a mapping {spec, prefix, python}."""
    if raw is None:
        return None
    if isinstance(raw, str):
        return Package(check_spec(raw, path, "package"))
    if not isinstance(raw, dict):
        raise ConfigError(path, f"must be name==version or a mapping, got {type(raw).__name__}", "package")
    unknown = sorted(set(raw) - {"spec", "prefix", "python"})
    if unknown:
        raise ConfigError(path, f"unknown field(s) {', '.join(unknown)}", f"package.{unknown[0]}")
    spec = check_spec(raw.get("spec"), path, "package.spec")
    prefix = raw.get("prefix") or ""
    if isinstance(prefix, str):
        prefix = prefix.strip("/")
    if not isinstance(prefix, str) or (prefix and not safe_name(prefix + "/x")):
        raise ConfigError(path, "must be a folder inside the repository", "package.prefix")
    python = str(raw.get("python") or PYTHON)
    if not _PY_RE.match(python):
        raise ConfigError(path, f"{python!r} is not a Python version such as 3.11", "package.python")
    return Package(spec, prefix, python)


def safe_name(name: str) -> bool:
    """A relative POSIX path with no `..`, no empty or dot parts and no backslash or NUL."""
    if not name or name.startswith("/") or "\\" in name or "\0" in name:
        return False
    parts = name.split("/")
    return all(p not in ("", ".", "..") for p in parts)
