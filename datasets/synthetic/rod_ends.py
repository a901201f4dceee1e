"""Ground truth about the ends of a synthetic frame's rods (capsules, cylinders): can each end be seen?

Used by ``scripts/analyse_rod_errors.py`` (errors by visible ends) and by
``models.segmenter.shape_net.detection_set`` (per-end labels of its end crops). An end is
judged from the truth alone:

- the primitive (its pose and size as ``make_sample`` recorded them) is rendered alone, on
  as large a canvas as its projection needs;
- the end's region is the part of that solo render within half a radius of the end of the
  straight part along the axis (for a capsule its hemisphere and the start of the side, for a
  cylinder the flat cap and the rim);
- it is *visible* when at least ``min_visible`` of that region lies inside the image and in
  the instance's ground-truth mask (else hidden: ``border`` when most of what is missing lies
  outside the image, ``occluded`` when it lies inside it behind another primitive or the
  floor, ``self`` when the rod itself hides it, i.e. the solo render shows fewer than
  ``min_pixels`` of it).
"""
from __future__ import annotations

import numpy as np

from vid2sim.datasets.synthetic import primitives
from vid2sim.datasets.shapes import CLASSES

CAPSULE, CYLINDER = CLASSES.index("capsule"), CLASSES.index("cylinder")
MIN_PIXELS, MIN_VISIBLE = 6, 0.5


def _solo(kind: str, dims: tuple, T: np.ndarray, K: np.ndarray, pad_limit: int = 2000
          ) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Render one primitive (camera pose ``T``) alone over its projected bounding rectangle (any
    part of it may lie outside the image) -> (points (h, w, 3) camera frame, hit (h, w) bool, u0, v0)."""
    import open3d as o3d

    m = primitives.primitive_mesh(kind, dims)
    m.rotate(T[:3, :3], center=(0, 0, 0))
    m.translate(T[:3, 3])
    V = np.asarray(m.vertices)
    uv = V[:, :2] / V[:, 2:3] * [K[0, 0], K[1, 1]] + [K[0, 2], K[1, 2]]
    u0, v0 = np.maximum(np.floor(uv.min(0)).astype(int) - 1, -pad_limit)
    u1, v1 = np.minimum(np.ceil(uv.max(0)).astype(int) + 2, pad_limit)
    scene = o3d.t.geometry.RaycastingScene()
    scene.add_triangles(o3d.t.geometry.TriangleMesh.from_legacy(m))
    u, v = np.meshgrid(np.arange(u0, u1, dtype=np.float32), np.arange(v0, v1, dtype=np.float32))
    d = np.stack([(u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1], np.ones_like(u)], -1)
    hit = scene.cast_rays(o3d.core.Tensor(np.concatenate([np.zeros_like(d), d], -1).astype(np.float32)))
    tt = hit["t_hit"].numpy()
    ok = np.isfinite(tt)
    return d * np.where(ok, tt, 0)[..., None], ok, int(u0), int(v0)


def end_visibility(s, min_pixels: int = MIN_PIXELS, min_visible: float = MIN_VISIBLE
                   ) -> dict[int, tuple[list[dict], float]]:
    """Per ground-truth instance index of sample ``s`` (capsules and cylinders only): its two ends'
    {visible, fraction, reason, pixels}, the end at +length/2 along the primitive's z axis first,
    and its radius in pixels at its centre's depth."""
    H, W = s.depth.shape
    out: dict[int, tuple[list[dict], float]] = {}
    for g, (mask, label) in enumerate(zip(s.masks, s.labels)):
        if label not in (CAPSULE, CYLINDER):
            continue
        T = s.poses[g]
        P, hit, u0, v0 = _solo(CLASSES[label], s.dims[g], T, s.K)
        r, length = s.dims[g]
        a = (P - T[:3, 3]) @ T[:3, 2]  # axial coordinate of each solo pixel's surface point
        vv, uu = np.mgrid[v0:v0 + hit.shape[0], u0:u0 + hit.shape[1]]
        in_img = (vv >= 0) & (vv < H) & (uu >= 0) & (uu < W)
        own = np.zeros_like(hit)
        own[in_img] = mask[vv[in_img], uu[in_img]]
        ends = []
        for sign in (1.0, -1.0):
            region = hit & (sign * a > length / 2 - 0.5 * r)
            npx = int(region.sum())
            seen = int((region & own).sum())
            frac = seen / max(npx, 1)
            if npx < min_pixels:
                reason = "self"
            elif frac >= min_visible:
                reason = "visible"
            else:
                out_img = int((region & ~in_img).sum())
                reason = "border" if out_img >= (npx - seen) / 2 else "occluded"
            ends.append({"visible": reason == "visible", "fraction": round(frac, 3), "reason": reason, "pixels": npx})
        out[g] = ends, float(r * s.K[0, 0] / T[2, 3])
    return out


def end_image_points(s, g: int) -> np.ndarray:
    """(2, 2) image points (u, v) of rod ``g``'s two end centres, in ``end_visibility``'s order."""
    T, (_, length) = s.poses[g], s.dims[g]
    p = np.stack([T[:3, 3] + sign * length / 2 * T[:3, 2] for sign in (1.0, -1.0)])
    return p[:, :2] / p[:, 2:3] * [s.K[0, 0], s.K[1, 1]] + [s.K[0, 2], s.K[1, 2]]
