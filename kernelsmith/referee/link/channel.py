"""The judge <-> runner channel: JSON messages over a socket, tensors through shared memory.

Tensors on the judge's device travel through two buffers the judge owns and shares with the runner
once (shared_region.py: CUDA IPC on the GPU, a shared memfd on the CPU); everything else, and what
does not fit, travels in the message's own file. Each message is one SOCK_SEQPACKET datagram
carrying a small header and one memfd (an anonymous shared-memory file): the memfd holds the
message's JSON and the bytes of every other tensor storage it names, each storage once (tensors
that share storage still do on the other side), copied straight into the shared pages. The
sender seals it (no write, shrink or grow afterwards); the receiver refuses an unsealed one, maps
it privately and copies every tensor out into its own memory (or device), so nothing the sender
does afterwards can change or fault what the receiver holds. A reply names only (offset, length)
in the judge's own region, which the judge clones at once.

The judge decodes the runner's messages as hostile input: plain JSON values, tensors with checked
dtypes, sizes and bounds; nothing is unpickled. The runner may receive pickled leaf values from
the judge (it trusts the judge).
"""

from __future__ import annotations

import base64
import fcntl
import json
import mmap
import os
import pickle
import socket
import time

import torch

from kernelsmith.referee.link.errors import PeerGone, ProtocolError
from kernelsmith.referee.link.shared_region import (
    ALIGN,
    PINS_PER_MESSAGE,
    JudgeRegions,
    PeerRegions,
    aligned,
    storage_key,
)

SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
HEADER_MAX = 4096
DTYPES = {str(d).replace("torch.", ""): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int16,
    torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128,
    *[getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                                  "uint16", "uint32", "uint64") if hasattr(torch, n)])}


class Foreign:
    """A returned value the judge does not accept as data (a tensor subclass, an arbitrary object)."""

    def __init__(self, kind: str, name: str):
        self.kind, self.name = kind, name

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name}>"


class ForeignSubclass(torch.Tensor):
    """Stands for a tensor subclass the runner's candidate returned (compare() names it)."""


def _storage_bytes(t: torch.Tensor) -> torch.Tensor:
    """The whole storage of `t` as a uint8 tensor (on its device)."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def _close(mm: mmap.mmap) -> None:
    """Unmap now where nothing views the mapping any more (else when the last view goes)."""
    try:
        mm.close()
    except BufferError:
        pass


class _Packer:
    def __init__(self, allow_pickle: bool):
        self.allow_pickle = allow_pickle
        self.blobs: list[torch.Tensor] = []
        self.seen: dict[tuple, int] = {}

    def tensor(self, t: torch.Tensor) -> dict:
        sub = None
        if type(t) is not torch.Tensor:
            sub = type(t).__name__
            try:
                t = torch.Tensor.as_subclass(t, torch.Tensor)
            except Exception:  # noqa: BLE001 - a subclass that refuses: only its name travels
                return {"x": "tensor subclass", "n": sub}
        key = (str(t.device), t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        if key not in self.seen:
            self.seen[key] = len(self.blobs)
            self.blobs.append(_storage_bytes(t))
        out = {"t": [self.seen[key], str(t.dtype).replace("torch.", ""), list(t.shape), list(t.stride()),
                     t.storage_offset()]}
        if sub:
            out["sub"] = sub
        return out

    def value(self, v):
        if isinstance(v, torch.Tensor):
            return self.tensor(v)
        if v is None or isinstance(v, (bool, int, float, str)):
            return {"v": v}
        if isinstance(v, torch.dtype):
            return {"dt": str(v).replace("torch.", "")}
        if isinstance(v, dict) and all(isinstance(k, str) for k in v):
            return {"d": {k: self.value(x) for k, x in v.items()}}
        if isinstance(v, (list, tuple)):
            return {"l" if isinstance(v, list) else "u": [self.value(x) for x in v]}
        if self.allow_pickle:
            return {"p": base64.b64encode(pickle.dumps(v)).decode()}
        return {"x": "object", "n": type(v).__name__}


class _Unpacker:
    def __init__(self, buf, blobs: list, device: str, allow_pickle: bool, region=None):
        self.buf, self.blobs, self.device, self.allow_pickle = buf, blobs, device, allow_pickle
        self.region = region  # (off, n, device) -> a private tensor of bytes from a shared region
        self.made: dict[int, torch.Tensor] = {}

    def blob(self, i: int) -> torch.Tensor:
        if i not in self.made:
            kind, off, n = self.blobs[i]
            if kind in (1, 2):  # a shared region's bytes (1) or a pinned copy (2, id in `off`)
                self.made[i] = self.region(kind, off, n, self.device)
            elif n:
                raw = torch.frombuffer(self.buf, dtype=torch.uint8, offset=off, count=n)
                self.made[i] = raw.to(self.device) if self.device != "cpu" else raw.clone()
                del raw  # the mapping closes once nothing views it
            else:
                self.made[i] = torch.empty(0, dtype=torch.uint8, device=self.device)
        return self.made[i]

    def tensor(self, spec: list, sub: str | None) -> torch.Tensor:
        i, dtype_name, size, stride, offset = spec
        dtype = DTYPES.get(dtype_name)
        if dtype is None or not isinstance(i, int) or not 0 <= i < len(self.blobs):
            raise ProtocolError(f"bad tensor {spec!r:.200}")
        geometry = [*size, *stride, offset]
        if not all(isinstance(x, int) and x >= 0 for x in geometry) or len(size) != len(stride):
            raise ProtocolError(f"bad tensor geometry {spec!r:.200}")
        raw = self.blob(i)
        item = torch.empty(0, dtype=dtype).element_size()
        if raw.numel() % item:
            raise ProtocolError("a storage's size is not a whole number of elements")
        typed = raw.view(dtype)
        reach = sum((s - 1) * st for s, st in zip(size, stride, strict=True))
        extent = offset + reach + 1 if all(size) else 0
        if extent > typed.numel():
            raise ProtocolError("a tensor reaches past its storage")
        t = typed.as_strided(size, stride, offset)
        return t.as_subclass(ForeignSubclass) if sub else t

    def value(self, v):
        if not isinstance(v, dict) or len(v) not in (1, 2):
            raise ProtocolError(f"bad value {v!r:.200}")
        if "t" in v:
            return self.tensor(v["t"], v.get("sub"))
        if "v" in v:
            if not (v["v"] is None or isinstance(v["v"], (bool, int, float, str))):
                raise ProtocolError("bad scalar")
            return v["v"]
        if "dt" in v:
            if v["dt"] not in DTYPES:
                raise ProtocolError("bad dtype")
            return DTYPES[v["dt"]]
        if "d" in v and isinstance(v["d"], dict):
            return {str(k): self.value(x) for k, x in v["d"].items()}
        if "l" in v and isinstance(v["l"], list):
            return [self.value(x) for x in v["l"]]
        if "u" in v and isinstance(v["u"], list):
            return tuple(self.value(x) for x in v["u"])
        if "x" in v:
            return Foreign(str(v["x"])[:40], str(v.get("n"))[:80])
        if "p" in v and self.allow_pickle:
            return pickle.loads(base64.b64decode(v["p"]))  # noqa: S301 - from the judge, which the runner trusts
        raise ProtocolError(f"bad value {v!r:.200}")


class Channel:
    """One end of the judge <-> runner socket.

    `trusted_peer`: the runner's end (its peer is the judge: pickled leaves allowed both ways).
    `device`: where received tensors are placed.
    The judge's end owns the shared regions (shared_region.py) on its device; the runner's end
    maps them when a message shares one.
    """

    def __init__(self, sock: socket.socket, device: str, trusted_peer: bool, max_bytes: int = 1 << 40):
        self.sock, self.device, self.trusted_peer, self.max_bytes = sock, device, trusted_peer, max_bytes
        self.regions: JudgeRegions | None = None  # the judge's end, once it knows its device
        self.peer_regions = PeerRegions() if trusted_peer else None
        self.reset_stats()

    def reset_stats(self) -> None:
        """Start counting anew: messages, `bytes` through message files (host memory), `shared_bytes`
        through the shared regions, and the seconds this end spent packing, copying and unpacking."""
        where = self.regions.device.type if self.regions is not None and self.regions.enabled else None
        self.stats = {"messages": 0, "bytes": 0, "shared_bytes": 0, "pinned_bytes": 0, "shared_on": where,
                      "copy_s": 0.0}

    def share_regions(self, device: str) -> None:
        """(The judge's end) tensors on `device` travel through regions shared with the runner."""
        if self.regions is not None:
            self.regions.close()
        self.regions = JudgeRegions(device)
        self.reset_stats()

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, msg: dict, values=None, reply_bytes: int = 0, pin=()) -> None:
        """Send `msg` (JSON) and `values` (any structure of tensors and plain values); `reply_bytes`:
        (the judge's end) room to keep in the reply region for the answer's tensors; `pin`: tensors
        that live long and never change (cached inputs), whose storages the runner keeps a shared
        copy of, so they cross once."""
        start = time.perf_counter()
        packer = _Packer(allow_pickle=not self.trusted_peer)
        body = {"msg": msg, "values": packer.value(values)}
        pinned, pin_fds = {}, []
        if self.regions is not None:  # storages of `pin` tensors cross once, as pinned copies
            owners = {storage_key(t): t for t in pin if isinstance(t, torch.Tensor) and self.regions.takes(t)}
            pins = self.regions.pins
            pinned, pin_fds = pins.for_message(packer.seen, packer.blobs, owners, body, self.stats)
        targets, fds = self._regions_for(packer.blobs, reply_bytes, body, skip=pinned)
        for desc in body.get("pins") or []:  # pins' files follow the regions' files
            if "fd" in desc:
                desc["fd"] += len(fds)
        fds += pin_fds
        text = json.dumps(body).encode()
        layout, pos, rpos = [], (len(text) + ALIGN - 1) // ALIGN * ALIGN, 0
        for i, (b, target) in enumerate(zip(packer.blobs, targets, strict=True)):
            if i in pinned:
                layout.append([2, pinned[i], b.numel()])
                self.stats["pinned_bytes"] += b.numel()
            elif target is None:
                layout.append([0, pos, b.numel()])
                pos = (pos + b.numel() + ALIGN - 1) // ALIGN * ALIGN
            else:  # copied device to device into the shared region; the peer clones it out
                target[rpos:rpos + b.numel()].copy_(b)
                layout.append([1, rpos, b.numel()])
                rpos = aligned(rpos + b.numel())
        if rpos or body.get("pins"):  # copies into regions and new pins are done before the peer reads
            self._sync_regions()
        fd = os.memfd_create("kernelsmith-msg", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, max(pos, 1))
            os.pwrite(fd, text, 0)
            inline = [(e, b) for e, b in zip(layout, packer.blobs, strict=True) if e[0] == 0]
            if inline:
                # Each storage copied once, straight into the shared pages (from the device too).
                mm = mmap.mmap(fd, max(pos, 1))
                try:
                    for (_, off, n), b in inline:
                        if n:
                            torch.frombuffer(mm, dtype=torch.uint8, count=n, offset=off).copy_(b)
                finally:
                    _close(mm)
            # Sealed: the receiver may map it without the sender shrinking it under its feet.
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS | fcntl.F_SEAL_SEAL)
            header = json.dumps({"json": len(text), "blobs": layout}).encode()
            self._count(pos, start, rpos)
            socket.send_fds(self.sock, [header], [fd, *fds])
        finally:
            os.close(fd)

    def _regions_for(self, blobs: list, reply_bytes: int, body: dict, skip=()) -> tuple[list, list[int]]:
        """Per blob: the region view it is copied into, or None (inline or pinned: `skip`); and the
        memfds of regions made now (their descriptors are put in `body`)."""
        if self.regions is not None:  # the judge's end: requests into to_peer (grown to fit)
            return self.regions.targets_for(blobs, reply_bytes, body, skip)
        targets = [None] * len(blobs)
        if self.peer_regions is not None:  # the runner's end: replies into from_peer while they fit
            used = 0
            for i, b in enumerate(blobs):
                room = self.peer_regions.reply_room(b)
                if room is not None and used + b.numel() <= room.numel():
                    targets[i] = room
                    used = aligned(used + b.numel())
        return targets, []

    def _sync_regions(self) -> None:
        if self.regions is not None:
            self.regions.synchronize()
        elif self.peer_regions is not None:
            self.peer_regions.synchronize()

    def _count(self, nbytes: int, start: float, shared: int = 0) -> None:
        self.stats["messages"] += 1
        self.stats["bytes"] += int(nbytes)
        self.stats["shared_bytes"] += int(shared)
        self.stats["copy_s"] = round(self.stats["copy_s"] + time.perf_counter() - start, 6)

    def recv(self, timeout: float | None = None) -> tuple[dict, object]:
        """The next message: (msg, values). PeerGone at end of stream, TimeoutError on `timeout`."""
        self.sock.settimeout(timeout)
        try:
            data, fds, flags, _ = socket.recv_fds(self.sock, HEADER_MAX, 4 + PINS_PER_MESSAGE)
        except TimeoutError:
            raise TimeoutError("no message from the peer") from None
        if not data and not fds:
            raise PeerGone("the peer closed the channel")
        try:
            # Only the judge shares regions (their memfds ride along); the runner sends one file.
            most = 3 + PINS_PER_MESSAGE if self.trusted_peer else 1
            if not 1 <= len(fds) <= most or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                raise ProtocolError("a message must carry exactly one memory file and a short header")
            return self._read(data, fds[0], fds[1:])
        finally:
            for fd in fds:
                os.close(fd)

    def _read(self, data: bytes, fd: int, region_fds: list[int] = ()) -> tuple[dict, object]:
        start = time.perf_counter()
        try:
            header = json.loads(data)
            n_json = int(header["json"])
            blobs = [(k, o, n) for k, o, n in header["blobs"]]
        except (ValueError, KeyError, TypeError) as e:
            raise ProtocolError(f"bad header: {e}") from None
        if not all(type(x) is int for b in blobs for x in b):
            raise ProtocolError("bad header: a layout entry is not three integers")
        inline = [(o, n) for k, o, n in blobs if k == 0]
        end = max([n_json, *[o + n for o, n in inline]])
        bad_kind = any(k not in ((0, 1, 2) if self.peer_regions is not None else (0, 1)) for k, _, _ in blobs)
        if any(k == 1 for k, _, _ in blobs) and self.regions is None and self.peer_regions is None:
            bad_kind = True
        misplaced = any(o < n_json or n < 0 or o % ALIGN for o, n in inline)
        if n_json < 0 or end > self.max_bytes or bad_kind or misplaced:
            raise ProtocolError("bad layout")
        try:
            sealed = fcntl.fcntl(fd, fcntl.F_GET_SEALS) & SEALS == SEALS
            size = os.fstat(fd).st_size
        except OSError:
            raise ProtocolError("the message's file is not a memory file") from None
        if not sealed:  # unsealed, it could be changed or shrunk while mapped here
            raise ProtocolError("the message's memory file is not sealed")
        if size < end:  # before mapping: a header cannot make us reserve memory
            raise ProtocolError("the memory file is shorter than its header says")
        # A private (copy-on-write) mapping of sealed contents; every tensor is copied out of it.
        mm = mmap.mmap(fd, max(end, 1), flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        shared = sum(n for k, _, n in blobs if k == 1)  # pinned copies (2) moved nothing now
        try:
            body = json.loads(mm[:n_json])
            msg = body["msg"]
            if not isinstance(msg, dict):
                raise ProtocolError("a message must be an object")
            if self.peer_regions is not None:  # from the judge: map the regions it shares now
                for which, desc in (body.get("regions") or {}).items():
                    i = desc.get("fd")
                    self.peer_regions.open(which, desc, None if i is None else region_fds[i - 1])
                for pid in body.get("unpin") or []:
                    self.peer_regions.pins.pop(pid, None)
                for desc in body.get("pins") or []:
                    i = desc.get("fd")
                    self.peer_regions.open_pin(desc, None if i is None else region_fds[i - 1])
                peer = self.peer_regions

                def region(kind, off, n, device):
                    return peer.inbound(off, n, device) if kind == 1 else peer.pinned(off, n, device)
            else:  # from the runner: bytes of the judge's own region, cloned at once
                region = self._received
            values = _Unpacker(mm, blobs, self.device, allow_pickle=self.trusted_peer,
                               region=region).value(body["values"])
            if shared and self.regions is not None:
                self.regions.synchronize()  # the clones are complete before anything reads them
        except (ValueError, KeyError, TypeError, RecursionError, MemoryError, RuntimeError) as e:
            raise ProtocolError(f"bad message: {type(e).__name__}: {str(e)[:200]}") from None
        finally:
            _close(mm)
        self._count(end, start, shared)
        return msg, values

    def _received(self, kind: int, off: int, n: int, device) -> torch.Tensor:
        if self.regions is None:
            raise ProtocolError("a reply names a shared region the judge has not made")
        return self.regions.received(off, n).to(device)  # a clone already

    def close(self) -> None:
        if self.regions is not None:
            self.regions.close()
        try:
            self.sock.close()
        except OSError:
            pass


def pair() -> tuple[socket.socket, socket.socket]:
    """(judge's socket, runner's socket): a connected SOCK_SEQPACKET pair."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
