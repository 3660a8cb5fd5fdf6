"""scan, checkouts and state on a local fixture repository (git), without network."""

import json
import subprocess
import sys

import pytest
from targets_fixtures import git, make_target, write

from kernelsmith.cli import main
from kernelsmith.errors import ConfigError, KernelsmithError
from kernelsmith.onboard.checkout import Checkout, prepare_checkout, tree_hash
from kernelsmith.onboard.config import load_target
from kernelsmith.onboard.scan import scan_target, with_repo_operators
from kernelsmith.onboard.state import (
    load_state,
    normalize_state,
    record_pr,
    record_run,
    save_state,
    set_ignored,
    source_hash,
    staleness,
)


def _scan_json(capsys, *args):
    code = main(["scan", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_scan_lists_operators_marks_and_staleness(tmp_path, fixture_repo, capsys):
    yaml_path = make_target(tmp_path, fixture_repo)
    code, doc = _scan_json(capsys, str(yaml_path))
    assert code == 0 and doc["ok"]
    (op,) = doc["operators"]
    assert op["name"] == "scale" and op["stale"] and op["stale_reason"] == "never optimized"
    assert op["source_hash"] == source_hash((fixture_repo / "eng/ops.py").read_bytes())
    marks = {(h["file"], h["function"]): h["status"] for h in doc["hotspots"]}
    assert marks == {("eng/ops.py", "scale"): "harness: scale",
                     ("eng/kernels.py", "_add_kernel"): "needs a harness",
                     ("eng/extra.py", "unharnessed"): "needs a harness"}
    # Recorded at this hash: no longer stale; a new upstream commit changing the file: stale again.
    state = load_state()
    record_run(state, "fix", "scale", source_hash=op["source_hash"], result={"geomean_speedup": 1.3})
    save_state(state)
    code, doc = _scan_json(capsys, str(yaml_path))
    assert not doc["operators"][0]["stale"] and doc["operators"][0]["last_result"]["geomean_speedup"] == 1.3
    write(fixture_repo, "eng/ops.py", (fixture_repo / "eng/ops.py").read_text() + "\n# tweak\n")
    git(fixture_repo, "commit", "-qam", "upstream change")
    code, doc = _scan_json(capsys, str(yaml_path))
    assert doc["operators"][0]["stale"] and doc["operators"][0]["stale_reason"].startswith("changed since")
    assert doc["base_sha"] == git(fixture_repo, "rev-parse", "HEAD")


def test_repo_config_is_read_from_the_base_branch_only(tmp_path, fixture_repo, capsys):
    write(fixture_repo, ".kernelsmith.yml", "operators:\n  - name: extra\n    file: eng/extra.py\n"
          "    entry: unharnessed\n    harness: ks/extra.py\n")
    write(fixture_repo, "ks/extra.py",
          "SHAPES = [{'n': 1}]\ndef make_inputs(s, d, seed):\n    return {}\n"
          "def reference():\n    return 1\n")
    git(fixture_repo, "add", "-A")
    git(fixture_repo, "commit", "-qm", "opt in")
    yaml_path = make_target(tmp_path, fixture_repo)
    code, doc = _scan_json(capsys, str(yaml_path))
    names = {o["name"]: o["source"] for o in doc["operators"]}
    assert code == 0 and names == {"scale": "yaml", "extra": ".kernelsmith.yml"}
    assert {h["function"]: h["status"] for h in doc["hotspots"]}["unharnessed"] == "harness: extra"
    # A PR head that renames the operator is ignored: the base branch decides.
    git(fixture_repo, "checkout", "-qb", "pr")
    write(fixture_repo, ".kernelsmith.yml", "operators:\n  - name: hijack\n    file: eng/extra.py\n"
          "    entry: unharnessed\n    harness: ks/extra.py\n")
    git(fixture_repo, "commit", "-qam", "pr head")
    target = load_target(yaml_path)
    merged = with_repo_operators(target, Checkout(fixture_repo, git(fixture_repo, "rev-parse", "HEAD"), True))
    assert [o.name for o in merged.operators] == ["scale", "extra"]
    # A clash with the yaml is a config error naming the repo file (exit 2 from the command).
    git(fixture_repo, "checkout", "-q", "main")
    write(fixture_repo, ".kernelsmith.yml", "operators:\n  - name: scale\n    file: eng/extra.py\n"
          "    entry: unharnessed\n    harness: ks/extra.py\n")
    git(fixture_repo, "commit", "-qam", "clash")
    with pytest.raises(ConfigError, match=r"\.kernelsmith\.yml: operators\[0\]\.name: operator 'scale'"):
        with_repo_operators(target, Checkout(fixture_repo, git(fixture_repo, "rev-parse", "HEAD"), True))
    assert main(["scan", str(yaml_path)]) == 2


def test_broken_operator_and_bad_yaml_exit_2(tmp_path, fixture_repo, capsys):
    yaml_path = make_target(tmp_path, fixture_repo, entry="no_such_function", harness="fix/missing.py")
    code, doc = _scan_json(capsys, str(yaml_path))
    problems = doc["operators"][0]["problems"]
    assert code == 2 and any("no_such_function" in p for p in problems)
    assert any("harness" in p and "not found" in p for p in problems)
    bad = write(tmp_path, "targets/bad.yaml", "repo: a/b\noperators: [\n")
    assert main(["scan", str(bad)]) == 2
    assert "invalid yaml" in capsys.readouterr().err


def test_cached_clone_fetches_and_keeps_a_clean_worktree(tmp_path, fixture_repo, monkeypatch):
    # Issue 13 (finding 6): setup runs in the sandbox (it may write only its checkout) and the
    # cached worktree is cleaned of every untracked and ignored file at each use, so setup runs
    # again each time and nothing an earlier run planted survives.
    log = tmp_path / "setup.log"
    monkeypatch.setenv("SETUP_LOG", str(log))
    monkeypatch.setenv("KERNELSMITH_TOKEN", "tok")
    target = load_target(make_target(tmp_path, fixture_repo))
    target.setup = 'echo "run ${KERNELSMITH_TOKEN:-no-token}" >> setup-ran.txt; echo x > "$SETUP_LOG" || true'
    first = prepare_checkout(target)
    assert first.is_git and first.base_sha == git(fixture_repo, "rev-parse", "HEAD")
    assert (first.path / "setup-ran.txt").read_text() == "run no-token\n" and not log.exists()
    (first.path / "eng/ops.py").write_text("edited\n")
    (first.path / "build").mkdir()
    (first.path / "build" / "planted.py").write_text("planted\n")
    again = prepare_checkout(target)
    assert again.path == first.path and "edited" not in (again.path / "eng/ops.py").read_text()
    assert not (again.path / "build").exists()
    assert (again.path / "setup-ran.txt").read_text() == "run no-token\n"  # ran again, in a clean tree
    git(fixture_repo, "commit", "-q", "--allow-empty", "-m", "new upstream commit")
    newer = prepare_checkout(target)
    assert newer.base_sha != first.base_sha and newer.path != first.path
    assert (newer.path / "setup-ran.txt").read_text() == "run no-token\n" and not log.exists()


def test_checkout_dir_needs_neither_gitpython_nor_git(tmp_path, fixture_repo, monkeypatch):
    target = load_target(make_target(tmp_path, fixture_repo))
    monkeypatch.setitem(sys.modules, "git", None)  # gitpython unavailable
    monkeypatch.setattr("shutil.which", lambda name: None)  # and no git command line
    co = prepare_checkout(target, fixture_repo)
    assert not co.is_git and co.base_sha == tree_hash(fixture_repo)
    with pytest.raises(KernelsmithError, match="git command line"):
        prepare_checkout(target)


def test_plain_folder_clone_url_still_works(tmp_path, fixture_repo):
    plain = tmp_path / "plainsrc"
    subprocess.run(["cp", "-r", str(fixture_repo), str(plain)], check=True)
    subprocess.run(["rm", "-rf", str(plain / ".git")], check=True)
    target = load_target(make_target(tmp_path, plain))
    co = prepare_checkout(target)
    assert co.is_git and (co.path / "eng/ops.py").is_file()


def test_state_roundtrip_and_helpers(tmp_path):
    path = tmp_path / "state.json"
    state = load_state(path)
    assert staleness(state, "t", "op", "h1") == (True, "never optimized")
    record_run(state, "t", "op", source_hash="h1", result={"geomean_speedup": 1.2, "winner": {"id": 4}})
    record_pr(state, "t", "op", number=7, url="https://x/pull/7")
    set_ignored(state, "t", "other")
    save_state(state, path)
    loaded = load_state(path)
    assert loaded["operators"]["t/op"]["result"]["winner_id"] == 4
    assert loaded["operators"]["t/op"]["pr"]["number"] == 7 and loaded["operators"]["t/other"]["ignored"]
    assert staleness(loaded, "t", "op", "h1")[0] is False and staleness(loaded, "t", "op", "h2")[0] is True
    path.write_text("{not json")
    with pytest.raises(KernelsmithError, match="unreadable state file"):
        load_state(path)
    with pytest.raises(KernelsmithError):
        normalize_state(["not", "a", "mapping"])


def test_scan_target_api(tmp_path, fixture_repo):
    target = load_target(make_target(tmp_path, fixture_repo))
    result = scan_target(target, prepare_checkout(target, fixture_repo), {"operators": {}})
    assert result.ok and [o.name for o in result.operators] == ["scale"]


def test_scan_suggests_harness_new_for_marks_and_operators_without_one(tmp_path, fixture_repo, capsys):
    yaml_path = make_target(tmp_path, fixture_repo)
    code, doc = _scan_json(capsys, str(yaml_path))
    tips = doc["suggestions"]
    # The TARGET as it was given (a path here: the name would not resolve from this folder).
    new = f"`kernelsmith harness new {yaml_path} NAME`"
    assert any(t.startswith("unharnessed (eng/extra.py:") and new in t for t in tips)
    (tmp_path / "targets" / "fix" / "scale.py").unlink()
    code, doc = _scan_json(capsys, str(yaml_path))
    assert code == 2
    assert any(f"`kernelsmith harness new {yaml_path} scale`" in t for t in doc["suggestions"])
    assert main(["scan", str(yaml_path)]) == 2
    assert "suggest:" in capsys.readouterr().out
