"""Attack: sandboxed code talks to a Unix socket listener outside the sandbox (on a CI runner
/var/run/docker.sock is root on the host; Ray's raylet and D-Bus listen there too). A network
namespace does not cover sockets on the file system, and a read-only mount does not stop connect().

Listeners here: stream sockets in a folder the sandbox sees read-only (under the test's tmp path),
directly under /tmp, and outside /tmp and /run (in this repository's folder, visible everywhere);
a datagram socket; an abstract socket. Every profile is tried, then a real candidate."""

import errno
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from kernelsmith import sandbox

ROOT = Path(__file__).resolve().parents[2]
MINISERVE = ROOT / "examples" / "miniserve"

PROBE = r'''
import errno, json, socket, sys
out = {}
def attempt(key, fn):
    try:
        fn()
        out[key] = "ok"
    except OSError as e:
        out[key] = errno.errorcode.get(e.errno, str(e.errno))
def stream(path, kind=socket.SOCK_STREAM):
    s = socket.socket(socket.AF_UNIX, kind)
    s.settimeout(2)
    s.connect(path)
    s.sendall(b"hello from the sandbox")
def dgram_socket(path):
    socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"hello", path)
def dgram_pair(path):
    socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0].sendto(b"hello", path)
def reaim_pair(path):  # a connected stream pair cannot be pointed elsewhere
    socket.socketpair()[0].connect(path)
def own_pair():  # what the referee's channels use must still work
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    a.send(b"x")
    assert b.recv(1) == b"x"
streams, dgram, abstract = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
for name, path in streams.items():
    attempt("stream:" + name, lambda: stream(path))
    attempt("seqpacket:" + name, lambda: stream(path, socket.SOCK_SEQPACKET))  # CUDA's kind: allowed
    attempt("reaim:" + name, lambda: reaim_pair(path))
attempt("dgram_socket", lambda: dgram_socket(dgram))
attempt("dgram_pair", lambda: dgram_pair(dgram))
attempt("abstract", lambda: stream("\0" + abstract))
attempt("own_pair", own_pair)
print(json.dumps(out))
'''


class Listeners:
    """Stream listeners at named paths, a datagram socket and an abstract one, all outside."""

    def __init__(self, streams: dict[str, Path], dgram: Path):
        self.streams, self.socks = {k: str(p) for k, p in streams.items()}, []
        for path in streams.values():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(str(path))
            s.listen(8)
            self.socks.append(s)
        self.dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.dgram.bind(str(dgram))
        self.dgram_path = str(dgram)
        self.abstract_name = f"kernelsmith-test-{uuid.uuid4().hex}"
        self.abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.abstract.bind("\0" + self.abstract_name)
        self.abstract.listen(8)
        self.socks += [self.dgram, self.abstract]

    def saw(self) -> list[str]:
        """The sockets that got a connection or a datagram."""
        ready, _, _ = select.select(self.socks, [], [], 0.2)
        return [s.getsockname() if isinstance(s.getsockname(), str) else "abstract" for s in ready]

    def close(self):
        for s in self.socks:
            s.close()


@pytest.fixture
def listeners(tmp_path):
    seen_ro = tmp_path / "ro"  # a folder the sandbox sees (read-only), not one of its own
    seen_ro.mkdir()
    under_tmp = Path(tempfile.gettempdir()) / f"ks-{uuid.uuid4().hex[:12]}.sock"
    elsewhere = Path(tempfile.mkdtemp(prefix=".ks-sockets-", dir=ROOT))  # outside /tmp and /run
    streams = {"tmp_path": seen_ro / "listen.sock", "tmp": under_tmp, "elsewhere": elsewhere / "l.sock"}
    lis = Listeners(streams, seen_ro / "dgram.sock")
    yield lis
    lis.close()
    under_tmp.unlink(missing_ok=True)
    for p in elsewhere.iterdir():
        p.unlink()
    elsewhere.rmdir()


def _probe(profile: str, tmp_path: Path, lis: Listeners, streams: dict[str, str]) -> dict:
    work = tmp_path / f"work-{profile}"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-c", PROBE, json.dumps(streams), lis.dgram_path, lis.abstract_name]
    cmd, env = sandbox.wrap(argv, profile, env=env, writable=[work], scratch=work / "tmp")
    proc = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("profile", ["candidate", "harness", "setup"])
def test_no_unix_socket_can_be_made_in_the_profiles_that_need_none(profile, tmp_path, listeners):
    out = _probe(profile, tmp_path, listeners, listeners.streams)
    for name in listeners.streams:  # wherever the listener is: no socket to connect with
        assert out["stream:" + name] == "EPERM", out
        # The one kind left (the CUDA driver's IPC needs it) cannot connect to a stream listener.
        assert out["seqpacket:" + name] in ("EPROTOTYPE", "ENOENT"), out
        assert out["reaim:" + name] in ("EISCONN", "ENOENT"), out  # ENOENT: /tmp and /run are empty
    assert out["dgram_socket"] == "EPERM" and out["dgram_pair"] == "EPERM", out
    assert out["abstract"] == "EPERM", out
    assert out["own_pair"] == "ok", out
    assert listeners.saw() == []


def test_upstream_tests_keep_unix_sockets_but_see_no_listener_in_tmp_or_run(tmp_path, listeners):
    # The tests profile may make Unix sockets (upstream tests use them: multiprocessing's
    # forkserver and fd passing, ZMQ ipc://), so /tmp and /run are emptied for it instead: the
    # listeners there are gone, and an abstract one lives in another network namespace.
    covered = {k: v for k, v in listeners.streams.items() if k != "elsewhere"}
    out = _probe("tests", tmp_path, listeners, covered)
    for name in covered:
        assert out["stream:" + name] == "ENOENT" and out["seqpacket:" + name] == "ENOENT", out
    assert out["dgram_socket"] == "ENOENT" and out["dgram_pair"] == "ENOENT", out
    assert out["abstract"] == "ECONNREFUSED", out
    assert out["own_pair"] == "ok", out
    assert listeners.saw() == []


def test_the_sandbox_keeps_its_own_folders_under_an_emptied_tmp(tmp_path):
    # Writable folders, the scratch and the command's own paths under /tmp stay reachable.
    script = tmp_path / "script.py"
    script.write_text("import os, sys; open(os.path.join(os.environ['TMPDIR'], 'x'), 'w').write('1'); "
                      "print(sorted(os.listdir('/tmp')), os.listdir('/run'))")
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd, env = sandbox.wrap(["/bin/sh", "-c", f"{sys.executable} {script}"], "tests", env=env,
                            writable=[work], scratch=work / "tmp")
    proc = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    listed_tmp, listed_run = proc.stdout.strip().rsplit("] ", 1)
    tops = set()
    for path in (tmp_path, ROOT, Path(sys.executable)):  # the repository and its Python, if under /tmp
        try:
            tops.add(Path(path).resolve().relative_to(Path(tempfile.gettempdir()).resolve()).parts[0])
        except ValueError:
            pass
    assert set(eval(listed_tmp + "]")) == tops and eval(listed_run) == []  # noqa: S307 - our own output
    assert (work / "tmp" / "x").read_text() == "1"


ATTACK = '''
import json as _json, os as _os, socket as _socket
def _knock():
    seen = {}
    for path in _os.environ["KS_SOCKETS"].split(_os.pathsep):
        for kind in (_socket.SOCK_STREAM, _socket.SOCK_SEQPACKET):
            try:
                s = _socket.socket(_socket.AF_UNIX, kind)
                s.settimeout(2)
                s.connect(path)
                s.sendall(b"POST /containers/create HTTP/1.1\\r\\n\\r\\n")
                seen[path + ":" + str(int(kind))] = "connected"
            except OSError as e:
                seen[path + ":" + str(int(kind))] = e.errno
    with open(_os.path.join(_os.environ["TMPDIR"], "knock.json"), "w") as f:
        _json.dump(seen, f)
_knock()
'''


def test_a_candidate_cannot_reach_a_listener_outside(tmp_path, listeners, monkeypatch):
    from kernelsmith.onboard.task import load_task
    from kernelsmith.referee import Referee

    monkeypatch.setenv("KS_SOCKETS", os.pathsep.join(listeners.streams.values()))
    base = (MINISERVE / "miniserve" / "kernels" / "rms_norm.py").read_text()
    head, _, rest = base.partition("\n\n")  # after the module docstring
    code = head + "\n" + ATTACK + "\n" + rest
    task = load_task(str(ROOT / "targets" / "demo.yaml"), "rms_norm", checkout=str(MINISERVE))
    work = tmp_path / "referee"
    with Referee(task, device="interpret", timeout_s=120, workdir=work) as ref:
        verdict = ref.evaluate(code, candidate_id=3, timing="none")
    assert verdict.correct, verdict.feedback()  # the attack ran inside and the kernel still worked
    knocked = json.loads((work / "work" / "tmp" / "knock.json").read_text())  # the sandbox's work/
    assert {k.rsplit(":", 1)[0] for k in knocked} == set(listeners.streams.values())
    by_kind = {kind: {v for k, v in knocked.items() if k.endswith(f":{int(kind)}")}
               for kind in (socket.SOCK_STREAM, socket.SOCK_SEQPACKET)}
    assert by_kind == {socket.SOCK_STREAM: {errno.EPERM}, socket.SOCK_SEQPACKET: {errno.EPROTOTYPE}}, knocked
    assert listeners.saw() == []
