"""The evaluator pool on a Ray cluster (`kernelsmith optimize --ray ADDRESS|auto`).

Each worker is a Ray actor pinned to one node (one per GPU, or `--workers-per-node`), owning a
Referee built there: the same referee, worker process and sandbox as a local run, on that node's
GPU and disk. The driver keeps the proposals, seeds and the archive; `Evaluator` drives the actors
through `RemoteReferee` proxies exactly as it drives local referees, one thread each. A candidate's
kernels compile on the actor's node (no driver-side precompile: a binary built on the driver's disk
would not reach another node): with a `--compile-limit` on CUDA, first in the actor's own compile
processes under the limit (`CompileGate`; over it: a `timeout` verdict, as the driver gives
locally), then the referee's worker loads them from that node's Triton cache.

A worker lost with its node (or killed) raises `WorkerLost`; the evaluator puts its candidate back
in the queue for another worker, so no verdict of a dead worker is ever stored. `ray` is optional:
nothing here imports it at module level.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from kernelsmith.errors import ConfigError, KernelsmithError
from kernelsmith.harness.facts import HarnessFacts
from kernelsmith.search.evaluator import WorkerLost
from kernelsmith.search.precompile import compile_timeout_verdict

INSTALL_HINT = "--ray needs the ray package: pip install 'kernelsmith[ray]'"
# Rejections that a worker dying under the referee also produces: before storing one, make sure
# the actor is still alive (its node may be going down and took the worker process first).
_CRASH_REASONS = {"crash", "timeout", "worker_died", "internal_error"}


def require_ray():
    """The ray module, or a ConfigError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray", INSTALL_HINT) from None
    return ray


def quiet_driver() -> None:
    """Keep Ray from replacing this process's builtin `print` (its tqdm does on the first worker
    message or node error it relays, unless RAY_TQDM_PATCH_PRINT=0): the bot's own output, and
    any code that compares callbacks with `print`, must not change because a node died."""
    os.environ.setdefault("RAY_TQDM_PATCH_PRINT", "0")


def connect(address: str) -> None:
    """Join the Ray cluster at `address` ("auto": the one this machine runs) as its driver."""
    ray = require_ray()
    if ray.is_initialized():
        return
    quiet_driver()
    try:
        ray.init(address=address, log_to_driver=False, logging_level="WARNING")
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise ConfigError("--ray", f"cannot join the Ray cluster at {address!r}: {e}") from None


def plan(device: str, workers_per_node: int | None) -> list[dict]:
    """One entry per worker to start: {"node": node id, "ip", "gpu": uses a GPU}. One worker per
    GPU of every alive node, or `workers_per_node` on each (CPU nodes, tests)."""
    ray = require_ray()
    out = []
    for n in sorted(ray.nodes(), key=lambda n: n["NodeID"]):
        if not n.get("Alive"):
            continue
        gpus = int(n.get("Resources", {}).get("GPU", 0))
        count = workers_per_node if workers_per_node is not None else gpus
        uses_gpu = device == "cuda"
        if uses_gpu:
            count = min(count, gpus)
        out += [{"node": n["NodeID"], "ip": n.get("NodeManagerAddress"), "gpu": uses_gpu}] * count
    return out


def cluster_device(address: str, requested: str, workers_per_node: int | None) -> tuple[str, list[int]]:
    """(device, worker indices) for a new run on the cluster at `address`: cuda when it has GPUs (auto)."""
    connect(address)
    ray = require_ray()
    has_gpu = ray.cluster_resources().get("GPU", 0) >= 1
    device = requested if requested != "auto" else ("cuda" if has_gpu else "interpret")
    if device == "cuda" and not has_gpu:
        raise ConfigError("--device", "cuda was requested but the Ray cluster has no GPU")
    workers = plan(device, workers_per_node)
    if not workers:
        raise ConfigError("--ray", "the cluster offers no worker (no GPU on any node); pass "
                          "--workers-per-node N to run N workers on each CPU node")
    return device, list(range(len(workers)))


COMPILE_WAIT_S = 120.0  # the most an evaluation waits on its compile job, as the driver's evaluator


class CompileGate:
    """The `--compile-limit` on one actor's node: a candidate's kernels compile first in this node's
    compile processes (search/precompile.py); one running past the limit is killed there and the
    candidate gets the `timeout` verdict the driver's evaluator gives locally, without reaching the
    GPU. `precompiler` None (no CUDA, no limit, precompile off): every evaluation goes straight on."""

    def __init__(self, precompiler, limit: float | None):
        self.precompiler = precompiler if limit else None
        self.limit = limit

    @classmethod
    def build(cls, task, device: str, seed: int, limit: float | None, precompile: bool, n_gpus: int,
              factory=None) -> CompileGate:
        """A gate for an actor: its own compile processes (`factory`: a stand-in, for tests), the
        base compiled first as a job of its own (its time floors the limit, as locally)."""
        if not limit or not precompile:
            return cls(None, None)
        from kernelsmith.search.precompile import Precompiler

        make = factory or (Precompiler.maybe if device == "cuda" else None)
        if make is None:
            return cls(None, None)
        # Two processes: the base's calibration job and the candidate the actor evaluates.
        precompiler = make(task, workers=2, seed=seed, n_gpus=n_gpus)
        if precompiler is not None:
            precompiler.calibrate(task.base_code)
        return cls(precompiler, limit)

    def evaluate(self, referee, code, kwargs: dict):
        """`referee`'s verdict on `code`, or a compile-timeout verdict when its compile ran too long.
        The base and the final fresh-compile re-measurement are never cut (as locally)."""
        cid = int(kwargs.get("candidate_id") or 0)
        if self.precompiler is not None and code is not None and cid > 0 and not kwargs.get("fresh_compile"):
            self.precompiler.submit(cid, code)
            over = self.precompiler.wait(cid, timeout=COMPILE_WAIT_S, limit=self.limit, queued=True)
            if over is not None:
                return compile_timeout_verdict(over, self.limit)
        return referee.evaluate(code, **kwargs)

    def close(self) -> None:
        if self.precompiler is not None:
            self.precompiler.close()


class _RefereeActor:
    """Lives in a Ray worker process on one node and owns one Referee there."""

    def __init__(self, spec: tuple, device: str, seed: int, factory=None, sandboxed: bool = True,
                 compile_limit: float | None = None, precompile: bool = True, precompiler_factory=None):
        import ray

        from kernelsmith import sandbox
        from kernelsmith.onboard.task import make_task
        from kernelsmith.referee import Referee

        # The driver's choice (--no-sandbox) holds here too; a node that cannot build the sandbox
        # says so instead of evaluating candidates outside it.
        if sandboxed:
            sandbox.require()
        else:
            sandbox.disable()

        # The task is rebuilt here from its target and checkout (its harness is a module loaded
        # from the checkout, which does not travel): the driver's checkout path when this node has
        # it (a shared or synced folder), else this node's own cached clone at the target's base.
        target, op, root, base_sha, base_code, facts = spec
        ip = ray.util.get_node_ip_address()
        root = Path(root)
        if not (root / target.operator(op).file).is_file():
            from kernelsmith.onboard.checkout import prepare_checkout

            co = prepare_checkout(target, None)
            if co.base_sha != base_sha:
                raise ConfigError(target.path, f"Ray node {ip} checked out base {co.base_sha}, the driver "
                                  f"{base_sha}: the base moved; start the run again", "base")
            root = co.path
        task = make_task(target, op, root, base_sha, harness=None)
        if facts is not None:  # what the compile gate reads (fresh shapes): the driver's facts
            task.harness = HarnessFacts.from_json(facts, target.operator(op).harness)
        if task.base_code != base_code:
            raise ConfigError(task.file_path, f"differs on Ray node {ip} from the driver's checkout: "
                              "every node must evaluate against the same base")

        gpu = None
        if device == "cuda":
            ids = ray.get_gpu_ids()  # physical index: the referee sets its worker's CUDA_VISIBLE_DEVICES
            gpu = int(ids[0]) if ids else None
        ctx = ray.get_runtime_context()
        self.where = {"node": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(), "gpu": gpu}
        self.referee = (factory or Referee)(task, device=device, gpu=gpu, seed=seed)
        node = [n for n in ray.nodes() if n["NodeID"] == self.where["node"]]
        gpus_here = int(node[0].get("Resources", {}).get("GPU", 0)) if node else 1
        self.gate = CompileGate.build(task, device, seed, compile_limit, precompile,
                                      n_gpus=max(1, gpus_here), factory=precompiler_factory)

    def locate(self) -> dict:
        return self.where

    def start(self):
        starter = getattr(self.referee, "start", None)
        if starter is not None:
            starter()
        return getattr(self.referee, "boot_phases", None)

    def evaluate(self, code, kwargs: dict):
        return self.gate.evaluate(self.referee, code, kwargs)

    def close(self) -> None:
        self.gate.close()
        self.referee.close()


class RayPool:
    """The actors of one run, started on the nodes `plan` picked; `factory` makes their proxies."""

    def __init__(self, address: str, task, device: str, seed: int, workers_per_node: int | None,
                 referee_factory=None, compile_limit: float | None = None, precompile: bool = True,
                 precompiler_factory=None):
        connect(address)
        ray = require_ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from kernelsmith import sandbox

        remote = ray.remote(_RefereeActor)
        # The harness's facts travel as data (the driver gathered them in the sandbox; no node imports it).
        facts = task.harness.to_json() if isinstance(task.harness, HarnessFacts) else None
        spec = (task.target, task.operator.name, str(task.root), task.base_sha, task.base_code, facts)
        self.actors = []
        self.planned = plan(device, workers_per_node)
        for w in self.planned:
            self.actors.append(remote.options(
                num_cpus=0,  # it waits on its referee's worker process; the cluster's CPUs stay for that
                num_gpus=1 if w["gpu"] else 0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(w["node"], soft=False),
                max_restarts=0,
                max_concurrency=2,  # close() may stop the referee while an evaluation runs, as locally
            ).remote(spec, device, seed, referee_factory, sandbox.enabled(), compile_limit, precompile,
                     precompiler_factory))
        if not self.actors:
            raise ConfigError("--ray", "the cluster offers no worker now")

    def factory(self, task, *, device: str, gpu: int, seed: int) -> RemoteReferee:
        """Evaluator's referee_factory: `gpu` is the worker index."""
        return RemoteReferee(self.actors[gpu], self.planned[gpu])


class RemoteReferee:
    """The driver's handle on one actor's Referee (start, evaluate, close), Evaluator-shaped."""

    def __init__(self, actor, planned: dict | None = None):
        self.actor = actor
        # The node it was placed on, known before it answers: a node that dies while its worker
        # boots is still named in the report.
        self.node, self.ip = (planned or {}).get("node"), (planned or {}).get("ip")
        self.gpu = None
        self.located = False
        self.boot_phases = None
        self.lost = False

    def _get(self, ref, timeout: float | None = None):
        import ray

        try:
            return ray.get(ref, timeout=timeout)
        except ray.exceptions.RayTaskError as e:  # the referee itself raised: the real error
            raise e.as_instanceof_cause() from None
        except ray.exceptions.ActorDiedError as e:
            if getattr(e, "actor_init_failed", False):  # the referee could not be built there at all
                raise KernelsmithError(f"a Ray worker could not start its referee: {e}") from None
            self.lost = True
            raise WorkerLost(f"Ray worker on node {self.node or '?'} lost: {e}") from None
        except ray.exceptions.RayError as e:  # actor or node gone (ActorDiedError, NodeDiedError...)
            self.lost = True
            raise WorkerLost(f"Ray worker on node {self.node or '?'} lost: {e}") from None

    def start(self) -> None:
        self._locate()
        self.boot_phases = self._get(self.actor.start.remote())

    def _locate(self) -> None:
        if not self.located:
            where = self._get(self.actor.locate.remote())
            self.node, self.ip, self.gpu = where["node"], where["ip"], where["gpu"]
            self.located = True

    def evaluate(self, code, **kwargs):
        """The actor's verdict; WorkerLost when the actor or its node died before answering."""
        self._locate()
        verdict = self._get(self.actor.evaluate.remote(code, kwargs))
        at_limit = (verdict.details or {}).get("compile_limit_s") is not None  # the gate's own verdict
        if not verdict.accepted and verdict.reason in _CRASH_REASONS and not at_limit:
            # The node may be dying with the referee's worker killed first: store the crash only
            # when the actor outlives it.
            time.sleep(1.0)
            self._get(self.actor.locate.remote(), timeout=30)
        return verdict

    def close(self) -> None:
        import ray

        try:
            ray.get(self.actor.close.remote(), timeout=60)  # kills the referee's worker process
        except Exception:  # noqa: BLE001 - the actor is gone already, or its node
            pass
        try:
            ray.kill(self.actor)
        except Exception:  # noqa: BLE001 - already gone
            pass
