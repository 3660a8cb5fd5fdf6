"""miniserve: a tiny serving engine used as kernelsmith's demo target."""

# A real engine's package __init__ pulls in its whole runtime; kernelsmith's loader skips it.
from .engine import Engine  # noqa: F401
