"""How the llm mutator reaches its model: settings from the environment or a yaml file, and the
start of the LLM broker (broker.py) that then holds the key.

Settings come from KERNELSMITH_LLM_BASE_URL / _MODEL / _API_KEY (falling back to OPENAI_BASE_URL /
OPENAI_API_KEY), or a yaml file named by KERNELSMITH_LLM_CONFIG (keys: base_url, model, api_key,
timeout_s, max_retries, temperature, max_tokens, wait_note_s); the environment wins over the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from kernelsmith.search.mutators import broker


@dataclass
class LLMSettings:
    """How to reach the model; `problem` says why it cannot be used (None: usable)."""

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 180.0
    max_retries: int = 3
    fix_attempts: int = 1
    temperature: float = 0.8
    max_tokens: int = 8192
    backoff_s: float = 2.0
    wait_note_s: float = 15.0  # while requests wait for the endpoint, a line says so this often
    problem: str | None = None
    broker: object = field(default=None, repr=False)  # the process holding the key (broker.py)


def llm_settings(env: dict | None = None) -> LLMSettings:
    """Settings from the environment (and KERNELSMITH_LLM_CONFIG), with `problem` set if unusable.
    Once `optimize` started its broker (which took the key), the broker's key-less settings."""
    if env is None and broker.default() is not None:
        s = LLMSettings(**{k: v for k, v in _from_env(dict(os.environ)).__dict__.items() if k != "problem"})
        s.broker, s.api_key = broker.default(), None
        return s
    return _from_env(dict(os.environ if env is None else env))


def _from_env(env: dict) -> LLMSettings:
    s = LLMSettings()
    path = env.get("KERNELSMITH_LLM_CONFIG")
    if path:
        from pathlib import Path

        from kernelsmith.errors import ConfigError
        from kernelsmith.onboard.config import read_yaml

        data = read_yaml(Path(path))
        for key, value in data.items():
            if not hasattr(s, key) or key == "problem":
                raise ConfigError(path, "unknown field", key)
            setattr(s, key, value)
    s.base_url = env.get("KERNELSMITH_LLM_BASE_URL") or s.base_url or env.get("OPENAI_BASE_URL")
    s.model = env.get("KERNELSMITH_LLM_MODEL") or s.model
    s.api_key = env.get("KERNELSMITH_LLM_API_KEY") or s.api_key or env.get("OPENAI_API_KEY")
    if not s.model:
        s.problem = "no model configured (set KERNELSMITH_LLM_MODEL and KERNELSMITH_LLM_BASE_URL)"
    elif not s.base_url and not s.api_key:
        s.problem = "no endpoint configured (set KERNELSMITH_LLM_BASE_URL, including /v1, or OPENAI_API_KEY)"
    else:
        import importlib.util

        if importlib.util.find_spec("openai") is None:
            s.problem = "the openai package is not installed"
    return s


def start_from_environment():
    """Start the broker from KERNELSMITH_LLM_* / OPENAI_* settings (when usable), then drop every
    secret from this process's environment. Returns the key-less settings, or None."""
    from kernelsmith.sandbox import drop_secrets_from_environ

    settings = llm_settings()
    if settings.problem is None:
        settings.broker = broker.broker_for(settings.base_url, settings.api_key)
        settings.api_key = None
        broker.set_default(settings.broker)
    drop_secrets_from_environ()
    return settings if settings.problem is None else None
