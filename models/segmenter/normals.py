"""Depth -> normal map, the segmenter's input, shared by training and the segment stage.

Heiden et al. 2022, §4.3.3.1: surface normals from depth by finite differences in pixel
space. Points are back-projected with the intrinsics, central differences along u and v
give two tangents, their cross product the normal (camera frame, pointing at the camera).
Pixels next to a depth discontinuity get no normal (0), which draws a thin dark line
along occlusion boundaries: the cue that separates overlapping parts.

For RGB-only recordings the paper binarises and blurs the image into a pseudo-depth
(``pseudo_depth_from_rgb``); this module does not try to estimate metric depth from RGB.
"""
from __future__ import annotations

import cv2
import numpy as np

# A neighbour whose depth differs by more than this fraction of the depth is across an edge.
JUMP_FRACTION = 0.03


def smooth_depth(depth: np.ndarray) -> np.ndarray:
    """Edge-preserving denoising of (H, W) metres; zeros (no reading) stay zero."""
    d = depth.astype(np.float32)
    valid = d > 0
    med = cv2.medianBlur(d, 5)
    med = np.where(valid & (med > 0), med, d)
    out = cv2.bilateralFilter(med, 7, 0.03, 2.0)
    return np.where(valid, out, 0).astype(np.float32)


def discontinuities(depth: np.ndarray, frac: float = JUMP_FRACTION) -> np.ndarray:
    """(H, W) bool: pixel has a 4-neighbour across a depth jump (or next to a hole)."""
    z = depth
    valid = z > 0
    edge = np.zeros(z.shape, bool)
    for axis in (0, 1):
        a = np.take(z, range(0, z.shape[axis] - 1), axis)
        b = np.take(z, range(1, z.shape[axis]), axis)
        va = np.take(valid, range(0, z.shape[axis] - 1), axis)
        vb = np.take(valid, range(1, z.shape[axis]), axis)
        jump = (np.abs(a - b) > frac * np.maximum(a, b)) | (va != vb)
        if axis == 0:
            edge[:-1] |= jump
            edge[1:] |= jump
        else:
            edge[:, :-1] |= jump
            edge[:, 1:] |= jump
    return edge & valid


def depth_to_normals(depth: np.ndarray, K: np.ndarray, smooth: bool = True) -> np.ndarray:
    """depth: (H, W) metres (0 = none), K: (3, 3) -> normals (H, W, 3) float32, unit, camera frame.

    Zero vector where there is no depth or at a discontinuity.
    """
    d = smooth_depth(depth) if smooth else depth.astype(np.float32)
    h, w = d.shape
    u, v = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    P = np.stack([(u - K[0, 2]) / K[0, 0] * d, (v - K[1, 2]) / K[1, 1] * d, d], -1)
    Pp = np.pad(P, ((1, 1), (1, 1), (0, 0)), mode="edge")
    du = Pp[1:-1, 2:] - Pp[1:-1, :-2]
    dv = Pp[2:, 1:-1] - Pp[:-2, 1:-1]
    n = np.cross(du, dv)
    n *= -np.sign(n[..., 2:3] + 1e-12)  # face the camera (n_z < 0)
    norm = np.linalg.norm(n, axis=-1, keepdims=True)
    n = n / np.maximum(norm, 1e-12)
    bad = (d <= 0) | discontinuities(d) | (norm[..., 0] == 0)
    n[bad] = 0
    return n.astype(np.float32)


def normal_image(normals: np.ndarray) -> np.ndarray:
    """(H, W, 3) unit normals -> (H, W, 3) uint8 image ((n + 1) / 2 * 255; no normal = black)."""
    img = (normals + 1.0) * 127.5
    img[~np.any(normals != 0, axis=-1)] = 0
    return np.clip(np.round(img), 0, 255).astype(np.uint8)


def depth_to_normal_image(depth: np.ndarray, K: np.ndarray, smooth: bool = True) -> np.ndarray:
    return normal_image(depth_to_normals(depth, K, smooth))


def pseudo_depth_from_rgb(rgb: np.ndarray, base_m: float = 1.0, relief_m: float = 0.08,
                          blur_px: float | None = None) -> np.ndarray:
    """RGB-only recordings: binarise (Otsu) and blur into a fake depth (Heiden et al. 2022, §4.3.3.1).

    The minority side of the threshold is taken as foreground (parts in front of a plain
    backdrop); foreground becomes a smooth bump up to ``relief_m`` in front of a plane at
    ``base_m`` (blurred, so without depth discontinuities), and its normal map shows rounded
    blobs whose outlines are the part silhouettes.
    """
    gray = cv2.cvtColor(np.asarray(rgb, np.uint8), cv2.COLOR_RGB2GRAY)
    _, fg = cv2.threshold(gray, 0, 1, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
    if fg.mean() > 0.5:
        fg = 1 - fg
    fg = cv2.morphologyEx(fg.astype(np.uint8), cv2.MORPH_OPEN, np.ones((3, 3), np.uint8))
    sigma = blur_px if blur_px is not None else max(2.0, 0.015 * max(rgb.shape[:2]))
    bump = cv2.GaussianBlur(fg.astype(np.float32), (0, 0), sigma)
    return (base_m - relief_m * bump).astype(np.float32)


def downsample_depth(depth: np.ndarray, s: int, frac: float = JUMP_FRACTION) -> np.ndarray:
    """(H, W) metres -> (H // s, W // s) float32: each s x s block becomes one reading (0 = none).

    A block with readings on fewer than half its pixels has none (a hole stays a hole).
    Otherwise its value is the mean of its readings within ``frac`` of their lower median:
    on one surface, the noise of up to s^2 pixels averaged (sigma / s for independent
    pixel noise); across a depth edge, the surface most of its readings (or, half and half,
    the nearer) lie on, so no depth between the two surfaces is made up.
    """
    if s <= 1:
        return depth.astype(np.float32, copy=True)
    h, w = depth.shape[0] // s, depth.shape[1] // s
    b = depth[: h * s, : w * s].astype(np.float32).reshape(h, s, w, s).transpose(0, 2, 1, 3).reshape(h, w, s * s)
    n = (b > 0).sum(-1)
    srt = np.sort(np.where(b > 0, b, np.inf), axis=-1)
    med = np.take_along_axis(srt, np.maximum(n - 1, 0)[..., None] // 2, -1)
    near = np.abs(b - med) <= frac * med
    out = (b * near).sum(-1) / np.maximum(near.sum(-1), 1)
    return np.where(2 * n >= s * s, out, 0.0).astype(np.float32)


def downsample_intrinsics(K: np.ndarray, s: int) -> np.ndarray:
    """(3, 3) intrinsics of the ``downsample_depth`` image: its pixel (u, v) is the s x s block at (s u, s v)."""
    Kw = np.array(K, np.float64)
    Kw[:2, :2] /= s
    Kw[:2, 2] = (Kw[:2, 2] - (s - 1) / 2) / s
    return Kw


def upsample_mask(mask: np.ndarray, s: int, shape: tuple[int, int]) -> np.ndarray:
    """A mask (or image) of the ``downsample_depth`` image -> (H, W, ...) of the frame: each
    pixel its s x s block; the rows and columns beyond the last whole block are 0."""
    if s == 1:
        return mask
    out = np.zeros(tuple(shape) + mask.shape[2:], mask.dtype)
    big = np.repeat(np.repeat(mask, s, 0), s, 1)
    out[: big.shape[0], : big.shape[1]] = big
    return out
