"""The monkeypatch snapshot: callables replaced, removed or added are named; values that are not
callables may change; identity decides, never `==`."""

import types

from kernelsmith.referee.checks.snapshot import Snapshot


def _module() -> types.ModuleType:
    mod = types.ModuleType("ks_snapshot_probe")
    mod.fn = len
    mod.counter = 0
    mod.helper = print
    return mod


def test_replaced_removed_and_added_callables_are_named_and_values_may_change():
    mod = _module()
    snap = Snapshot(extra={"probe": mod})
    mod.counter = 5  # not a callable: the harness or torch may keep counters
    assert snap.changes() == []
    mod.fn = abs
    del mod.helper
    mod.extra = sorted
    mod.counter = max  # a value replaced by a callable counts as a callable added
    assert snap.changes() == ["probe.counter", "probe.extra", "probe.fn", "probe.helper"]
    mod.fn, mod.helper, mod.counter = len, print, 0
    del mod.extra
    assert snap.changes() == []


def test_an_object_that_claims_equality_does_not_hide_a_replacement():
    class Liar:
        def __eq__(self, other):
            return True

        __hash__ = object.__hash__

        def __call__(self, *a):
            return 0

    mod = _module()
    snap = Snapshot(extra={"probe": mod})
    mod.fn = Liar()
    assert snap.changes() == ["probe.fn"]
