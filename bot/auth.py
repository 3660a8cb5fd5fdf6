"""Authentication: a GitHub App (installation tokens, refreshed during long runs) or a plain token.

The API base URL comes from `GITHUB_API_URL`, so GitHub Enterprise Server (and a local test server)
work as well as github.com. Every client retries rate limits (403 with Retry-After, or a rate-limit
message) and 5xx answers through PyGithub's `GithubRetry`, and lists paginate through Link headers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from kernelsmith.errors import KernelsmithError

DEFAULT_API_URL = "https://api.github.com"
# Installation tokens are minted with only what the stage needs (GitHub narrows an App token to
# the permissions asked for). The gate answers comments and reads PRs; publish writes.
GATE_PERMISSIONS = {"metadata": "read", "contents": "read", "issues": "write", "pull_requests": "read"}
PUBLISH_PERMISSIONS = {"metadata": "read", "contents": "write", "issues": "write", "pull_requests": "write",
                       "checks": "write", "statuses": "write"}
ACTIONS_BOT = "github-actions[bot]"


class AuthError(KernelsmithError):
    """No usable credentials, or the App is not installed on a repository."""


def _retry():
    from github import GithubRetry

    # backoff_factor spaces out 5xx retries (the first is immediate); rate limits wait as told.
    return GithubRetry(total=8, backoff_factor=2, max_rate_limit_wait=900)


@dataclass
class GitHubAuth:
    """Credentials plus the API base URL; hands out PyGithub clients and git push tokens per repo."""

    api_url: str = DEFAULT_API_URL
    token: str | None = None
    app_id: str | None = None
    private_key: str | None = None
    permissions: dict | None = None
    _identity: str | None = field(default=None, repr=False)
    _clients: dict = field(default_factory=dict, repr=False)
    _installations: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_env(cls, env=None, permissions: dict | None = None) -> GitHubAuth:
        """Read KERNELSMITH_APP_ID + KERNELSMITH_APP_PRIVATE_KEY (preferred) or KERNELSMITH_TOKEN.
        `permissions` narrows the App's installation tokens (a plain token is what it is)."""
        env = os.environ if env is None else env
        api = (env.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/")
        app_id, key = env.get("KERNELSMITH_APP_ID"), env.get("KERNELSMITH_APP_PRIVATE_KEY")
        if app_id and key:
            return cls(api_url=api, app_id=app_id, private_key=key.replace("\\n", "\n"),
                       permissions=dict(permissions) if permissions else None)
        token = env.get("KERNELSMITH_TOKEN")
        if token:
            return cls(api_url=api, token=token, _identity=env.get("KERNELSMITH_BOT_LOGIN") or None)
        raise AuthError("no GitHub credentials: set KERNELSMITH_APP_ID and KERNELSMITH_APP_PRIVATE_KEY "
                        "(a GitHub App) or KERNELSMITH_TOKEN")

    @property
    def is_app(self) -> bool:
        """True when authenticated as a GitHub App installation (check runs are allowed)."""
        return self.app_id is not None

    def _kwargs(self) -> dict:
        kwargs = {"base_url": self.api_url, "retry": _retry(), "per_page": 100}
        interval = os.environ.get("KERNELSMITH_GITHUB_WRITE_INTERVAL")
        if interval is not None:  # GitHub asks for ~1 s between writes; a test server needs none
            kwargs["seconds_between_writes"] = float(interval)
            kwargs["seconds_between_requests"] = float(interval) / 4
        return kwargs

    def _installation_auth(self, full_name: str):
        from github import Auth, GithubException, GithubIntegration

        owner, name = full_name.split("/", 1)
        app_auth = Auth.AppAuth(self.app_id, self.private_key)
        if owner not in self._installations:
            integration = GithubIntegration(auth=app_auth, **self._kwargs())
            try:
                inst = integration.get_repo_installation(owner, name)
            except GithubException as e:
                raise AuthError(f"the GitHub App {self.app_id} is not installed on {full_name} "
                                f"({e.status})") from None
            # Kept per owner: the token object refreshes itself shortly before it expires.
            self._installations[owner] = app_auth.get_installation_auth(inst.id,
                                                                        token_permissions=self.permissions)
        return self._installations[owner]

    def client(self, full_name: str):
        """A PyGithub client allowed to act on `full_name` (owner/name)."""
        from github import Auth, Github

        key = full_name.split("/", 1)[0] if self.is_app else "token"
        if key not in self._clients:
            auth = self._installation_auth(full_name) if self.is_app else Auth.Token(self.token)
            self._clients[key] = Github(auth=auth, **self._kwargs())
        return self._clients[key]

    def repo(self, full_name: str):
        """The PyGithub Repository object for owner/name."""
        return self.client(full_name).get_repo(full_name)

    def push_token(self, full_name: str) -> str:
        """A currently valid token for git over HTTPS (an installation token is renewed if near expiry)."""
        if not self.is_app:
            return self.token
        self.client(full_name)
        return self._installations[full_name.split("/", 1)[0]].token

    def identity(self, full_name: str) -> str:
        """The login the bot acts as: `<app slug>[bot]` for an App, else the token's user. Only
        issues it authored count as its dashboard."""
        if self._identity is not None:
            return self._identity
        from github import Auth, GithubException, GithubIntegration

        if self.is_app:
            app_auth = Auth.AppAuth(self.app_id, self.private_key)
            integration = GithubIntegration(auth=app_auth, **self._kwargs())
            self._identity = f"{integration.get_app().slug}[bot]"
            return self._identity
        try:
            self._identity = self.client(full_name).get_user().login
        except GithubException as e:
            if e.status != 403:
                raise
            # An installation token (Actions' own GITHUB_TOKEN) cannot ask who it is; it acts as
            # github-actions[bot] (KERNELSMITH_BOT_LOGIN names another installation's bot).
            self._identity = ACTIONS_BOT
        return self._identity
