"""The judge's runners, one per candidate: each is forked fresh from the runner template, booted
while nothing is timed (its init and a warm-up call of the base sent together after the previous
verdict), and retired once it has loaded code kernelsmith did not render from the base. A mixin of
session.Session, whose state (template, link, pending, memory planner, input cache) it uses."""

from __future__ import annotations

import json

from kernelsmith.referee.checks import correctness as C
from kernelsmith.referee.link.errors import CandidateError, RunnerFailed
from kernelsmith.referee.memory import DeviceMemoryShort, device_oom
from kernelsmith.referee.proc.autotune_share import table_size
from kernelsmith.referee.proc.compile_cache import make_private
from kernelsmith.referee.proc.judge import RunnerLink, holds_capabilities
from kernelsmith.referee.timing.phase_clock import PhaseClock
from kernelsmith.scratch import remove_tree

WARM_STEP = "warming a new runner"  # the memory decisions' name for a new runner's first base call


class RunnerSwaps:
    """Starting, warming, replacing and stopping the judge's runner (Session's part for runners)."""

    def _spawn_runner(self) -> RunnerLink:
        """A new runner; pausing or sweeping the runner's side leaves the oracle and template be."""
        link = self.template.spawn()
        link.spared = frozenset({self.oracle.pid, self.template.pid})
        return link

    def _send_init(self, link: RunnerLink) -> str:
        """Send a new runner its init request (answered later, see _ready_runner); its private base
        folder is made now, seeded with the base binaries, before any code runs there."""
        folder = str(make_private(self.workdir / ".triton-runner"))
        self.runner_folders.append(folder)
        link.chan.send({"op": "init", "spec": {**self.spec, "runner_cache": folder,
                                               "calibration": self.calibration,
                                               "base_cache_seed": self._runner_seed,
                                               "base_profiles": self._profiles,
                                               "base_autotune": self.autotune}})
        link.tuning_sent = table_size(self.autotune)
        return folder

    def _ready_runner(self, link: RunnerLink, clock: PhaseClock | None = None) -> None:
        """Wait for a runner's init answer, then share the regions with it."""
        reply, _ = link.receive()
        if clock is not None:
            clock.mark("runner_init")
        if not reply.get("own_userns") and holds_capabilities():
            raise RuntimeError("the referee's runner could not enter a user namespace of its own, and the "
                               "judge holds capabilities it could use against the judge; refusing to run")
        # Tensors cross through buffers shared once (CUDA IPC on the GPU), else message files.
        self.regions_off = link.probe_regions(self.dev)
        if link.chan.regions is not None and link.chan.regions.device.type == "cpu":
            # The runner's pinned copies of cached inputs, as many bytes as the cache. Not on CUDA:
            # there a device copy per request is cheap, while a pin doubles the cache's device
            # memory, must be compared after every evaluation (IPC memory is writable), and torch
            # may keep IPC-shared blocks until the worker exits (the code is there: tests/referee/
            # test_gpu_ipc.py gives a budget by hand).
            link.chan.regions.pins.budget = self.inputs.budget

    def start_next_runner(self) -> None:
        """Retire a runner that loaded candidate code and start its replacement now: its init and
        its first base call are sent at once, so its boot overlaps the time until the next
        evaluation (never a measurement: nothing is timed between evaluations)."""
        if not self.dirty or self.pending is not None:
            return
        old, self.dirty, self.loaded_any = self.link, False, False
        old.retire()
        for folder in self.runner_folders:
            remove_tree(folder, tries=1)
        self.runner_folders.clear()
        link = self._spawn_runner()
        # Regions the first runner could not map stay off; the first message describes new ones.
        link.set_device(str(self.dev), regions=self.use_regions and not self.regions_off)
        if link.chan.regions is not None and link.chan.regions.device.type == "cpu":
            link.chan.regions.pins.budget = self.inputs.budget
        self.runner_cache = self._send_init(link)
        shape, entry, need = self._warm_step(link)
        if need is not None:
            # The cache may have grown into the device since the last runner booted (it fills what
            # is free): room for the new runner's warm-up call, or the base runs out of memory there.
            try:
                self.memory.make_room(shape, need, [entry.key], True, WARM_STEP, self.idle_while("runner"))
            except DeviceMemoryShort:
                pass  # tried again, with every other entry dropped, when its answer says so
        # The first call's one-off set-up (the interpreter's too), paid before the candidate's.
        link.chan.send(self._profile_request(shape), entry.originals,
                       pin=list(C.tensors_of(entry.originals).values()))
        self.pending = link

    def _warm_step(self, link: RunnerLink) -> tuple:
        """(shape, cache entry, device bytes) of a new runner's warm-up: the base once on the first
        listed shape's first trial (bytes None before that shape's sizes are known)."""
        shape = self.harness.shapes_for(self.device)[0]
        entry = self.listed(shape, self._profile_seed, 0)
        return shape, entry, self.profile_need(shape, link)

    @staticmethod
    def _profile_request(shape: dict, warm: bool = True) -> dict:
        """The runner's request to profile the base on `shape` (and, `warm`, compile it there)."""
        return {"op": "profile", "key": json.dumps(shape, sort_keys=True), "warm": warm}

    def _warm_again(self, link: RunnerLink, error: CandidateError) -> None:
        """A new runner's warm-up answered with an error. No candidate code has loaded there: where
        the device ran out of memory, every other cache entry is dropped and the call made again
        (`with_room`'s second try); anything else, or running out again, is the referee's failure,
        not the candidate's."""
        if not device_oom(error.text):  # before the session is touched: nothing of it is needed
            raise RunnerFailed("infrastructure", f"a new runner's warm-up call of the base failed: {error}")
        shape, entry, _ = self._warm_step(link)
        try:
            self.with_room(shape, None, [entry.key], WARM_STEP,
                           lambda: link.request(self._profile_request(shape), entry.originals,
                                                pin=list(C.tensors_of(entry.originals).values())),
                           idle=self.idle_while("runner"), failed=error)
        except (CandidateError, DeviceMemoryShort) as e:
            raise RunnerFailed("infrastructure", f"a new runner's warm-up call of the base, with every "
                               f"other cached entry dropped: {e}") from None

    def _take_next_runner(self, clock: PhaseClock) -> None:
        """Make the started replacement the runner, once its init and warm-up are answered."""
        self.start_next_runner()
        if self.pending is None:
            return
        link, self.pending = self.pending, None
        self.link = link
        reply, _ = link.receive()
        if not reply.get("own_userns") and holds_capabilities():
            raise RunnerFailed("infrastructure", "a new runner could not enter a user namespace of its own")
        clock.mark("runner_init")
        try:
            link.receive()
        except CandidateError as e:
            self._warm_again(link, e)
        clock.mark("runner_warm")

    def close_runners(self) -> None:
        """Stop the runner and a replacement that is booting."""
        for link in (self.link, self.pending):
            if link is not None:
                link.close()
        self.pending = None
