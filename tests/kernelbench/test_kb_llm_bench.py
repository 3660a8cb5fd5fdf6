"""`bench --mutator llm` against a scripted model, then `export` of the run it made."""

import argparse
import importlib.util
import json
from pathlib import Path

from kernelsmith.commands import bench as bench_cmd
from kernelsmith.export import export_runs
from kernelsmith.kernelbench.problems import PROBLEMS_DIR, SOLUTIONS_DIR

ROOT = Path(__file__).resolve().parents[2]


def _scripted_llm():
    # The engine's scripted OpenAI-compatible server (tests/search/llm_server.py), loaded by path.
    path = ROOT / "tests" / "search" / "llm_server.py"
    spec = importlib.util.spec_from_file_location("_ks_test_llm_server", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ScriptedLLM


def test_llm_backend_is_scored_and_its_run_exported(tmp_path, monkeypatch, capsys):
    answer = ("ModelNew with one elementwise Triton kernel:\n\n```python\n"
              + (SOLUTIONS_DIR / "1_Swish.py").read_text() + "```\n")
    with _scripted_llm()([{"content": answer}], default={"content": "no idea"}) as srv:
        monkeypatch.setenv("KERNELSMITH_LLM_BASE_URL", srv.base_url)
        monkeypatch.setenv("KERNELSMITH_LLM_MODEL", "scripted")
        monkeypatch.setenv("KERNELSMITH_LLM_API_KEY", "sk-test-key-for-tests")
        parser = argparse.ArgumentParser()
        bench_cmd.register(parser.add_subparsers())
        out = tmp_path / "bench"
        args = parser.parse_args(["bench", str(PROBLEMS_DIR), "--mutator", "llm", "--budget", "1",
                                  "--device", "interpret", "--only", "1_Swish", "--out", str(out),
                                  "--save", str(tmp_path / "bench.json")])
        assert args.func(args) == 0
    printed = capsys.readouterr()
    assert printed.out.startswith("| task | correct |")  # the search's progress went to stderr
    assert "| 1_Swish | yes |" in printed.out and "run directory" in printed.err
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["metrics"]["correctness_rate"] == 1.0 and report["tasks"][0]["reason"] is None
    first_prompt = srv.requests[0]["json"]["messages"][1]["content"]
    assert "class Model" in first_prompt and "ModelNew = Model" in first_prompt
    assert (out / "solutions" / "1_Swish.py").read_text() == (SOLUTIONS_DIR / "1_Swish.py").read_text()

    records_path = tmp_path / "sft.jsonl"
    summary = export_runs([out / "1_Swish" / "run"], "sft", records_path)
    records = [json.loads(line) for line in records_path.read_text().splitlines()]
    assert summary["counts"]["first"] == 1 and len(records) == 1
    assert records[0]["messages"][2]["content"] == answer
    assert records[0]["messages"][1]["content"] == first_prompt
    assert records[0]["meta"]["mutator"] == "llm"
