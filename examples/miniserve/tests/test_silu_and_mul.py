import pytest
import torch

from miniserve.kernels.silu_and_mul import silu_and_mul

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("tokens,d", [(1, 64), (7, 100), (3, 256)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_silu_and_mul(tokens, d, dtype):
    torch.manual_seed(0)
    x = torch.randn(tokens, 2 * d, dtype=dtype, device=DEVICE)
    out = torch.empty(tokens, d, dtype=dtype, device=DEVICE)
    silu_and_mul(out, x)
    xf = x.float()
    want = (torch.nn.functional.silu(xf[:, :d]) * xf[:, d:]).to(dtype)
    torch.testing.assert_close(out, want, atol=1e-2, rtol=1e-2)
