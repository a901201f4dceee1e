"""Single rigid parts pushed across a floor by a cylindrical tip (the push benchmark's cases
beside the three-link ``pushed`` linkage of ``mechanisms.py``).

``pushed_box``: a flat box; ``pushed_box_strokes``: the same box pushed in strokes, the tip
stopping dead after each so that the box slides to rest on its own (``pushed_strokes``: the
linkage so); ``pushed_cylinder``: an upright puck (a cylinder standing on
its end); ``driven_pendulum``: no pusher but a known torque at its hinge to the world
(``actuation.npz``'s ``joint_effort``). Each part's joint to the world is ``planar``; the tip moves along world +y
(at constant velocity but in ``pushed_box_strokes``), off the part's centre so that the part turns as it slides. The floor is
compliant as in ``pushed`` (a restarted clip stays on the uninterrupted one). Not in
``MECHANISMS`` (the benchmarks that loop over every mechanism do not take them); ``mechanism``
and ``make_recording`` know them by name.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
from scipy.spatial.transform import Rotation

from vid2sim.datasets.shapes import Shape
from vid2sim.datasets.synthetic.mechanisms import (PALETTE, BodySpec, Effort, InitialState, JointSpec, Mechanism, Tip,
                                                   _capsule, _u, pose, pushed)
from vid2sim.models.bullet import Floor


def _single(name: str, shape: Shape, mass: float, friction: float, tip_x: tuple[float, float], speed: float = 0.12,
            start_y: float = -0.2, strokes: tuple[float, float] | None = None) -> Mechanism:
    h = shape.extents()[2]
    bodies = (BodySpec("part", shape, mass, PALETTE[1], pose((0.0, 0.0, h / 2))),)
    joints = (JointSpec("root", "planar", "world", "part", (0, 0, 1)),)

    def initial(rng):
        yaw = Rotation.from_euler("z", _u(rng, -0.4, 0.4)).as_matrix()
        return InitialState(q={}, qd={}, T_world_root=pose((_u(rng, -0.02, 0.02), _u(rng, -0.02, 0.02), h / 2), yaw),
                            root_twist=((0, 0, 0), (0, 0, 0)))

    def tip(rng):
        return Tip(radius=0.015, height=0.06, start=(_u(rng, *tip_x, signed=True), start_y, 0.032),
                   velocity=(0.0, speed, 0.0), friction=0.3, strokes=strokes)

    return Mechanism(name, bodies, joints, initial, floor=Floor(0.0, friction=friction, stiffness=1e4, damping=40.0),
                     tip_factory=tip, view=(-15.0, 50.0))


def pushed_box() -> Mechanism:
    """A 12 x 8 x 4 cm box of 0.3 kg on a floor (Coulomb mu 0.4), pushed 1-4 cm off its centre."""
    return _single("pushed_box", Shape("part", "box", size=(0.12, 0.08, 0.04)), 0.3, 0.4, (0.01, 0.04))


def pushed_box_strokes() -> Mechanism:
    """``pushed_box`` pushed in strokes: the tip starts 14 cm behind the box's centre, moves at
    0.3 m/s for 0.4 s, then stands still for 0.6 s, and again (the same 0.12 m/s on average and
    0.6 m in 5 s as ``pushed_box``). At each stop the box slides on alone and the floor stops it,
    v^2 / (2 mu g) = 11.5 mm at 0.3 m/s, so that its deceleration (mu g) shows the floor friction."""
    return _single("pushed_box_strokes", Shape("part", "box", size=(0.12, 0.08, 0.04)), 0.3, 0.4, (0.01, 0.04),
                   speed=0.3, start_y=-0.14, strokes=(0.4, 0.6))


def pushed_strokes() -> Mechanism:
    """The three-link ``pushed`` linkage pushed in strokes as ``pushed_box_strokes`` (0.3 m/s for
    0.4 s, then 0.6 s still), the tip starting 14 cm behind the root's centre and within 7.5 cm of it
    across (on the middle link, where ``pushed``'s may slip off an end link): after each stop
    the linkage slides on alone until the floor (mu 0.5) stops it."""
    base = pushed()

    def tip(rng):
        t = base.tip_factory(rng)
        return Tip(t.radius, t.height, (t.start[0] / 2, -0.14, t.start[2]), (0.0, 0.3, 0.0), t.friction,
                   strokes=(0.4, 0.6))

    return replace(base, name="pushed_strokes", tip_factory=tip)


def pushed_cylinder() -> Mechanism:
    """An upright puck (radius 4 cm, 4 cm tall, 0.25 kg) on a floor (mu 0.3), pushed 1-3 cm off its centre."""
    return _single("pushed_cylinder", Shape("part", "cylinder", radius=0.04, length=0.04), 0.25, 0.3, (0.01, 0.03))


def driven_pendulum() -> Mechanism:
    """A capsule (radius 2 cm, length 0.3 m, 0.4 kg) hanging from a hinge about world y at 1 m (named
    as articulate names it, ``world_to_arm``, which ``actuation.npz`` carries),
    damping 0.02 N m s/rad, driven by a known torque at the hinge: two sines, 0.15-0.25 N m at
    0.4-0.7 Hz and 0.05-0.1 N m at 1.1-1.6 Hz, random phases (the gravity torque at 90 deg is
    0.59 N m); started at rest 0.2-0.5 rad off the vertical."""
    L, r, top = 0.3, 0.02, 1.0
    bodies = (BodySpec("arm", _capsule("arm", r, L), 0.4, PALETTE[2], pose((0.0, 0.0, top - L / 2))),)
    joints = (JointSpec("world_to_arm", "revolute", "world", "arm", (0, 1, 0), (0.0, 0.0, top), damping=0.02),)

    def initial(rng):
        return InitialState(q={"world_to_arm": _u(rng, 0.2, 0.5, True)}, qd={"world_to_arm": 0.0})

    def effort(rng):
        a = (_u(rng, 0.15, 0.25), _u(rng, 0.05, 0.1))
        f = (_u(rng, 0.4, 0.7), _u(rng, 1.1, 1.6))
        ph = (_u(rng, 0, 2 * np.pi), _u(rng, 0, 2 * np.pi))
        return Effort(("world_to_arm",),
                      lambda t: np.array([sum(ai * np.sin(2 * np.pi * fi * t + pi) for ai, fi, pi in zip(a, f, ph))]))

    return Mechanism("driven_pendulum", bodies, joints, initial, view=(-20.0, 12.0), effort_factory=effort)


PUSH_FACTORIES = {"pushed_box": pushed_box, "pushed_box_strokes": pushed_box_strokes,
                  "pushed_strokes": pushed_strokes, "pushed_cylinder": pushed_cylinder, "driven_pendulum": driven_pendulum}
