"""Stand-ins for what the Triton interpreter lacks (libdevice math, combine functions, float
arguments' `.to`), installed by the referee's interpreter backend so kernels run on CPU."""
