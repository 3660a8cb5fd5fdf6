"""The evaluator pool on a local two-node Ray cluster (both nodes on 127.0.0.1, one CPU each):
evaluations spread over the nodes, a node killed mid-run loses no evaluation, and a driver killed
with kill -9 resumes. Skipped where ray is not installed (pip install 'kernelsmith[ray]')."""

from __future__ import annotations

import builtins
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
import model_referee  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from kernelsmith.commands.run import optimize  # noqa: E402
from kernelsmith.onboard.task import load_task  # noqa: E402
from kernelsmith.search import ray_pool  # noqa: E402
from kernelsmith.search.archive import Archive  # noqa: E402
from kernelsmith.search.run_config import SearchConfig, SearchHooks  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
LOG_ENV = "KS_RAY_TEST_LOG"
PRINT = builtins.print  # before any Ray driver ran in this process


class SlowNodeReferee(model_referee.ModelReferee):
    """The model referee, inside a Ray actor: takes a while per candidate, notes which node started
    each one (a file per start) and puts its node into the verdict. Its first evaluation waits (up
    to three minutes) until a referee has started on every node the test expects (`_expected_nodes`):
    on a busy machine one node's worker can boot seconds after the others (CI saw boots of 65-72 s),
    and the others would otherwise take every evaluation."""

    def __init__(self, task, **kw):
        super().__init__(task, **kw)
        (_ready_dir() / ray.get_runtime_context().get_node_id()).touch()
        self.waited = False

    def evaluate(self, code, *, candidate_id=0, timing="full", **kw):
        node = ray.get_runtime_context().get_node_id()
        log = Path(os.environ[LOG_ENV])
        deadline = time.monotonic() + 180
        while not self.waited and len(list(_ready_dir().iterdir())) < _expected_nodes() \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        self.waited = True
        (log / f"{candidate_id}-{node}-{time.monotonic_ns()}").touch()
        time.sleep(float(os.environ.get("KS_RAY_TEST_SLEEP", "0.3")))
        v = super().evaluate(code, candidate_id=candidate_id, timing=timing, **kw)
        v.details = {**(v.details or {}), "node": node}
        return v


def _ready_dir() -> Path:
    """Where each referee notes its node on starting (beside the starts' log, not in it)."""
    ready = Path(os.environ[LOG_ENV] + "-ready")
    ready.mkdir(exist_ok=True)
    return ready


def _expected_nodes() -> int:
    """How many nodes' referees the first evaluations wait for: 2, or what the running test wrote
    (the module's nodes read the driver's files, not its environment, which they were started without)."""
    f = Path(os.environ[LOG_ENV] + "-nodes")
    return int(f.read_text()) if f.is_file() else 2


class SlowBuilds(model_referee.SlowBuildPrecompiler):
    """Every BLOCK above the base's 64 builds past the compile limit (runs in the actors)."""

    SLOW_BUILD_BLOCK = 128


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head and one worker node, one CPU each; actors import kernelsmith and the test referees."""
    log = tmp_path_factory.mktemp("ray-starts")
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", LOG_ENV)}
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")])
    os.environ[LOG_ENV] = str(log)
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    ray_pool.connect(c.address)
    yield c, log
    ray.shutdown()
    c.shutdown()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _config(c, out: Path, precompiler_factory=None, **kw) -> tuple[SearchConfig, SearchHooks]:
    """(the config, the stand-ins) of a search on the cluster, for optimize(*...)."""
    cfg = dict(target="demo", op="silu_and_mul", out=str(out), budget=8, mutator="params",
               device="interpret", progress=False, targets=str(ROOT / "targets"), ray=c.address,
               workers_per_node=1)
    cfg.update(kw)
    hooks = SearchHooks(referee_factory=SlowNodeReferee, precompiler_factory=precompiler_factory,
                        argv=["kernelsmith", "optimize"])
    return SearchConfig(**cfg), hooks


def _starts(log: Path, since: set[str]) -> list[tuple[int, str]]:
    return [(int(p.name.split("-")[0]), p.name.split("-")[1]) for p in log.iterdir() if p.name not in since]


def test_evaluations_spread_over_both_nodes_and_reproducible(cluster, tmp_path):
    c, log = cluster
    result = optimize(*_config(c, tmp_path / "run"))
    workers = result["evaluator"]
    alive = [n for n in ray.nodes() if n["Alive"]]
    nodes = {n["NodeID"] for n in alive}
    assert len(workers) == 2 and {w["node"] for w in workers} == nodes
    assert {w["node_ip"] for w in workers} == {n["NodeManagerAddress"] for n in alive}
    assert all(w["jobs"] > 0 and not w["lost"] for w in workers), workers
    with Archive(tmp_path / "run" / "archive.sqlite") as a:
        rows = a.all()
    assert not [r for r in rows if r["status"] == "pending"]
    assert sum(w["jobs"] for w in workers) == len([r for r in rows if r["status"] == "evaluated"]) == 9
    # each stored verdict names the node whose referee produced it
    assert {r["verdict"]["details"]["node"] for r in rows} == nodes
    # --seed reproducibility: the same proposals again, whichever node evaluated what
    optimize(*_config(c, tmp_path / "again"))
    with Archive(tmp_path / "again" / "archive.sqlite") as a:
        assert [r["code"] for r in a.all()] == [r["code"] for r in rows]


def test_the_compile_limit_holds_on_the_actors(cluster, tmp_path):
    """--compile-limit under --ray: each actor compiles its candidate first (here a stand-in for its
    compile processes) and a build past the limit is a timeout verdict that never reaches a referee."""
    c, log = cluster
    before = {p.name for p in log.iterdir()}
    out = tmp_path / "run"
    optimize(*_config(c, out, budget=6, compile_limit=20.0, precompiler_factory=SlowBuilds))
    with Archive(out / "archive.sqlite") as a:
        rows = a.all()
    assert not [r for r in rows if r["status"] == "pending"]
    slow = [r for r in rows if any(cfg["BLOCK"] >= 128 for _, cfg in model_referee.config_of(r["code"]))]
    assert slow, "no proposal above the limit's block: nothing was tested"
    for r in slow:
        verdict = r["verdict"]
        assert verdict["reason"] == "timeout" and "--compile-limit" in verdict["error"], verdict
        assert r["verdict"]["details"] == {"compile_limit_s": 20.0, "compile_s": 21.5}
    judged = {cid for cid, _ in _starts(log, before)}  # what reached a referee
    assert judged == {r["id"] for r in rows} - {r["id"] for r in slow}


def _until_dead(node_id: str, limit_s: float = 60.0) -> None:
    """Wait until Ray marks the killed node dead: until then a later test's driver counts it alive
    and starts a worker there (a third evaluator that never gets a job)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes()):
        time.sleep(0.2)


def test_killed_node_loses_no_evaluation(cluster, tmp_path, monkeypatch):
    c, log = cluster
    monkeypatch.setenv("KS_RAY_TEST_SLEEP", "1.5")  # read by the victim node only (started below)
    before = {p.name for p in log.iterdir()}
    victim = c.add_node(num_cpus=1)  # a third node, killed below (the module's two stay for others)
    c.wait_for_nodes()
    victim_id = victim.node_id
    out = tmp_path / "run"
    result: dict = {}
    nodes = Path(os.environ[LOG_ENV] + "-nodes")
    nodes.write_text("3")  # the module's two nodes wait for the victim's referee before evaluating
    try:
        t = threading.Thread(target=lambda: result.update(optimize(*_config(c, out, budget=10))))
        t.start()
        deadline = time.monotonic() + 300
        # Kill the node while it is evaluating a candidate: within the 1.5 s its first one sleeps (on a
        # busy 2-core CI machine the other nodes had finished the run before the victim started a second).
        mine = []
        while time.monotonic() < deadline and t.is_alive() and not mine:
            mine = [cid for cid, node in _starts(log, before) if node == victim_id]
            time.sleep(0.05)
        c.remove_node(victim, allow_graceful=False)
        _until_dead(victim_id)
    finally:
        nodes.unlink()
    assert mine, "the victim node's worker never started a candidate: nothing was killed mid-evaluation"
    t.join(300)
    assert not t.is_alive() and result
    lost = [w for w in result["evaluator"] if w["node"] == victim_id]
    assert len(lost) == 1 and lost[0]["lost"], result["evaluator"]
    with Archive(out / "archive.sqlite") as a:
        rows = a.all()
    assert not [r for r in rows if r["status"] == "pending"]
    assert len([r for r in rows if r["status"] == "evaluated"]) == 11  # the base and all 10 proposals
    # The candidate the dying node had started was evaluated again elsewhere and stored from there.
    started_on_victim = {cid for cid, node in _starts(log, before) if node == victim_id}
    by_id = {r["id"]: r for r in rows}
    redone = [cid for cid in started_on_victim if by_id[cid]["verdict"]["details"]["node"] != victim_id]
    assert redone, f"no candidate in flight on the killed node was re-evaluated: {started_on_victim}"
    # Its verdict is the one its code earns anywhere (a config the model cannot compile stays a
    # compile_error), never a verdict about the node that died.
    task = load_task("demo", "silu_and_mul", targets=str(ROOT / "targets"))
    for cid in redone:
        own = model_referee.ModelReferee(task, device="interpret").evaluate(by_id[cid]["code"], timing="none")
        got = by_id[cid]["verdict"]
        assert (got["accepted"], got["reason"]) == (own.accepted, own.reason), (cid, got["reason"])
    # The node's death was relayed to this driver; Ray's tqdm would have replaced `print` then.
    assert builtins.print is PRINT


def test_driver_killed_then_resumed(cluster, tmp_path):
    """The real referee inside the actors; the driver is a subprocess killed with SIGKILL."""
    c, _ = cluster
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    base = [sys.executable, "-m", "kernelsmith", "--targets", str(ROOT / "targets"), "optimize", "demo",
            "silu_and_mul"]
    common = ["--out", str(out), "--no-progress", "--ray", c.address, "--workers-per-node", "1"]
    cmd = [*base, "--device", "interpret", "--budget", "6", "--mutator", "params", *common]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240  # CI has seen Ray actors boot in 65-72 s
    done = 0
    while time.monotonic() < deadline and proc.poll() is None:
        if (out / "archive.sqlite").exists():
            with Archive(out / "archive.sqlite") as a:
                done = len(a.where("status='evaluated' AND mutator!='base'"))
            if done >= 2:
                break
        time.sleep(0.2)
    assert proc.poll() is None and done >= 2, "the driver finished (or stalled) before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with Archive(out / "archive.sqlite") as a:
        kept = {r["id"]: r["verdict"] for r in a.where("status='evaluated'")}
    resumed = subprocess.run([*base, "--resume", *common], env=env, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode in (0, 1), resumed.stderr[-2000:]
    result = json.loads((out / "result.json").read_text())
    assert result["proposals"] == 6 and len(result["evaluator"]) == 2
    with Archive(out / "archive.sqlite") as a:
        rows = a.all()
    assert not [r for r in rows if r["status"] == "pending"]
    # verdicts stored before the kill are kept as they were, not evaluated again
    assert all({r["id"]: r["verdict"] for r in rows}[k] == v for k, v in kept.items())
