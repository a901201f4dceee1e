"""Articulate's last step: the chosen joints in world coordinates at frame 0 and q(t).

Input: the tracks (``Tracks``) and the chosen forest (``Forest``: joints oriented away
from their roots, each fitted in the parent's frame by ``vid2sim.models.joints.fit``).
Output: the ``Articulation`` (axes and pivots in world coordinates at frame 0, through the
parent's denoised frame-0 pose) and the ``JointPositions`` solved root to leaf, so that
``vid2sim.models.joints.forward_kinematics`` reproduces the tracks. Joint coordinates
follow ``vid2sim.models.joints.kinematics`` (frame 0 is q = 0). Joint names are
``<parent>_to_<child>``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vid2sim.models import geometry as se3
from vid2sim.models.joints import fit
from vid2sim.models.joints.kinematics import coordinate_names, joint_motion, topological
from vid2sim.pipeline.artifacts import Articulation, Joint, JointPositions

FREE_COST_PER_FRAME = 2.0 * 6  # reported cost of a free joint: its 6 coordinates a frame
GRAVITY_DIR = np.array([0.0, 0.0, -1.0])  # world frame: gravity along -z (identify's and export's)


@dataclass(frozen=True)
class Tracks:
    """world_from_body: (T, M, 4, 4) tracked poses (m); valid: (T, M) frames where a body is
    seen; names: the M body names."""

    world_from_body: np.ndarray
    valid: np.ndarray
    names: list[str]

    def index(self, body: str) -> int:
        return self.names.index(body)


@dataclass(frozen=True)
class Edge:
    """A joint of the forest: ``fit`` explains the child's pose in the parent's frame."""

    parent: str
    child: str
    fit: fit.JointFit


@dataclass(frozen=True)
class Root:
    """A component hung from the world by a floating joint: kind 'planar' (with its fit)
    or 'free' (fit None)."""

    body: str
    kind: str
    fit: fit.JointFit | None


@dataclass(frozen=True)
class Forest:
    """The chosen joints: roots, then edges in breadth-first order from them (a parent's
    joint comes before its children's)."""

    roots: list[Root]
    edges: list[Edge]


def canonical_axis(a: np.ndarray) -> np.ndarray:
    """Sign convention: the largest component of an axis is positive."""
    return a if a[np.argmax(np.abs(a))] >= 0 else -a


def unwrap(q: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Continuous angle over valid frames, interpolated over invalid ones, q(0) near 0."""
    t = np.arange(len(q))
    if ok.sum() == 0:
        return np.zeros_like(q)
    qu = np.unwrap(q[ok])
    qu -= 2 * np.pi * np.round(qu[0] / (2 * np.pi))
    return np.interp(t, t[ok], qu)


def interpolate(q: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """q over valid frames, linearly interpolated over invalid ones."""
    t = np.arange(len(q))
    return q if ok.all() or not ok.any() else np.interp(t, t[ok], q[ok])


def level_axis(axis: np.ndarray, kind: str, tol_deg: float) -> np.ndarray:
    """``axis`` (unit, world frame) made exactly gravity-neutral when it is within ``tol_deg``
    of it: a prismatic axis horizontal (gravity does no work along it), a revolute axis
    vertical (gravity exerts no torque about it); any other axis is returned as it is."""
    if tol_deg <= 0 or kind not in ("prismatic", "revolute"):
        return axis
    along = float(axis @ GRAVITY_DIR)
    if kind == "prismatic":
        if abs(along) >= np.sin(np.deg2rad(tol_deg)):
            return axis
        flat = axis - along * GRAVITY_DIR
        return flat / np.linalg.norm(flat)
    if np.sqrt(max(0.0, 1.0 - along * along)) >= np.sin(np.deg2rad(tol_deg)):
        return axis
    return np.sign(along) * GRAVITY_DIR   # vertical, pointing the way the axis did


def world_frame(tracks: Tracks, forest: Forest, sigma_pos_m: float, sigma_rot_rad: float, level_deg: float = 0.0
                ) -> tuple[Articulation, JointPositions]:
    """Every joint of ``forest`` mapped to world-frame-0 coordinates, q solved root to leaf
    (sigma_pos_m / sigma_rot_rad: the tracks' noise, weighting position against rotation
    in the closed-form q). A prismatic or revolute joint whose parent is the world, or a body
    welded to it, has its axis levelled (``level_axis``) within ``level_deg`` degrees before
    its q is solved."""
    T = tracks.world_from_body.shape[0]
    motion = {"world": np.broadcast_to(np.eye(4), (T, 4, 4))}  # body -> (T, 4, 4) motion since frame 0
    joints: list[Joint] = []
    qcols: dict[str, np.ndarray] = {}
    floating_base = len(forest.roots) == 1 and not any(e.parent == "world" for e in forest.edges)
    root_pose = None
    for root in forest.roots:
        joint, cols = _root_joint(tracks, root, floating_base, motion, sigma_pos_m, sigma_rot_rad)
        joints.append(joint)
        qcols.update(cols)
        if floating_base:  # the root body's tracked pose is root_pose
            root_pose = se3.to_xyzquat(tracks.world_from_body[:, tracks.index(root.body)])
    for edge in forest.edges:  # breadth-first: the parent's motion is known
        joint, cols = _edge_joint(tracks, edge, motion, sigma_pos_m, sigma_rot_rad, level_deg)
        joints.append(joint)
        qcols.update(cols)
    names = list(tracks.names)
    art = Articulation(names, topological(Articulation(names, joints)))
    cols = [n for j in art.joints for n in coordinate_names(j.type, j.name) if n in qcols]
    q = np.stack([qcols[n] for n in cols], 1) if cols else np.zeros((T, 0))
    return art, JointPositions(q, cols, root_pose)


def _root_joint(tracks: Tracks, root: Root, floating_base: bool, motion: dict, sp: float, sr: float
                ) -> tuple[Joint, dict[str, np.ndarray]]:
    """The world joint of a floating component and its coordinates; ``motion[root.body]`` set.
    A floating base (the only root, nothing else on the world) keeps its pose in root_pose
    and has no coordinates here."""
    m = tracks.index(root.body)
    W, W0, ok = tracks.world_from_body[:, m], tracks.world_from_body[0, m], tracks.valid[:, m]
    name = f"world_to_{root.body}"
    cost = root.fit.cost if root.fit is not None else FREE_COST_PER_FRAME * int(ok.sum())
    if floating_base or root.kind == "free":
        motion[root.body] = W @ se3.inv(W0)
        a = canonical_axis(root.fit.axis) if root.kind == "planar" else np.array([0.0, 0.0, 1.0])
        cols = {} if floating_base else dict(zip(coordinate_names("free", name), se3.to_xyzquat(W).T))
        return Joint(name, root.kind, "world", root.body, tuple(a), tuple(W0[:3, 3]), cost), cols
    n, p = canonical_axis(root.fit.axis), W0[:3, 3]
    q = fit.solve_q("planar", W, n, p, W0, sp, sr)
    q = np.stack([interpolate(q[:, 0], ok), interpolate(q[:, 1], ok), unwrap(q[:, 2], ok)], 1)
    motion[root.body] = joint_motion("planar", n, p, q)
    return Joint(name, "planar", "world", root.body, tuple(n), tuple(p), cost), \
        dict(zip(coordinate_names("planar", name), q.T))


def _edge_joint(tracks: Tracks, edge: Edge, motion: dict, sp: float, sr: float, level_deg: float = 0.0
                ) -> tuple[Joint, dict[str, np.ndarray]]:
    """The joint of ``edge`` in world coordinates at frame 0 and its coordinate; ``motion[child]``
    set from the parent's. Its axis is levelled within ``level_deg`` (``level_axis``) when the
    parent does not move (the world, or bodies welded to it)."""
    f, P, C = edge.fit, edge.parent, edge.child
    W, c_idx = tracks.world_from_body, tracks.index(edge.child)
    Mp = motion[P]
    if P == "world":
        Wp0 = np.eye(4)
        ok = tracks.valid[:, c_idx]
    else:
        p_idx = tracks.index(P)
        ok = tracks.valid[:, c_idx] & tracks.valid[:, p_idx]
        Wp0 = se3.mean_pose((se3.inv(Mp) @ W[:, p_idx])[ok])  # denoised parent pose at frame 0
    a = canonical_axis(Wp0[:3, :3] @ f.axis)
    if P == "world" or np.allclose(Mp, np.eye(4)):  # a parent that never moves: gravity keeps its direction
        a = level_axis(a, f.kind, level_deg)
    c = Wp0[:3, :3] @ f.pivot + Wp0[:3, 3]
    oc = W[0, c_idx, :3, 3]
    p = c + ((oc - c) @ a) * a if f.kind == "revolute" else oc.copy()
    name = f"{P}_to_{C}"
    cols = {}
    if f.kind == "fixed":
        q = np.zeros((len(W), 0))
    else:
        q1 = fit.solve_q(f.kind, se3.inv(Mp) @ W[:, c_idx], a, p, W[0, c_idx], sp, sr)
        q1 = unwrap(q1, ok) if f.kind == "revolute" else interpolate(q1, ok)
        cols[name] = q1
        q = q1[:, None]
    motion[C] = Mp @ joint_motion(f.kind, a, p, q)
    return Joint(name, f.kind, P, C, tuple(a), tuple(p), f.cost), cols
