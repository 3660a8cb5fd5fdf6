"""event_timing.time_reps on a simulated device queue: a host that queues a call after the device
reached its start event is caught, and that repetition is timed again (no GPU needed: the queue
below keeps a host clock and a device clock the way a CUDA stream does)."""

import pytest

from kernelsmith.referee.backend.event_timing import BLOCK, MAX_SPIN_US, SPIN_US, LateReps, time_reps

FLUSH_US = 15.0
HOST_OP_US = 3.0  # host cost of queueing anything (a record, the flush, the spin)


class SimQueue:
    """One in-order device queue: work queued at host time h starts at max(h, device free)."""

    def __init__(self):
        self.host = 0.0
        self.free = 0.0
        self.spins: list[float] = []

    def _queue(self, device_us: float) -> float:
        self.host += HOST_OP_US
        self.free = max(self.host, self.free) + device_us
        return self.free

    def event(self):
        return SimEvent(self)

    def gap(self, spin_us):
        self.spins.append(spin_us)
        self._queue(FLUSH_US)
        self._queue(spin_us)

    def synchronize(self):
        self.host = max(self.host, self.free)


class SimEvent:
    def __init__(self, q):
        self.q, self.at = q, None

    def record(self):
        self.at = self.q._queue(0.0)

    def query(self):
        return self.at <= self.q.host

    def elapsed_time(self, end):
        return (end.at - self.at) / 1000.0


def kernel(q: SimQueue, device_us: float, host_us: float, stalls=()):
    """A launcher taking `host_us` of host time (more on the reps in `stalls`: rep -> extra us)
    before it queues `device_us` of device work."""
    def fn(r):
        q.host += host_us + dict(stalls).get(r, 0.0)
        q._queue(device_us)
    return fn


def test_an_honest_host_times_every_call_alone():
    q = SimQueue()
    late = LateReps()
    times, spin = time_reps(q, [kernel(q, 5.0, 30.0), kernel(q, 7.0, 30.0)], 40, 0, SPIN_US, late)
    assert times[0] == pytest.approx([0.005] * 40) and times[1] == pytest.approx([0.007] * 40)
    assert late.snapshot() == (0, 0) and spin == SPIN_US


def test_a_stalled_host_is_timed_again_not_timed_as_the_kernel():
    """The H200 case: the host stalled on a few calls of a 5 us kernel. Timed as before (no check)
    those samples read 0.05-0.2 ms; here their reps are dropped and timed again. A stall shorter
    than the device work already queued is harmless (rep 9: the queue had ~1 ms left)."""
    q = SimQueue()
    stalls = {0: 300.0, 7: 10_000.0, 9: 150.0, 30: 10_000.0}
    late = LateReps()
    times, spin = time_reps(q, [kernel(q, 5.0, 30.0, stalls), kernel(q, 5.0, 30.0)], 40, 1, SPIN_US, late)
    assert len(times[0]) == len(times[1]) == 40
    assert max(times[0]) == pytest.approx(0.005) and max(times[1]) == pytest.approx(0.005)
    assert late.snapshot() == (3, 0)
    # The spin doubled after each of the two blocks with a late rep, and halved after the clean third.
    assert max(q.spins) == 4 * SPIN_US and spin == 2 * SPIN_US


def test_the_unchecked_loop_would_have_timed_the_stall():
    """The simulation reproduces the defect it guards against: a late sample, kept, is inflated."""
    q = SimQueue()
    start, end = q.event(), q.event()
    q.gap(SPIN_US)
    start.record()
    kernel(q, 5.0, 30.0, {0: 300.0})(0)
    end.record()
    assert start.query() and start.elapsed_time(end) > 0.2


def test_a_launcher_that_waits_for_the_device_is_kept_after_the_allowance():
    """A call that synchronises inside itself is late on every rep: after `reps` re-timings its
    samples are kept (as the loop always did), counted, and the spin stays capped."""
    q = SimQueue()

    def syncing(r):
        q.synchronize()
        q._queue(5.0)
    late = LateReps()
    times, spin = time_reps(q, [syncing], 2 * BLOCK, 2, SPIN_US, late)
    assert len(times[0]) == 2 * BLOCK
    assert late.snapshot() == (2 * BLOCK, 2 * BLOCK)
    assert max(q.spins) <= MAX_SPIN_US and spin == MAX_SPIN_US


def test_the_order_is_shuffled_per_rep_and_reproducible():
    def order_of(seed):
        q, calls = SimQueue(), []
        fns = [lambda r, i=i: calls.append(i) for i in range(3)]
        time_reps(q, fns, 10, seed, SPIN_US, LateReps())
        return calls
    assert order_of(5) == order_of(5) and order_of(5) != order_of(6)
    assert all(sorted(order_of(5)[k:k + 3]) == [0, 1, 2] for k in range(0, 30, 3))


def test_prepare_runs_before_the_flush_outside_the_bracket():
    q = SimQueue()
    seen = []
    fn = kernel(q, 5.0, 10.0)
    fn.prepare = lambda r: (seen.append(r), q._queue(50.0))  # a 50 us restore, untimed
    times, _ = time_reps(q, [fn], 5, 0, SPIN_US, LateReps())
    assert seen == [0, 1, 2, 3, 4] and times[0] == pytest.approx([0.005] * 5)


def test_the_garbage_collector_is_off_while_calls_are_queued_and_back_after():
    import gc

    q, seen = SimQueue(), []
    fn = kernel(q, 5.0, 10.0)
    time_reps(q, [lambda r: (seen.append(gc.isenabled()), fn(r))], 4, 0, SPIN_US, LateReps())
    assert seen == [False] * 4 and gc.isenabled()
    gc.disable()
    try:  # a caller that had it off keeps it off
        time_reps(q, [fn], 2, 0, SPIN_US, LateReps())
        assert not gc.isenabled()
    finally:
        gc.enable()
