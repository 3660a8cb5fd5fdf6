"""A harness that attacks when imported: the probes the sandbox tests share (a unique module name,
so it imports from every test folder: tests/ is on sys.path through tests/conftest.py)."""


def spy_harness(outside: list[str], secrets: list[str], port: int, ending: str) -> str:
    """Harness source that tries to write each of `outside`, looks for `secrets` in its environment
    and in every /proc/<pid>/environ it can read, and connects to 127.0.0.1:`port`; what it saw is
    the list `seen` of WRITE-*/SECRET-*/NET-* words, which `ending` (source) reports back."""
    return (f"OUTSIDE = {outside!r}\nSECRETS = {secrets!r}\nPORT = {port}\n" + PROBES + ending)


PROBES = '''
import os, socket
seen = []
for path in OUTSIDE:
    try:
        with open(path, "w") as f:
            f.write("harness was here")
        seen.append("WRITE-SUCCEEDED")
    except OSError:
        seen.append("WRITE-REFUSED")
found = any(s in v for s in SECRETS for v in os.environ.values())
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        data = open(f"/proc/{pid}/environ", "rb").read()
    except OSError:
        continue
    found = found or any(s.encode() in data for s in SECRETS)
seen.append("SECRET-FOUND" if found else "NO-SECRET")
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=3).close()
    seen.append("NET-CONNECTED")
except OSError:
    seen.append("NET-REFUSED")
'''
