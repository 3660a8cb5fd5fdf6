"""run.json, the settings a run directory was made with: `RunSpec` is its schema, and this module is
the only code that reads it or turns it into JSON (docs/design.md, Run directory, lists the keys)."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

from kernelsmith.errors import ConfigError

RUN_FILE = "run.json"
_FIX = "restore it or start a new run"


def run_file(run_dir: str | Path) -> Path:
    """The run.json of a run directory."""
    return Path(run_dir) / RUN_FILE


@dataclass(frozen=True)
class Replay:
    """The winner diff a `--replay` run applies to its base, kept whole so a resume needs no source."""

    source: str
    diff: str


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """run.json. The fields without a default are in every run.json kernelsmith has written; the
    others came later, and a run.json without them loads with the default (None: not recorded).
    Fields are in the order run.json lists them."""

    target: str  # the target yaml's path
    op: str
    repo: str | None = None
    file: str  # the operator file, relative to the checkout
    checkout: str
    base_sha: str
    base_release: str | None = None  # NAME==VERSION when the checkout was built from a released package
    seed: int
    budget: int | None = None
    minutes: float | None = None
    mutator: str
    device: str
    gpus: list[int | None]  # device indices; None: a worker without one (the interpreter's, a Ray worker)
    argv: list[str] = field(default_factory=list)
    versions: dict[str, str | None] = field(default_factory=dict)
    created_at: str | None = None
    command: str = "optimize"  # or "sweep"
    checkout_given: bool | None = None  # whether --checkout was given (report.md's Reproduce lines)
    # The population's layout and the stop rule, so a --resume without the same flags keeps them.
    islands: int | None = None
    exploit: float | None = None
    stagnation: int | None = None  # None: from the budget
    pipeline: int | None = None  # generations in flight
    batch: int | None = None  # proposals per generation
    replay: Replay | None = None  # written only by a --replay run

    @classmethod
    def load(cls, run_dir: str | Path) -> RunSpec:
        """The run.json of `run_dir`; ConfigError naming the file (and the field) when it is missing,
        not JSON, or not a run.json."""
        path = run_file(run_dir)
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise ConfigError(path, "not found: not a kernelsmith run directory") from None
        except OSError as e:
            raise ConfigError(path, f"cannot be read ({e.strerror or e})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(path, f"invalid JSON: {e}") from None
        return cls.from_json(data, path)

    @classmethod
    def from_json(cls, data: object, path: str | Path) -> RunSpec:
        """The RunSpec of run.json's decoded content; ConfigError naming `path` and the first field
        that is missing, unknown or of the wrong type."""
        if not isinstance(data, dict):
            raise ConfigError(path, "must hold a JSON object")
        hints = typing.get_type_hints(cls)
        values = {}
        for f in dataclasses.fields(cls):
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if f.name not in data:
                if required:
                    raise ConfigError(path, f"missing required field; {_FIX}", f.name)
                continue
            value = data[f.name]
            rule, what = _RULES.get(f.name, (None, _describe(hints[f.name])))
            empty = required and value == ""  # a field every run has, written empty
            if empty:
                rule, what = None, "a non-empty string"
            if empty or not _conforms(value, hints[f.name]) or (rule is not None and not rule(value)):
                raise ConfigError(path, f"must be {what}, not {_shown(value)}; {_FIX}", f.name)
            values[f.name] = Replay(**value) if f.name == "replay" and value is not None else value
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ConfigError(path, f"not a run.json field; {_FIX}", unknown[0])
        if values["mutator"] == "replay" and values.get("replay") is None:
            raise ConfigError(path, f"the mutator is replay but the run holds no diff to replay; {_FIX}",
                              "replay")
        return cls(**values)

    def to_json(self) -> dict:
        """run.json's content, keys in their order (`replay` only where there is one)."""
        out = dataclasses.asdict(self)
        if out["replay"] is None:
            del out["replay"]
        return out


# Fields with a rule beyond their type: (the rule, what a value must be, in words).
_RULES = {
    "gpus": (lambda gpus: bool(gpus) and all(g is None or g >= 0 for g in gpus),
             "a non-empty list of device indices (integers from 0, or nulls)"),
}
_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", type(None): "null"}


def _alternatives(hint) -> tuple:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _conforms(value, hint) -> bool:
    """Whether a JSON value is of the type `hint` (JSON true is no integer; an integer is a number)."""
    options = _alternatives(hint)
    if len(options) > 1:
        return any(_conforms(value, h) for h in options)
    if hint is type(None):
        return value is None
    if hint in (int, float, str, bool):
        kinds = (int, float) if hint is float else (hint,)
        return isinstance(value, kinds) and (hint is bool or not isinstance(value, bool))
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return isinstance(value, list) and all(_conforms(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(isinstance(k, str) and _conforms(v, args[1])
                                               for k, v in value.items())
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return isinstance(value, dict) and set(value) == set(hints) and all(
            _conforms(value[k], h) for k, h in hints.items())
    raise TypeError(f"no JSON check for {hint!r}")


def _describe(hint) -> str:
    """What a value of type `hint` is, in words ("an integer or null")."""
    options = _alternatives(hint)
    if len(options) > 1:
        words = [_describe(h) for h in options]
        return ", ".join(words[:-1]) + " or " + words[-1]
    if hint in _NAMES:
        return _NAMES[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return f"a list, each item {_describe(args[0])}"
    if origin is dict:
        return f"an object, each value {_describe(args[1])}"
    hints = typing.get_type_hints(hint)
    return "an object {" + ", ".join(f"{k}: {_describe(h)}" for k, h in hints.items()) + "}"


def _shown(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."
