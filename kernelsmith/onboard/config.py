"""Target files (`targets/<name>.yaml`, `.kernelsmith.yml`) parsed into typed dataclasses."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kernelsmith.errors import ConfigError
from kernelsmith.harness.static import harness_variants
from kernelsmith.harness.variants import variant_shapes
from kernelsmith.onboard.package import Package, parse_package
from kernelsmith.pysource import is_entry_name

DEFAULT_MIN_SPEEDUP = 1.05
DEFAULT_MAX_OPEN_PRS = 5
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
_REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+\Z")

_TARGET_KEYS = {
    "repo", "clone_url", "fork", "base", "setup", "labels", "operators", "checked", "stubs",
    "max_open_prs", "budget_minutes", "package",
}
_OPERATOR_KEYS = {"name", "file", "entry", "harness", "test", "benchmark", "min_speedup", "checked"}
VARIANT_SEP = "@"  # `OP@VARIANT` names an operator with the shapes of its harness's VARIANTS entry


@dataclass
class Operator:
    """One hotspot operator: the file a candidate rewrites, its entry function and its harness."""

    name: str
    file: str
    entry: str
    harness: Path
    test: str | None = None
    benchmark: str | None = None
    min_speedup: float = DEFAULT_MIN_SPEEDUP
    checked: str | None = None
    source: str = "yaml"
    # The harness's VARIANTS entry (another shape mix) this entry stands for: `Target.operator(
    # "OP@NAME")`; every process that loads the harness takes its shapes from there.
    variant: str | None = None


@dataclass
class Target:
    """A watched repository and its operators, as read from a target yaml."""

    path: Path
    repo: str
    base: str = "main"
    clone_url: str | None = None
    fork: str | None = None
    setup: str | None = None
    labels: list[str] = field(default_factory=list)
    operators: list[Operator] = field(default_factory=list)
    checked: str | None = None
    stubs: dict[str, Path] = field(default_factory=dict)
    max_open_prs: int = DEFAULT_MAX_OPEN_PRS
    budget_minutes: float | None = None
    # Operators the loader could not take, by name (or `operators[i]`): their error, raised when
    # one is named; the others are served all the same.
    broken: dict[str, ConfigError] = field(default_factory=dict)
    package: Package | None = None  # a pinned release to build a checkout from (onboard/release.py)

    @property
    def name(self) -> str:
        """The target's name: the yaml file's stem (used in branch names)."""
        return self.path.stem

    def has_operator(self, name: str) -> bool:
        """Whether `name` (or, for `OP@VARIANT`, its OP) is one of this file's operators."""
        base = name.partition(VARIANT_SEP)[0]
        return any(op.name == base for op in self.operators)

    def operator(self, name: str) -> Operator:
        """The operator called `name`, or a ConfigError listing the known ones. `OP@VARIANT` is OP
        with the shapes of its harness's variant VARIANT, under that name (run directories, state,
        reports)."""
        base, sep, variant = name.partition(VARIANT_SEP)
        for op in self.operators:
            if op.name == base:
                return op if not sep else _variant_of(op, variant)
        if base in self.broken:
            raise self.broken[base]
        known = ", ".join(o.name for o in self.operators) or "none"
        raise ConfigError(self.path, f"unknown operator {base!r} (known: {known})", "operators")

    def resolved_clone_url(self) -> str:
        """`clone_url` with a relative local path made absolute (relative to the yaml's folder)."""
        url = self.clone_url or f"https://github.com/{self.repo}.git"
        if "://" in url or url.startswith("git@"):
            return url
        p = Path(url)
        return str(p if p.is_absolute() else (self.path.parent / p).resolve())


def _variant_of(op: Operator, variant: str) -> Operator:
    """`op` named `OP@VARIANT`, standing for its harness's variant `variant`; a ConfigError naming
    the harness file and VARIANTS for an unknown one (read from its syntax tree, never run)."""
    variant_shapes(harness_variants(op.harness), variant, op.harness)
    return dataclasses.replace(op, name=f"{op.name}{VARIANT_SEP}{variant}", variant=variant)


def _require(data: dict, key: str, path: Path, where: str, kind: type | tuple = str):
    if key not in data or data[key] is None:
        raise ConfigError(path, "missing required field", f"{where}{key}")
    value = data[key]
    if not isinstance(value, kind):
        raise ConfigError(path, f"must be {_kind_name(kind)}, got {type(value).__name__}", f"{where}{key}")
    return value


def _optional(data: dict, key: str, path: Path, where: str, kind: type | tuple, default=None):
    value = data.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise ConfigError(path, f"must be {_kind_name(kind)}, got bool", f"{where}{key}")
    if not isinstance(value, kind):
        raise ConfigError(path, f"must be {_kind_name(kind)}, got {type(value).__name__}", f"{where}{key}")
    return value


def _kind_name(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "a mapping"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def read_yaml(path: Path) -> dict:
    """Parse a yaml file into a mapping, or raise ConfigError naming the file and line."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(path, "file not found") from None
    except OSError as e:
        raise ConfigError(path, f"cannot read: {e}") from None
    return parse_yaml(text, path)


def parse_yaml(text: str, path: Path) -> dict:
    """Parse yaml text (read from `path` or a git ref of it) into a mapping; errors name the line."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(path, f"invalid yaml{line}: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(path, f"top level must be a mapping, got {type(data).__name__}")
    return data


def parse_operators(raw, path: Path, harness_root: Path, source: str,
                    broken: dict[str, ConfigError] | None = None) -> list[Operator]:
    """Parse an `operators:` list; harness paths are resolved against `harness_root`.

    An operator the loader cannot take does not take the others down: its ConfigError goes into
    `broken` under its name (or `operators[i]` when it has none), raised when it is named
    (`Target.operator`) and listed by scan. Without `broken`, the first such error is raised."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError(path, "must be a list of operators", "operators")
    found: dict[str, ConfigError] = {}
    ops: list[Operator] = []
    at: dict[str, list[int]] = {}
    for i, item in enumerate(raw):
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            at.setdefault(item["name"], []).append(i)
    for i, item in enumerate(raw):
        name = item.get("name") if isinstance(item, dict) else None
        key = name if isinstance(name, str) and _NAME_RE.match(name) else f"operators[{i}]"
        try:
            if len(at.get(name, ())) > 1:  # which one is meant cannot be known: neither is served
                where = " and ".join(f"operators[{j}]" for j in at[name])
                raise ConfigError(path, f"duplicate operator name {name!r} ({where})",
                                  f"operators[{at[name][-1]}].name")
            ops.append(_parse_operator(item, i, path, harness_root, source))
        except ConfigError as e:
            if broken is None:
                raise
            found.setdefault(key, e)
    if broken is not None:
        broken.update(found)
    return ops


def _parse_operator(item, i: int, path: Path, harness_root: Path, source: str) -> Operator:
    """One entry of an `operators:` list (ConfigError naming its field)."""
    where = f"operators[{i}]."
    if not isinstance(item, dict):
        raise ConfigError(path, "must be a mapping", f"operators[{i}]")
    unknown = sorted(set(item) - _OPERATOR_KEYS)
    if unknown:
        raise ConfigError(path, f"unknown field(s) {', '.join(unknown)}", f"{where}{unknown[0]}")
    name = _require(item, "name", path, where)
    if not _NAME_RE.match(name):
        raise ConfigError(path, f"{name!r} is not a valid name (letters, digits, _ . -)", f"{where}name")
    file = _require(item, "file", path, where)
    if Path(file).is_absolute() or ".." in Path(file).parts:
        raise ConfigError(path, "must be a path inside the repository", f"{where}file")
    entry = _require(item, "entry", path, where)
    if not is_entry_name(entry):
        raise ConfigError(path, f"{entry!r} is not a Python function name or a dotted name "
                          "(Class.method, Function.apply)", f"{where}entry")
    harness = (harness_root / _require(item, "harness", path, where)).resolve()
    min_speedup = _optional(item, "min_speedup", path, where, (int, float), DEFAULT_MIN_SPEEDUP)
    return Operator(
        name=name, file=file, entry=entry, harness=harness,
        test=_optional(item, "test", path, where, str),
        benchmark=_optional(item, "benchmark", path, where, str),
        min_speedup=float(min_speedup),
        checked=_optional(item, "checked", path, where, str),
        source=source,
    )


def load_target(path: str | os.PathLike) -> Target:
    """Read and validate a target yaml; every mistake is a ConfigError naming file and field."""
    path = Path(path).resolve()
    data = read_yaml(path)
    unknown = sorted(set(data) - _TARGET_KEYS)
    if unknown:
        raise ConfigError(path, f"unknown field(s) {', '.join(unknown)}", unknown[0])
    repo = _require(data, "repo", path, "")
    if not _REPO_RE.match(repo):
        raise ConfigError(path, f"{repo!r} is not owner/name", "repo")
    fork = _optional(data, "fork", path, "", str)
    if fork is not None and not _REPO_RE.match(fork):
        raise ConfigError(path, f"{fork!r} is not owner/name", "fork")
    labels = _optional(data, "labels", path, "", list, [])
    if not all(isinstance(x, str) for x in labels):
        raise ConfigError(path, "must be a list of strings", "labels")
    stubs_raw = _optional(data, "stubs", path, "", dict, {})
    stubs = {}
    for mod, rel in stubs_raw.items():
        if not isinstance(rel, str):
            raise ConfigError(path, "must map a module name to a file path", f"stubs.{mod}")
        stubs[str(mod)] = (path.parent / rel).resolve()
    max_open = _optional(data, "max_open_prs", path, "", int, DEFAULT_MAX_OPEN_PRS)
    budget = _optional(data, "budget_minutes", path, "", (int, float))
    broken: dict[str, ConfigError] = {}
    target = Target(
        path=path, repo=repo,
        base=_optional(data, "base", path, "", str, "main"),
        clone_url=_optional(data, "clone_url", path, "", str),
        fork=fork,
        setup=_optional(data, "setup", path, "", str),
        labels=labels,
        operators=parse_operators(data.get("operators"), path, path.parent, "yaml", broken),
        checked=_optional(data, "checked", path, "", (str, int, float)),
        stubs=stubs,
        max_open_prs=max_open,
        budget_minutes=float(budget) if budget is not None else None,
        broken=broken,
        package=parse_package(data.get("package"), path),
    )
    if target.checked is not None:
        target.checked = str(target.checked)
    return target


def merge_repo_operators(target: Target, repo_yaml: Path, data: dict | None = None) -> Target:
    """Add the operators of a target repo's `.kernelsmith.yml`; a name clash is a ConfigError.

    `data` is the file's parsed content when it was read from elsewhere (a git ref), else the file is read.
    """
    if data is None:
        data = read_yaml(repo_yaml)
    unknown = sorted(set(data) - {"operators"})
    if unknown:
        raise ConfigError(repo_yaml, f"unknown field(s) {', '.join(unknown)} (only operators)", unknown[0])
    broken: dict[str, ConfigError] = {}
    ops = parse_operators(data.get("operators"), repo_yaml, repo_yaml.parent, ".kernelsmith.yml", broken)
    known = {o.name for o in target.operators} | set(target.broken)
    for name, e in broken.items():
        if name in known:
            raise ConfigError(repo_yaml, f"operator {name!r} is also defined in {target.path}", e.field)
    target.broken = {**target.broken, **broken}
    for i, op in enumerate(ops):
        if op.name in known:
            raise ConfigError(repo_yaml, f"operator {op.name!r} is also defined in {target.path}",
                              f"operators[{i}].name")
    target.operators.extend(ops)
    return target


def targets_dir(explicit: str | None = None) -> Path:
    """The folder holding target yamls: --targets, then $KERNELSMITH_TARGETS, then ./targets."""
    return Path(explicit or os.environ.get("KERNELSMITH_TARGETS") or "targets").resolve()


def resolve_target(arg: str, targets: str | None = None) -> Path:
    """A TARGET argument (yaml path or name under the targets folder) as a yaml path."""
    p = Path(arg)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.exists():
            raise ConfigError(p, "target file not found")
        return p.resolve()
    folder = targets_dir(targets)
    for suffix in (".yaml", ".yml"):
        cand = folder / f"{arg}{suffix}"
        if cand.exists():
            return cand.resolve()
    known = sorted(x.stem for x in folder.glob("*.y*ml")) if folder.is_dir() else []
    raise ConfigError(folder / f"{arg}.yaml",
                      f"no target named {arg!r} (known: {', '.join(known) or 'none'})")
