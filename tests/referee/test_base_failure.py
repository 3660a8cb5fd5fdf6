"""When the base itself fails, `evaluate` and `optimize` exit 2 and say the harness or the
environment is at fault: the failing check, the shape, the likely fix (issue 14, item 5)."""

import pytest
from tiny_project import FP32_REFERENCE, PAGED_CACHE, tiny_task

from kernelsmith.cli import main
from kernelsmith.referee.checks.diagnose import NOT_A_CANDIDATE, base_failure, likely_fix

NO_INPLACE = PAGED_CACHE.replace('INPLACE = ["cache"]', "INPLACE = []")


@pytest.mark.parametrize("reason, text, words", [
    ("dtype_mismatch", "", "float32"),
    ("crash", "RuntimeError: The size of tensor a (21) must match the size of tensor b (22)", "seed"),
    ("import_error", "RuntimeError: 0 active drivers ([]). There should only be one.", "driver stand-in"),
    ("unwritten_output", "", "INPLACE"),
    ("crash", "NotImplementedError: TODO: write the reference", "not written"),
    ("input_mutation", "", "OUTPUTS"),
    # A synchronising entry (Liger's cross_entropy, `.item()` between kernels) on a busy H100.
    ("forged_timing", "the runner reports the base at 0.6030 ms per call; the judge measures it at 0.3929 "
     "ms [runner's base samples 0.4541-1.1466 ms over 200, its candidate's median 0.5973 ms, late "
     "repetitions it timed again / kept: 203 / 203; the judge's own base timed again now: 0.4571 ms "
     "(20 / 20)]", "waits for the device inside every call"),
    ("forged_timing", "late repetitions it timed again / kept: 3 / 0;", "nothing else uses the GPU"),
    ("forged_timing", "late repetitions it timed again / kept: 0 / 0;", "disagree"),
])
def test_likely_fix_table(reason, text, words):
    assert words in likely_fix(reason, text)


def test_base_failure_names_check_shape_and_fix():
    text = base_failure({"reason": "unwritten_output", "violations": ["unwritten_output"],
                         "details": {"messages": ["shape d=8 trial 0 cache: 3 of 40 elements are NaN"],
                                     "failed_shape": {"d": 8, "dtype": "float16"}}})
    assert NOT_A_CANDIDATE in text and "check: unwritten_output" in text
    assert "shape: d=8,dtype=float16" in text and "INPLACE" in text


def test_evaluate_exits_2_when_the_base_fails(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    task = tiny_task(tmp_path, "fill_slots", "fill_slots", NO_INPLACE)
    code = main(["evaluate", str(task.target.path), "fill_slots", "--checkout", str(task.root),
                 "--device", "interpret"])
    err = capsys.readouterr().err
    assert code == 2
    assert NOT_A_CANDIDATE in err and "check: unwritten_output" in err
    assert "shape: d=8,dtype=float16" in err and "list the output in INPLACE" in err


def test_evaluate_of_a_candidate_checks_the_base_too(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    task = tiny_task(tmp_path, "fill_slots", "fill_slots", NO_INPLACE)
    cand = tmp_path / "cand.py"
    cand.write_text(task.base_code + "\n# a copy\n")
    code = main(["evaluate", str(task.target.path), "fill_slots", "--checkout", str(task.root),
                 "--device", "interpret", "--candidate", str(cand)])
    assert code == 2 and NOT_A_CANDIDATE in capsys.readouterr().err


def test_evaluate_of_a_sound_harness_still_exits_0(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    task = tiny_task(tmp_path, "scale", "scale", FP32_REFERENCE)
    assert main(["evaluate", str(task.target.path), "scale", "--checkout", str(task.root),
                 "--device", "interpret"]) == 0


def test_optimize_exits_2_when_the_base_fails(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("KERNELSMITH_CACHE", str(tmp_path / "cache"))
    task = tiny_task(tmp_path, "fill_slots", "fill_slots", NO_INPLACE)
    code = main(["optimize", str(task.target.path), "fill_slots", "--checkout", str(task.root),
                 "--device", "interpret", "--budget", "1", "--mutator", "params", "--out",
                 str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert NOT_A_CANDIDATE in err and "check: unwritten_output" in err and "INPLACE" in err
