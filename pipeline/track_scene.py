"""Track's view of one recording: camera rays, the static background (depth and colour), each
part's colour, regions of interest, depth edges, and the primitives' long axes (``track.py``
runs the frames)."""
from __future__ import annotations

import logging

import cv2
import numpy as np
import torch

from vid2sim.datasets.recording import Recording
from vid2sim.models.render import Primitive
from vid2sim.models.render.align import Observation, render_hits
from vid2sim.pipeline.track_config import TrackConfig
from vid2sim.pipeline.track_fit import FLOAT

log = logging.getLogger(__name__)

REVEAL_NEAR_PX = 1  # px: pixels this close to a part as fitted at the start keep an unknown background until revealed
REVEAL_MIN_FRAMES = 3  # frames that must show a hidden pixel's background before it is taken as known
# two parts' mean colours closer than this many ``noise.color_tol`` cannot be told apart by a pixel's label: a pixel
# within color_tol of its own part's colour may be nearer the other's (``TrackScene.labels``)
COLOUR_APART = 2
SURROUND_PX = 12  # px: the background around a part (``surroundings``) is this far beyond its mask at most


class TrackScene:
    """Camera rays, background model and region-of-interest logic of one recording."""

    def __init__(self, rec: Recording, prims: list[Primitive], cfg: TrackConfig):
        cam = rec.camera
        self.cam, self.prims, self.cfg = cam, prims, cfg
        T_wc = torch.as_tensor(cam.world_from_camera, dtype=FLOAT)
        self.origin = T_wc[:3, 3]
        self.dirs = torch.as_tensor(cam.pixel_rays().reshape(-1, 3), dtype=FLOAT) @ T_wc[:3, :3].T
        self.background = np.zeros((cam.height, cam.width), np.float32)
        self.hidden: np.ndarray | None = None   # (H, W) bool pixels of a known actuator in the current frame
        self.hidden_of = lambda i: None
        half = [np.array(p.half_size) if p.kind in ("box", "mesh") else np.array([p.radius, p.radius, p.radius + p.half_length])
                for p in prims]
        signs = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], float)
        self.corners = [signs * h for h in half]
        self.long_axes = [long_axis(p) for p in prims]

    def set_background(self, depth: np.ndarray | None, masks: np.ndarray, rgb: np.ndarray | None = None,
                       cover: np.ndarray | None = None) -> None:
        """Static background (depth; colour) from the segmentation frame outside (dilated) part masks
        and outside ``cover`` ((H, W) bool, e.g. the parts rendered at their start poses: a mask that
        misses part of its body must not make that body's pixels background), and each body's
        chromaticity (the mean inside its mask) for colour silhouettes, unknown (NaN) for bodies whose
        colours are alike (``alike_colours``) or whose own pixels mostly miss their label."""
        fg = masks.any(0) if cover is None else masks.any(0) | cover
        fg = cv2.dilate(fg.astype(np.uint8), np.ones((9, 9), np.uint8)) > 0
        if depth is not None:
            self.background = np.where(fg, 0.0, depth).astype(np.float32)
        self.body_chroma = None
        if rgb is not None and self.cfg.noise.w_color > 0:
            ch = chroma(rgb)
            self.body_chroma = np.stack([ch[(m > 0)].mean(0) if (m > 0).any() else np.full(3, np.nan) for m in masks])
            self.bg_chroma = np.where(fg[..., None], np.nan, ch).reshape(-1, 3)
            tol = self.cfg.noise.color_tol
            alike = alike_colours(self.body_chroma, COLOUR_APART * tol) | \
                alike_colours(self.body_chroma, tol, surroundings(ch, masks, fg))
            if alike.any():
                log.info("track: colour silhouettes off for parts %s: each one's colour lies within %.3f of another "
                         "part's or within %.3f of the background's around it", np.flatnonzero(alike).tolist(),
                         COLOUR_APART * tol, tol)
                self.body_chroma[alike] = np.nan
            # a part whose own pixels do not take its label (shaded faces of another chromaticity than its
            # mean, colour noise) would be pushed off them by its colour silhouettes: its colour is unknown
            recall = self.color_recall(rgb, masks)
            off = ~(recall >= self.cfg.noise.color_min_recall) & ~alike
            if off.any():
                log.info("track: colour silhouettes off for %s: in the segmentation frame %s of each part's pixels "
                         "take its colour label (noise.color_min_recall %.2f)", "every part" if off.all() else
                         f"parts {np.flatnonzero(off).tolist()}", np.round(recall, 2).tolist(),
                         self.cfg.noise.color_min_recall)
                self.body_chroma[off] = np.nan
            if np.isnan(self.body_chroma).all():
                self.body_chroma = None

    def reveal_background(self, rec: Recording, depth: np.ndarray, cover: np.ndarray) -> int:
        """Fill the background that ``set_background`` left unknown (0, which counts as foreground)
        around the parts: a floor the parts leave later, seen there while they are gone, or a mask's
        margin of floor, would otherwise pull them back onto their starting places.

        ``depth`` (H, W) m: the segmentation frame's reading; ``cover`` (H, W) bool: the parts as
        fitted there. Unknown pixels within ``REVEAL_NEAR_PX`` of ``cover`` stay unknown unless
        ``REVEAL_MIN_FRAMES`` frames or more read them farther away than the segmentation frame did
        (by ``background_tol_m`` or 4.3 depth noise sigmas): then the median of those farther
        readings. The other unknown pixels (the dilation margin and mask pixels no fitted part covers)
        take the segmentation frame's reading. Pixels without a reading there, and known actuators'
        (no reading in any frame), stay unknown. Returns the number of pixels filled."""
        unknown = self.background <= 0
        near = cv2.dilate(cover.astype(np.uint8), np.ones((2 * REVEAL_NEAR_PX + 1,) * 2, np.uint8)) > 0
        ring = unknown & ~near & (depth > 0)
        self.background[ring] = depth[ring]
        inner = unknown & near & (depth > 0)
        ref = depth[inner].astype(np.float64)
        tol = np.maximum(self.cfg.gates.background_tol_m, 4.3 * self.sigma(ref))
        far = np.zeros((rec.num_frames, int(inner.sum())), np.float32)   # readings farther than ref + tol, else NaN
        for i in range(rec.num_frames):
            d = rec.depth(i)[inner].astype(np.float64)
            far[i] = np.where(d > ref + tol, d, np.nan)
        seen = np.isfinite(far).sum(0) >= REVEAL_MIN_FRAMES
        idx = np.flatnonzero(inner)[seen]
        if idx.size:
            self.background.reshape(-1)[idx] = np.nanmedian(far[:, seen], axis=0)
        log.info("track: background filled beside the parts from the segmentation frame at %d pixels, behind them "
                 "from later frames at %d", int(ring.sum()), idx.size)
        return int(ring.sum() + idx.size)

    def color_recall(self, rgb: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """(M,) share of each mask's pixels (every 2nd in u and v) whose colour label (``labels``) is
        its own part; NaN for an empty mask (or a part without a colour)."""
        out = np.full(len(masks), np.nan)
        sub = np.zeros(masks.shape[1:], bool)
        sub[::2, ::2] = True
        for k, m in enumerate(masks):
            flat = np.flatnonzero((m > 0) & sub)
            if flat.size:
                out[k] = float((self.labels(rgb, flat) == k).mean())
        return out

    def labels(self, rgb: np.ndarray, flat: np.ndarray) -> np.ndarray:
        """(N,) colour label of the pixels ``flat``: body index, -1 no body, -2 undecided."""
        ch = chroma(rgb.reshape(-1, 3)[flat])
        d_body = np.linalg.norm(ch[:, None, :] - self.body_chroma[None], axis=-1)  # (N, M)
        d_bg = np.linalg.norm(ch - self.bg_chroma[flat], axis=-1)
        best = np.nanargmin(np.where(np.isnan(d_body), np.inf, d_body), 1)
        d_best = d_body[np.arange(len(flat)), best]
        tau = self.cfg.noise.color_tol
        # with some part's colour unknown (``color_min_recall``) a pixel far from every known colour may be that
        # part's: undecided, unless it has the background's colour
        far = -2 if np.isnan(self.body_chroma).any() else -1
        label = np.where(d_best < tau, best, np.where(d_best > 2 * tau, far, -2))
        label = np.where(np.isfinite(d_bg) & (d_bg < d_best) & (d_bg < tau), -1, label)
        return label

    def silhouettes(self, T: torch.Tensor) -> np.ndarray:
        """(H, W) bool: the pixels some body covers at poses T (M, 4, 4), within their ``roi``."""
        roi = self.roi(T)
        flat = np.flatnonzero(roi)
        out = np.zeros(roi.size, bool)
        if flat.size:
            hits = render_hits(self.prims, T, self.origin, self.dirs[flat])
            out[flat] = torch.isfinite(hits).any(0).numpy()
        return out.reshape(roi.shape)

    def roi(self, T: torch.Tensor, bodies: list[int] | None = None) -> np.ndarray:
        """(H, W) bool: image boxes of the bodies' posed bounding boxes, plus padding."""
        cam = self.cam
        out = np.zeros((cam.height, cam.width), bool)
        for m in range(len(self.prims)) if bodies is None else bodies:
            corners = self.corners[m] @ T[m, :3, :3].numpy().T + T[m, :3, 3].numpy()
            uv, z = cam.project(corners)
            if np.any(z <= 1e-3):  # partly behind the camera: no meaningful box
                continue
            pad = self.cfg.gates.roi_pad_px
            x0, y0 = np.floor(uv.min(0) - pad).astype(int)
            x1, y1 = np.ceil(uv.max(0) + pad).astype(int) + 1
            x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, cam.width), min(y1, cam.height)
            if x0 < x1 and y0 < y1:
                out[y0:y1, x0:x1] = True
        return out

    def observe(self, depth: np.ndarray, roi: np.ndarray, foreground: np.ndarray | None = None,
                stride: int = 1) -> tuple[Observation, np.ndarray]:
        """Observation of the rays in ``roi``; returns it and the flat pixel indices used."""
        if stride > 1:
            roi = roi.copy()
            sub = np.zeros_like(roi)
            sub[::stride, ::stride] = True
            roi &= sub
        flat = np.flatnonzero(roi)
        d = depth.reshape(-1)[flat]
        if foreground is None:
            bg = self.background.reshape(-1)[flat]
            foreground = (bg <= 0) | (d < bg - np.maximum(self.cfg.gates.background_tol_m, 4.3 * self.sigma(bg)))
        else:
            foreground = foreground.reshape(-1)[flat]
        obs = Observation(self.origin, self.dirs[flat], torch.as_tensor(d, dtype=FLOAT),
                          torch.as_tensor(foreground & (d > 0)), sigma=torch.as_tensor(self.sigma(d), dtype=FLOAT),
                          pixel_angle=1.0 / self.cam.fx)
        return obs, flat

    def edges(self, depth: np.ndarray, flat: np.ndarray) -> np.ndarray:
        """(N,) bool: pixels ``flat`` within ``edge_band_px`` of a depth discontinuity (a 3x3
        depth range above max(freespace_tol_m, 4.3 sigma)) or of a missing reading; computed on
        the image box that holds ``flat`` only."""
        W = self.cam.width
        v, u = np.divmod(flat, W)
        b = self.cfg.gates.edge_band_px + 1
        y0, y1 = max(int(v.min()) - b, 0), min(int(v.max()) + b + 1, self.cam.height)
        x0, x1 = max(int(u.min()) - b, 0), min(int(u.max()) + b + 1, W)
        d = np.ascontiguousarray(depth[y0:y1, x0:x1], dtype=np.float32)
        k3 = np.ones((3, 3), np.uint8)
        jump = cv2.morphologyEx(d, cv2.MORPH_GRADIENT, k3)
        tol = np.maximum(self.cfg.noise.freespace_tol_m, 4.3 * self.sigma(d)).astype(np.float32)
        edge = ((jump > tol) | (d <= 0)).astype(np.uint8)
        band = 2 * self.cfg.gates.edge_band_px + 1
        edge = cv2.dilate(edge, np.ones((band, band), np.uint8)) > 0
        return edge[v - y0, u - x0]

    def sigma(self, depth: np.ndarray) -> np.ndarray:
        """Depth noise std (m) at depth (m)."""
        return np.maximum(self.cfg.noise.depth_noise_k * depth.astype(np.float64) ** 2, self.cfg.noise.depth_noise_floor_m)


def long_axis(prim: Primitive, elongation: float = 2.0) -> torch.Tensor | None:
    """(3,) unit long axis in the body frame of a primitive whose longest extent is at least
    ``elongation`` times the next; None for the others (spheres, cubes, short cylinders)."""
    if prim.kind in ("box", "mesh"):
        h = np.asarray(prim.half_size, float)
        order = np.argsort(h)[::-1]
        if h[order[0]] < elongation * h[order[1]]:
            return None
        return torch.as_tensor(np.eye(3)[order[0]], dtype=FLOAT)
    if prim.kind in ("capsule", "cylinder"):
        half = prim.half_length + (prim.radius if prim.kind == "capsule" else 0.0)
        return torch.tensor([0.0, 0.0, 1.0], dtype=FLOAT) if half >= elongation * prim.radius else None
    return None


def alike_colours(body_chroma: np.ndarray, apart: float, around: np.ndarray | None = None) -> np.ndarray:
    """(M,) bool: parts whose mean chromaticity (rows of ``body_chroma`` (M, 3); NaN rows: no colour)
    lies within ``apart`` of another part's, or, given ``around`` (M, 3), of the background's around
    it (``surroundings``). A pixel of one such part may take the other's label, whose colour
    silhouette then drags the other part onto it; a background pixel whose own colour is not known
    (where the parts lay at the start) takes the nearest part colour within ``noise.color_tol`` as
    its label, and that holds the part back on its starting place."""
    C = np.asarray(body_chroma, float)
    if around is not None:
        d = np.linalg.norm(C - np.asarray(around, float), axis=-1)
        return np.where(np.isnan(d), np.inf, d) < apart
    D = np.linalg.norm(C[:, None] - C[None], axis=-1)
    np.fill_diagonal(D, np.inf)
    return (np.where(np.isnan(D), np.inf, D) < apart).any(1)


def surroundings(ch: np.ndarray, masks: np.ndarray, fg: np.ndarray, ring_px: int = SURROUND_PX) -> np.ndarray:
    """(M, 3) median chromaticity of the background within ``ring_px`` pixels of each part's mask
    (``ch`` (H, W, 3) chromaticity image, ``masks`` (M, H, W), ``fg`` (H, W) bool: the parts with their
    margin, left out); NaN where no such pixel."""
    k = np.ones((2 * ring_px + 1,) * 2, np.uint8)
    out = np.full((len(masks), 3), np.nan)
    for m, mask in enumerate(masks):
        ring = (cv2.dilate((mask > 0).astype(np.uint8), k) > 0) & ~fg
        if ring.any():
            out[m] = np.median(ch[ring], axis=0)
    return out


def chroma(rgb: np.ndarray) -> np.ndarray:
    """(..., 3) uint8 -> chromaticity r, g, b / (r + g + b): shading changes brightness, not this."""
    f = rgb.astype(np.float32) + 1.0
    return f / f.sum(-1, keepdims=True)
