"""A fork server for referee workers: `python -m kernelsmith.referee.proc.zygote FD`.

It imports torch, Triton and the referee once (never touching a CUDA device) and then forks a
fresh worker per request, so replacing a worker after a rejected candidate costs a fork instead of
a new interpreter and a torch import. The parent passes the worker's three pipe ends (stdin,
output, answers) over a SOCK_SEQPACKET socket; each worker gets its own session (process group)
and runs `kernelsmith.referee.proc.worker.main` with its answers on fd 3 (with `--pidns`, inside the
sandbox, as pid 1 of a PID namespace of its own). The zygote reaps its children and reports their
exit status on request.
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import sys
import time
import traceback

WORKER_RESULT_FD = 3


def _reap(statuses: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        statuses[pid] = os.waitstatus_to_exitcode(status)


def _child(sock: socket.socket, fds: list[int], pidns: bool) -> None:
    """In the forked child: become a worker with the passed pipe ends as fds 0, 1, 2 and 3.

    With `pidns` (inside the sandbox) the child answers the fork request itself, so the parent's
    kernel reports its pid in the parent's PID namespace, then continues as pid 1 of a PID
    namespace of its own: whatever the candidate starts (double-forked too) dies with the worker.
    """
    code = 70
    try:
        os.setsid()
        if pidns:
            sock.send(json.dumps({"pid": os.getpid()}).encode())
        sock.close()
        if pidns:
            from kernelsmith.sandbox.launch import fork_into_pid_namespace

            fork_into_pid_namespace()  # only the new namespace's pid 1 returns
        stdin_fd, out_fd, res_fd = fds
        os.dup2(stdin_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.dup2(res_fd, WORKER_RESULT_FD)
        for fd in set(fds) - {0, 1, 2, WORKER_RESULT_FD}:
            os.close(fd)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - lives as long as the process
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False, buffering=1)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False, buffering=1)  # noqa: SIM115
        from kernelsmith.referee.proc.worker import main

        code = main()
    except BaseException:  # noqa: BLE001 - report, then leave without running the zygote's cleanup
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _dispatch_modes_skip_dynamo() -> bool:
    """Whether a dispatch mode can opt out of torch._dynamo (integrity._OpRecorder does). An older
    torch imports it at a mode's first op, and the import re-wraps torch (5 s on the H200): the
    zygote then imports it once, before any worker snapshots torch."""
    from torch.utils._python_dispatch import TorchDispatchMode

    return "_should_skip_dynamo" in vars(TorchDispatchMode)


def main() -> int:
    """Preload, then serve fork and status requests until the parent closes the socket."""
    sock = socket.socket(fileno=int(sys.argv[1]))
    pidns = "--pidns" in sys.argv[2:]
    took: dict[str, float] = {}  # seconds per import, told to the parent (its boot phases)
    clock = time.monotonic()
    for name in ("numpy", "torch", "torch._dynamo", "triton", "kernelsmith.referee.proc.worker"):
        if name == "torch._dynamo" and _dispatch_modes_skip_dynamo():
            continue
        importlib.import_module(name)
        took[name], clock = round(time.monotonic() - clock, 4), time.monotonic()
    from kernelsmith.referee.proc import worker  # noqa: F401

    took["kernelsmith.referee"] = round(time.monotonic() - clock, 4)
    statuses: dict[int, int] = {}
    sock.send(json.dumps({"ready": True, "import_s": took}).encode())
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 65536, 3)
        except OSError:
            return 0
        if not msg:
            return 0
        req = json.loads(msg)
        if req.get("op") == "fork" and len(fds) == 3:
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(sock, fds, pidns)
            for fd in fds:
                os.close(fd)
            _reap(statuses)
            if not pidns:  # in a PID namespace the child has answered
                sock.send(json.dumps({"pid": pid}).encode())
        elif req.get("op") == "status":
            for fd in fds:
                os.close(fd)
            _reap(statuses)
            sock.send(json.dumps({"status": statuses.get(int(req["pid"]))}).encode())
        else:
            for fd in fds:
                os.close(fd)
            sock.send(b'{"error": "unknown request"}')


if __name__ == "__main__":
    sys.exit(main())
