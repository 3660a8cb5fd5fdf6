"""scripts/landscape_sim.py replays a finished sweep as a landscape and runs the search against it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from test_search_loop import ROOT, _run, fake_gpu  # noqa: F401 - fake_gpu is a fixture

from kernelsmith.search.archive import Archive


def test_a_sweep_replayed_as_a_landscape_gives_each_seeds_evaluations_to_95_percent(tmp_path, fake_gpu):  # noqa: F811
    _run(tmp_path, name="sweep", mutator="grid", command="sweep", budget=None)
    cmd = [sys.executable, str(ROOT / "scripts" / "landscape_sim.py"), "--target", "demo",
           "--op", "silu_and_mul", "--archive", str(tmp_path / "sweep" / "archive.sqlite"),
           "--seeds", "0-1", "--budget", "30"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERNELSMITH_TARGETS": str(ROOT / "targets")}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    # Every single config the sweep judged is a point (not the base, the landscape's 1.0x, nor the
    # per-shape table a sweep measures after its grid).
    with Archive(tmp_path / "sweep" / "archive.sqlite") as a:
        singles = [c for c in a.all() if c.mutator == "grid" and not (c.params or {}).get("table")]
        tables = [c for c in a.all() if (c.params or {}).get("table")]
    points = int(re.search(r"^landscape: (\d+) configs, best ([\d.]+)x", text, re.M).group(1))
    assert points == len(singles) == 65 and len(tables) == 1
    seeds = re.findall(r"^seed (\d): (\d+) evaluations, ([\d.]+) referee-s$", text, re.M)
    assert [s[0] for s in seeds] == ["0", "1"], text[-2000:]
    assert all(1 <= int(n) <= 30 and float(sec) > 0 for _, n, sec in seeds)
    assert "missed at 0 of 2 seeds" in text and "outside the landscape" not in text
