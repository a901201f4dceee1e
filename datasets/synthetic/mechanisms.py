"""The synthetic mechanisms: geometry, masses, joints and seeded initial states.

Each mechanism is plain data (``Mechanism``): bodies are library primitives placed in
world coordinates at the nominal configuration (every joint position 0), joints carry
their world axis and pivot at that configuration. ``physics.py`` turns this into a
URDF for PyBullet; nothing here knows about URDF, MJCF or rendering.

Body frame = shape centre frame (docs/interfaces.md: capsules and cylinders along
body z), so a body's pose is the pose of its shape centre.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from vid2sim.datasets.shapes import Shape

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
class Floor:
    """A physical floor plane z = ``height`` (contacts), rendered as the ground."""

    height: float = 0.0
    friction: float = 0.5
    restitution: float = 0.0


@dataclass(frozen=True)
class Tip:
    """A vertical cylinder moving at constant velocity (the pusher of ``pushed``)."""

    radius: float
    height: float
    start: tuple[float, float, float]  # centre at frame 0
    velocity: tuple[float, float, float]
    friction: float = 0.3


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
    extra_params: dict = field(default_factory=dict)

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


FACTORIES: dict[str, Callable[[], Mechanism]] = {
    "cartpole": cartpole,
    "double_pendulum": double_pendulum,
}
