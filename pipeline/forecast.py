"""Forecast stage: does the twin predict frames no fit saw? (Heiden et al., §4.3.5.2, Table 4.6)

Protocol (the run's split in time, ``pipeline/holdout.py``): the last ``holdout`` of the
frames are held back; identify fitted the frames before them (params_train.json). The
twin of that fit, with joint limits from the fitted frames' tracks only, is restarted
from the state estimated over the last ``observe`` fitted frames and simulated over
every held-back frame (at most ``horizon``). Its rendered depth is scored by MSE, MAE
and SSIM (Wang et al. 2004, 11x11 Gaussian window, sigma 1.5) against the recorded
frames, and its silhouette by IoU against the tracked silhouettes of the held-back
frames. Depth is normalised to [0, 1] over the scene's depth range (the 1st..99th
percentile of valid readings in the observed frames); pixels where the real frame has
no reading are 0 in every image compared, so sensor holes score no method.

* State estimate (``simulate_twin``): the joint coordinates of joint_positions.npz
  (model.urdf's) and the floating root's pose; a quadratic fit at the first observed
  frame is the initial guess, refined by single shooting: the state whose PyBullet
  simulation best matches the tracked body poses over the observed frames
  (Levenberg-Marquardt over growing windows, ``shoot_state``, ``pose_residual``). With a
  floor, the observed frames start after the last floor contact among them (``after_contact``).
* Simulator: PyBullet on ``model.urdf`` (the exported twin; default motors disabled,
  no extra link damping, URDF joint damping, Coulomb friction as a zero-velocity motor
  of force = friction), 960 Hz substeps, 100 solver iterations. A floor z = 0 (friction
  and restitution ``floor.friction``/``floor.restitution`` from params.json, else 0.5
  and 0; compliant if ``floor.stiffness`` is given, see ``default_floor``) is added when
  the articulation has a free or planar joint. A pusher that is not part of the twin can
  be replayed (``Tip``) by callers that know it.
* Renderer: our own ray caster over the library primitives
  (``vid2sim.models.render.primitives.ray_hit``) with the recording's camera; the
  static background (everything not the mechanism) is the per-pixel median of the
  frames observed so far where the tracked mechanism is absent.
* Posterior forecast: the same for up to ``particles`` parameter draws of params_train.json's
  posterior (``forecast_band.posterior_parameters``); the per-pixel mean and standard deviation are saved and the mean
  is scored too; their joint coordinates give the 90 % predictive band beside the tracked
  held-back frames (``forecast_band.py``, forecast.json ``band``).
* Baselines in the same run: ``hold`` (the last fitted frame repeated) and
  ``constvel`` (tracked body poses extrapolated at constant linear and angular
  velocity, rendered the same way).

Outputs: forecast.npz (predicted, mean and spread depth frames, float32 metres, 0 = no
reading), forecast.json (settings, metrics, renderer, simulator), and forecast.mp4
(observed | predicted | |error|). It deliberately fits no dynamics parameter.
"""
from __future__ import annotations

import json
import logging
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import cv2
import numpy as np
from scipy.spatial.transform import Rotation
from tqdm import tqdm

from vid2sim.datasets.errors import RecordingError
from vid2sim.datasets.recording import Recording
from vid2sim.datasets.shapes import Shape
from vid2sim.pipeline import export, forecast_band
from vid2sim.pipeline.artifacts import ArtifactError, Articulation, JointPositions, PoseTracks, Posterior
from vid2sim.datasets.atomic import atomic_path, write_json, write_npz
from vid2sim.pipeline.holdout import fit_frames
from vid2sim.models.bullet import BulletTwin, Effort, Floor, Tip  # noqa: F401 (BulletTwin, Effort, Tip: forecast's API)
from vid2sim.models.render.depth import DepthRenderer, background_from, composite

log = logging.getLogger(__name__)

RENDERER = "vid2sim.models.render.primitives.ray_hit (ray casting of library primitives)"
SIMULATOR = "pybullet (model.urdf)"


@dataclass(frozen=True)
class ForecastConfig:
    """Settings of the forecast stage."""

    holdout: float = 0.25  # last fraction of the frames held back from identify and predicted here, in [0, 1)
    observe: int = 10      # last fitted frames the restart state is estimated from
    horizon: int = 0       # at most this many held-back frames predicted (0: all of them)
    particles: int = 8     # posterior particles simulated for the mean/spread forecast (0: none)
    sim_hz: float = 960.0  # PyBullet substep rate
    video: bool = True     # write forecast.mp4 (observed | predicted | error)

    def __post_init__(self):
        if not 0.0 <= self.holdout < 1.0:
            raise ValueError(f"forecast.holdout must be in [0, 1); got {self.holdout}")
        if self.observe < 1 or self.horizon < 0 or self.particles < 0 or self.sim_hz <= 0:
            raise ValueError("forecast: observe must be >= 1, horizon and particles >= 0, sim_hz > 0")


@dataclass(frozen=True)
class Forecast:
    """predicted/mean/spread: (N, H, W) depth in metres (0 = no reading) of frames ``frames``."""

    frames: np.ndarray  # (N,) recording frame indices predicted
    predicted: np.ndarray  # (N, H, W) twin forecast (parameter estimate)
    mean: np.ndarray | None  # (N, H, W) posterior per-pixel mean (None without particles)
    spread: np.ndarray | None  # (N, H, W) posterior per-pixel standard deviation
    metrics: dict[str, dict[str, float]]  # {"twin"|"hold"|"constvel"|"posterior": {"mse","mae","ssim","iou"}}
    info: dict = field(default_factory=dict)  # settings, depth range, renderer, simulator
    FILES = ("forecast.npz", "forecast.json")

    def save(self, out_dir: str | Path) -> None:
        out_dir = Path(out_dir)
        arrays = {"frames": self.frames.astype(np.int64), "predicted": self.predicted.astype(np.float32)}
        if self.mean is not None:
            arrays.update(mean=self.mean.astype(np.float32), spread=self.spread.astype(np.float32))
        write_npz(out_dir / "forecast.npz", **arrays)
        m = self.metrics.get("twin", {})
        write_json(out_dir / "forecast.json", {"mse": m.get("mse"), "mae": m.get("mae"), "ssim": m.get("ssim"),
                                               "metrics": self.metrics, **self.info})

    @staticmethod
    def load(out_dir: str | Path) -> "Forecast":
        out_dir = Path(out_dir)
        path = out_dir / "forecast.json"
        if not path.exists():
            raise ArtifactError(path, "missing (run the forecast stage first)")
        try:
            d = json.loads(path.read_text())
            with np.load(out_dir / "forecast.npz", allow_pickle=False) as z:
                a = {k: z[k] for k in z.files}
        except (OSError, ValueError) as e:
            raise ArtifactError(path, f"unreadable forecast ({type(e).__name__}: {e})") from None
        info = {k: v for k, v in d.items() if k not in ("mse", "mae", "ssim", "metrics")}
        return Forecast(a["frames"], a["predicted"].astype(np.float32),
                        a["mean"].astype(np.float32) if "mean" in a else None,
                        a["spread"].astype(np.float32) if "spread" in a else None, d.get("metrics", {}), info)


# ----------------------------------------------------------------------------- metrics


def ssim(a: np.ndarray, b: np.ndarray, data_range: float = 1.0) -> float:
    """Mean SSIM of two (H, W) images (Wang et al. 2004; Gaussian 11x11, sigma 1.5)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    blur = lambda x: cv2.GaussianBlur(x, (11, 11), 1.5, borderType=cv2.BORDER_REFLECT)  # noqa: E731
    mu_a, mu_b = blur(a), blur(b)
    saa, sbb, sab = blur(a * a) - mu_a**2, blur(b * b) - mu_b**2, blur(a * b) - mu_a * mu_b
    s = ((2 * mu_a * mu_b + c1) * (2 * sab + c2)) / ((mu_a**2 + mu_b**2 + c1) * (saa + sbb + c2))
    return float(s.mean())


def score(pred: np.ndarray, real: np.ndarray) -> dict[str, float]:
    """pred, real: (N, H, W) in [0, 1] -> mean MSE, MAE and SSIM over frames."""
    d = pred.astype(np.float64) - real.astype(np.float64)
    return {"mse": float(np.mean(d * d)), "mae": float(np.mean(np.abs(d))),
            "ssim": float(np.mean([ssim(p, r) for p, r in zip(pred, real)]))}


def normalise_depth(depth: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Depth (m) mapped to [0, 1] over [lo, hi], float32 of depth's shape; no reading (<= 0) -> 0."""
    out = (depth - lo) / max(hi - lo, 1e-6)
    np.clip(out, 0.0, 1.0, out=out)
    np.copyto(out, 0.0, where=~(depth > 0))
    return out.astype(np.float32, copy=False)


# ----------------------------------------------------------------------------- rendering


def static_background(rec: Recording, renderer: DepthRenderer, poses: PoseTracks, frames: range) -> np.ndarray:
    """(H, W) depth of the scene without the mechanism: median over ``frames`` where it is absent."""
    depths, covers = [], []
    for i in frames:
        _, ids = renderer.render(poses.world_from_body[i])
        depths.append(rec.depth(i))
        covers.append(ids >= 0)
    return background_from(depths, covers)


# ----------------------------------------------------------------------------- state + simulation


def fit_state(x: np.ndarray, dt: float, at: int = -1, deg: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """x: (n, d) samples at spacing dt -> value and rate (d,) at sample ``at`` (polynomial fit)."""
    n = x.shape[0]
    at = at % n
    t = (np.arange(n) - at) * dt
    deg = min(deg, n - 1)
    if deg < 1:
        return x[at].copy(), np.zeros(x.shape[1])
    coef, *_ = np.linalg.lstsq(np.vander(t, deg + 1), x, rcond=None)
    return coef[-1], coef[-2]


def fit_root(root_pose: np.ndarray, dt: float, at: int = -1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """root_pose: (n, 7) xyz + xyzw -> pose (7,), linear velocity (3,), angular velocity (3,) world."""
    p, v = fit_state(root_pose[:, :3], dt, at)
    rots = Rotation.from_quat(root_pose[:, 3:])
    rel = (rots * rots[at].inv()).as_rotvec()  # world-frame rotation vectors relative to sample ``at``
    r, w = fit_state(rel, dt, at)
    return np.concatenate([p, (Rotation.from_rotvec(r) * rots[at]).as_quat()]), v, w


def link_body_offsets(art: Articulation, poses: PoseTracks) -> dict[str, np.ndarray]:
    frames = export.link_frames(art, poses)
    idx = {b: i for i, b in enumerate(poses.body_names)}
    return {b: np.linalg.inv(frames[b]) @ poses.world_from_body[0, idx[b]] for b in art.bodies}


def default_floor(art: Articulation, post: Posterior | None) -> Floor | None:
    """A floor at z = 0 when something is unconstrained (free or planar joint), else None.

    Its coefficients come from params.json: ``extra["floor_bullet"]``'s friction and
    restitution where identify calibrated them in PyBullet, else ``floor.friction`` (else
    0.5), ``floor.restitution`` (else 0); for compliant contacts, ``floor.stiffness`` /
    ``floor.damping`` (else rigid). The identify stage does not estimate them. Compliance
    matters for parts lying flat on the floor: on a rigid floor they are statically
    indeterminate and Bullet's answer depends on contact history that a restart from a
    tracked state cannot restore (synthetic pushed, true model restarted at frame 20: 42 mm
    from the uninterrupted run on a rigid floor, 0.03 mm on its compliant one); a rigid
    floor where the world's is compliant, or the reverse, changes how bodies bounce
    (synthetic thrown: silhouette IoU 1.00 -> 0.20 with a 10 kN/m floor in the twin)."""
    if not any(j.type in ("free", "planar") for j in art.joints):
        return None
    est = dict(post.estimate) if post is not None else {}
    bullet = post.extra.get("floor_bullet") if post is not None else None
    if bullet:   # calibrated in PyBullet itself (identify_floor): the penalty model's values are biased here
        est.update({"floor.friction": bullet["friction"], "floor.restitution": bullet["restitution"]})
    k = est.get("floor.stiffness")
    return Floor(0.0, est.get("floor.friction", 0.5), est.get("floor.restitution", 0.0),
                 float(k) if k else None, float(est.get("floor.damping", 0.0)) if k else None)


def simulate_twin(urdf_path: str | Path, art: Articulation, poses: PoseTracks, at: int, steps: int, fps: float,
                  observe: int = 10, sim_hz: float = 960.0, floor: Floor | None = None, tip: Tip | None = None,
                  shoot: bool = True, jp: JointPositions | None = None,
                  shapes: dict[str, Shape] | None = None, effort: Effort | None = None) -> np.ndarray:
    """Body poses (steps, M, 4, 4), bodies in ``art.bodies`` order, row k = frame ``at + 1 + k``.
    ``tip`` and ``effort`` (recorded rows, frame-indexed) are replayed through the fitted window and on.

    State estimation from the tracked frames ``lo .. at``, ``lo = at-observe+1`` or, with a
    floor and ``shapes``, the first frame after the window's last floor contact where that
    leaves ``SHOOT_FIRST`` frames (``after_contact``: an impact's outcome depends on contact
    details the twin need not match, a flight does not): a quadratic fit of the joint
    coordinates (and the floating root's pose) at ``lo`` as the initial guess, refined by
    single shooting (``shoot``, ``Restart.fit``): the state at ``lo`` whose simulation best
    matches the tracked body poses over the window, which is far less biased than a
    polynomial's derivative at the window's end. The twin is then simulated from ``lo``
    through the window and on for ``steps`` frames.
    Joint coordinates are ``jp``'s (articulate's, model.urdf's convention), else computed
    from the tracks by ``export.joint_coordinates``. With ``shapes`` (the library), the
    shooting residual ignores what a body's shape does not show: a capsule's or cylinder's
    spin about its axis, a sphere's orientation.
    """
    lo = max(0, at - observe + 1)
    if jp is not None:
        names, Q, R = list(jp.names), jp.q, jp.root_pose
    else:
        names, Q = export.joint_coordinates(art, poses)
        R = export.root_poses(art, poses)
    order = [poses.body_names.index(b) for b in art.bodies]
    body_shapes = [shapes[poses.shape_names[i]] for i in order] if shapes else None
    kinds = [s.type for s in body_shapes] if body_shapes else ["box"] * len(order)
    if floor is not None and body_shapes:
        lo = after_contact(poses.world_from_body[:at + 1][:, order], body_shapes, floor.height, lo, fps)
    observed = poses.world_from_body[lo:at + 1][:, order]
    twin = BulletTwin(str(urdf_path), link_body_offsets(art, poses), R is not None, floor, sim_hz, tip, effort)
    try:
        restart = Restart(twin, list(art.bodies), names, Q[lo:at + 1], None if R is None else R[lo:at + 1], lo, fps)
        x = restart.fit(observed, kinds) if shoot else restart.x0
        return restart.simulate(x, len(observed) + steps)[len(observed):]
    finally:
        twin.close()


CONTACT_GAP_M = 0.005   # a tracked lowest point within this of the floor (m) counts as touching it
IMPACT_ACCEL = 0.5 * 9.81  # m/s^2: an upward second difference of the lowest point beyond this near the floor is an impact


def after_contact(W: np.ndarray, shapes: list[Shape], height: float, lo: int, fps: float) -> int:
    """W: (T, M, 4, 4) tracked body poses up to the restart frame T-1 -> the first frame after the
    last one in [lo, T-1] that touches the floor z = ``height``, when at least ``SHOOT_FIRST``
    frames follow it; else ``lo``. A frame touches when its lowest body point
    (``identify_roots.lowest_points``) is within ``CONTACT_GAP_M`` of the floor, or within that
    plus the frame's travel while it accelerates upward by more than ``IMPACT_ACCEL`` (an
    impact between samples; the last frame has no second difference)."""
    from vid2sim.pipeline.identify_roots import lowest_points, surface_points

    low = lowest_points(W[lo:], [surface_points(s) for s in shapes]) - height
    travel = np.abs(np.diff(low, prepend=low[0]))
    accel = np.zeros_like(low)
    accel[1:-1] = (low[2:] - 2 * low[1:-1] + low[:-2]) * fps * fps
    touching = np.flatnonzero((low <= CONTACT_GAP_M) | ((accel > IMPACT_ACCEL) & (low <= CONTACT_GAP_M + travel)))
    start = lo + int(touching[-1]) + 1 if touching.size else lo
    return start if len(W) - start >= SHOOT_FIRST else lo


class Restart:
    """A ``BulletTwin`` restarted at frame ``lo`` from a state vector x: joint q, qd (n each)
    and, with a floating root, its position offset (3, m) and rotation vector (3, rad, world)
    from the guess, then its linear and angular velocity (3 + 3, world, about the link
    origin). ``Q`` (K, n) joint coordinates and ``R`` (K, 7) root poses (or None) of frames
    ``lo ..``: the guess ``x0`` is their quadratic fit at ``lo``."""

    def __init__(self, twin: BulletTwin, bodies: list[str], names: list[str], Q: np.ndarray, R: np.ndarray | None,
                 lo: int, fps: float):
        self.twin, self.bodies, self.names, self.lo, self.fps = twin, bodies, names, lo, fps
        q0, qd0 = fit_state(Q, 1.0 / fps, 0)
        self.at_stop = at_stop(twin, names, Q)
        for n in self.at_stop:   # a joint resting on its stop starts within it
            j, (lim_lo, lim_hi) = names.index(n), twin.limits[twin.joint_index[n]]
            q0[j] = min(max(q0[j], lim_lo), lim_hi)
        self.root0 = fit_root(R, 1.0 / fps, 0) if R is not None else None
        r = self.root0
        self.x0 = np.concatenate([q0, qd0] + ([np.zeros(3), np.zeros(3), r[1], r[2]] if r is not None else []))

    def state(self, x: np.ndarray) -> tuple:
        """``BulletTwin.set_state``'s arguments after the names."""
        n = len(self.names)
        if self.root0 is None:
            return x[:n], x[n:2 * n], None, None, None
        p, r, v, w = x[2 * n:2 * n + 3], x[2 * n + 3:2 * n + 6], x[2 * n + 6:2 * n + 9], x[2 * n + 9:2 * n + 12]
        rot = Rotation.from_rotvec(r) * Rotation.from_quat(self.root0[0][3:])
        return x[:n], x[n:2 * n], np.concatenate([self.root0[0][:3] + p, rot.as_quat()]), v, w

    def simulate(self, x: np.ndarray, frames: int) -> np.ndarray:
        """(frames, M, 4, 4) body poses of frames lo, lo + 1, ... from state x."""
        self.twin.set_state(self.names, *self.state(x))
        out = [self.twin.body_poses(self.bodies)]
        for k in range(frames - 1):
            self.twin.step_frame(self.fps, self.lo + k)
            out.append(self.twin.body_poses(self.bodies))
        return np.stack(out)

    def fit(self, observed: np.ndarray, kinds: list[str]) -> np.ndarray:
        """The state x whose simulation best matches ``observed`` (K, M, 4, 4) body poses of
        frames lo .. (``pose_residual``, ``shoot_state``); the guess when K <= 2."""
        if len(observed) <= 2 or not self.x0.size:
            return self.x0
        # without limits: a poor first guess can drive a joint into one, where the
        # residual stops being smooth and the fit stalls; but a joint the window shows at its
        # stop keeps it (without it the fit would explain the pressed joint by a state that
        # swings through the stop once the limits are back)
        self.twin.enable_limits(False, keep=self.at_stop)
        try:
            return shoot_state(lambda x, k: pose_residual(self.simulate(x, k), observed[:k], kinds), self.x0,
                               len(observed))
        finally:
            self.twin.enable_limits(True)


STOP_NEAR = 0.01  # rad or m: a joint observed within this of a URDF limit in the restart window is at its stop


def at_stop(twin: BulletTwin, names: list[str], Q: np.ndarray) -> tuple[str, ...]:
    """The joints of ``names`` whose observed coordinates Q (K, n) come within ``STOP_NEAR`` of one
    of ``twin``'s URDF limits (export puts a limit at the observed extreme of a seen stop)."""
    out = []
    for j, n in enumerate(names):
        lim = twin.limits.get(twin.joint_index.get(n, -1))
        if lim is not None and lim[1] > lim[0] and len(Q) and (
                Q[:, j].min() <= lim[0] + STOP_NEAR or Q[:, j].max() >= lim[1] - STOP_NEAR):
            out.append(n)
    return tuple(out)


SHOOT_FIRST = 3  # frames of the first single-shooting window; each next window doubles, up to the observed ones


def shoot_state(residual, x0: np.ndarray, n: int) -> np.ndarray:
    """The start state x minimising ``residual(x, k)`` over the first k = n observed frames, by
    Levenberg-Marquardt over growing windows k = ``SHOOT_FIRST``, 2x, 4x, ... n, each started
    from the last one's solution. Over a short window the residual is nearly linear in x, so
    the fit does not stall far from the tracks as a fit of the whole window from a
    polynomial guess can (a tumbling free body's spin)."""
    from scipy.optimize import least_squares

    k = min(SHOOT_FIRST, n)
    while True:
        x0 = least_squares(lambda x: residual(x, k), x0, method="lm", diff_step=1e-4,  # PyBullet: float32-level noise
                           x_scale=np.maximum(np.abs(x0), 0.1), max_nfev=40 * x0.size).x
        if k == n:
            return x0
        k = min(2 * k, n)


ROTATION_WEIGHT_M = 0.1  # shooting residual: metres of position error worth one radian of rotation error


def pose_residual(W: np.ndarray, observed: np.ndarray, kinds: list[str]) -> np.ndarray:
    """Residual vector between simulated and observed body poses W, observed (T, M, 4, 4):
    positions (m), and rotations (rad, x ``ROTATION_WEIGHT_M``) as far as body m's shape
    type ``kinds[m]`` shows them: the whole rotation of a box or mesh, the axis direction
    (the body z axis) of a capsule or cylinder, nothing of a sphere."""
    parts = [(W[:, :, :3, 3] - observed[:, :, :3, 3]).ravel()]
    for m, kind in enumerate(kinds):
        if kind == "sphere":
            continue
        if kind in ("capsule", "cylinder"):
            parts.append(ROTATION_WEIGHT_M * np.cross(W[:, m, :3, 2], observed[:, m, :3, 2]).ravel())
        else:
            Rrel = np.einsum("tij,tkj->tik", W[:, m, :3, :3], observed[:, m, :3, :3])
            parts.append(ROTATION_WEIGHT_M * Rotation.from_matrix(Rrel).as_rotvec().ravel())
    return np.concatenate(parts)


def constant_velocity(poses: PoseTracks, at: int, steps: int, observe: int = 10) -> np.ndarray:
    """(steps, M, 4, 4): each body's tracked pose extrapolated at constant linear/angular velocity."""
    W = poses.world_from_body
    lo = max(0, at - observe + 1)
    out = np.repeat(W[at][None], steps, axis=0).copy()
    for m in range(W.shape[1]):
        pose7 = np.concatenate([W[lo:at + 1, m, :3, 3], Rotation.from_matrix(W[lo:at + 1, m, :3, :3]).as_quat()], 1)
        p0, v, w = fit_root(pose7, 1.0)
        # the fit is linear+quadratic; constant velocity uses only the rate at the last frame
        R0 = Rotation.from_quat(p0[3:])
        for k in range(steps):
            out[k, m, :3, 3] = p0[:3] + v * (k + 1)
            out[k, m, :3, :3] = (Rotation.from_rotvec(w * (k + 1)) * R0).as_matrix()
    return out


# ----------------------------------------------------------------------------- the stage


def _particle_urdfs(post: Posterior, art: Articulation, shapes: dict[str, Shape], poses: PoseTracks, n: int,
                    out_dir: Path) -> list[Path]:
    if n <= 0 or post.particles.shape[0] == 0:
        return []
    paths = []
    for k, row in enumerate(forecast_band.posterior_parameters(post, n)):
        est = dict(post.estimate)
        est.update({name: float(v) for name, v in zip(post.names, row)})
        p = Posterior(post.names, post.limits, est, row[None], post.method, post.log_likelihood)
        path = out_dir / f".forecast_particle{k}.urdf"
        path.write_text(export.build_urdf(export.ExportConfig(), art, p, shapes, poses))
        paths.append(path)
    return paths


def write_video(path: Path, observed: np.ndarray, predicted: np.ndarray, fps: float) -> None:
    """observed | predicted | |error| side by side, grey levels = normalised depth."""
    H, W = observed.shape[1:]
    with atomic_path(path, suffix=".mp4") as tmp:
        vw = cv2.VideoWriter(str(tmp), cv2.VideoWriter_fourcc(*"mp4v"), fps, (3 * W, H))
        for o, p in zip(observed, predicted):
            row = np.concatenate([o, p, np.abs(o - p)], axis=1)
            vw.write(cv2.cvtColor((255 * np.clip(row, 0, 1)).astype(np.uint8), cv2.COLOR_GRAY2BGR))
        vw.release()


def mask_iou(pred: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """pred, ref: (N, H, W) bool silhouettes -> (N,) IoU per frame (1 where both are empty)."""
    inter = (pred & ref).reshape(len(pred), -1).sum(1)
    union = (pred | ref).reshape(len(pred), -1).sum(1)
    return np.where(union > 0, inter / np.maximum(union, 1), 1.0)


HOLDOUT_REMEDY = "Set forecast.holdout (e.g. 0.25) on a longer clip."
DEPTH_REMEDY = "Record with a depth camera to validate the twin on held-back frames."


def _not_validated(rec: Recording, cfg: ForecastConfig, frames: int, why: str, remedy: str = HOLDOUT_REMEDY) -> Forecast:
    """A forecast that scores nothing: ``why`` the twin (fitted on frames 0 to ``frames`` - 1) is
    not validated, and ``remedy``, what the user can change, both in its info for the report."""
    log.warning("forecast: the twin is not validated: %s", why)
    empty = np.zeros((0, rec.camera.height, rec.camera.width), np.float32)
    return Forecast(np.zeros(0, np.int64), empty, None, None, {},
                    {"config": asdict(cfg), "validated": False, "why": why, "remedy": remedy,
                     "fitted": [0, frames - 1], "predicted": None, "renderer": RENDERER, "simulator": SIMULATOR})


def _validation_twin(cfg: ForecastConfig, rec: Recording, art: Articulation, jp: JointPositions, fitted: PoseTracks,
                     post: Posterior, at: int, steps: int, out_dir: Path):
    """(sim, W): ``sim(urdf)`` simulates a URDF restarted at frame ``at`` from the fitted frames'
    state (floor and known pusher included) for ``steps`` frames; W (steps, M, 4, 4) is the
    world-from-body poses it gives for the twin of ``post`` built from the fitted frames only."""
    floor = default_floor(art, post)
    from vid2sim.pipeline.identify_push import forecast_tip   # a known pusher replayed with its friction

    from vid2sim.pipeline.identify_effort import forecast_effort   # a known joint effort replayed

    tip, effort = forecast_tip(rec, post), forecast_effort(rec, art, post)
    sim = lambda path: simulate_twin(path, art, fitted, at, steps, rec.fps, cfg.observe, cfg.sim_hz, floor,  # noqa: E731
                                     jp=jp, shapes=rec.shapes, tip=tip, effort=effort)
    urdf = out_dir / ".forecast_train.urdf"
    urdf.write_text(export.build_urdf(export.ExportConfig(), art, post, rec.shapes, fitted))
    try:
        return sim, sim(urdf)
    finally:
        urdf.unlink(missing_ok=True)


def run(cfg: ForecastConfig, rec: Recording, poses: PoseTracks, art: Articulation, jp: JointPositions,
        post: Posterior, out_dir: Path, post_train: Posterior | None = None) -> Forecast:
    """Predict the held-back frames (the last ``cfg.holdout`` of the clip) with the twin fitted on
    the frames before them, restarted from its last fitted state, and score it against the
    real depth and the tracked silhouettes, beside holding the last fitted frame and
    constant velocity. ``post_train`` is identify's fit on those frames (params_train.json;
    None: ``post``). The validation twin's joint limits and start state come from the
    fitted frames only; the held-back frames' tracks serve only as the silhouette reference."""
    out_dir = Path(out_dir)
    if rec.shapes is None:
        raise RecordingError(rec.path, "forecast renders the library shapes and shapes.json is missing")
    T = min(rec.num_frames, poses.num_frames, jp.q.shape[0])
    if not rec.has_depth:
        return _not_validated(rec, cfg, T, "the recording has no depth frames to score a prediction against",
                              DEPTH_REMEDY)
    n_fit = fit_frames(T, cfg.holdout)
    if n_fit >= T:
        return _not_validated(rec, cfg, T, f"nothing held back to predict (forecast.holdout={cfg.holdout} on {T} frames)")
    at = n_fit - 1  # last fitted frame: the restart
    start = max(0, at - cfg.observe + 1)
    steps = min(cfg.horizon, T - 1 - at) if cfg.horizon else T - 1 - at
    fps = rec.fps
    idx = {b: i for i, b in enumerate(poses.body_names)}
    order = [idx[b] for b in art.bodies]
    renderer = DepthRenderer(rec.camera, [rec.shapes[poses.shape_names[i]] for i in order])
    tracks = PoseTracks(poses.world_from_body[:, order], list(art.bodies), [poses.shape_names[i] for i in order],
                        poses.residual, poses.fps)
    fitted = poses.head(n_fit)
    background = static_background(rec, renderer, tracks, range(max(0, at - 60), at + 1))
    observed = np.stack([rec.depth(i) for i in range(start, at + 1)])
    valid = observed[observed > 0]
    lo, hi = (float(np.percentile(valid, 1)), float(np.percentile(valid, 99))) if valid.size else (0.0, 1.0)
    real = np.stack([normalise_depth(rec.depth(at + 1 + k), lo, hi) for k in range(steps)])
    reading = np.stack([rec.depth(at + 1 + k) > 0 for k in range(steps)])  # pixels the sensor measured

    def render_seq(Ws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N, H, W) float32 depth in metres where the sensor read, and (N, H, W) bool silhouettes."""
        depth = np.empty((len(Ws), *background.shape), np.float32)
        sil = np.empty((len(Ws), *background.shape), bool)
        for k, Wk in enumerate(tqdm(Ws, desc="forecast: render", leave=False, file=sys.stderr)):
            d, ids = renderer.render(Wk)
            depth[k] = composite(d, background)
            np.greater_equal(ids, 0, out=sil[k])
        np.copyto(depth, 0.0, where=~reading[:len(Ws)])
        return depth, sil

    def scored(depth_m: np.ndarray) -> dict[str, float]:
        return score(normalise_depth(depth_m, lo, hi), real)

    _, tracked_sil = render_seq(tracks.world_from_body[at + 1:at + 1 + steps])
    sim, W_twin = _validation_twin(cfg, rec, art, jp, fitted, post_train or post, at, steps, out_dir)
    predicted, twin_sil = render_seq(W_twin)
    hold = np.where(reading, rec.depth(at)[None], 0.0)
    hold_sil = np.repeat(render_seq(tracks.world_from_body[at:at + 1])[1], steps, axis=0)
    constvel, constvel_sil = render_seq(constant_velocity(tracks, at, steps, cfg.observe))
    ious = {"twin": mask_iou(twin_sil, tracked_sil), "hold": mask_iou(hold_sil, tracked_sil),
            "constvel": mask_iou(constvel_sil, tracked_sil)}
    metrics = {"twin": scored(predicted), "hold": scored(hold), "constvel": scored(constvel)}
    for k, v in ious.items():
        metrics[k]["iou"] = float(v.mean())
    mean, spread, runs = _posterior_forecast(cfg, post_train or post, art, rec, fitted, out_dir, sim, render_seq,
                                             metrics, scored, tracked_sil)
    info = {"config": asdict(cfg), "validated": True, "fitted": [0, at], "observed": [start, at],
            "predicted": [at + 1, at + steps], "seconds_predicted": steps / fps, "depth_range_m": [lo, hi],
            "iou_per_frame": {k: [round(float(x), 4) for x in v] for k, v in ious.items()},
            "iou_reference": "tracked silhouettes of the held-back frames", "renderer": RENDERER,
            "simulator": SIMULATOR, "particles": len(runs),
            "twin_centres": {"bodies": list(art.bodies), "xyz_m": np.round(W_twin[:, :, :3, 3], 5).tolist()}}
    if runs:   # the posterior predictive band in joint coordinates (forecast_band.py)
        info["band"] = forecast_band.joint_band(art, tracks, at, runs, sigma=(post_train or post).extra.get("sigma"))
        log.info("forecast: %.0f %% of the held-back joint coordinates inside the particles' 90 %% band",
                 100 * info["band"]["inside_fraction"])
    if cfg.video:
        write_video(out_dir / "forecast.mp4", real, normalise_depth(predicted, lo, hi), fps)
    log.info("forecast: held-back frames %d-%d (%.1f s): twin %s | hold %s | constvel %s", at + 1, at + steps, steps / fps,
             metrics["twin"], metrics["hold"], metrics["constvel"])
    return Forecast(np.arange(at + 1, at + 1 + steps), predicted, mean, spread, metrics, info)


def _posterior_forecast(cfg, post, art, rec, fitted, out_dir, sim, render_seq, metrics, scored, tracked_sil):
    """Per-pixel mean and spread of up to ``cfg.particles`` particles' forecasts and their body poses
    (K arrays (steps, M, 4, 4)); (None, None, []) without; adds ``metrics["posterior"]``."""
    paths = _particle_urdfs(post, art, rec.shapes, fitted, cfg.particles, out_dir)
    if not paths:
        return None, None, []
    try:
        poses = [sim(p) for p in paths]
        runs = [render_seq(W) for W in poses]
    finally:
        for p in paths:
            p.unlink(missing_ok=True)
    # frame by frame (the same sums as over the whole (K, N, H, W) stack, without that copy)
    mean = np.empty_like(runs[0][0])
    spread = np.empty_like(runs[0][0])
    for k in range(len(mean)):
        stack = np.stack([d[k] for d, _ in runs])
        mean[k], spread[k] = stack.mean(0), stack.std(0)
    metrics["posterior"] = scored(mean)
    metrics["posterior"]["iou"] = float(np.mean([mask_iou(sil, tracked_sil).mean() for _, sil in runs]))
    return mean, spread, poses
