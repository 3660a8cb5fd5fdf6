"""The judge's side of a referee worker: its runner child and the checks on what the runner says.

The worker process (worker.py) is the judge: it holds the answer channel to the parent, the
inputs and the reference (made by its oracle child from the harness: oracle.py), and decides every
verdict field; it never imports or runs candidate or target-repository code. Candidate code runs
in its child, the runner (runner.py), reached through channel.py. Before the runner is forked the
judge makes itself non-dumpable (no ptrace, no /proc/<pid>/mem or fd of it for a same-uid
process); the runner keeps no descriptor but its channel and the log, and moves into a user
namespace of its own. The runner's replies are hostile input: a malformed one is a `protocol`
rejection, times that cannot be true are `forged_timing`.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

import torch

from kernelsmith.referee.checks import correctness as C
from kernelsmith.referee.checks.shape_trials import Rejected
from kernelsmith.referee.link.channel import Channel, pair
from kernelsmith.referee.link.errors import (
    CandidateError,
    DeviceOutOfMemory,
    PeerGone,
    ProtocolError,
    RunnerFailed,
)
from kernelsmith.referee.link.shared_region import room_for, storage_key

SHUTDOWN_S = 5.0


class RemoteFn:
    """Stands, in the judge, for a function loaded in the runner ("cand", "base" or "aa")."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<runner's {self.name}>"


def substitute(inputs: dict, pristine: dict | None) -> tuple[dict, list]:
    """(`inputs` with each tensor replaced by its pristine twin where shape, dtype, strides, offset
    and device agree, the twins used). Only where the twins share no storage with one another, as
    the copies do not (else the runner would see aliasing the copies lack)."""
    if not pristine:
        return inputs, []
    twins = {k: pristine[k] for k, v in inputs.items() if type(v) is torch.Tensor
             and type(pristine.get(k)) is torch.Tensor
             and (v.shape, v.dtype, v.stride(), v.storage_offset(), v.device)
             == (pristine[k].shape, pristine[k].dtype, pristine[k].stride(), pristine[k].storage_offset(),
                 pristine[k].device)}
    if len({storage_key(t) for t in twins.values()}) != len(twins):
        return inputs, []
    return {**inputs, **twins}, list(twins.values())


def make_non_dumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0) on this process (Linux, via ctypes); False where it did not take."""
    from kernelsmith.sandbox.environ import hide_environ

    return hide_environ()


def holds_capabilities() -> bool:
    """Whether this process has any effective capability (in its user namespace)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16) != 0
    except (OSError, ValueError):
        pass
    return False


PR_SET_CHILD_SUBREAPER = 36


class RunnerTemplate:
    """A clean process that forks a fresh runner per candidate, so no runner that ran one
    candidate's code ever runs another's (or the final re-measurement).

    Forked by the judge before it touches a device or loads anything of the task (a CUDA context
    does not survive a fork), it keeps only its control socket and the log. Each runner is forked
    twice (template -> short-lived middle -> runner) and the judge is the child subreaper, so every
    runner is the judge's own child: the judge waits for it, signals it and sees how it died.
    """

    def __init__(self):
        make_non_dumpable()
        _subreaper()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            mine.close()
            _template_main(theirs)  # never returns
        theirs.close()
        self.pid, self.ctl = pid, mine
        self.spawned = 0

    def spawn(self) -> RunnerLink:
        """A new runner (a fresh process that has run nothing), linked to this judge."""
        mine, theirs = pair()
        try:
            self.ctl.settimeout(30.0)
            socket.send_fds(self.ctl, [b"fork"], [theirs.fileno()])
            reply = self.ctl.recv(64)
        except OSError as e:
            raise RunnerFailed("infrastructure", f"the runner template cannot fork a runner: {e}") from None
        finally:
            theirs.close()
        if not reply.startswith(b"pid "):
            raise RunnerFailed("infrastructure", "the runner template died (it forked no runner)")
        self.spawned += 1
        return RunnerLink(int(reply[4:]), mine)

    def alive(self) -> bool:
        """Whether the template still runs."""
        try:
            return os.waitpid(self.pid, os.WNOHANG)[0] == 0
        except ChildProcessError:
            return False

    def close(self) -> None:
        """Stop the template (runners it made are the judge's children, closed separately)."""
        self.ctl.close()
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def _subreaper() -> None:
    """Make orphaned descendants (the runners, once their middle process exits) this process's."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # then only a PID namespace's init (the judge inside the sandbox) adopts them


def _template_main(ctl: socket.socket) -> None:
    """In the template: serve fork requests until the judge closes the socket. Never returns."""
    code = 70
    try:
        from kernelsmith.referee.proc.runner import close_fds_except

        devnull = os.open(os.devnull, os.O_RDONLY)  # fd 0 stays taken: no received socket lands there
        os.dup2(devnull, 0)
        close_fds_except({0, ctl.fileno(), 1, 2})
        ctl.settimeout(None)
        while True:
            try:
                _, fds, _, _ = socket.recv_fds(ctl, 16, 1)
            except OSError:
                break
            if not fds:
                break
            r, w = os.pipe()
            middle = os.fork()
            if middle == 0:
                os.close(r)
                runner = os.fork()
                if runner == 0:
                    os.close(w)
                    from kernelsmith.referee.proc.runner import start

                    start(socket.socket(fileno=fds[0]), (1, 2))  # never returns
                os.write(w, str(runner).encode())
                os._exit(0)
            os.close(w)
            os.close(fds[0])
            with os.fdopen(r, "rb") as f:
                told = f.read()
            os.waitpid(middle, 0)  # the runner is the judge's child from here on
            ctl.send(b"pid " + told if told else b"failed")
        code = 0
    except BaseException:  # noqa: BLE001 - report, then leave without the judge's cleanup
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


class ChildLink:
    """A child of the judge reached through a Channel (a runner, the oracle): whether it lives,
    and its end."""

    def __init__(self, pid: int, sock):
        self.pid = pid
        self.chan = Channel(sock, "cpu", trusted_peer=False)
        self.status: int | None = None

    def _dead(self) -> bool:
        if self.status is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.status = -signal.SIGKILL
                return True
            if pid == 0:
                return False
            self.status = os.waitstatus_to_exitcode(status)
        return True

    def _wait_dead(self, limit: float = SHUTDOWN_S) -> None:
        deadline = time.monotonic() + limit
        while not self._dead() and time.monotonic() < deadline:
            time.sleep(0.02)

    def stop(self, grace: float) -> None:
        """Asked to exit and given `grace` seconds where `grace` > 0, then killed and reaped."""
        if grace > 0:
            try:
                self.chan.send({"op": "exit"})
            except OSError:
                pass
            self._wait_dead(grace)
        if not self._dead():
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._wait_dead()
        self.chan.close()

    def close(self) -> None:
        """Ask the child to exit; kill it if it does not."""
        self.stop(grace=2.0)

    request_errors: tuple = ()  # what the subclass's `request` raises when the child fails one

    def drop_regions(self) -> int:
        """Close the regions shared with this child, which the step about to run leaves idle: the
        child lets go of its mappings first, so their memory can go back to the device; the next
        message that needs one makes it again. Returns the bytes they held."""
        regions = self.chan.regions
        if regions is None or regions.region_bytes() == 0:
            return 0
        if not self._dead():
            try:
                self.request({"op": "drop_regions"})
            except self.request_errors:
                pass  # its mappings stay: the memory measured next says so
        return regions.drop()


class RunnerLink(ChildLink):
    """The judge's handle on one runner: requests, and death."""

    spared: frozenset[int] = frozenset()  # the judge's other children (oracle, template): never swept
    request_errors = (RunnerFailed, CandidateError, Rejected)

    def __init__(self, pid: int, sock):
        super().__init__(pid, sock)
        self._last_sent: dict[str, torch.Tensor] = {}
        self.tuning_sent = 0  # the base's autotune choices this runner was given (autotune_share.py)

    def set_device(self, device: str, regions: bool = True) -> None:
        """Where received tensors go (the judge's device), and where the shared regions live
        (`regions` False: every tensor travels in message files)."""
        self.chan.device = device
        if regions:
            self.chan.share_regions(device)

    def probe_regions(self, device) -> str | None:
        """Send a small tensor through the shared regions and back; where that fails (the runner
        cannot map them, or the bytes differ), every tensor travels in message files from now on.
        Returns why they were turned off, else None."""
        regions = self.chan.regions
        if regions is None or not regions.enabled:
            return None
        probe = torch.arange(256, dtype=torch.int32, device=device)
        why = None
        try:
            _, out = self.request({"op": "echo"}, {"t": probe}, reply_bytes=probe.numel() * 4)
            back = out.get("t") if isinstance(out, dict) else None
            if type(back) is not torch.Tensor or back.shape != probe.shape or back.dtype != probe.dtype \
                    or not torch.equal(back, probe) or self.chan.stats["shared_bytes"] == 0:
                why = "the probe came back changed"
        except Exception as e:  # noqa: BLE001 - this torch cannot share (or the runner cannot map) them
            why = f"{type(e).__name__}: {str(e)[:300]}"
        if why:
            regions.close()
            self.chan.regions = None
            self.request({"op": "regions_off"})
        self.chan.reset_stats()
        return why

    def death_note(self) -> str:
        """How the runner ended, in words."""
        code = self.status
        if code is not None and code < 0:
            try:
                return f"the runner process was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"the runner process was killed by signal {-code}"
        return f"the runner process exited with status {code}"

    def request(self, msg: dict, values=None, reply_bytes: int = 0, pin=()) -> tuple[dict, object]:
        """Send one request and wait (no limit: the parent's wall clock ends a hang) for its reply
        (`reply_bytes`: what its tensors will likely take, for the shared reply region; `pin`:
        cached tensors among `values` the runner may keep a shared copy of)."""
        if self._dead():
            raise RunnerFailed("crash", self.death_note())
        try:
            self.chan.send(msg, values, reply_bytes=reply_bytes, pin=pin)
        except OSError:
            self._wait_dead()
            raise RunnerFailed("crash", self.death_note()) from None
        return self.receive()

    def receive(self) -> tuple[dict, object]:
        """Wait for the runner's next reply (to a request sent earlier) and check it."""
        while True:
            try:
                reply, out = self.chan.recv(timeout=1.0)
            except TimeoutError:
                if self._dead():
                    raise RunnerFailed("crash", self.death_note()) from None
                continue
            except PeerGone:
                self._wait_dead()
                raise RunnerFailed("crash", self.death_note()) from None
            except DeviceOutOfMemory as e:  # the judge's copy of a well-formed reply: memory.py's to handle
                raise CandidateError("crash", f"the judge, taking in the runner's reply: {e}") from None
            except (ProtocolError, OSError, ValueError) as e:
                raise RunnerFailed("protocol", f"the runner's reply is malformed: {e}") from None
            if reply.get("ok") is True:
                return reply, out
            if isinstance(reply.get("rejected"), list) and len(reply["rejected"]) == 3:
                reason, message, error = reply["rejected"]
                raise Rejected(str(reason), str(message)[:4000], None if error is None else str(error)[:8000])
            if isinstance(reply.get("raised"), list) and len(reply["raised"]) == 2:
                raise CandidateError(str(reply["raised"][0]), str(reply["raised"][1])[:8000])
            raise RunnerFailed("protocol", f"the runner failed a request: {str(reply.get('error'))[:2000]}")

    def call(self, fn: RemoteFn, inputs: dict, dirty: float, watch: bool, sizes, outputs,
             pristine: dict | None = None) -> tuple:
        """Run `fn` in the runner on `inputs`: the post-call values of every input tensor are copied
        back into `inputs` (in-place outputs, mutations); returns the outputs, private to the judge.
        `pristine`: cached tensors `inputs` holds copies of (bit for bit, write-only outputs aside):
        those are sent instead, pinned, so they cross to the runner once per cache entry.

        A tensor object sent in the previous call lands in the same runner storage again (a result
        cached by address is caught as before: see trials.in_arena)."""
        mine = C.tensors_of(inputs)
        same = [n for n, t in mine.items() if self._last_sent.get(n) is t]
        # Outputs the harness names are among the inputs, which come back anyway.
        back_bytes = room_for(mine.values(), sizes if outputs is None else ())
        sent, pin = substitute(inputs, pristine)
        reply, out = self.request({"op": "call", "fn": fn.name, "dirty": dirty, "watch": watch,
                                   "sizes": list(sizes), "same": same}, sent, reply_bytes=back_bytes, pin=pin)
        self._last_sent = mine
        if not isinstance(out, dict) or not isinstance(out.get("inputs"), dict):
            raise RunnerFailed("protocol", "the runner's call reply carries no inputs")
        back = out["inputs"]
        for name, t in mine.items():
            new = back.get(name)
            if type(new) is not torch.Tensor or new.shape != t.shape or new.dtype != t.dtype:
                raise RunnerFailed("protocol", f"the runner returned input {name!r} changed in shape or type")
            t.copy_(new)
        if outputs is not None:
            return tuple(inputs[n].clone() for n in outputs)
        outs = out.get("outs")
        if not isinstance(outs, tuple):
            raise RunnerFailed("protocol", "the runner's outputs are not a tuple")
        return tuple(o.clone() if type(o) is torch.Tensor else o for o in outs)

    def pause(self) -> None:
        """Stop the runner (and whatever it started, where the judge is a PID namespace's init)."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let the runner go on."""
        self._signal(signal.SIGCONT)

    def _signal(self, sig: int) -> None:
        targets = [-1] if os.getpid() == 1 else [self.pid]  # -1 from a namespace's init: all but itself
        for target in targets:
            try:
                os.kill(target, sig)
            except (ProcessLookupError, PermissionError):
                pass
        if sig == signal.SIGSTOP and targets == [-1]:
            for pid in self.spared:  # the oracle times the base while the runner's side is stopped
                try:
                    os.kill(pid, signal.SIGCONT)
                except (ProcessLookupError, PermissionError):
                    pass

    def sweep(self) -> int:
        """Kill every process but the judge, its runner and `spared` (the oracle, the runner
        template), where the judge is a PID namespace's init (inside the sandbox): what a candidate
        started (double-forked too) ends with its evaluation. Returns how many were killed."""
        try:  # /proc must be this namespace's own (then its pids are ours to read)
            own = os.getpid() == 1 and os.readlink("/proc/self") == "1"
        except OSError:
            own = False
        if not own:
            return 0
        killed = []
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) not in (1, self.pid, *self.spared):
                try:
                    os.kill(int(name), signal.SIGKILL)
                    killed.append(int(name))
                except (ProcessLookupError, PermissionError):
                    pass
        for pid in killed:  # orphans are the judge's children now: reap them
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        return len(killed)

    def retire(self) -> None:
        """Kill the runner at once (it ran candidate code: nothing of it is kept) and reap it."""
        self.stop(grace=0.0)

