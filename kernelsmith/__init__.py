"""kernelsmith: evolve faster Triton kernels for LLM serving engines, and prove it."""

__version__ = "0.1.0"
