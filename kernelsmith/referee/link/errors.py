"""How a judge/runner link fails (channel.py, judge.py, runner.py): the exceptions they share,
in a module of their own so that every side imports them without importing the others."""


class ProtocolError(Exception):
    """The peer sent something that is not a well-formed message (from the runner: `protocol`)."""


class PeerGone(Exception):
    """The peer closed its end (it exited or died)."""


class RunnerFailed(Exception):
    """The runner died, broke the protocol or claimed what cannot be: ends the evaluation."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason, self.message = reason, message


class CandidateError(Exception):
    """Candidate code raised in the runner: (violation name, traceback text) as classified there."""

    def __init__(self, name: str, text: str):
        super().__init__(text.strip().splitlines()[-1] if text.strip() else name)
        self.name, self.text = name, text


class InfrastructureError(RuntimeError):
    """The referee's own machinery failed (the runner template died, a runner could not be
    forked): not the candidate's doing, so the parent judges the candidate again on a new worker."""


class BaseRunFailed(RuntimeError):
    """At a worker's start the base, or the harness's make_inputs or reference, failed on a listed
    shape: the task loaded, so the parent reports the base failing (a crash), not a load error."""
