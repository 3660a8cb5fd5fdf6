"""Commands refuse without user namespaces (naming the kernel feature) unless --no-sandbox, which
every output then states; optimize's LLM key lives only in its broker process."""

import json
import os
import random
import sys
from pathlib import Path

import pytest

from kernelsmith.cli import main

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "search"))
TARGETS = ["--targets", str(ROOT / "targets")]
DEMO = ["demo", "silu_and_mul", "--checkout", str(ROOT / "examples" / "miniserve"), "--device", "interpret"]


def test_evaluate_refuses_then_runs_with_no_sandbox_and_says_so(monkeypatch, capsys):
    monkeypatch.setenv("KERNELSMITH_SANDBOX_SIMULATE_MISSING", "1")
    assert main([*TARGETS, "evaluate", *DEMO, "--json"]) == 2
    err = capsys.readouterr().err
    assert "cannot build the sandbox" in err and "user.max_user_namespaces = 0" in err
    assert main([*TARGETS, "evaluate", *DEMO, "--json", "--no-sandbox"]) == 0
    out = capsys.readouterr()
    assert "WARNING: --no-sandbox" in out.err
    verdict = json.loads(out.out)
    assert verdict["accepted"] and verdict["sandbox"]["enabled"] is False
    monkeypatch.delenv("KERNELSMITH_SANDBOX_SIMULATE_MISSING")
    assert main([*TARGETS, "evaluate", *DEMO, "--json"]) == 0  # --no-sandbox held for that command only
    assert json.loads(capsys.readouterr().out)["sandbox"]["enabled"] is True


def test_optimize_with_no_sandbox_states_it_in_result_and_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KERNELSMITH_SANDBOX_SIMULATE_MISSING", "1")
    out = tmp_path / "run"
    argv = [*TARGETS, "optimize", *DEMO, "--budget", "1", "--mutator", "params", "--out", str(out),
            "--no-progress"]
    assert main(argv) == 2 and not out.exists()
    assert "user.max_user_namespaces = 0" in capsys.readouterr().err
    assert main([*argv, "--no-sandbox"]) in (0, 1)
    result = json.loads((out / "result.json").read_text())
    assert result["sandbox"]["enabled"] is False
    assert "WITHOUT the sandbox" in (out / "report.md").read_text()


@pytest.fixture
def scripted_llm():
    from llm_server import ScriptedLLM

    with ScriptedLLM([], default={"content": "no edit"}) as srv:
        yield srv


def test_llm_key_lives_only_in_the_broker(scripted_llm, monkeypatch):
    from kernelsmith.onboard.config import load_target
    from kernelsmith.onboard.task import make_task
    from kernelsmith.search.mutators import broker
    from kernelsmith.search.mutators.llm import LLMMutator
    from kernelsmith.search.mutators.llm_settings import llm_settings, start_from_environment

    key = "sk-brokeronly0123456789abc"
    monkeypatch.setenv("KERNELSMITH_LLM_BASE_URL", scripted_llm.base_url)
    monkeypatch.setenv("KERNELSMITH_LLM_MODEL", "scripted")
    monkeypatch.setenv("KERNELSMITH_LLM_API_KEY", key)
    try:
        assert start_from_environment() is not None
        assert "KERNELSMITH_LLM_API_KEY" not in os.environ  # gone before any target code runs
        settings = llm_settings()
        assert settings.problem is None and settings.api_key is None and settings.broker is broker.default()
        task = make_task(load_target(ROOT / "targets" / "demo.yaml"), "silu_and_mul",
                         ROOT / "examples" / "miniserve", "0" * 40)
        parent = {"id": 1, "mutator": "base", "code": task.base_code, "feedback": None,
                  "verdict": {"accepted": True}}
        LLMMutator(task, settings, device="interpret").propose(parent, [], random.Random(0), max_answers=1)
        headers = {k.lower(): v for k, v in scripted_llm.requests[0]["headers"].items()}
        assert headers["authorization"] == f"Bearer {key}"  # the broker used it
        pid = broker.default().proc.pid
        assert key.encode() not in Path(f"/proc/{pid}/environ").read_bytes()  # handed over a pipe
        assert key.encode() not in Path("/proc/self/environ").read_bytes()
    finally:
        broker.stop_default()
