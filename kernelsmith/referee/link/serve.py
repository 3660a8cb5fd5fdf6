"""The request loop of the judge's children (proc/runner.py, proc/oracle.py): take in one request,
answer it, until the judge says exit or goes away.

Each child names what it does per request (`handlers`) and how its failures read to the judge; the
loop owns what they share: how a request that cannot be taken in is answered, the shared-region
ops of the channel (`echo`, `regions_off`, `drop_regions`), the `release` of freed device memory,
unknown ops, and a reply that cannot travel.
"""

from __future__ import annotations

from collections.abc import Callable

from kernelsmith.referee.link.channel import Channel
from kernelsmith.referee.link.errors import DeviceOutOfMemory, PeerGone

# One request's answer: (fields added to the reply {"ok": True}, the values sent with it).
Handler = Callable[[dict, object], tuple[dict, object]]


def serve(chan: Channel, who: str, handlers: dict[str, Handler], failed: Callable[[BaseException], dict],
          unsendable: Callable[[str, Exception], dict], catch: type[BaseException] = Exception,
          release: Callable[[], None] | None = None, release_after: frozenset[str] = frozenset()) -> int:
    """Answer `chan`'s requests with `handlers[op](msg, values)` until the peer says exit (after
    `handlers["exit"]` where there is one) or goes away; returns the exit status, 0.

    `who` names this process in its answer to a request its device had no room to take in (the
    judge makes room and asks again: memory.py). A handler raising `catch` is answered with
    `failed(e)`, called while the exception is being handled (traceback.format_exc() sees it); a
    reply that cannot travel with `unsendable(op, e)`. `release()` gives the child's freed device
    memory back: when the judge asks (`release`, `drop_regions`), and after each op in `release_after`
    once its reply is sent and its values are dropped."""
    while True:
        try:
            msg, values = chan.recv()
        except PeerGone:
            return 0
        except DeviceOutOfMemory as e:  # the request's copies did not fit: the judge makes room (memory.py)
            chan.send({"ok": False, "raised": ["crash", f"the {who}, taking in a request: {e}"]})
            continue
        except Exception as e:  # noqa: BLE001 - e.g. a shared region this process cannot map
            chan.send({"ok": False, "error": f"cannot read the request: {type(e).__name__}: {e}"[:2000]})
            continue
        op = msg.get("op")
        reply, out = {"ok": True}, None
        try:
            if op == "exit":
                if "exit" in handlers:
                    handlers["exit"](msg, values)
                return 0
            if op == "echo":  # the judge's probe of the shared regions
                out = values
            elif op == "regions_off":
                chan.peer_regions = None
            elif op == "release":  # the judge makes room on the device (memory.py)
                if release is not None:
                    release()
            elif op == "drop_regions":  # the judge closes the regions this step leaves idle (memory.py)
                if chan.peer_regions is not None:
                    chan.peer_regions.drop()
                if release is not None:  # and the device memory they and the child's cache held
                    release()
            elif op in handlers:
                fields, out = handlers[op](msg, values)
                reply.update(fields)
            else:
                reply = {"ok": False, "error": f"unknown request {op!r}"}
        except catch as e:  # the child's own code failed: `failed` says how that reads
            reply, out = failed(e), None
        try:
            chan.send(reply, out)
        except Exception as e:  # noqa: BLE001 - a value that cannot travel (an arbitrary object, ...)
            chan.send(unsendable(op, e))
        values = out = None
        if release is not None and op in release_after:
            release()
