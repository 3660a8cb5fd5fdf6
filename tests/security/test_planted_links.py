"""Issue 38 item 1: the referee's parent never writes through a link a candidate planted.

A candidate (real worker, real sandbox) plants symlinks at every path under its referee folder
where the parent used to write the next candidates' sources, and tries the parent's own folders
too. The next candidates are written and judged; the file the links point at is unchanged.
"""

from referee_helpers import DEMO_YAML, MINISERVE

from kernelsmith.onboard.task import load_task
from kernelsmith.referee import Referee

PLANT = '''
import os as _os
from pathlib import Path as _Path
_here = _Path.cwd()  # the worker's work folder, the one folder the sandbox lets it write
for _n in range(1, 40):
    for _top in (_here / "candidates", _here.parent / "sources", _here.parent / "candidates"):
        _d = _top / f"c{_n}"
        try:
            _d.mkdir(parents=True, exist_ok=True)
            _os.symlink(VICTIM, _d / "rms_norm.py")
        except OSError:
            pass
for _path in (_here / "zygote.log", _here.parent / "logs" / "zygote.log"):
    try:
        _os.symlink(VICTIM, _path)
    except OSError:
        pass
'''


def test_a_later_candidates_source_never_lands_where_an_earlier_one_pointed(tmp_path):
    victim = tmp_path / "victim.pth"
    victim.write_text("precious\n")
    base = (MINISERVE / "miniserve" / "kernels" / "rms_norm.py").read_text()
    planter = base + f"\nVICTIM = {str(victim)!r}\n" + PLANT
    task = load_task(str(DEMO_YAML), "rms_norm", checkout=str(MINISERVE))
    with Referee(task, device="interpret", timeout_s=120, workdir=tmp_path / "ref") as ref:
        first = ref.evaluate(planter, candidate_id=1, timing="none")
        # The planter may be rejected for its file writes; what matters is what comes next.
        assert first.reason != "malformed_proposal"
        planted = [p for p in (tmp_path / "ref").rglob("*") if p.is_symlink()]
        assert planted, "the candidate could plant nothing in its work folder (the test proves nothing)"
        for cid in (2, 3, 4):
            verdict = ref.evaluate(base + f"\n# candidate {cid}\n", candidate_id=cid, timing="none")
            assert victim.read_text() == "precious\n", f"candidate {cid}'s source went through a link"
            assert verdict.accepted, verdict.feedback()
        # The parent's own folders (sources, logs) could not be written from inside at all.
        assert not any(p.is_relative_to(ref.sources) or p.is_relative_to(ref.logs) for p in planted)
    assert victim.read_text() == "precious\n"
