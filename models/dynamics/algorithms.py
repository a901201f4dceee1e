"""Recursive rigid-body algorithms on a Model: kinematics, ABA, RNEA, CRBA.

Featherstone, Rigid Body Dynamics Algorithms (2008): ABA Table 7.1, RNEA Table 5.1,
CRBA Table 6.2. All joints here have a motion subspace S that is constant in the child
frame (velocities are expressed in the child frame, Pinocchio-style), so the
velocity-product term c_J vanishes and c_i = v_i x (S_i qd_i).

The loops over bodies are Python loops over the static topology: they unroll once
(also when traced by ``torch.compile``); every tensor op is batched over the particle
dimension B. Nothing here depends on data values, so the code is branch-free per step.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from vid2sim.models.geometry_torch import plane_basis

from .model import JOINT_NV, Model
from .spatial import axis_angle_to_rot, cross_force, cross_motion, motion_transform, quat_to_rot, spatial_inertia


def motion_subspace(joint_type: str, axis: torch.Tensor) -> torch.Tensor:
    """S (6, nv) mapping the joint's qd to the child's spatial velocity [w; v] (child frame)."""
    z3 = torch.zeros(3, dtype=axis.dtype, device=axis.device)
    if joint_type == "revolute":
        return torch.cat([axis, z3])[:, None]
    if joint_type == "prismatic":
        return torch.cat([z3, axis])[:, None]
    if joint_type == "planar":
        t1, t2 = plane_basis(axis)
        return torch.stack([torch.cat([z3, t1]), torch.cat([z3, t2]), torch.cat([axis / axis.norm(), z3])], 1)
    if joint_type == "free":
        eye, z = torch.eye(3, dtype=axis.dtype, device=axis.device), torch.zeros(3, 3, dtype=axis.dtype, device=axis.device)
        return torch.cat([torch.cat([z, eye], 1), torch.cat([eye, z], 1)], 0)
    return torch.zeros(6, 0, dtype=axis.dtype, device=axis.device)


@dataclass
class Prepared:
    """State-independent quantities of a Model, computed once per rollout (differentiable)."""

    model: Model
    S: list                # per joint (6, nv_j)
    I: torch.Tensor        # (B, N, 6, 6) spatial inertia at body origin
    E_tree: torch.Tensor   # (N, 3, 3) parent -> joint-frame coordinates
    r_tree: torch.Tensor   # (N, 3)
    a_base: torch.Tensor   # (B, 6) spatial acceleration of the world frame (-gravity trick)
    plane: list            # per joint: (t1, t2, n) for planar joints else None


def prepare(model: Model) -> Prepared:
    S, plane = [], []
    for i, t in enumerate(model.joint_types):
        axis = model.joint_axis[i]
        S.append(motion_subspace(t, axis))
        plane.append((*plane_basis(axis), axis / axis.norm()) if t == "planar" else None)
    I = spatial_inertia(model.mass, model.com, model.inertia)
    g = model.gravity
    a_base = torch.cat([torch.zeros_like(g), -g], -1)
    return Prepared(model, S, I, model.joint_rotation.transpose(-1, -2), model.joint_translation, a_base, plane)


def joint_pose(joint_type: str, axis: torch.Tensor, qj: torch.Tensor, plane=None):
    """Child pose in the joint frame for joint positions qj (B, nq_j): (R (B,3,3) or None, r (B,3) or None)."""
    if joint_type == "revolute":
        return axis_angle_to_rot(axis, qj[:, 0]), None
    if joint_type == "prismatic":
        return None, qj[:, :1] * axis
    if joint_type == "planar":
        t1, t2, n = plane
        return axis_angle_to_rot(n, qj[:, 2]), qj[:, :1] * t1 + qj[:, 1:2] * t2
    if joint_type == "free":
        return quat_to_rot(qj[:, 3:7]), qj[:, :3]
    return None, None


@dataclass
class Kinematics:
    X: list        # per body (B, 6, 6) parent -> child motion transform
    v: list        # per body (B, 6) spatial velocity, child frame
    c: list        # per body (B, 6) velocity-product acceleration (None if zero)
    R: list        # per body (B, 3, 3) world_from_body rotation
    p: list        # per body (B, 3) body origin in world


def kinematics(prep: Prepared, q: torch.Tensor, qd: torch.Tensor | None) -> Kinematics:
    """Pass 1 of ABA/RNEA: transforms, world poses and (if qd given) velocities."""
    m = prep.model
    B = q.shape[0]
    X, v, c, Rw, pw = [], [], [], [], []
    for i, t in enumerate(m.joint_types):
        qs, vs, par = m.q_slice(i), m.v_slice(i), m.parents[i]
        RJ, rJ = joint_pose(t, m.joint_axis[i], q[:, qs], prep.plane[i])
        Et, rt = prep.E_tree[i], prep.r_tree[i]
        # child pose in parent: R = Rt RJ, r = rt + Rt rJ; E = R^T
        if RJ is None:
            E = Et.expand(B, 3, 3)
        else:
            E = RJ.transpose(-1, -2) @ Et
        r = rt.expand(B, 3) if rJ is None else rt + rJ @ Et  # Et^T rJ as row vector
        Xi = motion_transform(E, r)
        X.append(Xi)
        if par < 0:
            Rw.append(E.transpose(-1, -2))
            pw.append(r)
        else:
            Rw.append(Rw[par] @ E.transpose(-1, -2))
            pw.append(pw[par] + (Rw[par] @ r[..., None])[..., 0])
        if qd is not None:
            nvj = JOINT_NV[t]
            vJ = qd[:, vs] @ prep.S[i].T if nvj else None
            if par < 0:
                vi = vJ if vJ is not None else torch.zeros(B, 6, dtype=q.dtype, device=q.device)
                ci = None
            else:
                vi = (Xi @ v[par][..., None])[..., 0]
                ci = None
                if vJ is not None:
                    vi = vi + vJ
                    ci = cross_motion(vi, vJ)
            v.append(vi)
            c.append(ci)
    return Kinematics(X, v, c, Rw, pw)


def aba_from_kinematics(prep: Prepared, kin: Kinematics, tau: torch.Tensor | None,
                        f_ext: list | None) -> torch.Tensor:
    """Passes 2 and 3 of ABA (Featherstone Table 7.1). f_ext: per body (B, 6) or None."""
    m = prep.model
    n = m.num_bodies
    IA = [prep.I[:, i] for i in range(n)]
    pA = []
    for i in range(n):
        vi = kin.v[i]
        p = cross_force(vi, (IA[i] @ vi[..., None])[..., 0])
        if f_ext is not None and f_ext[i] is not None:
            p = p - f_ext[i]
        pA.append(p)
    U, Dinv, u = [None] * n, [None] * n, [None] * n
    for i in reversed(range(n)):
        S, par = prep.S[i], m.parents[i]
        nvj = S.shape[1]
        if nvj:
            Ui = IA[i] @ S                                # (B, 6, k)
            D = S.T @ Ui                                  # (B, k, k)
            Di = 1.0 / D if nvj == 1 else torch.linalg.inv(D)
            ui = -(pA[i] @ S)                             # (B, k)
            if tau is not None:
                ui = ui + tau[:, m.v_slice(i)]
            U[i], Dinv[i], u[i] = Ui, Di, ui
        if par < 0:
            continue
        if nvj:
            UD = U[i] @ Dinv[i]                           # (B, 6, k)
            Ia = IA[i] - UD @ U[i].transpose(-1, -2)
            pa = pA[i] + (UD @ u[i][..., None])[..., 0]
        else:
            Ia, pa = IA[i], pA[i]
        if kin.c[i] is not None:
            pa = pa + (Ia @ kin.c[i][..., None])[..., 0]
        Xt = kin.X[i].transpose(-1, -2)
        IA[par] = IA[par] + Xt @ Ia @ kin.X[i]
        pA[par] = pA[par] + (Xt @ pa[..., None])[..., 0]
    a = [None] * n
    qdd = []
    for i in range(n):
        par = m.parents[i]
        ap = prep.a_base if par < 0 else a[par]
        ai = (kin.X[i] @ ap[..., None])[..., 0]
        if kin.c[i] is not None:
            ai = ai + kin.c[i]
        if U[i] is not None:
            qi = (Dinv[i] @ (u[i] - (ai[:, None, :] @ U[i])[:, 0])[..., None])[..., 0]
            ai = ai + qi @ prep.S[i].T
            qdd.append(qi)
        a[i] = ai
    if not qdd:
        return torch.zeros(kin.X[0].shape[0], 0, dtype=prep.I.dtype)
    return torch.cat(qdd, -1)


def _prep(model_or_prep) -> Prepared:
    return model_or_prep if isinstance(model_or_prep, Prepared) else prepare(model_or_prep)


def forward_dynamics(model, q, qd, tau=None, f_ext=None) -> torch.Tensor:
    """ABA: qdd (B, nv) under gravity, generalized force tau (B, nv), f_ext (B, N, 6) body-frame."""
    prep = _prep(model)
    kin = kinematics(prep, q, qd)
    fe = None if f_ext is None else list(f_ext.unbind(1))
    return aba_from_kinematics(prep, kin, tau, fe)


def inverse_dynamics(model, q, qd, qdd, f_ext=None) -> torch.Tensor:
    """RNEA (Featherstone Table 5.1): tau (B, nv) producing qdd under gravity."""
    prep = _prep(model)
    m = prep.model
    kin = kinematics(prep, q, qd)
    n = m.num_bodies
    a, f = [None] * n, [None] * n
    for i in range(n):
        par = m.parents[i]
        ap = prep.a_base if par < 0 else a[par]
        ai = (kin.X[i] @ ap[..., None])[..., 0]
        if prep.S[i].shape[1]:
            ai = ai + qdd[:, m.v_slice(i)] @ prep.S[i].T
        if kin.c[i] is not None:
            ai = ai + kin.c[i]
        a[i] = ai
        I = prep.I[:, i]
        f[i] = (I @ ai[..., None])[..., 0] + cross_force(kin.v[i], (I @ kin.v[i][..., None])[..., 0])
        if f_ext is not None:
            f[i] = f[i] - f_ext[:, i]
    tau = [None] * n
    for i in reversed(range(n)):
        tau[i] = f[i] @ prep.S[i]
        par = m.parents[i]
        if par >= 0:
            f[par] = f[par] + (kin.X[i].transpose(-1, -2) @ f[i][..., None])[..., 0]
    return torch.cat(tau, -1)


def mass_matrix(model, q) -> torch.Tensor:
    """CRBA (Featherstone Table 6.2): joint-space inertia H (B, nv, nv)."""
    prep = _prep(model)
    m = prep.model
    kin = kinematics(prep, q, None)
    n, B = m.num_bodies, max(q.shape[0], m.batch)
    IC = [prep.I[:, i] for i in range(n)]
    for i in reversed(range(n)):
        par = m.parents[i]
        if par >= 0:
            IC[par] = IC[par] + kin.X[i].transpose(-1, -2) @ IC[i] @ kin.X[i]
    blocks = {}
    for i in range(n):
        if not prep.S[i].shape[1]:
            continue
        F = IC[i] @ prep.S[i]
        blocks[(i, i)] = prep.S[i].T @ F
        j = i
        while m.parents[j] >= 0:
            F = kin.X[j].transpose(-1, -2) @ F
            j = m.parents[j]
            if prep.S[j].shape[1]:
                blocks[(i, j)] = F.transpose(-1, -2) @ prep.S[j]
    H = torch.zeros(B, m.nv, m.nv, dtype=q.dtype, device=q.device)
    for (i, j), blk in blocks.items():
        si, sj = m.v_slice(i), m.v_slice(j)
        H[:, si, sj] = blk
        if i != j:
            H[:, sj, si] = blk.transpose(-1, -2)
    return H


def forward_kinematics(model, q) -> torch.Tensor:
    """T_world_body (B, N, 4, 4) for joint positions q (B, nq)."""
    prep = _prep(model)
    kin = kinematics(prep, q, None)
    R = torch.stack(kin.R, 1)
    p = torch.stack(kin.p, 1)
    top = torch.cat([R, p[..., None]], -1)
    bottom = torch.zeros_like(top[..., :1, :])
    bottom[..., 0, 3] = 1.0
    return torch.cat([top, bottom], -2)
