"""Attack: a candidate holds the host's memory (8 GB was held with no cap). Each process of the
candidate sandbox has a host memory cap (RLIMIT_DATA, $KERNELSMITH_CANDIDATE_MEMORY), and a
candidate that runs past it is rejected as `out_of_memory`, the cap in the message."""

from pathlib import Path

import pytest

from kernelsmith.errors import ConfigError
from kernelsmith.sandbox import limits

ROOT = Path(__file__).resolve().parents[2]
MINISERVE = ROOT / "examples" / "miniserve"
HOLD = {  # 1.5 GiB, held (module-level list), through Python's allocator and through torch's
    "python": "_HELD.append(bytearray(3 << 29))",
    "torch": "_HELD.append(torch.ones(3 << 27, dtype=torch.float32))",
}


@pytest.mark.parametrize("how", sorted(HOLD))
def test_a_candidate_over_the_cap_is_out_of_memory(tmp_path, monkeypatch, how):
    from kernelsmith.onboard.task import load_task
    from kernelsmith.referee import Referee

    monkeypatch.setenv(limits.MEMORY_ENV, "1G")
    base = (MINISERVE / "miniserve" / "kernels" / "rms_norm.py").read_text()
    body = '    """RMSNorm over the last dimension of x."""\n'
    code = base.replace(body, body + f"    {HOLD[how]}\n", 1)
    code = code.replace("import torch\n", "import torch\n\n_HELD = []\n", 1)
    assert HOLD[how] in code and "_HELD = []" in code
    task = load_task(str(ROOT / "targets" / "demo.yaml"), "rms_norm", checkout=str(MINISERVE))
    with Referee(task, device="interpret", timeout_s=120, workdir=tmp_path / "work") as ref:
        verdict = ref.evaluate(code, candidate_id=5, timing="none")
        honest = ref.evaluate(base, candidate_id=6, timing="none")  # the same worker setup holds the base
    assert verdict.violations == ["out_of_memory"], verdict.feedback()
    assert "capped at 1.0 GiB" in verdict.error and limits.MEMORY_ENV in verdict.error, verdict.error
    assert honest.accepted, honest.feedback()


def test_the_cap_setting():
    assert limits.candidate_memory_bytes({}) == limits.DEFAULT_MEMORY == 16 << 30
    assert limits.candidate_memory_bytes({limits.MEMORY_ENV: "8G"}) == 8 << 30
    assert limits.candidate_memory_bytes({limits.MEMORY_ENV: "1536MiB"}) == 1536 << 20
    assert limits.candidate_memory_bytes({limits.MEMORY_ENV: "none"}) is None
    for bad in ("lots", "-1G", "100M"):
        with pytest.raises(ConfigError, match=r"\$KERNELSMITH_CANDIDATE_MEMORY"):
            limits.candidate_memory_bytes({limits.MEMORY_ENV: bad})
