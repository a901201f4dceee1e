"""Domain-randomised segmentation stream: parts among clutter, seen by imperfect depth sensors.

Each sample is a pinhole view (size (W, H), focal length 0.75..1.4 W) of 1..7 *parts*
(boxes, capsules, spheres, cylinders: the segmenter's classes, ``CLASSES``) and 0..7
*clutter* objects that are not primitives and must be taken for background:

- cables: chains of 4..13 thin capsules (radius 2..8 mm) bent at random;
- mugs: an upright cylinder with a C-shaped handle of three thin capsules;
- L / T shapes: unions of two flush boxes of one thickness;
- keyboards: a thin plate with a grid of key bumps; papers: a 1 mm sheet, sometimes folded;
- bottles: a body cylinder, a sphere shoulder and a neck cylinder;
- lumps (bags, cloth): 3..6 overlapping spheres.

Framing (per sample): ``normal`` (each part's largest extent 12..60 % of the image width,
as in ``primitives.make_sample``), ``far`` (1..7 %: parts 3..20 px across) or ``mixed``
(log-uniform 1..60 % per part). Parts float at random orientations (mechanism links),
and with probability 0.4 each part after the first is placed touching or overlapping the
previous one (neighbouring links of a mechanism). Background: nothing, a wall, a floor, a
finite table top (a 40 mm slab, with the floor under it) with clutter and parts resting on
it, or a table and a wall.

Sensors (``noise``): ``none`` (exact z-depth, 1 mm quantisation), ``realsense`` (
``sensor.random_realsense`` and ``sensor.apply_realsense_noise``: sigma = k z^2, flying
pixels and holes at depth edges, disparity quantisation) or ``kinect`` (the same model
with a 75 mm baseline, 1/8 px disparity steps, k = 0.0012..0.003 /m, and with
probability 1/2 a 2x2 block structure); both real sensors also get IR shadows (readings
lost beside the near side of an object, the band as wide as the projector-camera
parallax f b (1/z_near - 1/z_far) px) and missing returns on dark or shiny surfaces (per
object with probability 0.2: random blotches, or the specular patch facing the camera).
``mixed`` draws none / realsense / kinect with probabilities 0.25 / 0.4 / 0.35.

Rendering is the project's analytic ray caster (``vid2sim.models.render.depth.DepthRenderer``
with the camera at the world origin), so this module needs neither Open3D nor a GPU. No
colour image is rendered (``rgb`` is black): the segmenter's input is the normal map of the
depth. Masks are the parts' visible pixels of the exact render (before sensor holes);
parts with fewer than ``min_pixels`` visible pixels are dropped. Samples are a pure
function of ``(seed, index)``.
"""
from __future__ import annotations

import math

import cv2
import numpy as np

from vid2sim.datasets.recording import Camera
from vid2sim.datasets.shapes import CLASSES, Shape
from vid2sim.datasets.synthetic.primitives import PrimitiveSample, _random_dims, _random_rotation, primitive_extents
from vid2sim.datasets.synthetic.sensor import RealSenseNoise, apply_realsense_noise, random_realsense

NOISES = ("none", "realsense", "kinect", "mixed")
FRAMINGS = ("normal", "far", "mixed")
CLUTTER = ("cable", "mug", "angle", "keyboard", "paper", "bottle", "lump")

Piece = tuple[str, tuple[float, ...], np.ndarray]  # (kind, dims as in primitives._random_dims, T cam<-body 4x4)


def _frame_z(n: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(3, 3) rotation whose third column is the unit vector n, spun at random about it."""
    n = n / np.linalg.norm(n)
    a = np.array([1.0, 0, 0]) if abs(n[0]) < 0.9 else np.array([0, 1.0, 0])
    x = np.cross(n, a)
    x /= np.linalg.norm(x)
    y = np.cross(n, x)
    phi = rng.uniform(0, 2 * math.pi)
    x, y = math.cos(phi) * x + math.sin(phi) * y, -math.sin(phi) * x + math.cos(phi) * y
    return np.stack([x, y, n], 1)


def _pose(R: np.ndarray, t: np.ndarray) -> np.ndarray:
    T = np.eye(4)
    T[:3, :3], T[:3, 3] = R, t
    return T


def _shape(kind: str, dims: tuple[float, ...], name: str) -> Shape:
    if kind == "box":
        return Shape(name, "box", size=tuple(float(x) for x in dims))
    if kind == "sphere":
        return Shape(name, "sphere", radius=float(dims[0]))
    return Shape(name, kind, radius=float(dims[0]), length=float(dims[1]))


def render_pieces(pieces: list[Piece], K: np.ndarray, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Exact first hits of camera-frame pieces: depth (H, W) float32 m (0 = none), piece ids (H, W) (-1 = none)."""
    from vid2sim.models.render.depth import DepthRenderer

    w, h = size
    cam = Camera(w, h, float(K[0, 0]), float(K[1, 1]), float(K[0, 2]), float(K[1, 2]))
    shapes = [_shape(k, d, f"p{i}") for i, (k, d, _) in enumerate(pieces)]
    return DepthRenderer(cam, shapes).render(np.stack([T for _, _, T in pieces]))


# ---------------------------------------------------------------- support (floor, table, wall)

class Support:
    """A plane {p : n . p + h = 0} in the camera frame: n the unit normal on the camera's side
    (up for a floor or table top, towards the camera for a wall), h > 0 the camera's distance to it."""

    def __init__(self, n: np.ndarray, h: float):
        self.n, self.h = n / np.linalg.norm(n), float(h)

    def point_at(self, K: np.ndarray, uv: np.ndarray) -> np.ndarray | None:
        """Where the ray of pixel uv meets the plane, or None if it does not (in front)."""
        d = np.array([(uv[0] - K[0, 2]) / K[0, 0], (uv[1] - K[1, 2]) / K[1, 1], 1.0])
        nd = float(self.n @ d)
        if nd >= -1e-3:
            return None
        return d * (-self.h / nd)

    def slab(self, centre: np.ndarray, size: tuple[float, float], rng: np.random.Generator, t: float) -> Piece:
        """A box of thickness t whose top face lies in the plane, centred under ``centre``."""
        R = _frame_z(self.n, rng)
        c = centre - self.n * (float(self.n @ centre) + self.h) - self.n * t / 2
        return ("box", (size[0], size[1], t), _pose(R, c))


def resting(kind: str, dims: tuple[float, ...], sup: Support, p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Pose (4, 4) of a primitive resting on ``sup`` at the plane point p: a box on a random face,
    a capsule or cylinder on its side (a cylinder upright with probability 0.3), a sphere."""
    n = sup.n
    if kind == "box":
        k = int(rng.integers(3))
        Rz = _frame_z(n, rng)  # right-handed (x, y, n): a cyclic permutation puts n in column k
        R = np.stack([Rz[:, (j - k + 2) % 3] for j in range(3)], 1)
        return _pose(R, p + n * dims[k] / 2)
    if kind == "sphere":
        return _pose(_random_rotation(rng), p + n * dims[0])
    if kind == "cylinder" and rng.random() < 0.3:
        return _pose(_frame_z(n, rng), p + n * dims[1] / 2)
    return _pose(_frame_z(_frame_z(n, rng)[:, 0], rng), p + n * dims[0])  # axis in the plane


# ---------------------------------------------------------------- clutter objects

def _on(sup: Support | None, p: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(up vector, base point) of a clutter object: the support's up, or a random tilt when floating."""
    if sup is not None:
        return sup.n, p
    return _random_rotation(rng)[:, 2], p


def cable(p, s, sup, rng) -> list[Piece]:
    up, p = _on(sup, p, rng)
    r = s * rng.uniform(0.002, 0.008)
    d = _frame_z(up, rng)[:, 0]
    out, pos = [], p + up * r
    for _ in range(int(rng.integers(4, 14))):
        L = s * rng.uniform(0.03, 0.1)
        ang = rng.normal(0, 0.5)
        d = math.cos(ang) * d + math.sin(ang) * np.cross(up, d)
        if sup is None:
            d = d + rng.normal(0, 0.3, 3)
        d /= np.linalg.norm(d)
        out.append(("capsule", (r, L), _pose(_frame_z(d, rng), pos + d * L / 2)))
        pos = pos + d * L
    return out


def mug(p, s, sup, rng) -> list[Piece]:
    up, p = _on(sup, p, rng)
    R = _frame_z(up, rng)
    rb, hb = s * rng.uniform(0.03, 0.05), s * rng.uniform(0.07, 0.12)
    c = p + up * hb / 2
    out = [("cylinder", (rb, hb), _pose(R, c))]
    side, rh = R[:, 0], s * rng.uniform(0.005, 0.009)
    a, b = c + side * rb + up * hb * 0.3, c + side * rb - up * hb * 0.3
    e = side * s * rng.uniform(0.025, 0.04)
    for q0, q1 in ((a, a + e), (a + e, b + e), (b + e, b)):
        v = q1 - q0
        out.append(("capsule", (rh, float(np.linalg.norm(v))), _pose(_frame_z(v, rng), (q0 + q1) / 2)))
    return out


def angle(p, s, sup, rng) -> list[Piece]:
    """An L or T: two flush boxes of one thickness t, lying on the support."""
    up, p = _on(sup, p, rng)
    R = _frame_z(up, rng)
    t = s * rng.uniform(0.01, 0.06)
    a, b = s * rng.uniform(0.1, 0.4), s * rng.uniform(0.1, 0.35)
    wa, wb = s * rng.uniform(0.02, 0.08), s * rng.uniform(0.02, 0.08)
    c = p + up * t / 2
    out = [("box", (a, wa, t), _pose(R, c))]
    off = rng.choice([-1, 1]) * (a / 2 - wb / 2) if rng.random() < 0.5 else rng.uniform(-0.3, 0.3) * a
    out.append(("box", (wb, b, t), _pose(R, c + R[:, 0] * off + R[:, 1] * (wa / 2 + b / 2 - 1e-4))))
    return out


def keyboard(p, s, sup, rng) -> list[Piece]:
    up, p = _on(sup, p, rng)
    R = _frame_z(up, rng)
    L, W, t = s * rng.uniform(0.25, 0.45), s * rng.uniform(0.1, 0.16), s * rng.uniform(0.012, 0.03)
    c = p + up * t / 2
    out = [("box", (L, W, t), _pose(R, c))]
    rows, cols = int(rng.integers(3, 6)), int(rng.integers(6, 13))
    k, hk = 0.8 * min(L / cols, W / rows), s * rng.uniform(0.004, 0.012)
    for i in range(rows):
        for j in range(cols):
            q = c + up * (t / 2 + hk / 2) + R[:, 0] * ((j + 0.5) / cols - 0.5) * L + R[:, 1] * ((i + 0.5) / rows - 0.5) * W
            out.append(("box", (k, k, hk), _pose(R, q)))
    return out


def paper(p, s, sup, rng) -> list[Piece]:
    up, p = _on(sup, p, rng)
    R = _frame_z(up, rng)
    a, b, t = s * 0.21 * rng.uniform(0.5, 1.5), s * 0.297 * rng.uniform(0.5, 1.5), 0.001
    out = [("box", (a, b, t), _pose(R, p + up * t / 2))]
    if rng.random() < 0.5:  # a folded-up flap along one edge
        th = rng.uniform(0.3, 1.2)
        fl = b * rng.uniform(0.15, 0.4)
        d = math.cos(th) * R[:, 1] + math.sin(th) * up
        Rf = np.stack([R[:, 0], d, np.cross(R[:, 0], d)], 1)
        out.append(("box", (a, fl, t), _pose(Rf, p + R[:, 1] * b / 2 + d * fl / 2)))
    return out


def bottle(p, s, sup, rng) -> list[Piece]:
    up, p = _on(sup, p, rng)
    R = _frame_z(up, rng)
    r, h = s * rng.uniform(0.025, 0.045), s * rng.uniform(0.12, 0.25)
    rn, hn = r * rng.uniform(0.3, 0.45), s * rng.uniform(0.03, 0.07)
    return [("cylinder", (r, h), _pose(R, p + up * h / 2)), ("sphere", (r * 0.98,), _pose(R, p + up * h)),
            ("cylinder", (rn, hn + r), _pose(R, p + up * (h + (hn + r) / 2)))]


def lump(p, s, sup, rng) -> list[Piece]:
    up, p = _on(sup, p, rng)
    R = _frame_z(up, rng)
    out = []
    for _ in range(int(rng.integers(3, 7))):
        r = s * rng.uniform(0.03, 0.09)
        q = p + R @ np.array([rng.normal(0, 0.06 * s), rng.normal(0, 0.06 * s), r * 0.8])
        out.append(("sphere", (r,), _pose(np.eye(3), q)))
    return out


MAKERS = {"cable": cable, "mug": mug, "angle": angle, "keyboard": keyboard, "paper": paper, "bottle": bottle,
          "lump": lump}


# ---------------------------------------------------------------- sensors

def kinect_noise(rng: np.random.Generator) -> RealSenseNoise:
    """A Kinect-like structured-light model: 75 mm baseline, 1/8 px disparity steps."""
    return RealSenseNoise(depth_sigma_k=float(rng.uniform(0.0012, 0.003)), edge_dropout=float(rng.uniform(0.3, 0.9)),
                          flying=float(rng.uniform(0.0, 0.3)), baseline=0.075, subpixel=0.125,
                          max_range=float(rng.uniform(4.0, 8.0)))


def ir_shadow(depth: np.ndarray, fx: float, baseline: float, side: int) -> np.ndarray:
    """(H, W) bool: pixels the projector cannot light because a nearer surface, up to
    fx b (1/z_near - 1/z) px away on ``side`` (+1: to the right, -1: to the left), blocks it."""
    valid = depth > 0
    if not valid.any():
        return np.zeros(depth.shape, bool)
    zmin, zmax = float(depth[valid].min()), float(depth[valid].max())
    S = min(60, int(math.ceil(fx * baseline * (1 / zmin - 1 / zmax))))
    out = np.zeros(depth.shape, bool)
    inv = np.where(valid, 1.0 / np.maximum(depth, 1e-6), 0.0)
    for s in range(1, S + 1):
        zq = np.zeros_like(depth)
        iq = np.zeros_like(inv)
        if side > 0:
            zq[:, :-s], iq[:, :-s] = depth[:, s:], inv[:, s:]
        else:
            zq[:, s:], iq[:, s:] = depth[:, :-s], inv[:, :-s]
        out |= valid & (zq > 0) & (zq < 0.97 * depth) & (s <= fx * baseline * (iq - inv))
    return out


def lost_returns(depth: np.ndarray, ids: np.ndarray, K: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(H, W) bool: readings lost on dark (random blotches) or shiny (facing the camera)
    surfaces; each piece id is dark or shiny with probability 0.1 each."""
    from vid2sim.models.segmenter.normals import depth_to_normals

    h, w = depth.shape
    out = np.zeros((h, w), bool)
    nz = None
    for i in np.unique(ids[ids >= 0]):
        u = rng.random()
        if u < 0.1:
            field = cv2.resize(rng.random((6, 8)).astype(np.float32), (w, h), interpolation=cv2.INTER_CUBIC)
            out |= (ids == i) & (field < rng.uniform(0.2, 0.7))
        elif u < 0.2:
            if nz is None:
                nz = depth_to_normals(depth, K, smooth=False)[..., 2]
            out |= (ids == i) & (nz < -math.cos(math.radians(rng.uniform(8, 25))))
    return out


def sense(depth: np.ndarray, ids: np.ndarray, K: np.ndarray, noise: str, rng: np.random.Generator) -> np.ndarray:
    """Exact depth (H, W) m -> what sensor ``noise`` (none | realsense | kinect) reads, 1 mm steps."""
    out = depth
    if noise != "none":
        model = random_realsense(rng) if noise == "realsense" else kinect_noise(rng)
        lost = ir_shadow(depth, float(K[0, 0]), model.baseline, int(rng.choice([-1, 1])))
        lost |= lost_returns(depth, ids, K, rng)
        out = apply_realsense_noise(depth, rng, model, float(K[0, 0]))
        if noise == "kinect" and rng.random() < 0.5:
            h, w = depth.shape
            out = cv2.resize(cv2.resize(out, (w // 2, h // 2), interpolation=cv2.INTER_NEAREST), (w, h),
                             interpolation=cv2.INTER_NEAREST)
        out = np.where(lost, 0.0, out)
    return (np.round(out * 1000.0) / 1000.0).astype(np.float32)


# ---------------------------------------------------------------- scenes

def _ray(K: np.ndarray, uv: np.ndarray) -> np.ndarray:
    return np.array([(uv[0] - K[0, 2]) / K[0, 0], (uv[1] - K[1, 2]) / K[1, 1], 1.0])


def _frac(framing: str, rng: np.random.Generator) -> float:
    """A part's largest extent as a fraction of the image width."""
    if framing == "normal":
        return float(rng.uniform(0.12, 0.6))
    if framing == "far":
        return float(rng.uniform(0.01, 0.07))
    return float(np.exp(rng.uniform(np.log(0.01), np.log(0.6))))


def _support(bg: str, z0: float, scale: float, rng: np.random.Generator) -> Support | None:
    if bg not in ("floor", "table", "table_wall"):
        return None
    th, roll = rng.uniform(0.15, 1.1), rng.uniform(-0.15, 0.15)
    n = np.array([-math.sin(roll) * math.cos(th), -math.cos(roll) * math.cos(th), -math.sin(th)])
    return Support(n, z0 * math.sin(th) * rng.uniform(0.8, 1.2))


def _parts(n: int, framing: str, z0: float, K, size, sup, rng) -> list[tuple[int, tuple, np.ndarray]]:
    """(class index, dims, pose) of n parts: floating, resting on ``sup``, or touching the previous one."""
    w, h = size
    f = K[0, 0]
    centre = rng.uniform([0.2 * w, 0.2 * h], [0.8 * w, 0.8 * h])
    out = []
    for i in range(n):
        ci = int(rng.integers(len(CLASSES)))
        kind = CLASSES[ci]
        d = _random_dims(kind, rng, 1.0)
        z = z0 * rng.uniform(0.8, 1.25)
        ext = max(primitive_extents(kind, d))
        want = _frac(framing, rng) * w * z / f
        d = tuple(x * want / ext for x in d)
        ext = want
        if framing == "far":
            uv = centre + rng.uniform(-0.12 * w, 0.12 * w, 2)
        else:
            uv = rng.uniform([0.08 * w, 0.08 * h], [0.92 * w, 0.92 * h])
        p = sup.point_at(K, uv) if sup is not None and rng.random() < 0.3 else None
        if out and rng.random() < 0.4:  # touching or overlapping the previous part
            _, dp, Tp = out[-1]
            e = max(primitive_extents(CLASSES[out[-1][0]], dp))
            v = rng.normal(size=3) * [1, 1, 0.3]
            T = _pose(_random_rotation(rng), Tp[:3, 3] + v / np.linalg.norm(v) * (e + ext) / 2 * rng.uniform(0.4, 0.9))
        elif p is not None:
            T = resting(kind, d, sup, p, rng)
        else:
            T = _pose(_random_rotation(rng), _ray(K, uv) * z)
        if sup is not None:  # above the support plane
            gap = float(sup.n @ T[:3, 3]) + sup.h
            if gap < ext / 2 and p is None:
                T[:3, 3] += sup.n * (ext / 2 - gap)
        out.append((ci, d, T))
    return out


def _clutter(m: int, framing: str, z0: float, K, size, sup, rng) -> list[Piece]:
    w, h = size
    out: list[Piece] = []
    for _ in range(m):
        kind = CLUTTER[int(rng.integers(len(CLUTTER)))]
        z = z0 * rng.uniform(0.5, 1.3)
        s = _frac(framing, rng) * w * z / K[0, 0] / 0.25
        p = None
        if sup is not None and rng.random() < 0.8:
            for _ in range(5):
                p = sup.point_at(K, rng.uniform([0, 0.2 * h], [w, h]))
                if p is not None:
                    s *= p[2] / z
                    break
        if p is None:
            out += MAKERS[kind](_ray(K, rng.uniform([0, 0], [w, h])) * z, s, None, rng)
        else:
            out += MAKERS[kind](p, s, sup, rng)
    return out


def _background(bg: str, sup: Support | None, pieces: list[Piece], K, size, scale: float, rng) -> list[Piece]:
    """Slabs of the floor, table top (and the floor under it) and wall behind ``pieces``."""
    out: list[Piece] = []
    if sup is not None:
        w, h = size
        p = sup.point_at(K, np.array([w / 2, h * rng.uniform(0.5, 0.9)]))
        p = p if p is not None else -sup.n * sup.h
        if bg == "floor":
            out.append(sup.slab(p, (60.0, 60.0), rng, 0.05))
        else:
            out.append(sup.slab(p + rng.normal(0, 0.1 * scale, 3), (rng.uniform(0.8, 1.6) * scale,
                                                                     rng.uniform(0.6, 1.0) * scale), rng, 0.04))
            out.append(Support(sup.n, sup.h + 0.75 * scale).slab(p, (60.0, 60.0), rng, 0.05))
    if bg in ("wall", "table_wall"):
        zmax = max(float(T[2, 3]) for _, _, T in pieces) if pieces else 2.0
        tilt = rng.uniform(-0.4, 0.4, 2)
        n = np.array([math.sin(tilt[0]), math.sin(tilt[1]), -1.0])
        n /= np.linalg.norm(n)
        zw = zmax + rng.uniform(0.1, 1.5) * scale
        out.append(Support(n, zw * -n[2]).slab(np.array([0, 0, zw]), (60.0, 60.0), rng, 0.05))
    return out


def make_clutter_sample(index: int, seed: int = 0, size: tuple[int, int] = (320, 240), noise: str = "mixed",
                        min_pixels: int = 8, framing: str | None = None) -> PrimitiveSample:
    """Render sample ``index`` of stream ``seed`` (size = (W, H)); noise one of NOISES,
    framing one of FRAMINGS or None (normal / far / mixed with probabilities 0.55 / 0.2 / 0.25)."""
    rng = np.random.default_rng([seed, index, 0xC1])
    w, h = size
    f = rng.uniform(0.75, 1.4) * w
    K = np.array([[f, 0, (w - 1) / 2 + rng.uniform(-5, 5)], [0, f, (h - 1) / 2 + rng.uniform(-5, 5)], [0, 0, 1.0]])
    if noise == "mixed":
        noise = str(rng.choice(["none", "realsense", "kinect"], p=[0.25, 0.4, 0.35]))
    framing = framing or str(rng.choice(FRAMINGS, p=[0.55, 0.2, 0.25]))
    scale = rng.uniform(0.5, 1.6)
    z0 = rng.uniform(0.7, 2.6) * scale * (rng.uniform(1.5, 2.5) if framing == "far" else 1.0)
    bg = str(rng.choice(["none", "wall", "floor", "table", "table_wall"], p=[0.15, 0.15, 0.2, 0.3, 0.2]))
    sup = _support(bg, z0, scale, rng)
    parts = _parts(int(rng.integers(1, 8)), framing, z0, K, size, sup, rng)
    m = int(rng.integers(0, 8)) if rng.random() < 0.85 else 0
    pieces: list[Piece] = [(CLASSES[c], d, T) for c, d, T in parts]
    pieces += _clutter(m, framing, z0, K, size, sup, rng)
    pieces += _background(bg, sup, pieces, K, size, scale, rng)
    depth, ids = render_pieces(pieces, K, size)
    n = len(parts)
    keep = [i for i in range(n) if (ids == i).sum() >= min_pixels]
    masks = np.stack([ids == i for i in keep]) if keep else np.zeros((0, h, w), bool)
    depth = sense(depth, ids, K, noise, rng)
    return PrimitiveSample(depth, np.zeros((h, w, 3), np.uint8), K, masks,
                           np.asarray([parts[i][0] for i in keep], np.int64), [parts[i][1] for i in keep],
                           np.asarray([parts[i][2] for i in keep], float).reshape(-1, 4, 4))
