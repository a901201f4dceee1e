"""Benchmark of the track stage against ground truth, with Open3D ICP as the baseline.

For each synthetic mechanism: writes the recording (``make_recording``, cached in
``--work``), builds the segmentation of frame 0 from ``truth_masks/`` (so the number
measures tracking, not the segmenter), runs ``pipeline.track.run`` and, in the same
process, per-frame point-to-point ICP (Open3D, the paper's baseline: each body's
sampled primitive surface registered to the frame's foreground points, warm-started
from its previous result and started at the true pose of frame 0, which favours ICP).

Errors are means over frames and bodies: position of the shape centre (m) and a
symmetry-aware rotation error (deg): none for spheres, the axis angle (sign-free) for
capsules and cylinders (roll about the axis is unobservable), and the smallest angle
over the box's proper symmetry rotations for boxes (4, or 8 with a square
cross-section, 24 for a cube). Frames flagged lost are
included. The last stdout line is the JSON
``{mechanism: {"tracker": {"pos_err_m", "rot_err_deg", "fps", ...}, "icp": {...},
"crlb": {...}}}``.

``crlb`` (with ``--noise realistic``): the per-frame Cramer-Rao bound, i.e. the mean error
an unbiased estimator that sees one frame's depth could at best reach, per body. From the
Fisher information of the rendered depth at the true poses (Jacobian w.r.t. all bodies'
6-D poses by autograd through the analytic renderer, noise sigma = k z^2 of the sensor
model); the mean error is that of the bound's Gaussian, sampled, with a capsule's or
cylinder's spin removed as in the error above (boxes: full angle). Silhouette edges
carry information the depth Jacobian misses, so a tracker can beat the bound somewhat;
it says which target ratios are out of reach, not how far a tracker is from optimal.

    OMP_NUM_THREADS=1 python scripts/bench_track.py --mechanisms cartpole [--noise none] [--set track.iterations=16]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from pathlib import Path

import cv2
import numpy as np
import torch

from vid2sim.datasets.recording import open_recording
from vid2sim.models.render import Primitive
from vid2sim.models.render.primitives import sdf_and_grad
from vid2sim.pipeline import track
from vid2sim.pipeline.artifacts import Segmentation
from vid2sim.pipeline.cli import parse_sets
from vid2sim.pipeline.run import resolve_configs

BOX_SYMMETRIES = [np.diag(d) for d in ((1, 1, 1), (1, -1, -1), (-1, 1, -1), (-1, -1, 1))]


def box_symmetries(size) -> list[np.ndarray]:
    """Proper rotations mapping a box onto itself: the 4 half-turns, plus quarter-turns about
    an axis whose two cross-section sides are equal (all 24 for a cube)."""
    from itertools import permutations, product

    out = []
    for perm in permutations(range(3)):
        if any(abs(size[i] - size[p]) > 1e-9 for i, p in enumerate(perm)):
            continue
        for signs in product((1, -1), repeat=3):
            S = np.zeros((3, 3))
            S[list(perm), range(3)] = signs
            if np.linalg.det(S) > 0:
                out.append(S)
    return out


def rotation_error_deg(kind: str, R_est: np.ndarray, R_true: np.ndarray, size=None) -> np.ndarray:
    """R_*: (T, 3, 3) -> (T,) symmetry-aware angle in degrees (``size``: box extents)."""
    if kind == "sphere":
        return np.zeros(len(R_est))
    if kind in ("capsule", "cylinder"):
        c = np.abs(np.einsum("ti,ti->t", R_est[:, :, 2], R_true[:, :, 2]))
        return np.degrees(np.arccos(np.clip(c, -1, 1)))
    best = np.full(len(R_est), np.inf)
    for S in (BOX_SYMMETRIES if size is None else box_symmetries(size)):
        D = np.einsum("tji,tjk->tik", R_true, R_est @ S)
        c = (np.trace(D, axis1=1, axis2=2) - 1) / 2
        best = np.minimum(best, np.degrees(np.arccos(np.clip(c, -1, 1))))
    return best


def segmentation_from_truth(rec_path: Path, frame: int = 0) -> Segmentation:
    truth = json.loads((rec_path / "truth.json").read_text())
    ids = cv2.imread(str(rec_path / "truth_masks" / f"{frame:06d}.png"), cv2.IMREAD_UNCHANGED)
    names = [b["shape"] for b in truth["bodies"]]
    masks = np.stack([(ids == i + 1) for i in range(len(names))]).astype(np.uint8)
    return Segmentation(masks, frame, names, np.ones(len(names)))


def surface_samples(prim: Primitive, n: int = 1500, seed: int = 0) -> np.ndarray:
    """(n, 3) points on the primitive's surface (random points projected along the SDF gradient)."""
    rng = np.random.default_rng(seed)
    r = prim.bounding_radius
    q = torch.as_tensor(rng.uniform(-r, r, size=(4 * n, 3)))
    for _ in range(3):
        d, g = sdf_and_grad(prim, q)
        q = q - d.unsqueeze(-1) * g
    return q[:n].numpy()


def icp_baseline(rec, seg: Segmentation, prims: list[Primitive], T_start: np.ndarray, max_dist: float = 0.05) -> np.ndarray:
    """(T, M, 4, 4) per-frame Open3D point-to-point ICP poses."""
    import open3d as o3d

    cam = rec.camera
    T_wc = np.asarray(cam.world_from_camera)
    d0 = rec.depth(seg.frame)
    fg0 = cv2.dilate(seg.masks.any(0).astype(np.uint8), np.ones((9, 9), np.uint8)) > 0
    background = np.where(fg0, 0.0, d0)
    sources = [o3d.geometry.PointCloud(o3d.utility.Vector3dVector(surface_samples(p))) for p in prims]
    est = np.zeros((rec.num_frames, len(prims), 4, 4))
    T = T_start.copy()
    crit = o3d.pipelines.registration.ICPConvergenceCriteria(max_iteration=30)
    p2p = o3d.pipelines.registration.TransformationEstimationPointToPoint()
    for i in range(rec.num_frames):
        depth = rec.depth(i)
        fg = (depth > 0) & ((background <= 0) | (depth < background - 0.02))
        pts = cam.backproject(depth)[fg] @ T_wc[:3, :3].T + T_wc[:3, 3]
        target = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(pts))
        for m, src in enumerate(sources):
            if len(pts) >= 3:
                T[m] = o3d.pipelines.registration.registration_icp(src, target, max_dist, T[m], p2p, crit).transformation
        est[i] = T
    return est


def errors(est: np.ndarray, truth: np.ndarray, prims: list[Primitive], names: list[str]) -> dict:
    pos = np.linalg.norm(est[:, :, :3, 3] - truth[:, :, :3, 3], axis=-1)  # (T, M)
    rot = np.stack([rotation_error_deg(p.kind, est[:, m, :3, :3], truth[:, m, :3, :3], [2 * h for h in p.half_size])
                    for m, p in enumerate(prims)], 1)
    return {"pos_err_m": float(pos.mean()), "rot_err_deg": float(rot.mean()),
            "per_body": {n: {"pos_err_m": float(pos[:, m].mean()), "rot_err_deg": float(rot[:, m].mean()),
                             "pos_err_max_m": float(pos[:, m].max())} for m, n in enumerate(names)}}


def cramer_rao(rec, truth: np.ndarray, prims: list[Primitive], names: list[str], every: int = 6,
               samples: int = 4000) -> dict:
    """Per-frame Cramer-Rao bound on each body's pose from its depth alone (see the docstring)."""
    from vid2sim.datasets.synthetic.sensor import REALISTIC
    from vid2sim.models.render.analytic import AnalyticRenderer
    from vid2sim.models.geometry_torch import perturb

    r = AnalyticRenderer(rec.camera, prims)
    rng = np.random.default_rng(0)
    M = len(prims)
    pos, rot = [[] for _ in range(M)], [[] for _ in range(M)]
    for k in range(0, len(truth), every):
        T0 = torch.as_tensor(truth[k])
        out = r.render(T0)
        hit = out.depth > 0
        pix = r.all_pixels[hit]
        J = torch.autograd.functional.jacobian(lambda xi: r.render(perturb(T0, xi.reshape(M, 6)), pix).depth,
                                               torch.zeros(6 * M, dtype=torch.float64))
        sig = REALISTIC.depth_sigma_k * out.depth[hit] ** 2
        C = torch.linalg.pinv((J / sig[:, None] ** 2).T @ J).numpy()
        for m, p in enumerate(prims):
            if not bool((out.body[hit] == m).any()):
                continue  # not seen in this frame
            w = rng.multivariate_normal(np.zeros(3), C[6 * m + 3:6 * m + 6, 6 * m + 3:6 * m + 6], samples)
            if p.kind in ("capsule", "cylinder"):
                a = truth[k, m, :3, 2]
                w = w - np.outer(w @ a, a)
            v = rng.multivariate_normal(np.zeros(3), C[6 * m:6 * m + 3, 6 * m:6 * m + 3], samples)
            rot[m].append(np.degrees(np.linalg.norm(w, axis=1)).mean())
            pos[m].append(np.linalg.norm(v, axis=1).mean())
    per = {n: {"pos_err_m": float(np.mean(pos[m])), "rot_err_deg": float(np.mean(rot[m])) if prims[m].kind != "sphere"
               else 0.0} for m, n in enumerate(names) if pos[m]}
    return {"per_body": per, "frames_used": len(range(0, len(truth), every))}


def bench(name: str, args) -> dict:
    from vid2sim.datasets.synthetic import make_recording

    path = Path(args.work) / f"{name}_{args.size}_{args.noise}_{args.frames}_s{args.seed}"
    if not path.exists():
        w, h = (int(v) for v in args.size.split("x"))
        make_recording(name, path, seed=args.seed, frames=args.frames, size=(w, h), noise=args.noise)
    rec = open_recording(path)
    seg = segmentation_from_truth(path)
    truth = np.load(path / "truth_poses.npz")["world_from_body"]
    prims = [Primitive.from_shape(rec.shapes[n]) for n in seg.shape_names]
    cfg = dataclasses.replace(resolve_configs(parse_sets(args.set))["track"], overlay=False)
    t0 = time.perf_counter()
    c0 = time.process_time()
    poses = track.run(cfg, rec, seg, path / "run")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = {"tracker": {**errors(poses.world_from_body, truth, prims, poses.body_names),
                       "fps": rec.num_frames / wall, "fps_cpu": rec.num_frames / cpu,
                       "lost_frames": {n: int(poses.lost[:, m].sum()) for m, n in enumerate(poses.body_names)},
                       "residual_mean_m": float(poses.residual.mean())}}
    if not args.skip_icp:
        t0 = time.perf_counter()
        icp = icp_baseline(rec, seg, prims, truth[seg.frame])
        out["icp"] = {**errors(icp, truth, prims, poses.body_names), "fps": rec.num_frames / (time.perf_counter() - t0)}
    if args.noise == "realistic" and not args.skip_crlb:
        out["crlb"] = cramer_rao(rec, truth, prims, poses.body_names)
    return out


def main() -> None:
    from vid2sim.datasets.synthetic import MECHANISMS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mechanisms", default="cartpole", help=f"comma-separated, or 'all' ({', '.join(MECHANISMS)})")
    ap.add_argument("--frames", type=int, default=120)
    ap.add_argument("--size", default="320x240")
    ap.add_argument("--noise", default="realistic", choices=("none", "realistic"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default="/tmp/vid2sim_bench_track")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a setting as vid2sim run does (repeatable), e.g. --set track.iterations=16")
    ap.add_argument("--skip-icp", action="store_true")
    ap.add_argument("--skip-crlb", action="store_true", help="do not compute the Cramer-Rao bound")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    names = MECHANISMS if args.mechanisms == "all" else args.mechanisms.split(",")
    results = {}
    for n in names:
        results[n] = bench(n, args)
        logging.getLogger("bench_track").warning("%s: %s", n, json.dumps(results[n]))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
