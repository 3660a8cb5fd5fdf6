"""What --ray relies on, tested without a cluster (these run where ray is absent): the option checks,
the message without ray, and the evaluator handing a lost worker's candidate to another worker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import model_referee
import pytest

from kernelsmith.cli import main
from kernelsmith.errors import KernelsmithError
from kernelsmith.onboard.task import load_task
from kernelsmith.search.archive import Archive, NewRow
from kernelsmith.search.evaluator import Evaluator, WorkerLost

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--targets", str(ROOT / "targets"), "optimize", "demo", "silu_and_mul", "--device", "interpret",
        "--mutator", "params", "--budget", "2", "--no-progress"]


def test_ray_missing_exits_2_with_the_install_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    assert main([*ARGS, "--out", str(tmp_path / "run"), "--ray", "auto"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["kernelsmith: error: --ray: --ray needs the ray package: pip install 'kernelsmith[ray]'"]
    assert not (tmp_path / "run").exists()


def test_ray_option_checks(tmp_path, capsys):
    out = ["--out", str(tmp_path / "run")]
    assert main([*ARGS, *out, "--workers-per-node", "2"]) == 2
    assert "--workers-per-node: only applies with --ray" in capsys.readouterr().err
    assert main([*ARGS, *out, "--ray", "auto", "--workers-per-node", "0"]) == 2
    assert "must be at least 1" in capsys.readouterr().err
    assert main([*ARGS, *out, "--ray", "auto", "--gpus", "0"]) == 2
    assert "leave --gpus out" in capsys.readouterr().err


def test_search_and_referee_import_without_ray():
    code = ("import sys; sys.modules['ray'] = None\n"
            "import kernelsmith.referee, kernelsmith.search.loop, kernelsmith.search.evaluator\n"
            "import kernelsmith.search.ray_pool, kernelsmith.commands.optimize, kernelsmith.commands.sweep\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, env={"PYTHONPATH": str(ROOT)})


def _losing_referee(lose_on: set, evaluated: list):
    """The model referee; the workers in `lose_on` die (WorkerLost) on their first candidate."""

    class Losing(model_referee.ModelReferee):
        def evaluate(self, code, *, candidate_id=0, **kw):
            if self.gpu in lose_on:
                raise WorkerLost(f"worker {self.gpu} lost with its node")
            evaluated.append((self.gpu, candidate_id))
            return super().evaluate(code, candidate_id=candidate_id, **kw)

    return Losing


def _rows(archive, task, n):
    return [archive.get(archive.add(NewRow(task.base_code.replace("BLOCK = 64", f"BLOCK = {128 << i}"),
                                    mutator="params"))) for i in range(n)]


def test_a_lost_workers_candidate_is_evaluated_by_another(tmp_path):
    task = load_task("demo", "silu_and_mul", targets=str(ROOT / "targets"))
    evaluated: list = []
    with Archive(tmp_path / "a.sqlite") as archive:
        rows = _rows(archive, task, 4)
        ev = Evaluator(task, archive, device="interpret", gpus=[0, 1], seed=0,
                       referee_factory=_losing_referee({0}, evaluated))
        try:
            assert ev.run(rows) == 4
        finally:
            ev.close()
        assert sorted(cid for _, cid in evaluated) == sorted(r["id"] for r in rows)
        assert {gpu for gpu, _ in evaluated} == {1}
        assert all(archive.get(r["id"])["status"] == "evaluated" for r in rows)
        assert ev.stats[0]["lost"] and not ev.stats[1].get("lost")


def test_a_worker_lost_while_it_boots_is_retired_before_any_candidate(tmp_path):
    """A Ray node killed while its worker boots (CI saw one boot take 72 s): the worker is retired
    at once, named lost in the statistics, and the others evaluate every candidate; before, it
    stayed "alive" with no job and the report did not say its node had died."""
    task = load_task("demo", "silu_and_mul", targets=str(ROOT / "targets"))
    evaluated: list = []

    class DiesBooting(model_referee.ModelReferee):
        def start(self):
            if self.gpu == 0:
                raise WorkerLost("worker 0 lost with its node while booting")

        def evaluate(self, code, *, candidate_id=0, **kw):
            evaluated.append((self.gpu, candidate_id))
            return super().evaluate(code, candidate_id=candidate_id, **kw)

    with Archive(tmp_path / "a.sqlite") as archive:
        rows = _rows(archive, task, 3)
        ev = Evaluator(task, archive, device="interpret", gpus=[0, 1], seed=0, referee_factory=DiesBooting)
        try:
            assert ev.run(rows) == 3
        finally:
            ev.close()
        assert {gpu for gpu, _ in evaluated} == {1}
        assert ev.stats[0]["lost"] and ev.stats[0]["jobs"] == 0 and "while booting" in ev.stats[0]["lost_why"]


def test_a_remote_worker_names_its_planned_node_before_it_answers():
    """The report names a Ray worker's node even when the node died before the worker located itself."""
    from kernelsmith.search.ray_pool import RemoteReferee

    ref = RemoteReferee(actor=None, planned={"node": "n-1", "ip": "192.0.2.7", "gpu": False})
    assert (ref.node, ref.ip, ref.gpu, ref.located) == ("n-1", "192.0.2.7", None, False)


def test_every_worker_lost_stops_the_run_with_the_rows_pending(tmp_path):
    task = load_task("demo", "silu_and_mul", targets=str(ROOT / "targets"))
    with Archive(tmp_path / "a.sqlite") as archive:
        rows = _rows(archive, task, 3)
        ev = Evaluator(task, archive, device="interpret", gpus=[0, 1], seed=0,
                       referee_factory=_losing_referee({0, 1}, []))
        try:
            with pytest.raises(KernelsmithError, match="every evaluation worker was lost"):
                ev.run(rows)
        finally:
            ev.close()
        assert all(archive.get(r["id"])["status"] == "pending" for r in rows)


def test_a_worker_lost_in_the_finals_hands_the_re_measurement_to_another(tmp_path):
    """A node killed after the search but before the final re-measurement (CI saw it once in
    test_search_ray.py::test_killed_node_loses_no_evaluation): the worker is retired and the next
    alive one measures the finalist; with none left, a clear error that says to resume."""
    from kernelsmith.search.seeds import FINAL_SEED_OFFSET

    task = load_task("demo", "silu_and_mul", targets=str(ROOT / "targets"))
    evaluated: list = []
    with Archive(tmp_path / "a.sqlite") as archive:
        row = _rows(archive, task, 1)[0]
        ev = Evaluator(task, archive, device="interpret", gpus=[0, 1], seed=0,
                       referee_factory=_losing_referee({0}, evaluated))
        try:
            assert ev.remeasure(row, FINAL_SEED_OFFSET)["accepted"]
        finally:
            ev.close()
        assert evaluated == [(1, row["id"])] and ev.stats[0]["lost"] and not ev.stats[1].get("lost")
        ev = Evaluator(task, archive, device="interpret", gpus=[0, 1], seed=0,
                       referee_factory=_losing_referee({0, 1}, []))
        try:
            with pytest.raises(KernelsmithError, match="resume the run with --resume"):
                ev.remeasure(row, FINAL_SEED_OFFSET)
        finally:
            ev.close()


def test_a_late_judgement_goes_to_the_next_alive_worker_or_stays_pending(tmp_path):
    """A sweep's closing table (Evaluator.judge_late) judged past the budget: a lost worker hands it
    to the next alive one; with none left the row stays pending and the error says to resume."""
    task = load_task("demo", "silu_and_mul", targets=str(ROOT / "targets"))
    evaluated: list = []
    with Archive(tmp_path / "a.sqlite") as archive:
        row, other = _rows(archive, task, 2)
        ev = Evaluator(task, archive, device="interpret", gpus=[0, 1], seed=0,
                       referee_factory=_losing_referee({0}, evaluated))
        try:
            ev.judge_late(row)
        finally:
            ev.close()
        assert evaluated == [(1, row["id"])] and ev.stats[0]["lost"]
        assert archive.get(row["id"])["status"] == "evaluated"
        ev = Evaluator(task, archive, device="interpret", gpus=[0, 1], seed=0,
                       referee_factory=_losing_referee({0, 1}, []))
        try:
            with pytest.raises(KernelsmithError, match=f"candidate #{other['id']} stays pending; resume"):
                ev.judge_late(other)
        finally:
            ev.close()
        assert archive.get(other["id"])["status"] == "pending"


def _gated_referee(made: list, limit=20.0, precompile=True):
    """The model referee behind a CompileGate, called the way a Ray actor calls it (ray_pool.py)."""
    from kernelsmith.search.ray_pool import CompileGate

    class Gated:
        def __init__(self, task, *, device, gpu, seed):
            self.inner = model_referee.ModelReferee(task, device=device, gpu=gpu, seed=seed)
            self.gate = CompileGate.build(task, device, seed, limit, precompile, n_gpus=1,
                                          factory=model_referee.SlowBuildPrecompiler)
            made.append(self)

        def evaluate(self, code, **kwargs):
            return self.gate.evaluate(self.inner, code, kwargs)

        def close(self):
            self.gate.close()

    return Gated


def test_the_compile_limit_holds_on_a_ray_actor(tmp_path):
    """A candidate whose compile runs past --compile-limit gets the local timeout verdict without
    reaching the referee; the others, and the base, are judged by it."""
    task = load_task("demo", "silu_and_mul", targets=str(ROOT / "targets"))
    made: list = []
    model_referee.CALLS.clear()
    with Archive(tmp_path / "a.sqlite") as archive:
        base = archive.get(archive.add(NewRow(task.base_code, mutator="base")))
        rows = _rows(archive, task, 4)  # BLOCK 128, 256, 512, 1024: the last one builds too slowly
        ev = Evaluator(task, archive, device="interpret", gpus=[0], seed=0,
                       referee_factory=_gated_referee(made))
        try:
            assert ev.run([base, *rows]) == 5
        finally:
            ev.close()
        slow = archive.get(rows[-1]["id"])
        assert slow["status"] == "evaluated" and not slow["accepted"]
        assert slow["verdict"]["reason"] == "timeout" and "--compile-limit" in slow["verdict"]["error"]
        assert slow["verdict"]["details"] == {"compile_limit_s": 20.0, "compile_s": 21.5}
        assert not slow["eval_s"]  # no GPU time spent
        assert all(archive.get(r["id"])["accepted"] for r in [base, *rows[:-1]])
    assert sorted(c["cid"] for c in model_referee.CALLS) == sorted(r["id"] for r in [base, *rows[:-1]])
    (gated,) = made
    pc = gated.gate.precompiler
    assert pc.workers == 2 and pc.jobs[0] == (0, "calibrate", None) and pc.closed
    # every candidate, never the base, went through the compile processes under the limit
    assert [j for j in pc.jobs if j[1] == "wait"] == [(r["id"], "wait", 20.0) for r in rows]


def test_the_compile_gate_stands_aside_without_a_limit_and_for_fresh_compiles():
    from kernelsmith.search.ray_pool import CompileGate

    task = load_task("demo", "silu_and_mul", targets=str(ROOT / "targets"))
    factory = model_referee.SlowBuildPrecompiler
    assert CompileGate.build(task, "cuda", 0, None, True, 1, factory).precompiler is None
    assert CompileGate.build(task, "cuda", 0, 20.0, False, 1, factory).precompiler is None  # precompile off
    assert CompileGate.build(task, "interpret", 0, 20.0, True, 1).precompiler is None  # nothing compiles
    gate = CompileGate.build(task, "cuda", 0, 20.0, True, 1, factory)
    slow = task.base_code.replace("BLOCK = 64", "BLOCK = 4096")
    referee = model_referee.ModelReferee(task, device="cuda")
    # The final re-measurement compiles afresh in the referee; it is never cut.
    verdict = gate.evaluate(referee, slow, {"candidate_id": 3, "timing": "none", "fresh_compile": True})
    assert verdict.accepted and gate.precompiler.jobs == [(0, "calibrate", None)]
    verdict = gate.evaluate(referee, slow, {"candidate_id": 3, "timing": "none"})
    assert not verdict.accepted and verdict.reason == "timeout"


@pytest.mark.parametrize("quiet", [True, False])
def test_the_ray_driver_leaves_the_builtin_print_alone(quiet):
    """Ray's tqdm replaces `print` in the driver on the first worker message or node error it
    relays (tqdm_ray.instance()); ray_pool.connect asks it not to (quiet_driver). Without that,
    the same call replaces it: the check below is not vacuous."""
    pytest.importorskip("ray")
    code = ("import builtins, os; os.environ.pop('RAY_TQDM_PATCH_PRINT', None); p = builtins.print\n"
            "from kernelsmith.search import ray_pool\n"
            + ("ray_pool.quiet_driver()\n" if quiet else "")
            + "from ray.experimental import tqdm_ray; tqdm_ray.instance()\n"
            "raise SystemExit(0 if builtins.print is p else 3)")
    rc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=120).returncode
    assert rc == (0 if quiet else 3)
