"""The isolated worker process, the judge: `python -m kernelsmith.referee.proc.worker`.

Reads one JSON request per line on stdin and answers each on a private pipe whose fd the
first ("init") request names; every answer echoes the request's nonce. Candidate code never runs
here, nor target-repository code: before reading anything the judge makes itself non-dumpable and
forks its runner (judge.py, runner.py) and its oracle (oracle_link.py, oracle.py: the harness and
the base), which keep no descriptor but their channel and the log, and so can reach neither the
answer pipe nor the nonces.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def _answer(fd: int, payload: dict) -> None:
    data = (json.dumps(payload) + "\n").encode()
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def main() -> int:
    """Serve requests until "exit" or end of input."""
    os.dup2(2, 1)  # prints (Python or C) from candidate code go to the log, never to the protocol
    sys.stdout = sys.stderr
    fd = None
    session = None
    sent_autotune = 0  # the base's autotune choices the parent was sent (it keeps the largest table)
    # Imported before the fork (no device is touched), so the runner does not import torch again.
    from kernelsmith.referee import session as _session  # noqa: F401
    from kernelsmith.referee.link.errors import BaseRunFailed, InfrastructureError
    from kernelsmith.referee.proc import runner as _runner  # noqa: F401
    from kernelsmith.referee.proc.autotune_share import table_size
    from kernelsmith.referee.proc.judge import RunnerTemplate
    from kernelsmith.referee.proc.oracle_link import OracleLink

    # Non-dumpable first, then the fork of a clean process that forks one runner per candidate:
    # no runner holds the answer channel, and none outlives the candidate it ran.
    template = RunnerTemplate()
    oracle = OracleLink()  # the harness and the base run there, never here (oracle.py)
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        op, nonce = msg.get("op"), msg.get("nonce")
        if op == "exit":
            if session is not None:
                session.close_runners()
                session.caches.remove()
            break
        try:
            if op == "init":
                fd = int(msg["fd"])
                from kernelsmith.referee.session import Session  # imported with the runner's modules above

                session = Session(msg["spec"], template, oracle)
                reply = {"ok": True, "device": session.backend.info(),
                         "base_profiles": session.base_profiles(), "calibration": session.calibration,
                         "base_cache": str(session.caches.private), "runner_cache": session.runner_cache,
                         "seeded": session.seeded, "base_autotune": session.autotune,
                         "autotune": session.autotune_boot, "boot_phases": session.boot_phases}
                sent_autotune = table_size(session.autotune)
            elif op == "evaluate":
                code = None
                if msg.get("source_path"):
                    with open(msg["source_path"], encoding="utf-8") as f:
                        code = f.read()
                reply = {"ok": True, "verdict": session.evaluate(
                    code, msg.get("source_path"), int(msg["candidate_id"]), msg["timing"], int(msg["seed"]),
                    fresh=bool(msg.get("fresh_compile")), contender_at=msg.get("contender_at"),
                    contender_shapes=msg.get("contender_shapes"), promote_at=msg.get("promote_at"),
                    rendered=bool(msg.get("rendered")))}
                if table_size(session.autotune) > sent_autotune:  # the parent keeps it: only when it grew
                    reply["base_autotune"] = session.autotune
                    sent_autotune = table_size(session.autotune)
            else:
                reply = {"ok": False, "error": f"unknown request {op!r}"}
        except InfrastructureError as e:  # the parent judges the candidate again on a new worker
            reply = {"ok": False, "error": str(e)[:4000], "infrastructure": True}
        except BaseRunFailed:  # the task loaded; the base or the harness failed on a listed shape
            reply = {"ok": False, "error": traceback.format_exc()[-4000:], "stage": "run"}
        except Exception:  # noqa: BLE001 - reported to the parent, which decides what it means
            reply = {"ok": False, "error": traceback.format_exc()[-4000:]}
        if fd is None:
            template.close()
            oracle.close()
            return 2
        reply["nonce"] = nonce
        _answer(fd, reply)
    template.close()
    oracle.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
