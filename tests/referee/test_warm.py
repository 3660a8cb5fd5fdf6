"""referee/proc/warm.py: fork servers started while a run sets up, adopted by the Referee made later for
the same device and GPU; what no Referee takes is closed and its folder removed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from referee_helpers import MINISERVE, ROOT, demo_task

from kernelsmith.cli import main
from kernelsmith.referee import Referee
from kernelsmith.referee.proc import warm


@pytest.fixture(autouse=True)
def _nothing_left():
    warm.discard()
    yield
    warm.discard()


def test_a_referee_adopts_the_warm_fork_server_of_its_device_and_judges_as_before():
    warm.warm("interpret", [None])
    assert warm.waiting() == 1
    with Referee(demo_task("silu_and_mul"), device="interpret", seed=3, timeout_s=120) as ref:
        assert warm.waiting() == 0 and ref._zygote is not None
        assert (ref.logs / "zygote.log").exists()  # the warm fork server's log, beside its work folder
        code = (MINISERVE / "miniserve" / "kernels" / "silu_and_mul.py").read_text()
        v = ref.evaluate(code, candidate_id=1, timing="none")
        assert v.accepted, v.violations
        # Its boot began with a fork: the imports were paid before the Referee existed.
        assert "import torch" not in ref.boot_phases and "fork" in ref.boot_phases
        folder = ref.workdir.parent  # the referee folder: work, sources, logs
    assert not folder.exists()
    # Another device (or GPU) does not take it; a Referee with a folder of its own does not either.
    warm.warm("interpret", [None])
    with Referee(demo_task("silu_and_mul"), device="interpret", seed=3, workdir=folder.parent / "own",
                 timeout_s=120):
        assert warm.waiting() == 1


def test_what_no_referee_takes_is_closed_and_removed():
    warm.warm("interpret", [None])
    (tmp, zygote), = list(warm._WARM.values())
    warm.discard()
    assert warm.waiting() == 0 and zygote.proc.poll() is not None and not Path(tmp.name).exists()


def test_a_search_adopts_its_warm_fork_server_and_leaves_none(tmp_path, monkeypatch):
    started = []
    real = warm.warm

    def recorded(device, gpus):
        started.append((device, gpus))
        real(device, gpus)

    monkeypatch.setattr(warm, "warm", recorded)
    out = tmp_path / "run"
    rc = main(["--targets", str(ROOT / "targets"), "optimize", "demo", "silu_and_mul", "--mutator", "params",
               "--budget", "1", "--no-progress", "--out", str(out)])
    assert rc in (0, 1)
    assert started == [("interpret", [None])] and warm.waiting() == 0
    result = json.loads((out / "result.json").read_text())
    phases = result["evaluator"][0]["boot_phases"]
    assert "import torch" not in phases and "fork" in phases  # adopted: no fork server started at boot
