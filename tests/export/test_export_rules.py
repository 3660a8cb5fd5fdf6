"""Export: exactly the steps the rules keep, prompts as the llm mutator builds them, summary."""

import argparse
import json

from kernelsmith.commands import export as export_cmd
from kernelsmith.export import export_runs, read_run, task_for_run
from kernelsmith.export.steps import select_steps
from kernelsmith.search.mutators.llm import LLMMutator
from kernelsmith.search.prompt import build_messages


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_sft_keeps_first_correct_and_faster_steps(timed_run, tmp_path):
    run, ids = timed_run
    out = tmp_path / "sft.jsonl"
    summary = export_runs([run], "sft", out)
    records = _lines(out)
    kept = [(r["meta"]["parent_id"], r["meta"]["child_id"], r["meta"]["kind"]) for r in records]
    assert kept == [(ids["base"], ids["first"], "first"), (ids["first"], ids["improve"], "improve")]
    # same_as_first differs from first by a comment only (a duplicate); slow_first (0.8x) made the
    # kernel slower than the base: not an improving revision.
    assert summary["dropped"] == {"duplicate": 2, "malformed": 1, "noisy": 1,
                                  "not_faster": 2, "parent_rejected": 1, "rejected": 1}
    assert summary["counts"]["first"] == 1 and summary["counts"]["improve"] == 1
    improve = records[1]
    assert abs(improve["meta"]["gain"] - 1.30 / 1.10) < 1e-9
    assert improve["meta"]["mutator"] == "llm"
    # Written beside the file, and the same as returned.
    assert json.loads((tmp_path / "sft.jsonl.summary.json").read_text()) == summary
    assert summary["gains"]["timed_records"] == 2 and summary["gains"]["max"] == 1.30 / 1.10


def test_sft_messages_are_the_mutator_prompt_plus_the_edit(timed_run, tmp_path):
    run, ids = timed_run
    out = tmp_path / "sft.jsonl"
    export_runs([run], "sft", out)
    record = _lines(out)[1]
    run_json, rows = read_run(run)
    task = task_for_run(run_json, run, rows)
    by_id = {r["id"]: r for r in rows}
    parent, child = by_id[ids["first"]], by_id[ids["improve"]]
    # What the llm mutator sends for this parent on a CUDA run (its own call, its own device wording).
    mutator = LLMMutator(task, None, device="cuda")
    expected = build_messages(task, parent, [by_id[ids["first_rejected"]]], parent.get("feedback"),
                              device_hint=mutator.device_hint)
    assert record["messages"][:2] == expected
    assert [m["role"] for m in record["messages"]] == ["system", "user", "assistant"]
    assert record["messages"][2]["content"] == child["response"]
    assert "num_warps=8" in record["messages"][2]["content"]
    assert parent["feedback"].splitlines()[0] in record["messages"][1]["content"]


def test_interpreter_run_keeps_only_first_correct_steps(interpreter_run, tmp_path):
    run, ids = interpreter_run
    out = tmp_path / "cpu.jsonl"
    summary = export_runs([run], "sft", out)
    assert [r["meta"]["child_id"] for r in _lines(out)] == [ids["first"]]
    assert summary["dropped"] == {"rejected": 1, "untimed": 1}
    assert summary["gains"]["timed_records"] == 0
    assert _lines(out)[0]["meta"]["gain"] is None


def test_rl_best_step_per_trajectory(timed_run, tmp_path):
    run, ids = timed_run
    out = tmp_path / "rl.jsonl"
    summary = export_runs([run], "rl", out)
    records = _lines(out)
    assert [r["meta"]["child_id"] for r in records] == [ids["first"], ids["improve"]]
    rec = records[1]
    assert rec["parent"]["id"] == ids["first"] and rec["parent"]["speedup"] == 1.10
    assert "speedup" in rec["reward"]["definition"] and rec["reward"]["device"] == "cuda"
    assert rec["task"]["op"] == "rms_norm" and rec["task"]["entry"] == "rms_norm"
    assert rec["task"]["compared"] == {"inputs": None, "positions": None, "call": False}
    assert [m["role"] for m in rec["prompt"]] == ["system", "user"]
    assert summary["rules"]["rl_top_per_trajectory"] == 1


def test_a_first_step_that_made_the_kernel_slower_is_in_neither_file(timed_run, tmp_path):
    run, ids = timed_run
    _, rows = read_run(run)
    steps, dropped = select_steps(rows)
    assert ids["slow_first"] not in {s.child["id"] for s in steps} and dropped["not_faster"] == 2
    for fmt in ("sft", "rl"):
        export_runs([run], fmt, tmp_path / f"{fmt}.jsonl")
        children = [r["meta"]["child_id"] for r in _lines(tmp_path / f"{fmt}.jsonl")]
        assert ids["slow_first"] not in children and ids["first"] in children


def test_rl_top_one_drops_weaker_steps_on_a_path(timed_run):
    run, ids = timed_run
    _, rows = read_run(run)
    steps, _ = select_steps(rows)
    from kernelsmith.export.steps import best_per_trajectory

    # The path base -> first -> improve -> noisy holds two kept steps; top 1 keeps the better one.
    best = best_per_trajectory(rows, steps, top=1)
    chosen = {s.child["id"] for s in best}
    assert ids["improve"] in chosen
    # `first` is still the best step of the path through `not_faster`.
    assert ids["first"] in chosen


def test_min_gain_and_several_runs(timed_run, interpreter_run, tmp_path):
    (run, _), (cpu, _) = timed_run, interpreter_run
    out = tmp_path / "both.jsonl"
    summary = export_runs([run, cpu], "sft", out, min_gain=1.25)
    kinds = [r["meta"]["kind"] for r in _lines(out)]
    assert kinds.count("improve") == 0  # 1.18x over the parent is below 1.25
    # The GPU run's first steps (1.10x, 1.09x, 0.8x over the base) are below 1.25 as well.
    assert summary["dropped"]["not_faster"] == 5
    assert [s["records"] for s in summary["sources"]] == [0, 1]
    assert summary["dropped"]["duplicate"] == 1
    # At the default gain the CPU run's first step is the same edit of the same base as the GPU
    # run's: a duplicate.
    summary = export_runs([run, cpu], "sft", tmp_path / "default.jsonl")
    assert [s["records"] for s in summary["sources"]] == [2, 0]
    assert summary["dropped"]["duplicate"] == 3


def test_cli_prints_summary(timed_run, tmp_path, capsys):
    run, _ = timed_run
    parser = argparse.ArgumentParser()
    export_cmd.register(parser.add_subparsers())
    out = tmp_path / "x.jsonl"
    args = parser.parse_args(["export", str(run), "--format", "sft", "-o", str(out)])
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "2 sft records" in text and "1 first steps, 1 improving steps" in text
    assert out.is_file() and (tmp_path / "x.jsonl.summary.json").is_file()


def test_bad_run_dir_is_a_config_error(tmp_path, capsys):
    from kernelsmith.cli import main

    assert main(["export", str(tmp_path), "--format", "sft", "-o", str(tmp_path / "o.jsonl")]) == 2
    assert "not a run directory (no run.json)" in capsys.readouterr().err
    (tmp_path / "run.json").write_text("{}")
    assert main(["export", str(tmp_path), "--format", "rl", "-o", str(tmp_path / "o.jsonl")]) == 2
    assert "no archive.sqlite" in capsys.readouterr().err
