"""Device memory: what the referee's work on one listed shape needs, and room made for it.

The judge, its runner and its oracle are three processes on one device, and all of them hold copies
of a shape's tensors: the judge its cached inputs, reference and base outputs (input_cache.py) and
the regions it shares (shared_region.py); the runner the sets a timing request sends and a copy of
them per timed function (rotation.py); the oracle what it makes and the sets it times the base on.
Before each step that allocates on a shape's scale the judge measures the free device memory
(`Backend.free_memory`) and compares it with that step's need, computed from the sizes of the
shape's cached tensors (`ShapeBytes`). Where it does not fit, in this order: the regions shared
with the child the step leaves idle closed (the runner's while the oracle times the base, the
oracle's during a correctness trial; made again at the next message's size), fewer rotation
copies for the timing (down to one), other shapes' cached entries evicted (most recently used
first: a verdict asks for its entries in the same order every time), then this shape's own
cached data not needed by the step dropped (made again when next needed). After each stage the
room is measured again, not assumed from the bytes counted free: an eviction can give the device
back less than it held. Each decision is recorded for the verdict's `details.memory`. A step that
does not fit even then raises `DeviceMemoryShort`, naming the shape, its need and the memory free,
with one exception (`make_room_or_try`): a correctness step's need is an upper bound (every copy
that can be alive at once, on both sides), so where the room is the device's own measure (no cap),
such a step is tried all the same, with everything else dropped, and only the device's own
out-of-memory error, twice, fails it.

`Referee(device_memory_bytes=N)` (or $KERNELSMITH_DEVICE_MEMORY) caps the bytes the judge counts as
held by the referee (cache, regions, pins) plus a step's need at N, on any backend: a GPU shared
with other work, or a simulated device on the CPU.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass

from kernelsmith.errors import ConfigError
from kernelsmith.sandbox.limits import parse_size

# Of the device memory measured free, never planned: a replacement runner's CUDA context booting
# beside the others, the kernels' own workspaces, the allocator's rounding.
RESERVE_BYTES = 1 << 30
MEMORY_ENV = "KERNELSMITH_DEVICE_MEMORY"


def device_memory_cap(env: dict[str, str] | None = None) -> int | None:
    """$KERNELSMITH_DEVICE_MEMORY ("70G", "none"): the device bytes the referee may plan with
    (None: what the device reports free)."""
    value = (os.environ if env is None else env).get(MEMORY_ENV)
    if value is None or not value.strip():
        return None
    try:
        return parse_size(value)
    except ValueError:
        raise ConfigError(f"${MEMORY_ENV}", f"{value[:40]!r} is not a size such as 70G, 512M or none") \
            from None


def format_bytes(n: int | None) -> str:
    """2.35 GiB, 12.0 MiB, 512 B."""
    if n is None:
        return "unknown"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def shape_text(shape: dict) -> str:
    """batch=512,q_per_seq=1,... (as the verdict's messages name shapes)."""
    return ",".join(f"{k}={v}" for k, v in shape.items())


def tensor_bytes(value) -> int:
    """Bytes of the storages of the tensors in `value` (a dict, tuple or list of them, or one):
    what a copy of each allocates, and what crosses to another process."""
    import torch  # here, not at the top: the referee's parent imports this module and never torch

    if isinstance(value, torch.Tensor):
        return value.untyped_storage().nbytes()
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    return 0


@dataclass(frozen=True)
class ShapeBytes:
    """A listed shape's sizes, read off its cached tensors."""

    inputs: int  # one input set
    outputs: int  # one set's outputs, the larger of the reference's and the base's
    returned: bool  # the entry returns its outputs (each call allocates them), else writes inputs

    def merge(self, other: ShapeBytes) -> ShapeBytes:
        """The larger of two trials' sizes (a harness's sizes may follow the seed)."""
        return ShapeBytes(max(self.inputs, other.inputs), max(self.outputs, other.outputs),
                          self.returned or other.returned)

    @property
    def entry(self) -> int:
        """One cache entry: the inputs, the reference outputs and the base outputs."""
        return self.inputs + 2 * self.outputs

    def call(self) -> int:
        """One correctness trial's calls on one set beyond the cache, the judge's and the child's
        together: the judge's copy of the set, its copies of a reply's tensors (the whole set comes
        back: inputs written in place), the outputs a trial holds (the previous trial's, the first
        and the second call's; a returned output is copied out of the reply once more); the child's
        received set and, where the entry returns its outputs, its blocks of their sizes
        (correctness.dirty_allocator: three each, one of them the outputs)."""
        judge = 2 * self.inputs + (4 if self.returned else 3) * self.outputs
        child = self.inputs + (3 * self.outputs if self.returned else 0)
        return judge + child

    def profile(self) -> int:
        """The runner's profile of the base on one set (runner.profile; a new runner's warm-up too):
        the set it received, the copy it keeps and one more copy per call, and where the entry
        returns its outputs, three calls' (the watched call's are held by the fresh-output check
        while the next ones run). The judge keeps nothing of the reply but a record."""
        return 3 * self.inputs + (3 * self.outputs if self.returned else 0)

    def make(self) -> int:
        """Making one input set: the oracle's build of it and the judge's copy."""
        return 2 * self.inputs

    @property
    def reply(self) -> int:
        """What a call's reply carries back: the inputs, and the outputs where they are returned."""
        return self.inputs + (self.outputs if self.returned else 0)

    def timing(self, copies: int, sets: int) -> int:
        """A timing request beyond the cache: the runner's received sets, `copies` copies of them
        (rotation.py), the outputs of the calls and the last one's clone on both sides."""
        outs = (4 if self.returned else 2) * self.outputs
        return sets * self.inputs * (1 + copies) + outs

    def base_timing(self, sets: int) -> int:
        """The oracle's timing of the base (judge_timing.time_base): the sets received, copies of
        them, the outputs."""
        return 2 * sets * self.inputs + 2 * self.outputs


def region_growth(link, to_peer: int = 0, from_peer: int = 0) -> int:
    """Bytes the judge's regions (shared_region.py) of the channel to a child (its `link`: the
    runner's or the oracle's) must grow by for a request of `to_peer` bytes and its reply of
    `from_peer` (0 where there are none)."""
    regions = getattr(getattr(link, "chan", None), "regions", None)
    if regions is None:
        return 0
    return regions.growth("to_peer", to_peer) + regions.growth("from_peer", from_peer)


def drop_regions(link) -> int:
    """Close the regions the judge shares with a child (its `link`) for a step that leaves it
    idle (judge.ChildLink.drop_regions); the bytes they held."""
    drop = getattr(link, "drop_regions", None)
    return drop() if drop is not None else 0


class DeviceMemoryShort(Exception):
    """A step on one shape needs more device memory than is free after every other use is gone."""

    def __init__(self, shape: dict, need: int | None, free: int, what: str, sizes: ShapeBytes | None):
        self.shape, self.need, self.free, self.what, self.sizes = shape, need, int(free), what, sizes
        parts = "" if sizes is None else f" (one input set {format_bytes(sizes.inputs)}" + (
            f", its outputs {format_bytes(sizes.outputs)})" if sizes.outputs else ")")
        needs = f"needs {format_bytes(need)}" if need is not None else "ran out"
        super().__init__(
            f"shape {shape_text(shape)}: {what} {needs} of device memory{parts}, and "
            f"{format_bytes(free)} is free with every other shape's cached data evicted")

    def as_dict(self) -> dict:
        """The verdict's `details.memory_short`."""
        return {"shape": self.shape, "what": self.what, "need_bytes": self.need, "free_bytes": self.free,
                "input_set_bytes": self.sizes.inputs if self.sizes else None,
                "output_bytes": self.sizes.outputs if self.sizes else None}


def device_oom(text: str) -> bool:
    """Whether an error text is a device allocator's out-of-memory error."""
    return "CUDA out of memory" in text or "OutOfMemoryError" in text or "HIP out of memory" in text


class Gauge:
    """The room left for the referee's next step: measured free device memory less RESERVE_BYTES,
    and/or a cap less what the judge counts as held (`held`). None where neither exists (the
    interpreter without a cap: the input cache's byte budget bounds it alone)."""

    def __init__(self, measure: Callable[[], int | None], cap: int | None = None,
                 held: Callable[[], int] = lambda: 0, release: Callable[[], None] = lambda: None,
                 parts: Callable[[], dict] = dict):
        self.measure, self.cap, self.held, self._release, self.parts = measure, cap, held, release, parts

    def room(self) -> int | None:
        """Bytes the next step may allocate, across the referee's processes."""
        free = self.measure()
        rooms = [] if free is None else [free - RESERVE_BYTES]
        if self.cap is not None:
            rooms.append(self.cap - self.held())
        return min(rooms) if rooms else None

    def release(self) -> None:
        """Give back the memory the referee's processes keep cached but do not use."""
        self._release()


class MemoryPlanner:
    """Makes room for a step on one shape in the judge's input cache, and records the decisions."""

    def __init__(self, gauge: Gauge, cache):
        self.gauge, self.cache = gauge, cache
        self.sizes: dict[str, ShapeBytes] = {}  # shape key -> its largest sizes seen
        self.copies: dict[tuple[str, int], int] = {}  # (shape key, seed) -> rotation copies chosen
        self.sets: dict[tuple[str, int], int] = {}  # (shape key, seed) -> input sets, where fewer
        self.decisions: list[dict] = []
        self.least: int | None = None

    def begin(self, carried=()) -> None:
        """Start recording for one evaluation, from the decisions `carried` (made for it before)."""
        self.decisions, self.least = list(carried), None

    def report(self) -> dict:
        """The verdict's `details.memory`: the least room measured, the bytes the judge holds (in
        all, and by what holds them), each shape's sizes, and the decisions taken."""
        return {"least_free_bytes": self.least, "cap_bytes": self.gauge.cap, "held_bytes": self.gauge.held(),
                "held": self.gauge.parts(),
                "shapes": [{"shape": json.loads(k), "input_set_bytes": v.inputs, "output_bytes": v.outputs}
                           for k, v in self.sizes.items()],
                "decisions": list(self.decisions)}

    def note_sizes(self, shape: dict, sizes: ShapeBytes) -> ShapeBytes:
        """Remember a trial's sizes for its shape; returns the shape's largest sizes so far."""
        key = _key(shape)
        self.sizes[key] = sizes if key not in self.sizes else self.sizes[key].merge(sizes)
        return self.sizes[key]

    def sizes_of(self, shape: dict) -> ShapeBytes | None:
        """The largest sizes seen for `shape` (None before its first entry)."""
        return self.sizes.get(_key(shape))

    def room(self) -> int | None:
        """The room now (tracked: the verdict reports the least)."""
        room = self.gauge.room()
        if room is not None and (self.least is None or room < self.least):
            self.least = room
        return room

    def fits(self, need: int) -> bool:
        """Whether `need` bytes fit now, after the referee's processes give back their caches."""
        room = self.room()
        if room is None or room >= need:
            return True
        self.gauge.release()
        room = self.room()
        return room >= need

    def make_room(self, shape: dict, need: int, keep=(), keep_outputs: bool = True, what: str = "",
                  idle=()) -> None:
        """Room for `need` bytes for a step on `shape` that uses the cache entries `keep` (their
        reference and base outputs too unless `keep_outputs` is False) and leaves the children
        `idle` alone (their shared regions may be closed); DeviceMemoryShort where even dropping
        everything else leaves too little. Each stage goes on until the room measured, not the
        bytes counted, holds `need`: what an eviction gives back to the device can be less than
        it held (a block of the allocator still partly in use)."""
        if self.fits(need):
            return
        key, keep = _key(shape), set(keep)
        freed, _, room = self._free(need, [(link, drop_regions) for link in idle])
        if freed:
            self.decisions.append({"shape": shape, "step": what, "action": "dropped_regions", "bytes": freed,
                                   "need_bytes": need, "free_bytes": room,
                                   "note": "the regions shared with a process this step leaves idle were "
                                           "closed: made again, at the size a message needs, when next used"})
            if self.fits(need):
                return
        # Most recently used first: a verdict asks for its entries in the same order every time, and
        # on such a cycle the entry used last is the one needed again latest (least recent first
        # evicted each entry just before its turn came round: no hit in a cache too small for all).
        others = [(k, self.cache.evict) for k in reversed(self.cache.entries)
                  if k[0] != key and k not in keep]
        freed, taken, room = self._free(need, others)
        if taken:
            self.decisions.append({"shape": shape, "step": what, "action": "evicted",
                                   "shapes": _distinct([json.loads(k[0]) for k in taken]), "bytes": freed,
                                   "need_bytes": need, "free_bytes": room})
            if self.fits(need):
                return
        # This shape's other trials, most recent first too (the one just done is needed again latest).
        own = [(k, self.cache.evict) for k in reversed(self.cache.entries) if k[0] == key and k not in keep]
        if not keep_outputs:
            own += [(k, self.cache.drop_outputs) for k in keep]
        freed, _, room = self._free(need, own)
        if freed:
            self.decisions.append({"shape": shape, "step": what, "action": "regenerate", "bytes": freed,
                                   "need_bytes": need, "free_bytes": room,
                                   "note": "this shape's cached data not used by the step was dropped: "
                                           "it is made again when next needed"})
        if not self.fits(need):
            raise DeviceMemoryShort(shape, need, self.room(), what or "this step", self.sizes_of(shape))

    def make_room_or_try(self, shape: dict, need: int, keep=(), keep_outputs: bool = True, what: str = "",
                         idle=()) -> None:
        """`make_room`, except that on a measured device (no cap) a step planned not to fit is left
        to be tried (`tried_short` in the decisions): its plan is an upper bound, and the caller
        handles the device's out-of-memory error (input_cache.with_room, shape_trials.trial_call)."""
        try:
            self.make_room(shape, need, keep, keep_outputs, what, idle)
        except DeviceMemoryShort as short:
            if self.gauge.cap is not None:  # a cap is a limit set by the user, not an estimate
                raise
            self.decisions.append({"shape": shape, "step": what, "action": "tried_short", "need_bytes": need,
                                   "free_bytes": short.free,
                                   "note": "planned not to fit with everything else dropped; the plan "
                                           "counts every copy that can be alive at once, so the step was "
                                           "tried, and only the device running out of memory fails it"})

    def _free(self, need: int, steps: list) -> tuple[int, list, int]:
        """Take `steps` ((thing, free(thing) -> bytes)) in order until `need` fits the room measured;
        (bytes freed, things taken, the room before)."""
        start = room = self.room()
        freed, total, taken = 0, 0, []
        for thing, free in steps:
            if room + freed >= need:
                if self.fits(need):
                    break
                room, freed = self.room(), 0  # the device gave back less than was counted
            n = free(thing)
            freed, total = freed + n, total + n
            taken.append(thing)
        return total, taken, start

    def evict_all(self, shape: dict, keep=(), what: str = "", idle=()) -> None:
        """After the device ran out of memory in a step on `shape`: drop every cache entry but
        `keep` and the regions of the children `idle`, and give back what the processes cache."""
        key, keep = _key(shape), set(keep)
        others = [k for k in self.cache.entries if k not in keep]
        freed = sum(self.cache.evict(k) for k in others) + sum(drop_regions(link) for link in idle)
        self.gauge.release()
        self.decisions.append({"shape": shape, "step": what, "action": "evicted",
                               "shapes": _distinct([json.loads(k[0]) for k in others if k[0] != key]),
                               "bytes": freed, "note": "the device ran out of memory: every other cached "
                                                       "entry and idle shared region was dropped and the "
                                                       "step tried again"})

    def timing_copies(self, shape: dict, seed: int, need_of: Callable[[int], int], n_fns: int,
                      keep=(), idle=()) -> int:
        """How many rotation copies a timing of `shape` gets (rotation.py): all `n_fns` where they fit
        (the regions of the children `idle` closed first where they do not), else the most that
        fit, evicting (make_room) only where even one does not; never more than an earlier timing
        of this shape and seed got, so a run's measurements stay alike."""
        memo = (_key(shape), int(seed))
        most = min(n_fns, self.copies.get(memo, n_fns))
        room = self.room()
        if room is None:
            return most
        if need_of(most) > room:
            self.gauge.release()
            room = self.room()
        if need_of(most) > room and idle:
            freed = sum(drop_regions(link) for link in idle)
            if freed:
                self.decisions.append({"shape": shape, "step": "timing", "action": "dropped_regions",
                                       "bytes": freed, "need_bytes": need_of(most), "free_bytes": room})
                self.gauge.release()
                room = self.room()
        chosen = next((c for c in range(most, 0, -1) if need_of(c) <= room), None)
        if chosen is None:
            self.make_room(shape, need_of(1), keep, keep_outputs=False, what="timing with one copy",
                           idle=idle)
            room = self.room()
            chosen = next((c for c in range(most, 0, -1) if need_of(c) <= room), 1)
        if chosen < n_fns:  # a limit of memory (a screen times fewer functions than a full measurement)
            self.copies[memo] = chosen
            self.decisions.append({"shape": shape, "step": "timing", "action": "fewer_copies",
                                   "copies": chosen, "of": n_fns, "need_bytes": need_of(n_fns),
                                   "free_bytes": room})
        return chosen

    def timing_sets(self, shape: dict, seed: int, most: int) -> int:
        """How many input sets a timing of `shape` rotates: `most`, or fewer where an earlier timing
        of this shape and seed had to take fewer (a run's measurements stay alike)."""
        return min(most, self.sets.get((_key(shape), int(seed)), most))

    def fewer_sets(self, shape: dict, seed: int, sets: int, need: int | None, free: int) -> int:
        """After one copy of `sets` input sets did not fit: the sets to time with instead."""
        self.sets[(_key(shape), int(seed))] = sets - 1
        self.decisions.append({"shape": shape, "step": "timing", "action": "fewer_sets", "sets": sets - 1,
                               "of": sets, "need_bytes": need, "free_bytes": free,
                               "note": "one copy of every input set did not fit: timed on fewer sets"})
        return sets - 1

    def fewer_after_oom(self, shape: dict, seed: int, copies: int) -> int | None:
        """After a timing ran out of device memory with `copies`: the copies to retry with (None:
        it had one already)."""
        if copies <= 1:
            return None
        self.copies[(_key(shape), int(seed))] = copies - 1
        self.decisions.append({"shape": shape, "step": "timing", "action": "fewer_copies",
                               "copies": copies - 1, "of": copies,
                               "note": "the device ran out of memory with more"})
        return copies - 1


def _key(shape: dict) -> str:
    return json.dumps(shape, sort_keys=True)


def _distinct(shapes: list[dict]) -> list[dict]:
    out = []
    for s in shapes:
        if s not in out:
            out.append(s)
    return out
