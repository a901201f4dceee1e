"""The shape library of a recording (``shapes.json``), see docs/formats.md §1.

Each shape is a primitive in its own body frame, centred at the shape's centre;
capsule and cylinder axes lie along body z and ``length`` excludes the caps.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

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
    file: str | None = None  # mesh, relative to the recording

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
        raise ValueError(f"shape {self.name!r}: extents of a mesh need the mesh loaded")

    def volume(self) -> float:
        if self.type == "box":
            return float(self.size[0] * self.size[1] * self.size[2])
        if self.type == "sphere":
            return 4.0 / 3.0 * math.pi * self.radius**3
        if self.type == "capsule":
            return math.pi * self.radius**2 * self.length + 4.0 / 3.0 * math.pi * self.radius**3
        if self.type == "cylinder":
            return math.pi * self.radius**2 * self.length
        raise ValueError(f"shape {self.name!r}: volume of a mesh needs the mesh loaded")

    def inertia(self, mass: float) -> tuple[float, float, float]:
        """Principal moments (Ixx, Iyy, Izz) in kg m^2 about the shape centre, in its body
        frame, for a solid of uniform density. The one formula every stage uses: the truth
        URDF of synthetic recordings, the identify simulator and the exported twin.

        Capsule: a cylinder of ``length`` plus two solid hemispheres, mass shared by
        volume; each hemisphere's centroid sits 3r/8 beyond the cylinder's end and its own
        moment about the centroid's perpendicular axis is 83/320 m r^2 (parallel axis).
        """
        m = float(mass)
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
        raise ValueError(f"shape {self.name!r}: inertia of a mesh needs the mesh loaded")

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
        return d


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
    return Shape(name, t, file=f)


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
