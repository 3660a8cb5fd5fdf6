"""`kernelsmith optimize --replay`: an old winner's diff re-applied to a newer base, then the usual
referee, finish and run directory (interpreter end to end), plus the diff applier on its own."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from kernelsmith.cli import main
from kernelsmith.search.archive import Archive
from kernelsmith.search.edits import unified_diff
from kernelsmith.search.mutators.replay import PatchError, apply_diff, parse_diff, reverse

ROOT = Path(__file__).resolve().parents[2]
FILE = "miniserve/kernels/silu_and_mul.py"
BASE = (ROOT / "examples" / "miniserve" / FILE).read_text()
WINNER = BASE.replace("    BLOCK = 64\n", "    BLOCK = 128\n")
# Upstream since the winner was found: a new import at the top (every line moves) and a docstring edit.
UPSTREAM = BASE.replace("import torch\n", "import math  # noqa: F401\nimport torch\n").replace(
    '"""Write silu(x[..., :d]) * x[..., d:] into out (shape [..., d])."""',
    '"""out = silu(x[..., :d]) * x[..., d:], written in place (shape [..., d])."""',
)


def _git(cwd: Path, *args: str) -> str:
    ident = ["-c", "user.name=Upstream", "-c", "user.email=upstream@example.com"]
    return subprocess.run(["git", *ident, *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def _checkout(tmp_path: Path, code: str) -> Path:
    """A git checkout of miniserve whose operator file holds `code` (committed)."""
    co = tmp_path / "checkout"
    if not co.exists():
        shutil.copytree(ROOT / "examples" / "miniserve", co,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
        _git(co, "init", "-q", "-b", "main")
    (co / FILE).write_text(code)
    _git(co, "add", "-A")
    _git(co, "commit", "-q", "--allow-empty", "-m", "upstream change")
    return co


def _optimize(co: Path, out: Path, *extra: str) -> int:
    return main(["--targets", str(ROOT / "targets"), "optimize", "demo", "silu_and_mul",
                 "--checkout", str(co), "--device", "interpret", "--no-progress", "--out", str(out), *extra])


def test_replay_applies_the_old_diff_to_the_changed_base_and_referees_it(tmp_path):
    old_diff = tmp_path / "winner.diff"
    old_diff.write_text(unified_diff(BASE, WINNER, FILE))
    co = _checkout(tmp_path, UPSTREAM)
    assert _optimize(co, tmp_path / "run", "--replay", str(old_diff)) == 0
    run = tmp_path / "run"
    result = json.loads((run / "result.json").read_text())
    # The upstream changes stay; only the winner's change is added on top of them.
    expected = UPSTREAM.replace("    BLOCK = 64\n", "    BLOCK = 128\n")
    assert (run / "winner" / "silu_and_mul.py").read_text() == expected
    assert (run / "winner" / "winner.diff").read_text() == unified_diff(UPSTREAM, expected, FILE)
    assert result["base_sha"] == _git(co, "rev-parse", "HEAD")
    assert result["proposals"] == 1 and result["accepted"] == 1 and result["mutator"] == "replay"
    assert result["replay"] == {"source": str(old_diff.resolve()), "candidate": 2, "applied": True,
                                "accepted": True, "reason": None, "error": None}
    run_json = json.loads((run / "run.json").read_text())
    assert run_json["budget"] == 1 and run_json["replay"]["diff"] == old_diff.read_text()
    with Archive(run / "archive.sqlite") as a:
        base, cand = a.all()
    assert cand["mutator"] == "replay" and cand["parent_id"] == base["id"] and cand["accepted"] == 1
    assert cand["response"] == old_diff.read_text()        # the replayed diff, as the proposal's answer
    report = (run / "report.md").read_text()
    assert "No timing was done" in report                  # the usual evidence, stated honestly

    # Upstream now rewrites the very lines the winner changed: replaying that run dir must fail.
    co = _checkout(tmp_path, UPSTREAM.replace("    BLOCK = 64\n", "    BLOCK = 256 if d > 4096 else 64\n"))
    assert _optimize(co, tmp_path / "run2", "--replay", str(run)) == 1
    result = json.loads((tmp_path / "run2" / "result.json").read_text())
    assert result["winner"] is None and result["rejected"] == {"malformed_proposal": 1}
    assert result["proposals"] == 1 and result["evaluations"] == 0      # nothing but the base ran
    error = result["replay"]["error"]
    assert result["replay"]["applied"] is False and result["replay"]["reason"] == "malformed_proposal"
    assert error.startswith(f"the winner no longer applies to {FILE} at ")
    assert "hunk 1 of 1" in error
    assert "expected 'BLOCK = 64' at line 28, found 'BLOCK = 256 if d > 4096 else 64'" in error
    assert not (tmp_path / "run2" / "winner" / "winner.diff").exists()


def test_replay_usage_errors_exit_2(tmp_path, capsys):
    co = _checkout(tmp_path, BASE)
    other = tmp_path / "other.diff"
    other.write_text(unified_diff("a\n", "b\n", "miniserve/kernels/rms_norm.py"))
    assert _optimize(co, tmp_path / "r1", "--replay", str(other)) == 2
    assert "patches miniserve/kernels/rms_norm.py, not the operator's file" in capsys.readouterr().err
    (tmp_path / "empty_run").mkdir()
    assert _optimize(co, tmp_path / "r2", "--replay", str(tmp_path / "empty_run")) == 2
    assert "that run has no winner to replay" in capsys.readouterr().err
    diff = tmp_path / "w.diff"
    diff.write_text(unified_diff(BASE, WINNER, FILE))
    assert _optimize(co, tmp_path / "r3", "--replay", str(diff), "--budget", "5") == 2
    assert "--replay makes exactly one proposal" in capsys.readouterr().err
    assert _optimize(co, tmp_path / "r4", "--replay", str(diff), "--mutator", "params") == 2


def test_apply_git_diff_with_offset_and_no_final_newline():
    old = "a\nb\nc\nd\ne"
    new = "a\nb\nC\nd\ne!"
    diff = ("diff --git a/f.py b/f.py\nindex 1..2 100644\n--- a/f.py\n+++ b/f.py\n"
            "@@ -2,4 +2,4 @@\n b\n-c\n+C\n d\n-e\n\\ No newline at end of file\n+e!\n"
            "\\ No newline at end of file\n")
    path, hunks = parse_diff(diff)
    assert path == "f.py"
    assert apply_diff(old, hunks) == new
    assert apply_diff("x\ny\n" + old, hunks) == "x\ny\n" + new   # two lines inserted above: offset
    assert apply_diff(new, reverse(hunks)) == old


def test_apply_picks_the_match_nearest_the_stated_line_and_refuses_fuzz():
    code = "".join(f"x = {i % 3}\n" for i in range(12))
    new = code.splitlines(keepends=True)
    new[7] = "x = 99\n"
    _, hunks = parse_diff(unified_diff(code, "".join(new), "f.py"))
    assert apply_diff(code, hunks) == "".join(new)          # "x = 1" recurs; the one at line 8 changes
    changed = code.replace("x = 2\n", "x = 2  # tuned\n")
    with pytest.raises(PatchError, match="hunk 1 of 1"):
        apply_diff(changed, hunks)


def test_truncated_diff_is_refused():
    text = unified_diff("a\nb\nc\n", "a\nB\nc\n", "f.py")
    with pytest.raises(PatchError, match="ends inside this hunk"):
        parse_diff(text.rsplit("\n", 2)[0] + "\n")
