"""What GitHub Actions gives a step (its environment) and takes back (outputs, the step summary)."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass


@dataclass
class ActionsEnv:
    """What GitHub Actions tells a step through its environment."""

    api_url: str = "https://api.github.com"
    server_url: str = "https://github.com"
    repository: str | None = None
    event_name: str | None = None
    event_path: str | None = None
    step_summary: str | None = None
    output: str | None = None
    run_url: str | None = None

    @classmethod
    def from_env(cls, env=None) -> ActionsEnv:
        """Read GITHUB_* variables (defaults: github.com)."""
        env = os.environ if env is None else env
        server = (env.get("GITHUB_SERVER_URL") or "https://github.com").rstrip("/")
        repo, run_id = env.get("GITHUB_REPOSITORY"), env.get("GITHUB_RUN_ID")
        return cls(api_url=(env.get("GITHUB_API_URL") or "https://api.github.com").rstrip("/"),
                   server_url=server, repository=repo, event_name=env.get("GITHUB_EVENT_NAME"),
                   event_path=env.get("GITHUB_EVENT_PATH"), step_summary=env.get("GITHUB_STEP_SUMMARY"),
                   output=env.get("GITHUB_OUTPUT"),
                   run_url=f"{server}/{repo}/actions/runs/{run_id}" if repo and run_id else None)


def write_summary(path: str | None, text: str) -> None:
    """Append markdown to $GITHUB_STEP_SUMMARY when Actions provides one."""
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text.rstrip() + "\n\n")


def write_output(path: str | None, name: str, value: str) -> None:
    """Set a step output (GITHUB_OUTPUT, heredoc-delimited); printed when there is no such file."""
    if not path:
        print(f"{name}={value}")
        return
    delim = f"ks_{secrets.token_hex(8)}"
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{name}<<{delim}\n{value}\n{delim}\n")
