"""Forward dynamics by the joint-space inertia method, vectorised over bodies (world frame).

Featherstone (2008) ch. 6: qdd = H(q)^-1 (tau - C(q, qd)), with H and C formed here from
world-frame spatial Jacobians instead of the recursions of CRBA/RNEA: every body's
velocity, velocity-product acceleration, force and Jacobian is one batched tensor op
over all bodies, using the static ancestor mask ``anc[i, k]`` (dof k moves body i).
Only the world poses are a per-body recursion.

Why besides ABA (``algorithms.py``): on CPU with B ~ 64 particles and N < ~15 bodies
the cost of a PyTorch step is the number of tensor ops, not flops; this form needs
~60 ops for any small tree (ABA needs ~40 per body) in the forward pass and about
as many in the backward pass, and it compiles quickly. It is O(N^2 nv + nv^3), so for
large trees ABA is the better choice (``algorithm="aba"`` in ``step``/``rollout``).
Both are tested against Pinocchio and against each other.

Under torch.compile (the code Inductor fuses into a step's kernels) the same quantities
are formed without work on structural zeros: sums over the mask are sums over each body's
dof list (``_tree_sum``), a joint contributes a rotation or translation only if its kind
has one (``world_poses``), and the joint angles' sin/cos are stored once (``stored``)
rather than recomputed in each rotation entry's loop. The tree's static part
(``fast_prepare``) is kept by tree, joint axes and contact bodies.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from vid2sim.models.geometry_torch import plane_basis, skew

from .algorithms import motion_subspace
from .augment import friction_function, generalized_force
from .contact import has_contact, point_forces
from .model import JOINT_NV, Control, Model
from .spatial import cross_force, cross_motion, quat_to_rot


def _compiling() -> bool:
    return torch.compiler.is_compiling()


def mm(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """A @ B for tiny matrices. Under torch.compile as multiply-and-sum, which Inductor fuses
    with its neighbours (forward and backward) instead of calling an external bmm per product."""
    if _compiling():
        return (A[..., :, :, None] * B[..., None, :, :]).sum(-2)
    return A @ B


def mv(A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """A @ x for (..., n, k) and (..., k)."""
    if _compiling():
        return (A * x[..., None, :]).sum(-1)
    return (A @ x[..., None])[..., 0]


def stored(x: torch.Tensor) -> torch.Tensor:
    """x (B, k, ...) itself; under torch.compile written once into a buffer of its own (an
    index_put, which Inductor stores) rather than recomputed inside every consumer's loop:
    for values such as sin/cos of a joint angle that a (B, 3, 3) rotation broadcasts, which
    Inductor would otherwise recompute per matrix entry (libm calls are not hoisted)."""
    if not _compiling():
        return x
    out = torch.zeros_like(x)
    out[:, list(range(x.shape[1]))] = x
    return out


def solve_spd(H: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """H^-1 b for symmetric positive definite H (B, n, n). Under torch.compile an unrolled
    Cholesky (n is small and static) so the whole step fuses; eagerly one LAPACK call."""
    n = H.shape[-1]
    if not _compiling() or n > 12:
        return torch.linalg.solve(H, b[..., None])[..., 0]
    L = [[None] * n for _ in range(n)]
    for j in range(n):
        d = H[:, j, j]
        for k in range(j):
            d = d - L[j][k] * L[j][k]
        L[j][j] = torch.sqrt(d)
        for i in range(j + 1, n):
            v = H[:, i, j]
            for k in range(j):
                v = v - L[i][k] * L[j][k]
            L[i][j] = v / L[j][j]
    y = [None] * n
    for i in range(n):
        v = b[:, i]
        for k in range(i):
            v = v - L[i][k] * y[k]
        y[i] = v / L[i][i]
    x = [None] * n
    for i in reversed(range(n)):
        v = y[i]
        for k in range(i + 1, n):
            v = v - L[k][i] * x[k]
        x[i] = v / L[i][i]
    return torch.stack(x, -1)


@dataclass
class FastPrep:
    model: Model
    anc: torch.Tensor        # (N, nv) 1 where dof k is on the path root -> body i
    anc_rows: list           # per row of ``anc`` (per place in ``active`` with it): its dofs
    anc_cols: list           # per dof: the rows of ``anc`` (places in ``active``) it moves
    dof_body: list           # (nv,) child body of each dof
    S_w: torch.Tensor        # (nv, 3) angular part of each dof's motion axis, child frame
    S_v: torch.Tensor        # (nv, 3) linear part
    rev: tuple               # (bodies, q indices, K (nr, 3, 3), K^2) of the rotations about one axis
                             # (Rodrigues): revolute joints and planar joints' q[2] about their normal
    pri: tuple               # same for prismatic
    others: list             # (body, type, in-plane basis (t1, t2) or None) for planar and free
    spring_index: list       # q index of each dof's spring (0 for free dofs)
    spring_mask: torch.Tensor  # (nv,)
    a_grav: torch.Tensor     # (B, 6) [0; g]
    # bodies whose forces enter the dynamics: those a dof moves and those with contact points, in
    # body order; None: every body. A body welded to the world (fixed joints up to it) has a zero
    # row in ``anc``, so its force adds nothing to H or the bias: ``accel_fast`` skips it.
    active: list | None = None
    dof_active: list | None = None      # each dof's child body as a place in ``active`` (None with it)
    contact_active: list | None = None  # each contact point's body as a place in ``active`` (None with it)


def _structure(model: Model) -> FastPrep:
    """``model``'s FastPrep, its gravity ``a_grav`` left empty (``fast_prepare`` sets it)."""
    n, nv = model.num_bodies, model.nv
    dt = model.dtype
    anc = torch.zeros(n, nv, dtype=dt)
    dof_body, cols = [], []
    rev_b, rev_q, rev_axis, pri_b, pri_q, others = [], [], [], [], [], []
    for i, t in enumerate(model.joint_types):
        j = i
        while j >= 0:
            s = model.v_slice(j)
            anc[i, s] = 1.0
            j = model.parents[j]
        dof_body += [i] * JOINT_NV[t]
        if JOINT_NV[t]:
            cols.append(motion_subspace(t, model.joint_axis[i]))
        qs = model.q_slice(i).start
        if t == "revolute":
            rev_b.append(i)
            rev_q.append(qs)
            rev_axis.append(model.joint_axis[i])
        elif t == "prismatic":
            pri_b.append(i)
            pri_q.append(qs)
        elif t in ("planar", "free"):
            ax = model.joint_axis[i]
            others.append((i, t, plane_basis(ax) if t == "planar" else None))
            if t == "planar":   # its rotation (about the normal, by q[2]) as a revolute joint's
                rev_b.append(i)
                rev_q.append(qs + 2)
                rev_axis.append(ax / ax.norm())
    S = torch.cat(cols, 1).T if cols else torch.zeros(0, 6, dtype=dt)
    K = skew(torch.stack(rev_axis) if rev_axis else model.joint_axis[:0])
    active = [i for i in range(n) if bool(anc[i].any()) or i in model.contact_body]
    place = {b: k for k, b in enumerate(active)}
    some = len(active) < n
    rows = [[k for k in range(nv) if anc[i, k]] for i in (active if some else range(n))]
    cols = [[j for j, r in enumerate(rows) if k in r] for k in range(nv)]
    return FastPrep(model, anc, rows, cols, dof_body, S[:, :3], S[:, 3:], (rev_b, rev_q, K, K @ K),
                    (pri_b, pri_q, model.joint_axis[pri_b]), others, list(model.spring_index),
                    torch.tensor(model.spring_mask, dtype=dt), torch.zeros(0, 6, dtype=dt),
                    active if some else None, [place[b] for b in dof_body] if some else None,
                    [place[b] for b in model.contact_body] if some else None)


_STRUCTURES: dict = {}      # _structure (a FastPrep) by the model's tree, joint axes, contact bodies, dtype, device
_STRUCTURES_MAX = 64


def fast_prepare(model: Model) -> FastPrep:
    """The model's static quantities for ``accel_fast``. The ones that depend only on the tree,
    the joint axes and the contact bodies are kept by those (not when the axes require grad:
    they are then recomputed, so that gradients flow to them)."""
    ax = model.joint_axis
    key = None
    if not ax.requires_grad:
        key = (model.joint_types, model.parents, model.contact_body, model.dtype, str(ax.device), ax.dtype,
               ax.detach().cpu().numpy().tobytes())
    st = _STRUCTURES.get(key) if key is not None else None
    if st is None:
        st = _structure(model)
        if key is not None:
            if len(_STRUCTURES) >= _STRUCTURES_MAX:
                _STRUCTURES.pop(next(iter(_STRUCTURES)))
            _STRUCTURES[key] = st
    g = model.gravity
    return replace(st, model=model, a_grav=torch.cat([torch.zeros_like(g), g], -1))


def world_poses(fp: FastPrep, q: torch.Tensor):
    """R_world_body (B, N, 3, 3), p_world_body (B, N, 3). A joint that does not rotate
    (prismatic, fixed) contributes its fixed joint rotation alone, one that does not translate
    (revolute, fixed) its fixed translation alone: no product with an identity or a zero."""
    m = fp.model
    B = q.shape[0]
    rot, trans = {}, {}     # body -> the joint's rotation RJ (B, 3, 3) / translation rJ (B, 3), joint frame
    rev_b, rev_q, K, K2 = fp.rev
    if rev_b:
        ang = q[:, rev_q]
        sc = stored(torch.stack([torch.sin(ang), 1 - torch.cos(ang)], 1))[..., None, None]    # (B, 2, nr, 1, 1)
        RJ = torch.eye(3, dtype=q.dtype, device=q.device) + sc[:, 0] * K + sc[:, 1] * K2     # (B, nr, 3, 3)
        rot = {b: RJ[:, k] for k, b in enumerate(rev_b)}
    pri_b, pri_q, pri_axis = fp.pri
    if pri_b:
        rJ = q[:, pri_q, None] * pri_axis                                                    # (B, np, 3)
        trans = {b: rJ[:, k] for k, b in enumerate(pri_b)}
    for i, t, plane in fp.others:
        qs = m.q_slice(i)
        if t == "planar":   # its rotation is with the revolute joints'
            t1, t2 = plane
            qj = q[:, qs]
            trans[i] = qj[:, :1] * t1 + qj[:, 1:2] * t2
        else:
            rot[i] = quat_to_rot(q[:, qs.start + 3:qs.stop])
            trans[i] = q[:, qs.start:qs.start + 3]
    Rw, pw = [], []
    for i, par in enumerate(m.parents):
        E, r = m.joint_rotation[i], m.joint_translation[i]      # joint frame in the parent's frame
        R_loc = mm(E, rot[i]) if i in rot else E.expand(B, 3, 3)   # child pose in parent frame
        r_loc = r + mv(E, trans[i]) if i in trans else r.expand(B, 3)
        if par < 0:
            Rw.append(R_loc)
            pw.append(r_loc)
        else:
            Rw.append(mm(Rw[par], R_loc))
            pw.append(pw[par] + mv(Rw[par], r_loc))
    return torch.stack(Rw, 1), torch.stack(pw, 1)


def accel_fast(fp: FastPrep, q: torch.Tensor, qd: torch.Tensor, control: Control | None) -> torch.Tensor:
    """qdd (B, nv) with gravity, joint forces, contact and augmentation (same as integrate._accel).
    Forces are formed for ``fp.active``'s bodies only (the others' rows of ``anc`` are zero)."""
    m = fp.model
    R, p = world_poses(fp, q)
    Rk, pk = R[:, fp.dof_body], p[:, fp.dof_body]
    act = fp.active
    anc, com, inertia, mass = fp.anc, m.com, m.inertia, m.mass
    if act is not None:   # welded bodies dropped: body index i -> its place in ``act``
        R, p, anc, com, inertia, mass = R[:, act], p[:, act], anc[act], com[:, act], inertia[:, act], mass[:, act]
    w = mv(Rk, fp.S_w)
    s = torch.cat([w, mv(Rk, fp.S_v) + torch.cross(pk, w, dim=-1)], -1)   # (B, nv, 6) world axes
    V = _tree_sum(anc, fp.anc_rows, s * qd[..., None])               # (B, N, 6) body velocities, world frame
    sdot = cross_motion(V[:, fp.dof_body if act is None else fp.dof_active], s)
    a = _tree_sum(anc, fp.anc_rows, sdot * qd[..., None]) - fp.a_grav[:, None, :]   # velocity-product accel minus gravity
    # forces f = I a + v x* I v with I the spatial inertia about the world origin, formed from
    # the COM c and the rotational inertia Ic about it (Featherstone Eq. 2.63) without 6x6 products
    c = p + mv(R, com)
    Ic = mm(mm(R, inertia), R.transpose(-1, -2))
    mass = mass[..., None]
    f = _inertia_times(mass, c, Ic, a) + cross_force(V, _inertia_times(mass, c, Ic, V))
    # generalized forces
    tau = generalized_force(m, q, qd, control, fp.spring_index, fp.spring_mask)
    if has_contact(m, control):
        idx = list(m.contact_body) if act is None else fp.contact_active
        x = p[:, idx] + mv(R[:, idx], m.contact_points)
        Vp = V[:, idx]
        xdot = Vp[..., 3:] + torch.cross(Vp[..., :3], x, dim=-1)
        F = point_forces(m, x, xdot, control, friction_function(m) if m.nets else None)
        wr = torch.cat([torch.cross(x, F, dim=-1), F], -1)
        f = f.index_add(1, torch.as_tensor(idx, device=f.device), -wr)
    bias = (s * _tree_sum(anc.T, fp.anc_cols, f)).sum(-1)             # (B, nv)
    # H = sum_i J_i^T I_i J_i, with J_i = the world axes s of the dofs that move body i
    Is = _inertia_times(mass[:, :, None], c[:, :, None], Ic[:, :, None], s[:, None])    # (B, N, nv, 6)
    Is = Is * anc[None, :, :, None]
    H = torch.einsum("bkj,bnlj,nk->bkl", s, Is, anc) if not _compiling() else \
        (s[:, None, :, None, :] * Is[:, :, None, :, :] * anc[None, :, :, None, None]).sum((1, 4))
    return solve_spd(H, tau - bias)


def _tree_sum(mask: torch.Tensor, groups: list, x: torch.Tensor) -> torch.Tensor:
    """mask @ x for a 0/1 ``mask`` (M, K) and x (B, K, 6): (B, M, 6), row j the sum of x[:, k] over
    k in groups[j] (mask's nonzero columns of row j). Under torch.compile as those sums (no
    products with the mask's zeros and ones); eagerly one matmul."""
    if not _compiling():
        return mm(mask, x)
    zero = x.new_zeros(x.shape[0], x.shape[-1])
    rows = []
    for g in groups:
        t = x[:, g[0]] if g else zero
        for k in g[1:]:
            t = t + x[:, k]
        rows.append(t)
    return torch.stack(rows, 1)


def _inertia_times(mass, c, Ic, v):
    """I v for the spatial inertia about the world origin of bodies with COM c (world) and
    rotational inertia Ic about the COM: I v = [Ic w + c x (m (u - c x w)) ; m (u - c x w)]
    with v = [w; u] (world-origin linear part u). Broadcasts over leading dims."""
    w, u = v[..., :3], v[..., 3:]
    c, w = torch.broadcast_tensors(c, w)
    lin = mass * (u - torch.cross(c, w, dim=-1))
    ang = mv(Ic, w) + torch.cross(c, lin, dim=-1)
    return torch.cat([ang, lin], -1)
