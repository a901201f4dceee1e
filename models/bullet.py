"""The floor that PyBullet simulations share: the synthetic generator's ground truth and
the twin's forecast stand on the same definition, so their contacts agree."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Floor:
    """A physical floor plane z = ``height`` (contacts), rendered as the ground. ``stiffness``
    (N/m) and ``damping`` (N s/m) make its contacts compliant (Bullet's contactStiffness /
    contactDamping on the floor); None: rigid contacts."""

    height: float = 0.0
    friction: float = 0.5
    restitution: float = 0.0
    stiffness: float | None = None
    damping: float | None = None


def add_floor(p, cid: int, floor) -> int:
    """``floor`` as a static box in PyBullet module ``p``, client ``cid``; returns its body id."""
    shape = p.createCollisionShape(p.GEOM_BOX, halfExtents=[20, 20, 0.5], physicsClientId=cid)
    body = p.createMultiBody(0, shape, basePosition=[0, 0, floor.height - 0.5], physicsClientId=cid)
    # Bullet multiplies the two bodies' coefficients (btManifoldResult::calculateCombined*):
    # the floor gets 1 so that the parts' own values are the effective ones.
    p.changeDynamics(body, -1, lateralFriction=1.0, restitution=1.0, physicsClientId=cid)
    if floor.stiffness is not None:  # compliant contacts (Bullet: the pair gets the floor's values)
        p.changeDynamics(body, -1, contactStiffness=floor.stiffness, contactDamping=floor.damping, physicsClientId=cid)
    return body
