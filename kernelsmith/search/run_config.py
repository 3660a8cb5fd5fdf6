"""What one search is asked to do: `SearchConfig`, a user's choices (`kernelsmith optimize`, `sweep`,
`bench`), and `SearchHooks`, what no command sets: the stand-ins and settings tests and lab
simulations put under a search."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

PIPELINE = 2  # generations in flight at least: one evaluating, the next proposed and compiling


@dataclass
class SearchConfig:
    """Everything `kernelsmith optimize` was asked to do."""

    target: str
    op: str
    checkout: str | None = None
    out: str | None = None
    budget: int | None = None
    minutes: float | None = None
    mutator: str | None = None  # None: DEFAULT_MUTATOR, or what a resumed run's run.json holds
    gpus: list[int] | None = None
    device: str = "auto"
    resume: bool = False
    seed: int | None = None  # None: 0, or what a resumed run's run.json holds
    islands: int | None = None
    exploit: float | None = None  # None: DEFAULT_EXPLOIT, or what a resumed run's run.json holds
    stagnation: int | None = None
    progress: bool = True
    targets: str | None = None
    replay: str | None = None  # a run dir or diff whose winner is re-applied to the current base
    # Seconds a candidate's kernels may take to compile (on the CPU compile processes) before it is
    # rejected as a timeout; None: no limit. On the H200 host, a huge block on one warp took 27 to
    # over 60 s and stalled the search; upstream kernels compile in 1-3 s.
    compile_limit: float | None = 20.0
    pipeline: int | None = None  # generations in flight; None: enough to keep the compile processes busy
    command: str = "optimize"  # or "sweep": the whole grid (mutator grid), no budget, no stagnation stop
    wait: bool = False  # wait for another process's lock on the run directory instead of refusing
    ray: str | None = None  # a Ray cluster's address (or "auto"): the evaluator pool runs there
    workers_per_node: int | None = None  # Ray workers per node (default: one per GPU)


@dataclass(frozen=True)
class SearchHooks:
    """What a search takes from its caller and no command line sets (tests, lab simulations)."""

    referee_factory: Callable | None = None  # a stand-in for referee.Referee, called as it is
    precompiler_factory: Callable | None = None  # the Ray actors' compile processes: ditto
    precompile: bool = True  # False: no CPU compile processes (a stand-in referee compiles nothing)
    batch: int | None = None  # proposals per generation (default: one per worker, at least 2)
    final_k: int = 3  # best candidates re-measured at the end
    argv: list[str] | None = None  # the command line run.json records (None: this process's)
