"""Triton kernels of miniserve."""
