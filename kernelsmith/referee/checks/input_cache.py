"""Per-worker cache of the listed shapes' inputs, reference outputs and base outputs.

Inputs and the harness's reference are often far costlier than the kernel (a full-vocabulary
sampler: seconds per shape, against microseconds per call). The seeds of the listed shapes are
drawn per run (run seed, shape, trial; see `listed_seed`), not per candidate, so every candidate
of a run is judged on the same inputs and they are made once per (shape, seed) in each worker.
The final re-measurement passes a different run seed and so draws new inputs.

Safety: the cached originals, reference outputs and base outputs are never handed to candidate
code. Every call gets fresh clones (`fresh_copy`: tensors cloned with their strides, other values
deep-copied), and each cached tensor carries a fingerprint that `verify` re-checks after every
evaluation that used it (a kernel writing out of bounds, say), so a tampered entry is dropped and
the evaluation that tampered with it is rejected. Base outputs come from the trusted base only.

Bounded on a device whose free memory the worker measures by that memory (memory.py: before each
step on a shape, room is made for it, evicting other shapes' entries first), elsewhere by a byte
budget, least recently used first out; an evicted entry is simply made again. Keys include the
seed, so a harness whose tensor sizes depend on the seed is cached correctly.
"""

from __future__ import annotations

import copy
import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from kernelsmith.referee.checks import correctness as C
from kernelsmith.referee.memory import DeviceMemoryShort, ShapeBytes, device_oom, region_growth, tensor_bytes

CPU_BUDGET_BYTES = 256 << 20
FINGERPRINT_ROWS = 1 << 20  # rows of 64 words a fingerprint sums at once (their int64 copy: 512 MiB)


def listed_seed(run_seed: int, shape: dict, trial) -> int:
    """The input seed of a listed shape's trial: per run, shape and trial (never per candidate)."""
    return C.derive_seed(run_seed, "listed", json.dumps(shape, sort_keys=True), trial)


def default_budget(device: str) -> int | None:
    """Bytes the cache may hold in this worker: no fixed budget on CUDA, where the free device
    memory the worker measures bounds it (memory.py)."""
    return None if device == "cuda" else CPU_BUDGET_BYTES


def fresh_copy(inputs: dict) -> dict:
    """A private copy of an inputs dict: tensors cloned (same strides), other values deep-copied."""
    out = {}
    for k, v in inputs.items():
        if isinstance(v, torch.Tensor):
            out[k] = C.clone_inputs({k: v})[k]
        else:
            try:
                out[k] = copy.deepcopy(v)
            except Exception:  # noqa: BLE001 - an uncopyable value (a module, say) is shared as before
                out[k] = v
    return out


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _checksum(t: torch.Tensor) -> torch.Tensor:
    """The device-side checksum of `t`'s bits, as int64: a layout tag, then for 64 words or more
    the total, the 64 column sums and the position-weighted row sums, else the words themselves;
    then the last 0-3 bytes. Two passes, small temporaries, no host copy."""
    flat = C._flat(t)
    if flat.numel() == 0:
        return torch.zeros(1, dtype=torch.int64, device=t.device)
    raw = flat.view(torch.uint8) if flat.dtype != torch.bool else flat.to(torch.uint8)
    if raw.storage_offset() % 4:
        raw = raw.clone()  # a view starting mid-word cannot be read as int32
    whole = raw.numel() // 4 * 4
    tail = raw[whole:].to(torch.int64)
    ints = raw[:whole].view(torch.int32)
    n = ints.numel() - ints.numel() % 64
    # A fill, not a host-to-device copy (which could wait for the device).
    tag = torch.full((1,), 1 + (n > 0) + 2 * tail.numel(), dtype=torch.int64, device=t.device)
    if n == 0:
        return torch.cat([tag, ints.to(torch.int64), tail])
    block = ints[:n].view(-1, 64)
    # In slices of rows: a sum to int64 copies its input to int64 first, twice a multi-gigabyte
    # tensor's size on the device at once (integer sums: the same numbers in any slicing).
    slices = [block[i:i + FINGERPRINT_ROWS] for i in range(0, block.size(0), FINGERPRINT_ROWS)]
    rows = torch.cat([b.sum(1, dtype=torch.int64) for b in slices])
    cols = torch.stack([b.sum(0, dtype=torch.int64) for b in slices]).sum(0)
    weights = torch.arange(rows.numel(), device=rows.device, dtype=torch.int64) % 8191 + 1
    # The total from the column sums and the last words (not a third pass over all of them).
    total = cols.sum() + ints[n:].sum(dtype=torch.int64)
    return torch.cat([tag, total.view(1), cols, (rows * weights).sum().view(1), tail])


def fingerprints(tensors: list[torch.Tensor]) -> list[tuple]:
    """A cheap, position-sensitive checksum of each tensor's bits, with one device-to-host copy per
    device for all of them (a copy waits for the device: one wait, not one per tensor)."""
    sums = [_checksum(t) for t in tensors]
    out: list[tuple] = [()] * len(sums)
    for device in {s.device for s in sums}:
        mine = [i for i, s in enumerate(sums) if s.device == device]
        values = torch.cat([sums[i] for i in mine]).tolist()
        at = 0
        for i in mine:
            out[i] = tuple(values[at:at + sums[i].numel()])
            at += sums[i].numel()
    return out


def fingerprint(t: torch.Tensor) -> tuple:
    """`fingerprints` of one tensor."""
    return fingerprints([t])[0]


def _nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@dataclass
class Entry:
    """What one (shape, seed) needs: the original inputs, and lazily the reference's and base's outputs."""

    originals: dict
    expected: tuple | None = None
    base_outs: tuple | None = None
    base_checks: list | None = None  # the base outputs' Checks against the reference (None: no yardstick)
    base_precision: list | None = None  # precision_downgrade's answer for each base output (lazily)
    shape: dict | None = None
    key: tuple | None = None  # its key in the cache
    # part ("originals", "expected", "base_outs") -> (tensor, fingerprint) of each of its tensors
    prints: dict = field(default_factory=dict)

    @property
    def base_err(self) -> list | None:
        """The base outputs' mean errors against the reference (None: no yardstick)."""
        return None if self.base_checks is None else [c.mean_abs_err for c in self.base_checks]

    def seal(self, part: str) -> None:
        """Fingerprint the tensors of `part` (now part of this entry)."""
        tensors = _tensors(getattr(self, part))
        self.prints[part] = list(zip(tensors, fingerprints(tensors), strict=True))

    def _sealed(self) -> list[tuple]:
        return [p for part in self.prints.values() for p in part]

    @property
    def nbytes(self) -> int:
        """Bytes this entry holds on its device."""
        return _nbytes([t for t, _ in self._sealed()])

    def sizes(self, returned: bool) -> ShapeBytes:
        """Its shape's sizes as memory.py plans with them (`returned`: the entry returns its outputs)."""
        outs = max(tensor_bytes(self.expected or ()), tensor_bytes(self.base_outs or ()))
        return ShapeBytes(tensor_bytes(self.originals), outs, returned)

    def drop_outputs(self) -> int:
        """Forget the reference and base outputs (made again when next asked for); bytes freed."""
        freed = _nbytes([t for part in ("expected", "base_outs") for t, _ in self.prints.pop(part, [])])
        self.expected = self.base_outs = self.base_checks = self.base_precision = None
        return freed

    def intact(self) -> bool:
        """Whether every cached tensor still has the bits it was sealed with."""
        sealed = self._sealed()
        return fingerprints([t for t, _ in sealed]) == [fp for _, fp in sealed]


class InputCache:
    """LRU of `Entry` by (shape key, seed), bounded by `budget` bytes (None: by memory.py alone)."""

    def __init__(self, budget: int | None):
        self.budget = None if budget is None else int(budget)
        self.entries: OrderedDict[tuple, Entry] = OrderedDict()
        self.used: dict[tuple, Entry] = {}  # entries used since `begin` (verified at the end)
        self.tampered: list[str] = []  # shapes of used entries found changed when dropped early
        self.stats = self._zero()

    @staticmethod
    def _zero() -> dict:
        return {"hits": 0, "misses": 0, "evictions": 0, "make_inputs": 0, "reference": 0, "base": 0}

    def begin(self) -> dict:
        """Start counting for one evaluation; returns the (live) counters."""
        self.stats = self._zero()
        self.used, self.tampered = {}, []
        return self.stats

    def report(self) -> dict:
        """The counters with the cache's current size and budget."""
        return {**self.stats, "entries": len(self.entries), "bytes": self.bytes(),
                "budget_bytes": self.budget}

    def bytes(self) -> int:
        """Bytes held by all entries."""
        return sum(e.nbytes for e in self.entries.values())

    @staticmethod
    def key(shape: dict, seed: int) -> tuple[str, int]:
        """The cache key of (shape, seed)."""
        return json.dumps(shape, sort_keys=True), int(seed)

    def get(self, shape: dict, seed: int, make: Callable[[], dict]) -> Entry:
        """The entry for (shape, seed), made with `make()` (the harness's make_inputs) on a miss."""
        key = self.key(shape, seed)
        entry = self.entries.get(key)
        if entry is not None:
            self.stats["hits"] += 1
            self.entries.move_to_end(key)
        else:
            self.stats["misses"] += 1
            self.stats["make_inputs"] += 1
            entry = Entry(originals=make(), shape=shape, key=key)
            entry.seal("originals")
            self.entries[key] = entry
            self._fit(key)
        self.used[key] = entry
        return entry

    def expected(self, entry: Entry, reference: Callable[[dict], tuple]) -> tuple:
        """The reference outputs of `entry` (computed once, from a private copy of the inputs)."""
        if entry.expected is None:
            self.stats["reference"] += 1
            entry.expected = tuple(reference(fresh_copy(entry.originals)))
            entry.seal("expected")
            self._refit(entry)
        return entry.expected

    def base(self, entry: Entry, run_base: Callable[[dict], tuple], check: Callable[[tuple], list | None]):
        """(outputs, mean error per output) of the trusted base on `entry` (computed once, on a copy);
        `check(outputs)`: their Checks against the reference, or None where there is no yardstick."""
        if entry.base_outs is None:
            self.stats["base"] += 1
            entry.base_outs = tuple(run_base(fresh_copy(entry.originals)))
            entry.base_checks = check(entry.base_outs)
            entry.seal("base_outs")
            self._refit(entry)
        return entry.base_outs, entry.base_err

    def verify(self) -> list[str]:
        """Check the entries used since `begin`; drops and names those whose bits changed (with
        those found changed when they were dropped earlier)."""
        bad, self.tampered = self.tampered, []
        for key, entry in self.used.items():
            if not entry.intact():
                bad.append(key[0])
                if self.entries.get(key) is entry:
                    del self.entries[key]
        self.used = {}
        return bad

    def _checked(self, key: tuple) -> None:
        """Verify now an entry used since `begin` that is about to lose tensors, so that nothing but
        the cache keeps them alive until the end of the evaluation."""
        entry = self.used.pop(key, None)
        if entry is not None and not entry.intact():
            self.tampered.append(key[0])

    def evict(self, key: tuple) -> int:
        """Drop the entry at `key` (made again when next asked for); bytes freed."""
        entry = self.entries.pop(key, None)
        if entry is None:
            return 0
        self._checked(key)
        self.stats["evictions"] += 1
        return entry.nbytes

    def drop_outputs(self, key: tuple) -> int:
        """Drop the reference and base outputs of the entry at `key` (made again when next asked
        for); bytes freed."""
        entry = self.entries.get(key)
        if entry is None:
            return 0
        if key in self.used:
            self._checked(key)
            self.used[key] = entry  # its inputs stay in use
        return entry.drop_outputs()

    def _refit(self, entry: Entry) -> None:
        for key, e in self.entries.items():
            if e is entry:
                self._fit(key)
                return

    def _fit(self, keep: tuple) -> None:
        """Evict least recently used entries until within budget (`keep` last; alone too big: dropped)."""
        if self.budget is None:
            return
        total = self.bytes()
        for key in list(self.entries):
            if total <= self.budget:
                return
            if key == keep:
                continue
            total -= self.evict(key)
        if total > self.budget and keep in self.entries:
            self.entries.pop(keep)  # the caller still holds it for this use; made again next time
            self.stats["evictions"] += 1


class ListedInputs:
    """The Session's access to its cache (`self.inputs`) for the listed shapes (a mixin: it uses the
    Session's harness, device, reference, base and call)."""

    def listed(self, shape: dict, seed: int, trial, keep=()):
        """The cache entry of a listed shape's trial for run seed `seed` (made on a miss, with room
        made for it beside the cache entries `keep`, which the caller still needs)."""
        s = listed_seed(seed, shape, trial)
        planner = getattr(self, "memory", None)
        if planner is None or self.inputs.key(shape, s) in self.inputs.entries:
            return self.inputs.get(shape, s, lambda: self.harness.make_inputs(shape, self.dev, s))
        sizes = planner.sizes_of(shape)
        need = sizes.make() + region_growth(getattr(self, "oracle", None), 0, sizes.inputs) if sizes else None
        entry = self.with_room(shape, need, keep, "making its inputs",
                               lambda: self.inputs.get(shape, s, lambda: self.harness.make_inputs(
                                   shape, self.dev, s)), idle=self.idle_while("oracle"))
        self._note_sizes(entry)
        return entry

    def idle_while(self, child: str) -> list:
        """The children whose shared regions a step in `child` ("runner" or "oracle") leaves idle:
        the other one (the runner only once it answers requests)."""
        if child == "runner":
            return [o for o in (getattr(self, "oracle", None),) if o is not None]
        link = getattr(self, "link", None)
        return [link] if link is not None and getattr(self, "runner_ready", False) else []

    def with_room(self, shape: dict, need: int | None, keep, what: str, step: Callable[[], object],
                  keep_outputs: bool = True, idle=(), failed: Exception | None = None):
        """`step()` on `shape` with room made for `need` bytes beside the cache entries `keep`, their
        outputs too unless `keep_outputs` is False, the regions of the children `idle` closed where
        that helps (memory.py; `need` None: unknown before the shape's first entry). A step the
        device still runs out of memory in is tried once more with every other cache entry dropped;
        failing again, it is DeviceMemoryShort. `failed`: the error of a first try made elsewhere
        (a new runner's warm-up, sent ahead): only the second try is made, where it was for memory."""
        planner = getattr(self, "memory", None)
        if failed is not None and (planner is None or not device_oom(str(failed))):
            raise failed
        if planner is None:
            return step()
        if failed is None:
            if need is not None:
                planner.make_room_or_try(shape, need, keep, keep_outputs, what, idle)
            try:
                return step()
            except Exception as e:  # noqa: BLE001 - only the device's out-of-memory error is handled here
                if not device_oom(str(e)):
                    raise
        planner.evict_all(shape, keep, what, idle)
        try:
            return step()
        except Exception as e:  # noqa: BLE001
            if not device_oom(str(e)):
                raise
        raise DeviceMemoryShort(shape, need, planner.room() or 0, what, planner.sizes_of(shape)) from None

    def _note_sizes(self, entry) -> None:
        planner = getattr(self, "memory", None)
        if planner is not None and entry.shape is not None:
            planner.note_sizes(entry.shape, entry.sizes(self.harness.outputs is None))

    def _outputs_room(self, entry, what: str, step: Callable[[], object]):
        """`step()`, which makes outputs of `entry`, with room made for one call on its shape."""
        if entry.shape is None or getattr(self, "memory", None) is None:
            return step()
        sizes = self.memory.sizes_of(entry.shape)
        grow = region_growth(getattr(self, "oracle", None), sizes.inputs, sizes.reply) if sizes else 0
        need = sizes.call() + grow if sizes else None
        out = self.with_room(entry.shape, need, [entry.key], what, step, idle=self.idle_while("oracle"))
        self._note_sizes(entry)
        return out

    def listed_expected(self, entry) -> tuple:
        """The reference outputs of a cache entry (computed once per entry)."""
        if entry.expected is not None:
            return entry.expected
        return self._outputs_room(entry, "the reference", lambda: self.inputs.expected(
            entry, lambda inputs: C.as_tuple(self.reference(**inputs))))

    def listed_base(self, entry) -> tuple[tuple, list | None]:
        """The trusted base's outputs on a cache entry and their mean error against the reference."""
        expected = self.listed_expected(entry)

        def check(base_outs):
            # A pure-library base (KernelBench) is the reference itself, with zero error: no
            # yardstick for the candidate's precision (the representability check still runs).
            if self.harness.library_base:
                return None
            # Values after a cast to the common precision (a float32 reference is normal); the
            # arguments check_outputs gives a candidate's output, so a bitwise-equal output's
            # Check is this one (see known_checks).
            return [C.compare(b, e, self._tol(b), "base", like=b)
                    for b, e in zip(base_outs, expected, strict=False)]

        # call() switches to the private base cache for the base (self.trusted).
        def run_base(inputs):
            return self.call(self.base_fn, inputs, float("nan"), None)

        if entry.base_outs is not None:
            return entry.base_outs, entry.base_err
        return self._outputs_room(entry, "the base's outputs",
                                  lambda: self.inputs.base(entry, run_base, check))

    def known_checks(self, entry, outs: tuple) -> list | None:
        """For each output bit for bit the base's on `entry` (same dtype, shape and device), the
        base's (Check, precision_downgrade message) there, else None: both are functions of the
        output's bits and the reference only, so they need not be computed again. None instead of
        the list where the base has no yardstick or failed a check itself (its messages name it)."""
        base_outs, checks = entry.base_outs, entry.base_checks
        if checks is None or len(outs) != len(base_outs) or len(checks) != len(outs) or any(
                c.problem for c in checks):
            return None
        if entry.base_precision is None:
            expected = self.listed_expected(entry)
            entry.base_precision = [C.precision_downgrade(b, e, c.mean_abs_err, c.mean_abs_err)
                                    for b, e, c in zip(base_outs, expected, checks, strict=False)]
        out = []
        for o, b, c, why in zip(outs, base_outs, checks, entry.base_precision, strict=True):
            same = (type(o) is torch.Tensor and type(b) is torch.Tensor and o.device == b.device
                    and C.same_bits(o, b))
            out.append((c, why) if same else None)
        return out

    def shape_size(self, shape: dict, seed: int) -> float:
        """A shape's size for choosing representative shapes: bytes_moved, else its input bytes."""
        if self.harness.bytes_moved:
            return float(self.harness.bytes_moved(shape))
        return float(_nbytes(list(C.tensors_of(self.listed(shape, seed, 0).originals).values())))

    def timing_sets(self, shape: dict, seed: int, count: int) -> list[tuple[dict, tuple]]:
        """(original inputs, reference outputs) of the first `count` trials: what timing runs on."""
        entries = self.timing_entries(shape, seed, count)
        return [(e.originals, self.listed_expected(e)) for e in entries]

    def timing_entries(self, shape: dict, seed: int, count: int) -> list:
        """The cache entries of the first `count` trials, each made beside the others."""
        entries, keep = [], []
        for t in range(count):
            entries.append(self.listed(shape, seed, t, keep=keep))
            keep.append(self.inputs.key(shape, listed_seed(seed, shape, t)))
        return entries
