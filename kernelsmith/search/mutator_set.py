"""The mutators a run asks for (`--mutator`, or the sweep's grid), made for its task."""

from __future__ import annotations

from kernelsmith.errors import ConfigError
from kernelsmith.runspec import Replay
from kernelsmith.search.mutators import Mutator, members


def build_mutators(name: str, task, device: str, budget_hint: int, note, replay: Replay | None = None,
                   sweep_seed: int | None = None) -> list[Mutator]:
    """The mutators for --mutator (llm needs KERNELSMITH_LLM_* or OPENAI_* settings); `sweep_seed`:
    the grid of `kernelsmith sweep`, every point once in that seed's order; "replay" needs the
    `replay` a replay run's RunSpec holds (runspec.py refuses a replay run without one)."""
    from kernelsmith.search.mutators.llm import LLMMutator
    from kernelsmith.search.mutators.llm_settings import llm_settings
    from kernelsmith.search.mutators.params import GridMutator, ParamsMutator

    if sweep_seed is not None:
        from kernelsmith.search.sweep import SweepGrid

        grid = SweepGrid(task, device=device, seed=sweep_seed, budget_hint=budget_hint)
        note(f"sweep: {grid.describe_grid()}")
        return [grid]
    if name == "replay":
        from kernelsmith.search.mutators.replay import ReplayMutator

        return [ReplayMutator(task, replay)]
    if name == "grid":
        return [GridMutator(task, device=device, budget_hint=budget_hint)]
    out = []
    chosen = members(name)
    if "params" in chosen:
        params = ParamsMutator(task, device=device, budget_hint=budget_hint)
        note(f"params: {params.describe_space()}")
        out.append(params)
    if "rewrite" in chosen:
        from kernelsmith.search.mutators.rewrite import RewriteMutator

        out.append(RewriteMutator(task, note=note))
    if "llm" in chosen:
        settings = llm_settings()
        if settings.problem is None:
            out.append(LLMMutator(task, settings, device=device, note=note))
        elif name == "llm":
            raise ConfigError("environment", settings.problem, "KERNELSMITH_LLM_*")
        else:
            note(f"llm mutator off: {settings.problem}; using params and rewrite only")
    return out
