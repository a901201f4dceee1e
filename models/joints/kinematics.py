"""Forward kinematics of an ``Articulation`` in its joint coordinates, and the URDF frames.

THE JOINT-COORDINATE CONVENTION (shared by articulate, export, identify, forecast)
----------------------------------------------------------------------------------
Everything is expressed in *world coordinates at frame 0*. ``world_from_body0``
(M, 4, 4) is the tracked pose of every body at frame 0 (``poses.world_from_body[0]``):
at q = 0 every body is exactly there. Each joint j (parent P, child C) has a unit
``axis`` a and a point ``pivot`` p on it, both in world coordinates at q = 0, and
moves its child relative to its parent by the world-frame-0 motion

    fixed      J = I                                   (no coordinate)
    prismatic  J(q) = [I, q a]                          q: metres along a
    revolute   J(q) = [R(a, q), p - R(a, q) p]          q: radians, right hand about a
    planar     J(x, y, w) = [R(a, w), p - R(a, w) p + x u + y v]
                                                        (u, v) = geometry.plane_basis(a);
                                                        columns name_x, name_y, name_theta
    free       (parent world) the child's world pose W(t) is given directly:
               M_C(t) = W(t) @ inv(world_from_body0[C]); 7 columns name_x, name_y, name_z,
               name_qx, name_qy, name_qz, name_qw (xyz + quaternion xyzw).

Floating base: when the only joint whose parent is the world is ``free`` or
``planar``, that body is the URDF root: its joint has no q columns and its world pose
over time is ``JointPositions.root_pose`` (T, 7) xyz + xyzw (M_root(t) =
root_pose(t) @ inv(world_from_body0[root])). Otherwise ``root_pose`` is None.

The motion of a body is composed root to leaf, M_world = I,
``M_C(t) = M_P(t) @ J_j(q_j(t))``, and the body's pose is
``world_from_body[t, C] = M_C(t) @ world_from_body0[C]``. For the articulate stage's
output, q(0) = 0 up to noise (frame 0 is the zero configuration); revolute angles are
continuous (unwrapped), not wrapped to (-pi, pi].

A URDF that realises it (``urdf_frames``; the same rule as
``vid2sim.pipeline.export.link_frames``): the link of body C, child of joint j, has
its frame at the pivot p_j with the orientation of the body at frame 0,
``L_C = [R0_C, p_j]`` (the identity for ``world``; a floating root's link frame is
its body frame). The joint ``<origin>`` is ``inv(L_P) @ L_C``, its ``<axis>`` is
``R0_C^T a_j``, and the body's visual/collision/inertial ``<origin>`` inside its link
is ``inv(L_C) @ world_from_body0[C]`` (a pure translation R0_C^T (o_C - p_j)). The
articulate stage writes the pivot of a revolute joint as the axis point closest to
the child's frame-0 origin, and that of a prismatic or fixed joint as the child's
frame-0 origin, so those links coincide with their body frames. URDF ``planar`` joints have no
rotation: realise a planar joint as prismatic(u) -> prismatic(v) -> revolute(a)
through dummy links, named name_x, name_y, name_theta.

Deliberately no dynamics here, only geometry.
"""
from __future__ import annotations

import numpy as np

from vid2sim.models import geometry

PLANAR_SUFFIXES = ("_x", "_y", "_theta")
FREE_SUFFIXES = ("_x", "_y", "_z", "_qx", "_qy", "_qz", "_qw")


def coordinate_names(joint_type: str, name: str, floating_root: bool = False) -> list[str]:
    """The q column names of one joint (a floating-base root has none: root_pose)."""
    if floating_root or joint_type == "fixed":
        return []
    if joint_type in ("revolute", "prismatic"):
        return [name]
    if joint_type == "planar":
        return [name + s for s in PLANAR_SUFFIXES]
    if joint_type == "free":
        return [name + s for s in FREE_SUFFIXES]
    raise ValueError(f"unknown joint type {joint_type!r}")


def floating_root(art):
    """The joint of a floating-base root (sole world-parented joint, free or planar), or None."""
    roots = [j for j in art.joints if j.parent == "world"]
    return roots[0] if len(roots) == 1 and roots[0].type in ("free", "planar") else None


def joint_motion(joint_type: str, axis, pivot, q: np.ndarray) -> np.ndarray:
    """J(q) in world-frame-0 coordinates. q: (T,) or (T, k) -> (T, 4, 4)."""
    a = np.asarray(axis, float)
    p = np.asarray(pivot, float)
    q = np.asarray(q, float)
    T = len(q)
    J = np.broadcast_to(np.eye(4), (T, 4, 4)).copy()
    if joint_type == "prismatic":
        J[:, :3, 3] = q.reshape(T)[:, None] * a
    elif joint_type == "revolute":
        R = geometry.rot_axis(a, q.reshape(T))
        J[:, :3, :3] = R
        J[:, :3, 3] = p - R @ p
    elif joint_type == "planar":
        u, v = geometry.plane_basis(a)
        R = geometry.rot_axis(a, q[:, 2])
        J[:, :3, :3] = R
        J[:, :3, 3] = p - R @ p + q[:, :1] * u + q[:, 1:2] * v
    elif joint_type != "fixed":
        raise ValueError(f"joint_motion: no motion model for joint type {joint_type!r}")
    return J


def topological(art) -> list:
    """Joints ordered so that every parent body is placed before its children."""
    placed = {"world"}
    left = list(art.joints)
    out = []
    while left:
        ready = [j for j in left if j.parent in placed]
        if not ready:
            raise ValueError(f"articulation: joints {[j.name for j in left]} do not hang from the world")
        for j in ready:
            out.append(j)
            placed.add(j.child)
            left.remove(j)
    return out


def motions(art, jp, world_from_body0: np.ndarray) -> dict[str, np.ndarray]:
    """World-frame-0 motion M_b(t) (T, 4, 4) of every body (and 'world')."""
    T = jp.q.shape[0]
    col = {n: i for i, n in enumerate(jp.names)}
    idx = {b: i for i, b in enumerate(art.bodies)}
    M = {"world": np.broadcast_to(np.eye(4), (T, 4, 4))}
    froot = floating_root(art)
    if froot is not None and jp.root_pose is None:
        raise ValueError(f"floating root {froot.child!r} needs JointPositions.root_pose")
    for j in topological(art):
        if j is froot or j.type == "free":
            pose = jp.root_pose if j is froot else jp.q[:, [col[n] for n in coordinate_names("free", j.name)]]
            M[j.child] = M[j.parent] @ geometry.from_xyzquat(pose) @ geometry.inv(world_from_body0[idx[j.child]])
            continue
        names = coordinate_names(j.type, j.name)
        missing = [n for n in names if n not in col]
        if missing:
            raise ValueError(f"joint positions lack coordinate(s) {missing} of joint {j.name!r}")
        q = jp.q[:, [col[n] for n in names]] if names else np.zeros((T, 0))
        M[j.child] = M[j.parent] @ joint_motion(j.type, j.axis, j.pivot, q)
    return M


def forward_kinematics(art, jp, world_from_body0: np.ndarray) -> np.ndarray:
    """Body poses reproduced from joint positions.

    art: Articulation; jp: JointPositions (q (T, dofs), root_pose (T, 7) or None);
    world_from_body0: (M, 4, 4) body poses at frame 0 (bodies in ``art.bodies`` order).
    Returns world_from_body: (T, M, 4, 4).
    """
    M = motions(art, jp, np.asarray(world_from_body0, float))
    missing = [b for b in art.bodies if b not in M]
    if missing:
        raise ValueError(f"articulation: bodies {missing} are the child of no joint")
    return np.stack([M[b] @ world_from_body0[i] for i, b in enumerate(art.bodies)], 1)


def urdf_frames(art, world_from_body0: np.ndarray) -> dict[str, dict[str, np.ndarray]]:
    """Per joint name: ``origin`` (4, 4) joint frame in the parent link frame, ``axis``
    (3,) in the joint frame, ``body_in_link`` (4, 4) the child body's frame in its link
    frame (for visual, collision and inertial origins). See the module docstring."""
    idx = {b: i for i, b in enumerate(art.bodies)}
    link = {"world": np.eye(4)}
    out = {}
    for j in topological(art):
        W0 = world_from_body0[idx[j.child]]
        L = W0.copy() if j.type in ("free", "planar") else geometry.make(W0[:3, :3], np.asarray(j.pivot, float))
        link[j.child] = L
        out[j.name] = {"origin": geometry.inv(link[j.parent]) @ L, "axis": W0[:3, :3].T @ np.asarray(j.axis, float),
                       "body_in_link": geometry.inv(L) @ W0}
    return out
