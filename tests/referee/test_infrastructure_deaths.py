"""Issue 39 item 4: the referee's own processes dying is not the candidate's verdict.

A judge killed from outside, or a spare worker that died with its fork server, used to become an
innocent candidate's `crash`, for good. Now the candidate is judged again on a new worker, and the
verdict says what died and how.
"""

import os
import signal
import time

from referee_helpers import DEMO_YAML, MINISERVE

from kernelsmith.onboard.task import load_task
from kernelsmith.referee import Referee

BASE = (MINISERVE / "miniserve" / "kernels" / "rms_norm.py").read_text()


def _task():
    return load_task(str(DEMO_YAML), "rms_norm", checkout=str(MINISERVE))


def test_a_judge_killed_from_outside_is_judged_again_not_recorded_as_a_crash(tmp_path):
    with Referee(_task(), device="interpret", timeout_s=120, workdir=tmp_path / "ref", prefork=False) as ref:
        ref.start()
        os.kill(ref._worker.proc.pid, signal.SIGKILL)
        time.sleep(0.2)
        verdict = ref.evaluate(BASE + "\n# innocent\n", candidate_id=1, timing="none")
        assert verdict.accepted, verdict.feedback()
        assert any("judged again after" in m and "SIGKILL" in m for m in verdict.details["messages"])


def test_a_spare_that_died_with_its_fork_server_is_not_used(tmp_path):
    with Referee(_task(), device="interpret", timeout_s=120, workdir=tmp_path / "ref", prefork=True) as ref:
        assert ref.evaluate(BASE + "\n# 1\n", candidate_id=1, timing="none").accepted
        assert ref._spare is not None
        spare = ref._spare[0]
        os.kill(spare.proc.pid, signal.SIGKILL)  # as when its fork server is killed
        ref._zygote.close()
        time.sleep(0.2)
        ref._recycle()  # the next evaluation takes the spare, as after a rejection
        verdict = ref.evaluate(BASE + "\n# 2\n", candidate_id=2, timing="none")
        assert verdict.accepted, verdict.feedback()
        assert not any("judged again" in m for m in verdict.details.get("messages", []))
