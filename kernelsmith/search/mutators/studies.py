"""Optuna studies over launch choices: the model behind the params mutator's proposals.

Each study is an in-memory Optuna study rebuilt from archive rows (`replay`), so the same visible
rows and seed give the same proposals (`--seed`) and a resumed run continues from its archive
(`--resume`). A knob is an integer parameter over the index of its allowed values (domains are
mostly powers of two: the index is the log scale TPE should see). The sampler is TPE, multivariate
(joint moves across knobs), with constant liar (candidates still in flight count as bad, so one
generation's proposals spread out) and constraints: a candidate the referee rejected (a compile
error, a crash, a wrong answer) is an infeasible trial, so the sampler learns to avoid its region.
Optuna is imported only here, lazily: the referee and the grid never need it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

from kernelsmith.errors import ConfigError

FAILED_VALUE = math.log(1e-3)  # the value an infeasible trial carries (TPE orders them by violation)


def load_optuna():
    """The optuna module, quiet; a ConfigError saying how to get it when it is missing."""
    try:
        import optuna
    except ImportError:
        raise ConfigError(
            "optuna",
            "the params mutator needs Optuna: pip install 'optuna>=4,<6' (where there is no pip, "
            "run dev/gpu/carry_wheels.sh elsewhere and put .carry/wheels on PYTHONPATH)",
        ) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


@dataclass
class Observation:
    """One trial to replay: a config and its outcome (state ok | failed | running)."""

    values: dict[str, int]
    state: str
    value: float | None = None  # log speedup when ok


class Study:
    """An Optuna study over `allowed` values per knob, rebuilt from observations."""

    def __init__(self, allowed: dict[str, list[int]], observations: list[Observation], n_startup: int):
        self.optuna = load_optuna()
        self.allowed = {k: v for k, v in allowed.items() if len(v) > 1}
        self.fixed = {k: v[0] for k, v in allowed.items() if len(v) == 1}
        self.n_startup = n_startup
        dist = self.optuna.distributions.IntDistribution
        self.distributions = {k: dist(0, len(v) - 1) for k, v in self.allowed.items()}
        self.study = self.optuna.create_study(direction="maximize", sampler=self._sampler(0))
        for obs in observations:
            self.add(obs)

    def _sampler(self, seed: int):
        # Optuna 5 reads every trial's constraints; 4.x only with a constraints_func (replayed trials
        # carry their own in system_attrs, see add(); the function is called for told trials only).
        legacy = not hasattr(self.optuna.trial.FrozenTrial, "set_constraint")
        return self.optuna.samplers.TPESampler(
            seed=seed,
            multivariate=True,
            constant_liar=True,
            n_startup_trials=self.n_startup,
            **({"constraints_func": lambda trial: [0.0]} if legacy else {}),
        )

    def encode(self, values: dict[str, int]) -> dict[str, int] | None:
        """Optuna params of a config; None when a value lies outside the allowed ones."""
        out = {}
        for k, allowed in self.allowed.items():
            if values.get(k) not in allowed:
                return None
            out[k] = allowed.index(values[k])
        return out

    def decode(self, params: dict[str, int]) -> dict[str, int]:
        """The config of Optuna params (knobs with one allowed value take it)."""
        return {**self.fixed, **{k: self.allowed[k][i] for k, i in params.items()}}

    def add(self, obs: Observation) -> None:
        """Replay one observation (ignored when it lies outside the allowed values)."""
        params = self.encode(obs.values)
        if params is None or not self.distributions:
            return
        create = self.optuna.trial.create_trial
        if obs.state == "running":
            trial = create(params=params, distributions=self.distributions,
                           state=self.optuna.trial.TrialState.RUNNING)
        else:
            failed = obs.state == "failed"
            trial = create(
                params=params,
                distributions=self.distributions,
                value=FAILED_VALUE if failed else float(obs.value or 0.0),
                system_attrs={"constraints": [1.0 if failed else 0.0]},
            )
        self.study.add_trial(trial)

    def ask(self, seed: int) -> dict[str, int]:
        """A config from the sampler seeded by `seed`; the trial stays running (constant liar)."""
        if not self.distributions:
            return dict(self.fixed)
        self.study.sampler = self._sampler(seed)
        return self.decode(self.study.ask(self.distributions).params)

    def points(self) -> int:
        """How many configs the allowed values make."""
        return math.prod(len(v) for v in self.allowed.values())
