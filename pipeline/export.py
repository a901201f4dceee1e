"""Export stage: the digital twin as ``model.urdf`` (and ``model.xml``, MJCF).

One link per tracked body, one URDF joint per inferred joint, in world coordinates
at frame 0 (docs/formats.md §2):

* Link frames (the convention of ``vid2sim.models.joints.kinematics``): a body's link
  frame has the body's orientation at frame 0 and its origin at the joint's pivot
  (a URDF revolute joint rotates about its child link's origin; articulate puts the
  pivot of prismatic and fixed joints at the child's centre), or at the body's centre
  for a floating root and for free and planar joints. Every joint coordinate is therefore 0 at
  frame 0: revolute q = rotation angle about ``axis`` (right hand), prismatic q =
  displacement along ``axis`` (m), both measured from frame 0. ``joint_coordinates`` computes
  q(t) from pose tracks under this convention (used for the limits, and by forecast).
* Fixed base: a link named ``world`` (no inertial) is the root, and every tree hangs
  from it. Floating base (one tree whose root joint is ``free``): the root body is
  the URDF root and its world pose is ``root_pose`` in joint_positions.npz. A free
  body beside world-attached trees gets a URDF ``floating`` joint.
* A planar root joint (a body sliding on a floor) makes a floating base like a free
  one: its plane is kept by the floor contact, which also carries its weight so that
  floor friction acts (a joint-held body presses on nothing). Its bodies that lie on
  the floor (``identify_push.resting_placements``) get their geometry and inertia placed
  level, their lowest point on forecast's floor z = 0: tracked poses tilt by up to half a
  degree and stray 0.1 mm in height, which on a compliant floor decides which edge of a
  link carries it. Their link frames stay the tracked ones. Any other planar joint
  (normal ``axis``) becomes three URDF joints through two tiny dummy links:
  ``<joint>_x``, ``<joint>_y`` (prismatic, in-plane directions chosen from the normal
  by ``vid2sim.models.geometry.plane_basis``) and ``<joint>_theta`` (revolute about the normal), since PyBullet
  and MuJoCo read no URDF ``planar`` joint.
* Mass from ``<body>.mass`` when identified, else shape volume x ``density``; centre of
  mass from ``<body>.com_x|y|z`` (body frame, m) else the shape centre; inertia from
  ``<body>.ixx|iyy|izz|ixy|ixz|iyz`` (body frame, about the COM) else the uniform-
  density inertia of the shape scaled to the mass. Inertias are made physically valid
  (symmetric, principal moments > 0 and obeying the triangle inequality).
* Geometry from the shape library, visual and collision alike. A capsule is written
  as a cylinder plus two spheres (every URDF reader understands those; MJCF gets a
  native capsule). A mesh's file is copied beside model.urdf as ``meshes/<shape><suffix>``
  and referenced there (with its scale, placed so that its centre of mass is the body
  origin); its inertia is trimesh's full tensor. MJCF leaves meshes out (it needs an
  ``<asset>``). A mesh whose file cannot be read keeps its name and the stand-in sphere.
* Joint limits only from evidence: a side of a joint gets a limit only where the tracks
  show an end stop there (``export_stops``): q reaches its observed extreme on that side
  and loses its velocity there at once, staying (a drawer at its end) or bouncing back
  (a door at its stop), a velocity change far larger than the joint's acceleration just
  before and after explains (a pendulum's turning point is a smooth one) and than the
  track noise explains; that limit is the observed extreme itself. Or q arrives at its
  extreme faster than its approach's braking could end there and rests there for
  ``stop_dwell`` frames while the bodies around the joint move on (a hinge pressed into
  its stop while the mechanism is pushed); that limit is the resting level. A side without a
  stop has none: a revolute joint with no stop is ``continuous``; with a stop on one
  side only, the other limit is one full turn from it (the same stop met from the other
  side); a prismatic joint's free side lies ``free_prismatic_range_m`` beyond its
  observed extreme (PyBullet needs finite limits). The planar joint's ``_x``, ``_y``
  and ``_theta`` follow the impact rule only (a body sliding on a floor rests along one
  direction while moving along another). A stop is seen only with ``stop_window`` tracked
  frames on both sides of it; a joint creeping to rest against a stop shows none, and
  a joint reversing at its extreme through an impact elsewhere (a link landing on the
  floor, a pusher) looks like one.
  ``<dynamics damping friction>`` from ``<joint>.damping`` / ``<joint>.friction``.

MuJoCo reading ``model.urdf`` welds a floating root to the world (its URDF reader adds
no free joint); ``model.xml`` has the ``<freejoint>``, so MuJoCo users load that.

It deliberately does not simulate or check the model; tests load it in PyBullet,
MuJoCo, Pinocchio and yourdfpy.
"""
from __future__ import annotations

import logging
import math
import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.spatial.transform import Rotation

from vid2sim.datasets.shapes import Shape, stand_in_inertia, stand_in_volume
from vid2sim.models import geometry
from vid2sim.models.joints.kinematics import topological
from vid2sim.pipeline import export_stops as stops
from vid2sim.pipeline.artifacts import Articulation, Joint, PoseTracks, Posterior
from vid2sim.datasets.atomic import write_bytes, write_text

log = logging.getLogger(__name__)

MODEL_FILE = "model.urdf"
MJCF_FILE = "model.xml"
DUMMY_MASS = 1e-4  # kg, the planar joint's intermediate links
DUMMY_INERTIA = 1e-8  # kg m^2


@dataclass(frozen=True)
class ExportConfig:
    """Settings of the export stage."""

    density: float = 500.0  # kg/m^3: mass = volume x density for bodies without an identified mass
    free_prismatic_range_m: float = 10.0  # prismatic limit this far (m) beyond the observed extreme on a side with no stop seen
    stop_window: int = 5  # frames looked at on each side of a candidate impact (>= 3; less: never see a stop)
    stop_accel_ratio: float = 3.0  # a stop's speed change exceeds this many times what the acceleration explains (over 2 frames: impact; 1: rest)
    stop_noise_sigmas: float = 3.0  # a stop's velocity change also exceeds this many standard deviations of that change under the track noise
    stop_tolerance: float = 0.02  # "at the extreme": within this fraction of the observed range (or 3 noise sigmas)
    stop_dwell: int = 8  # frames a joint rests at its extreme, arrived at speed, while its neighbours move (< 3: never)
    stop_approach: int = 10  # frames of the approach to such a rest whose speed and braking are fitted
    stop_carried_m: float = 0.01  # m: the neighbours "move" when a point on them spans more than this over the rest
    stop_outliers: float = 0.05  # fraction of the frames (2 at least) that may lie beyond such a rest (tracking glitches)
    effort_limit: float = 1000.0  # N or N m, URDF <limit effort>
    velocity_limit: float = 100.0  # m/s or rad/s, URDF <limit velocity>
    mjcf: bool = True  # also write model.xml (MJCF) for MuJoCo users


# ----------------------------------------------------------------------------- geometry


def _rpy(R: np.ndarray) -> np.ndarray:
    """URDF roll-pitch-yaw (fixed axes x, y, z: R = Rz(y) Ry(p) Rx(r))."""
    with warnings.catch_warnings():  # gimbal lock is harmless here: any valid triple is the same rotation
        warnings.simplefilter("ignore", UserWarning)
        return Rotation.from_matrix(R).as_euler("xyz")


def _fmt(v) -> str:
    return " ".join(f"{float(x):.9g}" for x in np.atleast_1d(v))


def _mesh_loads(shape: Shape) -> bool:
    """Whether a mesh shape's file can be read (a shape built without its recording cannot)."""
    try:
        shape.mesh()
        return True
    except (OSError, ValueError):
        return False


def shape_inertia(shape: Shape, mass: float) -> np.ndarray:
    """(3, 3) inertia about the shape centre (a mesh's centre of mass) in its body frame,
    uniform density (kg m^2); a mesh whose file cannot be read gets the stand-in sphere's."""
    if shape.type == "mesh" and not _mesh_loads(shape):
        return np.diag(stand_in_inertia(mass))
    return shape.inertia_tensor(mass)


def shape_volume(shape: Shape) -> float:
    """Volume (m^3) of a shape; a mesh whose file cannot be read gets the stand-in sphere's."""
    if shape.type == "mesh" and not _mesh_loads(shape):
        return stand_in_volume()
    return shape.volume()


def mesh_file_name(shape: Shape) -> str:
    """Where model.urdf's folder holds a mesh shape's file: ``meshes/<shape name><suffix>``."""
    return f"meshes/{shape.name}{Path(shape.file).suffix.lower()}"


def valid_inertia(I: np.ndarray, mass: float) -> np.ndarray:
    """Nearest physically valid inertia: symmetric, positive definite, triangle inequality."""
    I = 0.5 * (np.asarray(I, float) + np.asarray(I, float).T)
    w, V = np.linalg.eigh(I)
    floor = max(1e-9, 1e-6 * mass * 1e-4, 1e-6 * float(np.max(np.abs(w))))
    w = np.maximum(w, floor)
    for _ in range(3):  # the largest principal moment may not exceed the sum of the other two
        k = int(np.argmax(w))
        others = w.sum() - w[k]
        if w[k] > others:
            w[k] = others
    return V @ np.diag(w) @ V.T


# ----------------------------------------------------------------------------- conventions


def _body_index(poses: PoseTracks) -> dict[str, int]:
    return {b: i for i, b in enumerate(poses.body_names)}


def link_frames(art: Articulation, poses: PoseTracks) -> dict[str, np.ndarray]:
    """T_world_link (4, 4) at frame 0 for every body, under the convention in the module docstring."""
    idx = _body_index(poses)
    frames = {}
    for b in art.bodies:
        T = poses.world_from_body[0, idx[b]].copy()
        j = art.joint_of(b)
        if j is not None and j.type in ("revolute", "prismatic", "fixed"):
            T[:3, 3] = np.asarray(j.pivot, float)
        frames[b] = T
    return frames


def _axis_angle_about(R: np.ndarray, axis_local: np.ndarray) -> float:
    """Rotation angle of R about a given unit axis (robust to small off-axis noise)."""
    v = 0.5 * np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
    return math.atan2(float(axis_local @ v), 0.5 * (np.trace(R) - 1.0))


def joint_coordinates(art: Articulation, poses: PoseTracks) -> tuple[list[str], np.ndarray]:
    """(names, q (T, dofs)): the URDF joint coordinates of the tracked poses.

    Free joints and the floating root (see ``root_poses``) have no entries.

    Revolute angles are unwrapped over time; planar joints give ``_x, _y, _theta``.
    """
    idx = _body_index(poses)
    frames = link_frames(art, poses)
    W = poses.world_from_body
    T_n = W.shape[0]
    names, cols = [], []
    floating = is_floating(art)
    for j in art.joints:
        if j.type in ("fixed", "free") or (floating and j.parent == "world"):
            continue
        c = idx[j.child]
        T_bl = geometry.inv(W[0, c]) @ frames[j.child]  # link in body, constant
        T_wl = W[:, c] @ T_bl  # (T, 4, 4) child link over time
        if j.parent == "world":
            T_wp = np.broadcast_to(np.eye(4), (T_n, 4, 4))
            T_pl0 = frames[j.child]
        else:
            p = idx[j.parent]
            T_wp = W[:, p] @ (geometry.inv(W[0, p]) @ frames[j.parent])
            T_pl0 = geometry.inv(frames[j.parent]) @ frames[j.child]
        # motion of the child link relative to its frame-0 placement on the parent, in link axes
        D = np.einsum("ij,tjk,tkl->til", geometry.inv(T_pl0), np.linalg.inv(T_wp), T_wl)
        a_link = frames[j.child][:3, :3].T @ np.asarray(j.axis, float)
        if j.type == "revolute":
            q = np.unwrap([_axis_angle_about(Dt[:3, :3], a_link) for Dt in D])
            names.append(j.name)
            cols.append(q)
        elif j.type == "prismatic":
            names.append(j.name)
            cols.append(D[:, :3, 3] @ a_link)
        elif j.type == "planar":
            u, v = geometry.plane_basis(j.axis)
            R0 = frames[j.child][:3, :3]
            d_world = np.einsum("ij,tj->ti", R0, D[:, :3, 3])
            names += [f"{j.name}_x", f"{j.name}_y", f"{j.name}_theta"]
            cols += [d_world @ u, d_world @ v, np.unwrap([_axis_angle_about(Dt[:3, :3], a_link) for Dt in D])]
    q = np.stack(cols, axis=1) if cols else np.zeros((T_n, 0))
    return names, q


def root_poses(art: Articulation, poses: PoseTracks) -> np.ndarray | None:
    """(T, 7) x, y, z, qx, qy, qz, qw world pose of the floating root link, or None if fixed-base."""
    if not is_floating(art):
        return None
    root = next(j.child for j in art.joints if j.parent == "world")
    W = poses.world_from_body[:, _body_index(poses)[root]]
    T_wl = W @ (geometry.inv(W[0]) @ link_frames(art, poses)[root])
    return np.concatenate([T_wl[:, :3, 3], Rotation.from_matrix(T_wl[:, :3, :3]).as_quat()], axis=1)


def is_floating(art: Articulation) -> bool:
    """True when the mechanism is one tree whose root joint is free or planar (URDF root = that body)."""
    roots = [j for j in art.joints if j.parent == "world"]
    return len(roots) == 1 and roots[0].type in ("free", "planar")


# ----------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class BodyInertial:
    mass: float
    com_body: np.ndarray  # (3,) in the body (shape) frame
    inertia_body: np.ndarray  # (3, 3) about the COM in body axes


def body_inertial(body: str, shape: Shape, estimate: dict[str, float], density: float) -> BodyInertial:
    mass = estimate.get(f"{body}.mass", shape_volume(shape) * density)
    mass = max(float(mass), 1e-6)
    com = np.array([estimate.get(f"{body}.com_{k}", 0.0) for k in "xyz"], float)
    I = shape_inertia(shape, mass)
    keys = {"ixx": (0, 0), "iyy": (1, 1), "izz": (2, 2), "ixy": (0, 1), "ixz": (0, 2), "iyz": (1, 2)}
    for k, (r, c) in keys.items():
        if f"{body}.{k}" in estimate:
            I[r, c] = I[c, r] = estimate[f"{body}.{k}"]
    return BodyInertial(mass, com, valid_inertia(I, mass))


# ----------------------------------------------------------------------------- URDF


def _origin(parent: ET.Element, T: np.ndarray) -> None:
    ET.SubElement(parent, "origin", xyz=_fmt(T[:3, 3]), rpy=_fmt(_rpy(T[:3, :3])))


def _geometry(parent: ET.Element, kind: str, name: str, shape: Shape, T_link_body: np.ndarray) -> None:
    """Visual or collision element(s) of one shape; a capsule is a cylinder + two spheres."""
    parts: list[tuple[np.ndarray, str, dict]] = []
    if shape.type == "box":
        parts.append((np.eye(4), "box", {"size": _fmt(shape.size)}))
    elif shape.type == "sphere":
        parts.append((np.eye(4), "sphere", {"radius": _fmt(shape.radius)}))
    elif shape.type == "cylinder":
        parts.append((np.eye(4), "cylinder", {"radius": _fmt(shape.radius), "length": _fmt(shape.length)}))
    elif shape.type == "capsule":
        parts.append((np.eye(4), "cylinder", {"radius": _fmt(shape.radius), "length": _fmt(shape.length)}))
        for s in (-1, 1):
            T = np.eye(4)
            T[2, 3] = s * shape.length / 2
            parts.append((T, "sphere", {"radius": _fmt(shape.radius)}))
    elif _mesh_loads(shape):  # the file beside model.urdf (``run`` copies it), its origin at the file's
        T = np.eye(4)
        T[:3, 3] = -shape.mesh_offset()
        parts.append((T, "mesh", {"filename": mesh_file_name(shape), "scale": _fmt([shape.scale] * 3)}))
    else:
        parts.append((np.eye(4), "mesh", {"filename": str(shape.file)}))
    for i, (T, geom, attrs) in enumerate(parts):
        el = ET.SubElement(parent, kind, name=f"{name}_{kind}{i}")
        _origin(el, T_link_body @ T)
        g = ET.SubElement(el, "geometry")
        ET.SubElement(g, geom, **attrs)
        if kind == "visual":
            ET.SubElement(el, "material", name=f"{name}_color")


def _inertial(parent: ET.Element, mass: float, com: np.ndarray, R: np.ndarray, I: np.ndarray) -> None:
    el = ET.SubElement(parent, "inertial")
    ET.SubElement(el, "origin", xyz=_fmt(com), rpy=_fmt(_rpy(R)))
    ET.SubElement(el, "mass", value=_fmt(mass))
    ET.SubElement(el, "inertia", ixx=_fmt(I[0, 0]), ixy=_fmt(I[0, 1]), ixz=_fmt(I[0, 2]),
                  iyy=_fmt(I[1, 1]), iyz=_fmt(I[1, 2]), izz=_fmt(I[2, 2]))


def _dummy_link(robot: ET.Element, name: str) -> None:
    link = ET.SubElement(robot, "link", name=name)
    _inertial(link, DUMMY_MASS, np.zeros(3), np.eye(3), np.eye(3) * DUMMY_INERTIA)


def _urdf_joint(robot, name, jtype, parent, child, T_parent_joint, axis, limits, damping, friction, cfg) -> None:
    el = ET.SubElement(robot, "joint", name=name, type=jtype)
    _origin(el, T_parent_joint)
    ET.SubElement(el, "parent", link=parent)
    ET.SubElement(el, "child", link=child)
    if jtype in ("revolute", "prismatic", "continuous"):
        ET.SubElement(el, "axis", xyz=_fmt(axis))
        attrs = {"effort": _fmt(cfg.effort_limit), "velocity": _fmt(cfg.velocity_limit)}
        if jtype != "continuous":
            attrs.update(lower=_fmt(limits[0]), upper=_fmt(limits[1]))
        ET.SubElement(el, "limit", **attrs)
        ET.SubElement(el, "dynamics", damping=_fmt(damping), friction=_fmt(friction))


def build_urdf(cfg: ExportConfig, art: Articulation, post: Posterior | None, shapes: dict[str, Shape],
               poses: PoseTracks, name: str = "vid2sim_twin") -> str:
    """The URDF text of the twin (see the module docstring for every convention)."""
    estimate = dict(post.estimate) if post is not None else {}
    idx = _body_index(poses)
    frames = link_frames(art, poses)
    qnames, qs = joint_coordinates(art, poses)
    qcol = {n: qs[:, i] for i, n in enumerate(qnames)}
    floating = is_floating(art)
    joints = topological(art)
    # bodies without a joint float (a URDF needs every link connected)
    for b in art.bodies:
        if art.joint_of(b) is None:
            joints.append(Joint(f"{b}_free", "free", "world", b, pivot=tuple(frames[b][:3, 3])))

    robot = ET.Element("robot", name=name)
    colors = [(0.85, 0.33, 0.1), (0.0, 0.45, 0.74), (0.47, 0.67, 0.19), (0.49, 0.18, 0.56), (0.93, 0.69, 0.13), (0.3, 0.75, 0.93)]
    for i, b in enumerate(art.bodies):
        mat = ET.SubElement(robot, "material", name=f"{b}_color")
        ET.SubElement(mat, "color", rgba=_fmt((*colors[i % len(colors)], 1.0)))
    if not floating:
        ET.SubElement(robot, "link", name="world")
    from vid2sim.pipeline.identify_push import resting_placements

    rest = resting_placements(art, poses, shapes)   # parts lying on the floor (z = 0, forecast's): placed flat on it
    for b in art.bodies:
        shape = shapes[poses.shape_names[idx[b]]]
        T_link_body = geometry.inv(frames[b]) @ rest.get(b, poses.world_from_body[0, idx[b]])
        bi = body_inertial(b, shape, estimate, cfg.density)
        link = ET.SubElement(robot, "link", name=b)
        R_lb = T_link_body[:3, :3]
        _inertial(link, bi.mass, T_link_body[:3, :3] @ bi.com_body + T_link_body[:3, 3], R_lb, bi.inertia_body)
        _geometry(link, "visual", b, shape, T_link_body)
        _geometry(link, "collision", b, shape, T_link_body)

    for j in joints:
        if floating and j.parent == "world":
            continue  # the floating root is the URDF root; root_pose places it
        T_wp = np.eye(4) if j.parent == "world" else frames[j.parent]
        T_pj = geometry.inv(T_wp) @ frames[j.child]
        a_link = frames[j.child][:3, :3].T @ np.asarray(j.axis, float)
        damping = estimate.get(f"{j.name}.damping", 0.0)
        friction = estimate.get(f"{j.name}.friction", 0.0)
        if j.type in ("revolute", "prismatic"):
            moved = stops.neighbourhood_points(art, poses, j)   # a joint resting while these move is held by a stop
            lo, hi, cont = stops.limits(qcol[j.name], j.type == "revolute", cfg, moved)
            jtype = "continuous" if cont else j.type
            _urdf_joint(robot, j.name, jtype, j.parent, j.child, T_pj, a_link, (lo, hi), damping, friction, cfg)
        elif j.type == "fixed":
            _urdf_joint(robot, j.name, "fixed", j.parent, j.child, T_pj, None, None, 0, 0, cfg)
        elif j.type == "free":
            _urdf_joint(robot, j.name, "floating", j.parent, j.child, T_pj, None, None, 0, 0, cfg)
        elif j.type == "planar":
            u, v = geometry.plane_basis(j.axis)
            R_link = frames[j.child][:3, :3]
            dx, dy = f"{j.child}__{j.name}_x", f"{j.child}__{j.name}_y"
            _dummy_link(robot, dx)
            _dummy_link(robot, dy)
            for nm, par, ch, T, ax in ((f"{j.name}_x", j.parent, dx, T_pj, R_link.T @ u),
                                       (f"{j.name}_y", dx, dy, np.eye(4), R_link.T @ v)):
                lo, hi, _ = stops.limits(qcol[nm], False, cfg)
                _urdf_joint(robot, nm, "prismatic", par, ch, T, ax, (lo, hi), damping, friction, cfg)
            lo, hi, cont = stops.limits(qcol[f"{j.name}_theta"], True, cfg)
            _urdf_joint(robot, f"{j.name}_theta", "continuous" if cont else "revolute", dy, j.child, np.eye(4),
                        a_link, (lo, hi), damping, friction, cfg)
    ET.indent(robot)
    return '<?xml version="1.0"?>\n' + ET.tostring(robot, encoding="unicode") + "\n"


# ----------------------------------------------------------------------------- MJCF


def build_mjcf(urdf_text: str, name: str = "vid2sim_twin") -> str:
    """MJCF of the same model, converted from our own URDF (native capsules lost: the URDF
    parts are kept, which MuJoCo reads equally well). Free joints become ``<freejoint>``."""
    root = ET.fromstring(urdf_text)
    links = {l.get("name"): l for l in root.findall("link")}
    children: dict[str, list[ET.Element]] = {}
    child_of = set()
    for j in root.findall("joint"):
        children.setdefault(j.find("parent").get("link"), []).append(j)
        child_of.add(j.find("child").get("link"))
    mj = ET.Element("mujoco", model=name)
    ET.SubElement(mj, "compiler", angle="radian", autolimits="true")
    ET.SubElement(mj, "option", gravity="0 0 -9.81", timestep="0.002")
    world = ET.SubElement(mj, "worldbody")
    ET.SubElement(world, "light", pos="0 0 3", dir="0 0 -1")

    def quat(rpy: str) -> str:
        x, y, z, w = Rotation.from_euler("xyz", [float(s) for s in rpy.split()]).as_quat()
        return _fmt((w, x, y, z))

    def fill(body: ET.Element, link: ET.Element) -> None:
        ine = link.find("inertial")
        if ine is not None:
            o, I = ine.find("origin"), ine.find("inertia")
            Ib = np.array([[I.get("ixx"), I.get("ixy"), I.get("ixz")], [I.get("ixy"), I.get("iyy"), I.get("iyz")],
                           [I.get("ixz"), I.get("iyz"), I.get("izz")]], float)
            R = Rotation.from_euler("xyz", [float(s) for s in o.get("rpy").split()]).as_matrix()
            Il = R @ Ib @ R.T  # MJCF: fullinertia is in the body frame and excludes quat
            ET.SubElement(body, "inertial", pos=o.get("xyz"), mass=ine.find("mass").get("value"),
                          fullinertia=_fmt([Il[0, 0], Il[1, 1], Il[2, 2], Il[0, 1], Il[0, 2], Il[1, 2]]))
        for kind, group in (("visual", "1"), ("collision", "0")):
            for el in link.findall(kind):
                o, g = el.find("origin"), el.find("geometry")[0]
                attrs = {"pos": o.get("xyz"), "quat": quat(o.get("rpy")), "group": group}
                if kind == "visual":
                    attrs.update(contype="0", conaffinity="0")
                if g.tag == "box":
                    attrs.update(type="box", size=_fmt(np.array(g.get("size").split(), float) / 2))
                elif g.tag == "sphere":
                    attrs.update(type="sphere", size=g.get("radius"))
                elif g.tag == "cylinder":
                    attrs.update(type="cylinder", size=_fmt((float(g.get("radius")), float(g.get("length")) / 2)))
                else:
                    continue  # meshes: MJCF needs an <asset>; the URDF carries them
                ET.SubElement(body, "geom", **attrs)

    def add(parent_el: ET.Element, link_name: str) -> None:
        for j in children.get(link_name, []):
            ch = j.find("child").get("link")
            o = j.find("origin")
            b = ET.SubElement(parent_el, "body", name=ch, pos=o.get("xyz"), quat=quat(o.get("rpy")))
            t = j.get("type")
            if t == "floating":
                ET.SubElement(b, "freejoint", name=j.get("name"))
            elif t != "fixed":
                d = j.find("dynamics")
                attrs = {"name": j.get("name"), "type": "slide" if t == "prismatic" else "hinge",
                         "axis": j.find("axis").get("xyz"), "damping": d.get("damping"), "frictionloss": d.get("friction")}
                lim = j.find("limit")
                if lim is not None and lim.get("lower") is not None:
                    attrs["range"] = f"{lim.get('lower')} {lim.get('upper')}"
                ET.SubElement(b, "joint", **attrs)
            fill(b, links[ch])
            add(b, ch)

    roots = [n for n in links if n not in child_of]
    for r in roots:
        if r == "world":
            add(world, "world")
        else:  # floating base
            b = ET.SubElement(world, "body", name=r)
            ET.SubElement(b, "freejoint", name=f"{r}_root")
            fill(b, links[r])
            add(b, r)
    ET.indent(mj)
    return ET.tostring(mj, encoding="unicode") + "\n"


# ----------------------------------------------------------------------------- stage


def run(cfg: ExportConfig, art: Articulation, post: Posterior | None, shapes: dict[str, Shape],
        poses: PoseTracks, out_dir: Path) -> Path:
    """Write ``out_dir/model.urdf`` (and ``model.xml`` when ``cfg.mjcf``); return the URDF path."""
    out_dir = Path(out_dir)
    missing = [s for s in poses.shape_names if s not in shapes]
    if missing:
        raise ValueError(f"export: shapes {missing} of the pose tracks are not in the shape library")
    urdf = build_urdf(cfg, art, post, shapes, poses)
    for name in sorted(set(poses.shape_names)):  # mesh files beside model.urdf, where it names them
        shape = shapes[name]
        if shape.type == "mesh" and _mesh_loads(shape):
            (out_dir / mesh_file_name(shape)).parent.mkdir(parents=True, exist_ok=True)
            write_bytes(out_dir / mesh_file_name(shape), shape.mesh_path().read_bytes())
    path = out_dir / MODEL_FILE
    write_text(path, urdf)
    if cfg.mjcf:
        write_text(out_dir / MJCF_FILE, build_mjcf(urdf))
    if post is not None:   # floor and pusher friction, contact model: contacts.json beside model.urdf
        from vid2sim.pipeline.identify_push import write_side_file

        write_side_file(post, out_dir)
    log.info("export: wrote %s (%d links, %d joints)", path, len(art.bodies), len(art.joints))
    return path
