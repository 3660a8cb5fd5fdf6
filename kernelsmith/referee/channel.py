"""The judge <-> runner channel: JSON messages over a socket, tensors through shared memory.

Each message is one SOCK_SEQPACKET datagram carrying a small header and one memfd (an anonymous
shared-memory file): the memfd holds the message's JSON and the bytes of every tensor storage it
names, each storage once (tensors that share storage still do on the other side), copied straight
into the shared pages. The sender seals it (no write, shrink or grow afterwards); the receiver
refuses an unsealed one, maps it privately and copies every tensor out into its own memory (or
device), so nothing the sender does afterwards can change or fault what the receiver holds. CUDA
tensors travel through host memory the same way (see docs/design.md for why not CUDA IPC).

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

ALIGN = 64
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
HEADER_MAX = 4096
DTYPES = {str(d).replace("torch.", ""): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int16,
    torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128,
    *[getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                                  "uint16", "uint32", "uint64") if hasattr(torch, n)])}


class ProtocolError(Exception):
    """The peer sent something that is not a well-formed message (from the runner: `protocol`)."""


class PeerGone(Exception):
    """The peer closed its end (it exited or died)."""


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
    def __init__(self, buf, blobs: list, device: str, allow_pickle: bool):
        self.buf, self.blobs, self.device, self.allow_pickle = buf, blobs, device, allow_pickle
        self.made: dict[int, torch.Tensor] = {}

    def blob(self, i: int) -> torch.Tensor:
        if i not in self.made:
            off, n = self.blobs[i]
            if n:
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
    """

    def __init__(self, sock: socket.socket, device: str, trusted_peer: bool, max_bytes: int = 1 << 40):
        self.sock, self.device, self.trusted_peer, self.max_bytes = sock, device, trusted_peer, max_bytes
        # What travelled, and the seconds this end spent packing, copying and unpacking (not waiting).
        self.stats = {"messages": 0, "bytes": 0, "copy_s": 0.0}

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, msg: dict, values=None) -> None:
        """Send `msg` (JSON) and `values` (any structure of tensors and plain values)."""
        start = time.perf_counter()
        packer = _Packer(allow_pickle=not self.trusted_peer)
        body = {"msg": msg, "values": packer.value(values)}
        text = json.dumps(body).encode()
        layout, pos = [], (len(text) + ALIGN - 1) // ALIGN * ALIGN
        for b in packer.blobs:
            layout.append([pos, b.numel()])
            pos = (pos + b.numel() + ALIGN - 1) // ALIGN * ALIGN
        fd = os.memfd_create("kernelsmith-msg", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, max(pos, 1))
            os.pwrite(fd, text, 0)
            if packer.blobs:
                # Each storage copied once, straight into the shared pages (from the device too).
                mm = mmap.mmap(fd, max(pos, 1))
                try:
                    for (off, n), b in zip(layout, packer.blobs, strict=True):
                        if n:
                            torch.frombuffer(mm, dtype=torch.uint8, count=n, offset=off).copy_(b)
                finally:
                    _close(mm)
            # Sealed: the receiver may map it without the sender shrinking it under its feet.
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS | fcntl.F_SEAL_SEAL)
            header = json.dumps({"json": len(text), "blobs": layout}).encode()
            self._count(pos, start)
            socket.send_fds(self.sock, [header], [fd])
        finally:
            os.close(fd)

    def _count(self, nbytes: int, start: float) -> None:
        self.stats["messages"] += 1
        self.stats["bytes"] += int(nbytes)
        self.stats["copy_s"] = round(self.stats["copy_s"] + time.perf_counter() - start, 6)

    def recv(self, timeout: float | None = None) -> tuple[dict, object]:
        """The next message: (msg, values). PeerGone at end of stream, TimeoutError on `timeout`."""
        self.sock.settimeout(timeout)
        try:
            data, fds, flags, _ = socket.recv_fds(self.sock, HEADER_MAX, 4)
        except TimeoutError:
            raise TimeoutError("no message from the peer") from None
        if not data and not fds:
            raise PeerGone("the peer closed the channel")
        try:
            if len(fds) != 1 or flags & socket.MSG_TRUNC:
                raise ProtocolError("a message must carry exactly one memory file and a short header")
            return self._read(data, fds[0])
        finally:
            for fd in fds:
                os.close(fd)

    def _read(self, data: bytes, fd: int) -> tuple[dict, object]:
        start = time.perf_counter()
        try:
            header = json.loads(data)
            n_json = int(header["json"])
            blobs = [(int(o), int(n)) for o, n in header["blobs"]]
        except (ValueError, KeyError, TypeError) as e:
            raise ProtocolError(f"bad header: {e}") from None
        end = max([n_json, *[o + n for o, n in blobs]])
        if n_json < 0 or end > self.max_bytes or any(o < n_json or n < 0 or o % ALIGN for o, n in blobs):
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
        try:
            body = json.loads(mm[:n_json])
            msg = body["msg"]
            if not isinstance(msg, dict):
                raise ProtocolError("a message must be an object")
            values = _Unpacker(mm, blobs, self.device, allow_pickle=self.trusted_peer).value(body["values"])
        except (ValueError, KeyError, TypeError, RecursionError, MemoryError, RuntimeError) as e:
            raise ProtocolError(f"bad message: {type(e).__name__}: {str(e)[:200]}") from None
        finally:
            _close(mm)
        self._count(end, start)
        return msg, values

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def pair() -> tuple[socket.socket, socket.socket]:
    """(judge's socket, runner's socket): a connected SOCK_SEQPACKET pair."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
