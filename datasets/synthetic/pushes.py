"""Single rigid parts pushed across a floor by a cylindrical tip (the push benchmark's cases
beside the three-link ``pushed`` linkage of ``mechanisms.py``).

``pushed_box``: a flat box; ``pushed_cylinder``: an upright puck (a cylinder standing on
its end). Each part's joint to the world is ``planar``; the tip moves at constant velocity
along world +y, off the part's centre so that the part turns as it slides. The floor is
compliant as in ``pushed`` (a restarted clip stays on the uninterrupted one). Not in
``MECHANISMS`` (the benchmarks that loop over every mechanism do not take them); ``mechanism``
and ``make_recording`` know them by name.
"""
from __future__ import annotations

from scipy.spatial.transform import Rotation

from vid2sim.datasets.shapes import Shape
from vid2sim.datasets.synthetic.mechanisms import PALETTE, BodySpec, InitialState, JointSpec, Mechanism, Tip, _u, pose
from vid2sim.models.bullet import Floor


def _single(name: str, shape: Shape, mass: float, friction: float, tip_x: tuple[float, float]) -> Mechanism:
    h = shape.extents()[2]
    bodies = (BodySpec("part", shape, mass, PALETTE[1], pose((0.0, 0.0, h / 2))),)
    joints = (JointSpec("root", "planar", "world", "part", (0, 0, 1)),)

    def initial(rng):
        yaw = Rotation.from_euler("z", _u(rng, -0.4, 0.4)).as_matrix()
        return InitialState(q={}, qd={}, T_world_root=pose((_u(rng, -0.02, 0.02), _u(rng, -0.02, 0.02), h / 2), yaw),
                            root_twist=((0, 0, 0), (0, 0, 0)))

    def tip(rng):
        return Tip(radius=0.015, height=0.06, start=(_u(rng, *tip_x, signed=True), -0.2, 0.032),
                   velocity=(0.0, 0.12, 0.0), friction=0.3)

    return Mechanism(name, bodies, joints, initial, floor=Floor(0.0, friction=friction, stiffness=1e4, damping=40.0),
                     tip_factory=tip, view=(-15.0, 50.0))


def pushed_box() -> Mechanism:
    """A 12 x 8 x 4 cm box of 0.3 kg on a floor (Coulomb mu 0.4), pushed 1-4 cm off its centre."""
    return _single("pushed_box", Shape("part", "box", size=(0.12, 0.08, 0.04)), 0.3, 0.4, (0.01, 0.04))


def pushed_cylinder() -> Mechanism:
    """An upright puck (radius 4 cm, 4 cm tall, 0.25 kg) on a floor (mu 0.3), pushed 1-3 cm off its centre."""
    return _single("pushed_cylinder", Shape("part", "cylinder", radius=0.04, length=0.04), 0.25, 0.3, (0.01, 0.03))


PUSH_FACTORIES = {"pushed_box": pushed_box, "pushed_cylinder": pushed_cylinder}
