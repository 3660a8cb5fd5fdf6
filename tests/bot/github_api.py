"""The REST routes of the test GitHub server (see github_server.py for what it promises)."""

from __future__ import annotations

import base64
import os
import re
import secrets
import subprocess
import time
from dataclasses import dataclass

import jwt
from github_server import (
    LEGACY_PERMISSION,
    GitHubState,
    HTTPError,
    Repo,
    _iso,
    basic_token,
    page_links,
)


@dataclass
class Context:
    """One request: the server state, the base URL from its Host header, who is asking, the query."""

    state: GitHubState
    base: str
    prefix: str
    auth: dict | None
    query: dict

    @property
    def api(self) -> str:
        return self.base + self.prefix

    def q(self, name: str, default: str | None = None) -> str | None:
        return self.query.get(name, [default])[0]


def authenticate(state: GitHubState, header: str | None) -> dict | None:
    """Who an Authorization header belongs to; 401 for a bad, expired or undecodable credential."""
    if not header:
        return None
    scheme, _, cred = header.partition(" ")
    if scheme.lower() == "basic":
        cred = basic_token(header) or ""
    elif scheme.lower() not in ("token", "bearer"):
        raise HTTPError(401, "Bad credentials")
    if cred.count(".") == 2:
        return _verify_jwt(state, cred)
    info = state.tokens.get(cred)
    if info is None:
        raise HTTPError(401, "Bad credentials")
    if info["expires"] is not None and info["expires"] <= time.time():
        raise HTTPError(401, "Bad credentials")
    return info


def _verify_jwt(state: GitHubState, token: str) -> dict:
    try:
        app_id = str(jwt.decode(token, options={"verify_signature": False}).get("iss"))
        app = state.apps[app_id]
        claims = jwt.decode(token, app["public_key"], algorithms=["RS256"],
                            options={"require": ["exp", "iat"]})
    except (jwt.PyJWTError, KeyError):
        raise HTTPError(401, "A JSON web token could not be decoded") from None
    # GitHub refuses App JWTs that live longer than ten minutes.
    if claims["exp"] - claims["iat"] > 600:
        raise HTTPError(401, "'Expiration time' claim ('exp') is too far in the future")
    return {"kind": "jwt", "app_id": app_id, "login": None}


def basic_auth_user(state: GitHubState, header: str | None) -> str | None:
    """The login behind a git-over-HTTP Basic credential (password = a valid token), else None."""
    token = basic_token(header)
    if token is None:
        return None
    with state.lock:
        try:
            info = authenticate(state, f"token {token}")
        except HTTPError:
            return None
    return info["login"] if info and info["kind"] != "jwt" else None


# ---------------------------------------------------------------- rendering


def user_json(ctx: Context, login: str) -> dict:
    u = ctx.state.add_user(login)
    return {"login": login, "id": u["id"], "type": u["type"], "url": f"{ctx.api}/users/{login}",
            "html_url": f"{ctx.base}/{login}"}


def repo_json(ctx: Context, repo: Repo) -> dict:
    return {
        "id": repo.id, "name": repo.full_name.split("/")[1], "full_name": repo.full_name,
        "owner": user_json(ctx, repo.owner), "private": False, "default_branch": repo.default_branch,
        "url": f"{ctx.api}/repos/{repo.full_name}", "html_url": f"{ctx.base}/{repo.full_name}",
        "clone_url": f"{ctx.base}/{repo.full_name}.git",
    }


def issue_json(ctx: Context, repo: Repo, issue: dict) -> dict:
    url = f"{ctx.api}/repos/{repo.full_name}/issues/{issue['number']}"
    data = {
        "id": issue["id"], "number": issue["number"], "title": issue["title"], "body": issue["body"],
        "state": issue["state"], "user": user_json(ctx, issue["user"]),
        "labels": [repo.labels[n] | {"url": f"{ctx.api}/repos/{repo.full_name}/labels/{n}"}
                   for n in issue["labels"]],
        "url": url, "comments_url": url + "/comments", "labels_url": url + "/labels{/name}",
        "html_url": f"{ctx.base}/{repo.full_name}/{'pull' if 'pr' in issue else 'issues'}/{issue['number']}",
        "repository_url": f"{ctx.api}/repos/{repo.full_name}",
        "comments": sum(1 for c in ctx.state.comments.values()
                        if c["repo"] == repo.full_name and c["issue"] == issue["number"]),
        "created_at": issue["created_at"], "updated_at": issue["updated_at"],
        "closed_at": issue.get("closed_at"),
    }
    if "pr" in issue:
        data["pull_request"] = {"url": f"{ctx.api}/repos/{repo.full_name}/pulls/{issue['number']}",
                                "html_url": data["html_url"]}
    return data


def pull_json(ctx: Context, repo: Repo, issue: dict) -> dict:
    pr = issue["pr"]
    head_repo = ctx.state.repos[pr["head_repo"]]
    url = f"{ctx.api}/repos/{repo.full_name}/pulls/{issue['number']}"
    data = issue_json(ctx, repo, issue)
    data.pop("pull_request")
    data.update({
        "url": url, "issue_url": f"{ctx.api}/repos/{repo.full_name}/issues/{issue['number']}",
        "html_url": f"{ctx.base}/{repo.full_name}/pull/{issue['number']}",
        "commits_url": url + "/commits", "review_comments_url": url + "/comments",
        "comments_url": f"{ctx.api}/repos/{repo.full_name}/issues/{issue['number']}/comments",
        "merged": bool(pr.get("merged_at")), "merged_at": pr.get("merged_at"),
        "merge_commit_sha": pr.get("merge_commit_sha"),
        "draft": False, "maintainer_can_modify": pr["maintainer_can_modify"],
        "head": {"ref": pr["head"], "sha": head_repo.branch_sha(pr["head"]) or pr["head_sha"],
                 "label": f"{head_repo.owner}:{pr['head']}", "repo": repo_json(ctx, head_repo),
                 "user": user_json(ctx, head_repo.owner)},
        "base": {"ref": pr["base"], "sha": repo.branch_sha(pr["base"]), "label": f"{repo.owner}:{pr['base']}",
                 "repo": repo_json(ctx, repo), "user": user_json(ctx, repo.owner)},
    })
    return data


def comment_json(ctx: Context, comment: dict) -> dict:
    repo = comment["repo"]
    return {
        "id": comment["id"], "body": comment["body"], "user": user_json(ctx, comment["user"]),
        "url": f"{ctx.api}/repos/{repo}/issues/comments/{comment['id']}",
        "html_url": f"{ctx.base}/{repo}/issues/{comment['issue']}#issuecomment-{comment['id']}",
        "issue_url": f"{ctx.api}/repos/{repo}/issues/{comment['issue']}",
        "created_at": comment["created_at"], "updated_at": comment["updated_at"],
    }


def paginate(ctx: Context, path: str, items: list) -> tuple[int, list, list]:
    try:
        per_page = min(max(int(ctx.q("per_page", "30")), 1), 100)
        page = max(int(ctx.q("page", "1")), 1)
    except ValueError:
        raise HTTPError(422, "Validation Failed") from None
    last = max(1, -(-len(items) // per_page))
    chunk = items[(page - 1) * per_page: page * per_page]
    return 200, chunk, page_links(ctx.base, ctx.prefix, path, ctx.query, page, last)


# ---------------------------------------------------------------- access


def _need(ctx: Context, *kinds: str) -> dict:
    if ctx.auth is None:
        raise HTTPError(401, "Requires authentication")
    if ctx.auth["kind"] not in kinds:
        if ctx.auth["kind"] == "jwt":
            raise HTTPError(403, "A JSON web token cannot be used to access this resource; "
                                 "use an installation access token")
        raise HTTPError(403, "You must authenticate via a GitHub App.")
    return ctx.auth


def _repo(ctx: Context, owner: str, name: str) -> Repo:
    repo = ctx.state.repos.get(f"{owner}/{name}")
    if repo is None:
        raise HTTPError(404, "Not Found")
    return repo


def _write(ctx: Context, repo: Repo) -> str:
    """The acting login, if it may write to `repo` (installation of this repo, or a writer)."""
    auth = _need(ctx, "pat", "installation")
    if auth["kind"] == "installation":
        if repo.full_name not in ctx.state.installations[auth["installation"]]["repos"]:
            raise HTTPError(404, "Not Found")
        return auth["login"]
    if repo.roles.get(auth["login"]) not in ("write", "maintain", "admin"):
        raise HTTPError(403, "Resource not accessible by personal access token")
    return auth["login"]


def _issue(repo: Repo, number: str) -> dict:
    issue = repo.issues.get(int(number))
    if issue is None:
        raise HTTPError(404, "Not Found")
    return issue


def _validation(field: str, code: str = "invalid", message: str | None = None) -> HTTPError:
    err = {"resource": "PullRequest" if field in ("head", "base") else "Issue", "field": field, "code": code}
    if message:
        err = {"resource": "PullRequest", "code": "custom", "message": message}
    return HTTPError(422, "Validation Failed", errors=[err])


# ---------------------------------------------------------------- handlers


def app_installation(ctx, owner, name, payload):
    auth = _need(ctx, "jwt")
    repo = _repo(ctx, owner, name)
    inst = repo.installation_id
    if inst is None or ctx.state.installations[inst]["app_id"] != auth["app_id"]:
        raise HTTPError(404, "Not Found")
    return 200, {"id": inst, "app_id": int(auth["app_id"]), "account": user_json(ctx, repo.owner),
                 "access_tokens_url": f"{ctx.api}/app/installations/{inst}/access_tokens"}, []


def access_token(ctx, inst, payload):
    auth = _need(ctx, "jwt")
    info = ctx.state.installations.get(int(inst))
    if info is None or info["app_id"] != auth["app_id"]:
        raise HTTPError(404, "Not Found")
    # A token may be narrowed to a subset of the installation's permissions, never widened.
    asked = (payload or {}).get("permissions")
    for key, level in (asked or {}).items():
        if INSTALLATION_PERMISSIONS.get(key) not in (level, "write") or level not in ("read", "write"):
            raise HTTPError(422, "The permissions requested are not granted to this installation.")
    token = "ghs_" + secrets.token_hex(16)
    expires = time.time() + ctx.state.token_ttl
    slug = ctx.state.apps[auth["app_id"]]["slug"]
    ctx.state.tokens[token] = {"login": f"{slug}[bot]", "kind": "installation", "expires": expires,
                               "installation": int(inst), "permissions": dict(asked) if asked else None}
    return 201, {"token": token, "expires_at": _iso(expires), "repository_selection": "selected",
                 "permissions": dict(asked or INSTALLATION_PERMISSIONS)}, []


def get_app(ctx, payload):
    auth = _need(ctx, "jwt")
    slug = ctx.state.apps[auth["app_id"]]["slug"]
    return 200, {"id": int(auth["app_id"]), "slug": slug, "name": slug,
                 "html_url": f"{ctx.base}/apps/{slug}"}, []


INSTALLATION_PERMISSIONS = {"metadata": "read", "contents": "write", "pull_requests": "write",
                            "issues": "write", "checks": "write", "statuses": "write"}
# What a narrowed installation token needs for each route (GitHub's permission names).
NEEDS = {
    "list_issues": ("issues", "read"), "get_issue": ("issues", "read"), "list_comments": ("issues", "read"),
    "get_comment": ("issues", "read"), "create_issue": ("issues", "write"), "edit_issue": ("issues", "write"),
    "add_labels": ("issues", "write"), "create_comment": ("issues", "write"),
    "edit_comment": ("issues", "write"), "add_reaction": ("issues", "write"),
    "list_pulls": ("pull_requests", "read"), "get_pull": ("pull_requests", "read"),
    "create_pull": ("pull_requests", "write"), "edit_pull": ("pull_requests", "write"),
    "merge_pull": ("contents", "write"), "create_ref": ("contents", "write"),
    "get_branch": ("contents", "read"), "get_commit": ("contents", "read"),
    "create_status": ("statuses", "write"), "create_check_run": ("checks", "write"),
}


def token_allows(info: dict | None, permission: str, level: str) -> bool:
    """Whether a token may do `level` (read/write) on `permission`; only narrowed tokens are limited."""
    if not info or info.get("kind") != "installation" or info.get("permissions") is None:
        return True
    have = info["permissions"].get(permission)
    return have == "write" or have == level


def get_repo(ctx, owner, name, payload):
    _need(ctx, "pat", "installation")
    return 200, repo_json(ctx, _repo(ctx, owner, name)), []


def permission(ctx, owner, name, login, payload):
    _need(ctx, "pat", "installation")
    repo = _repo(ctx, owner, name)
    if login not in ctx.state.users:
        raise HTTPError(404, "Not Found")
    role = repo.roles.get(login, "read")  # public repository: everyone can read
    return 200, {"permission": LEGACY_PERMISSION[role], "role_name": role,
                 "user": user_json(ctx, login)}, []


def list_issues(ctx, owner, name, payload):
    _need(ctx, "pat", "installation")
    repo = _repo(ctx, owner, name)
    state = ctx.q("state", "open")
    creator = ctx.q("creator")
    labels = [x for x in (ctx.q("labels") or "").split(",") if x]
    items = [i for i in sorted(repo.issues.values(), key=lambda i: -i["number"])
             if (state == "all" or i["state"] == state) and (creator is None or i["user"] == creator)
             and all(lb in i["labels"] for lb in labels)]
    status, chunk, links = paginate(ctx, f"/repos/{owner}/{name}/issues", items)
    return status, [issue_json(ctx, repo, i) for i in chunk], links


def _new_issue(ctx, repo: Repo, login: str, title: str, body: str | None) -> dict:
    number = max(repo.issues, default=0) + 1
    now = _iso()
    issue = {"id": ctx.state.next_id(), "number": number, "title": title, "body": body, "state": "open",
             "user": login, "labels": [], "created_at": now, "updated_at": now}
    repo.issues[number] = issue
    return issue


def _add_labels(repo: Repo, issue: dict, names: list[str]) -> None:
    for n in names:
        # GitHub creates a label that does not exist yet when it is added to an issue.
        repo.labels.setdefault(n, {"name": n, "color": "ededed", "description": None})
        if n not in issue["labels"]:
            issue["labels"].append(n)


def create_issue(ctx, owner, name, payload):
    repo = _repo(ctx, owner, name)
    login = _write(ctx, repo)
    if not payload or not payload.get("title"):
        raise HTTPError(422, "Validation Failed", errors=[{"resource": "Issue", "field": "title",
                                                           "code": "missing_field"}])
    issue = _new_issue(ctx, repo, login, payload["title"], payload.get("body"))
    _add_labels(repo, issue, payload.get("labels") or [])
    return 201, issue_json(ctx, repo, issue), []


def get_issue(ctx, owner, name, number, payload):
    _need(ctx, "pat", "installation")
    repo = _repo(ctx, owner, name)
    return 200, issue_json(ctx, repo, _issue(repo, number)), []


def edit_issue(ctx, owner, name, number, payload):
    repo = _repo(ctx, owner, name)
    _write(ctx, repo)
    issue = _issue(repo, number)
    for key in ("title", "body", "state"):
        if payload and key in payload:
            issue[key] = payload[key]
    if payload and "labels" in payload:
        issue["labels"] = []
        _add_labels(repo, issue, payload["labels"])
    issue["updated_at"] = _iso()
    return 200, issue_json(ctx, repo, issue), []


def add_labels(ctx, owner, name, number, payload):
    repo = _repo(ctx, owner, name)
    _write(ctx, repo)
    issue = _issue(repo, number)
    names = payload.get("labels", []) if isinstance(payload, dict) else (payload or [])
    _add_labels(repo, issue, names)
    return 200, [repo.labels[n] for n in issue["labels"]], []


def list_comments(ctx, owner, name, number, payload):
    _need(ctx, "pat", "installation")
    repo = _repo(ctx, owner, name)
    _issue(repo, number)
    items = [c for c in ctx.state.comments.values()
             if c["repo"] == repo.full_name and c["issue"] == int(number)]
    status, chunk, links = paginate(ctx, f"/repos/{owner}/{name}/issues/{number}/comments", items)
    return status, [comment_json(ctx, c) for c in chunk], links


def create_comment(ctx, owner, name, number, payload):
    repo = _repo(ctx, owner, name)
    login = _write(ctx, repo)
    _issue(repo, number)
    if not payload or not payload.get("body"):
        raise HTTPError(422, "Validation Failed", errors=[{"resource": "IssueComment", "field": "body",
                                                           "code": "missing_field"}])
    return 201, comment_json(ctx, add_comment(ctx.state, repo, int(number), login, payload["body"])), []


def add_comment(state: GitHubState, repo: Repo, number: int, login: str, body: str) -> dict:
    """Store a comment (also used by tests to stage a user's comment)."""
    now = _iso()
    comment = {"id": state.next_id(), "repo": repo.full_name, "issue": number, "user": login, "body": body,
               "created_at": now, "updated_at": now, "reactions": []}
    state.add_user(login)
    state.comments[comment["id"]] = comment
    return comment


def _comment(ctx, owner, name, cid) -> dict:
    comment = ctx.state.comments.get(int(cid))
    if comment is None or comment["repo"] != f"{owner}/{name}":
        raise HTTPError(404, "Not Found")
    return comment


def get_comment(ctx, owner, name, cid, payload):
    _need(ctx, "pat", "installation")
    return 200, comment_json(ctx, _comment(ctx, owner, name, cid)), []


def edit_comment(ctx, owner, name, cid, payload):
    login = _write(ctx, _repo(ctx, owner, name))
    comment = _comment(ctx, owner, name, cid)
    if comment["user"] != login:
        raise HTTPError(403, "Only the author can edit this comment")
    comment["body"] = payload["body"]
    comment["updated_at"] = _iso()
    return 200, comment_json(ctx, comment), []


def add_reaction(ctx, owner, name, cid, payload):
    login = _write(ctx, _repo(ctx, owner, name))
    comment = _comment(ctx, owner, name, cid)
    content = (payload or {}).get("content")
    if content not in ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"):
        raise HTTPError(422, "Validation Failed")
    reaction = {"id": ctx.state.next_id(), "content": content, "user": user_json(ctx, login),
                "created_at": _iso()}
    comment["reactions"].append(reaction)
    return 201, reaction, []


def list_pulls(ctx, owner, name, payload):
    _need(ctx, "pat", "installation")
    repo = _repo(ctx, owner, name)
    state, head, base = ctx.q("state", "open"), ctx.q("head"), ctx.q("base")
    items = []
    for issue in sorted(ctx.state.pulls(repo.full_name), key=lambda i: -i["number"]):
        pr = issue["pr"]
        if state != "all" and issue["state"] != state:
            continue
        if head and head != f"{pr['head_repo'].split('/')[0]}:{pr['head']}":
            continue
        if base and base != pr["base"]:
            continue
        items.append(issue)
    status, chunk, links = paginate(ctx, f"/repos/{owner}/{name}/pulls", items)
    return status, [pull_json(ctx, repo, i) for i in chunk], links


def create_pull(ctx, owner, name, payload):
    repo = _repo(ctx, owner, name)
    login = _write(ctx, repo)
    payload = payload or {}
    for key in ("title", "head", "base"):
        if not payload.get(key):
            raise _validation(key, "missing_field")
    head_owner, _, head_ref = payload["head"].rpartition(":")
    head_full = f"{head_owner}/{name}" if head_owner else repo.full_name
    head_repo = ctx.state.repos.get(head_full)
    if head_repo is None or head_repo.branch_sha(head_ref) is None:
        raise _validation("head")
    if repo.branch_sha(payload["base"]) is None:
        raise _validation("base")
    for issue in ctx.state.pulls(repo.full_name):
        pr = issue["pr"]
        if issue["state"] == "open" and pr["head_repo"] == head_full and pr["head"] == head_ref \
                and pr["base"] == payload["base"]:
            msg = f"A pull request already exists for {head_repo.owner}:{head_ref}."
            raise _validation("head", message=msg)
    issue = _new_issue(ctx, repo, login, payload["title"], payload.get("body"))
    issue["pr"] = {"head": head_ref, "head_repo": head_full, "base": payload["base"],
                   "head_sha": head_repo.branch_sha(head_ref),
                   "maintainer_can_modify": bool(payload.get("maintainer_can_modify", True))}
    return 201, pull_json(ctx, repo, issue), []


def _pull(repo: Repo, number: str) -> dict:
    issue = _issue(repo, number)
    if "pr" not in issue:
        raise HTTPError(404, "Not Found")
    return issue


def get_pull(ctx, owner, name, number, payload):
    _need(ctx, "pat", "installation")
    repo = _repo(ctx, owner, name)
    return 200, pull_json(ctx, repo, _pull(repo, number)), []


def edit_pull(ctx, owner, name, number, payload):
    repo = _repo(ctx, owner, name)
    _write(ctx, repo)
    issue = _pull(repo, number)
    payload = payload or {}
    if payload.get("state") not in (None, "open", "closed"):
        raise _validation("state")
    if payload.get("state") == "open" and issue["state"] == "closed":
        if issue["pr"].get("merged_at"):
            raise _validation("state", message="Cannot reopen a merged pull request")
        issue["closed_at"] = None
    elif payload.get("state") == "closed" and issue["state"] == "open":
        issue["closed_at"] = _iso()
    for key in ("title", "body", "state"):
        if key in payload:
            issue[key] = payload[key]
    issue["updated_at"] = _iso()
    return 200, pull_json(ctx, repo, issue), []


def merge_pull(ctx, owner, name, number, payload):
    """PUT .../pulls/N/merge: a real merge commit on the base branch (405 when it conflicts)."""
    repo = _repo(ctx, owner, name)
    login = _write(ctx, repo)
    issue = _pull(repo, number)
    pr = issue["pr"]
    if issue["state"] != "open":
        raise HTTPError(405, "Pull Request is not mergeable")
    head_repo = ctx.state.repos[pr["head_repo"]]
    base_sha, head_sha = repo.branch_sha(pr["base"]), head_repo.branch_sha(pr["head"])
    if (payload or {}).get("sha") not in (None, head_sha):
        raise HTTPError(409, "Head branch was modified. Review and try the merge again.")
    if head_repo is not repo:
        repo.git("fetch", "-q", str(head_repo.bare), head_sha)
    tree = repo.git("merge-tree", "--write-tree", base_sha, head_sha)
    if not tree:
        raise HTTPError(405, "Pull Request is not mergeable")
    message = f"Merge pull request #{issue['number']} from {head_repo.owner}/{pr['head']}"
    env = {**os.environ, "GIT_AUTHOR_NAME": login, "GIT_AUTHOR_EMAIL": f"{login}@users.noreply",
           "GIT_COMMITTER_NAME": "GitHub", "GIT_COMMITTER_EMAIL": "noreply@github.com"}
    parents = ["-p", base_sha, "-p", head_sha]
    out = subprocess.run(["git", "commit-tree", tree.split()[0], *parents, "-m", message], cwd=repo.bare,
                         capture_output=True, text=True, check=True, env=env)
    sha = out.stdout.strip()
    repo.git("update-ref", f"refs/heads/{pr['base']}", sha, base_sha)
    now = _iso()
    pr.update(merged_at=now, merge_commit_sha=sha, head_sha=head_sha)
    issue.update(state="closed", closed_at=now, updated_at=now)
    return 200, {"sha": sha, "merged": True, "message": "Pull Request successfully merged"}, []


def get_branch(ctx, owner, name, branch, payload):
    _need(ctx, "pat", "installation")
    repo = _repo(ctx, owner, name)
    sha = repo.branch_sha(branch)
    if sha is None:
        raise HTTPError(404, "Branch not found")
    commit = {"sha": sha, "url": f"{ctx.api}/repos/{repo.full_name}/commits/{sha}"}
    return 200, {"name": branch, "commit": commit, "protected": False}, []


def get_commit(ctx, owner, name, ref, payload):
    _need(ctx, "pat", "installation")
    repo = _repo(ctx, owner, name)
    fields = repo.git("log", "-1", "--format=%H%x00%an%x00%ae%x00%aI%x00%B", ref, "--").split("\x00")
    if len(fields) < 5:
        raise HTTPError(422, f"No commit found for SHA: {ref}")
    sha, an, ae, date, message = fields[:5]
    commit = {"message": message.strip(), "author": {"name": an, "email": ae, "date": date}}
    return 200, {"sha": sha, "url": f"{ctx.api}/repos/{repo.full_name}/commits/{sha}",
                 "html_url": f"{ctx.base}/{repo.full_name}/commit/{sha}", "commit": commit}, []


def create_ref(ctx, owner, name, payload):
    repo = _repo(ctx, owner, name)
    _write(ctx, repo)
    ref, sha = (payload or {}).get("ref", ""), (payload or {}).get("sha", "")
    if not ref.startswith("refs/") or not re.fullmatch(r"[0-9a-f]{40}", sha or ""):
        raise HTTPError(422, "Validation Failed")
    if repo.git("rev-parse", "--verify", "--quiet", ref):
        raise HTTPError(422, "Reference already exists")
    if subprocess.run(["git", "update-ref", ref, sha], cwd=repo.bare, capture_output=True).returncode:
        raise HTTPError(422, "Object does not exist")
    return 201, {"ref": ref, "url": f"{ctx.api}/repos/{repo.full_name}/git/{ref}",
                 "object": {"sha": sha, "type": "commit"}}, []


def create_status(ctx, owner, name, sha, payload):
    repo = _repo(ctx, owner, name)
    _write(ctx, repo)
    if (payload or {}).get("state") not in ("error", "failure", "pending", "success"):
        raise HTTPError(422, "Validation Failed")
    status = dict(payload, sha=sha, id=ctx.state.next_id(), created_at=_iso())
    repo.statuses.append(status)
    return 201, dict(status, url=f"{ctx.api}/repos/{repo.full_name}/statuses/{sha}"), []


def create_check_run(ctx, owner, name, payload):
    auth = _need(ctx, "installation")  # plain tokens are refused: only GitHub Apps create check runs
    repo = _repo(ctx, owner, name)
    if repo.full_name not in ctx.state.installations[auth["installation"]]["repos"]:
        raise HTTPError(404, "Not Found")
    if not (payload or {}).get("name") or not payload.get("head_sha"):
        raise HTTPError(422, "Validation Failed")
    run = dict(payload, id=ctx.state.next_id())
    repo.check_runs.append(run)
    return 201, dict(run, url=f"{ctx.api}/repos/{repo.full_name}/check-runs/{run['id']}",
                     html_url=f"{ctx.base}/{repo.full_name}/runs/{run['id']}"), []


def get_user(ctx, payload):
    auth = _need(ctx, "pat")
    return 200, user_json(ctx, auth["login"]), []


_S = r"([^/]+)"
ROUTES = [
    ("GET", r"/user", get_user),
    ("GET", r"/app", get_app),
    ("GET", rf"/repos/{_S}/{_S}/installation", app_installation),
    ("POST", rf"/app/installations/{_S}/access_tokens", access_token),
    ("GET", rf"/repos/{_S}/{_S}", get_repo),
    ("GET", rf"/repos/{_S}/{_S}/collaborators/{_S}/permission", permission),
    ("GET", rf"/repos/{_S}/{_S}/issues", list_issues),
    ("POST", rf"/repos/{_S}/{_S}/issues", create_issue),
    ("GET", rf"/repos/{_S}/{_S}/issues/(\d+)", get_issue),
    ("PATCH", rf"/repos/{_S}/{_S}/issues/(\d+)", edit_issue),
    ("POST", rf"/repos/{_S}/{_S}/issues/(\d+)/labels", add_labels),
    ("GET", rf"/repos/{_S}/{_S}/issues/(\d+)/comments", list_comments),
    ("POST", rf"/repos/{_S}/{_S}/issues/(\d+)/comments", create_comment),
    ("GET", rf"/repos/{_S}/{_S}/issues/comments/(\d+)", get_comment),
    ("PATCH", rf"/repos/{_S}/{_S}/issues/comments/(\d+)", edit_comment),
    ("POST", rf"/repos/{_S}/{_S}/issues/comments/(\d+)/reactions", add_reaction),
    ("GET", rf"/repos/{_S}/{_S}/pulls", list_pulls),
    ("POST", rf"/repos/{_S}/{_S}/pulls", create_pull),
    ("GET", rf"/repos/{_S}/{_S}/pulls/(\d+)", get_pull),
    ("PATCH", rf"/repos/{_S}/{_S}/pulls/(\d+)", edit_pull),
    ("PUT", rf"/repos/{_S}/{_S}/pulls/(\d+)/merge", merge_pull),
    ("GET", rf"/repos/{_S}/{_S}/branches/(.+)", get_branch),
    ("GET", rf"/repos/{_S}/{_S}/commits/{_S}", get_commit),
    ("POST", rf"/repos/{_S}/{_S}/git/refs", create_ref),
    ("POST", rf"/repos/{_S}/{_S}/statuses/([0-9a-f]{{40}})", create_status),
    ("POST", rf"/repos/{_S}/{_S}/check-runs", create_check_run),
]
_COMPILED = [(m, re.compile(f"^{p}$"), f) for m, p, f in ROUTES]


def route(ctx: Context, method: str, path: str, payload):
    """Dispatch one API request to its handler: (status, JSON data, extra headers)."""
    path = path.rstrip("/") or "/"
    matched_path = False
    for m, rx, fn in _COMPILED:
        match = rx.match(path)
        if match:
            matched_path = True
            if m == method:
                need = NEEDS.get(fn.__name__)
                if need and not token_allows(ctx.auth, *need):
                    raise HTTPError(403, "Resource not accessible by integration")
                return fn(ctx, *match.groups(), payload)
    if matched_path:
        raise HTTPError(405, "Method Not Allowed")
    raise HTTPError(404, "Not Found")


def b64(text: str) -> str:
    """Base64 of a string (handy for tests that build Basic auth headers)."""
    return base64.b64encode(text.encode()).decode()
