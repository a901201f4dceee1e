"""A Model as MuJoCo MJCF, to check and benchmark against MuJoCo (not an exporter).

Bodies nest as in the tree; a body's pose is its joint frame; inertias are written in
full. Planar joints become slide x, slide y, hinge z (same positions; MuJoCo's slide
velocities are parent-frame rates). Free joints: MuJoCo's qpos quaternion is wxyz and
its linear qvel is in the world frame (``to_mujoco_state`` converts). With
``geoms=True`` the collision boxes loaded from URDF become box geoms, and a ground
plane is added if the model has one; contact then follows MuJoCo's own contact model.
"""
from __future__ import annotations

import numpy as np
import torch

from .spatial import quat_to_rot, rot_to_quat


def _f(v) -> str:
    return " ".join(f"{float(x):.17g}" for x in np.ravel(np.asarray(v, dtype=float)))


def model_to_mjcf(model, particle: int = 0, dt: float = 1e-3, integrator: str = "Euler", geoms: bool = False,
                  extra_world: str = "", eulerdamp: bool = False) -> str:
    p = particle
    kids = {i: [] for i in range(-1, model.num_bodies)}
    for i, par in enumerate(model.parents):
        kids[par].append(i)

    def body(i, ind):
        t = model.joint_types[i]
        quat = rot_to_quat(model.joint_rotation[i].detach()).numpy()
        axis = model.joint_axis[i].detach().numpy()
        s = model.v_slice(i)
        damp = float(model.damping[p, s.start]) if s.stop > s.start else 0.0
        I = model.inertia[p, i].detach().numpy()
        out = [f'{ind}<body name="{model.body_names[i]}" pos="{_f(model.joint_translation[i].detach())}" '
               f'quat="{quat[3]} {quat[0]} {quat[1]} {quat[2]}">',
               f'{ind} <inertial pos="{_f(model.com[p, i].detach())}" mass="{float(model.mass[p, i]):.17g}" '
               f'fullinertia="{I[0, 0]:.17g} {I[1, 1]:.17g} {I[2, 2]:.17g} {I[0, 1]:.17g} {I[0, 2]:.17g} {I[1, 2]:.17g}"/>']
        if t == "revolute":
            out.append(f'{ind} <joint name="{model.joint_names[i]}" type="hinge" axis="{_f(axis)}" damping="{damp:.17g}"/>')
        elif t == "prismatic":
            out.append(f'{ind} <joint name="{model.joint_names[i]}" type="slide" axis="{_f(axis)}" damping="{damp:.17g}"/>')
        elif t == "planar":
            if not np.allclose(axis, [0, 0, 1]):
                raise ValueError("model_to_mjcf: planar joints must have axis z")
            # MuJoCo damps parent-frame slide rates, we child-frame ones: equal only when
            # both translational dofs have the same damping (isotropic)
            d = [float(model.damping[p, s.start + k]) for k in range(3)]
            out += [f'{ind} <joint type="slide" axis="1 0 0" damping="{d[0]:.17g}"/>',
                    f'{ind} <joint type="slide" axis="0 1 0" damping="{d[1]:.17g}"/>',
                    f'{ind} <joint type="hinge" axis="0 0 1" damping="{d[2]:.17g}"/>']
        elif t == "free":
            out.append(f'{ind} <freejoint/>')
        if geoms and i < len(model.body_shapes) and model.body_shapes[i] is not None:
            tag, attrib, (xyz, R) = model.body_shapes[i]
            q = rot_to_quat(torch.tensor(R)).numpy()
            if tag == "box":
                size = np.array([float(x) for x in attrib["size"].split()]) / 2
                out.append(f'{ind} <geom type="box" size="{_f(size)}" pos="{_f(xyz)}" '
                           f'quat="{q[3]} {q[0]} {q[1]} {q[2]}" mass="0" friction="{float(model.contact_friction[p])} 0 0"/>')
        for k in kids[i]:
            out += body(k, ind + " ")
        out.append(f"{ind}</body>")
        return out

    g = model.gravity[p].detach().numpy()
    attrs = ('eulerdamp="disable" ' if not eulerdamp else "") + ('contact="disable"' if not geoms else "")
    flags = f"<flag {attrs}/>" if attrs else ""
    lines = ['<mujoco><compiler angle="radian" inertiafromgeom="false"/>',
             f'<option timestep="{dt}" integrator="{integrator}" gravity="{_f(g)}">{flags}</option><worldbody>']
    if geoms and model.ground:
        lines.append(f' <geom type="plane" size="5 5 0.1" pos="0 0 {model.ground_height}" '
                     f'friction="{float(model.contact_friction[p])} 0 0"/>')
    for k in kids[-1]:
        lines += body(k, " ")
    lines.append(extra_world)  # after the model's bodies, so its qpos/qvel come first
    lines.append("</worldbody></mujoco>")
    return "\n".join(lines)


def to_mujoco_state(model, q: np.ndarray, qd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Our q (nq,), qd (nv,) -> MuJoCo qpos, qvel (model's joints only)."""
    qpos, qvel = [], []
    for i, t in enumerate(model.joint_types):
        qi, vi = q[model.q_slice(i)], qd[model.v_slice(i)]
        if t == "free":
            R = quat_to_rot(torch.tensor(qi[3:])).numpy()
            qpos += list(qi[:3]) + [qi[6], qi[3], qi[4], qi[5]]
            qvel += list(R @ vi[:3]) + list(vi[3:])
        elif t == "planar":
            c, s = np.cos(qi[2]), np.sin(qi[2])
            qpos += list(qi)
            qvel += [c * vi[0] - s * vi[1], s * vi[0] + c * vi[1], vi[2]]
        else:
            qpos += list(qi)
            qvel += list(vi)
    return np.array(qpos), np.array(qvel)
