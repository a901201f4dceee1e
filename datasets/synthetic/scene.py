"""Scene-randomised synthetic recordings (``vid2sim synth NAME --scene random --seed N``).

The default scene (``--scene default``) is one look: a camera fitted close to the
mechanism, a checkerboard floor and back wall, ray casting. A random scene instead
draws, from the seed alone (``numpy.random.default_rng([seed, SCENE_STREAM])``,
independent of the physics' initial-state stream), everything a user filming their
own mechanism varies:

- image size one of ``SIZES`` (320x240 .. 1280x720), vertical field of view
  40-90 deg (square pixels, principal point at the image centre);
- camera azimuth (the mechanism's own view +-40 deg), elevation (its view -10..+25 deg,
  clipped to -5..75) and distance, chosen so that the mechanism's mean mask covers a
  log-uniform 0.5-40 % of the image (planned from the convex hulls of the projected
  bodies, capped where the whole motion must stay in view or the camera would be more
  than ``MAX_DISTANCE_M`` away); the look-at point is shifted off centre by up to 70 %
  of the slack the framing leaves;
- background (``BACKGROUNDS``): ``none`` (nothing in range: depth 0 off the mechanism),
  ``floor``, ``floor_wall`` (a wall behind, turned +-25 deg), ``table`` (a table top
  under / behind the mechanism, its legs and the room floor 0.75 m below). Mechanisms
  that stand on a floor (``Mechanism.floor`` or ``.ground``) never get ``none``, and
  their ``table`` top is their floor;
- 0-5 distractors (boxes, cylinders, spheres of sizes unlike the mechanism's, not in
  shapes.json), a third of them drifting slowly (<= 5 cm/s), resting on the floor or
  table top (or floating when there is none), never intersecting the mechanism's swept
  box (the axis-aligned box of every body's corners over the clip, grown 3 cm);
- part colours (random hues), light direction and ambient share;
- sensor: ``clean`` or ``realsense`` (``sensor.RealSenseNoise`` with seeded
  parameters: sigma = k z^2, holes and flying pixels at depth edges, disparity
  quantisation, a range limit never nearer than the mechanism's far side + 0.5 m);
- renderer: ``raycast`` (Open3D, ``scene_render.SceneRaycaster``) or ``tiny``
  (PyBullet's TinyRenderer, ``scene_render.TinyRenderer``), each with probability 1/2.

truth_masks mark body i as i + 1, the pusher tip as 255 (``TIP_ID``) and distractors as
254 (``DISTRACTOR_ID``); floor, wall and table are 0. truth.json gains a ``scene`` dict
(``scene_factors``): renderer, size, vfov_deg, framing (``far`` < 2 %, ``mid`` 2-10 %,
``close`` > 10 % mean coverage), coverage (mean over frames of the true-mask fraction),
coverage_min / coverage_max, coverage_target, background, distractors (count),
distractors_moving, sensor, distance_m (camera centre to the centre of the swept box),
azimuth_deg, elevation_deg, distractor_id.
"""
from __future__ import annotations

import colorsys
import dataclasses
import math
from dataclasses import dataclass

import cv2
import numpy as np

from vid2sim.datasets.recording import Camera
from vid2sim.datasets.shapes import Shape
from vid2sim.datasets.synthetic.physics import SyntheticTruth
from vid2sim.datasets.synthetic.sensor import RealSenseNoise, random_realsense

SCENE_STREAM = 0x5CE7E  # second entry of the scene RNG's seed sequence
SIZES = ((320, 240), (424, 240), (640, 480), (848, 480), (1280, 720))
VFOV_DEG = (40.0, 90.0)
COVERAGE = (0.005, 0.40)  # target share of the image covered by the mechanism (log-uniform)
BACKGROUNDS = ("none", "floor", "floor_wall", "table")
RENDERERS = ("raycast", "tiny")
SENSORS = ("clean", "realsense")
MIN_DEPTH_M = 0.3  # every swept point at least this far in front of the camera
MAX_DISTANCE_M = 7.0  # camera to swept-box centre, at most
DISTRACTOR_ID = 254  # truth_masks value of a distractor
TABLE_HEIGHT_M = 0.75
SWEPT_MARGIN_M = 0.03


@dataclass(frozen=True)
class Distractor:
    """A static or slowly drifting primitive that is not part of the mechanism.

    shape: its primitive (capsule/cylinder axis along its z); T0: (4, 4) world pose at
    frame 0; velocity: (3,) m/s world drift (zeros: static); colour: RGB in [0, 1].
    """

    shape: Shape
    T0: np.ndarray
    velocity: np.ndarray
    colour: tuple[float, float, float]

    @property
    def moving(self) -> bool:
        return bool(np.any(self.velocity != 0))

    def pose(self, t: float) -> np.ndarray:
        T = self.T0.copy()
        T[:3, 3] += self.velocity * t
        return T


@dataclass(frozen=True)
class Scene:
    """Everything a random scene's renderers need (all lengths m, world frame, z up).

    floor_z: height of the floor plane (None: no floor); wall: (unit normal pointing at
    the camera (3,), offset c) of the plane n.p = c (None: no wall); table: (centre (3,)
    of the top box, size (3,)) or None; colours: per body RGB in [0, 1] (truth order);
    light: unit world direction towards the light; ambient: share of unlit brightness;
    void_colour: RGB of pixels that see nothing; noise: None (clean) or the sensor model.
    """

    seed: int
    camera: Camera
    renderer: str
    background: str
    floor_z: float | None
    wall: tuple[np.ndarray, float] | None
    table: tuple[np.ndarray, np.ndarray] | None
    distractors: tuple[Distractor, ...]
    colours: tuple[tuple[float, float, float], ...]
    light: np.ndarray
    ambient: float
    void_colour: tuple[float, float, float]
    noise: RealSenseNoise | None
    vfov_deg: float
    azimuth_deg: float
    elevation_deg: float
    distance_m: float
    coverage_target: float


# ---------------------------------------------------------------- geometry helpers

def _box_corners(shape: Shape) -> np.ndarray:
    return shape.corners()


def swept_points(st: SyntheticTruth) -> np.ndarray:
    """(N, 3) world points bounding the clip: every body's box corners at every frame (and the tip)."""
    pts = []
    for m, b in enumerate(st.truth["bodies"]):
        c = _box_corners(st.shapes[b["shape"]])
        R, t = st.world_from_body[:, m, :3, :3], st.world_from_body[:, m, :3, 3]
        pts.append((np.einsum("tij,nj->tni", R, c) + t[:, None]).reshape(-1, 3))
    if st.tip_position is not None:
        h = st.truth["tip"]["height"] / 2
        pts += [st.tip_position + [0, 0, h], st.tip_position - [0, 0, h]]
    return np.concatenate(pts)


def hull_mesh_points(shape: Shape) -> np.ndarray:
    """(n, 3) points of a shape (body frame) whose convex hull is the primitive's (to within 1 %)
    or the mesh's (its hull's vertices)."""
    if shape.type == "mesh":
        return np.asarray(shape.mesh().convex_hull.vertices, float)
    if shape.type == "box":
        return _box_corners(shape)
    a = np.linspace(0, 2 * np.pi, 24, endpoint=False)
    if shape.type == "sphere":
        el = np.linspace(-np.pi / 2, np.pi / 2, 9)
        A, E = np.meshgrid(a, el)
        return shape.radius * np.stack([np.cos(A) * np.cos(E), np.sin(A) * np.cos(E), np.sin(E)], -1).reshape(-1, 3)
    ring = np.stack([shape.radius * np.cos(a), shape.radius * np.sin(a), np.zeros_like(a)], -1)
    h = shape.length / 2
    if shape.type == "cylinder":
        return np.concatenate([ring + [0, 0, h], ring - [0, 0, h]])
    cap = hull_mesh_points(Shape("s", "sphere", radius=shape.radius))
    return np.concatenate([cap + [0, 0, h], cap - [0, 0, h]])


def estimate_coverage(camera: Camera, st: SyntheticTruth, frames: np.ndarray) -> float:
    """Mean share of the image covered by the union of the bodies' projected convex hulls."""
    hulls = [hull_mesh_points(st.shapes[b["shape"]]) for b in st.truth["bodies"]]
    out = []
    for k in frames:
        img = np.zeros((camera.height, camera.width), np.uint8)
        for m, P in enumerate(hulls):
            T = st.world_from_body[k, m]
            uv, z = camera.project(P @ T[:3, :3].T + T[:3, 3])
            if (z <= 0).any():
                continue
            hull = cv2.convexHull(np.round(uv * 16).astype(np.int32))
            cv2.fillConvexPoly(img, hull, 1, lineType=cv2.LINE_8, shift=4)
        out.append(img.mean())
    return float(np.mean(out))


def look_from(target: np.ndarray, azimuth_deg: float, elevation_deg: float, distance: float,
              size: tuple[int, int], vfov_deg: float, fps: float) -> Camera:
    """Pinhole camera ``distance`` from ``target`` (azimuth 0 looks along +y, z up), square pixels."""
    az, el = math.radians(azimuth_deg), math.radians(elevation_deg)
    offset = np.array([math.sin(az) * math.cos(el), -math.cos(az) * math.cos(el), math.sin(el)])
    z = -offset
    x = np.cross(z, [0.0, 0.0, 1.0])
    x /= np.linalg.norm(x)
    T = np.eye(4)
    T[:3, 0], T[:3, 1], T[:3, 2], T[:3, 3] = x, np.cross(z, x), z, np.asarray(target) + distance * offset
    w, h = size
    f = (h / 2.0) / math.tan(math.radians(vfov_deg) / 2)
    return Camera(width=w, height=h, fx=f, fy=f, cx=(w - 1) / 2.0, cy=(h - 1) / 2.0, depth_scale=0.001,
                  fps=float(fps), world_from_camera=T)


def _in_view(camera: Camera, pts: np.ndarray, margin: float = 0.02) -> bool:
    uv, z = camera.project(pts)
    w, h = camera.width, camera.height
    return bool((z > MIN_DEPTH_M).all() and (uv[:, 0] > margin * w).all() and (uv[:, 0] < (1 - margin) * w).all()
                and (uv[:, 1] > margin * h).all() and (uv[:, 1] < (1 - margin) * h).all())


def _shifted(camera: Camera, shift_cam: np.ndarray) -> Camera:
    T = camera.world_from_camera.copy()
    T[:3, 3] += T[:3, :2] @ shift_cam
    return Camera(**{**camera.__dict__, "world_from_camera": T})


# ---------------------------------------------------------------- camera

def _frame_camera(st: SyntheticTruth, rng: np.random.Generator, view: tuple[float, float], fps: float):
    """Size, field of view, direction and distance; returns (camera, factors dict)."""
    size = SIZES[int(rng.integers(len(SIZES)))]
    vfov = float(rng.uniform(*VFOV_DEG))
    az = float(view[0] + rng.uniform(-40, 40))
    el = float(np.clip(view[1] + rng.uniform(-10, 25), -5, 75))
    target_cov = float(np.exp(rng.uniform(np.log(COVERAGE[0]), np.log(COVERAGE[1]))))
    shift = rng.uniform(-0.7, 0.7, 2)
    pts = swept_points(st)
    centre = (pts.min(0) + pts.max(0)) / 2
    probe = np.unique(np.linspace(0, len(st.world_from_body) - 1, 5).round().astype(int))
    d_min = 0.3  # closest distance that keeps the whole motion in view
    while not _in_view(look_from(centre, az, el, d_min, size, vfov, fps), pts) and d_min < 50:
        d_min *= 1.03
    d = max(d_min, 1.0)
    for _ in range(4):  # coverage ~ 1 / d^2
        cov = estimate_coverage(look_from(centre, az, el, d, size, vfov, fps), st, probe)
        d = float(np.clip(d * math.sqrt(max(cov, 1e-6) / target_cov), d_min, max(MAX_DISTANCE_M, d_min)))
    cam = look_from(centre, az, el, d, size, vfov, fps)
    # Off-centre framing: move the camera sideways within the slack the framing leaves.
    uv, _ = cam.project(pts)
    lo, hi = uv.min(0), uv.max(0)
    wh = np.array(size, float)
    slack = np.minimum(lo - 0.02 * wh, 0.98 * wh - hi).clip(0)
    move = -shift * slack * d / cam.fx
    for scale in (1.0, 0.5, 0.25, 0.0):
        c2 = _shifted(cam, move * scale)
        if _in_view(c2, pts) or scale == 0.0:
            cam = c2
            break
    dist = float(np.linalg.norm(cam.world_from_camera[:3, 3] - centre))
    return cam, {"vfov_deg": vfov, "azimuth_deg": az, "elevation_deg": el, "distance_m": dist,
                 "coverage_target": target_cov, "centre": centre, "pts": pts}


# ---------------------------------------------------------------- background and distractors

def _aabb_overlap(lo1, hi1, lo2, hi2) -> bool:
    return bool(np.all(lo1 < hi2) and np.all(lo2 < hi1))


def _random_distractor_shape(rng: np.random.Generator, i: int, mech_shapes: list[Shape]) -> Shape:
    for _ in range(20):
        kind = ("box", "cylinder", "sphere")[int(rng.integers(3))]
        if kind == "box":
            s = Shape(f"distractor{i}", "box", size=tuple(float(x) for x in np.exp(rng.uniform(np.log(0.04), np.log(0.4), 3))))
        elif kind == "sphere":
            s = Shape(f"distractor{i}", "sphere", radius=float(np.exp(rng.uniform(np.log(0.03), np.log(0.18)))))
        else:
            s = Shape(f"distractor{i}", "cylinder", radius=float(np.exp(rng.uniform(np.log(0.02), np.log(0.15)))),
                      length=float(np.exp(rng.uniform(np.log(0.05), np.log(0.4)))))
        e = np.sort(s.extents())
        if all(m.type != s.type or np.abs(np.sort(m.extents()) / e - 1).max() > 0.15 for m in mech_shapes):
            return s
    return s


def _place_distractors(rng, st, cam: Camera, support_z: float | None, table, wall, lo, hi, n: int, duration: float):
    """Up to ``n`` distractors in view, outside the swept box [lo, hi] and each other's boxes, in front of the wall."""
    mech_shapes = [st.shapes[b["shape"]] for b in st.truth["bodies"]]
    placed: list[Distractor] = []
    boxes: list[tuple[np.ndarray, np.ndarray]] = []
    centre = (lo + hi) / 2
    eye = cam.world_from_camera[:3, 3]
    for i in range(n):
        shape = _random_distractor_shape(rng, i, mech_shapes)
        colour = tuple(float(c) for c in colorsys.hsv_to_rgb(rng.random(), rng.uniform(0.1, 0.8), rng.uniform(0.3, 0.95)))
        moving = rng.random() < 1 / 3
        for _ in range(60):
            yaw = rng.uniform(0, 2 * np.pi)
            R = np.array([[math.cos(yaw), -math.sin(yaw), 0], [math.sin(yaw), math.cos(yaw), 0], [0, 0, 1]])
            half = np.abs(R) @ (np.asarray(shape.extents()) / 2)
            if support_z is not None:
                span = max(float(np.linalg.norm(hi[:2] - lo[:2])), 0.5)
                xy = centre[:2] + rng.uniform(-1, 1, 2) * (0.6 * span + 0.4)
                if table is not None and rng.random() < 0.7:  # mostly on the table top
                    tc, ts = table
                    xy = tc[:2] + rng.uniform(-0.45, 0.45, 2) * ts[:2]
                    p = np.array([*xy, tc[2] + ts[2] / 2 + half[2]])
                else:
                    p = np.array([*xy, support_z + half[2]])
                    if table is not None and _aabb_overlap(p - half, p + half, table[0] - table[1] / 2 - [0, 0, 1],
                                                           table[0] + table[1] / 2):
                        continue  # under or through the table
            else:
                u, v = rng.uniform(0.05, 0.95) * cam.width, rng.uniform(0.05, 0.95) * cam.height
                z = float(np.linalg.norm(centre - eye)) * rng.uniform(0.6, 1.6)
                pc = np.array([(u - cam.cx) / cam.fx * z, (v - cam.cy) / cam.fy * z, z])
                p = cam.world_from_camera[:3, :3] @ pc + eye
            vel = np.zeros(3)
            if moving:
                a = rng.uniform(0, 2 * np.pi)
                vel = rng.uniform(0.01, 0.05) * np.array([math.cos(a), math.sin(a), 0.0])
            p_end = p + vel * duration
            blo, bhi = np.minimum(p, p_end) - half, np.maximum(p, p_end) + half
            if _aabb_overlap(blo, bhi, lo - SWEPT_MARGIN_M, hi + SWEPT_MARGIN_M):
                continue
            if any(_aabb_overlap(blo, bhi, a - 0.01, b + 0.01) for a, b in boxes):
                continue
            if wall is not None and min(wall[0] @ p, wall[0] @ p_end) - np.abs(wall[0]) @ half < wall[1] + 0.01:
                continue  # behind or through the wall
            _, zc = cam.project(np.stack([blo, bhi]))
            if (zc < MIN_DEPTH_M).any():
                continue
            uv, _ = cam.project(p)
            if not (0 <= uv[0] < cam.width and 0 <= uv[1] < cam.height):
                continue
            T0 = np.eye(4)
            T0[:3, :3], T0[:3, 3] = R, p
            placed.append(Distractor(shape, T0, vel, colour))
            boxes.append((blo, bhi))
            break
    return tuple(placed)


def _background(rng, st, mech, cam: Camera, lo, hi):
    """(background name, floor_z, wall, table, support_z) of the scene."""
    grounded = mech.floor is not None or mech.ground is not None
    bg = BACKGROUNDS[int(rng.integers(len(BACKGROUNDS)))]
    if bg == "none" and grounded:
        bg = "floor"
    ground = mech.floor.height if mech.floor is not None else mech.ground
    floor_z, wall, table = None, None, None
    fwd = cam.world_from_camera[:3, 2]
    fwd_h = np.array([fwd[0], fwd[1], 0.0])
    fwd_h /= max(float(np.linalg.norm(fwd_h)), 1e-9)
    gap = float(rng.uniform(0.05, 0.6))
    if bg in ("floor", "floor_wall"):
        floor_z = ground if grounded else float(lo[2]) - gap
    if bg == "floor_wall":
        a = math.radians(rng.uniform(-25, 25))
        n = -np.array([fwd_h[0] * math.cos(a) - fwd_h[1] * math.sin(a), fwd_h[0] * math.sin(a) + fwd_h[1] * math.cos(a), 0])
        corners = np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])])
        c = float((corners @ n).min()) - rng.uniform(0.1, 1.5)  # every swept point in front of the wall
        wall = (n, c)
    if bg == "table":
        top_z = ground if grounded else float(lo[2]) - float(rng.uniform(0.02, 0.25))
        back = fwd_h * rng.uniform(0.0, 0.4)  # under, or a little behind the mechanism
        size = np.array([max(rng.uniform(0.8, 1.6), hi[0] - lo[0] + 0.4), max(rng.uniform(0.6, 1.0), hi[1] - lo[1] + 0.4),
                         0.04])
        ctr = np.array([(lo[0] + hi[0]) / 2 + back[0], (lo[1] + hi[1]) / 2 + back[1], top_z - 0.02])
        table = (ctr, size)
        floor_z = top_z - TABLE_HEIGHT_M
    support = None if bg == "none" else (table[0][2] + 0.02 if table is not None else floor_z)
    return bg, floor_z, wall, table, support


def random_scene(st: SyntheticTruth, seed: int, mech, sensor: str | None = None) -> Scene:
    """The random scene of ``seed`` around clip ``st`` of mechanism ``mech``.

    sensor: None (the seed picks ``clean`` or ``realsense``), or force one of SENSORS.
    Deterministic: the same (clip, seed, sensor) always gives the same scene.
    """
    rng = np.random.default_rng([seed, SCENE_STREAM])
    renderer = RENDERERS[int(rng.integers(len(RENDERERS)))]
    cam, f = _frame_camera(st, rng, mech.view, st.fps)
    lo, hi = f["pts"].min(0), f["pts"].max(0)
    bg, floor_z, wall, table, support = _background(rng, st, mech, cam, lo, hi)
    n_distract = int(rng.integers(0, 6))
    duration = len(st.world_from_body) / st.fps
    distractors = _place_distractors(rng, st, cam, support, table, wall, lo, hi, n_distract, duration)
    hue0 = rng.random()
    colours = tuple(tuple(float(c) for c in colorsys.hsv_to_rgb((hue0 + 0.61803 * i + rng.uniform(-0.08, 0.08)) % 1,
                                                                rng.uniform(0.35, 0.95), rng.uniform(0.45, 0.95)))
                    for i in range(len(st.truth["bodies"])))
    back = -cam.world_from_camera[:3, 2]
    light = back + np.array([0, 0, rng.uniform(0.3, 1.5)]) + cam.world_from_camera[:3, 0] * rng.uniform(-0.8, 0.8)
    light /= np.linalg.norm(light)
    ambient = float(rng.uniform(0.2, 0.5))
    void = tuple(float(x) for x in np.full(3, rng.uniform(0.05, 0.3)))
    noise_model = random_realsense(rng)
    _, z = cam.project(f["pts"])  # the mechanism itself is always within the sensor's range
    noise_model = dataclasses.replace(noise_model, max_range=max(noise_model.max_range, float(z.max()) + 0.5))
    picked = SENSORS[int(rng.integers(len(SENSORS)))]
    sensor = sensor or picked
    if sensor not in SENSORS:
        raise ValueError(f"unknown sensor {sensor!r}; choose one of {', '.join(SENSORS)}")
    return Scene(seed=seed, camera=cam, renderer=renderer, background=bg, floor_z=floor_z, wall=wall, table=table,
                 distractors=distractors, colours=colours, light=light, ambient=ambient, void_colour=void,
                 noise=noise_model if sensor == "realsense" else None, vfov_deg=f["vfov_deg"],
                 azimuth_deg=f["azimuth_deg"], elevation_deg=f["elevation_deg"], distance_m=f["distance_m"],
                 coverage_target=f["coverage_target"])


def framing(coverage: float) -> str:
    """Coverage bucket: far (< 2 %), mid (2-10 %), close (> 10 %)."""
    return "far" if coverage < 0.02 else ("mid" if coverage <= 0.10 else "close")


def scene_factors(scene: Scene, coverages: list[float]) -> dict:
    """truth.json's ``scene`` dict; coverages: per frame share of pixels with a body id in the true mask."""
    cov = float(np.mean(coverages)) if coverages else 0.0
    cam = scene.camera
    return {"kind": "random", "seed": scene.seed, "renderer": scene.renderer, "size": [cam.width, cam.height],
            "vfov_deg": round(scene.vfov_deg, 3), "framing": framing(cov), "coverage": round(cov, 6),
            "coverage_min": round(float(np.min(coverages)), 6) if coverages else 0.0,
            "coverage_max": round(float(np.max(coverages)), 6) if coverages else 0.0,
            "coverage_target": round(scene.coverage_target, 6), "background": scene.background,
            "distractors": len(scene.distractors),
            "distractors_moving": sum(d.moving for d in scene.distractors),
            "sensor": "clean" if scene.noise is None else "realsense",
            "distance_m": round(scene.distance_m, 4), "azimuth_deg": round(scene.azimuth_deg, 3),
            "elevation_deg": round(scene.elevation_deg, 3), "distractor_id": DISTRACTOR_ID}
