"""Judge-owned buffers shared with the runner once, so tensors cross without a message file each.

The judge owns two regions per device: `to_peer` (it copies request tensors in; the runner clones
them out) and `from_peer` (the runner copies reply tensors in; the judge clones them out, at once,
and judges only its clones). On CUDA a region is a device buffer in a memory pool of its own
(`torch.cuda.MemPool`, one per region), shared with torch's IPC machinery (`_share_cuda_` /
`_new_shared_cuda`): the runner can map only the pool's segments, which hold nothing but that region,
never the judge's input cache, reference or base outputs. A closed region (grown, or dropped to make
room: `JudgeRegions.drop`) takes its pool with it, so its memory goes back to the device once the
peer has let go of its mapping; a pool that lived on would keep every buffer it ever held
(`torch.cuda.empty_cache` returns no live pool's cached blocks). On the CPU a region is a memfd
sealed against shrinking and growing (writes allowed), mapped shared on both sides, so nothing the
runner does can fault the judge's mapping. The judge never opens anything the runner made: a reply names only
(offset, length) in the judge's own `from_peer`, which the judge bounds-checks.
"""

from __future__ import annotations

import base64
import fcntl
import mmap
import os
import warnings
import weakref

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

    def __init__(self, device: torch.device, capacity: int, gen: int):
        self.device, self.capacity, self.gen = device, capacity, gen
        self.fd, self._mm, self.pool = None, None, None
        if device.type == "cuda":
            self.pool = torch.cuda.MemPool()
            with torch.cuda.use_mem_pool(self.pool, device):
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
        """Drop the judge's end (the runner's mapping of a CPU region stays valid until it drops it;
        a CUDA one's memory waits in torch's IPC limbo until the peer drops its mapping)."""
        self.buf = None
        self.pool = None
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
        # The pins' pool (each region has its own: Region).
        self.pool = torch.cuda.MemPool() if self.enabled and self.device.type == "cuda" else None
        self.regions: dict[str, Region | None] = {"to_peer": None, "from_peer": None}
        self.gen = 0
        self.pins = JudgePins(self.device, self.pool, 0)  # a budget is given by the session

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
        made = Region(self.device, cap, self.gen)
        self.regions[which] = made
        return made

    def growth(self, which: str, need: int) -> int:
        """Device bytes `ensure(which, need)` would allocate (0 where the region holds `need`)."""
        r = self.regions[which]
        if not self.enabled or need <= 0 or (r is not None and r.capacity >= need):
            return 0
        cap = max(need, int(r.capacity * GROWTH) if r is not None else 0)
        return (cap + ROUND - 1) // ROUND * ROUND

    def nbytes(self) -> int:
        """Bytes the regions and the pins hold."""
        return self.region_bytes() + self.pins.bytes

    def region_bytes(self) -> int:
        """Bytes the two regions hold (the pins aside)."""
        return sum(r.capacity for r in self.regions.values() if r is not None)

    def drop(self) -> int:
        """Close both regions (the pins stay): the next message that needs one makes it again, at
        that message's size, and shares it anew. Returns the bytes they held."""
        freed = self.region_bytes()
        for which, r in self.regions.items():
            if r is not None:
                r.close()
            self.regions[which] = None
        return freed

    def targets_for(self, blobs: list, reply_bytes: int, body: dict, skip=()) -> tuple[list, list[int]]:
        """Per blob of a request: `to_peer`'s buffer where it goes there (grown to fit all), else
        None; `from_peer` kept at `reply_bytes` or more; regions made now described in `body`,
        their memfds returned."""
        targets = [None] * len(blobs)
        mine = [i for i, b in enumerate(blobs) if self.takes(b) and i not in skip]
        made = {"to_peer": self.ensure("to_peer", sum(aligned(blobs[i].numel()) for i in mine)),
                "from_peer": self.ensure("from_peer", reply_bytes)}
        fds, descs = [], {}
        for which, r in made.items():
            if r is not None:
                descs[which] = r.descriptor()
                if r.fd is not None:
                    fds.append(r.fd)
                    descs[which]["fd"] = len(fds)
        if descs:
            body["regions"] = descs
        for i in mine:
            targets[i] = self.regions["to_peer"].buf
        return targets, fds

    def synchronize(self) -> None:
        """Wait for this process's copies into or out of a CUDA region."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def received(self, off: int, n: int) -> torch.Tensor:
        """A private clone of bytes [off, off+n) of `from_peer`, the runner's reply (bounds checked)."""
        from kernelsmith.referee.link.errors import ProtocolError

        r = self.regions["from_peer"]
        ok = all(isinstance(x, int) and not isinstance(x, bool) for x in (off, n))
        if r is None or not ok or off < 0 or n < 0 or off % ALIGN or off + n > r.capacity:
            raise ProtocolError("a reply names bytes outside the judge's shared region")
        return r.buf[off:off + n].clone()

    def close(self) -> None:
        """Drop both regions and every pin."""
        self.pins.drop_all()
        self.drop()


def _open_cuda(handles) -> torch.Tensor:
    """A uint8 view of a CUDA allocation the judge shared by IPC handle."""
    dev, handle, size, offset, rc_handle, rc_offset, ev_handle, ev_sync = handles
    torch.cuda._lazy_init()
    storage = torch.UntypedStorage._new_shared_cuda(
        int(dev), _unb64(handle), int(size), int(offset), _unb64(rc_handle), int(rc_offset),
        _unb64(ev_handle), bool(ev_sync))
    return torch.empty(0, dtype=torch.uint8, device=f"cuda:{int(dev)}").set_(storage)


class PeerRegions:
    """The runner's mappings of the judge's regions (it trusts the judge's descriptors)."""

    def __init__(self):
        self.views: dict[str, torch.Tensor | None] = {"to_peer": None, "from_peer": None}
        self._maps: dict[str, mmap.mmap] = {}
        self.pins: dict[int, torch.Tensor] = {}

    def open_pin(self, desc: dict, fd: int | None) -> None:
        """Map a pinned copy the judge shared (on the CPU a write-sealed file, mapped read-only)."""
        n = int(desc["nbytes"])
        if desc.get("cuda"):
            view = _open_cuda(desc["cuda"])
        else:
            # Shared and read-only over a write-sealed file: no mprotect can make it writable here.
            mm = mmap.mmap(fd, max(n, 1), flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
            with warnings.catch_warnings():  # torch notes the buffer is not writable: that is the point
                warnings.simplefilter("ignore")
                view = torch.frombuffer(mm, dtype=torch.uint8)
        self.pins[int(desc["id"])] = view[:n]

    def pinned(self, pid: int, n: int, device) -> torch.Tensor:
        """A copy, on `device`, of a pinned storage."""
        return self.pins[pid][:n].to(device, copy=True)

    def open(self, which: str, desc: dict, fd: int | None) -> None:
        """Map a region the judge shared (its memfd `fd` on the CPU), replacing the older one."""
        self.unmap(which)
        cap = int(desc["capacity"])
        if desc.get("cuda"):
            view = _open_cuda(desc["cuda"])
        else:
            mm = mmap.mmap(fd, cap)
            self._maps[which] = mm
            view = torch.frombuffer(mm, dtype=torch.uint8)
        self.views[which] = view[:cap]

    def unmap(self, which: str) -> None:
        """Let go of the mapping of region `which` (the judge closes its end: JudgeRegions.drop)."""
        self.views[which] = None
        old = self._maps.pop(which, None)
        if old is not None:
            try:
                old.close()
            except BufferError:
                pass

    def drop(self) -> None:
        """Let go of both regions' mappings (the pins stay)."""
        for which in list(self.views):
            self.unmap(which)

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


PINS_PER_MESSAGE = 8  # new pinned copies one message may share (each may carry a file descriptor)


def storage_key(t: torch.Tensor) -> tuple:
    """What identifies a tensor's storage while it lives (the channel's deduplication key)."""
    return (str(t.device), t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())


class Pin:
    """A judge-owned copy of one long-lived storage (a cached input), shared with the runner once.

    On the CPU a memfd sealed against writing too: the runner can only read it. On CUDA a buffer in
    the pins' pool, writable through IPC: the judge compares it with the original after every
    evaluation (`intact`) and restores it."""

    def __init__(self, pid: int, src: torch.Tensor, device: torch.device, pool=None):
        self.pid, self.nbytes, self.fd, self.buf = pid, src.numel(), None, None
        if device.type == "cuda":
            with torch.cuda.use_mem_pool(pool, device):
                self.buf = torch.empty(max(self.nbytes, 1), dtype=torch.uint8, device=device)
            self.buf[:self.nbytes].copy_(src)
            return
        fd = os.memfd_create("kernelsmith-pin", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, max(self.nbytes, 1))
            mm = mmap.mmap(fd, max(self.nbytes, 1))
            view = torch.frombuffer(mm, dtype=torch.uint8)
            view[:self.nbytes].copy_(src)
            del view
            mm.close()
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SIZE_SEALS | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd

    def descriptor(self) -> dict:
        d = {"id": self.pid, "nbytes": self.nbytes}
        if self.buf is not None:
            dev, handle, size, offset, rc_handle, rc_offset, ev_handle, ev_sync = \
                self.buf.untyped_storage()._share_cuda_()
            d["cuda"] = [int(dev), _b64(handle), int(size), int(offset), _b64(rc_handle), int(rc_offset),
                         _b64(ev_handle), bool(ev_sync)]
        return d

    def intact(self, src: torch.Tensor) -> bool:
        """Whether the shared copy still equals `src` (restoring it where it does not)."""
        if self.buf is None:
            return True  # write-sealed: nobody can change it
        if torch.equal(self.buf[:self.nbytes], src):
            return True
        self.buf[:self.nbytes].copy_(src)
        return False

    def close(self) -> None:
        self.buf = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class JudgePins:
    """The judge's pinned copies, keyed by the original's storage; a pin lives as long as the tensor
    it was made for (a weak reference drops it, and the runner is told to drop its mapping)."""

    def __init__(self, device: torch.device, pool, budget: int):
        self.device, self.pool, self.budget = device, pool, int(budget)
        self.pins: dict[tuple, tuple[Pin, object]] = {}
        self.dropped: list[int] = []
        self.bytes, self.next_id = 0, 0

    def lookup(self, key: tuple) -> Pin | None:
        hit = self.pins.get(key)
        return hit[0] if hit is not None else None

    def make(self, owner: torch.Tensor, src: torch.Tensor) -> Pin | None:
        """A pin of `src` (the bytes of `owner`'s storage), None past the budget."""
        if self.bytes + src.numel() > self.budget:
            return None
        self.next_id += 1
        key = storage_key(owner)
        pin = Pin(self.next_id, src, self.device, self.pool)
        self.bytes += pin.nbytes
        self.pins[key] = (pin, weakref.ref(owner, lambda _r, k=key: self.drop(k)))
        return pin

    def for_message(self, seen: dict, blobs: list, owners: dict, body: dict, stats: dict) -> tuple:
        """({blob index: pin id}, new pins' memfds) for a message whose storages are `seen` (key ->
        blob index); storages of `owners` (key -> tensor) not pinned yet are pinned now, at most
        PINS_PER_MESSAGE, their descriptors put in `body` with the pins the runner must drop."""
        if self.dropped:
            body["unpin"], self.dropped = list(self.dropped), []
        found, fds, descs = {}, [], []
        for key, i in seen.items():
            if key not in owners:
                continue
            p = self.lookup(key)
            if p is None and len(descs) < PINS_PER_MESSAGE:
                p = self.make(owners[key], blobs[i])
                if p is not None:
                    descs.append(p.descriptor())
                    stats["shared_bytes"] += p.nbytes
                    if p.fd is not None:
                        fds.append(p.fd)
                        descs[-1]["fd"] = len(fds)
            if p is not None:
                found[i] = p.pid
        if descs:
            body["pins"] = descs
        return found, fds

    def drop(self, key: tuple) -> None:
        hit = self.pins.pop(key, None)
        if hit is not None:
            hit[0].close()
            self.bytes -= hit[0].nbytes
            self.dropped.append(hit[0].pid)

    def drop_all(self) -> None:
        for key in list(self.pins):
            self.drop(key)

    def tampered(self) -> int:
        """How many CUDA pins differed from their originals (each restored)."""
        bad = 0
        for pin, ref in list(self.pins.values()):
            owner = ref()
            if owner is not None and pin.buf is not None:
                src = torch.empty(0, dtype=torch.uint8, device=owner.device).set_(owner.untyped_storage())
                bad += not pin.intact(src)
        return bad
