"""The tracker's "lost" test at far range (track_support.py): a depth point supports its body within
``lost.inlier_m`` or ``lost.inlier_sigmas`` depth noise sigmas (k z^2 at the body's depth), whichever is farther, so a
correct fit of a far body under RealSense-like noise is not flagged lost."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from vid2sim.datasets.recording import Camera, RecordingWriter, open_recording
from vid2sim.datasets.shapes import Shape
from vid2sim.models.render import make_renderer
from vid2sim.pipeline import track
from vid2sim.pipeline.track_support import inlier_tolerances

CART = Shape("cart", "box", size=(0.3, 0.16, 0.1))
K_REALSENSE = 0.0045   # 1/m: the depth noise k z^2 measured on the RealSense-like cartpole s140
Z_FAR = 3.5            # m: that cart's distance (sigma 55 mm there)


def _far_cart(path: Path, k: float, z: float, frames: int = 2, seed: int = 0) -> np.ndarray:
    """A still box 300 x 160 x 100 mm at ``z`` m in front of a wall 1.5 m behind it (848x480, f 605 px),
    depth with Gaussian noise of std k z^2; returns its true pose (4, 4)."""
    cam = Camera(848, 480, 605.0, 605.0, 423.5, 239.5)
    pose = np.eye(4)
    pose[:3, 3] = (0.0, 0.0, z)
    r = make_renderer(cam, [CART])
    out = r.render(torch.as_tensor(pose[None]))
    clean = np.where(out.body.numpy().reshape(480, 848) >= 0, out.depth.numpy().reshape(480, 848), z + 1.5)
    rng = np.random.default_rng(seed)
    with RecordingWriter(path, cam, {"cart": CART}) as w:
        for _ in range(frames):
            w.add((clean + rng.normal(0.0, 1.0, clean.shape) * k * clean ** 2).astype(np.float32))
    return pose


def _lost_at_truth(path: Path, inlier_sigmas: float) -> tuple[bool, float, float]:
    """The tracker's frame 1 started at the true pose: (lost, its residual in m, its position error in m)."""
    truth = _far_cart(path, K_REALSENSE, Z_FAR)
    rec = open_recording(path)
    cfg = track.TrackConfig(overlay=False, noise=track.TrackNoise(depth_noise_k=K_REALSENSE),
                            lost=track.TrackLost(inlier_sigmas=inlier_sigmas, reacquire=False))
    prims = [track.Primitive.from_shape(CART)]
    scene = track.TrackScene(rec, prims, cfg)
    masks = (np.abs(rec.depth(0) - Z_FAR) < 0.3)[None].astype(np.uint8)
    scene.set_background(rec.depth(0), masks, None)
    T = torch.as_tensor(truth[None])
    tracker = track._Tracker(cfg, scene, False)
    tracker.inlier_tol = inlier_tolerances(cfg, scene, T)
    T_fit, lost, residual, _, _ = tracker.frame(rec.depth(1), T, T)
    return bool(lost[0]), float(residual[0]), float(np.linalg.norm(T_fit[0, :3, 3].numpy() - truth[:3, 3]))


def test_inlier_tolerance_is_the_fixed_distance_near_and_two_noise_sigmas_far(tmp_path):
    """A body at 0.5 or 1 m (RealSense-like k 0.0045: sigma 1.1 and 4.5 mm) keeps inlier_m, 10 mm, as before; at
    3.5 m (sigma 55 mm) 2 sigmas, 110 mm; on clean depth (sigma at its 1 mm floor) 10 mm everywhere, as with
    ``inlier_sigmas`` 0, the default."""
    _far_cart(tmp_path / "rec", K_REALSENSE, Z_FAR, frames=1)
    rec = open_recording(tmp_path / "rec")
    prims = [track.Primitive.from_shape(CART)]

    def tol(cfg, z):
        pose = np.eye(4)
        pose[2, 3] = z
        return float(inlier_tolerances(cfg, track.TrackScene(rec, prims, cfg), pose[None])[0])

    noisy = track.TrackConfig(noise=track.TrackNoise(depth_noise_k=K_REALSENSE), lost=track.TrackLost(inlier_sigmas=2.0))
    assert np.allclose([tol(noisy, z) for z in (0.5, 1.0, Z_FAR)], [0.01, 0.01, 2 * K_REALSENSE * Z_FAR ** 2])
    clean = track.TrackConfig(noise=track.TrackNoise(depth_noise_k=0.0), lost=track.TrackLost(inlier_sigmas=2.0))
    assert [tol(clean, z) for z in (0.5, 1.0, Z_FAR)] == [0.01] * 3
    off = track.TrackConfig(noise=track.TrackNoise(depth_noise_k=K_REALSENSE))
    assert tol(off, Z_FAR) == 0.01


def test_a_far_cart_under_realsense_noise_fitted_at_its_true_pose_is_not_lost(tmp_path):
    """The cart 3.5 m away (about 1,000 pixels, depth noise 55 mm) at its true pose: with a fixed 10 mm
    (``inlier_sigmas`` 0, the tracker before) about 15 % of its points support it, under the 30 % the
    lost test asks, and it is lost (as the cart and pole of cartpole s140 were in all 40 frames); with
    2 sigmas it is found within 30 mm of the truth, its residual the noise's (20-80 mm, the rms within the
    3-sigma gate) and not the 12 mm a lost body is given."""
    lost, _, _ = _lost_at_truth(tmp_path / "before", inlier_sigmas=0.0)
    assert lost
    lost, residual, err = _lost_at_truth(tmp_path / "after", inlier_sigmas=2.0)
    assert not lost
    assert 0.02 < residual < 0.08, residual
    assert err < 0.03, err
