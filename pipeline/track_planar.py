"""Planar tracking of an RGB-only recording: each body's silhouette followed in the image plane.

Heiden et al. 2022 track RGB-only recordings in a plane, 3 degrees of freedom per body.
Here each segmented body's silhouette (its mask in the segmentation frame) is carried
through the video by a 2-D similarity ``A_t`` (3 x 3, segmentation-frame pixels -> frame
``t`` pixels): image-plane translation and rotation about the optical axis, and with
``rgb.scale`` a uniform scale. A textured body (at least ``rgb.min_features`` corners in its
silhouette) is followed by its corners: pyramidal Lucas-Kanade frame to frame, kept where the
backward track returns within ``rgb.fb_px``, ``A_t`` fitted from where they were in an anchor
frame (the segmentation frame, then wherever they were re-detected). A flat-coloured body, or
a frame where too few corners follow, is registered by ECC (``cv2.findTransformECC``,
Evangelidis & Psarakis 2008: invariant to brightness and contrast) of its grown silhouette in
the previous frame against frame ``t``, coarse to fine over ``rgb.pyramid`` levels, then against
the segmentation frame where that still correlates at least ``rgb.key_correlation`` (no drift).
Bodies in front of a body (covering part of its outline in the segmentation frame) are left
out of its registration. A body whose ECC registration correlates below
``rgb.lost_correlation`` is lost in that frame and held at its last pose.

Poses (``poses.npz``, the same format as 6-D tracking). Metric scale is unknown in one
image: every body is placed on the plane facing the camera at distance ``d``
(``rgb.distance_m`` when given; else the distance at which the first body's library
shape, its longest side, looks as long as its silhouette in the segmentation frame,
so lengths are in units of that apparent size). The body origin is the silhouette's
centroid ``c`` back-projected to depth ``d / s_t`` (``s_t`` = the scale of ``A_t``, 1 without
``rgb.scale``); its orientation is the camera's turned by ``phi + theta_t`` about the optical
axis (``phi`` the silhouette's long axis in the segmentation frame, ``theta_t`` the rotation of
``A_t``): a rod's body z axis, a box's x axis along the long axis, the other in-plane axis
beside it. ``track_planar.json`` records ``d``, where it came from, and the per-frame
similarities. A rotation about the optical axis is a revolute joint to articulate, an
image-plane translation a prismatic one; motion out of the image plane (a door swinging
towards the camera) is not modelled.
"""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import cv2
import numpy as np

from vid2sim.datasets.atomic import write_bytes, write_text
from vid2sim.datasets.recording import Recording
from vid2sim.datasets.shapes import Shape
from vid2sim.pipeline.artifacts import PoseTracks, Segmentation
from vid2sim.pipeline.track_config import TrackConfig

log = logging.getLogger(__name__)
INFO_FILE = "track_planar.json"
OVERLAY_PNG = "track_overlay.png"


def grey(rec: Recording, i: int) -> np.ndarray:
    """(H, W) float32 grey image of frame i."""
    return cv2.cvtColor(rec.color(i), cv2.COLOR_RGB2GRAY).astype(np.float32)


def _ecc(tmpl: np.ndarray, img: np.ndarray, mask: np.ndarray, A0: np.ndarray, cfg: TrackConfig) -> tuple[float, np.ndarray]:
    """(correlation (``_zncc``), 3 x 3 similarity tmpl px -> img px) by ECC from ``A0``, on the box around the
    mask and its predicted place (the warp's origin there: rotation and translation decouple), coarse
    to fine (levels with under 60 mask pixels skipped); (-1, A0) where the finest level does not converge."""
    ys, xs = np.nonzero(mask)
    if len(xs) < 12:
        return -1.0, A0
    box = np.array([[xs.min(), ys.min()], [xs.max(), ys.max()], [xs.min(), ys.max()], [xs.max(), ys.min()]], float)
    box = np.vstack([box, box @ A0[:2, :2].T + A0[:2, 2]])
    pad = 8 + 0.25 * (box.max(0) - box.min(0))
    H, W_ = mask.shape
    x0, y0 = np.maximum(np.floor(box.min(0) - pad), 0).astype(int)
    x1, y1 = np.minimum(np.ceil(box.max(0) + pad), [W_ - 1, H - 1]).astype(int) + 1
    O = np.array([[1.0, 0, x0], [0, 1, y0], [0, 0, 1]])
    cc, A = _ecc_pyramid(tmpl[y0:y1, x0:x1], img[y0:y1, x0:x1], mask[y0:y1, x0:x1],
                         np.linalg.inv(O) @ A0 @ O, cfg)
    if cc < 0:
        return cc, A0
    A = O @ A @ np.linalg.inv(O)
    return _zncc(tmpl, img, mask, A), A


def _ecc_pyramid(tmpl: np.ndarray, img: np.ndarray, mask: np.ndarray, A0: np.ndarray, cfg: TrackConfig
                 ) -> tuple[float, np.ndarray]:
    r = cfg.rgb
    mode = cv2.MOTION_AFFINE if r.scale else cv2.MOTION_EUCLIDEAN
    crit = (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, r.ecc_iterations, 1e-4)
    A = A0.copy()
    cc = -1.0
    for lev in range(r.pyramid - 1, -1, -1):
        f = 0.5 ** lev
        S = np.diag([f, f, 1.0])
        t = cv2.resize(tmpl, None, fx=f, fy=f, interpolation=cv2.INTER_AREA) if lev else tmpl
        im = cv2.resize(img, None, fx=f, fy=f, interpolation=cv2.INTER_AREA) if lev else img
        m = (cv2.resize(mask, (t.shape[1], t.shape[0]), interpolation=cv2.INTER_NEAREST) if lev else mask).astype(np.uint8)
        if lev and m.sum() < 60:  # too few pixels for a coarse level
            continue
        W = (S @ A @ np.linalg.inv(S))[:2].astype(np.float32)
        try:
            cc, W = cv2.findTransformECC(t, im, W, mode, crit, m, 5)
        except cv2.error:  # no convergence: a coarse level is skipped, the finest one fails
            if lev:
                continue
            return -1.0, A0
        A = np.linalg.inv(S) @ np.vstack([W, [0, 0, 1]]).astype(float) @ S
    return float(cc), _similarity(A)


def _similarity(A: np.ndarray) -> np.ndarray:
    """The nearest similarity to affine ``A`` (3 x 3): its 2 x 2 part's rotation (polar) times sqrt|det|."""
    U, _, Vt = np.linalg.svd(A[:2, :2])
    R = U @ Vt
    if np.linalg.det(R) < 0:
        U[:, -1] *= -1
        R = U @ Vt
    out = A.copy()
    out[:2, :2] = R * math.sqrt(abs(np.linalg.det(A[:2, :2])))
    return out


def _warp_mask(mask: np.ndarray, A: np.ndarray) -> np.ndarray:
    return cv2.warpAffine(mask.astype(np.uint8), A[:2], mask.shape[::-1], flags=cv2.INTER_NEAREST)


def _region(mask: np.ndarray, grow: int) -> np.ndarray:
    """(H, W) uint8: the silhouette grown by ``grow`` px (shrunk where negative)."""
    k = np.ones((2 * abs(grow) + 1, 2 * abs(grow) + 1), np.uint8)
    m = mask.astype(np.uint8)
    return m if grow == 0 else cv2.dilate(m, k) if grow > 0 else cv2.erode(m, k)


LK = {"winSize": (11, 11), "maxLevel": 3, "criteria": (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 30, 0.01)}


def _features(img8: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(N, 2) float32 corners (cv2.goodFeaturesToTrack) inside the silhouette shrunk by 1 px."""
    inner = cv2.erode(mask.astype(np.uint8), np.ones((3, 3), np.uint8))
    if inner.sum() < 30:
        inner = mask.astype(np.uint8)
    pts = cv2.goodFeaturesToTrack(img8, 300, 0.01, 3, mask=inner)
    return np.zeros((0, 2), np.float32) if pts is None else pts.reshape(-1, 2)


def _follow(prev8: np.ndarray, img8: np.ndarray, pts: np.ndarray, fb_px: float) -> tuple[np.ndarray, np.ndarray]:
    """(points in img8, ok) by pyramidal Lucas-Kanade, kept where the backward track returns within fb_px."""
    if len(pts) == 0:
        return pts, np.zeros(0, bool)
    nxt, st, _ = cv2.calcOpticalFlowPyrLK(prev8, img8, pts.reshape(-1, 1, 2), None, **LK)
    back, st2, _ = cv2.calcOpticalFlowPyrLK(img8, prev8, nxt, None, **LK)
    ok = (st[:, 0] == 1) & (st2[:, 0] == 1) & (np.linalg.norm(back.reshape(-1, 2) - pts, axis=1) < fb_px)
    return nxt.reshape(-1, 2), ok


def _fit(src: np.ndarray, dst: np.ndarray, scale: bool) -> np.ndarray | None:
    """3 x 3 similarity src -> dst: RANSAC inliers (cv2.estimateAffinePartial2D, 1 px), then without
    ``scale`` the least-squares rotation and translation of the inliers (Kabsch: OpenCV has no 2-D
    rigid estimator); None with under 4 inliers."""
    M, inl = cv2.estimateAffinePartial2D(src, dst, method=cv2.RANSAC, ransacReprojThreshold=1.0)
    if M is None or inl.sum() < 4:
        return None
    out = np.vstack([M, [0, 0, 1]])
    if not scale:
        a, b = src[inl[:, 0] == 1].astype(float), dst[inl[:, 0] == 1].astype(float)
        ca, cb = a.mean(0), b.mean(0)
        U, _, Vt = np.linalg.svd((b - cb).T @ (a - ca))
        R = U @ np.diag([1.0, np.linalg.det(U @ Vt)]) @ Vt
        out[:2, :2], out[:2, 2] = R, cb - R @ ca
    return out


class _Body:
    """One body's tracking state along one direction in time: corners seen in an anchor frame
    (``pts0``, anchor pixels; none on ``others``, the other bodies there) and where they are now
    (``pts``); ``A0`` maps segmentation-frame pixels to anchor pixels."""

    def __init__(self, img8: np.ndarray, mask: np.ndarray, A0: np.ndarray, others: np.ndarray):
        self.A0 = A0
        self.pts0 = _features(img8, _warp_mask(mask, A0) & ~others)
        self.pts = self.pts0.copy()
        self.n0 = len(self.pts0)


def track_similarities(cfg: TrackConfig, rec: Recording, masks: np.ndarray, frame: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A (T, M, 3, 3) similarities from the segmentation frame, lost (T, M), correlation (T, M)).

    Per body, corners in its silhouette are followed frame to frame (pyramidal Lucas-Kanade,
    forward-backward checked) and fitted from where they were in the anchor frame (the
    segmentation frame, then wherever they were re-detected, when fewer than ``rgb.min_features``
    or half of them remain): drift only from re-anchoring. A body with fewer corners than that in
    the segmentation frame (a flat-coloured part), or a frame where too few follow, is registered
    by ECC (``_ecc_step``).
    The correlation is ECC's where it ran, else the share of the anchor's corners still followed.
    """
    T, M = rec.num_frames, len(masks)
    A = np.tile(np.eye(3), (T, M, 1, 1))
    lost = np.zeros((T, M), bool)
    corr = np.ones((T, M))
    key = grey(rec, frame)
    regions = [_region(m, cfg.rgb.grow_px) for m in masks]
    front = in_front(masks)
    key_others = [_others(masks, np.tile(np.eye(3), (M, 1, 1)), m, front) for m in range(M)]
    for frames in (range(frame + 1, T), range(frame - 1, -1, -1)):
        prev_img, prev_i = key, frame
        bodies = [_Body(key.astype(np.uint8), masks[m], np.eye(3), _others(masks, np.tile(np.eye(3), (M, 1, 1)), m, front))
                  for m in range(M)]
        corners = [b.n0 >= cfg.rgb.min_features for b in bodies]  # else a flat part: ECC throughout
        vel = np.tile(np.eye(3), (M, 1, 1))
        for i in frames:
            img = grey(rec, i)
            for m in range(M):
                Ap, b = A[prev_i, m], bodies[m]
                others = _others(masks, A[prev_i], m, front)
                b.pts, ok = _follow(prev_img.astype(np.uint8), img.astype(np.uint8), b.pts, cfg.rgb.fb_px)
                b.pts0, b.pts = b.pts0[ok], b.pts[ok]
                W = _fit(b.pts0, b.pts, cfg.rgb.scale) if corners[m] and len(b.pts) >= cfg.rgb.min_features else None
                if W is not None:
                    At, cc = W @ b.A0, len(b.pts) / max(b.n0, 1)
                else:
                    cc, At = _ecc_step(cfg, key, prev_img, img, regions[m], Ap, vel[m], others, key_others[m])
                if cc < cfg.rgb.lost_correlation and W is None:
                    A[i, m], lost[i, m], corr[i, m] = Ap, True, max(cc, 0.0)
                    vel[m] = np.eye(3)
                    continue
                A[i, m], corr[i, m] = At, cc
                vel[m] = At @ np.linalg.inv(Ap)
                if corners[m] and (W is None or len(b.pts) < max(cfg.rgb.min_features, b.n0 // 2)):
                    bodies[m] = _Body(img.astype(np.uint8), masks[m], At, _others(masks, A[i], m, front))
            prev_img, prev_i = img, i
    return A, lost, corr


def in_front(masks: np.ndarray) -> np.ndarray:
    """(M, M) bool: body j is in front of body m where j covers part of m's outline (its convex
    hull in the segmentation frame: at least 20 px and 2 % of m's area), a rod across a box."""
    M = len(masks)
    out = np.zeros((M, M), bool)
    for m in range(M):
        ys, xs = np.nonzero(masks[m])
        hull = np.zeros(masks.shape[1:], np.uint8)
        cv2.fillConvexPoly(hull, cv2.convexHull(np.stack([xs, ys], 1).astype(np.int32)), 1)
        for j in range(M):
            if j != m:
                out[m, j] = int((hull.astype(bool) & (masks[j] > 0)).sum()) >= max(20, 0.02 * len(xs))
    return out


def _others(masks: np.ndarray, A: np.ndarray, m: int, front: np.ndarray) -> np.ndarray:
    """(H, W) bool: the bodies in front of ``m`` (``front[m]``) where ``A`` (M, 3, 3) puts them, grown
    by 1 px (an occluder's pixels are no evidence of the body behind it)."""
    out = np.zeros(masks.shape[1:], np.uint8)
    for j in range(len(masks)):
        if front[m, j]:
            out |= _warp_mask(masks[j], A[j])
    return cv2.dilate(out, np.ones((3, 3), np.uint8)) > 0


def _zncc(tmpl: np.ndarray, img: np.ndarray, mask: np.ndarray, W: np.ndarray) -> float:
    """Zero-mean normalised correlation over ``mask`` of ``tmpl(x)`` and ``img(W x)``; 0 where
    ``img``'s patch varies less than a quarter as much as the template's."""
    ys, xs = np.nonzero(mask)
    x0, y0, x1, y1 = xs.min(), ys.min(), xs.max() + 1, ys.max() + 1
    O = np.array([[1.0, 0, x0], [0, 1, y0], [0, 0, 1]])
    warped = cv2.warpAffine(img, (W @ O)[:2], (x1 - x0, y1 - y0), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                            borderMode=cv2.BORDER_REPLICATE)
    m = mask[y0:y1, x0:x1] > 0
    a, b = tmpl[y0:y1, x0:x1][m].astype(float), warped[m].astype(float)
    a, b = a - a.mean(), b - b.mean()
    if b.std() < 0.25 * a.std():  # a flat patch matches anything: no evidence
        return 0.0
    return float((a * b).sum() / max(math.sqrt((a * a).sum() * (b * b).sum()), 1e-9))


def _starts(prev_img: np.ndarray, img: np.ndarray, mask: np.ndarray, vel: np.ndarray, keep: int = 1) -> list[np.ndarray]:
    """Starting warps for ECC: rest, constant velocity, and the ``keep`` best-correlating (``_zncc``)
    of constant velocity turned by +-5, 10, 15, 20 deg about the silhouette's predicted centre (a
    swinging rod speeds up between frames; ECC's reach on a thin silhouette is a few degrees)."""
    ys, xs = np.nonzero(mask)
    c = vel[:2, :2] @ np.array([xs.mean(), ys.mean()]) + vel[:2, 2]
    C = np.array([[1.0, 0, c[0]], [0, 1, c[1]], [0, 0, 1]])
    cands = [np.eye(3), vel]
    for d in (5, -5, 10, -10, 15, -15, 20, -20):
        r = math.radians(d)
        R = np.array([[math.cos(r), -math.sin(r), 0], [math.sin(r), math.cos(r), 0], [0, 0, 1]])
        cands.append(C @ R @ np.linalg.inv(C) @ vel)
    scores = [_zncc(prev_img, img, mask, W) for W in cands[2:]]
    return cands[:2] + [cands[2 + k] for k in np.argsort(scores)[::-1][:keep]]


def _ecc_step(cfg: TrackConfig, key: np.ndarray, prev_img: np.ndarray, img: np.ndarray, region: np.ndarray,
              Ap: np.ndarray, vel: np.ndarray, others: np.ndarray, key_others: np.ndarray) -> tuple[float, np.ndarray]:
    """(correlation, A_t) by ECC: the silhouette in the previous frame (at ``Ap``) registered to
    ``img`` from rest, constant velocity and the best-correlating of that velocity turned by a
    further +-5 to 20 deg about the silhouette's centre (``_starts``; the best ECC correlation wins),
    then against the segmentation frame when that correlates at least ``rgb.key_correlation``; the
    other bodies (``others`` in the previous frame, ``key_others`` in the segmentation frame) left out."""
    mask = (_warp_mask(region, Ap) > 0) & ~others
    mask = mask.astype(np.uint8) if mask.sum() >= 12 else _warp_mask(region, Ap)
    cc, W = max((_ecc(prev_img, img, mask, W0, cfg) for W0 in _starts(prev_img, img, mask, vel)), key=lambda r: r[0])
    At = W @ Ap
    if cc >= cfg.rgb.key_correlation or cc < 0:
        kmask = ((region > 0) & ~key_others).astype(np.uint8)
        ck, Ak = _ecc(key, img, kmask if kmask.sum() >= 12 else region, At if cc >= 0 else vel @ Ap, cfg)
        if ck >= cfg.rgb.key_correlation:
            cc, At = max(cc, ck), Ak
    return cc, At


def _axis_angle(mask: np.ndarray) -> tuple[np.ndarray, float, float]:
    """(centroid (2,) px, long-axis angle rad, long side px) of a silhouette (cv2.minAreaRect)."""
    ys, xs = np.nonzero(mask)
    _, (w, h), ang = cv2.minAreaRect(np.stack([xs, ys], 1).astype(np.float32))
    phi = math.radians(ang) + (0.0 if w >= h else math.pi / 2)
    return np.array([xs.mean(), ys.mean()]), phi, max(w, h)


def plane_distance(cfg: TrackConfig, rec: Recording, masks: np.ndarray, shapes: list[Shape]) -> tuple[float, str]:
    """(distance d of the bodies' plane from the camera, its source) (module docstring)."""
    if cfg.rgb.distance_m > 0:
        return float(cfg.rgb.distance_m), "track.rgb.distance_m"
    _, _, long_px = _axis_angle(masks[0])
    s = shapes[0]
    if s.type == "box":
        long_m = float(max(s.size))
    elif s.type == "sphere":
        long_m = 2 * s.radius
    elif s.type in ("capsule", "cylinder"):
        long_m = s.length + (2 * s.radius if s.type == "capsule" else 0.0)
    else:
        long_m = 1.0
    return float(rec.camera.fx * long_m / max(long_px, 1.0)), "apparent size of the first body's library shape"


def poses_from_similarities(rec: Recording, masks: np.ndarray, shapes: list[Shape], A: np.ndarray,
                            d: float) -> np.ndarray:
    """world_from_body (T, M, 4, 4) of the planar tracks (module docstring for the convention)."""
    cam = rec.camera
    T, M = A.shape[:2]
    out = np.zeros((T, M, 4, 4))
    for m in range(M):
        c, phi, _ = _axis_angle(masks[m])
        rod = shapes[m].type in ("capsule", "cylinder")
        ct = A[:, m, :2, :2] @ c + A[:, m, :2, 2]                       # (T, 2) centroid px
        theta = np.arctan2(A[:, m, 1, 0], A[:, m, 0, 0]) + phi
        scale = np.sqrt(np.abs(np.linalg.det(A[:, m, :2, :2])))
        z = d / scale
        p = np.stack([(ct[:, 0] - cam.cx) / cam.fx * z, (ct[:, 1] - cam.cy) / cam.fy * z, z], 1)
        e = np.stack([np.cos(theta), np.sin(theta), np.zeros(T)], 1)   # long axis, camera frame
        n = np.broadcast_to([0.0, 0.0, 1.0], e.shape)
        side = np.cross(n, e)
        R = np.stack([side, n, e], 2) if rod else np.stack([e, side, n], 2)
        Tc = np.tile(np.eye(4), (T, 1, 1))
        Tc[:, :3, :3], Tc[:, :3, 3] = R, p
        out[:, m] = cam.world_from_camera @ Tc
    return out


def _overlay_png(rec: Recording, masks: np.ndarray, A: np.ndarray, lost: np.ndarray, names: list[str],
                 out_dir: Path, count: int = 6) -> None:
    """``count`` frames side by side with the tracked silhouettes drawn over them (one colour per body)."""
    T = A.shape[0]
    colors = [(230, 50, 50), (50, 130, 230), (240, 200, 30), (80, 200, 80), (180, 80, 200), (250, 130, 30)]
    tiles = []
    for i in np.unique(np.linspace(0, T - 1, count).round().astype(int)):
        img = rec.color(int(i)).astype(np.float32)
        for m in range(len(masks)):
            w = _warp_mask(masks[m], A[i, m]) > 0
            col = np.array(colors[m % len(colors)], np.float32)
            img[w] = 0.5 * img[w] + 0.5 * col
        img = np.clip(img, 0, 255).astype(np.uint8)
        for m in range(len(masks)):
            cnts, _ = cv2.findContours(_warp_mask(masks[m], A[i, m]), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
            cv2.drawContours(img, cnts, -1, (255, 255, 255) if not lost[i, m] else (255, 0, 0), 1)
        cv2.putText(img, f"frame {i}", (5, 15), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1, cv2.LINE_AA)
        tiles.append(img)
    ok, png = cv2.imencode(".png", cv2.cvtColor(np.concatenate(tiles, 1), cv2.COLOR_RGB2BGR))
    if ok:
        write_bytes(out_dir / OVERLAY_PNG, png.tobytes())


def run(cfg: TrackConfig, rec: Recording, seg: Segmentation, shapes: list[Shape], names: list[str],
        out_dir: Path) -> PoseTracks:
    """Planar tracks of every segmented body of an RGB-only recording; writes ``track_planar.json``
    and ``track_overlay.png`` into ``out_dir``."""
    out_dir = Path(out_dir)
    masks = seg.masks > 0
    A, lost, corr = track_similarities(cfg, rec, masks, seg.frame)
    d, source = plane_distance(cfg, rec, masks, shapes)
    poses = poses_from_similarities(rec, masks, shapes, A, d)
    log.info("track: planar (RGB-only): bodies on a plane %.3f m from the camera (%s); metric scale unknown "
             "beyond that", d, source)
    for m, n in enumerate(names):
        if lost[:, m].any():
            log.warning("track: %s lost in %d of %d frames (held at its last good pose there)", n,
                        int(lost[:, m].sum()), len(lost))
    info = {"mode": "planar", "dof": 4 if cfg.rgb.scale else 3, "distance_m": d, "distance_source": source,
            "scale_known": cfg.rgb.distance_m > 0, "segmentation_frame": seg.frame, "bodies": names,
            "image_from_segmentation": A[:, :, :2].round(6).tolist(), "correlation": corr.round(4).tolist()}
    write_text(out_dir / INFO_FILE, json.dumps(info) + "\n")
    if cfg.overlay:
        _overlay_png(rec, masks, A, lost, names, out_dir)
    return PoseTracks(poses, names, list(seg.shape_names), 1.0 - corr.mean(1), rec.fps, lost, None)
