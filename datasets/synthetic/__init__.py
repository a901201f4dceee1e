"""Synthetic mechanisms with ground truth: PyBullet dynamics, ray-cast RGB-D.

>>> truth = simulate("cartpole", seed=0, frames=120, fps=30.0)
>>> truth.world_from_body.shape            # (T, M, 4, 4) shape-centre poses
>>> make_recording("cartpole", "out/cartpole", noise="realistic")

A recording folder gets, besides what docs/interfaces.md §1 requires
(camera.json, depth/, color/, shapes.json, truth.json, truth_poses.npz):
  - ``truth.urdf``: the URDF PyBullet simulated (world coordinates);
  - ``truth_masks/000000.png``: uint8 body ids per pixel (0 background, i + 1 body i
    in truth.json order, 255 the pusher tip of ``pushed``);
  - ``truth_poses.npz`` also holds ``body_names``, ``q`` and ``joint_names`` (URDF
    joint positions), ``times`` and, where present, ``root_pose`` (T, 7) and
    ``tip_position`` (T, 3).

Dynamics never come from vid2sim's own simulator and pixels never from the
tracker's renderer (see physics.py, render.py).
"""
from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import cv2
import numpy as np

from vid2sim.datasets.recording import Camera, RecordingWriter
from vid2sim.datasets.shapes import Shape
from vid2sim.datasets.synthetic.mechanisms import FACTORIES, Mechanism
from vid2sim.datasets.synthetic.physics import SyntheticTruth, run_pybullet, truth_dict
from vid2sim.datasets.synthetic.render import TIP_ID, Renderer, fit_camera, shape_mesh
from vid2sim.datasets.synthetic.sensor import NOISE_MODES, apply_depth_noise, apply_rgb_noise, frame_rng

__all__ = ["MECHANISMS", "SyntheticTruth", "simulate", "make_recording", "mechanism", "TIP_ID"]

log = logging.getLogger(__name__)

MECHANISMS: tuple[str, ...] = tuple(FACTORIES)


def mechanism(name: str) -> Mechanism:
    """The mechanism definition called ``name`` (one of MECHANISMS)."""
    if name not in FACTORIES:
        raise ValueError(f"unknown mechanism {name!r}; known: {', '.join(MECHANISMS)}")
    return FACTORIES[name]()


def _corners(shape: Shape) -> np.ndarray:
    e = np.asarray(shape.extents()) / 2
    return np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]) * e


def _view_points(mech: Mechanism, poses: np.ndarray, tip_pos: np.ndarray | None, tip_height: float = 0.0
                 ) -> np.ndarray:
    """World points that must stay in view: every body's box corners over the clip."""
    pts = []
    for m, b in enumerate(mech.bodies):
        c = _corners(b.shape)
        pts.append(np.einsum("tij,nj->tni", poses[:, m, :3, :3], c).reshape(-1, 3)
                   + np.repeat(poses[:, m, :3, 3], len(c), 0))
    if tip_pos is not None:
        pts.append(tip_pos + np.array([0.0, 0.0, tip_height / 2]))
    return np.concatenate(pts)


def simulate(name: str, seed: int = 0, frames: int = 120, fps: float = 30.0,
             size: tuple[int, int] = (320, 240)) -> SyntheticTruth:
    """Simulate mechanism ``name`` with PyBullet; the seed sets the initial state."""
    if frames < 1 or fps <= 0:
        raise ValueError(f"need frames >= 1 and fps > 0, got frames={frames}, fps={fps}")
    mech = mechanism(name)
    sim = run_pybullet(mech, seed, frames, fps)
    truth = truth_dict(mech, sim, fps)
    tip_height = sim["tip"].height if sim["tip"] is not None else 0.0
    camera = fit_camera(_view_points(mech, sim["poses"], sim["tip_pos"], tip_height), mech.view, size, fps)
    return SyntheticTruth(
        name=name, truth=truth, world_from_body=sim["poses"],
        shapes={b.shape.name: b.shape for b in mech.bodies}, urdf=sim["urdf"], q=sim["q"],
        joint_names=sim["joint_names"], camera=camera, fps=float(fps),
        colours={b.name: b.colour for b in mech.bodies}, root_pose=sim["root_pose"],
        tip_position=sim["tip_pos"])


def renderer_for(st: SyntheticTruth, camera: Camera | None = None) -> Renderer:
    """A Renderer of the clip's bodies (and tip) with its floor and back wall placed."""
    camera = camera or st.camera
    mech = mechanism(st.name)
    pts = _view_points(mech, st.world_from_body, st.tip_position,
                       st.truth["tip"]["height"] if "tip" in st.truth else 0.0)
    if mech.floor is not None:
        floor_z = mech.floor.height
    elif mech.ground is not None:
        floor_z = mech.ground
    else:
        floor_z = float(pts[:, 2].min()) - 0.15
    fwd = camera.world_from_camera[:3, 2]
    fwd_h = np.array([fwd[0], fwd[1], 0.0])
    fwd_h /= max(np.linalg.norm(fwd_h), 1e-9)
    eye = camera.world_from_camera[:3, 3]
    wall = float(((pts - eye) @ fwd_h).max()) + 0.6
    tip = None
    if st.tip_position is not None:
        tip = (_tip_shape(st), (0.25, 0.25, 0.28))
    meshes = [shape_mesh(st.shapes[b["shape"]]) for b in st.truth["bodies"]]
    colours = [st.colours[b["name"]] for b in st.truth["bodies"]]
    return Renderer(camera, meshes, colours, floor_z, wall, tip)


def _tip_shape(st: SyntheticTruth):
    t = st.truth["tip"]
    return Shape("tip", "cylinder", radius=t["radius"], length=t["height"])


def _tip_pose(st: SyntheticTruth, k: int) -> np.ndarray | None:
    if st.tip_position is None:
        return None
    T = np.eye(4)
    T[:3, 3] = st.tip_position[k]
    return T


def _npz_bytes(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def _png(img: np.ndarray) -> bytes:
    ok, data = cv2.imencode(".png", img)
    if not ok:
        raise RuntimeError("PNG encoding failed")
    return data.tobytes()


def make_recording(name: str, out: str | Path, seed: int = 0, frames: int = 120, fps: float = 30.0,
                   size: tuple[int, int] = (320, 240), noise: str = "none", overwrite: bool = False) -> Path:
    """Simulate, render and write a recording folder (docs/interfaces.md §1) to ``out``."""
    if noise not in NOISE_MODES:
        raise ValueError(f"unknown noise {noise!r}; choose one of {', '.join(NOISE_MODES)}")
    out = Path(out)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out}: already exists (pass overwrite=True to replace it)")
    st = simulate(name, seed=seed, frames=frames, fps=fps, size=tuple(size))
    renderer = renderer_for(st)
    with RecordingWriter(out, st.camera, st.shapes, overwrite=overwrite) as w:
        for k in range(frames):
            depth, rgb, mask = renderer.render(st.world_from_body[k], _tip_pose(st, k))
            if noise == "realistic":
                rng = frame_rng(seed, k)
                depth = apply_depth_noise(depth, rng)
                rgb = apply_rgb_noise(rgb, rng)
            w.add(depth, rgb)
            w.add_file(f"truth_masks/{k:06d}.png", _png(mask))
        truth = dict(st.truth, noise=noise, seed=seed)
        w.add_file("truth.json", json.dumps(truth, indent=2) + "\n")
        w.add_file("truth.urdf", st.urdf)
        arrays = dict(world_from_body=st.world_from_body, body_names=np.array(st.body_names),
                      q=st.q, joint_names=np.array(st.joint_names, dtype=str),
                      times=np.arange(frames) / fps)
        if st.root_pose is not None:
            arrays["root_pose"] = st.root_pose
        if st.tip_position is not None:
            arrays["tip_position"] = st.tip_position
        w.add_file("truth_poses.npz", _npz_bytes(**arrays))
    log.info("wrote %s (%d frames of %s, seed %d, noise %s)", out, frames, name, seed, noise)
    return out
