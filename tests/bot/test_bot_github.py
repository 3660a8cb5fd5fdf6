"""Auth and transport against the local GitHub: retries, pagination, App tokens, check runs."""

from __future__ import annotations

import subprocess
import time

import pytest
from botkit import PUB, saved_run
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from github import GithubException

from bot.auth import AuthError, GitHubAuth
from bot.cli import main


def test_403_with_retry_after_and_502_are_retried(gh):
    st = gh.state
    st.fail_next("GET", r"^/repos/kernelsmith/demo$", 403, headers={"Retry-After": "1"},
                 message="You have exceeded a secondary rate limit. Please wait a few minutes.")
    st.fail_next("GET", r"^/repos/kernelsmith/demo$", 502, message="Bad Gateway")
    started = time.monotonic()
    repo = GitHubAuth.from_env().repo("kernelsmith/demo")
    assert repo.full_name == "kernelsmith/demo"
    assert time.monotonic() - started >= 1.0                      # Retry-After was honoured
    assert [r[:2] for r in st.requests] == [("GET", "/repos/kernelsmith/demo")] * 3


def test_post_502_is_retried_once_and_creates_one_pr(gh, tmp_path):
    gh.state.fail_next("POST", r"/pulls$", 502, message="Bad Gateway")
    assert main(["publish", *PUB, str(saved_run(gh, tmp_path / "run"))]) == 0
    assert len(gh.state.pulls("kernelsmith/demo")) == 1


def test_pagination_follows_link_headers_on_the_servers_own_host(gh):
    from github import Auth, Github

    repo = GitHubAuth.from_env().repo("kernelsmith/demo")
    for i in range(7):
        repo.create_issue(title=f"issue {i}")
    gh.state.requests.clear()
    # PyGithub refuses a next-page URL on another host, so this also checks the Link URLs' host.
    small = Github(auth=Auth.Token(gh.token), base_url=gh.api_url, per_page=3)
    titles = [i.title for i in small.get_repo("kernelsmith/demo").get_issues(state="open")]
    assert sorted(titles) == sorted(f"issue {i}" for i in range(7))
    listed = [r for r in gh.state.requests if r[:2] == ("GET", "/repos/kernelsmith/demo/issues")]
    assert len(listed) == 3                                       # pages of 3, 3 and 1


def test_duplicate_branch_and_pr_get_422(gh):
    repo = GitHubAuth.from_env().repo("kernelsmith/demo")
    repo.create_git_ref("refs/heads/feature", gh.base_sha)
    with pytest.raises(GithubException) as e:
        repo.create_git_ref("refs/heads/feature", gh.base_sha)
    assert e.value.status == 422
    subprocess.run(["git", "branch", "-f", "feature2", gh.base_sha], cwd=gh.repo.bare, check=True)
    repo.create_pull(base="main", head="feature2", title="t", body="b")
    with pytest.raises(GithubException) as e:
        repo.create_pull(base="main", head="feature2", title="t", body="b")
    assert e.value.status == 422 and "already exists" in str(e.value.data)


def _app(gh, monkeypatch):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    pub = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    gh.state.add_app("4242", pub)
    gh.state.install_app("4242", gh.repo)
    monkeypatch.setenv("KERNELSMITH_APP_ID", "4242")
    monkeypatch.setenv("KERNELSMITH_APP_PRIVATE_KEY", pem.replace("\n", "\\n"))  # as a one-line secret
    monkeypatch.delenv("KERNELSMITH_TOKEN", raising=False)
    return pem


def test_app_publishes_with_installation_token_and_a_check_run(gh, tmp_path, monkeypatch):
    _app(gh, monkeypatch)
    assert main(["publish", *PUB, str(saved_run(gh, tmp_path / "run"))]) == 0
    pr = gh.state.pulls("kernelsmith/demo")[0]
    assert pr["user"] == "kernelsmith[bot]"
    (check,) = gh.repo.check_runs
    assert check["name"] == "kernelsmith / rms_norm" and check["conclusion"] == "success"
    assert check["head_sha"] == gh.repo.branch_sha("kernelsmith/demo/rms_norm")
    assert "1.37x" in check["output"]["title"] and gh.repo.statuses == []
    kinds = {r[2] for r in gh.state.requests}
    assert "jwt" in kinds and "installation" in kinds and "pat" not in kinds


def test_installation_token_is_refreshed_during_a_long_run(gh, monkeypatch):
    _app(gh, monkeypatch)
    gh.state.token_ttl = 21.5  # PyGithub renews 20 s before expiry: this token is "old" after 1.5 s
    auth = GitHubAuth.from_env()
    first = auth.push_token("kernelsmith/demo")
    time.sleep(2.0)
    auth.repo("kernelsmith/demo")
    second = auth.push_token("kernelsmith/demo")
    assert first != second
    minted = [r for r in gh.state.requests if r[1].endswith("/access_tokens")]
    assert len(minted) >= 2


def test_check_runs_are_refused_to_plain_tokens(gh):
    repo = GitHubAuth.from_env().repo("kernelsmith/demo")
    with pytest.raises(GithubException) as e:
        repo.create_check_run(name="x", head_sha=gh.base_sha)
    assert e.value.status == 403 and "GitHub App" in str(e.value.data)


def test_missing_credentials_and_app_not_installed(gh, monkeypatch):
    monkeypatch.delenv("KERNELSMITH_TOKEN")
    with pytest.raises(AuthError):
        GitHubAuth.from_env()
    _app(gh, monkeypatch)
    gh.state.add_repo("other/repo")
    with pytest.raises(AuthError, match="not installed on other/repo"):
        GitHubAuth.from_env().repo("other/repo")


def test_permission_lookup_is_per_user(gh):
    repo = GitHubAuth.from_env().repo("kernelsmith/demo")
    assert repo.get_collaborator_role_name("maintainer") == "maintain"
    assert repo.get_collaborator_permission("maintainer") == "write"
    assert repo.get_collaborator_role_name("reader") == "read"
