"""Harnesses: a harness module's model, its static check and facts, and the sandboxed children that
probe, check and write one."""
