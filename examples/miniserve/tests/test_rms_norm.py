import pytest
import torch

from miniserve.kernels.rms_norm import fused_add_rms_norm, rms_norm

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _ref(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


@pytest.mark.parametrize("tokens,hidden", [(1, 64), (5, 96), (3, 256)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_rms_norm(tokens, hidden, dtype):
    torch.manual_seed(0)
    x = torch.randn(tokens, hidden, dtype=dtype, device=DEVICE)
    w = torch.randn(hidden, dtype=dtype, device=DEVICE)
    torch.testing.assert_close(rms_norm(x, w), _ref(x, w), atol=1e-2, rtol=1e-2)


def test_fused_add_rms_norm():
    torch.manual_seed(0)
    x = torch.randn(4, 128, dtype=torch.float16, device=DEVICE)
    r = torch.randn(4, 128, dtype=torch.float16, device=DEVICE)
    w = torch.randn(128, dtype=torch.float16, device=DEVICE)
    want_r = x + r
    want = _ref(want_r, w)
    fused_add_rms_norm(x, r, w)
    torch.testing.assert_close(r, want_r)
    torch.testing.assert_close(x, want, atol=1e-2, rtol=1e-2)
