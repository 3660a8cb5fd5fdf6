"""The sandbox launcher with real processes: read-only outside the profile's folders, no network,
no visible ancestor, no secrets, nothing it cannot undo, and everything started inside dies with it."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelsmith import sandbox
from kernelsmith.sandbox import environ

ROOT = Path(__file__).resolve().parents[2]

PROBE = r'''
import json, os, socket, subprocess, sys
w, outside, port, netrc, agent = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
out = {}
def attempt(key, fn):
    try:
        fn()
        out[key] = "ok"
    except OSError as e:
        out[key] = f"refused {e.errno}"
attempt("write_workdir", lambda: open(os.path.join(w, "ok"), "w").write("x"))
attempt("write_tmpdir", lambda: open(os.path.join(os.environ["TMPDIR"], "ok"), "w").write("x"))
attempt("write_outside", lambda: open(outside, "w").write("x"))
attempt("write_dev_shm", lambda: open("/dev/shm/ks-probe", "w").write("x"))
attempt("connect_loopback", lambda: socket.create_connection(("127.0.0.1", port), timeout=2).close())
attempt("connect_remote", lambda: socket.create_connection(("192.0.2.1", 80), timeout=2).close())
out["netrc"] = open(netrc).read() if os.path.exists(netrc) else None
attempt("ssh_agent", lambda: socket.socket(socket.AF_UNIX).connect(agent))
out["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
out["cmdlines"] = [open(f"/proc/{p}/cmdline", "rb").read().decode(errors="replace") for p in out["pids"]
                   if os.path.exists(f"/proc/{p}/cmdline")]
out["secrets"] = sorted(k for k in os.environ if "TOKEN" in k or "API_KEY" in k)
out["uid"] = os.getuid()
undo = ("mount -o remount,rw,bind / ; "
        "unshare -Urm sh -c 'mount -o remount,rw,bind / && echo x > " + outside + "'")
out["undo_rc"] = subprocess.run(["sh", "-c", undo], capture_output=True).returncode
attempt("write_outside_after_undo", lambda: open(outside, "a").write("y"))
print(json.dumps(out))
'''




def _run(argv, profile, tmp_path, env=None, **kw):
    w = tmp_path / "work"
    w.mkdir(exist_ok=True)
    base = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    cmd, env = sandbox.wrap(argv, profile, env=base, writable=[w], scratch=w / "tmp")
    return subprocess.run(cmd, env=env, cwd=w, capture_output=True, text=True, timeout=60, **kw)


def test_candidate_profile_isolation(tmp_path, listener, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text("machine api login x password hunter2\n")
    monkeypatch.setenv("HOME", str(home))
    outside = tmp_path / "outside.txt"
    outside.write_text("original")
    agent = socket.socket(socket.AF_UNIX)  # an ssh-agent: it signs for whoever connects
    agent.bind(str(tmp_path / "agent.sock"))
    agent.listen(1)
    monkeypatch.setenv("SSH_AUTH_SOCK", str(tmp_path / "agent.sock"))
    env = {"GITHUB_TOKEN": "ghs_" + "q" * 36, "KERNELSMITH_LLM_API_KEY": "sk-q0123456789abcdefgh",
           "HOME": str(home)}
    proc = _run([sys.executable, "-c", PROBE, str(tmp_path / "work"), str(outside), str(listener),
                 str(home / ".netrc"), str(tmp_path / "agent.sock")], "candidate", tmp_path, env=env)
    agent.close()
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["write_workdir"] == "ok" and out["write_tmpdir"] == "ok" and out["write_dev_shm"] == "ok"
    assert out["write_outside"] == "refused 30"  # EROFS
    assert out["connect_loopback"].startswith("refused") and out["connect_remote"].startswith("refused")
    assert out["netrc"] in ("", None)  # credential files are hidden
    assert out["ssh_agent"].startswith("refused")
    assert out["secrets"] == []
    # Only the sandbox's own processes: its init (the launcher) and the probe itself.
    assert out["pids"] == [1, 2] and "launch.py" in out["cmdlines"][0], out["cmdlines"]
    assert out["uid"] == os.getuid()
    assert out["undo_rc"] != 0 and out["write_outside_after_undo"].startswith("refused")
    assert outside.read_text() == "original"
    assert not (Path("/dev/shm") / "ks-probe").exists()  # a private /dev/shm


def test_everything_started_inside_dies_with_it(tmp_path):
    late = tmp_path / "work" / "late"
    script = f'(setsid sh -c "sleep 2; echo alive > {late}" &) ; echo started'
    proc = _run(["sh", "-c", script], "tests", tmp_path)
    assert proc.returncode == 0 and "started" in proc.stdout
    time.sleep(3)
    assert not late.exists()


def test_exit_status_and_signals_are_relayed(tmp_path):
    assert _run(["sh", "-c", "exit 3"], "setup", tmp_path).returncode == 3
    assert _run(["sh", "-c", "kill -SEGV $$"], "setup", tmp_path).returncode == -11
    assert _run(["/nonexistent/cmd"], "setup", tmp_path).returncode == 127


def test_probe_names_the_missing_kernel_feature(monkeypatch):
    assert sandbox.probe() is None  # this machine has user namespaces
    monkeypatch.setenv(sandbox.SIMULATE_ENV, "1")
    msg = sandbox.probe()
    assert "user.max_user_namespaces = 0" in msg and "--no-sandbox" in msg
    with pytest.raises(sandbox.SandboxUnavailable, match="max_user_namespaces"):
        sandbox.require()
    clone = sandbox.diagnose("unshare: EPERM",
                             read=lambda p: "0" if "unprivileged_userns_clone" in p else None)
    assert "kernel.unprivileged_userns_clone = 0" in clone
    sandbox.disable()
    try:
        sandbox.require()  # --no-sandbox: no refusal, and the outputs say so
        assert sandbox.summary()["enabled"] is False and "WITHOUT" in sandbox.summary()["note"]
        cmd, _ = sandbox.wrap(["true"], "tests", env={})
        assert cmd == ["true"]
    finally:
        sandbox.enable()


def test_dropping_secrets_clears_proc_self_environ():
    code = ("import json; from kernelsmith.sandbox import drop_secrets_from_environ as d; "
            "names = d(); env = open('/proc/self/environ', 'rb').read(); import os; "
            "print(json.dumps([names, b'sk-dropme0123456789abc' in env, "
            "os.environ.get('KERNELSMITH_CACHE')]))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERNELSMITH_LLM_API_KEY": "sk-dropme0123456789abc",
           "KERNELSMITH_CACHE": "/tmp/ks-cache-kept"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    names, still_there, cache = json.loads(out.stdout)
    assert "KERNELSMITH_LLM_API_KEY" in names and not still_there and cache == "/tmp/ks-cache-kept"


def test_one_scrubber_for_referee_checkout_and_bot():
    from bot.gitops import scrubbed
    from kernelsmith.onboard.checkout import safe_env
    from kernelsmith.sandbox import scrubbed_env as referee_scrubber

    assert referee_scrubber is environ.scrubbed_env
    env = {"GITHUB_TOKEN": "ghs_x", "KERNELSMITH_TOKEN": "t", "KERNELSMITH_LLM_API_KEY": "sk-k",
           "KERNELSMITH_CACHE": "/c", "PATH": "/bin", "MY_PASSWORD": "p"}
    bot = scrubbed(env)
    # The bot hands the LLM key on to optimize, whose broker takes it before any target code runs.
    assert set(bot) == {"KERNELSMITH_LLM_API_KEY", "KERNELSMITH_CACHE", "PATH"}
    assert set(environ.scrubbed_env(env)) == {"PATH"}
    assert not any(environ.is_secret(k, v) for k, v in safe_env().items())


def test_startup_overhead_per_sandbox(tmp_path, capsys):
    """Reported, not a benchmark: the sandbox's cost on top of starting a process."""
    if shutil.which("true") is None:
        pytest.skip("no `true`")

    def timed(wrap: bool) -> float:
        best = []
        for _ in range(5):
            cmd, env = (sandbox.wrap(["true"], "candidate", env=dict(os.environ), writable=[tmp_path])
                        if wrap else (["true"], dict(os.environ)))
            t = time.perf_counter()
            subprocess.run(cmd, env=env, check=True)
            best.append(time.perf_counter() - t)
        return min(best)

    plain, boxed = timed(False), timed(True)
    with capsys.disabled():
        print(f"\nsandbox start-up: {1e3 * (boxed - plain):.0f} ms on top of {1e3 * plain:.0f} ms")
    assert boxed - plain < 1.0
