"""A Precompiler-shaped stand-in for the search tests: every job is accepted and built at once;
tests override `ready` (still building) or `wait` (a compile that outlasts a limit)."""

from __future__ import annotations


class StubCompiler:
    """Precompiler-shaped: jobs are accepted and forgotten, and count as built."""

    stats = {"jobs": 0, "ok": 0, "failed": 0, "seconds": 0.0}

    def submit(self, cid, code):
        pass

    def calibrate(self, code):
        pass

    def ready(self, cid, limit=None):
        return True

    def wait(self, cid, timeout, limit=None):
        return None

    def close(self):
        pass
