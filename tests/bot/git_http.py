"""Git smart HTTP for the test GitHub server: `git http-backend` run as a CGI over bare repositories."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def run_http_backend(project_root: Path, path_info: str, method: str, query: str, headers,
                     body: bytes, remote_user: str) -> tuple[int, list[tuple[str, str]], bytes]:
    """One CGI request to `git http-backend`; returns (status, headers, body)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_PROJECT_ROOT": str(project_root),
        "GIT_HTTP_EXPORT_ALL": "1",
        "PATH_INFO": path_info,
        "REQUEST_METHOD": method,
        "QUERY_STRING": query,
        "CONTENT_TYPE": headers.get("Content-Type", ""),
        "CONTENT_LENGTH": str(len(body)),
        # receive-pack (push) is enabled by http-backend only for an authenticated user.
        "REMOTE_USER": remote_user,
        "REMOTE_ADDR": "127.0.0.1",
        "GIT_HTTP_MAX_REQUEST_BUFFER": "100M",
    }
    if headers.get("Content-Encoding"):
        env["HTTP_CONTENT_ENCODING"] = headers["Content-Encoding"]
    if headers.get("Git-Protocol"):
        env["GIT_PROTOCOL"] = headers["Git-Protocol"]
    proc = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, timeout=60)
    raw = proc.stdout
    sep = raw.find(b"\r\n\r\n")
    sep_len = 4
    if sep < 0:
        sep, sep_len = raw.find(b"\n\n"), 2
    if sep < 0:
        return 500, [("Content-Type", "text/plain")], proc.stderr or b"http-backend failed"
    status = 200
    out_headers: list[tuple[str, str]] = []
    for line in raw[:sep].decode("latin-1").splitlines():
        if not line.strip():
            continue
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = int(value.strip().split()[0])
        else:
            out_headers.append((name.strip(), value.strip()))
    return status, out_headers, raw[sep + sep_len:]


def read_chunked(rfile) -> bytes:
    """The body of a request sent with Transfer-Encoding: chunked (git does so for large pushes)."""
    data = bytearray()
    while True:
        size_line = rfile.readline().strip()
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            while rfile.readline().strip():
                pass
            return bytes(data)
        data += rfile.read(size)
        rfile.readline()
