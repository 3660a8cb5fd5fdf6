"""Subcommands of the `kernelsmith` CLI, one module each."""
