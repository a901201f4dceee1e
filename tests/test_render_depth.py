"""The depth renderer's per-primitive ray culling against casting every pixel's ray."""
import math
import warnings

import numpy as np
import torch
from scipy.spatial.transform import Rotation

from vid2sim.datasets.recording import Camera
from vid2sim.datasets.shapes import Shape
from vid2sim.models.render.depth import DepthRenderer, nanmedian0
from vid2sim.models.render.primitives import ray_hit

SHAPES = [Shape("b", "box", size=(0.3, 0.1, 0.05)), Shape("c", "capsule", radius=0.03, length=0.4),
          Shape("s", "sphere", radius=0.08), Shape("y", "cylinder", radius=0.05, length=0.2)]


def _every_ray(r: DepthRenderer, T: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reference: every primitive cast against every pixel's ray."""
    n = r.d_cam.shape[0]
    best, ids = torch.full((n,), math.inf, dtype=torch.float64), torch.full((n,), -1)
    for m, prim in enumerate(r.prims):
        T_bc = np.linalg.inv(T[m]) @ r.T_wc
        s = ray_hit(prim, torch.from_numpy(T_bc[:3, 3]).expand(n, 3), r.d_cam @ torch.from_numpy(T_bc[:3, :3]).T)
        ids = torch.where(s < best, m, ids)
        best = torch.minimum(s, best)
    H, W = r.camera.height, r.camera.width
    return torch.nan_to_num(best, posinf=0.0).reshape(H, W).numpy().astype(np.float32), ids.reshape(H, W).numpy()


def test_culled_render_equals_every_ray():
    rng = np.random.default_rng(3)
    T_wc = np.eye(4)
    T_wc[:3, :3] = Rotation.from_euler("x", -100, degrees=True).as_matrix()   # looking along world +y, tilted
    T_wc[:3, 3] = (0.1, -1.2, 0.4)
    cam = Camera(160, 120, 150.0, 150.0, 79.5, 59.5, world_from_camera=T_wc)
    r = DepthRenderer(cam, SHAPES)
    hits = 0
    for trial in range(6):
        T = np.tile(np.eye(4), (len(SHAPES), 1, 1))
        T[:, :3, :3] = Rotation.random(len(SHAPES), random_state=trial).as_matrix()
        T[:, :3, 3] = rng.uniform((-0.4, -0.3, -0.1), (0.4, 0.4, 0.6), (len(SHAPES), 3))
        if trial == 5:
            T[0, :3, 3] = T_wc[:3, 3] + (0.0, 0.05, 0.0)     # the camera inside a body's bounding sphere
        depth, ids = r.render(T)
        ref_d, ref_ids = _every_ray(r, T)
        np.testing.assert_array_equal(ids, ref_ids)
        np.testing.assert_allclose(depth, ref_d, atol=1e-6)
        hits += int((ids >= 0).sum())
    assert hits > 2000   # the scenes are in view, so the comparison covers real hits


def test_nanmedian0_equals_numpy_nanmedian():
    rng = np.random.default_rng(5)
    for n in (1, 2, 7, 60, 61):
        x = rng.normal(1.5, 0.4, (n, 30, 40)).astype(np.float32)
        x[rng.random(x.shape) < 0.4] = np.nan
        x[:, :3, :3] = np.nan                               # never seen: NaN
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)     # NumPy's "All-NaN slice"
            ref = np.nanmedian(x, axis=0)
        np.testing.assert_array_equal(nanmedian0(x), ref)   # the same values to the bit, NaN included
        assert np.isnan(nanmedian0(x)[:3, :3]).all()
