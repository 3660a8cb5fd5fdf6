"""Fixtures for the bot tests: a local GitHub (REST + git over HTTP) and the demo target on it.

The bot runs with real PyGithub and GitPython against `github_server.Server`. The schedule and
comment paths get `SavedRunEngine` as their engine: the documented seam of bot/engine.py. It
stands in for `kernelsmith scan/optimize/verify` (a GPU search cannot run here) by copying the
saved run directory tests/data/example_run; everything after it (state, publishing, the PR, the
reply comment, the dashboard) is the production code path.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from github_server import Server

from kernelsmith.state import source_hash

# The bot needs PyGithub, GitPython and PyJWT; the GPU box has none of them and runs no bot tests.
_MISSING = [m for m in ("github", "git", "jwt", "cryptography") if importlib.util.find_spec(m) is None]
collect_ignore_glob = ["test_*.py"] if _MISSING else []

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_RUN = ROOT / "tests" / "data" / "example_run"
MINISERVE = ROOT / "examples" / "miniserve"
OP_FILE = "miniserve/kernels/rms_norm.py"


def _git(cwd: Path, *args: str) -> str:
    env_id = ["-c", "user.name=Maintainer", "-c", "user.email=maintainer@example.com"]
    return subprocess.run(["git", *env_id, *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def gh(tmp_path, monkeypatch):
    """A running server holding kernelsmith/demo (the miniserve source), users and a bot token."""
    src = tmp_path / "seed"
    shutil.copytree(MINISERVE, src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
    _git(src, "init", "-q", "-b", "main")
    _git(src, "add", "-A")
    _git(src, "commit", "-q", "-m", "miniserve")
    with Server(tmp_path / "remote") as server:
        st = server.state
        repo = st.add_repo("kernelsmith/demo", source=src)
        # GitHub serves partial clones and fetches by commit id; git http-backend needs it said.
        for key in ("uploadpack.allowFilter", "uploadpack.allowAnySHA1InWant"):
            subprocess.run(["git", "config", key, "true"], cwd=repo.bare, check=True)
        st.add_user("maintainer")
        st.add_user("reader")
        repo.roles.update({"maintainer": "maintain", "reader": "read", "ks-bot": "write"})
        server.token = st.add_token("ks-bot")
        server.repo = repo
        server.base_sha = repo.branch_sha("main")
        targets = tmp_path / "targets"
        shutil.copytree(ROOT / "targets" / "demo", targets / "demo")
        yaml_text = (ROOT / "targets" / "demo.yaml").read_text()
        (targets / "demo.yaml").write_text(yaml_text.replace("clone_url: ../examples/miniserve",
                                                             f"clone_url: {MINISERVE}"))
        server.targets = targets
        server.summary = tmp_path / "summary.md"
        server.output = tmp_path / "output.txt"
        for k, v in {
            "GITHUB_API_URL": server.api_url, "GITHUB_SERVER_URL": server.server_url,
            "GITHUB_REPOSITORY": "kernelsmith/demo", "KERNELSMITH_TOKEN": server.token,
            "KERNELSMITH_GITHUB_WRITE_INTERVAL": "0", "KERNELSMITH_TARGETS": str(targets),
            "KERNELSMITH_STATE": str(tmp_path / "state.json"), "GITHUB_STEP_SUMMARY": str(server.summary),
            "GITHUB_OUTPUT": str(server.output), "GITHUB_RUN_ID": "77",
        }.items():
            monkeypatch.setenv(k, v)
        for k in ("KERNELSMITH_APP_ID", "KERNELSMITH_APP_PRIVATE_KEY", "GITHUB_EVENT_NAME",
                  "GITHUB_EVENT_PATH"):
            monkeypatch.delenv(k, raising=False)
        yield server


def saved_run(gh, dest: Path, *, geomean_scale: float = 1.0, status: str = "pass") -> Path:
    """A copy of the example run re-pointed at the test server's base commit and target yaml."""
    shutil.copytree(EXAMPLE_RUN, dest)
    for name in ("run.json", "result.json"):
        data = json.loads((dest / name).read_text())
        data["base_sha"] = gh.base_sha
        data["target"] = str(gh.targets / "demo.yaml")
        if name == "result.json":
            data["geomean_speedup"] = round(data["geomean_speedup"] * geomean_scale, 4)
        (dest / name).write_text(json.dumps(data, indent=2))
    verify = json.loads((dest / "verify.json").read_text())
    verify["status"], verify["regression"] = status, status == "regression"
    (dest / "verify.json").write_text(json.dumps(verify, indent=2))
    return dest


class SavedRunEngine:
    """The engine seam for tests: scan reports the demo's operators, optimize copies the saved run."""

    def __init__(self, gh, winners=("rms_norm",)):
        self.gh, self.winners, self.calls = gh, winners, []
        base = subprocess.run(["git", "show", f"main:{OP_FILE}"], cwd=gh.repo.bare, check=True,
                              capture_output=True).stdout
        self.hash = source_hash(base)

    def scan(self, target):
        self.calls.append(("scan", str(target)))
        # The shape of `kernelsmith scan --json` (kernelsmith/scan.py ScanResult.to_json).
        return {"operators": [{"name": "rms_norm", "source_hash": self.hash, "harness_ok": True},
                              {"name": "silu_and_mul", "source_hash": "0" * 64, "harness_ok": True}],
                "hotspots": [{"file": OP_FILE, "line": 40, "function": "_fused_add_rms_norm_kernel",
                              "operator": None, "status": "needs a harness"}]}

    def optimize(self, target, op, out, budget, minutes):
        self.calls.append(("optimize", op, budget, minutes))
        if op not in self.winners:
            return 1
        shutil.rmtree(out, ignore_errors=True)
        saved_run(self.gh, Path(out))
        return 0

    def verify(self, run_dir):
        self.calls.append(("verify", str(run_dir)))
        return 0


def event(tmp_path: Path, monkeypatch, name: str, payload: dict) -> None:
    """Point GITHUB_EVENT_NAME / GITHUB_EVENT_PATH at a payload."""
    path = tmp_path / f"event-{name}.json"
    path.write_text(json.dumps(payload))
    monkeypatch.setenv("GITHUB_EVENT_NAME", name)
    monkeypatch.setenv("GITHUB_EVENT_PATH", str(path))
