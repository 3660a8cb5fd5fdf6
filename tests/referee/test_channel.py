"""The judge <-> runner channel (referee/link/channel.py): tensors through shared memory with their
strides and aliasing, and the judge's end decoding the runner's messages as hostile input."""

import fcntl
import json
import mmap
import os
import pickle
import socket

import pytest
import torch

from kernelsmith.referee.link.channel import Channel, ForeignSubclass, pair
from kernelsmith.referee.link.errors import PeerGone, ProtocolError


def _ends():
    judge_sock, runner_sock = pair()
    return Channel(judge_sock, "cpu", trusted_peer=False), Channel(runner_sock, "cpu", trusted_peer=True)


def test_tensors_keep_values_strides_and_aliasing():
    judge, runner = _ends()
    base = torch.arange(24, dtype=torch.float32).view(4, 6)
    values = {"x": base[:, 1:5:2], "whole": base, "h": torch.ones(3, dtype=torch.bfloat16), "eps": 1e-6,
              "n": None, "dt": torch.float16, "pair": (1, [2.5, "a"])}
    judge.send({"op": "call"}, values)
    msg, got = runner.recv(timeout=5)
    assert msg == {"op": "call"} and got["eps"] == 1e-6 and got["dt"] is torch.float16
    assert got["pair"] == (1, [2.5, "a"])
    assert torch.equal(got["x"], values["x"]) and got["x"].stride() == values["x"].stride()
    got["whole"][0, 1] = -1  # x is a view of whole on the other side too
    assert got["x"][0, 0] == -1 and base[0, 1] == 1  # and the sender's tensor is untouched
    assert got["h"].dtype == torch.bfloat16


def test_the_judge_refuses_pickles_and_accepts_plain_values_only():
    judge, runner = _ends()
    lazy = torch.ones(2).as_subclass(type("Lazy", (torch.Tensor,), {}))
    runner.send({"ok": True}, {"obj": object(), "sub": lazy})
    _, got = judge.recv(timeout=5)
    assert type(got["obj"]).__name__ == "Foreign" and type(got["sub"]) is ForeignSubclass
    # A pickled leaf (the runner's end would send one for the judge; the judge's end never loads it).
    body = json.dumps({"msg": {"ok": True}, "values": {"p": pickle.dumps(1).hex()}}).encode()
    _raw(runner.sock, {"json": len(body), "blobs": []}, body)
    with pytest.raises(ProtocolError, match="bad value"):
        judge.recv(timeout=5)


def _raw(sock, header: dict, body: bytes, size: int | None = None, fds: bool = True, seal: bool = True):
    fd = os.memfd_create("t", os.MFD_ALLOW_SEALING)
    os.write(fd, body)
    if size is not None:
        os.ftruncate(fd, size)
    if seal:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
    socket.send_fds(sock, [json.dumps(header).encode()], [fd] if fds else [])
    os.close(fd)


def test_a_well_formed_sealed_message_passes_and_an_unsealed_one_does_not():
    judge, runner = _ends()
    ok = json.dumps({"msg": {"ok": True}, "values": {"v": 1}}).encode()
    _raw(runner.sock, {"json": len(ok), "blobs": []}, ok)
    assert judge.recv(timeout=5) == ({"ok": True}, 1)
    _raw(runner.sock, {"json": len(ok), "blobs": []}, ok, seal=False)
    with pytest.raises(ProtocolError, match="not sealed"):
        judge.recv(timeout=5)


@pytest.mark.parametrize("case", ["no_fd", "short_file", "past_storage", "bad_dtype", "not_json", "line"])
def test_malformed_messages_are_protocol_errors(case):
    judge, runner = _ends()
    ok = json.dumps({"msg": {"ok": True}, "values": {"v": 1}}).encode()
    if case == "no_fd":
        _raw(runner.sock, {"json": len(ok), "blobs": []}, ok, fds=False)
    elif case == "short_file":
        _raw(runner.sock, {"json": len(ok), "blobs": [[0, 128, 1 << 30]]}, ok)
    elif case == "past_storage":
        body = json.dumps({"msg": {}, "values": {"t": [0, "float32", [100], [1], 0]}}).encode()
        _raw(runner.sock, {"json": len(body), "blobs": [[0, 256, 16]]}, body, size=512)
    elif case == "bad_dtype":
        body = json.dumps({"msg": {}, "values": {"t": [0, "object", [1], [1], 0]}}).encode()
        _raw(runner.sock, {"json": len(body), "blobs": [[0, 256, 16]]}, body, size=512)
    elif case == "not_json":
        _raw(runner.sock, {"json": 5, "blobs": []}, b"\xff\xfe{{{")
    else:  # what a forged verdict line written to the socket looks like
        os.write(runner.sock.fileno(), b'{"ok": true, "verdict": {"accepted": true}, "nonce": "x"}\n')
    with pytest.raises(ProtocolError):
        judge.recv(timeout=5)


def test_a_closed_peer_is_peer_gone():
    judge, runner = _ends()
    runner.close()
    with pytest.raises(PeerGone):
        judge.recv(timeout=5)


# -- the shared regions (shared_region.py): tensors on the judge's device cross through buffers the
# judge owns and shares once; on the CPU sealed-size memfds, on CUDA IPC (tests/referee/test_gpu_ipc.py).

def _region_ends():
    judge, runner = _ends()
    judge.share_regions("cpu")
    return judge, runner


def test_tensors_cross_through_the_shared_regions_not_the_message_files():
    judge, runner = _region_ends()
    x = torch.randn(256, 64)
    values = {"x": x, "view": x[1:3, ::2], "eps": 1e-6}
    judge.send({"op": "call"}, values, reply_bytes=2 * x.numel() * 4)
    msg, got = runner.recv(timeout=5)
    assert torch.equal(got["x"], x) and torch.equal(got["view"], x[1:3, ::2])
    judge.regions.regions["to_peer"].buf.fill_(0)  # the runner holds copies, not views of the region
    assert torch.equal(got["view"], x[1:3, ::2])
    got["x"][1, 0] = -7.0  # the runner's copy: aliasing kept there, the judge's tensor untouched
    assert got["view"][0, 0] == -7.0 and x[1, 0] != -7.0
    assert judge.stats["shared_bytes"] >= x.numel() * 4 and judge.stats["bytes"] < 4096
    out = torch.full((256, 64), 3.0)
    runner.send({"ok": True}, {"out": out, "inputs": got})
    _, back = judge.recv(timeout=5)
    assert torch.equal(back["out"], out) and torch.equal(back["inputs"]["x"], got["x"])
    assert judge.stats["bytes"] < 8192 and judge.stats["shared_bytes"] >= 2 * x.numel() * 4
    # What the judge holds is a clone: the runner writing its region afterwards changes nothing.
    runner.peer_regions.views["from_peer"].fill_(0)
    assert torch.equal(back["out"], out)
    # The region is shared once: later messages carry no descriptor and no extra descriptor file.
    judge.send({"op": "call"}, values, reply_bytes=x.numel() * 4)
    assert runner.recv(timeout=5)[1]["x"].sum() == x.sum()


def test_regions_grow_and_a_reply_without_room_travels_in_its_message_file():
    judge, runner = _region_ends()
    judge.send({"op": "a"}, {"t": torch.ones(16)})
    runner.recv(timeout=5)
    first = judge.regions.regions["to_peer"]
    big = torch.arange(3 << 20, dtype=torch.float32)  # 12 MiB: more than the first region holds
    judge.send({"op": "b"}, {"t": big})
    assert torch.equal(runner.recv(timeout=5)[1]["t"], big)
    assert judge.regions.regions["to_peer"].capacity >= big.numel() * 4 > first.capacity
    # No reply region (reply_bytes was 0): the runner's answer goes inline, still correct.
    runner.send({"ok": True}, {"t": big})
    before = judge.stats["bytes"]
    _, back = judge.recv(timeout=5)
    assert torch.equal(back["t"], big) and judge.stats["bytes"] - before >= big.numel() * 4


def test_dropped_regions_are_made_again_at_the_next_messages_size():
    """The judge closes both regions for a step that leaves this child idle (memory.py); the child
    lets go of its mappings; the next message makes them again at its own size, shares them anew,
    and its tensors cross as before; a reply meanwhile travels in its message file."""
    judge, runner = _region_ends()
    big = torch.arange(3 << 20, dtype=torch.float32)  # 12 MiB
    judge.send({"op": "a"}, {"t": big}, reply_bytes=big.numel() * 4)
    runner.recv(timeout=5)
    held = judge.regions.region_bytes()
    assert held >= 2 * big.numel() * 4
    runner.peer_regions.drop()
    assert judge.regions.drop() == held and judge.regions.region_bytes() == 0
    assert runner.peer_regions.views == {"to_peer": None, "from_peer": None}
    runner.send({"ok": True}, {"t": big})  # no reply region: inline, still correct
    assert torch.equal(judge.recv(timeout=5)[1]["t"], big)
    small = torch.arange(1024, dtype=torch.float32)
    judge.reset_stats()
    judge.send({"op": "b"}, {"t": small}, reply_bytes=small.numel() * 4)
    _, got = runner.recv(timeout=5)
    assert torch.equal(got["t"], small) and judge.stats["shared_bytes"] == small.numel() * 4
    assert judge.regions.region_bytes() == 2 * (2 << 20)  # each at the message's size, rounded
    runner.send({"ok": True}, {"t": got["t"] * 2})
    assert torch.equal(judge.recv(timeout=5)[1]["t"], small * 2)
    assert judge.stats["shared_bytes"] == 2 * small.numel() * 4  # the reply came through from_peer


def test_the_runner_cannot_resize_a_shared_region():
    judge, _ = _region_ends()
    judge.send({"op": "a"}, {"t": torch.ones(16)}, reply_bytes=64)
    for r in judge.regions.regions.values():
        for size in (0, r.capacity * 2):
            with pytest.raises(PermissionError):
                os.ftruncate(r.fd, size)


@pytest.mark.parametrize("layout", [[1, 1 << 40, 16], [1, -64, 16], [1, 32, 16], [1, 0, -1], [2, 0, 16],
                                    [1, 0, 1 << 30], [True, 0, 16]])
def test_a_reply_naming_bytes_outside_the_judges_region_is_a_protocol_error(layout):
    judge, runner = _region_ends()
    judge.send({"op": "a"}, {"t": torch.ones(16)}, reply_bytes=4096)
    runner.recv(timeout=5)
    body = json.dumps({"msg": {"ok": True}, "values": {"t": [0, "uint8", [16], [1], 0]}}).encode()
    _raw(runner.sock, {"json": len(body), "blobs": [layout]}, body, size=512)
    with pytest.raises(ProtocolError):
        judge.recv(timeout=5)


def test_a_region_reference_without_a_region_and_extra_files_are_protocol_errors():
    judge, runner = _ends()  # no regions on this judge
    body = json.dumps({"msg": {"ok": True}, "values": {"t": [0, "uint8", [16], [1], 0]}}).encode()
    _raw(runner.sock, {"json": len(body), "blobs": [[1, 0, 16]]}, body, size=512)
    with pytest.raises(ProtocolError):
        judge.recv(timeout=5)
    judge, runner = _region_ends()
    judge.send({"op": "a"}, {"t": torch.ones(16)}, reply_bytes=4096)
    runner.recv(timeout=5)  # the judge has a reply region now, but no descriptor comes from the runner
    ok = json.dumps({"msg": {"ok": True}, "regions": {"from_peer": {"capacity": 1, "fd": 1}},
                     "values": {"v": 1}}).encode()
    fd = os.memfd_create("t", os.MFD_ALLOW_SEALING)
    os.write(fd, ok)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
    extra = os.memfd_create("x")
    socket.send_fds(runner.sock, [json.dumps({"json": len(ok), "blobs": []}).encode()], [fd, extra])
    with pytest.raises(ProtocolError):
        judge.recv(timeout=5)
    # A descriptor in a one-file message is ignored: the judge opens nothing the runner names.
    _raw(runner.sock, {"json": len(ok), "blobs": []}, ok)
    assert judge.recv(timeout=5) == ({"ok": True}, 1)
    assert judge.regions.regions["from_peer"].capacity >= 4096


def test_pinned_tensors_cross_once_and_the_runner_cannot_write_them():
    judge, runner = _region_ends()
    judge.regions.pins.budget = 1 << 20
    cached = torch.randn(64, 32)
    judge.send({"op": "a"}, {"x": cached}, pin=[cached])
    first = judge.stats["shared_bytes"]
    _, got = runner.recv(timeout=5)
    assert torch.equal(got["x"], cached) and first >= cached.numel() * 4
    got["x"].fill_(0)  # the runner's own copy
    judge.send({"op": "b"}, {"x": cached}, pin=[cached])
    assert judge.stats["shared_bytes"] == first and judge.stats["pinned_bytes"] == 2 * cached.numel() * 4
    _, again = runner.recv(timeout=5)
    assert torch.equal(again["x"], cached)
    (pin,) = [p for p, _ in judge.regions.pins.pins.values()]
    with pytest.raises(PermissionError):  # sealed against writing: the runner can only read it
        os.pwrite(pin.fd, b"\0" * 8, 0)
    with pytest.raises(PermissionError):
        mmap.mmap(pin.fd, 4096)
    # The original gone, the pin goes, and the runner is told to drop its mapping.
    pid = pin.pid
    del cached, pin
    assert not judge.regions.pins.pins
    judge.send({"op": "c"}, {"y": torch.ones(4)})
    runner.recv(timeout=5)
    assert pid not in runner.peer_regions.pins
