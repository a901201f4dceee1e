"""Identify stage: a particle posterior over the twin's dynamics parameters.

Builds the parameter set from the articulation (body masses with limits from shape
volume x plausible densities; joint damping and, optionally, Coulomb friction of the
1-dof joints; the initial joint velocities via the shooting states), simulates it with
``vid2sim.models.dynamics`` batched over particles, and runs the chosen inference
method of ``vid2sim.models.inference`` against the tracked joint positions. Writes
``params.json`` (through the caller) and two plots into ``out_dir``: the pairwise
posterior scatter (like the dissertation's Fig. 4.21) and simulated vs observed joint
trajectories with the particle spread.

``augment=true`` also fits a neural joint force at the best particle
(``identify_augment.py``; NeuralSim).

``observation=video`` replaces the tracked joint positions by the paper's pixel-space
likelihood: the simulated parts are rendered at pixels around the mechanism and
compared with the observed depth (``identify_video.py``). The tracked joint positions
still give the initial guess of the shooting states.

A free or planar root joint (floating base: the root's pose and velocity in the state,
gravity, and a floor plane with penalty contact where the tracks show one) goes through
``identify_roots.py`` (``floating_setup``); its docstring says what is identified there.

Deliberately not done here: kinematic fine-tuning.

Body inertias scale with the body mass (inertia = mass x the shape's unit-mass
inertia), as for homogeneous parts; so without forces other than gravity and the
joint damping, only mass *ratios* and damping/mass are observable from free motion.
One body's mass therefore anchors the scale (a known ``bounds.masses`` entry, else volume x
``bounds.density_anchor``), and ``params.json`` says what the posterior determines
(``identifiability.py``: the ratios with their intervals, parameters at a limit and why).
Two or more known masses are held within +-0.1 % during inference. One mass, known or
anchored, is not: the fit runs with every mass free within its density limits (the scale a
free direction the particles may drift along), and ``anchored`` then rescales each particle
to the anchor's mass (the same motion); the fitted box and best particle stay in
``extra["box"]``.
"""
from __future__ import annotations

import io
import logging
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from vid2sim.datasets.shapes import Shape
from vid2sim.models.inference import InferenceResult, Problem, Shooting, infer
from vid2sim.models.joints.fit import difference_noise
from vid2sim.pipeline.artifacts import Articulation, JointPositions, PoseTracks, Posterior
from vid2sim.datasets.atomic import write_bytes, write_json
from vid2sim.pipeline.holdout import fit_frames
from vid2sim.pipeline.identify_effort import attach_effort, with_effort
from vid2sim.pipeline.identify_config import (IdentifyAugmentation, IdentifyBounds, IdentifyConfig,  # noqa: F401
                                              IdentifyContact, IdentifyInference, IdentifyNoise, IdentifyShooting,
                                              IdentifyVideo)
from vid2sim.pipeline.identifiability import (anchor_laplace_covariances, anchor_limits, laplace_covariances,
                                              scale_anchor, summarise, to_anchor)

log = logging.getLogger(__name__)
SIM_HZ = 960.0           # simulator rate of substeps=0: that of the twin in PyBullet (forecast.simulate_twin)
COMPILE_STEPS = 25_000   # compile="auto": sequential simulator steps (per rollout x iterations) that pay for it
SUPPORTED_JOINTS = ("revolute", "prismatic", "fixed")


@dataclass
class TwinSimulator:
    """What ``Problem`` needs from the dynamics: ``simulate(theta, start, steps)`` plus its bookkeeping."""

    names: list[str]
    lower: np.ndarray
    upper: np.ndarray
    model: object          # batch-1 vid2sim.models.dynamics.Model, unit masses
    unit_inertia: torch.Tensor  # (1, N, 3, 3) inertia per kg
    dof_names: list[str]
    dt: float
    substeps: int
    compile: bool = False
    anchor: dict = field(default_factory=dict)  # identifiability.scale_anchor: the body whose mass fixes the scale
    rescale: bool = False  # the anchor's mass is imposed after the fit (``anchored``), not held during it

    def model_for(self, theta: torch.Tensor):
        """theta: (B, P) physical -> Model with batch B (masses, inertias, damping, friction set)."""
        B = theta.shape[0]
        m = self.model.expand(B)
        cols = {n: theta[:, i] for i, n in enumerate(self.names)}
        zero = torch.zeros(B, dtype=theta.dtype)
        mass = torch.stack([cols.get(f"{b}.mass", m.mass[:, i].to(theta.dtype)) for i, b in enumerate(m.body_names)], 1)
        damping = torch.stack([cols.get(f"{d}.damping", zero) for d in m.dof_names], 1)
        friction = torch.stack([cols.get(f"{d}.friction", zero) for d in m.dof_names], 1)
        return m.replace(mass=mass, inertia=self.unit_inertia * mass[:, :, None, None], damping=damping, friction=friction)

    def simulate(self, theta: torch.Tensor, start: torch.Tensor, steps: int, nets: tuple = ()) -> torch.Tensor:
        """theta (B, P), start (B, nq + nv) -> (B, steps, nq + nv) sampled every ``substeps`` simulator steps
        (``nets``: neural augmentations added to the model, ``identify_augment``)."""
        from vid2sim.models.dynamics import State, rollout

        model = self.model_for(theta).replace(nets=tuple(nets))
        nq = model.nq
        st = rollout(model, State(start[:, :nq], start[:, nq:]), (steps - 1) * self.substeps, dt=self.dt,
                     compile=self.compile)
        x = torch.cat([st.q, st.qd], -1)[:: self.substeps]  # (steps, B, S)
        return x.transpose(0, 1)


def substeps_for(cfg: IdentifyConfig, fps: float) -> int:
    """Simulator steps per frame: ``cfg.shooting.substeps``, or (0) enough for ``SIM_HZ``."""
    if cfg.shooting.substeps < 0:
        raise ValueError(f"identify: shooting.substeps must be >= 0 (0: automatic), got {cfg.shooting.substeps}")
    return cfg.shooting.substeps if cfg.shooting.substeps > 0 else max(1, math.ceil(SIM_HZ / fps - 1e-9))


def compile_for(cfg: IdentifyConfig, substeps: int, frames: int) -> bool:
    """Whether the simulator step is compiled: ``cfg.compile``, or ("auto") when the rollouts
    are long enough for a ~15-s compile to pay (eager ~1.5 ms, compiled ~0.2 ms per step)."""
    if isinstance(cfg.compile, bool):
        return cfg.compile
    windows = cfg.shooting.windows if cfg.inference.method == "csvgd" else 1   # only csvgd shoots in windows
    window = (max(frames, 2) - 1) // max(windows, 1) + 1
    return window * substeps * cfg.inference.iterations >= COMPILE_STEPS


def build_simulator(cfg: IdentifyConfig, art: Articulation, poses: PoseTracks, shapes: dict[str, Shape],
                    fps: float) -> TwinSimulator:
    """The parameter set and simulator of a fixed-base tree of revolute/prismatic/fixed joints."""
    from vid2sim.models.dynamics import model_from_articulation

    bad = [f"{j.name} ({j.type})" for j in art.joints if j.type not in SUPPORTED_JOINTS]
    if bad:
        raise NotImplementedError(f"identify: joints {bad} are not supported yet (only {', '.join(SUPPORTED_JOINTS)})")
    shape_of = dict(zip(poses.body_names, poses.shape_names))
    body_shapes = {b: shapes[shape_of[b]] for b in art.bodies if b in shape_of and shape_of[b] in shapes}
    T0 = {b: poses.world_from_body[0, poses.body_names.index(b)] for b in art.bodies}
    model = model_from_articulation(art, T0, masses=None, shapes=body_shapes, batch=1)
    names, lo, hi = [], [], []
    for b in model.body_names:
        if b not in body_shapes:
            raise ValueError(f"identify: body {b!r} has no shape; mass limits come from shape volumes")
        vol = float(body_shapes[b].volume())
        names.append(f"{b}.mass")
        lo.append(vol * cfg.bounds.density_min)
        hi.append(vol * cfg.bounds.density_max)
    for b, kg in cfg.bounds.masses.items():
        if f"{b}.mass" not in names:
            raise ValueError(f"identify: masses names body {b!r}, which the articulation lacks (bodies: "
                             f"{', '.join(model.body_names)})")
        if not (isinstance(kg, (int, float)) and kg > 0):
            raise ValueError(f"identify: the known mass of {b!r} must be a positive number of kg, got {kg!r}")
    # the scale free motion leaves open: a known mass, else one body's at density_anchor (identifiability.py)
    anchor = scale_anchor(cfg.bounds.masses, list(model.body_names), list(model.joint_types),
                          {b: float(body_shapes[b].volume()) for b in model.body_names}, cfg.bounds.density_anchor)
    held = len(cfg.bounds.masses) > 1   # one mass (anchored or known) is imposed after the fit: anchored()
    for b, kg in cfg.bounds.masses.items() if held else ():
        i = names.index(f"{b}.mass")
        lo[i], hi[i] = kg * 0.999, kg * 1.001
    joint_parameters(cfg, model, names, lo, hi, scale=anchor["limit_scale"] if held else 1.0)
    unit = model.inertia.clone()  # built with unit masses
    sub = substeps_for(cfg, fps)
    frames = min(cfg.frames, poses.num_frames) if cfg.frames else poses.num_frames
    return TwinSimulator(names, np.array(lo), np.array(hi), model, unit, list(model.dof_names),
                         1.0 / (fps * sub), sub, compile_for(cfg, sub, frames), anchor, not held)


def joint_parameters(cfg: IdentifyConfig, model, names: list, lo: list, hi: list, scale: float = 1.0) -> None:
    """Append each revolute/prismatic dof's damping (and, with ``cfg.bounds.estimate_friction``, its
    Coulomb friction) to the parameter ``names`` and their limits ``lo``/``hi`` (SI units): the
    configured maxima x ``scale`` (the mass scale relative to density_anchor's, identifiability.py)."""
    types = dict(zip(model.joint_names, model.joint_types))
    for d in model.dof_names:
        t = types.get(d)
        if t not in ("revolute", "prismatic"):
            continue
        names.append(f"{d}.damping")
        lo.append(0.0)
        hi.append(scale * (cfg.bounds.damping_max_revolute if t == "revolute"
                           else cfg.bounds.damping_max_prismatic))
        if cfg.bounds.estimate_friction:
            names.append(f"{d}.friction")
            lo.append(0.0)
            hi.append(scale * (cfg.bounds.friction_max_revolute if t == "revolute"
                               else cfg.bounds.friction_max_prismatic))


def joint_trajectory(jp: JointPositions, dofs: list[str], frames: int = 0) -> np.ndarray:
    """(T, nv) joint positions in the simulator's dof order, relative to frame 0 (model q = 0 there)."""
    missing = [d for d in dofs if d not in jp.names]
    if missing:
        raise ValueError(f"identify: joint_positions lacks joints {missing} of the articulation")
    q = jp.q[:, [jp.names.index(d) for d in dofs]]
    q = q[:frames] if frames else q
    return q - q[:1]


def track_noise(q: np.ndarray, floor: float) -> np.ndarray:
    """Per-joint noise std of tracked positions q (T, nv) from their third differences
    (``fit.difference_noise``, as articulate's pose noise; smooth motion at 30 fps gives
    little), at least ``floor``. A track smoothed by the tracker's motion prior
    reads low; what matters most is the joints' relative weight, which it gets right:
    bench_forecast's clean cartpole cart 0.13 mm, pole 0.29 mrad; realistic 0.59 mm, 2.6 mrad."""
    if len(q) < 8:
        raise ValueError(f"identify: {len(q)} frames are too few to estimate the track noise (set identify.noise.sigma)")
    return np.maximum(difference_noise(np.diff(np.asarray(q, float), 3, axis=0)), floor)


def observation_sigma(cfg: IdentifyConfig, q: np.ndarray) -> np.ndarray:
    """The likelihood's per-joint noise std: ``cfg.noise.sigma`` for every joint, or estimated (sigma=0)."""
    if cfg.noise.sigma < 0 or cfg.noise.sigma_floor <= 0:
        raise ValueError(f"identify: noise.sigma must be >= 0 and noise.sigma_floor > 0, got {cfg.noise.sigma} and "
                         f"{cfg.noise.sigma_floor}")
    return np.full(q.shape[1], cfg.noise.sigma) if cfg.noise.sigma > 0 else track_noise(q, cfg.noise.sigma_floor)


def make_problem(cfg: IdentifyConfig, sim: TwinSimulator, q: np.ndarray, fps: float) -> Problem:
    """Observed positions q (T, nv) -> Problem over the simulator's parameters (state = [q, qd])."""
    qt = torch.as_tensor(q, dtype=torch.float64)
    qd = torch.as_tensor(np.gradient(q, 1.0 / fps, axis=0, edge_order=2), dtype=torch.float64)
    nq = q.shape[1]
    return Problem(sim.names, torch.as_tensor(sim.lower), torch.as_tensor(sim.upper), sim.simulate, [qt],
                   [torch.cat([qt, qd], 1)], observe=lambda s: s[..., :nq],
                   sigma=torch.as_tensor(observation_sigma(cfg, q), dtype=torch.float64))


def make_video_problem(cfg: IdentifyConfig, sim: TwinSimulator, joints: Problem, rec, poses: PoseTracks,
                       shapes: dict[str, Shape]) -> Problem:
    """``joints`` (``make_problem``'s) with the depth at pixels around the mechanism (T, pixels)
    as the observation instead of the joint positions; its state guess seeds the shooting."""
    from vid2sim.pipeline.identify_video import DepthObserver, select_pixels

    bodies = list(sim.model.body_names)
    shape_of = dict(zip(poses.body_names, poses.shape_names))
    frames = joints.observations[0].shape[0]
    obs = select_pixels(rec, poses, bodies, shapes, frames, cfg.video.pixels, cfg.video.pixel_margin, cfg.seed)
    T0 = np.stack([poses.world_from_body[0, poses.body_names.index(b)] for b in bodies])
    observer = DepthObserver(sim.model, sim.model.nq, rec, [shapes[shape_of[b]] for b in bodies], T0, obs,
                             dtype=getattr(torch, cfg.video.render_dtype))
    return Problem(sim.names, torch.as_tensor(sim.lower), torch.as_tensor(sim.upper), sim.simulate,
                   [torch.as_tensor(obs.observed)], joints.state_guess, observe=observer, sigma=cfg.video.pixel_sigma)


def floating_setup(cfg: IdentifyConfig, art: Articulation, jp: JointPositions, poses: PoseTracks,
                   shapes: dict[str, Shape], fps: float, rec=None):
    """``identify_roots.RootProblem`` for an articulation with a free/planar root (video
    observation and augmentation are not supported there), else None."""
    from vid2sim.pipeline import identify_roots

    if identify_roots.root_joint(art) is None:
        return None
    for flag, what in ((cfg.observation == "video", "observation=video"), (cfg.augmentation.augment, "augment=true")):
        if flag:
            raise NotImplementedError(f"identify: {what} is not supported for a floating/planar root yet")
    rp = identify_roots.build_root_problem(cfg, art, jp, poses, shapes, fps)
    if rec is not None:   # a known pusher (actuation.npz) in contact with the parts
        from vid2sim.pipeline.identify_push import attach_pusher

        if attach_pusher(cfg, rp, rec, shapes, poses, art):
            return rp
    identify_roots.flight_prefit(cfg, rp)
    return rp


def shooting_windows(cfg: IdentifyConfig, frames: int, fps: float) -> int:
    """csvgd's windows for a clip of ``frames`` samples: ``cfg.shooting.windows``, or more where
    that would make a window longer than ``cfg.shooting.window_s``."""
    if cfg.shooting.windows == 1 or cfg.shooting.window_s <= 0:
        return cfg.shooting.windows
    return max(cfg.shooting.windows, math.ceil((frames - 1) / (cfg.shooting.window_s * fps) - 1e-9))


def method_options(cfg: IdentifyConfig, method: str, prob: Problem | None = None, fps: float = 30.0) -> dict:
    """The settings of ``cfg`` that ``infer(method, prob, ...)`` takes beyond the budget; the shooting
    windows for ``prob``'s shortest trajectory at ``fps`` (None: ``cfg.shooting.windows``)."""
    frames = 0 if prob is None else min(o.shape[0] for o in prob.observations)
    opts = ({"windows": shooting_windows(cfg, frames, fps), "polish": cfg.shooting.polish,
             "precondition": cfg.inference.precondition, "stop_tol": cfg.inference.stop_tol}
            if method == "csvgd" else {})
    if method == "cmaes":
        opts["polish"] = cfg.inference.cmaes_polish
    if method in ("csvgd", "svgd", "adam"):
        opts["lr"] = cfg.inference.lr
    return opts


def run(cfg: IdentifyConfig, art: Articulation, jp: JointPositions, poses: PoseTracks,
        shapes: dict[str, Shape], out_dir: Path, rec=None) -> Posterior:
    """Estimate the posterior over masses/damping(/friction) from the tracked joint positions
    (``observation=joints``) or from the recording's depth frames ``rec`` (``observation=video``)."""
    return _run(cfg, art, jp, poses, shapes, out_dir, rec)[0]


def _run(cfg: IdentifyConfig, art: Articulation, jp: JointPositions, poses: PoseTracks,
         shapes: dict[str, Shape], out_dir: Path, rec=None, warm: InferenceResult | None = None
         ) -> tuple[Posterior, InferenceResult | None]:
    """``run``, and the fit's InferenceResult (None: nothing to fit). ``warm``: an earlier csvgd fit of
    the same mechanism on fewer frames whose single-shooting particles it kept: its particles start
    this fit's Gauss-Newton steps on single shooting (no shooting windows)."""
    if cfg.observation == "video" and rec is None:
        raise ValueError("identify: observation 'video' needs the recording (identify.run(..., rec=...))")
    fps = float(poses.fps)
    root = floating_setup(cfg, art, jp, poses, shapes, fps, rec)
    if root is None:
        sim = build_simulator(cfg, art, poses, shapes, fps)
        if not sim.dof_names:
            return static_posterior(cfg, sim), None
        q = joint_trajectory(jp, sim.dof_names, cfg.frames)
        prob = make_problem(cfg, sim, q, fps)
        driven = attach_effort(cfg, sim, prob, rec, fps)   # a known joint effort (actuation.npz) drives the fit
        if driven is not None:
            sim, prob = driven
    else:
        if rec is not None and getattr(getattr(rec, "actuation", None), "joint_effort", None) is not None:
            raise NotImplementedError("identify: a known joint effort (actuation.npz) on a mechanism with a planar or "
                                      "free root is not supported yet")
        sim, q, prob = root.sim, root.q, root.problem
    fit = make_video_problem(cfg, sim, prob, rec, poses, shapes) if cfg.observation == "video" else prob
    pushed = root is not None and "pusher" in root.extra
    opts = method_options(cfg, cfg.inference.method, fit, fps)
    if warm is not None and cfg.inference.method == "csvgd":
        opts.update(windows=1, init=(warm.theta, warm.start))
        log.info("identify: starting from the earlier fit's %d particles (single shooting)", len(warm.theta))
    res = infer(cfg.inference.method, fit, particles=cfg.inference.particles,
                iterations=cfg.inference.push_iterations if pushed else cfg.inference.iterations, seed=cfg.seed,
                **opts)
    log.info("identify: %s best log-likelihood %.3f after %d rollouts (%.1f s)", cfg.inference.method,
             float(res.log_likelihood.max()), res.evaluations, res.seconds)
    extra = {"q0": jp.q[0, [jp.names.index(d) for d in sim.dof_names]].tolist(), "dofs": sim.dof_names,
             "config": asdict(cfg)} if root is None else dict(root.extra, config=asdict(cfg))
    if cfg.observation == "joints":
        extra["sigma"] = dict(zip(sim.dof_names if root is None else root.extra["q_names"], prob.sigma.tolist()))
        log.info("identify: observation noise %s", ", ".join(f"{d} {v:.2g}" for d, v in extra["sigma"].items()))
    post = fitted_posterior(cfg, sim, fit, res, extra, rescale=root is None)
    if root is not None:
        post = root.finish(post)
    if cfg.augmentation.augment:   # at the fit's best particle, in its scale (before ``anchored``)
        from vid2sim.pipeline.identify_augment import fit_augmentation

        post.extra["augmentation"] = fit_augmentation(cfg, sim, q, fps, res.theta[res.best].numpy(), out_dir)
    absolute = hasattr(sim, "effort") and not sim.anchor.get("known")   # a known effort (identify_effort)
    post = with_identifiability(cfg, post, None if absolute else
                                sim.anchor if root is None else root_anchor(cfg, root.anchored))
    if hasattr(sim, "effort"):
        post = with_effort(post, sim, absolute)
    out_dir = Path(out_dir)
    write_json(out_dir / "identify_config.json", asdict(cfg))
    if cfg.plots:
        plot_posterior(post, out_dir / "posterior_pairs.png")
        plot_trajectories(res, prob, sim.dof_names if root is None else root.extra["q_names"], fps,
                          out_dir / "trajectories.png")
    return post, res


def fitted_posterior(cfg: IdentifyConfig, sim: TwinSimulator, prob: Problem, res: InferenceResult,
                     extra: dict, rescale: bool = True) -> Posterior:
    """The posterior of a fit (``posterior_from``): with ``extra["noise_scale"]`` where the track
    noise was estimated (``noise.sigma`` = 0) and the method gives metrics, and, with ``rescale``
    (a fixed-base mechanism) where the scale is anchored after the fit, in the anchor's scale
    (``anchored``; a known effort fixes the scale itself). ``prob``: the problem the inference ran on."""
    if cfg.observation == "joints" and cfg.noise.sigma == 0 and res.trace.get("kernel_metrics") is not None:
        extra = dict(extra, noise_scale=noise_scale(prob, res, cfg.noise.sigma_floor))   # the tracks' noise, checked
        log.info("identify: reduced chi-square of the best fit %.3g (the posterior's width scaled by it)",
                 extra["noise_scale"])
    post = posterior_from(res, prob, extra=extra)
    if rescale and sim.rescale and not hasattr(sim, "effort"):
        post = anchored(post, sim.anchor, res.trace.get("kernel_metrics"))
    return post


def root_anchor(cfg: IdentifyConfig, anchored: dict) -> dict:
    """``identifiability.scale_anchor``'s dict for a floating root's anchored mass (identify_roots)."""
    name, kg = next(iter(anchored.items()))
    body = name.rsplit(".", 1)[0]
    known = body in cfg.bounds.masses
    return {"body": body, "mass": float(kg), "known": known,
            "source": "identify.bounds.masses" if known
            else f"volume x identify.bounds.density_anchor ({cfg.bounds.density_anchor:g} kg/m^3)"}


def anchored(post: Posterior, anchor: dict, metrics=None) -> Posterior:
    """``post``, fitted with every mass free, in the scale of ``anchor`` (scale_anchor's): particles,
    estimate and limits through identifiability.to_anchor (the same motion; the log-likelihoods are
    unchanged); ``extra["laplace_covariance"]``: each particle's Laplace covariance on its slice of
    the scale ridge (``anchor_laplace_covariances``) from its Gauss-Newton metric ``metrics``
    (N, P, P) (csvgd's ``trace["kernel_metrics"]``; None: none). ``extra["box"]`` keeps the limits
    and the best particle of the fit, where ``at_limit`` is judged."""
    names = list(post.names)
    best = np.array([post.estimate[n] for n in names])
    extra = dict(post.extra, box={"limits": {n: list(v) for n, v in post.limits.items()}, "estimate": post.estimate})
    extra.pop("kernel_covariance", None)
    extra.pop("laplace_covariance", None)
    if metrics is not None and len(metrics) == len(post.particles):
        span = np.array([post.limits[n][1] - post.limits[n][0] for n in names])
        extra["laplace_covariance"] = anchor_laplace_covariances(post.particles, metrics, span, names, anchor).tolist()
    return replace(post, limits=anchor_limits(post.limits, names, anchor),
                   estimate=dict(zip(names, to_anchor(best, names, anchor).tolist())),
                   particles=to_anchor(post.particles, names, anchor), extra=extra)


def noise_scale(prob: Problem, res: InferenceResult, floor: float = 0.0) -> float:
    """The reduced chi-square of the best particle's single-shooting residuals, sum r^2 / (n - d)
    (r whitened by the problem's noise std, n residuals, d = parameters + start state): the factor
    by which the noise variance estimated from the tracks (``track_noise``) is off, as far as the
    fitted model can tell; 1.0 where there are no more residuals than coordinates. At least what
    keeps every joint's corrected noise std at ``floor`` (identify.noise.sigma_floor): a tracker's
    smoothed tracks leave residuals below its real, temporally correlated error."""
    b = res.best
    with torch.no_grad():
        r = Shooting(prob, 1).residuals(res.theta[b:b + 1], res.start[b:b + 1]).numpy()
    r = r[np.isfinite(r)]
    dof = r.size - prob.num_params - prob.state_dim * res.start.shape[1]
    c = float(np.sum(r * r) / dof) if dof > 0 else 1.0
    sigma = np.atleast_1d(prob.sigma.numpy()) if torch.is_tensor(prob.sigma) else np.atleast_1d(prob.sigma)
    return max(c, float(np.max((floor / sigma) ** 2))) if floor > 0 else c


def with_identifiability(cfg: IdentifyConfig, post: Posterior, anchor: dict) -> Posterior:
    """``post`` with its ``identifiable`` summary (identifiability.summarise); logs what ends at a limit
    (of the fit's box, ``extra["box"]``, where ``anchored`` rescaled the posterior)."""
    ex = post.extra
    box = ex.get("box")
    ident = summarise(post.names, post.limits, post.estimate, post.particles, anchor, tuple(cfg.bounds.masses),
                      ex.get("particle_log_likelihood"), len(post.names) + len(ex.get("start_state", ())),
                      ex.get("kernel_covariance"),
                      box=({n: tuple(v) for n, v in box["limits"].items()}, box["estimate"]) if box else None,
                      laplace=ex.get("laplace_covariance"), noise_scale=ex.get("noise_scale", 1.0))
    for hit in ident["at_limit"]:
        log.warning("identify: %s ends at its %s limit %.4g: %s", hit["parameter"], hit["side"], hit["limit"],
                    hit["reason"])
    return replace(post, identifiable=ident)


def static_posterior(cfg: IdentifyConfig, sim: TwinSimulator) -> Posterior:
    """The posterior of a mechanism with no joint that moves (every joint fixed): nothing is
    observable, so each mass is its shape's volume x ``cfg.bounds.density_anchor`` (or ``cfg.bounds.masses``)."""
    est = {}
    for n, lo, hi in zip(sim.names, sim.lower, sim.upper):
        body = n.rsplit(".", 1)[0]
        kg = cfg.bounds.masses.get(body)
        vol = lo / cfg.bounds.density_min
        est[n] = float(kg) if kg else float(np.clip(vol * cfg.bounds.density_anchor, lo, hi))
    log.warning("identify: no joint of the articulation moves; nothing to identify (masses at %g kg/m^3)",
                cfg.bounds.density_anchor)
    return Posterior(list(sim.names), {n: (float(lo), float(hi)) for n, lo, hi in zip(sim.names, sim.lower, sim.upper)},
                     est, np.array([[est[n] for n in sim.names]]), "none", 0.0,
                     {"note": "no joint moves: nothing identified", "config": asdict(cfg)})


def run_with_holdout(cfg: IdentifyConfig, art: Articulation, jp: JointPositions, poses: PoseTracks,
                     shapes: dict[str, Shape], out_dir: Path, rec=None, holdout: float = 0.0
                     ) -> tuple[Posterior, Posterior]:
    """(train, final) posteriors when the last ``holdout`` of the frames is held back (``holdout.fit_frames``).

    train: fitted on the frames before the held-back ones (params_train.json; forecast validates
    it on the held-back frames). final: fitted on every frame when ``cfg.refit`` (params.json, the
    exported twin), else the train posterior itself. ``cfg.frames`` still caps both fits.
    """
    total = min(cfg.frames, poses.num_frames) if cfg.frames else poses.num_frames
    n_fit = min(fit_frames(poses.num_frames, holdout), total)
    log.info("identify: fitting frames 0-%d of %d (forecast.holdout=%g)", n_fit - 1, poses.num_frames, holdout)
    train, res = _run(replace(cfg, frames=n_fit), art, jp, poses, shapes, out_dir, rec=rec)
    if n_fit >= total or not cfg.refit:
        return train, train
    log.info("identify: refitting on frames 0-%d for the exported twin (identify.refit)", total - 1)
    single = res is not None and res.trace.get("phases", {}).get("kept", "single") == "single"
    return train, _run(replace(cfg, frames=total), art, jp, poses, shapes, out_dir, rec=rec,
                       warm=res if single and cfg.warm_refit else None)[0]


def posterior_from(res: InferenceResult, prob: Problem, extra: dict | None = None) -> Posterior:
    """The Posterior of an inference result: the particles, the best one as the estimate, and,
    physical, ``extra.laplace_covariance`` (N, P, P), each particle's Laplace covariance from its
    Gauss-Newton metric, where the method gives metrics (csvgd), else ``extra.kernel_covariance``
    (P, P), its kernel density's, where it gives one."""
    names = list(prob.names)
    b = res.best
    extra = dict(extra or {})
    extra.update({"start_state": res.start[b, 0].tolist(), "particle_log_likelihood": res.log_likelihood.tolist(),
                  "evaluations": res.evaluations})  # no wall time: the artifact must be reproducible
    span = (prob.upper - prob.lower).numpy()
    metrics = res.trace.get("kernel_metrics")
    if metrics is not None and len(metrics) == len(res.theta):
        extra["laplace_covariance"] = laplace_covariances(np.asarray(metrics, float), span).tolist()
    elif res.trace.get("kernel_covariance"):   # unit -> physical: the posterior is the particles' kernel density
        extra["kernel_covariance"] = (np.asarray(res.trace["kernel_covariance"]) * np.outer(span, span)).tolist()
    return Posterior(names, {n: (float(lo), float(hi)) for n, lo, hi in zip(names, prob.lower, prob.upper)},
                     {n: float(v) for n, v in zip(names, res.theta[b])}, res.theta.numpy().astype(float),
                     res.method, float(res.log_likelihood[b]), extra)


def _save_figure(fig, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    write_bytes(path, buf.getvalue())


def plot_posterior(post: Posterior, path: Path, truth: dict[str, float] | None = None) -> None:
    """Pairwise scatter of the particles (lower triangle) and per-parameter histograms (diagonal)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vid2sim.pipeline.plots import limit_bins

    P = len(post.names)
    fig, axes = plt.subplots(P, P, figsize=(2.2 * P, 2.2 * P), squeeze=False)
    X = post.particles
    for i in range(P):
        for j in range(P):
            ax = axes[i][j]
            if j > i:
                ax.axis("off")
                continue
            if i == j:
                ax.hist(X[:, i], bins=limit_bins(post.limits[post.names[i]], 12), color="tab:blue", alpha=0.7)
                ax.set_xlim(post.limits[post.names[i]])
            else:
                ax.scatter(X[:, j], X[:, i], s=10, color="tab:blue", alpha=0.7)
                ax.scatter([post.estimate[post.names[j]]], [post.estimate[post.names[i]]], marker="*", s=60, color="tab:red")
                if truth:
                    ax.scatter([truth.get(post.names[j], np.nan)], [truth.get(post.names[i], np.nan)], marker="x", color="k")
                ax.set_xlim(post.limits[post.names[j]])
                ax.set_ylim(post.limits[post.names[i]])
            if i == P - 1:
                ax.set_xlabel(post.names[j], fontsize=7)
            if j == 0:
                ax.set_ylabel(post.names[i], fontsize=7)
            ax.tick_params(labelsize=6)
    fig.suptitle(f"posterior ({post.method}, {X.shape[0]} particles; * best, x truth)", fontsize=9)
    _save_figure(fig, path)
    plt.close(fig)


def plot_trajectories(res: InferenceResult, prob: Problem, dofs: list[str], fps: float, path: Path) -> None:
    """Observed joint positions vs every particle's single-shooting rollout (spread) and the best one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sh = Shooting(prob, 1)
    pred = sh.rollout(res.theta, res.start[:, 0]).numpy()  # (N, T, O)
    obs = prob.observations[0].numpy()
    t = np.arange(obs.shape[0]) / fps
    fig, axes = plt.subplots(len(dofs), 1, figsize=(7, 2.2 * len(dofs)), squeeze=False)
    for k, d in enumerate(dofs):
        ax = axes[k][0]
        ax.fill_between(t, np.nanmin(pred[:, :, k], 0), np.nanmax(pred[:, :, k], 0), color="tab:blue", alpha=0.2,
                        label="particles (min-max)")
        ax.plot(t, pred[res.best, :, k], color="tab:blue", label="best particle")
        ax.plot(t, obs[:, k], "k.", ms=3, label="observed")
        ax.set_ylabel(f"{d} (rel. frame 0)", fontsize=8)
    axes[-1][0].set_xlabel("time (s)")
    axes[0][0].legend(fontsize=7)
    _save_figure(fig, path)
    plt.close(fig)
