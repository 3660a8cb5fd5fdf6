"""Helpers and the `gh` fixture for the bot tests (conftest.py registers the fixture): a local
GitHub (REST + git over HTTP) and the demo target on it. Tests import helpers from here, by this
module's own name, never `from conftest` (a run over several test folders has several conftests).

The bot runs with real PyGithub and GitPython against `github_server.Server`. The schedule and
comment paths get `SavedRunEngine` as their engine: the documented seam of bot/engine.py. It
stands in for `kernelsmith scan/optimize/verify` (a GPU search cannot run here) by copying the
saved run directory tests/data/example_run; everything after it (state, publishing, the PR, the
reply comment, the dashboard) is the production code path.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

# The bot needs PyGithub, PyJWT and cryptography (the `bot` extra); where they are missing
# (the GPU box) every bot test module that imports this one is skipped, not broken.
OPTIONAL = ("github", "jwt", "cryptography")
MISSING = [m for m in OPTIONAL if importlib.util.find_spec(m) is None]
if MISSING and os.environ.get("KERNELSMITH_REQUIRE_BOT") == "1":
    # CI sets it: a dependency list that loses one must fail there, not skip every bot test.
    raise ImportError(f"the bot tests need {', '.join(MISSING)}; "
                      "KERNELSMITH_REQUIRE_BOT=1 forbids skipping them")
if MISSING:
    pytest.skip(f"the bot tests need {', '.join(MISSING)} (kernelsmith's dependencies: pip install -e .)",
                allow_module_level=True)

from github_api import add_comment  # noqa: E402 - needs PyJWT, checked above
from github_server import Server  # noqa: E402

from kernelsmith.onboard.state import source_hash  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_RUN = ROOT / "tests" / "data" / "example_run"
MINISERVE = ROOT / "examples" / "miniserve"
OP_FILE = "miniserve/kernels/rms_norm.py"
# `kernelsmith-bot publish` names target and operator itself (never read from the run directory).
PUB = ["--target", "demo", "--op", "rms_norm"]


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


def saved_run(gh, dest: Path, *, geomean_scale: float = 1.0, status: str = "pass",
              base_sha: str | None = None) -> Path:
    """A copy of the example run re-pointed at the test server's base commit and target yaml."""
    shutil.copytree(EXAMPLE_RUN, dest)
    for name in ("run.json", "result.json"):
        data = json.loads((dest / name).read_text())
        data["base_sha"] = base_sha or gh.base_sha
        data["target"] = str(gh.targets / "demo.yaml")
        if name == "result.json":
            data["geomean_speedup"] = round(data["geomean_speedup"] * geomean_scale, 4)
        (dest / name).write_text(json.dumps(data, indent=2))
    verify = json.loads((dest / "verify.json").read_text())
    verify["status"], verify["regression"] = status, status == "regression"
    (dest / "verify.json").write_text(json.dumps(verify, indent=2))
    return dest


def push_upstream(gh, edit, message: str = "upstream change") -> str:
    """A maintainer commits `edit(old text) -> new text` of the operator file to main; the new sha."""
    work = Path(tempfile.mkdtemp(prefix="upstream-", dir=gh.repo.bare.parent)) / "work"
    subprocess.run(["git", "clone", "-q", "-b", "main", str(gh.repo.bare), str(work)], check=True)
    path = work / OP_FILE
    path.write_text(edit(path.read_text()))
    _git(work, "commit", "-qam", message)
    _git(work, "push", "-q", "origin", "main")
    return gh.repo.branch_sha("main")


def as_user(gh, login: str):
    """The demo repository through PyGithub as `login` (a maintainer closing or merging a PR)."""
    from github import Auth, Github

    client = Github(auth=Auth.Token(gh.state.add_token(login)), base_url=gh.api_url)
    return client.get_repo("kernelsmith/demo")


class SavedRunEngine:
    """The engine seam for tests: scan reports the demo's operators, optimize copies the saved run.

    A replay (`/kernelsmith rebase`) writes what `kernelsmith optimize --replay` writes, at the
    server's current main: the diff applied by the engine's own applier, then either the saved
    run's evidence for that code (exit 0) or a run without a winner whose replay did not apply (1).
    """

    def __init__(self, gh, winners=("rms_norm",)):
        self.gh, self.winners, self.calls = gh, winners, []
        base = subprocess.run(["git", "show", f"main:{OP_FILE}"], cwd=gh.repo.bare, check=True,
                              capture_output=True).stdout
        self.hash = source_hash(base)

    def scan(self, target):
        self.calls.append(("scan", str(target)))
        # The shape of `kernelsmith scan --json` (kernelsmith/onboard/scan.py ScanResult.to_json).
        return {"operators": [{"name": "rms_norm", "source_hash": self.hash, "harness_ok": True},
                              {"name": "silu_and_mul", "source_hash": "0" * 64, "harness_ok": True}],
                "hotspots": [{"file": OP_FILE, "line": 40, "function": "_fused_add_rms_norm_kernel",
                              "operator": None, "status": "needs a harness"}]}

    def optimize(self, target, op, out, budget, minutes, replay=None):
        if replay is not None:
            return self._replay(op, Path(out), Path(replay).read_text())
        self.calls.append(("optimize", op, budget, minutes))
        if op not in self.winners:
            return 1
        shutil.rmtree(out, ignore_errors=True)
        saved_run(self.gh, Path(out))
        return 0

    def _replay(self, op, out: Path, diff: str) -> int:
        from kernelsmith.search.edits import unified_diff
        from kernelsmith.search.mutators.replay import PatchError, apply_diff, parse_diff

        self.calls.append(("replay", op, diff))
        sha = self.gh.repo.branch_sha("main")
        base = subprocess.run(["git", "show", f"{sha}:{OP_FILE}"], cwd=self.gh.repo.bare, check=True,
                              capture_output=True, text=True).stdout
        shutil.rmtree(out, ignore_errors=True)
        saved_run(self.gh, out, base_sha=sha)
        result = json.loads((out / "result.json").read_text())
        try:
            code = apply_diff(base, parse_diff(diff)[1])
            error = None
        except PatchError as e:
            code, error = None, f"the winner no longer applies to {OP_FILE} at {sha[:12]}: {e}"
        result.update(proposals=1, evaluations=1 if code else 0, accepted=1 if code else 0, mutator="replay",
                      replay={"source": "replay.diff", "candidate": 2, "applied": code is not None,
                              "accepted": code is not None, "reason": None if code else "malformed_proposal",
                              "error": error})
        if code is None:
            shutil.rmtree(out / "winner")
            (out / "verify.json").unlink()
            result.update(winner=None, shapes=[], geomean_speedup=None, rejected={"malformed_proposal": 1})
        else:
            new_diff = unified_diff(base, code, OP_FILE)
            (out / "winner" / "rms_norm.py").write_text(code)
            (out / "winner" / "winner.diff").write_text(new_diff)
            result["winner"]["diff"] = new_diff
        (out / "result.json").write_text(json.dumps(result, indent=2))
        return 0 if code else 1

    def verify(self, run_dir):
        self.calls.append(("verify", str(run_dir)))
        return 0


def event(tmp_path: Path, monkeypatch, name: str, payload: dict) -> None:
    """Point GITHUB_EVENT_NAME / GITHUB_EVENT_PATH at a payload."""
    path = tmp_path / f"event-{name}.json"
    path.write_text(json.dumps(payload))
    monkeypatch.setenv("GITHUB_EVENT_NAME", name)
    monkeypatch.setenv("GITHUB_EVENT_PATH", str(path))


def comment(gh, tmp_path, monkeypatch, login: str, body: str, number: int | None = None):
    """A comment by `login` on issue/PR `number` (a new issue when None) and its issue_comment event."""
    repo = gh.repo
    if number is None:
        number = max(repo.issues, default=0) + 1
        repo.issues[number] = {"id": gh.state.next_id(), "number": number, "title": "slow rms_norm",
                               "body": "", "state": "open", "user": login, "labels": [],
                               "created_at": "2026-11-30T00:00:00Z", "updated_at": "2026-11-30T00:00:00Z"}
    c = add_comment(gh.state, repo, number, login, body)
    event(tmp_path, monkeypatch, "issue_comment", {
        "action": "created", "repository": {"full_name": "kernelsmith/demo"},
        "issue": {"number": number}, "comment": {"id": c["id"], "body": body,
                                                 "user": {"login": login, "type": "User"}}})
    return c


def replies(gh, c):
    """The other comments on the issue of comment `c` (the bot's replies)."""
    return [x for x in gh.state.comments.values() if x["issue"] == c["issue"] and x["id"] != c["id"]]


def run_bot(gh, tmp_path, engine=None):
    """One `kernelsmith-bot run` (all stages) for the current event: (exit code, the engine)."""
    from bot.actions import ActionsEnv
    from bot.auth import GitHubAuth
    from bot.run import Bot

    engine = engine or SavedRunEngine(gh)
    bot = Bot(ActionsEnv.from_env(), GitHubAuth.from_env(), engine, runs_dir=tmp_path / "runs")
    return bot.run_all(), engine
