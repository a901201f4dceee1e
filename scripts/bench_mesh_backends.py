"""Benchmark of the mesh triangle-query engines behind the tracker (``models/render/mesh_backends``).

Writes the synthetic ``slotted_pendulum`` clip (a slotted beam mesh, clean depth, camera
about 1 m away) and its primitive twin ``slotted_pendulum_box`` (a box of the beam's
extents), then runs the whole track stage (``pipeline.track.run``, start poses included,
segmentation of frame 0 from ``truth_masks/``) on the mesh clip once per engine
(``open3d``, ``trimesh``, ``brute``), and once on the box twin (closed-form primitive:
the reference cost). Engines are run in turn in the same process, ``--repeats`` rounds,
interleaved, and the CPU time (process time, one thread) of each run is kept; the figure
is the median per frame.

The last stdout line is the JSON ``{"frames": F, "engines": {name: {"cpu_s_per_frame",
"start_cpu_s" (the segmentation frame's start poses), "cpu_s_per_frame_after_start",
"ratio_to_open3d", "ratio_to_open3d_after_start", "pos_err_max_m", "pos_err_mean_m"}},
"box_twin": {...}, "mesh_over_box": r, "mesh_over_box_after_start": r, "full_image_hits": {engine or "deodr": {"ms", "hits"}}}``. Position
errors are against the true shape-centre poses. ``full_image_hits``: one whole-image hit
query of the beam (320x240 rays) per engine, beside DEODR's depth rasteriser, which renders
but answers no closest-point query (see docs/decisions.md, "Mesh parts").

    OMP_NUM_THREADS=1 python scripts/bench_mesh_backends.py --frames 10 [--engines open3d,trimesh,brute] [--repeats 1]
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path

import cv2
import numpy as np
import torch

from vid2sim.datasets.recording import open_recording
from vid2sim.datasets.synthetic import make_recording
from vid2sim.models.render import mesh as mesh_mod
from vid2sim.models.render.mesh_backends import ENGINES
from vid2sim.pipeline import track
from vid2sim.pipeline.artifacts import Segmentation

log = logging.getLogger("bench_mesh_backends")


def _segmentation(path: Path) -> Segmentation:
    truth = json.loads((path / "truth.json").read_text())
    ids = cv2.imread(str(path / "truth_masks" / "000000.png"), cv2.IMREAD_UNCHANGED)
    names = [b["shape"] for b in truth["bodies"]]
    return Segmentation(np.stack([ids == i + 1 for i in range(len(names))]).astype(np.uint8), 0, names,
                        np.ones(len(names)))


def _run(path: Path, out: Path, engine: str | None) -> dict:
    if engine is not None:
        mesh_mod.ENGINE = engine
        mesh_mod._geometry_of.cache_clear()  # a fresh MeshGeometry, built with this engine
    rec = open_recording(path)
    start_cpu = []
    start_poses = track._start_poses

    def timed_start(*a, **kw):  # the segmentation frame's start poses, timed apart from the frames
        t = time.process_time()
        try:
            return start_poses(*a, **kw)
        finally:
            start_cpu.append(time.process_time() - t)

    track._start_poses = timed_start
    t0 = time.process_time()
    try:
        poses = track.run(track.TrackConfig(overlay=False), rec, _segmentation(path), out)
    finally:
        track._start_poses = start_poses
    cpu = time.process_time() - t0
    truth = np.load(path / "truth_poses.npz")["world_from_body"]
    err = np.linalg.norm(poses.world_from_body[:, :, :3, 3] - truth[:, :, :3, 3], axis=-1)
    return {"cpu_s": cpu, "start_cpu_s": sum(start_cpu), "pos_err_max_m": float(err.max()),
            "pos_err_mean_m": float(err.mean())}


def _full_image(path: Path, frame: int = 0, repeats: int = 5) -> dict:
    """CPU ms of one whole-image hit query of the beam at frame ``frame`` per engine, and of
    DEODR's depth rasteriser (``Scene3DPytorch.render_depth``) for comparison, with the
    number of pixels each finds on the beam (DEODR's anti-aliased edge band adds some)."""
    from deodr.pytorch import CameraPytorch, ColoredTriMeshPytorch, Scene3DPytorch

    from vid2sim.models.render.mesh_backends import make_engine

    rec = open_recording(path)
    T = np.load(path / "truth_poses.npz")["world_from_body"][frame, 0]
    m = rec.shapes["beam"].mesh()
    V, F = np.asarray(m.vertices), np.asarray(m.faces)
    cam = rec.camera
    rays = cam.pixel_rays().reshape(-1, 3)
    T_bc = np.linalg.inv(T) @ cam.world_from_camera
    o, d = np.tile(T_bc[:3, 3], (len(rays), 1)), rays @ T_bc[:3, :3].T
    out = {}
    for e in ENGINES:
        eng = make_engine(e, V, F)
        t0 = time.process_time()
        for _ in range(repeats):
            pid = eng.cast(o, d)
        out[e] = {"ms": 1e3 * (time.process_time() - t0) / repeats, "hits": int((pid >= 0).sum())}
    T_cb = np.linalg.inv(cam.world_from_camera) @ T
    mesh = ColoredTriMeshPytorch(faces=F.astype(np.int32), vertices=torch.tensor(V @ T_cb[:3, :3].T + T_cb[:3, 3]),
                                 colors=np.zeros((len(V), 0)))
    scene = Scene3DPytorch()
    scene.set_mesh(mesh)
    scene.max_depth = 10.0
    scene.set_background_color(np.zeros(1))
    K = np.array([[cam.fx, 0, cam.cx + 0.5], [0, cam.fy, cam.cy + 0.5], [0, 0, 1]])  # DEODR: pixel corners at integers
    camera = CameraPytorch(extrinsic=np.eye(4)[:3], intrinsic=K, width=cam.width, height=cam.height)
    t0 = time.process_time()
    for _ in range(repeats):
        depth = np.asarray(scene.render_depth(camera, depth_scale=1.0)).squeeze()
    out["deodr"] = {"ms": 1e3 * (time.process_time() - t0) / repeats, "hits": int(((depth > 0) & (depth < 10)).sum())}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=10)  # frames of each clip
    ap.add_argument("--size", default="320x240")  # image size WxH
    ap.add_argument("--engines", default=",".join(ENGINES))  # comma-separated engines to time
    ap.add_argument("--repeats", type=int, default=1)  # interleaved rounds over the engines
    ap.add_argument("--work", default="bench_mesh_work")  # folder for the clips and runs
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    torch.set_num_threads(1)
    size = tuple(int(x) for x in args.size.split("x"))
    work = Path(args.work)
    clips = {}
    for name in ("slotted_pendulum", "slotted_pendulum_box"):
        clips[name] = make_recording(name, work / f"{name}_{args.frames}", seed=0, frames=args.frames, size=size,
                                     noise="none", overwrite=True)
    engines = [e for e in args.engines.split(",") if e]
    runs: dict[str, list[dict]] = {e: [] for e in engines + ["box_twin"]}
    for r in range(args.repeats):
        for e in engines + ["box_twin"]:
            clip = clips["slotted_pendulum_box" if e == "box_twin" else "slotted_pendulum"]
            res = _run(clip, work / f"run_{e}_{r}", None if e == "box_twin" else e)
            runs[e].append(res)
            log.info("round %d %s: %.1f s CPU, position error max %.3f mm", r, e, res["cpu_s"], 1e3 * res["pos_err_max_m"])
    mesh_mod.ENGINE = "open3d"

    def summary(rs: list[dict]) -> dict:
        return {"cpu_s_per_frame": statistics.median(x["cpu_s"] for x in rs) / args.frames,
                "start_cpu_s": statistics.median(x["start_cpu_s"] for x in rs),
                "cpu_s_per_frame_after_start": statistics.median(x["cpu_s"] - x["start_cpu_s"] for x in rs) / args.frames,
                "pos_err_max_m": max(x["pos_err_max_m"] for x in rs),
                "pos_err_mean_m": statistics.mean(x["pos_err_mean_m"] for x in rs)}

    out = {"frames": args.frames, "size": args.size, "engines": {e: summary(runs[e]) for e in engines},
           "box_twin": summary(runs["box_twin"])}
    out["full_image_hits"] = _full_image(clips["slotted_pendulum"])
    base = out["engines"].get("open3d", {}).get("cpu_s_per_frame")
    for e in engines:
        out["engines"][e]["ratio_to_open3d"] = out["engines"][e]["cpu_s_per_frame"] / base if base else None
        if base:
            out["engines"][e]["ratio_to_open3d_after_start"] = (out["engines"][e]["cpu_s_per_frame_after_start"]
                                                              / out["engines"]["open3d"]["cpu_s_per_frame_after_start"])
    if base:
        out["mesh_over_box"] = base / out["box_twin"]["cpu_s_per_frame"]
        out["mesh_over_box_after_start"] = (out["engines"]["open3d"]["cpu_s_per_frame_after_start"]
                                            / out["box_twin"]["cpu_s_per_frame_after_start"])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
