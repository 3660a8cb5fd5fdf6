"""A search on a checkout made from a release: run.json, result.json and report.md say the base is
that release, not an upstream commit (the model referee; no GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import model_referee
import pytest
import torch
from upstreamkit import write_wheel

import kernelsmith.referee.backend as backend
from kernelsmith.commands.run import optimize
from kernelsmith.onboard.config import load_target
from kernelsmith.onboard.release import release_checkout
from kernelsmith.search.run_config import SearchConfig, SearchHooks

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def miniserve_release(tmp_path):
    """The demo's miniserve package as a release `miniserve==0.1.0`, and a target yaml naming it."""
    src = ROOT / "examples" / "miniserve"
    files = {str(p.relative_to(src)): p.read_text() for p in sorted((src / "miniserve").rglob("*.py"))}
    wheel = write_wheel(tmp_path / "miniserve-0.1.0-py3-none-any.whl", files)
    demo = (ROOT / "targets" / "demo.yaml").read_text()
    yaml = tmp_path / "targets" / "miniserve.yaml"
    yaml.parent.mkdir()
    yaml.write_text(demo.replace("clone_url: ../examples/miniserve\n", "package: miniserve==0.1.0\n")
                    .replace("harness: demo/", f"harness: {ROOT / 'targets' / 'demo'}/"))
    return load_target(yaml), wheel


def test_a_run_on_a_release_says_so_in_run_json_result_json_and_the_report(miniserve_release, tmp_path,
                                                                            monkeypatch):
    target, wheel = miniserve_release
    co = release_checkout(target, wheel=wheel)
    monkeypatch.setattr(backend, "cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    out = tmp_path / "run"
    optimize(SearchConfig(target=str(target.path), op="silu_and_mul", out=str(out), budget=3,
                          mutator="params", device="cuda", gpus=[0], progress=False, checkout=str(co.path)),
             SearchHooks(referee_factory=model_referee.ModelReferee, precompile=False,
                         argv=["kernelsmith", "optimize"]))
    run = json.loads((out / "run.json").read_text())
    result = json.loads((out / "result.json").read_text())
    assert run["base_release"] == result["base_release"] == "miniserve==0.1.0"
    assert run["base_sha"] == result["base_sha"] == co.base_sha
    assert "The base is the release `miniserve==0.1.0`" in (out / "report.md").read_text()
    assert "not an upstream commit" in (out / "report.md").read_text()
