"""Small helpers shared by the kernels."""


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= n."""
    return 1 << (n - 1).bit_length() if n > 1 else 1
