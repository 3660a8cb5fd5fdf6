"""`python -m kernelsmith.sandbox`: can this machine build the sandbox? Exit 0 yes, 1 no (why)."""

import sys

from kernelsmith.sandbox import probe


def main() -> int:
    """Print "sandbox: ok" or the missing kernel feature."""
    problem = probe()
    print("sandbox: ok (user, mount, PID and network namespaces)" if problem is None else problem)
    return 0 if problem is None else 1


if __name__ == "__main__":
    sys.exit(main())
