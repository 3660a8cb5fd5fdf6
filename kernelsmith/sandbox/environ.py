"""Secrets in environments: the one scrubber for everything that starts untrusted code, and the
ways a process holding a secret keeps it from others (non-dumpable, its initial environ wiped)."""

from __future__ import annotations

import os
import re
import sys

_DROP_PREFIXES = ("GITHUB_", "KERNELSMITH_", "OPENAI_", "ACTIONS_", "ANTHROPIC_", "AWS_", "AZURE_",
                  "GOOGLE_", "HF_", "HUGGING", "GH_", "SSH_", "GPG_", "NPM_", "PYPI_", "TWINE_")
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|API_?KEY|PRIVATE|ACCESS_?KEY"
                          r"|AUTH|COOKIE|SESSION|_KEY$|^KEY|APP_ID", re.I)
_SECRET_VALUE = re.compile(r"gh[pousr]_[A-Za-z0-9]{20,}|github_pat_|sk-[A-Za-z0-9_-]{16,}"
                           r"|-----BEGIN [A-Z ]*PRIVATE KEY|xox[abprs]-|AKIA[0-9A-Z]{16}"
                           r"|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}")
# Where credentials usually sit in a home folder; hidden inside the sandbox (defence in depth).
CREDENTIAL_PATHS = (".ssh", ".netrc", ".git-credentials", ".config/gh", ".config/hub", ".aws", ".docker",
                    ".pypirc", ".kube", ".gnupg", ".config/gcloud", ".azure", ".huggingface",
                    ".cache/huggingface/token")


def is_secret(name: str, value: str | None = "") -> bool:
    """Whether an environment variable is (or may be) a credential."""
    return bool(name.upper().startswith(_DROP_PREFIXES) or _SECRET_NAME.search(name)
                or _SECRET_VALUE.search(value or ""))


def is_credential(name: str, value: str | None = "") -> bool:
    """Whether a variable holds a credential by its name or value (settings such as
    KERNELSMITH_CACHE are not; `is_secret` also drops those from untrusted code's environment)."""
    return bool(_SECRET_NAME.search(name) or _SECRET_VALUE.search(value or ""))


def scrubbed_env(base: dict[str, str] | None = None, keep: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment without GITHUB_*/KERNELSMITH_*/OPENAI_* or anything that looks like a secret.

    `keep`: names passed through anyway (the bot hands the LLM settings on to `optimize`, whose own
    broker takes the key before any target code runs).
    """
    env = dict(os.environ if base is None else base)
    return {k: v for k, v in env.items() if k in keep or not is_secret(k, v)}


def secret_files(env: dict[str, str] | None = None) -> list[str]:
    """Files that hold credentials: known places in $HOME and files named by secret variables."""
    env = dict(os.environ if env is None else env)
    home = env.get("HOME") or os.path.expanduser("~")
    out = [os.path.join(home, p) for p in CREDENTIAL_PATHS]
    for k, v in env.items():  # only files: a secret-sounding variable naming a folder is left alone
        if (_SECRET_NAME.search(k) or k == "KERNELSMITH_LLM_CONFIG") and v.startswith("/") and len(v) < 4096 \
                and os.path.exists(v) and not os.path.isdir(v):
            out.append(v)  # SSH_AUTH_SOCK too: the agent's socket would sign for anyone who connects
    return sorted({os.path.realpath(p) for p in out if os.path.exists(p)})


def hide_environ() -> bool:
    """Make this process non-dumpable (Linux): processes of the same user outside a sandbox cannot
    read its /proc/<pid>/environ or memory. Returns whether it took effect."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        pr_set_dumpable = 4
        return ctypes.CDLL(None, use_errno=True).prctl(pr_set_dumpable, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def drop_secrets_from_environ(keep: tuple[str, ...] = ("SSH_AUTH_SOCK",)) -> list[str]:
    """Remove every secret variable from this process's environment, and overwrite its value in
    the initial environment block that /proc/self/environ shows (os.environ edits leave it).

    Returns the names removed. Call it once the secrets were handed to whoever needs them.
    SSH_AUTH_SOCK stays (git fetches over ssh need it); the sandbox hides the socket itself.
    """
    names = [k for k, v in os.environ.items() if k not in keep and is_credential(k, v)]
    for k in names:
        os.environ.pop(k, None)  # also unsetenv(): libc no longer points at the old strings
    if names and sys.platform.startswith("linux"):
        _wipe_initial_block({n.encode() for n in names})
    return names


def _wipe_initial_block(names: set[bytes]) -> None:
    try:
        import ctypes

        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (stat fields 50 and 51)
        if not 0 < start < end or end - start > 1 << 20:
            return
        block = ctypes.string_at(start, end - start)
        pos = 0
        for entry in block.split(b"\0"):
            name, sep, value = entry.partition(b"=")
            if sep and name in names and value:
                ctypes.memset(start + pos + len(name) + 1, ord("x"), len(value))
            pos += len(entry) + 1
    except (OSError, ValueError, IndexError):
        pass
