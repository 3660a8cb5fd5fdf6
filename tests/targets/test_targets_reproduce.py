"""Suggested commands work when pasted (issue 41, item 9): scan's and `harness new`'s suggestions
repeat the TARGET and `--checkout` they were given, and report.md's Reproduce lines name the target
as the project's folder finds it and the run's `--checkout` as a placeholder, never an absolute
path of the machine that ran it."""

from __future__ import annotations

import json
import re
import shlex

from targets_fixtures import git, make_run, make_target, write

from kernelsmith.cli import build_parser, main
from kernelsmith.onboard.config import resolve_target
from kernelsmith.paths import cache_dir
from kernelsmith.reproduce import target_arg


def _backticked(text: str, start: str) -> list[str]:
    return [m for m in re.findall(r"`([^`]+)`", text) if m.startswith(start)]


def test_scan_suggests_harness_new_with_the_checkout_and_the_line_works_when_pasted(
        tmp_path, fixture_repo, capsys, monkeypatch):
    yaml_path = make_target(tmp_path, fixture_repo)
    (tmp_path / "targets" / "fix" / "scale.py").unlink()
    monkeypatch.chdir(tmp_path)
    assert main(["scan", "targets/fix.yaml", "--checkout", str(fixture_repo), "--json"]) == 2
    tips = json.loads(capsys.readouterr().out)["suggestions"]
    (new,) = [c for t in tips for c in _backticked(t, "kernelsmith harness new") if " scale " in c + " "]
    assert new == "kernelsmith harness new targets/fix.yaml scale --checkout upstream"
    assert all("--checkout upstream" in c for t in tips for c in _backticked(t, "kernelsmith harness"))
    # Pasted: it writes the harness, and its own next step repeats the checkout too.
    assert main(shlex.split(new)[1:]) == 0
    assert (yaml_path.parent / "fix" / "scale.py").is_file()
    (check,) = _backticked(capsys.readouterr().out, "kernelsmith harness check")
    assert check == "kernelsmith harness check targets/fix.yaml scale --checkout upstream"
    args = build_parser().parse_args(shlex.split(check)[1:])
    assert resolve_target(args.target) == yaml_path.resolve() and args.checkout == "upstream"


def _run(where, yaml_path, checkout, base_sha, **run_fields):
    run = make_run(where, yaml_path, checkout, base_sha, "x = 1\n")
    for name, extra in (("run.json", run_fields), ("result.json", {"winner": {"id": 1, "parent": 0}})):
        data = json.loads((run / name).read_text())
        (run / name).write_text(json.dumps(dict(data, **extra)))
    return run


def _reproduce(report: str) -> list[str]:
    block = report.split("### Reproduce", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return block.strip().splitlines()


def test_report_reproduce_lines_carry_no_runner_path_and_the_checkout_as_a_placeholder(
        tmp_path, fixture_repo, monkeypatch):
    # The bot's repository as a runner clones it, at a temporary absolute path.
    bot_repo = tmp_path / "runner-tmp-clone"
    yaml_path = make_target(bot_repo, fixture_repo)
    git(bot_repo, "init", "-q", "-b", "main")
    run = _run(tmp_path, yaml_path, fixture_repo, git(fixture_repo, "rev-parse", "HEAD"), checkout_given=True)
    assert main(["report", str(run)]) == 0
    optimize, evaluate = _reproduce((run / "report.md").read_text())
    for line in (optimize, evaluate):
        assert str(tmp_path) not in line and "/tmp" not in line
        assert line.split()[2:5] == ["fix", "scale", "--checkout"]
        assert "--checkout <path to your fix checkout>" in line
    assert "--candidate <run dir>/winner/ops.py" in evaluate
    # Pasted in the bot's repository with the placeholders filled in, both parse and find the target.
    monkeypatch.chdir(bot_repo)
    for line in (optimize, evaluate):
        filled = line.replace("<path to your fix checkout>", str(fixture_repo)).replace("<run dir>", str(run))
        args = build_parser().parse_args(shlex.split(filled)[1:])
        assert resolve_target(args.target) == yaml_path.resolve()
        assert args.checkout == str(fixture_repo)


def test_a_run_without_checkout_repeats_none_and_a_run_dir_under_the_folder_is_relative(
        tmp_path, fixture_repo, monkeypatch):
    yaml_path = make_target(tmp_path, fixture_repo)
    cached = cache_dir() / "worktrees" / "fix" / "0123456789ab"
    run = _run(tmp_path, yaml_path, cached, "0" * 40)   # an older run.json: no checkout_given
    monkeypatch.chdir(tmp_path)
    assert main(["report", "run"]) == 0
    optimize, evaluate = _reproduce((run / "report.md").read_text())
    assert "--checkout" not in optimize + evaluate
    assert optimize.startswith("kernelsmith optimize fix scale --seed 0")
    assert evaluate == "kernelsmith evaluate fix scale --candidate run/winner/ops.py"
    # An older run given a folder outside the cache: the placeholder, not that folder.
    run2 = _run(tmp_path / "b", yaml_path, fixture_repo, "0" * 40)
    assert main(["report", str(run2)]) == 0
    lines = _reproduce((run2 / "report.md").read_text())
    assert all("--checkout <path to your fix checkout>" in x for x in lines)


def test_target_arg_never_gives_an_absolute_path(tmp_path):
    repo = tmp_path / "clone"
    write(repo, "ci/kernels.yaml", "")
    write(repo, "targets/a.yaml", "")
    (repo / ".git").mkdir()
    assert target_arg(repo / "targets" / "a.yaml") == "a"
    assert target_arg(repo / "ci" / "kernels.yaml") == "ci/kernels.yaml"
    assert target_arg(tmp_path / "elsewhere" / "targets" / "b.yaml") == "b"
    assert target_arg(tmp_path / "elsewhere" / "c.yaml") == "<path to c.yaml>"


def test_a_target_named_through_targets_is_suggested_with_it(tmp_path, fixture_repo, capsys, monkeypatch):
    make_target(tmp_path, fixture_repo)
    (tmp_path / "targets" / "fix" / "scale.py").unlink()
    monkeypatch.chdir(tmp_path)
    assert main(["--targets", "targets", "scan", "fix", "--checkout", "upstream", "--json"]) == 2
    tips = json.loads(capsys.readouterr().out)["suggestions"]
    new = "kernelsmith --targets targets harness new fix scale --checkout upstream"
    assert any(f"`{new}`" in t for t in tips)
    monkeypatch.chdir(tmp_path / "upstream")   # pasted elsewhere, a bare name would not resolve...
    assert main(shlex.split(new)[1:]) == 2
    monkeypatch.chdir(tmp_path)                # ...from where scan ran, it does
    assert main(shlex.split(new)[1:]) == 0
