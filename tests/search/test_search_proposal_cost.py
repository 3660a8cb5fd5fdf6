"""dev/probes/proposal_cost.py replays a finished params run's proposal steps and prints their cost."""

from __future__ import annotations

import os
import subprocess
import sys

from test_search_loop import ROOT, _run, fake_gpu  # noqa: F401 - fake_gpu is a fixture

PROBES = ROOT / "dev" / "probes"


def test_proposal_cost_prints_a_row_per_band_with_its_parts_and_asks(tmp_path, fake_gpu):  # noqa: F811
    _run(tmp_path, budget=24)
    out = subprocess.run([sys.executable, str(PROBES / "proposal_cost.py"), str(tmp_path / "run")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})  # the private cache too
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    header = "| rows | read rows s | population s | sync s | propose s | total s | sampler asks |"
    assert lines[0] == header
    band = lines[2].split("|")[1:-1]
    assert band[0].strip() == "0-59" and len(band) == 7
    assert all(float(x) >= 0 for x in band[1:6]) and float(band[6]) >= 1  # it asked the sampler
