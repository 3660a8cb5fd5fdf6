"""Judge-owned buffers shared with the runner once, so tensors cross without a message file each.

The judge owns two regions per device: `to_peer` (it copies request tensors in; the runner clones
them out) and `from_peer` (the runner copies reply tensors in; the judge clones them out, at once,
and judges only its clones). On CUDA a region is a device buffer in a memory pool of its own
(`torch.cuda.MemPool`), shared with torch's IPC machinery (`_share_cuda_` / `_new_shared_cuda`):
the runner can map only the pool's segments, which hold nothing but these two regions, never the
judge's input cache, reference or base outputs. On the CPU a region is a memfd sealed against
shrinking and growing (writes allowed), mapped shared on both sides, so nothing the runner does
can fault the judge's mapping. The judge never opens anything the runner made: a reply names only
(offset, length) in the judge's own `from_peer`, which the judge bounds-checks.
"""

from __future__ import annotations

import base64
import fcntl
import mmap
import os

import torch

ALIGN = 64
ROUND = 2 << 20  # capacities are rounded up to this (the CUDA allocator's large-block granularity)
GROWTH = 1.25  # a region that must grow grows at least this much (few re-shares per worker)
SIZE_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW


def aligned(n: int) -> int:
    """`n` rounded up to the channel's alignment."""
    return (n + ALIGN - 1) // ALIGN * ALIGN


def room_for(tensors=(), sizes=()) -> int:
    """Bytes a reply region needs for these tensors' storages and outputs of `sizes` bytes."""
    total = sum(aligned(t.untyped_storage().nbytes()) for t in tensors if isinstance(t, torch.Tensor))
    return total + sum(aligned(int(n)) for n in sizes)


def cuda_sharing_available() -> bool:
    """Whether this torch has what the CUDA regions need (a private pool and storage IPC)."""
    return (torch.cuda.is_available() and hasattr(torch.cuda, "MemPool")
            and hasattr(torch.cuda, "use_mem_pool") and hasattr(torch.UntypedStorage, "_share_cuda_")
            and hasattr(torch.UntypedStorage, "_new_shared_cuda"))


def _b64(b) -> str | None:
    return None if b is None else base64.b64encode(bytes(b)).decode()


def _unb64(s) -> bytes | None:
    return None if s is None else base64.b64decode(s)


class Region:
    """One judge-owned shared buffer: `buf` is a uint8 tensor of `capacity` bytes on `device`."""

    def __init__(self, device: torch.device, capacity: int, gen: int, pool=None):
        self.device, self.capacity, self.gen = device, capacity, gen
        self.fd, self._mm = None, None
        if device.type == "cuda":
            with torch.cuda.use_mem_pool(pool, device):
                self.buf = torch.empty(capacity, dtype=torch.uint8, device=device)
        else:
            fd = os.memfd_create("kernelsmith-region", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            try:
                os.ftruncate(fd, capacity)
                # Sized once: the runner can write the pages but never shrink them under the judge.
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SIZE_SEALS | fcntl.F_SEAL_SEAL)
                self._mm = mmap.mmap(fd, capacity)
            except BaseException:
                os.close(fd)
                raise
            self.fd = fd
            self.buf = torch.frombuffer(self._mm, dtype=torch.uint8)

    def descriptor(self) -> dict:
        """What the runner needs to map this region (the memfd itself travels beside, on the CPU)."""
        d = {"gen": self.gen, "capacity": self.capacity}
        if self.device.type == "cuda":
            dev, handle, size, offset, rc_handle, rc_offset, ev_handle, ev_sync = \
                self.buf.untyped_storage()._share_cuda_()
            d["cuda"] = [int(dev), _b64(handle), int(size), int(offset), _b64(rc_handle), int(rc_offset),
                         _b64(ev_handle), bool(ev_sync)]
        return d

    def close(self) -> None:
        """Drop the judge's end (the runner's mapping of a CPU region stays valid until it drops it)."""
        self.buf = None
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:  # a view still exists: the mapping goes with it
                pass
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class JudgeRegions:
    """The judge's two regions on its device, grown (and shared again) only when a message needs more."""

    def __init__(self, device: str):
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.enabled = self.device.type == "cpu" or (self.device.type == "cuda" and cuda_sharing_available())
        self.pool = torch.cuda.MemPool() if self.enabled and self.device.type == "cuda" else None
        self.regions: dict[str, Region | None] = {"to_peer": None, "from_peer": None}
        self.gen = 0

    def takes(self, t: torch.Tensor) -> bool:
        """Whether a storage on `t`'s device travels through the regions."""
        return self.enabled and t.device == self.device

    def ensure(self, which: str, need: int) -> Region | None:
        """Region `which` with room for `need` bytes; returns it where it was made now (to be
        shared with the next message), else None."""
        r = self.regions[which]
        if not self.enabled or need <= 0 or (r is not None and r.capacity >= need):
            return None
        cap = max(need, int(r.capacity * GROWTH) if r is not None else 0)
        cap = (cap + ROUND - 1) // ROUND * ROUND
        if r is not None:
            r.close()
            self.regions[which] = None
        self.gen += 1
        made = Region(self.device, cap, self.gen, self.pool)
        self.regions[which] = made
        return made

    def synchronize(self) -> None:
        """Wait for this process's copies into or out of a CUDA region."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def received(self, off: int, n: int) -> torch.Tensor:
        """A private clone of bytes [off, off+n) of `from_peer`, the runner's reply (bounds checked)."""
        from .channel import ProtocolError

        r = self.regions["from_peer"]
        ok = all(isinstance(x, int) and not isinstance(x, bool) for x in (off, n))
        if r is None or not ok or off < 0 or n < 0 or off % ALIGN or off + n > r.capacity:
            raise ProtocolError("a reply names bytes outside the judge's shared region")
        return r.buf[off:off + n].clone()

    def close(self) -> None:
        """Drop both regions."""
        for which, r in self.regions.items():
            if r is not None:
                r.close()
            self.regions[which] = None


class PeerRegions:
    """The runner's mappings of the judge's regions (it trusts the judge's descriptors)."""

    def __init__(self):
        self.views: dict[str, torch.Tensor | None] = {"to_peer": None, "from_peer": None}
        self._maps: dict[str, mmap.mmap] = {}

    def open(self, which: str, desc: dict, fd: int | None) -> None:
        """Map a region the judge shared (its memfd `fd` on the CPU), replacing the older one."""
        self.views[which] = None
        old = self._maps.pop(which, None)
        if old is not None:
            try:
                old.close()
            except BufferError:
                pass
        cap = int(desc["capacity"])
        if desc.get("cuda"):
            dev, handle, size, offset, rc_handle, rc_offset, ev_handle, ev_sync = desc["cuda"]
            torch.cuda._lazy_init()
            storage = torch.UntypedStorage._new_shared_cuda(
                int(dev), _unb64(handle), int(size), int(offset), _unb64(rc_handle), int(rc_offset),
                _unb64(ev_handle), bool(ev_sync))
            view = torch.empty(0, dtype=torch.uint8, device=f"cuda:{int(dev)}").set_(storage)
        else:
            mm = mmap.mmap(fd, cap)
            self._maps[which] = mm
            view = torch.frombuffer(mm, dtype=torch.uint8)
        self.views[which] = view[:cap]

    def inbound(self, off: int, n: int, device) -> torch.Tensor:
        """A clone, on `device`, of bytes the judge put in its `to_peer` region."""
        raw = self.views["to_peer"][off:off + n]
        return raw.to(device, copy=True)  # always a copy: nothing here may alias the judge's region

    def reply_room(self, t: torch.Tensor) -> torch.Tensor | None:
        """The judge's `from_peer` region where it lives on `t`'s device, else None."""
        v = self.views["from_peer"]
        return v if v is not None and v.device == t.device else None

    def synchronize(self) -> None:
        """Wait for this process's copies into a CUDA region (before the reply is sent)."""
        v = self.views["from_peer"]
        if v is not None and v.device.type == "cuda":
            torch.cuda.synchronize(v.device)
