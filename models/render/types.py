"""What every renderer backend returns (kept apart so backends import no each other)."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Rendered:
    """One render of M posed bodies at N pixels (rays).

    pixels: (N, 2) (u, v); depth: (N,) camera z (m), 0 where no body is hit;
    body: (N,) index of the visible body, -1 for background; hit: (M, N) each body's own
    first-hit depth (inf on a miss), before occlusion; silhouette: (M, N) soft visible
    coverage in [0, 1] or None; color: (N, 3) or None.
    """

    pixels: torch.Tensor
    depth: torch.Tensor
    body: torch.Tensor
    hit: torch.Tensor
    silhouette: torch.Tensor | None = None
    color: torch.Tensor | None = None

    def image(self, x: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Reshape a full-image per-pixel quantity (N, ...) to (H, W, ...)."""
        return x.reshape(height, width, *x.shape[1:])
