"""A local, stateful GitHub REST server over 127.0.0.1 for the bot's tests.

It follows GitHub's documented behaviour rather than the bot's assumptions, laid out like GitHub
Enterprise Server: the REST API under `/api/v3` (`GITHUB_API_URL`) and git smart HTTP at
`/<owner>/<repo>.git` (`GITHUB_SERVER_URL`), each repository backed by a local bare git repository.

- Every URL in a response is built from the request's own Host header.
- Lists paginate with `per_page`/`page` and a `Link` header; `GET /issues` includes pull requests.
- 422 "Validation Failed" for a duplicate branch (git refs API) or a duplicate open pull request.
- Scripted faults (`fail_next`): e.g. a 403 secondary rate limit with `Retry-After`, or a 502.
- GitHub App: an RS256 JWT signed by the App's key buys an installation token (`expires_at` set
  from `token_ttl`); expired or unknown tokens get 401 "Bad credentials".
- Check runs are refused to anything but an installation token (403); commit statuses are not.
- Collaborator permission is looked up per user (`role_name` and the legacy `permission`).
- Pull requests close (PATCH state) and merge (PUT .../merge: a real merge commit on the base
  branch, `merged`/`merged_at` set, 405 when it conflicts); a merged one cannot be reopened.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import secrets
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

from git_http import read_chunked, run_http_backend

API_PREFIX = "/api/v3"
LEGACY_PERMISSION = {"admin": "admin", "maintain": "write", "write": "write", "triage": "read",
                     "read": "read", "none": "none"}


def _iso(ts: float | None = None) -> str:
    return datetime.fromtimestamp(ts if ts is not None else time.time(), timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


class HTTPError(Exception):
    """An API error response: status, GitHub-style JSON message, extra headers."""

    def __init__(self, status: int, message: str, errors: list | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.errors, self.headers = status, message, errors, headers or {}


@dataclass
class Repo:
    """One repository: a bare git repo plus its issues, pull requests, comments and checks."""

    full_name: str
    id: int
    bare: Path
    default_branch: str = "main"
    roles: dict[str, str] = field(default_factory=dict)   # login -> admin/maintain/write/triage/read
    installation_id: int | None = None
    issues: dict[int, dict] = field(default_factory=dict)  # number -> issue (PRs too, with "pr")
    labels: dict[str, dict] = field(default_factory=dict)
    statuses: list[dict] = field(default_factory=list)
    check_runs: list[dict] = field(default_factory=list)

    @property
    def owner(self) -> str:
        return self.full_name.split("/")[0]

    def git(self, *args: str) -> str:
        out = subprocess.run(["git", *args], cwd=self.bare, capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""

    def branch_sha(self, name: str) -> str | None:
        return self.git("rev-parse", "--verify", "--quiet", f"refs/heads/{name}^{{commit}}") or None


class GitHubState:
    """Everything the server knows; tests read and arrange it directly."""

    def __init__(self, root: Path):
        self.root = root
        self.repos: dict[str, Repo] = {}
        self.users: dict[str, dict] = {}
        self.tokens: dict[str, dict] = {}       # token -> {login, kind, expires, installation}
        self.apps: dict[str, dict] = {}         # app id -> {public_key, slug}
        self.installations: dict[int, dict] = {}
        self.comments: dict[int, dict] = {}     # comment id -> comment (with "repo", "issue")
        self.faults: list[dict] = []
        self.requests: list[tuple[str, str, str]] = []  # (method, path, auth kind)
        self.token_ttl = 3600.0
        self.lock = threading.RLock()
        self._ids = itertools.count(1000)

    def next_id(self) -> int:
        return next(self._ids)

    def add_user(self, login: str, kind: str = "User") -> dict:
        """A user account (kind "User" or "Bot")."""
        user = self.users.setdefault(login, {"login": login, "id": self.next_id(), "type": kind})
        return user

    def add_token(self, login: str) -> str:
        """A personal access token for `login`."""
        self.add_user(login)
        token = "ghp_" + secrets.token_hex(16)
        self.tokens[token] = {"login": login, "kind": "pat", "expires": None}
        return token

    def add_repo(self, full_name: str, default_branch: str = "main", source: Path | None = None) -> Repo:
        """A repository backed by a new bare git repo, seeded from `source` (a git repo) if given."""
        bare = self.root / f"{full_name}.git"
        bare.parent.mkdir(parents=True, exist_ok=True)
        if source is not None:
            subprocess.run(["git", "clone", "-q", "--bare", str(source), str(bare)], check=True)
        else:
            subprocess.run(["git", "init", "-q", "--bare", "-b", default_branch, str(bare)], check=True)
        self.add_user(full_name.split("/")[0])
        repo = Repo(full_name, self.next_id(), bare, default_branch)
        repo.roles[full_name.split("/")[0]] = "admin"
        self.repos[full_name] = repo
        return repo

    def add_app(self, app_id: str, public_key_pem: str, slug: str = "kernelsmith") -> None:
        """A GitHub App identified by its id and RSA public key."""
        self.apps[str(app_id)] = {"public_key": public_key_pem, "slug": slug}
        self.add_user(f"{slug}[bot]", "Bot")

    def install_app(self, app_id: str, repo: Repo) -> int:
        """Install the App on a repository; returns the installation id."""
        inst = self.next_id()
        self.installations[inst] = {"app_id": str(app_id), "repos": [repo.full_name]}
        repo.installation_id = inst
        return inst

    def fail_next(self, method: str, path_regex: str, status: int, *, headers: dict | None = None,
                  message: str = "Server Error", times: int = 1) -> None:
        """Answer the next `times` matching requests with an error (a scripted outage)."""
        self.faults.append({"method": method, "re": re.compile(path_regex), "status": status,
                            "headers": headers or {}, "message": message, "left": times})

    def writes(self) -> list[tuple[str, str, str]]:
        """Requests that were not reads."""
        return [r for r in self.requests if r[0] not in ("GET", "HEAD")]

    def pulls(self, full_name: str) -> list[dict]:
        """The repository's pull requests (issue records that carry "pr")."""
        return [i for i in self.repos[full_name].issues.values() if "pr" in i]


class Server:
    """The HTTP server on 127.0.0.1 in a background thread; use as a context manager."""

    def __init__(self, root: Path):
        self.state = GitHubState(root)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self.state))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def server_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def api_url(self) -> str:
        return self.server_url + API_PREFIX

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _make_handler(state: GitHubState):
    import github_api

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # keep test output quiet
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                return read_chunked(self.rfile)
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""

        def _send(self, status: int, body: bytes, headers: list[tuple[str, str]]) -> None:
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _handle(self, method: str) -> None:
            body = self._body()
            parts = urlsplit(self.path)
            base = f"http://{self.headers.get('Host')}"
            if parts.path.startswith(API_PREFIX + "/") or parts.path == API_PREFIX:
                self._api(method, parts.path[len(API_PREFIX):] or "/", parts.query, body, base)
            elif re.match(r"^/[^/]+/[^/]+\.git/", parts.path):
                self._git(method, parts.path, parts.query, body)
            else:
                self._send(404, b"not found", [("Content-Type", "text/plain")])

        def _git(self, method: str, path: str, query: str, body: bytes) -> None:
            user = github_api.basic_auth_user(state, self.headers.get("Authorization"))
            if user is None:
                with state.lock:
                    state.requests.append((method, path, "none"))
                self._send(401, b"authentication required",
                           [("WWW-Authenticate", 'Basic realm="GitHub"'), ("Content-Type", "text/plain")])
                return
            with state.lock:
                state.requests.append((method, path, "git"))
                info = state.tokens.get(basic_token(self.headers.get("Authorization")) or "")
            pushing = "git-receive-pack" in path or "git-receive-pack" in query
            if pushing and not github_api.token_allows(info, "contents", "write"):
                self._send(403, b"Write access to repository not granted.", [("Content-Type", "text/plain")])
                return
            status, headers, out = run_http_backend(state.root, path, method, query, self.headers, body, user)
            self._send(status, out, headers)

        def _api(self, method: str, path: str, query: str, body: bytes, base: str) -> None:
            try:
                with state.lock:
                    auth = github_api.authenticate(state, self.headers.get("Authorization"))
                    state.requests.append((method, path, auth["kind"] if auth else "none"))
                    for fault in state.faults:
                        if fault["left"] > 0 and fault["method"] == method and fault["re"].search(path):
                            fault["left"] -= 1
                            raise HTTPError(fault["status"], fault["message"], headers=fault["headers"])
                    payload = json.loads(body) if body.strip() else None
                    ctx = github_api.Context(state, base, API_PREFIX, auth, parse_qs(query))
                    status, data, extra = github_api.route(ctx, method, path, payload)
                out = json.dumps(data).encode() if data is not None else b""
                headers = [("Content-Type", "application/json; charset=utf-8"), *extra]
                self._send(status, out, headers)
            except HTTPError as e:
                err = {"message": e.message,
                       "documentation_url": "https://docs.github.com/rest"}
                if e.errors:
                    err["errors"] = e.errors
                headers = [("Content-Type", "application/json; charset=utf-8"), *e.headers.items()]
                self._send(e.status, json.dumps(err).encode(), headers)

        def do_GET(self):
            self._handle("GET")

        def do_POST(self):
            self._handle("POST")

        def do_PATCH(self):
            self._handle("PATCH")

        def do_PUT(self):
            self._handle("PUT")

        def do_DELETE(self):
            self._handle("DELETE")

    return Handler


def page_links(base: str, prefix: str, path: str, query: dict, page: int, last: int) -> list[tuple[str, str]]:
    """GitHub's Link header for page `page` of `last`, with URLs on the request's own host."""
    def url(n: int) -> str:
        q = {k: v[0] for k, v in query.items()}
        q["page"] = str(n)
        return f"{base}{prefix}{path}?{urlencode(q)}"
    rels = []
    if page > 1:
        rels += [f'<{url(page - 1)}>; rel="prev"', f'<{url(1)}>; rel="first"']
    if page < last:
        rels += [f'<{url(page + 1)}>; rel="next"', f'<{url(last)}>; rel="last"']
    return [("Link", ", ".join(rels))] if rels else []


def basic_token(header: str | None) -> str | None:
    """The password (token) of a Basic Authorization header."""
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        _, _, password = base64.b64decode(header.split(None, 1)[1]).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    return password or None
