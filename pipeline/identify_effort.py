"""Identify a fixed-base mechanism driven by a known joint effort (``actuation.npz``'s
``joint_effort`` at ``effort_joints``, docs/formats.md §1.2).

The recorded effort row k (N m or N) acts on its joint's dof over the frame period
[k, k + 1) / fps (held, not interpolated: a robot's torque command per control period);
rows past the last one hold the last. The simulator's state gets one more column, the time
(s) of the state, so that a rollout started at any frame (a shooting window) applies the
effort from that frame on, as ``identify_push`` does for a pusher's track.

A known force sets the scale that free motion leaves open (mass x everything scaled by one
factor moves the same under gravity and damping, not under a given torque), so the masses,
damping and friction come out absolute: no body's mass is anchored after the fit
(``identify.anchored`` is not applied) and params.json's ``identifiable.scale`` says so.
The effort's sign follows the joint's axis in ``articulation.json``; articulate may find
that axis reversed from the robot's own, so ``effort_signs`` checks each driven joint's sign
against the tracks first: the generalised force is linear in the masses and joint damping
(RNEA of one-hot masses), and the sign whose non-negative least-squares fit to the tracked
accelerations leaves the smaller residual is used (logged when it reverses the recording's).
"""
from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import torch

log = logging.getLogger(__name__)
SCALE_NOTE = ("absolute: a known joint effort (actuation.npz joint_effort at {joints}) fixes the scale that free "
              "motion leaves open; no mass is anchored")


def effort_columns(rec, dof_names: list[str]) -> tuple[np.ndarray, tuple[str, ...]] | None:
    """((R, nv) effort per recorded row on the simulator's dofs, the driven joints) of ``rec``'s
    actuation, or None without a joint effort. ValueError naming the joints the articulation lacks."""
    act = getattr(rec, "actuation", None)
    if act is None or act.joint_effort is None or not act.effort_joints:
        return None
    missing = [j for j in act.effort_joints if j not in dof_names]
    if missing:
        raise ValueError(f"identify: actuation.npz joint_effort names joint(s) {', '.join(missing)} that the "
                         f"articulation has no 1-dof joint of (its dofs: {', '.join(dof_names) or 'none'})")
    E = np.zeros((act.joint_effort.shape[0], len(dof_names)))
    for d, j in enumerate(act.effort_joints):
        E[:, dof_names.index(j)] += act.joint_effort[:, d]
    return E, tuple(act.effort_joints)


def attach_effort(cfg, sim, prob, rec, fps: float):
    """(simulator, Problem) of ``sim``/``prob`` (``identify.build_simulator``/``make_problem``'s) with
    the recorded effort applied and the time column added to the state; None without an effort."""
    found = effort_columns(rec, list(sim.dof_names)) if rec is not None else None
    if found is None:
        return None
    E, joints = found
    if cfg.augmentation.augment:   # identify_augment's windows carry no time column to index the effort by
        raise NotImplementedError("identify: augmentation.augment=true with a known joint effort (actuation.npz) "
                                  "is not supported yet")
    q = prob.observations[0].numpy()   # make_problem's: the tracked joint positions, whatever the observation
    if len(q) >= 9:
        signs = effort_signs(sim, q, E, fps)
        for d in np.flatnonzero(signs < 0):
            log.warning("identify: the known effort at %s is applied reversed: its recorded sign fits the tracks "
                        "worse (articulate's axis of %s points the other way)", sim.dof_names[d], sim.dof_names[d])
        E = E * signs[None, :]
    else:
        signs = np.ones(E.shape[1])
    lower, upper = np.array(sim.lower, float), np.array(sim.upper, float)
    for b, kg in cfg.bounds.masses.items():   # known masses are held: the effort fixes the scale, no rescaling
        i = sim.names.index(f"{b}.mass")
        lower[i], upper[i] = kg * 0.999, kg * 1.001
    driven = _effort_simulator(type(sim))(**{f: getattr(sim, f) for f in sim.__dataclass_fields__})
    driven.lower, driven.upper = lower, upper
    driven.effort, driven.fps, driven.joints = torch.as_tensor(E, dtype=torch.float64), float(fps), joints
    driven.signs = {j: float(signs[sim.dof_names.index(j)]) for j in joints}
    guess = prob.state_guess[0]
    times = torch.arange(guess.shape[0], dtype=guess.dtype)[:, None] / fps
    # observe: make_problem's reads the first nq columns, which the time column does not move
    new = replace(prob, simulate=driven.simulate, state_guess=[torch.cat([guess, times], 1)], state_scale=None,
                  lower=torch.as_tensor(lower), upper=torch.as_tensor(upper))
    log.info("identify: known effort at %s (|tau| up to %.3g) drives the fit; masses are absolute",
             ", ".join(joints), float(np.abs(E).max()))
    return driven, new


def effort_signs(sim, q: np.ndarray, E: np.ndarray, fps: float) -> np.ndarray:
    """(nv,) +1 or -1 per dof: the sign of each driven dof's recorded effort ``E`` (R, nv) that
    explains the tracked positions ``q`` (T, nv) better (module docstring); +1 where not driven.
    Velocities and accelerations are Savitzky-Golay derivatives (9 frames, cubic)."""
    from scipy.optimize import nnls
    from scipy.signal import savgol_filter

    from vid2sim.models.dynamics import inverse_dynamics

    T, nv = q.shape
    dt = 1.0 / fps
    qd, qdd = (savgol_filter(q, 9, 3, deriv=k, delta=dt, axis=0) for k in (1, 2))
    model = sim.model.expand(T)
    N = model.mass.shape[1]
    cols = []
    with torch.no_grad():
        for b in range(N):   # the generalised force of body b alone at 1 kg
            onehot = torch.zeros(T, N, dtype=model.mass.dtype)
            onehot[:, b] = 1.0
            m = model.replace(mass=onehot, inertia=sim.unit_inertia * onehot[:, :, None, None],
                              damping=torch.zeros(T, nv, dtype=onehot.dtype), friction=torch.zeros(T, nv, dtype=onehot.dtype))
            cols.append(inverse_dynamics(m, *(torch.as_tensor(x, dtype=onehot.dtype) for x in (q, qd, qdd))).numpy())
    tau = E[np.minimum(np.arange(T), len(E) - 1)]
    signs = np.ones(nv)
    edge = slice(4, T - 4)   # the filter's ends are extrapolated
    damping = []
    for d in range(nv):   # the generalised force of dof d's damping at 1 N m s/rad (or N s/m)
        col = np.zeros((T - 8, nv))
        col[:, d] = qd[edge, d]
        damping.append(col.reshape(-1))
    # rows: every dof over the clip; columns: the masses, then each dof's damping
    A = np.stack([c[edge].reshape(-1) for c in cols] + damping, 1)
    for d in np.flatnonzero(np.abs(E).max(0) > 0):
        res = {}
        for s in (1.0, -1.0):
            target = tau[edge].copy()
            target[:, d] *= s
            res[s] = nnls(A, target.reshape(-1))[1]
        signs[d] = 1.0 if res[1.0] <= res[-1.0] else -1.0
    return signs


def with_effort(post, sim, absolute: bool):
    """``post`` with ``extra["known_effort"]`` {"joints", "signs"} (the sign applied to each joint's
    recorded effort, ``effort_signs``) and, when ``absolute`` (no known mass), ``identifiable.scale``
    saying that the known effort fixed the scale."""
    extra = dict(post.extra, known_effort={"joints": list(sim.joints), "signs": sim.signs})
    ident = dict(post.identifiable or {})
    if absolute:
        ident["scale"] = {"note": SCALE_NOTE.format(joints=", ".join(sim.joints)), "known_effort": list(sim.joints)}
    return replace(post, extra=extra, identifiable=ident)


def _effort_simulator(base):
    class EffortSimulator(base):
        """``identify.TwinSimulator`` with the recorded joint effort applied: state (q, qd, t)."""

        effort: torch.Tensor = None   # (R, nv) generalised force per recorded row
        fps: float = 30.0
        joints: tuple = ()
        signs: dict = None            # joint -> +1 / -1 applied to its recorded effort

        def controls(self, t0: torch.Tensor, n: int, dtype):
            """Generalised forces (n, B, nv) of the steps at times t0 + k dt, k < n: row floor(t fps)."""
            from vid2sim.models.dynamics import Control

            R = len(self.effort)
            t = t0[None, :] + torch.arange(n, dtype=dtype)[:, None] * self.dt
            row = torch.floor(t * self.fps + 1e-6).long().clamp(0, R - 1)   # (n, B)
            return Control(tau=self.effort.to(dtype)[row])

        def simulate(self, theta: torch.Tensor, start: torch.Tensor, steps: int, nets: tuple = ()) -> torch.Tensor:
            from vid2sim.pipeline.identify_push import timed_rollout

            return timed_rollout(self, theta, start, steps, nets, compile=self.compile)

    return EffortSimulator


def forecast_effort(rec, art, post=None):
    """``forecast.Effort`` of ``rec``'s known joint effort on the joints of ``art`` it names, with the
    signs identify applied (``post.extra["known_effort"]``; +1 without), or None."""
    from vid2sim.models.bullet import Effort

    act = getattr(rec, "actuation", None)
    if act is None or act.joint_effort is None:
        return None
    names = {j.name for j in art.joints if j.type in ("revolute", "prismatic")}
    keep = [d for d, j in enumerate(act.effort_joints) if j in names]
    if not keep:
        return None
    signs = ((post.extra or {}).get("known_effort") or {}).get("signs", {}) if post is not None else {}
    joints = tuple(act.effort_joints[d] for d in keep)
    return Effort(joints, act.joint_effort[:, keep] * np.array([signs.get(j, 1.0) for j in joints]))
