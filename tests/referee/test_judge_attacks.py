"""Issue 13, finding 3, against real worker processes: a candidate cannot forge its own verdict.

Each forger (tests/referee/forgers/) computes wrong outputs and tries to get an accepting 42x
verdict to the parent anyway: by walking the stack to the answer descriptor and nonce, by writing
forged lines to every open descriptor, by patching the worker's protocol writer and the checks,
and from a double-forked child that writes later. On main (the candidate ran in the process that
held the answer pipe) each was accepted; now the candidate runs in the judge's runner child, which
holds neither the pipe nor a nonce. Both paths are covered: the search's evaluation and the final
re-measurement (search/evaluator.Evaluator.remeasure: new seed, fresh compile).
"""

import time

import pytest
from referee_helpers import CORPUS, demo_task, interpret_referee

from kernelsmith.referee import Referee
from kernelsmith.search.evaluator import Evaluator

FORGERS = sorted((CORPUS / "forgers").glob("*.py"))
WRONG = {"unwritten_output", "incorrect"}  # what the forgers' outputs really are
SEED = 1234


@pytest.fixture(scope="module")
def referee(tmp_path_factory):
    with interpret_referee(tmp_path_factory.mktemp("judge-env"), SEED) as ref:
        yield ref


def _search(ref, code, cid):
    """What the search's evaluator asks of a referee on this device (evaluator._run)."""
    return ref.evaluate(code, candidate_id=cid, timing="none")


def _final(ref, code, cid):
    """The final re-measurement, through the evaluator the search uses."""
    evaluator = Evaluator(demo_task("rms_norm"), None, device="interpret", gpus=[None], seed=SEED,
                          referee_factory=lambda task, **kw: ref)
    data = evaluator.remeasure({"code": code, "id": cid}, SEED + 1)
    from kernelsmith.referee.verdict import Verdict

    return Verdict.from_json(data)


@pytest.mark.parametrize("path", FORGERS, ids=lambda p: p.stem.split("__")[1])
@pytest.mark.parametrize("where", [_search, _final], ids=["search", "final"])
def test_a_forged_verdict_never_reaches_the_parent(referee, path, where):
    verdict = where(referee, path.read_text(), 41)
    assert not verdict.accepted and verdict.geomean_speedup != 42.0, verdict.feedback()
    # Judged on what it computed (wrong), or stopped for talking nonsense on the judge's channel.
    # (Static checks name the introspection too; they never stopped a forged answer.)
    assert set(verdict.violations) & (WRONG | {"protocol"}), verdict.feedback()
    if path.stem.endswith("patch"):
        assert set(verdict.violations) & WRONG  # the judge's comparison is not the one it patched
    if path.stem.endswith("late_fork"):
        from kernelsmith import sandbox

        # The writer's line reached the judge's channel: nonsense there ends the evaluation; inside
        # the sandbox the judge (its PID namespace's init) killed the writer when it ended.
        assert "protocol" in verdict.violations
        killed = "processes the candidate left running were killed" in verdict.details["messages"]
        assert killed or not sandbox.enabled(), verdict.details["messages"]
    time.sleep(1.0)  # a late writer has written by now
    # The next evaluation (a new worker: the rejected one was recycled) is judged as before.
    base = where(referee, None, 42) if where is _search else _search(referee, None, 42)
    assert base.accepted and base.correct and base.violations == [], base.feedback()


PROBE = """
import os, sys
def rms_norm(x, weight, eps=1e-6):
    me = os.getpid()
    parent = os.getppid()
    found = []
    for n in os.listdir("/proc/self/fd"):
        try:
            found.append(os.readlink(f"/proc/self/fd/{n}"))
        except OSError:
            pass
    try:
        open(f"/proc/{parent}/mem", "rb").read(1)
        mem = "readable"
    except OSError as e:
        mem = type(e).__name__
    opened = 0
    try:
        names = os.listdir(f"/proc/{parent}/fd")  # numbers only (the judge's ids own its /proc files)
    except OSError:
        names = []
    for n in names:
        try:
            os.close(os.open(f"/proc/{parent}/fd/{n}", os.O_WRONLY))
            opened += 1
        except OSError:
            pass
    pfd = f"opened{opened}of{len(names)}"
    raise RuntimeError(f"PROBE pid={me} parent={parent} mem={mem} parent_fds={pfd} fds={sorted(found)}")
"""


def test_inside_the_runner_the_judge_cannot_be_read(referee):
    """From candidate code: the judge's memory and descriptors are closed to it, and its own
    descriptors are the channel, the log and /dev/null (no answer pipe)."""
    base = (demo_task("rms_norm").root / demo_task("rms_norm").operator.file).read_text()
    verdict = referee.evaluate(base + PROBE, candidate_id=43, timing="none")
    text = verdict.error or ""
    assert "RuntimeError: PROBE" in text, verdict.feedback()
    line = text[text.index("RuntimeError: PROBE"):].splitlines()[0]
    assert "mem=readable" not in line and "parent_fds=opened0of" in line, line
    fds = line.split(" fds=")[1]
    assert "pipe:" in fds and "socket:" in fds and fds.count("socket:") == 1, line


def test_a_runner_killed_mid_call_is_a_crash_verdict(referee, tmp_path):
    code = (demo_task("rms_norm").root / demo_task("rms_norm").operator.file).read_text() + (
        "\n\ndef rms_norm(x, weight, eps=1e-6):\n"
        "    import os, signal\n    os.kill(os.getpid(), signal.SIGSEGV)\n")
    verdict = referee.evaluate(code, candidate_id=44, timing="none")
    assert verdict.reason == "crash" and "SIGSEGV" in (verdict.error or ""), verdict.feedback()


def test_with_no_sandbox_the_judge_and_runner_still_split(tmp_path):
    """`--no-sandbox`: no namespaces, the same two processes; the forgers still fail, the base and
    an honest rewrite are still accepted, and the runner still cannot open the judge's descriptors."""
    from kernelsmith import sandbox

    sandbox.disable()
    try:
        with Referee(demo_task("rms_norm"), device="interpret", seed=SEED, timeout_s=90,
                     workdir=tmp_path / "work") as ref:
            for path in FORGERS:
                v = _search(ref, path.read_text(), 45)
                assert not v.accepted and set(v.violations) & (WRONG | {"protocol"}), path.name
            time.sleep(1.0)
            honest = (CORPUS / "honest" / "rms_norm__num_warps.py").read_text()
            assert _search(ref, honest, 46).accepted
            base = (demo_task("rms_norm").root / demo_task("rms_norm").operator.file).read_text()
            v = ref.evaluate(base + PROBE, candidate_id=47, timing="none")
            line = (v.error or "")[(v.error or "").index("RuntimeError: PROBE"):].splitlines()[0]
            assert "mem=readable" not in line and "parent_fds=opened0of" in line, line
    finally:
        sandbox.enable()


def test_a_patched_integrity_report_is_only_a_claim(referee):
    """What the runner says about integrity is a claim: this forger hides its own patch of the
    timing loop from it (nothing here rejects it on CPU, where nothing is timed); on the GPU the
    judge's own base timing catches the lie (test_gpu_timing_forgery_is_caught)."""
    code = (CORPUS / "forgers" / "gpu" / "rms_norm__forge_base_times.py").read_text()
    verdict = _search(referee, code, 48)
    assert verdict.correct and not verdict.timed, verdict.feedback()


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["search", "final"])
def test_gpu_timing_forgery_is_caught(how):
    """H200: a runner reporting the base 3x slower than it ran is `forged_timing` (check b), in the
    search's staged timing and in the final full re-measurement."""
    code = (CORPUS / "forgers" / "gpu" / "rms_norm__forge_base_times.py").read_text()
    with Referee(demo_task("rms_norm"), device="cuda", seed=SEED) as ref:
        if how == "search":
            verdict = ref.evaluate(code, candidate_id=49, timing="staged", contender_at=1.0)
        else:
            evaluator = Evaluator(demo_task("rms_norm"), None, device="cuda", gpus=[None], seed=SEED,
                                  referee_factory=lambda task, **kw: ref)
            from kernelsmith.referee.verdict import Verdict

            verdict = Verdict.from_json(evaluator.remeasure({"code": code, "id": 49}, SEED + 1))
        assert not verdict.accepted and "forged_timing" in verdict.violations, verdict.feedback()
        honest = (CORPUS / "honest" / "rms_norm__num_warps.py").read_text()
        fine = ref.evaluate(honest, candidate_id=50, timing="full")
        assert fine.accepted, fine.feedback()
        for sh in fine.shapes:  # no false alarm: the judge's base and the runner's agree
            assert sh["baseline_ms"] <= sh["judge_base_ms"] * 1.25 + 0.003, sh
