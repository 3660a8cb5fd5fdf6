"""A new or resumed run of the search: its task, run directory, run.json, device and GPUs.

A new run records in run.json what a `--resume` must keep (seed, mutator, device, GPUs, and the
population's layout: islands, exploit share, stagnation; the generations in flight); a resumed run
reads them back (runspec.py), and only the budget, the minutes, the exploit share and the stagnation
may be given anew.
"""

from __future__ import annotations

import dataclasses
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from kernelsmith.errors import ConfigError
from kernelsmith.rundir import default_run_dir, versions, write_json
from kernelsmith.runspec import RunSpec, run_file
from kernelsmith.search import runlock
from kernelsmith.search.archive import Archive, check_resumable
from kernelsmith.search.mutators import DEFAULT as DEFAULT_MUTATOR
from kernelsmith.search.run_config import PIPELINE, SearchConfig, SearchHooks

if TYPE_CHECKING:
    from kernelsmith.onboard.task import Task

DEFAULT_BUDGET = 40
DEFAULT_EXPLOIT = 0.7
MAX_PIPELINE = 12  # deeper, and a generation sees too little of what came before it
# Candidates in flight per compile process by default. The window's front waits on the slowest of
# its builds, so one per process left the sampler's GPU idle on builds 27% of its span on the H200;
# two (pipeline 12): 362 evaluations in 3 minutes against 287, GPU busy 84% against 72% (2026-12-02).
IN_FLIGHT_PER_PROCESS = 2
# A model-based search learns only from the verdicts a generation may see: with `pipeline`
# generations of a batch in flight, each proposal is blind to the last pipeline x batch candidates.
# On a small space that window is much of the space: LMDeploy's router (78 launch configs) ran with 24
# in flight, and in 45 s on the H200 all 19 candidates judged were proposed blind (7 of them wrong
# answers the learned edges would have ruled out). So the params mutator keeps at most this share of
# its space in flight (never fewer than PIPELINE generations); the sampler's 432 are unaffected.
BLIND_SHARE = 0.1


@dataclass
class ResolvedRun:
    """A run ready to search: its task, run directory, settings (run.json's, with what a resume
    may change) and the lock held on the directory."""

    task: Task
    path: Path
    run: RunSpec
    lock: runlock.RunLock


def resolve_run(config: SearchConfig, hooks: SearchHooks = SearchHooks()) -> ResolvedRun:
    """The new or resumed run of a `SearchConfig`; a new run's run.json is written here. The run
    directory is locked (runlock.py) before anything in it is read or written."""
    from kernelsmith.onboard.task import load_task

    out = Path(config.out) if config.out else None
    if config.resume:
        if out is None:
            raise ConfigError("--resume", "needs --out RUN_DIR (the run to continue)")
        RunSpec.load(out)  # not a run directory: said before anything is made there
        lock = runlock.acquire(out, wait=config.wait)
        try:
            return _resume(config, out, lock)
        except BaseException:
            lock.release()
            raise
    if config.ray:  # the GPUs are the cluster's, not this machine's
        from kernelsmith.search.ray_pool import cluster_device

        device, _ = cluster_device(config.ray, config.device, config.workers_per_node)
        gpus = [None]  # the cluster's workers are named by Ray (ray_pool.py), not by GPU index
        task = load_task(config.target, config.op, checkout=config.checkout, targets=config.targets,
                         harness="facts")
    else:
        # Asking for CUDA imports torch here (seconds): done while the harness facts child, which
        # imports it too, runs (this thread only waits on it), not before; so are the referees'
        # fork servers started (their own imports), once the device and GPUs are known.
        with ThreadPoolExecutor(1) as pool:
            resolving = pool.submit(_local_device_and_gpus, config, hooks)
            task = load_task(config.target, config.op, checkout=config.checkout, targets=config.targets,
                             harness="facts")
            device, gpus = resolving.result()
    if task.operator.test:  # verify will need fresh worktrees of this checkout: fail now, not at the end
        from kernelsmith.verify import preflight

        preflight(task.root, task.base_sha)
    out = out or default_run_dir(task.target.name, task.operator.name)
    # Locked before the check below: two new runs into one directory cannot both pass it.
    lock = runlock.acquire(out, wait=config.wait)
    try:
        return _new_run(config, hooks, task, device, gpus, out, lock)
    except BaseException:
        lock.release()
        raise


def _new_run(config: SearchConfig, hooks: SearchHooks, task, device: str, gpus: list, out: Path,
             lock) -> ResolvedRun:
    """The run.json of a new run in `out` (locked, holding no run), written."""
    if (out / "archive.sqlite").exists() or run_file(out).exists():
        raise ConfigError(out, "already holds a run; pass --resume to continue it, or another --out")
    budget = config.budget if config.budget is not None or config.minutes is not None else DEFAULT_BUDGET
    if config.command == "sweep":
        budget = config.budget  # None: until the grid is done (or --minutes)
    replay = None
    if config.replay is not None:
        from kernelsmith.search.mutators.replay import load_replay

        replay, budget = load_replay(config.replay), 1  # exactly one proposal: the old winner
    # Generations in flight: what a generation may see depends on it, so it is part of the layout.
    pipeline, batch = default_layout(config, device, gpus, _learned_points(config, task, device), hooks)
    run = RunSpec(
        target=str(task.target.path),
        op=task.operator.name,
        repo=task.target.repo,
        file=task.operator.file,
        checkout=str(task.root),
        base_sha=task.base_sha,
        base_release=getattr(task, "base_release", None),
        seed=0 if config.seed is None else config.seed,
        budget=budget,
        minutes=config.minutes,
        mutator="replay" if replay is not None else config.mutator or DEFAULT_MUTATOR,
        device=device,
        gpus=gpus,
        argv=list(hooks.argv if hooks.argv is not None else sys.argv),
        versions=versions(),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        command=config.command,
        checkout_given=config.checkout is not None,  # report.md's Reproduce lines repeat it
        islands=config.islands or _default_islands(budget),
        exploit=DEFAULT_EXPLOIT if config.exploit is None else config.exploit,
        stagnation=config.stagnation,  # None: from the budget
        pipeline=config.pipeline or pipeline,
        batch=batch,
        replay=replay,  # kept whole so --resume needs no source
    )
    # The archive before run.json: a run.json without an archive is a run whose archive was lost
    # (a resume refuses it), never one killed before its archive was made.
    Archive(out / "archive.sqlite").close()
    write_json(run_file(out), run.to_json())
    return ResolvedRun(task, out.resolve(), run, lock)


def _resume(config, out: Path, lock) -> ResolvedRun:
    """The task and settings of the run in `out` (locked), checked against the arguments given."""
    from kernelsmith.onboard.task import load_task

    run = RunSpec.load(out)
    check_resumable(out / "archive.sqlite")
    if run.command != config.command:
        raise ConfigError(run_file(out), f"is a {run.command} run; resume it with that command, not "
                          f"{config.command}", "command")
    _refuse_conflicts(config, run, run_file(out))
    # The harness is target code: only its facts, from a sandboxed child (harness/gather.py).
    task = load_task(run.target, run.op, checkout=run.checkout, harness="facts")
    if task.base_sha != run.base_sha:
        raise ConfigError(
            run_file(out),
            f"checkout {run.checkout} moved from base {run.base_sha} to {task.base_sha}; start a new run",
            "base_sha",
        )
    run = dataclasses.replace(
        run,
        budget=run.budget if config.budget is None else config.budget,
        minutes=run.minutes if config.minutes is None else config.minutes,
    )
    return ResolvedRun(task, out.resolve(), _resume_layout(run, config, out), lock)


def _refuse_conflicts(config, run: RunSpec, path: Path) -> None:
    """A `--resume` continues the run as recorded: a TARGET, OP, --mutator or --seed that says
    otherwise is refused (ConfigError naming run.json and the field), never silently ignored."""
    from kernelsmith.onboard.config import resolve_target

    try:
        given = resolve_target(config.target, config.targets).resolve()
    except ConfigError:
        given = None
    if given != Path(run.target).resolve():
        raise ConfigError(path, f"the run is of target {run.target}, not {config.target}; resume "
                          "it with its own TARGET", "target")
    if config.op != run.op:
        raise ConfigError(path, f"the run is of operator {run.op}, not {config.op}; resume it "
                          "with its own OP", "op")
    if config.mutator is not None and config.mutator != run.mutator:
        raise ConfigError(path, f"the run uses mutator {run.mutator}; resume it without "
                          f"--mutator or with --mutator {run.mutator}", "mutator")
    if config.seed is not None and config.seed != run.seed:
        raise ConfigError(path, f"the run has seed {run.seed}; resume it without --seed or "
                          f"with --seed {run.seed}", "seed")


def _local_device_and_gpus(config: SearchConfig, hooks: SearchHooks) -> tuple[str, list]:
    """(device, GPUs) on this machine from --device and --gpus ('auto' -> cuda or interpret; one
    worker on the CPU for the interpreter); ConfigError naming the flag. Starts the referees' fork
    servers (referee/proc/warm.py) when the run's referees will be kernelsmith's own."""
    from kernelsmith import referee
    from kernelsmith.referee.backend import usable_device
    from kernelsmith.referee.proc import warm

    device = usable_device(config.device)
    gpus: list = [None]
    if device == "cuda":
        import torch

        count = torch.cuda.device_count()
        gpus = config.gpus if config.gpus is not None else list(range(count))
        bad = [g for g in gpus if g >= count]
        if bad:
            raise ConfigError("--gpus", f"no device {bad[0]} (this machine shows {count})")
    made_by = hooks.referee_factory or referee.Referee
    if getattr(made_by, "ADOPTS_WARM", False):
        warm.warm(device, gpus)
    return device, gpus


def default_layout(config: SearchConfig, device: str, gpus: list, points: int | None = None,
                   hooks: SearchHooks = SearchHooks()) -> tuple[int, int]:
    """(generations in flight, proposals per generation): default_pipeline's and one proposal per
    GPU, at least two; where that would keep more than BLIND_SHARE of the `points` a model learns in
    flight, fewer generations (not below PIPELINE), and where that is not enough, one proposal per
    GPU and as few generations as keep within it (at least one)."""
    batch = hooks.batch or max(2, len(gpus))
    pipeline = default_pipeline(config, device, gpus, hooks)
    allowed = int(points * BLIND_SHARE) if points is not None else None
    if allowed is not None and not config.ray:  # a cluster's workers are many: its layout stays
        pipeline = max(PIPELINE, min(pipeline, allowed // batch))  # fewer generations first
        if pipeline * batch > allowed:
            batch = hooks.batch or len(gpus)
            pipeline = max(1, min(pipeline, allowed // batch))
    return pipeline, batch


def default_pipeline(config: SearchConfig, device: str, gpus: list,
                     hooks: SearchHooks = SearchHooks()) -> int:
    """Generations in flight: IN_FLIGHT_PER_PROCESS candidates per compile process (a timed run
    with compiling ahead on the CPU), else two (one evaluating, the next proposed)."""
    from kernelsmith.search.precompile import compile_processes, device_facts

    if device != "cuda" or config.ray or not hooks.precompile or device_facts() is None:
        return PIPELINE
    batch = hooks.batch or max(2, len(gpus))
    return max(PIPELINE, min(MAX_PIPELINE, IN_FLIGHT_PER_PROCESS * compile_processes(len(gpus)) // batch))


def _learned_points(config, task, device: str) -> int | None:
    """The launch configs the params mutator's model learns over, when the run uses it (else None:
    a sweep or a replay learns nothing, a model writing code has no countable space): the distinct
    launch sets on the listed shapes where they can be counted (twins.py), else every config."""
    from kernelsmith.search.mutators import members

    mutator = config.mutator or DEFAULT_MUTATOR
    if config.command == "sweep" or config.replay is not None or "params" not in members(mutator):
        return None
    from kernelsmith.launch.tunables import entry_knobs, sources_of, space_points
    from kernelsmith.launch.twins import LaunchTwins

    tunables = entry_knobs(task.base_code, task.operator.entry, sources_of(task))[0]
    points = space_points(tunables)
    if task.harness is None:
        return points
    counted = LaunchTwins(task, tunables, task.harness.shapes_for(device), device).space_count()
    return counted[0] if counted is not None else points


def _default_islands(budget: int | None) -> int:
    return max(1, min(4, (budget or DEFAULT_BUDGET) // 10))


def _resume_layout(run: RunSpec, config, out: Path) -> RunSpec:
    """`run` with the islands, exploit share, stagnation and pipeline of its resume: run.json's,
    unless a flag says otherwise (exploit and stagnation may change; the island count and the
    pipeline may not)."""
    islands = run.islands
    if islands is None:  # a run.json written before these were recorded: the flags, as then
        islands = config.islands or _default_islands(run.budget)
    elif config.islands is not None and config.islands != islands:
        raise ConfigError(run_file(out), f"the run has {islands} islands; resume it without "
                          f"--islands or with --islands {islands}", "islands")
    exploit = run.exploit
    if config.exploit is not None or exploit is None:
        exploit = DEFAULT_EXPLOIT if config.exploit is None else config.exploit
    pipeline = run.pipeline
    if pipeline is None:  # written before it was recorded: two, as every run then had
        pipeline = config.pipeline or 2
    elif config.pipeline is not None and config.pipeline != pipeline:
        raise ConfigError(run_file(out), f"the run keeps {pipeline} generations in flight; resume it "
                          f"without --pipeline or with --pipeline {pipeline}", "pipeline")
    stagnation = run.stagnation if config.stagnation is None else config.stagnation
    return dataclasses.replace(run, islands=islands, exploit=exploit, pipeline=pipeline,
                               stagnation=stagnation)
