"""Isolation: crashes, hangs and secrets stay inside the worker; the caller gets a verdict."""

import json

import pytest
from referee_helpers import CORPUS, MINISERVE, demo_task

from kernelsmith.cli import main as cli_main
from kernelsmith.referee import Referee


def test_base_is_accepted_with_per_shape_details(referees):
    verdict = referees("rms_norm").evaluate(None)
    assert verdict.accepted and verdict.correct and verdict.reason is None
    assert not verdict.timed and verdict.geomean_speedup is None
    assert verdict.device["name"].startswith("Triton interpreter") and verdict.eval_s > 0
    assert [s["shape"]["dtype"] for s in verdict.shapes] == ["float16", "float32"]
    assert all(s["bitwise_identical"] and s["max_abs_err"] < 1e-2 for s in verdict.shapes)
    # Each shape's correctness seconds, within the verdict's own.
    assert 0 < sum(s["check_s"] for s in verdict.shapes) <= verdict.eval_s
    assert len(verdict.fresh_shapes) == 2


def test_hang_times_out_and_the_worker_is_replaced():
    hang = (CORPUS / "cheats" / "silu_and_mul__hang.py").read_text()
    honest = (CORPUS / "honest" / "silu_and_mul__block_warps.py").read_text()
    # The limit covers a request, not the worker's boot (Referee._ready waits for that): an honest
    # candidate's is 0.6 s here, and the hang spins a core until the limit.
    with Referee(demo_task("silu_and_mul"), device="interpret", timeout_s=8) as ref:
        verdict = ref.evaluate(hang, candidate_id=1)
        assert verdict.reason == "timeout" and not verdict.accepted
        assert "process group killed" in verdict.error
        assert ref.evaluate(honest, candidate_id=2).accepted
        assert ref.workers_started >= 2 and ref._worker.forked  # replaced by a fork of the zygote


@pytest.mark.parametrize("zygote", [True, False], ids=["forked", "spawned"])
def test_candidates_see_no_secrets(monkeypatch, zygote):
    secrets = {"GITHUB_TOKEN": "ghs_" + "x" * 36, "KERNELSMITH_TOKEN": "t", "OPENAI_API_KEY": "sk-abc",
               "KERNELSMITH_LLM_API_KEY": "k", "MY_SERVICE_SECRET": "s",
               "LOOKS_HARMLESS": "github_pat_" + "y" * 30}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("KS_VISIBLE_MARKER", "1")
    spy = (MINISERVE / "miniserve" / "kernels" / "rms_norm.py").read_text().replace(
        '    """RMSNorm over the last dimension of x."""\n',
        '    """RMSNorm over the last dimension of x."""\n'
        '    import os\n    raise RuntimeError("ENV:" + ",".join(sorted(os.environ)))\n')
    with Referee(demo_task("rms_norm"), device="interpret", timeout_s=45, zygote=zygote) as ref:
        verdict = ref.evaluate(spy, candidate_id=3)
        assert ref._worker is None  # recycled after the crash
    assert verdict.reason == "crash" and "ENV:" in verdict.error
    seen = verdict.error.split("RuntimeError: ENV:")[1].split()[0]
    assert "KS_VISIBLE_MARKER" in seen and "PATH" in seen
    for name in secrets:
        assert name not in seen


def test_bad_requests(referees):
    ref = referees("silu_and_mul")
    assert ref.evaluate(None, candidate_id=5).accepted
    worker = ref._worker
    assert ref.evaluate("   \n", candidate_id=4).reason == "malformed_proposal"
    assert ref._worker is worker  # it never reached the worker, which is kept
    with pytest.raises(ValueError):
        ref.evaluate(None, timing="fast")


def test_per_call_seed_draws_other_inputs(referees):
    """A re-measurement with new inputs can reuse the Referee: the seed is per call."""
    ref = referees("rms_norm")
    errs = [[s["max_abs_err"] for s in ref.evaluate(None, candidate_id=6, seed=seed).shapes]
            for seed in (1, 2, 1)]
    assert errs[0] == errs[2] != errs[1]


def test_evaluate_command_exit_codes(capsys, tmp_path):
    argv = ["evaluate", "demo", "silu_and_mul", "--checkout", str(MINISERVE), "--device", "interpret"]
    assert cli_main(["--targets", str(MINISERVE.parents[1] / "targets"), *argv, "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["accepted"] and verdict["timed"] is False and verdict["geomean_speedup"] is None
    assert all(s["check_s"] > 0 for s in verdict["shapes"])
    cheat = CORPUS / "cheats" / "silu_and_mul__noop.py"
    targets = ["--targets", str(MINISERVE.parents[1] / "targets")]
    assert cli_main([*targets, *argv, "--candidate", str(cheat)]) == 1
    out = capsys.readouterr().out
    assert "REJECTED" in out and "unwritten_output" in out and "No timing was done" in out
    assert cli_main([*argv, "--candidate", str(tmp_path / "missing.py")]) == 2
    assert cli_main(["evaluate", "demo", "no_such_op", "--checkout", str(MINISERVE)]) == 2


def test_a_rendered_candidates_wrong_answer_keeps_the_worker_a_models_does_not():
    """The params mutator's and the sweep's candidates are the base with launch values set by
    kernelsmith (`rendered`): a wrong answer among them (the router's blocks below its expert count)
    says nothing about the worker, which the judge checked after it as after every evaluation, so
    the next candidate is judged in the same worker (a replacement took 3.5-4 s on the H200). The
    same wrong code from a model, or a rendered candidate that crashed, gets a fresh worker."""
    base = (MINISERVE / "miniserve" / "kernels" / "silu_and_mul.py").read_text()
    wrong = base.replace("* up\n", "* up * 1.5\n")
    assert wrong != base
    honest = (CORPUS / "honest" / "silu_and_mul__block_warps.py").read_text()
    with Referee(demo_task("silu_and_mul"), device="interpret", timeout_s=60) as ref:
        verdict = ref.evaluate(wrong, candidate_id=1, rendered=True)
        assert verdict.reason == "incorrect" and verdict.violations == ["incorrect"]
        worker = ref._worker
        assert worker is not None
        assert ref.evaluate(honest, candidate_id=2, rendered=True).accepted
        assert ref._worker is worker  # judged in the same worker, and judged right
        assert ref.evaluate(wrong, candidate_id=3).reason == "incorrect"  # a model's: recycled
        assert ref._worker is None
        assert ref.evaluate(honest, candidate_id=4, rendered=True).accepted
        crash = base.replace("    d = x.shape[-1] // 2\n", "    raise RuntimeError('boom')\n")
        assert crash != base
        assert ref.evaluate(crash, candidate_id=5, rendered=True).reason == "crash"
        assert ref._worker is None
