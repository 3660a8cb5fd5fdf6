"""Issue 38 item 4: no runner that ran one candidate's code runs another's.

An accepted, correct candidate plants an implant in the process that ran it: its import patches
the runner's session class so that whatever is loaded later runs as the base. On a runner kept
for the next candidate, a wrong kernel then passed as the base. Every candidate now gets a fresh
runner, so the wrong kernel is judged on its own outputs.
"""

from referee_helpers import DEMO_YAML, MINISERVE

from kernelsmith.onboard.task import load_task
from kernelsmith.referee import Referee

# Registered at import as a finalizer of this module object: it strikes when the runner lets go
# of the module (the next candidate's load, before that load's snapshot of the referee's classes).
# Its text is assembled at run time, so no static rule sees a name.
_PATCH = """
import sys, weakref
def strike():
    cls = sys.modules["kernelsmith.referee.proc.runner"].RunnerSession
    original = cls.named
    def named(self, name, _original=original):
        return _original(self, "base" if name == "cand" else name)
    cls.named = named
weakref.finalize(sys.modules[me], strike)
"""

IMPLANT = f'''
exec(bytes.fromhex("{_PATCH.encode().hex()}").decode(), {{"me": __name__}})
'''


def test_an_implant_in_an_accepted_candidate_does_not_judge_the_next_one(tmp_path):
    base = (MINISERVE / "miniserve" / "kernels" / "rms_norm.py").read_text()
    implanted = base + IMPLANT
    # Wrong on every row: the launch passes a far larger eps than the caller's.
    wrong = base.replace("out.stride(0), n_cols, eps,", "out.stride(0), n_cols, eps + 0.5,", 1)
    assert wrong != base
    task = load_task(str(DEMO_YAML), "rms_norm", checkout=str(MINISERVE))
    with Referee(task, device="interpret", timeout_s=120, workdir=tmp_path / "ref") as ref:
        first = ref.evaluate(implanted, candidate_id=1, timing="none")
        assert first.accepted, first.feedback()  # correct and clean as far as the monitor can see
        second = ref.evaluate(wrong, candidate_id=2, timing="none")
        assert not second.accepted and "incorrect" in second.violations, second.feedback()
        assert first.details["runner"]["pid"] != second.details["runner"]["pid"]


def test_only_kernelsmiths_own_renderings_share_a_runner_and_the_final_check_gets_a_new_one(tmp_path):
    base = (MINISERVE / "miniserve" / "kernels" / "rms_norm.py").read_text()
    task = load_task(str(DEMO_YAML), "rms_norm", checkout=str(MINISERVE))
    with Referee(task, device="interpret", timeout_s=120, workdir=tmp_path / "ref") as ref:
        def pid(cid, **kw):
            verdict = ref.evaluate(base + f"\n# {cid}\n", candidate_id=cid, timing="none", **kw)
            assert verdict.accepted, verdict.feedback()
            return verdict.details["runner"]["pid"]

        # Launch values set by kernelsmith (params, sweep): no code the base lacks, runner kept.
        a, b = pid(1, rendered=True), pid(2, rendered=True)
        assert a == b
        # The final re-measurement never shares a runner with another candidate.
        c = pid(3, rendered=True, fresh_compile=True)
        assert c != b
        # A model's (or any other) code leaves a runner that judges nothing more.
        d = pid(4)
        e = pid(5, rendered=True)
        assert len({c, d, e}) == 3
