"""Model <-> URDF, and Model from the articulate stage's Articulation.

URDF semantics kept exactly: a joint's ``<origin>`` is the joint frame in the parent
link frame, the child link frame equals the joint frame at q = 0, ``<axis>`` is in
the joint frame, ``<inertial>`` gives mass, COM pose and inertia in the link frame.
``continuous`` loads as revolute (no limits here), ``floating`` as free. Joint
stiffness/rest and contact parameters have no URDF element and are not saved.
"""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import torch

from vid2sim.datasets.shapes import stand_in_inertia

from .model import JOINT_NV, Model, make_model
from .spatial import rpy_to_rot, rot_to_rpy

_TYPES = {"revolute": "revolute", "continuous": "revolute", "prismatic": "prismatic", "fixed": "fixed",
          "floating": "free", "planar": "planar"}


def _vec(s: str | None, default):
    return np.array([float(x) for x in s.split()]) if s else np.array(default, float)


def _origin(el):
    o = el.find("origin") if el is not None else None
    if o is None:
        return np.zeros(3), np.eye(3)
    rpy = _vec(o.get("rpy"), [0, 0, 0])
    return _vec(o.get("xyz"), [0, 0, 0]), rpy_to_rot(torch.tensor(rpy)).numpy()


def _sample_shape(geom, n: int) -> np.ndarray:
    """Points on a URDF <geometry> surface in its own frame (box corners first)."""
    g = list(geom)[0]
    if g.tag == "box":
        sx, sy, sz = _vec(g.get("size"), [0, 0, 0]) / 2
        corners = np.array([[x, y, z] for x in (-sx, sx) for y in (-sy, sy) for z in (-sz, sz)])
        return corners[:max(n, 8)] if n <= 8 else np.concatenate([corners, _box_edges(sx, sy, sz, n - 8)])
    if g.tag == "sphere":
        r = float(g.get("radius"))
        k = np.arange(n) + 0.5
        phi, th = np.arccos(1 - 2 * k / n), math.pi * (1 + 5 ** 0.5) * k
        return r * np.stack([np.cos(th) * np.sin(phi), np.sin(th) * np.sin(phi), np.cos(phi)], 1)
    if g.tag in ("cylinder", "capsule"):
        r, h = float(g.get("radius")), float(g.get("length")) / 2
        m = max(n // 2, 3)
        a = 2 * math.pi * np.arange(m) / m
        ring = np.stack([r * np.cos(a), r * np.sin(a)], 1)
        ends = [h + r, -h - r] if g.tag == "capsule" else [h, -h]
        pts = [np.column_stack([ring, np.full(m, z)]) for z in (h, -h)]
        if g.tag == "capsule":
            pts.append(np.array([[0, 0, ends[0]], [0, 0, ends[1]]]))
        return np.concatenate(pts)
    return np.zeros((0, 3))


def _box_edges(sx, sy, sz, n):
    t = np.linspace(-1, 1, max(n // 12, 1) + 2)[1:-1]
    pts = []
    for s1 in (-1, 1):
        for s2 in (-1, 1):
            pts += [[x * sx, s1 * sy, s2 * sz] for x in t] + [[s1 * sx, y * sy, s2 * sz] for y in t] + \
                   [[s1 * sx, s2 * sy, z * sz] for z in t]
    return np.array(pts)[:n]


def model_from_urdf(path_or_string, batch: int = 1, dtype=torch.float64, floating: bool | None = None,
                    contact_points: int = 0, **kwargs) -> Model:
    """Load a URDF file or string. Extra keyword arguments go to ``make_model`` (gravity, contact...)."""
    text = str(path_or_string)
    if not text.lstrip().startswith("<"):
        text = Path(text).read_text()
    root = ET.fromstring(text)
    links = {l.get("name"): l for l in root.findall("link")}
    tree = _joint_tree(root, links, floating)
    bodies = tree["bodies"]
    mass, com, inertia, cbody, cpts, shapes = [], [], [], [], [], []
    for i, b in enumerate(bodies):
        m, c, I = _inertial(links[b])
        mass.append(m)
        com.append(c)
        inertia.append(I)
        shape, pts = _collisions(links[b], contact_points)
        for p in pts:
            cpts.append(p)
            cbody += [i] * len(p)
        shapes.append(shape)
    extra = dict(kwargs)
    if cbody:
        extra.setdefault("ground", True)
        extra["contact_body"] = tuple(cbody)
        extra["contact_points"] = torch.tensor(np.concatenate(cpts), dtype=dtype)
    gravity = extra.pop("gravity", (0.0, 0.0, -9.81))
    return make_model(bodies, tree["names"], tree["types"], tree["parents"], np.array(tree["axes"]),
                      np.array(tree["rots"]), np.array(tree["trans"]), mass, np.array(com), np.array(inertia),
                      batch=batch, dtype=dtype, damping=tree["damping"], friction=tree["friction"], gravity=gravity,
                      body_shapes=tuple(shapes), **extra)


def _joint_tree(root: ET.Element, links: dict, floating: bool | None) -> dict[str, list]:
    """The URDF's bodies in breadth-first order from its one root link, with per body its joint's
    name, type, parent index, unit axis, origin rotation and translation, and per joint velocity
    its damping and friction. A root other than "world" gets a fixed or free joint."""
    joints = root.findall("joint")
    children = {j.find("child").get("link"): j for j in joints}
    roots = [n for n in links if n not in children]
    if len(roots) != 1:
        raise ValueError(f"URDF must have exactly one root link, found {roots}")
    base = roots[0]
    fixed_base = base == "world" if floating is None else not floating
    by_parent: dict[str, list] = {}
    for j in joints:
        by_parent.setdefault(j.find("parent").get("link"), []).append(j)
    keys = ("bodies", "names", "types", "parents", "axes", "rots", "trans", "damping", "friction")
    out: dict[str, list] = {k: [] for k in keys}

    def add(body, name, t, parent, axis, R, xyz, d, f):
        for k, v in zip(keys[:7], (body, name, t, parent, axis, R, xyz)):
            out[k].append(v)
        out["damping"] += [d] * JOINT_NV[t]
        out["friction"] += [f] * JOINT_NV[t]

    if base != "world":
        add(base, f"{base}_fixed" if fixed_base else f"{base}_free", "fixed" if fixed_base else "free", -1,
            [0.0, 0.0, 1.0], np.eye(3), np.zeros(3), 0.0, 0.0)
    queue = [base]
    while queue:
        link = queue.pop(0)
        for j in by_parent.get(link, []):
            child = j.find("child").get("link")
            t = _TYPES.get(j.get("type"))
            if t is None:
                raise ValueError(f"joint {j.get('name')!r}: unsupported type {j.get('type')!r}")
            xyz, R = _origin(j)
            ax = _vec(j.find("axis").get("xyz") if j.find("axis") is not None else None, [1, 0, 0])
            dyn = j.find("dynamics")
            d = float(dyn.get("damping", 0)) if dyn is not None else 0.0
            f = float(dyn.get("friction", 0)) if dyn is not None else 0.0
            add(child, j.get("name"), t, -1 if link == "world" else out["bodies"].index(link), ax / np.linalg.norm(ax),
                R, xyz, d, f)
            queue.append(child)
    return out


def _inertial(link: ET.Element) -> tuple[float, np.ndarray, np.ndarray]:
    """A link's mass (kg), centre of mass (3,) and inertia (3, 3) about it, in the link frame."""
    inert = link.find("inertial")
    m, c, I = 0.0, np.zeros(3), np.zeros((3, 3))
    if inert is not None:
        m = float(inert.find("mass").get("value")) if inert.find("mass") is not None else 0.0
        c, Ri = _origin(inert)
        el = inert.find("inertia")
        if el is not None:
            g = {k: float(el.get(k, 0)) for k in ("ixx", "iyy", "izz", "ixy", "ixz", "iyz")}
            I = np.array([[g["ixx"], g["ixy"], g["ixz"]], [g["ixy"], g["iyy"], g["iyz"]],
                          [g["ixz"], g["iyz"], g["izz"]]])
            I = Ri @ I @ Ri.T
    return m, c, I


def _collisions(link: ET.Element, contact_points: int) -> tuple[tuple | None, list[np.ndarray]]:
    """A link's first primitive collision shape (tag, attributes, origin) or None, and with
    ``contact_points`` > 0 that many contact points (n, 3) per collision geometry (link frame)."""
    shape, pts = None, []
    for col in link.findall("collision"):
        geom = col.find("geometry")
        if geom is None or not len(geom):
            continue
        g = list(geom)[0]
        if shape is None and g.tag in ("box", "sphere", "cylinder", "capsule"):
            shape = (g.tag, dict(g.attrib), _origin(col))
        if contact_points > 0:
            xyz, R = _origin(col)
            pts.append(_sample_shape(geom, contact_points) @ R.T + xyz)
    return shape, pts


def _fmt(v) -> str:
    return " ".join(f"{float(x):.17g}" for x in np.ravel(v))


def model_to_urdf(model: Model, particle: int = 0, name: str = "vid2sim") -> str:
    """URDF text of one particle's parameters. A free root becomes the root link; otherwise "world"."""
    p = particle
    out = ['<?xml version="1.0"?>', f'<robot name="{name}">']
    free_root = model.joint_types[0] == "free" and model.parents[0] == -1 and \
        sum(1 for q in model.parents if q == -1) == 1
    if not free_root:
        out.append('  <link name="world"/>')
    rots = model.joint_rotation.detach().double()
    rpys = rot_to_rpy(rots).numpy()
    for i, b in enumerate(model.body_names):
        m = float(model.mass[p, i])
        c = model.com[p, i].detach().double().numpy()
        I = model.inertia[p, i].detach().double().numpy()
        out.append(f'  <link name="{b}">')
        out.append(f'    <inertial><origin xyz="{_fmt(c)}" rpy="0 0 0"/><mass value="{m:.17g}"/>'
                   f'<inertia ixx="{I[0, 0]:.17g}" ixy="{I[0, 1]:.17g}" ixz="{I[0, 2]:.17g}" '
                   f'iyy="{I[1, 1]:.17g}" iyz="{I[1, 2]:.17g}" izz="{I[2, 2]:.17g}"/></inertial>')
        if i < len(model.body_shapes) and model.body_shapes[i] is not None:
            tag, attrib, (xyz, R) = model.body_shapes[i]
            attrs = " ".join(f'{k}="{v}"' for k, v in attrib.items())
            rpy = rot_to_rpy(torch.tensor(R)).numpy()
            geo = f'<origin xyz="{_fmt(xyz)}" rpy="{_fmt(rpy)}"/><geometry><{tag} {attrs}/></geometry>'
            out.append(f"    <visual>{geo}</visual>")
            out.append(f"    <collision>{geo}</collision>")
        out.append("  </link>")
    for i, (jn, t) in enumerate(zip(model.joint_names, model.joint_types)):
        if i == 0 and free_root:
            continue
        parent = "world" if model.parents[i] < 0 else model.body_names[model.parents[i]]
        utype = {"free": "floating"}.get(t, t)
        lines = [f'  <joint name="{jn}" type="{utype}">', f'    <parent link="{parent}"/>',
                 f'    <child link="{model.body_names[i]}"/>',
                 f'    <origin xyz="{_fmt(model.joint_translation[i].detach())}" rpy="{_fmt(rpys[i])}"/>',
                 f'    <axis xyz="{_fmt(model.joint_axis[i].detach())}"/>']
        if JOINT_NV[t]:
            s = model.v_slice(i)
            lines.append(f'    <dynamics damping="{float(model.damping[p, s.start]):.17g}" '
                         f'friction="{float(model.friction[p, s.start]):.17g}"/>')
        if t in ("revolute", "prismatic"):
            lim = "3.141592653589793" if t == "revolute" else "10"
            lines.append(f'    <limit lower="-{lim}" upper="{lim}" effort="1000" velocity="100"/>')
        lines.append("  </joint>")
        out += lines
    out.append("</robot>")
    return "\n".join(out) + "\n"


def model_from_articulation(art, T_world_body0, masses=None, shapes=None, batch: int = 1,
                            dtype=torch.float64, **kwargs) -> Model:
    """Model whose q = 0 is the frame-0 configuration of an ``Articulation``.

    T_world_body0: dict body -> (4, 4) or array (M, 4, 4) in ``art.bodies`` order, the
    tracked poses at frame 0. Each body's model frame sits at its joint's pivot with
    world-aligned axes at frame 0 (free joints: at the tracked origin); the tracked body
    frame is that frame times the constant offset (R0, p0 - pivot), so its COM (shape
    centre = tracked origin) is ``p0 - pivot`` and its inertia ``R0 I_shape R0^T``.
    masses: dict body -> kg (default 1). shapes: dict body -> Shape (default: the inertia of
    ``datasets.shapes.stand_in_inertia``, a 0.1 m sphere).
    """
    if not isinstance(T_world_body0, dict):
        T_world_body0 = {b: np.asarray(T_world_body0[i]) for i, b in enumerate(art.bodies)}
    order, placed = [], {"world"}
    pending = list(art.joints)
    while pending:
        ready = [j for j in pending if j.parent in placed]
        if not ready:
            raise ValueError("articulation is not a tree rooted at the world")
        for j in ready:
            order.append(j)
            placed.add(j.child)
            pending.remove(j)
    origin = {"world": np.zeros(3)}
    bodies, jnames, jtypes, parents, axes, trans, mass, com, inertia = [], [], [], [], [], [], [], [], []
    for j in order:
        T0 = np.asarray(T_world_body0[j.child], float)
        pivot = T0[:3, 3] if j.type == "free" else np.asarray(j.pivot, float)
        origin[j.child] = pivot
        bodies.append(j.child)
        jnames.append(j.name)
        jtypes.append(j.type)
        parents.append(-1 if j.parent == "world" else bodies.index(j.parent))
        axes.append(np.asarray(j.axis, float))
        trans.append(pivot - origin[j.parent])
        m = float((masses or {}).get(j.child, 1.0))
        shape = (shapes or {}).get(j.child)
        # Shape.inertia_tensor: the truth URDFs' and the exported twin's (a mesh: trimesh's mass properties)
        I_shape = shape.inertia_tensor(m) if shape is not None else np.diag(stand_in_inertia(m))
        R0 = T0[:3, :3]
        mass.append(m)
        com.append(T0[:3, 3] - pivot)
        inertia.append(R0 @ I_shape @ R0.T)
    n = len(bodies)
    return make_model(bodies, jnames, jtypes, parents, np.array(axes), np.tile(np.eye(3), (n, 1, 1)),
                      np.array(trans), mass, np.array(com), np.array(inertia), batch=batch, dtype=dtype, **kwargs)
