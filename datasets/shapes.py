"""The shape library of a recording (``shapes.json``), see docs/formats.md §1.

Each shape is a primitive in its own body frame, centred at the shape's centre;
capsule and cylinder axes lie along body z and ``length`` excludes the caps.

A mesh (OBJ, STL, PLY, read by trimesh) has as body frame the file's axes, scaled by
``scale``, with the origin moved to the solid's centre of mass (uniform density), so
that every stage can treat the body origin as the centre of mass, as for primitives.
Its volume, extents and inertia come from trimesh's mass properties, which need a
watertight mesh; a mesh that is not is refused when shapes.json is read.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from vid2sim.datasets.errors import RecordingError

# The closed-form primitive types. Their order is the learned segmenter's class order (class i is
# detector label i + 1, 0 = background), stored in its checkpoints: append, never reorder.
PRIMITIVE_TYPES = ("box", "capsule", "sphere", "cylinder")
CLASSES = PRIMITIVE_TYPES  # the segmenter's classes: the primitive types, in that order
SHAPE_TYPES = PRIMITIVE_TYPES + ("mesh",)  # every type shapes.json may name
STAND_IN_RADIUS = 0.05  # m: a part without a usable shape (a mesh not loaded, no shape given) is
                        # given the volume and inertia of a solid sphere of this radius


def stand_in_volume() -> float:
    """Volume (m^3) of the stand-in sphere of a part without a usable shape."""
    return 4.0 / 3.0 * math.pi * STAND_IN_RADIUS**3


def stand_in_inertia(mass: float) -> tuple[float, float, float]:
    """Principal moments (kg m^2) of the stand-in sphere of a part without a usable shape."""
    i = 0.4 * float(mass) * STAND_IN_RADIUS**2
    return (i, i, i)


@dataclass(frozen=True)
class Shape:
    """One library shape. Sizes in metres."""

    name: str
    type: str
    size: tuple[float, float, float] | None = None  # box full extents (x, y, z)
    radius: float | None = None  # capsule, sphere, cylinder
    length: float | None = None  # capsule (without caps), cylinder
    file: str | None = None  # mesh, relative to the recording (to ``root``)
    scale: float = 1.0  # mesh: file units to metres
    root: str | None = field(default=None, compare=False, repr=False)  # mesh: folder ``file`` is relative to

    def mesh_path(self) -> Path:
        """Absolute path of a mesh shape's file."""
        if self.type != "mesh" or self.file is None:
            raise ValueError(f"shape {self.name!r}: not a mesh")
        return (Path(self.root) if self.root else Path(".")) / self.file

    def mesh(self):
        """A mesh shape's ``trimesh.Trimesh`` in its body frame (scaled, centre of mass at the
        origin; cached per file, scale and modification time). Do not modify it."""
        p = self.mesh_path().resolve()
        return _load_mesh(str(p), float(self.scale), p.stat().st_mtime_ns)[0]

    def mesh_offset(self) -> np.ndarray:
        """(3,) the body origin (centre of mass) in the mesh file's frame, scaled (m)."""
        p = self.mesh_path().resolve()
        return _load_mesh(str(p), float(self.scale), p.stat().st_mtime_ns)[1].copy()

    def inertia_tensor(self, mass: float) -> np.ndarray:
        """(3, 3) inertia (kg m^2) about the body origin in the body frame, uniform density;
        diagonal for the primitives, trimesh's mass properties for a mesh."""
        if self.type == "mesh":
            m = self.mesh()
            return np.asarray(m.moment_inertia, float) * (float(mass) / float(m.volume))
        return np.diag(self.inertia(mass))

    def extents(self) -> tuple[float, float, float]:
        """Full axis-aligned extents of the shape in its body frame (m)."""
        if self.type == "box":
            return tuple(self.size)  # type: ignore[return-value]
        if self.type == "sphere":
            d = 2 * self.radius
            return (d, d, d)
        if self.type == "capsule":
            d = 2 * self.radius
            return (d, d, self.length + d)
        if self.type == "cylinder":
            d = 2 * self.radius
            return (d, d, self.length)
        return tuple(float(x) for x in self.mesh().extents)  # type: ignore[return-value]

    def corners(self) -> np.ndarray:
        """(8, 3) corners of the shape's axis-aligned bounding box in its body frame (m); a mesh's
        need not be centred on the body origin (its centre of mass)."""
        if self.type == "mesh":
            lo, hi = np.asarray(self.mesh().bounds, float)
        else:
            hi = np.asarray(self.extents(), float) / 2
            lo = -hi
        return np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])])

    def volume(self) -> float:
        if self.type == "box":
            return float(self.size[0] * self.size[1] * self.size[2])
        if self.type == "sphere":
            return 4.0 / 3.0 * math.pi * self.radius**3
        if self.type == "capsule":
            return math.pi * self.radius**2 * self.length + 4.0 / 3.0 * math.pi * self.radius**3
        if self.type == "cylinder":
            return math.pi * self.radius**2 * self.length
        return float(self.mesh().volume)

    def inertia(self, mass: float) -> tuple[float, float, float]:
        """Principal moments (Ixx, Iyy, Izz) in kg m^2 about the shape centre, in its body
        frame, for a solid of uniform density. The one formula every stage uses: the truth
        URDF of synthetic recordings, the identify simulator and the exported twin.

        Mesh: the diagonal of ``inertia_tensor`` (the body frame is the file's, whose axes
        need not be principal; the URDF export writes the full tensor).

        Capsule: a cylinder of ``length`` plus two solid hemispheres, mass shared by
        volume; each hemisphere's centroid sits 3r/8 beyond the cylinder's end and its own
        moment about the centroid's perpendicular axis is 83/320 m r^2 (parallel axis).
        """
        m = float(mass)
        if self.type == "mesh":
            return tuple(float(x) for x in np.diag(self.inertia_tensor(m)))  # type: ignore[return-value]
        if self.type == "box":
            x, y, z = self.size
            return (m * (y * y + z * z) / 12, m * (x * x + z * z) / 12, m * (x * x + y * y) / 12)
        if self.type == "sphere":
            i = 0.4 * m * self.radius**2
            return (i, i, i)
        r, L = self.radius, self.length
        if self.type == "cylinder":
            ixx = m * (3 * r * r + L * L) / 12
            return (ixx, ixx, 0.5 * m * r * r)
        if self.type == "capsule":
            vc, vs = math.pi * r * r * L, 4.0 / 3.0 * math.pi * r**3
            mc = m * vc / (vc + vs)
            ms = m - mc
            ixx = mc * (3 * r * r + L * L) / 12 + ms * (83.0 / 320.0 * r * r + (L / 2 + 3 * r / 8) ** 2)
            return (ixx, ixx, 0.5 * mc * r * r + 0.4 * ms * r * r)
        raise ValueError(f"shape {self.name!r}: unknown type {self.type!r}")

    def size_scalar(self) -> float:
        """Largest extent: a body's 'size' in checks such as 'within the body's size'."""
        return max(self.extents())

    def to_json(self) -> dict:
        d: dict = {"type": self.type}
        if self.size is not None:
            d["size"] = list(self.size)
        if self.radius is not None:
            d["radius"] = self.radius
        if self.length is not None:
            d["length"] = self.length
        if self.file is not None:
            d["file"] = self.file
            d["scale"] = self.scale
        return d


MESH_SUFFIXES = (".obj", ".stl", ".ply")  # mesh files trimesh reads for shapes.json


class MeshError(ValueError):
    """A mesh file that cannot serve as a part: unreadable, empty or not watertight."""


@lru_cache(maxsize=32)
def _load_mesh(path: str, scale: float, mtime_ns: int):
    """(trimesh in the body frame, (3,) centre of mass in the scaled file frame) of a mesh file."""
    import trimesh

    try:
        m = trimesh.load(path, force="mesh", process=True)
    except Exception as e:  # noqa: BLE001 - trimesh raises many kinds for a bad file
        raise MeshError(f"{path}: cannot read the mesh ({e})") from None
    if not isinstance(m, trimesh.Trimesh) or len(m.faces) == 0:
        raise MeshError(f"{path}: no triangles in the mesh")
    if not m.is_watertight:
        raise MeshError(f"{path}: mesh is not watertight (volume and inertia need a closed surface)")
    if m.volume < 0:
        m.invert()
    m.apply_scale(scale)
    com = np.asarray(m.center_mass, float).copy()
    m.apply_translation(-com)
    return m, com


def _positive(path: Path, name: str, key: str, v) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise RecordingError(path, f"shape {name!r}: {key} must be a number, got {v!r}") from None
    if not math.isfinite(f) or f <= 0:
        raise RecordingError(path, f"shape {name!r}: {key} must be finite and > 0, got {v!r}")
    return f


def parse_shape(path: Path, name: str, d: dict) -> Shape:
    if not isinstance(d, dict) or "type" not in d:
        raise RecordingError(path, f"shape {name!r} needs a 'type' (one of {', '.join(SHAPE_TYPES)})")
    t = d["type"]
    if t not in SHAPE_TYPES:
        raise RecordingError(path, f"shape {name!r} has unknown type {t!r}; known: {', '.join(SHAPE_TYPES)}")
    if t == "box":
        size = d.get("size")
        if not isinstance(size, (list, tuple)) or len(size) != 3:
            raise RecordingError(path, f"shape {name!r}: box needs 'size' [x, y, z]")
        return Shape(name, t, size=tuple(_positive(path, name, "size", s) for s in size))
    if t == "sphere":
        return Shape(name, t, radius=_positive(path, name, "radius", d.get("radius")))
    if t in ("capsule", "cylinder"):
        return Shape(name, t, radius=_positive(path, name, "radius", d.get("radius")),
                     length=_positive(path, name, "length", d.get("length")))
    f = d.get("file")
    if not isinstance(f, str):
        raise RecordingError(path, f"shape {name!r}: mesh needs 'file'")
    if not (path.parent / f).exists():
        raise RecordingError(path, f"shape {name!r}: mesh file {f!r} does not exist")
    if Path(f).suffix.lower() not in MESH_SUFFIXES:
        raise RecordingError(path, f"shape {name!r}: mesh file {f!r} is not one of {', '.join(MESH_SUFFIXES)}")
    scale = _positive(path, name, "scale", d.get("scale", 1.0))
    shape = Shape(name, t, file=f, scale=scale, root=str(path.parent))
    try:
        shape.mesh()
    except MeshError as e:
        raise RecordingError(path.parent / f, f"shape {name!r}: {str(e).split(': ', 1)[-1]}") from None
    return shape


def load_shapes(path: str | Path) -> dict[str, Shape]:
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise RecordingError(path, "shapes.json is missing") from None
    except json.JSONDecodeError as e:
        raise RecordingError(path, f"not valid JSON ({e})") from None
    if not isinstance(raw, dict) or not raw:
        raise RecordingError(path, "must map shape names to shapes, and name at least one")
    return {name: parse_shape(path, name, d) for name, d in raw.items()}


def shapes_to_json(shapes: dict[str, Shape]) -> dict:
    return {name: s.to_json() for name, s in shapes.items()}
