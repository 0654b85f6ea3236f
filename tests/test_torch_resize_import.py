"""from_torch of torch's resizes (F.interpolate / upsample_*) against eager, on the cases that
were silently wrong (issue #41): an output of size 1 (torch samples the middle of the input,
ONNX's pytorch_half_pixel the first pixel: 1.9 off), and antialiased bilinear/bicubic (what
torchvision's Resize uses: torch leaves out the taps past the edge and renormalizes, ONNX
replicates the edge pixel: 0.2 off)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import neurenix_core as nx

F = torch.nn.functional


class _Resize(torch.nn.Module):
    def __init__(self, **kwargs: object) -> None:
        super().__init__()
        self.kwargs = kwargs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, **self.kwargs)


CASES = [
    # (input shape, interpolate arguments)
    *[((2, 3, h, w), {"size": size, "mode": mode, "antialias": aa})
      for (h, w) in ((16, 20), (7, 9))
      for size in ((5, 7), (1, 1), (40, 11), (1, 9))
      for mode in ("bilinear", "bicubic")
      for aa in (False, True)],
    ((2, 3, 16, 20), {"scale_factor": (0.3, 0.5), "mode": "bilinear", "antialias": True}),
    ((2, 3, 16, 20), {"scale_factor": (2.5, 1.5), "mode": "bicubic"}),
    ((2, 3, 7, 9), {"size": (1, 4), "mode": "bilinear", "align_corners": True}),
    ((2, 3, 7, 9), {"size": (13, 4), "mode": "bicubic", "align_corners": True}),
    ((2, 3, 11), {"size": (1,), "mode": "linear"}),
    ((2, 3, 11), {"size": (4,), "mode": "linear"}),
    ((1, 2, 5, 6, 7), {"size": (1, 3, 9), "mode": "trilinear"}),
    ((2, 3, 7, 9), {"size": (1, 1), "mode": "nearest"}),
    ((2, 3, 7, 9), {"size": (3, 20), "mode": "nearest-exact"}),
]


@pytest.mark.parametrize(("shape", "kwargs"), CASES, ids=[f"{s}-{k}" for s, k in CASES])
def test_resize_matches_eager(shape: tuple[int, ...], kwargs: dict[str, object]) -> None:
    model = _Resize(**kwargs)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    graph = nx.nn.from_torch(model, (x,), static=True)
    got = nx.compile(graph, device="cpu", runtime="numpy")(x.numpy()).numpy()
    np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-4, atol=1e-4)
