"""Configurations that launch the same: a space's launch signatures and the first config of each.

Many knobs reach the launch through clamps (`max(min(next_power_of_2(cdiv(hidden, 256)),
max_warps), 4)`): on the listed shapes most combinations of their values launch the same kernels
with the same arguments as another. Measuring such a twin again costs a GPU evaluation and says
nothing new, so the params mutator and the grid propose one config per launch signature
(launch/evaluate.py: computed from the code text for each listed shape's recorded inputs). The map
from signature to the first config is rebuilt from the archive rows on every `sync` (never kept
across runs), so `--seed` and `--resume` see the same. A config without a signature (one the
evaluator cannot follow) is never a twin. A per-shape table's launches are, on each listed shape,
those of the row serving it (the space's `shape_configs`); retunes of other mutators' code are
left out.
"""

from __future__ import annotations

import json

from kernelsmith.launch.evaluate import LaunchEvaluator
from kernelsmith.launch.tunables import sources_of, space_configs, space_points
from kernelsmith.launch.values import Unsupported

COUNT_CAP = 5_000  # grids up to this many points have their distinct launches counted (~0.2 ms a shape each)
# Each space's launch sets, once per process: the run's layout (resolve.py), the params mutator's
# start-up walk and the sweep's count all need them (the sampler's 432 configs: ~0.6 s each time).
_SPACES: dict[tuple, tuple[tuple[dict[tuple, list[dict]], int], str | None]] = {}  # (groups, why)


class LaunchTwins:
    """Launch signatures of single configs of one space, and the first config seen per signature."""

    def __init__(self, task, tunables: list, shapes: list[dict], device: str, rows_of=None):
        self.harness, self.shapes, self.tunables = task.harness, shapes, tunables
        self._space = (task.base_code, task.operator.entry, device, json.dumps(shapes, sort_keys=True),
                       tuple((t.key, tuple(t.domain)) for t in tunables))
        self.rows_of = rows_of  # params -> the config serving each listed shape (tables), or None
        self.off: str | None = None  # why there is no dedupe, when there is none
        self.why: str | None = None  # why the first config without a signature has none
        self.first: dict[tuple, tuple[str, int | None]] = {}  # signature -> (values key, archive row id)
        self._memo: dict[str, tuple | None] = {}
        self._inputs: list[dict] | None = None
        self.evaluator: LaunchEvaluator | None = None
        if not any(len(t.domain) > 1 for t in tunables):
            self.off = "no knob to vary"
        elif self.harness is None or not shapes:
            self.off = "no harness shapes to evaluate the launches on"
        else:
            try:
                entry = task.operator.entry
                self.evaluator = LaunchEvaluator(task.base_code, tunables, entry, cuda=device == "cuda",
                                                 sources=sources_of(task))
            except (Unsupported, SyntaxError) as e:
                self.off = f"the launcher cannot be evaluated statically: {e}"

    def _shape_inputs(self) -> list[dict] | None:
        """Each listed shape's inputs as meta tensors (sizes only, from fake tensors or recorded facts)."""
        if self._inputs is None and self.off is None:
            import torch

            from kernelsmith.harness.facts import fake_mode_for

            try:
                with fake_mode_for(self.harness):  # sizes read inside, meta tensors made outside
                    made = [self.harness.make_inputs(dict(s), "cpu", 0) for s in self.shapes]
                    sizes = [{k: _Sizes(v) if isinstance(v, torch.Tensor) else v for k, v in m.items()}
                             for m in made]
                self._inputs = [{k: v.meta() if isinstance(v, _Sizes) else v for k, v in m.items()}
                                for m in sizes]
            except Exception as e:  # a harness fake tensors cannot run: no dedupe then
                self.off = f"the harness's inputs could not be made from fake tensors ({type(e).__name__})"
        return self._inputs

    def signature(self, params: dict) -> tuple | None:
        """The launches of a config (or a table) on every listed shape; None where there is no telling."""
        if self.off is not None or params.get("on") is not None:
            return None
        key = _key(params)
        if key not in self._memo:
            inputs = self._shape_inputs()
            changed = {k: v[1] for k, v in (params.get("changed") or {}).items()}  # rows of old runs
            configs = [{**changed, **(params.get("values") or {})}] * len(self.shapes)
            if params.get("table"):
                configs = self.rows_of(params) if self.rows_of is not None else None
            try:
                sig = None if inputs is None or configs is None else tuple(
                    self.evaluator.signature(c, x) for c, x in zip(configs, inputs, strict=True))
            except Unsupported as e:
                sig, self.why = None, self.why or str(e)
            except Exception as e:  # noqa: BLE001 - a launcher shape the evaluator trips on: no dedupe
                sig, self.why = None, self.why or f"the evaluator failed: {type(e).__name__}"
            self._memo[key] = sig
        return self._memo[key]

    def reset(self, base_values: dict) -> None:
        """Forget every config but the base (before replaying the archive's rows)."""
        self.first.clear()
        self.add({"values": base_values})

    def add(self, params: dict, row_id: int | None = None) -> None:
        """Record a config proposed (an archive row, or a proposal not yet recorded)."""
        sig = self.signature(params)
        if sig is None:
            return
        key = _key(params)
        have = self.first.get(sig)
        if have is None or have[0] == key and have[1] is None:
            self.first[sig] = (key, row_id)

    def twin(self, params: dict) -> tuple[str, int | None] | None:
        """(values key, row id) of another config proposed before that launches the same; else None."""
        sig = self.signature(params)
        have = self.first.get(sig) if sig is not None else None
        if have is None or have[0] == _key(params):
            return None
        return have

    def groups(self, points) -> tuple[dict[tuple, list[dict]], int] | None:
        """({launch signature: the configs among `points` that launch it, in order}, how many have no
        signature); None when the space has no dedupe at all."""
        if self.off is not None or self._shape_inputs() is None:
            return None
        sets: dict[tuple, list[dict]] = {}
        unknown = 0
        for values in points:
            sig = self.signature({"values": values})
            if sig is None:
                unknown += 1
            else:
                sets.setdefault(sig, []).append(values)
        return sets, unknown

    def space_groups(self) -> tuple[dict[tuple, list[dict]], int] | None:
        """groups() of every config of the space, computed once per process; None over COUNT_CAP
        points or without dedupe."""
        if space_points(self.tunables) > COUNT_CAP:
            return None
        if self._space not in _SPACES:
            found = self.groups(space_configs(self.tunables))
            if found is None:
                return None
            _SPACES[self._space] = found, self.why
        found, why = _SPACES[self._space]
        self.why = self.why or why
        return found

    def space_count(self) -> tuple[int, int] | None:
        """(distinct launches, configs without a signature) over every config of the space; one
        without a signature counts as a launch of its own. None as space_groups."""
        found = self.space_groups()
        return None if found is None else (len(found[0]) + found[1], found[1])


def _key(params: dict) -> str:
    """What makes two configs the same (as space.config_key)."""
    return json.dumps({"values": params.get("values"), "table": params.get("table")}, sort_keys=True)


class _Sizes:
    """A tensor's shape, stride and dtype (read inside a fake mode, rebuilt as a meta tensor outside)."""

    def __init__(self, t):
        self.shape, self.stride, self.dtype = tuple(t.shape), tuple(t.stride()), t.dtype

    def meta(self):
        import torch

        return torch.empty_strided(self.shape, self.stride, dtype=self.dtype, device="meta")
