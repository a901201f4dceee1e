"""Track's check that no two tracked parts share space: rigid parts cannot interpenetrate.

A part that has slid into another (a capsule flown off from its box, tracked with no velocity,
settled on the box's face and explained the box's points) still finds depth points that support
its render, so the support test of ``track.py`` does not flag it. Each primitive is sampled on
a regular grid of points inside it (its body frame); the share of one part's samples that fall
inside another at their poses is the share of its volume inside that part. Parts that share
some volume at the start (the cabinet's drawer in its carcass, modelled as a solid box: 89 % of
the drawer inside when closed; a capsule's end in its neighbour's, 11 % in rott) are not
judged against each other.
"""
from __future__ import annotations

import numpy as np
import torch

from vid2sim.models.render import Primitive
from vid2sim.models.render.primitives import sdf_and_grad
from vid2sim.pipeline.track_fit import FLOAT

GRID = 9  # samples per side of the grid over each primitive's bounding box
NESTED_SHARE = 0.05  # share of volume inside another at the start above which a pair is nested (a drawer in its carcass)


def interior_samples(prim: Primitive, n: int = GRID) -> torch.Tensor:
    """(K, 3) points of a regular n x n x n grid over the primitive's bounding box (body frame,
    cell centres) that lie inside it: equal volume per sample."""
    if prim.kind in ("box", "mesh"):
        half = np.asarray(prim.half_size, float)
    else:
        half = np.array([prim.radius, prim.radius, prim.radius + prim.half_length])
    axes = [(np.arange(n) + 0.5) / n * 2 * h - h for h in half]
    grid = torch.as_tensor(np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3), dtype=FLOAT)
    return grid[sdf_and_grad(prim, grid)[0] < 0]


def inside_shares(prims: list[Primitive], T: torch.Tensor, samples: list[torch.Tensor]) -> np.ndarray:
    """(M, M) share of body m's volume (its ``samples``, body frame) inside body k at poses T
    (M, 4, 4); the diagonal is 0."""
    M = len(prims)
    out = np.zeros((M, M))
    world = [s @ T[m, :3, :3].T + T[m, :3, 3] for m, s in enumerate(samples)]
    for m in range(M):
        if len(world[m]) == 0:
            continue
        for k in range(M):
            if k != m:
                local = (world[m] - T[k, :3, 3]) @ T[k, :3, :3]
                out[m, k] = float((sdf_and_grad(prims[k], local)[0] < 0).double().mean())
    return out
