"""The judge <-> runner channel (referee/channel.py): tensors through shared memory with their
strides and aliasing, and the judge's end decoding the runner's messages as hostile input."""

import fcntl
import json
import os
import pickle
import socket

import pytest
import torch

from kernelsmith.referee.channel import Channel, ForeignSubclass, PeerGone, ProtocolError, pair


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
        _raw(runner.sock, {"json": len(ok), "blobs": [[128, 1 << 30]]}, ok)
    elif case == "past_storage":
        body = json.dumps({"msg": {}, "values": {"t": [0, "float32", [100], [1], 0]}}).encode()
        _raw(runner.sock, {"json": len(body), "blobs": [[256, 16]]}, body, size=512)
    elif case == "bad_dtype":
        body = json.dumps({"msg": {}, "values": {"t": [0, "object", [1], [1], 0]}}).encode()
        _raw(runner.sock, {"json": len(body), "blobs": [[256, 16]]}, body, size=512)
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
