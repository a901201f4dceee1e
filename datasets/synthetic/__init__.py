"""Synthetic mechanisms with ground truth: PyBullet dynamics, ray-cast RGB-D.

>>> truth = simulate("cartpole", seed=0, frames=120, fps=30.0)
>>> truth.world_from_body.shape            # (T, M, 4, 4) shape-centre poses
>>> make_recording("cartpole", "out/cartpole", noise="realistic")

A recording folder gets, besides what docs/formats.md §1 requires
(camera.json, depth/, color/, shapes.json, truth.json, truth_poses.npz, and for
``pushed`` actuation.npz with the tip as actuator ``pusher`` of shape ``pusher_tip``; for
``driven_pendulum`` one with no actuator and its hinge's torque as ``joint_effort``):
  - ``truth.urdf``: the URDF PyBullet simulated (world coordinates);
  - ``truth_masks/000000.png``: uint8 body ids per pixel (0 background, i + 1 body i
    in truth.json order, 255 the pusher tip of ``pushed``);
  - ``truth_poses.npz`` also holds ``body_names``, ``q`` and ``joint_names`` (URDF
    joint positions), ``times`` and, where present, ``root_pose`` (T, 7) and
    ``tip_position`` (T, 3).

``make_recording(..., scene="random")`` renders the clip in a scene drawn from the
seed instead (size, field of view, framing, background, distractors, colours, light,
sensor, renderer: see scene.py); truth.json then has a ``scene`` dict of those factors
and truth_masks mark distractors 254.

Dynamics never come from vid2sim's own simulator and pixels never from the
tracker's renderer (see physics.py, render.py, scene_render.py).
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
from vid2sim.datasets.synthetic.mechanisms import FACTORIES, Mechanism, with_params
from vid2sim.datasets.synthetic.physics import SyntheticTruth, run_pybullet, truth_dict
from vid2sim.datasets.synthetic.render import TIP_ID, Renderer, fit_camera, shape_mesh
from vid2sim.datasets.synthetic.sensor import (NOISE_MODES, SensorNoise, apply_depth_noise, apply_realsense_noise,
                                               apply_rgb_noise, frame_rng)

__all__ = ["MECHANISMS", "SCENES", "SyntheticTruth", "simulate", "make_recording", "mechanism", "TIP_ID",
           "true_masks"]

log = logging.getLogger(__name__)

MECHANISMS: tuple[str, ...] = tuple(FACTORIES)
PUSH_MECHANISMS = ("pushed_box", "pushed_box_strokes", "pushed_strokes",   # known actuators (pushes.py), for
                   "pushed_cylinder", "driven_pendulum")                      # scripts/bench_push.py
MESH_MECHANISMS = ("slotted_pendulum", "slotted_pendulum_box")  # a mesh part and its box twin (mesh_parts.py)
SCENES = ("default", "random")
SCENE_NOISE = ("none", "realistic", "random")  # noise choices of a random scene (random: the seed picks)


def mechanism(name: str) -> Mechanism:
    """The mechanism definition called ``name`` (one of MECHANISMS or PUSH_MECHANISMS)."""
    from vid2sim.datasets.synthetic.mesh_parts import MESH_FACTORIES
    from vid2sim.datasets.synthetic.pushes import PUSH_FACTORIES

    factory = FACTORIES.get(name) or PUSH_FACTORIES.get(name) or MESH_FACTORIES.get(name)
    if factory is None:
        raise ValueError(f"unknown mechanism {name!r}; known: {', '.join(MECHANISMS + PUSH_MECHANISMS + MESH_MECHANISMS)}")
    return factory()


def _corners(shape: Shape) -> np.ndarray:
    return shape.corners()


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
             size: tuple[int, int] = (320, 240), params: dict[str, float] | None = None) -> SyntheticTruth:
    """Simulate mechanism ``name`` with PyBullet; the seed sets the initial state; ``params``
    replaces masses and joint damping (``mechanisms.with_params``; truth.json records them)."""
    if frames < 1 or fps <= 0:
        raise ValueError(f"need frames >= 1 and fps > 0, got frames={frames}, fps={fps}")
    mech = with_params(mechanism(name), params)
    sim = run_pybullet(mech, seed, frames, fps)
    truth = truth_dict(mech, sim, fps)
    tip_height = sim["tip"].height if sim["tip"] is not None else 0.0
    camera = fit_camera(_view_points(mech, sim["poses"], sim["tip_pos"], tip_height), mech.view, size, fps)
    return SyntheticTruth(
        name=name, truth=truth, world_from_body=sim["poses"],
        shapes={b.shape.name: b.shape for b in mech.bodies}, urdf=sim["urdf"], q=sim["q"],
        joint_names=sim["joint_names"], camera=camera, fps=float(fps),
        colours={b.name: b.colour for b in mech.bodies}, root_pose=sim["root_pose"],
        tip_position=sim["tip_pos"], joint_effort=sim["effort"],
        effort_joints=sim["effort_names"])


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


PUSHER, PUSHER_SHAPE = "pusher", "pusher_tip"   # the tip's actuator and shapes.json names


def recording_shapes(st: SyntheticTruth) -> dict[str, Shape]:
    """shapes.json of clip ``st``: the bodies' shapes and, with a pusher, its tip's cylinder."""
    if st.tip_position is None:
        return st.shapes
    t = st.truth["tip"]
    return dict(st.shapes, **{PUSHER_SHAPE: Shape(PUSHER_SHAPE, "cylinder", radius=t["radius"], length=t["height"])})


def actuation_of(st: SyntheticTruth):
    """The pusher and known joint effort of clip ``st`` as known actuation (docs/formats.md §1.2), or None."""
    from vid2sim.datasets.actuation import Actuation

    effort = dict(joint_effort=st.joint_effort, effort_joints=st.effort_joints) if st.joint_effort is not None else {}
    if st.tip_position is None:
        return Actuation((), (), np.zeros((len(st.world_from_body), 0, 4, 4)), **effort) if effort else None
    W = np.tile(np.eye(4), (len(st.tip_position), 1, 1, 1))
    W[:, 0, :3, 3] = st.tip_position
    return Actuation((PUSHER,), (PUSHER_SHAPE,), W, **effort)


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
                   size: tuple[int, int] = (320, 240), noise: str | None = None, overwrite: bool = False,
                   scene: str = "default") -> Path:
    """Simulate, render and write a recording folder (docs/formats.md §1) to ``out``.

    scene: ``default`` (camera fitted close, floor and wall, ray casting; ``noise``
    none | realistic, None = none) or ``random`` (scene.py: ``size`` is ignored, the
    seed draws it; ``noise`` none = clean, realistic = the RealSense-like model,
    random or None = the seed picks).
    """
    if scene not in SCENES:
        raise ValueError(f"unknown scene {scene!r}; choose one of {', '.join(SCENES)}")
    modes = NOISE_MODES if scene == "default" else SCENE_NOISE
    if noise is not None and noise not in modes:
        raise ValueError(f"unknown noise {noise!r} for scene {scene!r}; choose one of {', '.join(modes)}")
    out = Path(out)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out}: already exists (pass overwrite=True to replace it)")
    st = simulate(name, seed=seed, frames=frames, fps=fps, size=tuple(size))
    if scene == "random":
        return _write_random(st, out, seed, noise, overwrite)
    noise = noise or "none"
    renderer = renderer_for(st)
    with RecordingWriter(out, st.camera, recording_shapes(st), overwrite=overwrite) as w:
        for k in range(frames):
            depth, rgb, mask = renderer.render(st.world_from_body[k], _tip_pose(st, k))
            if noise == "realistic":
                rng = frame_rng(seed, k)
                depth = apply_depth_noise(depth, rng)
                rgb = apply_rgb_noise(rgb, rng)
            w.add(depth, rgb)
            w.add_file(f"truth_masks/{k:06d}.png", _png(mask))
        _write_truth(w, st, dict(st.truth, noise=noise, seed=seed))
    log.info("wrote %s (%d frames of %s, seed %d, noise %s)", out, frames, name, seed, noise)
    return out


def _write_truth(w: RecordingWriter, st: SyntheticTruth, truth: dict) -> None:
    """truth.json, truth.urdf and truth_poses.npz of clip ``st``."""
    frames = len(st.world_from_body)
    w.add_file("truth.json", json.dumps(truth, indent=2) + "\n")
    urdf = st.urdf
    for shape in st.shapes.values():  # mesh files: the recording's copy, relative to truth.urdf
        if shape.type == "mesh":
            urdf = urdf.replace(f'filename="{shape.mesh_path().resolve()}"', f'filename="{shape.file}"')
    w.add_file("truth.urdf", urdf)
    arrays = dict(world_from_body=st.world_from_body, body_names=np.array(st.body_names),
                  q=st.q, joint_names=np.array(st.joint_names, dtype=str),
                  times=np.arange(frames) / st.fps)
    if st.root_pose is not None:
        arrays["root_pose"] = st.root_pose
    if st.tip_position is not None:
        arrays["tip_position"] = st.tip_position
    w.add_file("truth_poses.npz", _npz_bytes(**arrays))
    act = actuation_of(st)
    if act is not None:
        w.add_file("actuation.npz", act.to_bytes())


def scene_renderer(st: SyntheticTruth, sc):
    """The renderer ``sc.renderer`` names (scene_render.py) for clip ``st`` in scene ``sc``."""
    from vid2sim.datasets.synthetic.scene_render import SceneRaycaster, TinyRenderer

    shapes = [st.shapes[b["shape"]] for b in st.truth["bodies"]]
    tip = _tip_shape(st) if st.tip_position is not None else None
    return (TinyRenderer if sc.renderer == "tiny" else SceneRaycaster)(sc, shapes, tip)


def _write_random(st: SyntheticTruth, out: Path, seed: int, noise: str | None, overwrite: bool) -> Path:
    from vid2sim.datasets.synthetic.scene import random_scene, scene_factors

    sensor = {"none": "clean", "realistic": "realsense"}.get(noise or "random")
    sc = random_scene(st, seed, mechanism(st.name), sensor=sensor)
    renderer = scene_renderer(st, sc)
    coverages = []
    try:
        with RecordingWriter(out, sc.camera, recording_shapes(st), overwrite=overwrite) as w:
            for k in range(len(st.world_from_body)):
                depth, rgb, mask = renderer.render(st.world_from_body[k], _tip_pose(st, k), k / st.fps)
                coverages.append(float(((mask > 0) & (mask < 254)).mean()))
                if sc.noise is not None:
                    rng = frame_rng(seed, k)
                    depth = apply_realsense_noise(depth, rng, sc.noise, sc.camera.fx)
                    rgb = apply_rgb_noise(rgb, rng, SensorNoise(rgb_sigma=sc.noise.rgb_sigma))
                w.add(depth, rgb)
                w.add_file(f"truth_masks/{k:06d}.png", _png(mask))
            factors = scene_factors(sc, coverages)
            _write_truth(w, st, dict(st.truth, noise="none" if sc.noise is None else "realsense", seed=seed,
                                     scene=factors))
    finally:
        if hasattr(renderer, "close"):
            renderer.close()
    log.info("wrote %s (%d frames of %s, random scene %d: %s, %s, coverage %.3f, %s)", out, len(st.world_from_body),
             st.name, seed, factors["renderer"], factors["background"], factors["coverage"], factors["sensor"])
    return out


def true_masks(rec_path: str | Path, frames: range) -> np.ndarray:
    """(N, H, W) bool: a synthetic recording's true mechanism pixels of ``frames``, from
    ``truth_masks/`` (every body; the pusher tip and distractors excluded)."""
    from vid2sim.datasets.synthetic.scene import DISTRACTOR_ID

    out = []
    for i in frames:
        ids = cv2.imread(str(Path(rec_path) / "truth_masks" / f"{i:06d}.png"), cv2.IMREAD_UNCHANGED)
        if ids is None:
            raise FileNotFoundError(f"{rec_path}/truth_masks/{i:06d}.png: missing (a synthetic recording is needed)")
        out.append((ids > 0) & (ids != TIP_ID) & (ids != DISTRACTOR_ID))
    return np.stack(out)
