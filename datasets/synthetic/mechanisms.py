"""The synthetic mechanisms: geometry, masses, joints and seeded initial states.

Each mechanism is plain data (``Mechanism``): bodies are library primitives placed in
world coordinates at the nominal configuration (every joint position 0), joints carry
their world axis and pivot at that configuration. ``physics.py`` turns this into a
URDF for PyBullet; nothing here knows about URDF, MJCF or rendering.

Body frame = shape centre frame (docs/formats.md: capsules and cylinders along
body z), so a body's pose is the pose of its shape centre.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from vid2sim.datasets.shapes import Shape
from vid2sim.models.bullet import Floor

GRAVITY = (0.0, 0.0, -9.81)


def rot(axis: str, angle: float) -> np.ndarray:
    """(3, 3) rotation by ``angle`` (rad) about the world x, y or z axis."""
    c, s = math.cos(angle), math.sin(angle)
    if axis == "x":
        return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])
    if axis == "y":
        return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])


def pose(xyz, R: np.ndarray | None = None) -> np.ndarray:
    T = np.eye(4)
    T[:3, :3] = np.eye(3) if R is None else R
    T[:3, 3] = xyz
    return T


@dataclass(frozen=True)
class BodySpec:
    name: str
    shape: Shape
    mass: float
    colour: tuple[float, float, float]  # RGB in [0, 1]
    T_world_body: np.ndarray  # (4, 4) shape-centre pose at the nominal configuration


@dataclass(frozen=True)
class JointSpec:
    """A joint; ``axis``/``pivot`` in world coordinates at the nominal configuration.

    Root joints (parent ``world``, type ``free`` or ``planar``) are not URDF joints:
    the root body is PyBullet's floating base.
    """

    name: str
    type: str  # revolute | prismatic | fixed | free | planar
    parent: str
    child: str
    axis: tuple[float, float, float] = (0.0, 0.0, 1.0)
    pivot: tuple[float, float, float] | None = None  # None: the child's centre
    damping: float = 0.0
    limits: tuple[float, float] | None = None


@dataclass(frozen=True)
class Tip:
    """A vertical cylinder moving at constant velocity (the pusher of ``pushed``), or in strokes:
    ``strokes`` = (moving, still) seconds, repeated from t = 0 (moving first); it then stops dead
    at the end of each stroke, and a part it pushed slides on alone until the floor stops it."""

    radius: float
    height: float
    start: tuple[float, float, float]  # centre at frame 0
    velocity: tuple[float, float, float]
    friction: float = 0.3
    strokes: tuple[float, float] | None = None   # (s moving, s still) per period; None: always moving

    def moved_time(self, t: float) -> float:
        """Seconds spent moving up to time t (s)."""
        if self.strokes is None:
            return t
        move, still = self.strokes
        n, r = divmod(t, move + still)
        return n * move + min(r, move)

    def position(self, t: float) -> np.ndarray:
        """(3,) centre (m, world) at time t (s)."""
        return np.asarray(self.start, float) + self.moved_time(t) * np.asarray(self.velocity, float)

    def velocity_at(self, t: float) -> np.ndarray:
        """(3,) velocity (m/s) at time t: ``velocity`` while moving, 0 while still."""
        moving = self.strokes is None or (t % sum(self.strokes)) < self.strokes[0] - 1e-12
        return np.asarray(self.velocity, float) * float(moving)


@dataclass(frozen=True)
class Effort:
    """A known generalised force at URDF joints ``joints`` (named as articulate names them,
    ``parent_to_child``: ``actuation.npz`` carries these names): ``values(t)`` (D,) N m or N at
    time t (s), held over each frame period (sampled at its start), so that a recording's
    per-frame rows replay it exactly."""

    joints: tuple[str, ...]
    values: Callable[[float], np.ndarray]


@dataclass(frozen=True)
class InitialState:
    q: dict[str, float]  # joint positions (URDF joints)
    qd: dict[str, float]  # joint velocities
    T_world_root: np.ndarray | None = None  # floating root: shape-centre pose
    root_twist: tuple | None = None  # (v_world (3,), omega_world (3,))


@dataclass(frozen=True)
class Mechanism:
    name: str
    bodies: tuple[BodySpec, ...]
    joints: tuple[JointSpec, ...]
    initial: Callable[[np.random.Generator], InitialState]
    floor: Floor | None = None  # None: no contacts (only a rendered background floor)
    tip_factory: Callable[[np.random.Generator], Tip] | None = None
    view: tuple[float, float] = (-20.0, 15.0)  # camera azimuth, elevation (deg)
    ground: float | None = None  # rendered floor height when there is no physical floor
    extra_params: dict = field(default_factory=dict)
    effort_factory: Callable[[np.random.Generator], "Effort"] | None = None   # a known joint effort (actuation.npz)

    @property
    def root(self) -> JointSpec | None:
        """The free/planar root joint, or None for a fixed-base mechanism."""
        for j in self.joints:
            if j.type in ("free", "planar"):
                return j
        return None

    def body(self, name: str) -> BodySpec:
        return next(b for b in self.bodies if b.name == name)


PALETTE = [(0.85, 0.25, 0.2), (0.2, 0.55, 0.85), (0.95, 0.75, 0.15), (0.3, 0.7, 0.35),
           (0.65, 0.35, 0.75), (0.95, 0.5, 0.2), (0.3, 0.8, 0.8)]


def _u(rng: np.random.Generator, lo: float, hi: float, signed: bool = False) -> float:
    v = float(rng.uniform(lo, hi))
    return v * (1.0 if rng.random() < 0.5 else -1.0) if signed else v


def _capsule(name: str, radius: float, length: float) -> Shape:
    return Shape(name, "capsule", radius=radius, length=length)


def _box(name: str, x: float, y: float, z: float) -> Shape:
    return Shape(name, "box", size=(x, y, z))


def cartpole() -> Mechanism:
    """Box cart on a prismatic rail along world x, capsule pole hinged in front of it."""
    Rp = 0.025
    Lp = 0.6
    pivot = (0.0, -0.11, 0.6)
    bodies = (
        BodySpec("cart", _box("cart", 0.3, 0.16, 0.1), 1.0, PALETTE[0], pose((0, 0, 0.6))),
        BodySpec("pole", _capsule("pole", Rp, Lp), 0.2, PALETTE[1], pose((0, -0.11, 0.6 + Lp / 2))),
    )
    joints = (
        JointSpec("slider", "prismatic", "world", "cart", (1, 0, 0), (0, 0, 0.6), damping=0.3),
        JointSpec("hinge", "revolute", "cart", "pole", (0, 1, 0), pivot, damping=0.004),
    )

    def initial(rng):  # pole starts near upright and falls: large swings, cart recoils
        return InitialState(q={"slider": _u(rng, -0.1, 0.1), "hinge": _u(rng, 0.15, 0.8, True)},
                            qd={"slider": _u(rng, -0.2, 0.2), "hinge": _u(rng, -1.0, 1.0)})

    return Mechanism("cartpole", bodies, joints, initial, view=(-20.0, 12.0))


def double_pendulum() -> Mechanism:
    """Two capsules hanging from a fixed pivot, hinged about world y (planar)."""
    L = 0.35
    bodies = (
        BodySpec("link1", _capsule("link1", 0.025, L), 0.3, PALETTE[0], pose((0, 0, 1.0 - L / 2))),
        BodySpec("link2", _capsule("link2", 0.025, L), 0.3, PALETTE[1], pose((0, -0.055, 1.0 - L - L / 2))),
    )
    joints = (
        JointSpec("shoulder", "revolute", "world", "link1", (0, 1, 0), (0, 0, 1.0), damping=0.002),
        JointSpec("elbow", "revolute", "link1", "link2", (0, 1, 0), (0, -0.055, 1.0 - L), damping=0.002),
    )

    def initial(rng):
        return InitialState(q={"shoulder": _u(rng, 0.8, 2.0, True), "elbow": _u(rng, -1.5, 1.5)},
                            qd={"shoulder": _u(rng, -1.0, 1.0), "elbow": _u(rng, -1.0, 1.0)})

    return Mechanism("double_pendulum", bodies, joints, initial, view=(-20.0, 12.0))


ROTT_BOB_LENGTH = 0.13  # with a 0.7 kg leg: normal modes 0.81 and 1.63 Hz, 2:1 (tests check it)


def rott(bob_length: float = ROTT_BOB_LENGTH, leg_mass: float = 0.7) -> Mechanism:
    """Rott's pendulum: an L hinged at its corner, a pendulum hanging from the arm's end.

    The L is two bodies welded by a fixed joint (a heavy leg hanging down, a light
    horizontal arm); the nominal configuration is the static equilibrium, so the L is
    tilted such that its centre of mass (with the bob's weight at the arm's end) is
    below the pivot. Planar: both hinges turn about world y. The bob's length is tuned
    so that the two normal modes are in the 2:1 internal resonance that makes Rott's
    pendulum trade energy between its modes (Rott 1970; Cushman, Dynamics of
    Dissipative Mechanical Systems, ch. on Rott's pendulum).
    """
    m_leg, m_arm, m_bob = leg_mass, 0.2, 0.15
    L_leg, L_arm = 0.4, 0.3
    Mx = m_arm * L_arm / 2 + m_bob * L_arm  # gravity moments in the L's own frame
    Mz = -m_leg * L_leg / 2
    phi = math.atan2(Mx, -Mz)  # turning about y by phi puts the centre of mass under the pivot
    R = rot("y", phi)
    pivot = np.array([0.0, 0.0, 1.0])
    leg_c = pivot + R @ [0, 0, -L_leg / 2]
    arm_c = pivot + R @ [L_arm / 2, 0, 0]
    bob_pivot = pivot + R @ [L_arm, 0, 0] + np.array([0, -0.05, 0])
    bodies = (
        BodySpec("leg", _capsule("leg", 0.025, L_leg), m_leg, PALETTE[0], pose(leg_c, R)),
        BodySpec("arm", _capsule("arm", 0.02, L_arm), m_arm, PALETTE[3], pose(arm_c, R @ rot("y", math.pi / 2))),
        BodySpec("bob", _capsule("bob", 0.02, bob_length), m_bob, PALETTE[1],
                 pose(bob_pivot - [0, 0, bob_length / 2])),
    )
    joints = (
        JointSpec("pivot", "revolute", "world", "leg", (0, 1, 0), tuple(pivot), damping=0.002),
        JointSpec("weld", "fixed", "leg", "arm", pivot=tuple(pivot)),
        JointSpec("bob_hinge", "revolute", "arm", "bob", (0, 1, 0), tuple(bob_pivot), damping=0.0005),
    )

    def initial(rng):
        return InitialState(q={"pivot": _u(rng, 0.15, 0.45, True), "bob_hinge": _u(rng, -0.6, 0.6)},
                            qd={"pivot": _u(rng, -0.5, 0.5), "bob_hinge": _u(rng, -1.0, 1.0)})

    return Mechanism("rott", bodies, joints, initial, view=(-15.0, 10.0))


def tree5() -> Mechanism:
    """Five bodies, a tree: hub (welded to the world) - arm_a (hinge about y) with a fin
    welded to it, and arm_b (hinge about x, so the motion is 3-D) with a ball welded on."""
    hub_c = np.array([0.0, 0.0, 1.1])
    pa = np.array([0.0, -0.09, 1.1])  # hinge a, on the hub's front face
    La, Lb = 0.3, 0.25
    pb = pa + [0, -0.05, -La]  # hinge b, at arm_a's lower end, in front of it
    bodies = (
        BodySpec("hub", _box("hub", 0.12, 0.12, 0.08), 1.0, PALETTE[6], pose(hub_c)),
        BodySpec("arm_a", _capsule("arm_a", 0.02, La), 0.25, PALETTE[0], pose(pa - [0, 0, La / 2])),
        BodySpec("fin_a", _box("fin_a", 0.14, 0.03, 0.06), 0.15, PALETTE[2], pose(pa + [0.09, 0, -La + 0.02])),
        BodySpec("arm_b", _capsule("arm_b", 0.02, Lb), 0.2, PALETTE[1], pose(pb - [0, 0, Lb / 2])),
        BodySpec("ball_b", Shape("ball_b", "sphere", radius=0.045), 0.3, PALETTE[4], pose(pb - [0, 0, Lb + 0.02])),
    )
    joints = (
        JointSpec("mount", "fixed", "world", "hub"),
        JointSpec("hinge_a", "revolute", "hub", "arm_a", (0, 1, 0), tuple(pa), damping=0.003),
        JointSpec("fin_weld", "fixed", "arm_a", "fin_a"),
        JointSpec("hinge_b", "revolute", "arm_a", "arm_b", (1, 0, 0), tuple(pb), damping=0.002),
        JointSpec("ball_weld", "fixed", "arm_b", "ball_b"),
    )

    def initial(rng):
        return InitialState(q={"hinge_a": _u(rng, 0.5, 1.2, True), "hinge_b": _u(rng, 0.4, 1.0, True)},
                            qd={"hinge_a": _u(rng, -1.0, 1.0), "hinge_b": _u(rng, -1.5, 1.5)})

    return Mechanism("tree5", bodies, joints, initial, view=(-35.0, 15.0))


def cabinet() -> Mechanism:
    """A carcass welded to the world, a drawer sliding out (prismatic) and a door
    swinging open (revolute about its left edge), both started with a push."""
    bodies = (
        BodySpec("carcass", _box("carcass", 0.5, 0.4, 0.6), 8.0, (0.7, 0.55, 0.4), pose((0, 0, 0.3))),
        BodySpec("drawer", _box("drawer", 0.4, 0.36, 0.12), 0.8, PALETTE[1], pose((0, -0.03, 0.5))),
        BodySpec("door", _box("door", 0.46, 0.02, 0.36), 0.6, PALETTE[0], pose((0, -0.212, 0.22))),
    )
    joints = (
        JointSpec("mount", "fixed", "world", "carcass"),
        JointSpec("slide", "prismatic", "carcass", "drawer", (0, -1, 0), (0, -0.03, 0.5), damping=1.0,
                  limits=(0.0, 0.3)),
        JointSpec("door_hinge", "revolute", "carcass", "door", (0, 0, -1), (-0.23, -0.212, 0.22),
                  damping=0.04, limits=(0.0, 1.7)),
    )

    def initial(rng):
        return InitialState(q={"slide": _u(rng, 0.0, 0.04), "door_hinge": _u(rng, 0.0, 0.2)},
                            qd={"slide": _u(rng, 0.15, 0.28), "door_hinge": _u(rng, 0.6, 1.2)})

    return Mechanism("cabinet", bodies, joints, initial, view=(25.0, 25.0), ground=0.0)


def thrown() -> Mechanism:
    """A box and a capsule hinged together, thrown up (free-flying root), landing on a floor."""
    z0 = 0.4
    pivot = np.array([0.16, -0.1, z0])
    bodies = (
        BodySpec("body_a", _box("body_a", 0.28, 0.14, 0.08), 0.8, PALETTE[0], pose((0, 0, z0))),
        BodySpec("body_b", _capsule("body_b", 0.03, 0.25), 0.25, PALETTE[1],
                 pose(pivot + [0.125, 0, 0], rot("y", math.pi / 2))),
    )
    joints = (
        JointSpec("root", "free", "world", "body_a"),
        JointSpec("hinge", "revolute", "body_a", "body_b", (0, 1, 0), tuple(pivot), damping=0.002),
    )

    def initial(rng):
        from scipy.spatial.transform import Rotation

        T = pose((_u(rng, -0.1, 0.1), _u(rng, -0.1, 0.1), z0),
                 Rotation.from_rotvec(rng.uniform(-0.4, 0.4, 3)).as_matrix())
        v = (_u(rng, -0.3, 0.3), _u(rng, -0.2, 0.2), _u(rng, 2.8, 3.4))
        w = tuple(rng.uniform(-4.0, 4.0, 3))
        return InitialState(q={"hinge": _u(rng, -1.0, 1.0)}, qd={"hinge": _u(rng, -4.0, 4.0)},
                            T_world_root=T, root_twist=(v, w))

    return Mechanism("thrown", bodies, joints, initial, floor=Floor(0.0, friction=0.6, restitution=0.3),
                     view=(-20.0, 12.0))


def pushed() -> Mechanism:
    """Three flat links hinged in a row (vertical axes) lying on a floor, pushed sideways
    by a vertical cylinder tip at constant velocity (Craftsman set-up). The middle link
    is the root; its joint to the world is ``planar`` (it slides and turns on the floor).
    The hinges stop at +-1 rad, just before neighbouring links (3 cm apart) would touch,
    as the links of a real linkage would (self-collision is off in the simulation).

    The floor is compliant (10 kN/m, 40 N s/m: 0.05 mm sag under a link). Boxes resting
    flat on a rigid floor are statically indeterminate, and Bullet's answer then depends on
    the history of its contact manifold: the true model restarted from the true state at
    any frame after 0 drifted up to 42 mm from the uninterrupted run (seed 0), so no twin
    could be judged by a restart. With the compliant floor the restart stays within 0.2 mm."""
    h = 0.03
    size = (0.16, 0.05, h)
    pitch = 0.19  # centre spacing: 3 cm between link ends
    bodies = tuple(BodySpec(f"link{i + 1}", _box(f"link{i + 1}", *size), 0.2, PALETTE[i], pose((x, 0, h / 2)))
                   for i, x in enumerate((-pitch, 0.0, pitch)))
    joints = (
        JointSpec("root", "planar", "world", "link2", (0, 0, 1)),
        JointSpec("hinge_1", "revolute", "link2", "link1", (0, 0, 1), (-pitch / 2, 0, h / 2), damping=0.002,
                  limits=(-1.0, 1.0)),
        JointSpec("hinge_3", "revolute", "link2", "link3", (0, 0, 1), (pitch / 2, 0, h / 2), damping=0.002,
                  limits=(-1.0, 1.0)),
    )

    def initial(rng):
        from scipy.spatial.transform import Rotation

        yaw = Rotation.from_euler("z", _u(rng, -0.3, 0.3)).as_matrix()
        T = pose((_u(rng, -0.03, 0.03), _u(rng, -0.03, 0.03), h / 2), yaw)
        return InitialState(q={"hinge_1": _u(rng, -0.5, 0.5), "hinge_3": _u(rng, -0.5, 0.5)},
                            qd={}, T_world_root=T, root_twist=((0, 0, 0), (0, 0, 0)))

    def tip(rng):
        return Tip(radius=0.015, height=0.06, start=(_u(rng, -0.15, 0.15), -0.22, 0.032),
                   velocity=(0.0, 0.12, 0.0), friction=0.3)

    return Mechanism("pushed", bodies, joints, initial, floor=Floor(0.0, friction=0.5, stiffness=1e4, damping=40.0),
                     tip_factory=tip, view=(-15.0, 50.0))


def pendulum3() -> Mechanism:
    """Three capsules (radius 0.025 m, length 0.33 m) hanging in a chain from a fixed
    pivot at (0, 0, 1.2) m, hinged about world y (planar, like ``double_pendulum``); each
    link hangs 5.5 cm in front of (-y) the one above it. Started with a sizeable swing."""
    L, r, dy, top = 0.33, 0.025, -0.055, 1.2
    pivots = [np.array([0.0, i * dy, top - i * L]) for i in range(3)]
    bodies = tuple(BodySpec(f"link{i}", _capsule(f"link{i}", r, L), 0.25, PALETTE[i], pose(pivots[i] - [0, 0, L / 2]))
                   for i in range(3))
    joints = (
        JointSpec("hinge0", "revolute", "world", "link0", (0, 1, 0), tuple(pivots[0]), damping=0.003),
        JointSpec("hinge1", "revolute", "link0", "link1", (0, 1, 0), tuple(pivots[1]), damping=0.002),
        JointSpec("hinge2", "revolute", "link1", "link2", (0, 1, 0), tuple(pivots[2]), damping=0.002),
    )

    def initial(rng):
        return InitialState(q={"hinge0": _u(rng, 0.6, 1.2, True), "hinge1": _u(rng, -0.8, 0.8),
                               "hinge2": _u(rng, -0.8, 0.8)},
                            qd={"hinge0": _u(rng, -1.0, 1.0), "hinge1": _u(rng, -1.5, 1.5),
                                "hinge2": _u(rng, -1.5, 1.5)})

    return Mechanism("pendulum3", bodies, joints, initial, view=(-20.0, 12.0))


FACTORIES: dict[str, Callable[[], Mechanism]] = {
    "cartpole": cartpole,
    "double_pendulum": double_pendulum,
    "rott": rott,
    "tree5": tree5,
    "cabinet": cabinet,
    "thrown": thrown,
    "pushed": pushed,
    "pendulum3": pendulum3,
}


def with_params(mech: Mechanism, params: dict[str, float] | None) -> Mechanism:
    """``mech`` with body masses and joint damping replaced by ``params`` ({"cart.mass": kg,
    "slider.damping": N s/m or N m s/rad, ...}, truth.json's parameter names); names it lacks
    raise ValueError. Inertias follow the masses (the URDF's are computed from shape and mass)."""
    if not params:
        return mech
    bodies = {b.name: b for b in mech.bodies}
    joints = {j.name: j for j in mech.joints}
    for key, value in params.items():
        name, kind = key.rsplit(".", 1) if "." in key else (key, "")
        if kind == "mass" and name in bodies and value > 0:
            bodies[name] = replace(bodies[name], mass=float(value))
        elif kind == "damping" and name in joints and value >= 0:
            joints[name] = replace(joints[name], damping=float(value))
        else:
            raise ValueError(f"{mech.name}: cannot set {key!r} = {value!r} (a body's .mass > 0 or a joint's "
                             f".damping >= 0; bodies {', '.join(bodies)}, joints {', '.join(joints)})")
    return replace(mech, bodies=tuple(bodies[b.name] for b in mech.bodies),
                   joints=tuple(joints[j.name] for j in mech.joints))
