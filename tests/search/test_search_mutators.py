"""The one registry of mutator names and the Mutator protocol every built mutator satisfies."""

from __future__ import annotations

import argparse
from pathlib import Path

from kernelsmith.cli import _uses_llm
from kernelsmith.commands import bench as bench_cmd
from kernelsmith.commands import optimize as optimize_cmd
from kernelsmith.onboard.config import load_target
from kernelsmith.onboard.task import make_task
from kernelsmith.search import mutators
from kernelsmith.search.mutator_set import build_mutators
from kernelsmith.search.mutators import Mutator

ROOT = Path(__file__).resolve().parents[2]


def _choices(module, command: str) -> tuple:
    parser = argparse.ArgumentParser()
    module.register(parser.add_subparsers())
    sub = parser._subparsers._group_actions[0].choices[command]
    return tuple(next(a for a in sub._actions if a.dest == "mutator").choices)


def test_the_cli_choices_come_from_the_registry():
    assert _choices(optimize_cmd, "optimize") == mutators.CHOICES
    assert _choices(bench_cmd, "bench") == mutators.CHOICES
    assert mutators.members("all") == mutators.ALL and mutators.members("grid") == ("grid",)
    # The broker starts exactly when a model will be asked.
    ns = argparse.Namespace
    assert _uses_llm(ns(command="optimize", mutator=None, replay=None))  # the default is "all"
    assert not _uses_llm(ns(command="optimize", mutator="all", replay="run"))
    assert not _uses_llm(ns(command="optimize", mutator="params", replay=None))
    assert _uses_llm(ns(command="bench", mutator="llm")) and not _uses_llm(ns(command="bench", mutator=None))


def test_every_built_mutator_is_a_mutator_named_by_the_registry(monkeypatch):
    monkeypatch.setenv("KERNELSMITH_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("KERNELSMITH_LLM_MODEL", "scripted")
    target = load_target(ROOT / "targets" / "demo.yaml")
    task = make_task(target, "silu_and_mul", ROOT / "examples" / "miniserve", "0" * 40)
    notes = []
    for choice in mutators.CHOICES:
        built = build_mutators(choice, task, "interpret", 12, notes.append)
        assert [m.name for m in built] == list(mutators.members(choice))
        assert all(isinstance(m, Mutator) for m in built)
