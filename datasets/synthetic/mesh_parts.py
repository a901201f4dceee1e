"""Mesh parts for synthetic clips: a Craftsman-like slotted beam and pendulums made of it.

``slotted_beam_mesh``: a 4 x 1.5 x 30 cm beam (long axis body z) with six rectangular
slots through its 1.5 cm thickness (body y), cut by trimesh's boolean difference
(manifold3d) where available, else assembled from boxes (the rails beside the slots and
the bridges between them, ``trimesh.util.concatenate`` of watertight boxes that touch
face to face, merged); either way watertight, so its volume and inertia are defined.

``slotted_pendulum``: the beam hanging from a pivot at its top end, hinged about world y,
the slots facing the camera (the wall behind shows through them).
``slotted_pendulum_box``: its primitive twin, a plain box of the beam's extents, same
mass, pivot and initial swing. Not in ``MECHANISMS`` (the benchmarks that loop over
every mechanism do not take them); ``mechanism`` and ``make_recording`` know them by name.

A mesh shape's file is written once per process into a folder of the system's temporary
directory (``mesh_shape``); ``RecordingWriter`` copies it into the recording beside
shapes.json (``meshes/<name>.obj``).
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np

from vid2sim.datasets.shapes import Shape
from vid2sim.datasets.synthetic.mechanisms import PALETTE, BodySpec, InitialState, JointSpec, Mechanism, _u, pose

BEAM_SIZE = (0.04, 0.015, 0.30)  # m: width (x), thickness (y, the slots go through it), length (z)
SLOT_SIZE = (0.016, 0.028)  # m: slot width (x) and length (z)
SLOT_COUNT = 6
SLOT_PITCH = 0.045  # m between slot centres along z


def _box(lo, hi):
    import trimesh

    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    return trimesh.creation.box(hi - lo, trimesh.transformations.translation_matrix((lo + hi) / 2))


def _slot_centres() -> np.ndarray:
    return (np.arange(SLOT_COUNT) - (SLOT_COUNT - 1) / 2) * SLOT_PITCH


def slotted_beam_mesh(boolean: bool = True):
    """The slotted beam (``trimesh.Trimesh``, m, centred at the origin), watertight.

    boolean: cut the slots by ``difference`` (needs manifold3d); False or manifold3d missing:
    build it from boxes."""
    import trimesh

    x, y, z = BEAM_SIZE
    sx, sz = SLOT_SIZE
    if boolean:
        try:
            import manifold3d  # noqa: F401

            beam = _box((-x / 2, -y / 2, -z / 2), (x / 2, y / 2, z / 2))
            cuts = [_box((-sx / 2, -y, c - sz / 2), (sx / 2, y, c + sz / 2)) for c in _slot_centres()]
            out = beam.difference(trimesh.util.concatenate(cuts))
            if out.is_watertight:
                return out
        except ImportError:
            pass
    parts = [_box((-x / 2, -y / 2, -z / 2), (-sx / 2, y / 2, z / 2)), _box((sx / 2, -y / 2, -z / 2), (x / 2, y / 2, z / 2))]
    edges = np.concatenate([[-z / 2], np.ravel([[c - sz / 2, c + sz / 2] for c in _slot_centres()]), [z / 2]])
    for lo, hi in edges.reshape(-1, 2):
        parts.append(_box((-sx / 2, -y / 2, lo), (sx / 2, y / 2, hi)))
    # Boxes touching face to face: a union (manifold) where it exists, else their concatenation
    # (closed shells that share faces: volume and inertia still add up exactly).
    return trimesh.util.concatenate(parts)


def mesh_shape(name: str, mesh, file: str | None = None) -> Shape:
    """A mesh ``Shape`` of ``mesh`` (m), its file written as OBJ under a temporary folder
    keyed by the mesh's content (written once, atomically)."""
    data = mesh.export(file_type="obj").encode()
    key = hashlib.sha1(data).hexdigest()[:12]
    root = Path(tempfile.gettempdir()) / f"vid2sim_meshes_{key}"
    file = file or f"meshes/{name}.obj"
    path = root / file
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return Shape(name, "mesh", file=file, scale=1.0, root=str(root))


def _pendulum(name: str, shape: Shape) -> Mechanism:
    top = 1.0
    L = BEAM_SIZE[2]
    bodies = (BodySpec("beam", shape, 0.15, PALETTE[2], pose((0.0, 0.0, top - L / 2))),)
    joints = (JointSpec("hinge", "revolute", "world", "beam", (0, 1, 0), (0.0, 0.0, top), damping=0.002),)

    def initial(rng):
        return InitialState(q={"hinge": _u(rng, 0.4, 0.9, True)}, qd={"hinge": _u(rng, -1.0, 1.0)})

    return Mechanism(name, bodies, joints, initial, view=(-15.0, 10.0))


def slotted_pendulum() -> Mechanism:
    """The slotted beam (0.15 kg) swinging about world y from a pivot at its top end, (0, 0, 1) m."""
    return _pendulum("slotted_pendulum", mesh_shape("beam", slotted_beam_mesh()))


def slotted_pendulum_box() -> Mechanism:
    """``slotted_pendulum``'s primitive twin: a plain box of the beam's extents, same mass and motion start."""
    return _pendulum("slotted_pendulum_box", Shape("beam", "box", size=BEAM_SIZE))


MESH_FACTORIES = {"slotted_pendulum": slotted_pendulum, "slotted_pendulum_box": slotted_pendulum_box}
