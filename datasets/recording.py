"""Recordings in and out: the folder format of docs/formats.md §1.

A recording is opened once (cheap: only ``camera.json``, the frame listings and the
first frame are read and validated) and then frames are read one at a time, so a
long recording never sits in memory. RealSense bags and videos live in
``realsense.py`` and ``video.py`` and present the same ``Recording`` interface.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import cv2
import numpy as np

from vid2sim.datasets.actuation import FILE as ACTUATION_FILE
from vid2sim.datasets.actuation import Actuation, load_actuation
from vid2sim.datasets.errors import RecordingError
from vid2sim.datasets.shapes import Shape, load_shapes, shapes_to_json

CAMERA_KEYS = ("width", "height", "fx", "fy", "cx", "cy", "depth_scale", "fps", "world_from_camera")
_FRAME_RE = re.compile(r"^(\d{6})\.(png|jpg|jpeg)$")
# A depth image whose median valid reading is past this is in the wrong unit
# (e.g. millimetres stored with depth_scale 1.0, or metres*1000 with scale 0.001*1000).
MAX_PLAUSIBLE_DEPTH_M = 20.0
MIN_PLAUSIBLE_DEPTH_M = 0.05


@dataclass(frozen=True)
class Camera:
    """Pinhole camera (OpenCV convention: x right, y down, z forward)."""

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    depth_scale: float = 0.001
    fps: float = 30.0
    world_from_camera: np.ndarray = field(default_factory=lambda: np.eye(4))

    @property
    def K(self) -> np.ndarray:
        """(3, 3) intrinsic matrix."""
        return np.array([[self.fx, 0, self.cx], [0, self.fy, self.cy], [0, 0, 1.0]])

    @property
    def camera_from_world(self) -> np.ndarray:
        return np.linalg.inv(self.world_from_camera)

    def project(self, p_world: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """p_world: (..., 3) -> pixel (u, v) (..., 2) and camera-frame depth z (...)."""
        T = self.camera_from_world
        p_cam = p_world @ T[:3, :3].T + T[:3, 3]
        z = p_cam[..., 2]
        uv = np.stack([self.fx * p_cam[..., 0] / z + self.cx, self.fy * p_cam[..., 1] / z + self.cy], -1)
        return uv, z

    def pixel_rays(self) -> np.ndarray:
        """(H, W, 3) float64 camera-frame directions through the pixel centres (OpenCV: centre of
        pixel (u, v) at integer u, v), scaled to z = 1: a ray times its pixel's depth is the point."""
        u, v = np.meshgrid(np.arange(self.width), np.arange(self.height))
        return np.stack([(u - self.cx) / self.fx, (v - self.cy) / self.fy, np.ones(u.shape)], -1)

    def backproject(self, depth_m: np.ndarray) -> np.ndarray:
        """depth_m: (H, W) metres -> (H, W, 3) points in the camera frame (0 depth -> 0 point)."""
        return self.pixel_rays() * depth_m[..., None]

    def to_json(self) -> dict:
        return {
            "width": int(self.width), "height": int(self.height),
            "fx": float(self.fx), "fy": float(self.fy), "cx": float(self.cx), "cy": float(self.cy),
            "depth_scale": float(self.depth_scale), "fps": float(self.fps),
            "world_from_camera": np.asarray(self.world_from_camera, float).tolist(),
        }

    @staticmethod
    def from_json(d: dict, path: str | Path = "camera.json") -> "Camera":
        path = Path(path)
        if not isinstance(d, dict):
            raise RecordingError(path, "must be a JSON object")
        missing = [k for k in CAMERA_KEYS if k not in d]
        if missing:
            raise RecordingError(path, f"missing key(s) {', '.join(missing)}")
        vals = {}
        for k in ("width", "height"):
            v = d[k]
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise RecordingError(path, f"{k} must be a positive integer, got {v!r}")
            vals[k] = v
        for k in ("fx", "fy", "cx", "cy", "depth_scale", "fps"):
            v = d[k]
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                raise RecordingError(path, f"{k} must be a finite number, got {v!r}")
            if k in ("fx", "fy", "depth_scale", "fps") and v <= 0:
                raise RecordingError(path, f"{k} must be > 0, got {v!r}")
            if k in ("cx", "cy") and v < 0:
                raise RecordingError(path, f"{k} must be >= 0, got {v!r}")
            vals[k] = float(v)
        try:
            T = np.asarray(d["world_from_camera"], dtype=float)
        except (TypeError, ValueError):
            raise RecordingError(path, "world_from_camera must be a 4x4 matrix of numbers") from None
        if T.shape != (4, 4) or not np.all(np.isfinite(T)):
            raise RecordingError(path, f"world_from_camera must be a finite 4x4 matrix, got shape {T.shape}")
        R = T[:3, :3]
        if not np.allclose(R @ R.T, np.eye(3), atol=1e-4) or np.linalg.det(R) < 0 or not np.allclose(T[3], [0, 0, 0, 1]):
            raise RecordingError(path, "world_from_camera is not a rigid transform (rotation part must be orthonormal, det +1)")
        return Camera(world_from_camera=T, **vals)

    @staticmethod
    def load(path: str | Path) -> "Camera":
        path = Path(path)
        if not path.exists():
            raise RecordingError(path, "camera.json is missing (every recording needs one)")
        try:
            d = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise RecordingError(path, f"not valid JSON ({e})") from None
        return Camera.from_json(d, path)


class Recording(ABC):
    """What every recording offers, whatever it is stored in."""

    path: Path
    camera: Camera
    num_frames: int
    has_depth: bool
    has_color: bool
    shapes: dict[str, Shape] | None
    actuation: "Actuation | None" = None  # known actuators (actuation.npz, docs/formats.md §1.2)

    @abstractmethod
    def depth_raw(self, i: int) -> np.ndarray:
        """(H, W) uint16 depth units of frame i."""

    @abstractmethod
    def color(self, i: int) -> np.ndarray:
        """(H, W, 3) uint8 RGB of frame i."""

    def depth(self, i: int) -> np.ndarray:
        """(H, W) float32 depth in metres of frame i; 0 where there is no reading."""
        return self.depth_raw(i).astype(np.float32) * np.float32(self.camera.depth_scale)

    @property
    def fps(self) -> float:
        return self.camera.fps

    def frames(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, np.ndarray | None, np.ndarray | None]]:
        """Stream (i, depth_m or None, rgb or None), one frame in memory at a time."""
        stop = self.num_frames if stop is None else min(stop, self.num_frames)
        for i in range(start, stop):
            yield i, (self.depth(i) if self.has_depth else None), (self.color(i) if self.has_color else None)

    def close(self) -> None:
        """Release files, decoders or playback threads (nothing for a folder)."""

    def __enter__(self) -> "Recording":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_index(self, i: int) -> None:
        if not 0 <= i < self.num_frames:
            raise IndexError(f"{self.path}: frame {i} out of range [0, {self.num_frames})")

    def fingerprint(self) -> str:
        """Cheap identity for caching: size, mtimes and camera."""
        return f"{self.path}:{self.num_frames}:{json.dumps(self.camera.to_json(), sort_keys=True)}"


def _list_frames(folder: Path) -> list[Path]:
    files = {}
    for p in folder.iterdir():
        m = _FRAME_RE.match(p.name)
        if m is None:
            if p.name.startswith("."):
                continue
            raise RecordingError(p, "unexpected file in a frame folder (frames are named 000000.png, 000001.png, ...)")
        idx = int(m.group(1))
        if idx in files:
            raise RecordingError(p, f"frame {idx} appears twice ({files[idx].name} and {p.name})")
        files[idx] = p
    if not files:
        raise RecordingError(folder, "frame folder is empty (a recording needs at least one frame)")
    n = len(files)
    for i in range(n):
        if i not in files:
            last = max(files)
            raise RecordingError(folder / f"{i:06d}.png", f"frame {i} is missing: frames must be numbered 0..N-1 without gaps (found {n} frames, highest {last})")
    return [files[i] for i in range(n)]


class FolderRecording(Recording):
    """The directory form: camera.json, depth/, color/, shapes.json."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_dir():
            raise RecordingError(self.path, "recording folder does not exist" if not self.path.exists() else "is not a folder")
        self.camera = Camera.load(self.path / "camera.json")
        depth_dir, color_dir = self.path / "depth", self.path / "color"
        self._depth_files = _list_frames(depth_dir) if depth_dir.is_dir() else None
        self._color_files = _list_frames(color_dir) if color_dir.is_dir() else None
        if self._depth_files is None and self._color_files is None:
            raise RecordingError(self.path, "has neither depth/ nor color/ frames")
        if self._depth_files is not None and self._color_files is not None and len(self._depth_files) != len(self._color_files):
            raise RecordingError(self.path, f"depth/ has {len(self._depth_files)} frames but color/ has {len(self._color_files)}")
        self.has_depth = self._depth_files is not None
        self.has_color = self._color_files is not None
        self.num_frames = len(self._depth_files or self._color_files)
        shapes_path = self.path / "shapes.json"
        self.shapes = load_shapes(shapes_path) if shapes_path.exists() else None
        act_path = self.path / ACTUATION_FILE
        self.actuation = load_actuation(act_path, self.shapes or {}, self.num_frames) if act_path.exists() else None
        # Validate the first frame now so that a wrong size, dtype or unit fails at open.
        if self.has_depth:
            d = self.depth_raw(0)
            self._check_depth_plausible(d)
        if self.has_color:
            self.color(0)

    def _check_depth_plausible(self, d: np.ndarray) -> None:
        valid = d[d > 0]
        f = self._depth_files[0]
        if valid.size == 0:
            raise RecordingError(f, "depth frame has no valid reading (all zero)")
        med = float(np.median(valid)) * self.camera.depth_scale
        if med > MAX_PLAUSIBLE_DEPTH_M or med < MIN_PLAUSIBLE_DEPTH_M:
            raise RecordingError(
                f, f"median depth {med:.4g} m is implausible for a tabletop scene "
                   f"(expected {MIN_PLAUSIBLE_DEPTH_M}-{MAX_PLAUSIBLE_DEPTH_M} m): is depth_scale "
                   f"{self.camera.depth_scale} in camera.json the right unit?")

    def _read(self, f: Path, flags: int) -> np.ndarray:
        img = cv2.imread(str(f), flags)
        if img is None:
            raise RecordingError(f, "cannot be decoded as an image (corrupt or truncated?)")
        return img

    def depth_raw(self, i: int) -> np.ndarray:
        if not self.has_depth:
            raise RecordingError(self.path, "recording has no depth/ frames")
        self._check_index(i)
        f = self._depth_files[i]
        img = self._read(f, cv2.IMREAD_UNCHANGED)
        if img.ndim != 2:
            raise RecordingError(f, f"depth must be single-channel, got {img.shape[2]} channels")
        if img.dtype != np.uint16:
            raise RecordingError(f, f"depth must be a 16-bit PNG, got {img.dtype}")
        self._check_size(f, img)
        return img

    def color(self, i: int) -> np.ndarray:
        if not self.has_color:
            raise RecordingError(self.path, "recording has no color/ frames")
        self._check_index(i)
        f = self._color_files[i]
        img = self._read(f, cv2.IMREAD_COLOR)
        self._check_size(f, img)
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)

    def _check_size(self, f: Path, img: np.ndarray) -> None:
        h, w = img.shape[:2]
        if (w, h) != (self.camera.width, self.camera.height):
            raise RecordingError(f, f"image is {w}x{h} but camera.json says {self.camera.width}x{self.camera.height}")

    def fingerprint(self) -> str:
        stats = []
        for files in (self._depth_files, self._color_files):
            if files:
                st = files[-1].stat()
                stats.append(f"{len(files)}:{st.st_size}:{st.st_mtime_ns}")
        if self.actuation is not None:
            st = (self.path / ACTUATION_FILE).stat()
            stats.append(f"actuation:{st.st_size}:{st.st_mtime_ns}")
        return super().fingerprint() + ":" + ",".join(stats)


class RecordingWriter:
    """Writes the folder form frame by frame; the folder appears only when complete.

    >>> with RecordingWriter(dst, camera, shapes) as w:
    ...     w.add(depth_m, rgb)
    """

    def __init__(self, path: str | Path, camera: Camera, shapes: dict[str, Shape] | None = None,
                 overwrite: bool = False):
        self.path = Path(path)
        if self.path.exists() and not overwrite:
            raise FileExistsError(f"{self.path}: already exists (pass overwrite=True to replace it)")
        self.camera = camera
        self.shapes = shapes
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not os.access(self.path.parent, os.W_OK):
            raise PermissionError(f"{self.path.parent}: output folder is not writable")
        self._tmp = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.", dir=self.path.parent))
        self.n = 0
        self.extra_files: dict[str, bytes] = {}

    def add(self, depth_m: np.ndarray | None = None, rgb: np.ndarray | None = None) -> None:
        """depth_m: (H, W) metres (0 = no reading); rgb: (H, W, 3) uint8."""
        if depth_m is None and rgb is None:
            raise ValueError("a frame needs depth or colour")
        streams = (depth_m is not None, rgb is not None)
        if self.n == 0:
            self._streams = streams
        elif streams != self._streams:
            raise ValueError(f"{self.path}: frame {self.n} has streams (depth, colour) = {streams}, frame 0 had {self._streams}")
        size = (self.camera.height, self.camera.width)
        if depth_m is not None and np.shape(depth_m) != size:
            raise ValueError(f"{self.path}: frame {self.n}: depth is {np.shape(depth_m)}, camera says {size}")
        if rgb is not None and (np.shape(rgb) != size + (3,) or np.asarray(rgb).dtype != np.uint8):
            raise ValueError(f"{self.path}: frame {self.n}: rgb must be uint8 {size + (3,)}, got {np.asarray(rgb).dtype} {np.shape(rgb)}")
        name = f"{self.n:06d}.png"
        if depth_m is not None:
            (self._tmp / "depth").mkdir(exist_ok=True)
            d = np.asarray(depth_m, np.float64)
            units = np.round(np.where(np.isfinite(d) & (d > 0), d, 0.0) / self.camera.depth_scale)
            units[units > 65535] = 0  # out of range: no reading, never a false far reading
            cv2.imwrite(str(self._tmp / "depth" / name), units.astype(np.uint16))
        if rgb is not None:
            (self._tmp / "color").mkdir(exist_ok=True)
            cv2.imwrite(str(self._tmp / "color" / name), cv2.cvtColor(np.asarray(rgb, np.uint8), cv2.COLOR_RGB2BGR))
        self.n += 1

    def add_file(self, name: str, data: bytes | str) -> None:
        self.extra_files[name] = data.encode() if isinstance(data, str) else data

    def close(self) -> Path:
        (self._tmp / "camera.json").write_text(json.dumps(self.camera.to_json(), indent=2) + "\n")
        if self.shapes is not None:
            (self._tmp / "shapes.json").write_text(json.dumps(shapes_to_json(self.shapes), indent=2) + "\n")
            for s in self.shapes.values():  # mesh files travel with shapes.json, at the same relative path
                if s.type == "mesh" and s.file not in self.extra_files:
                    (self._tmp / s.file).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(s.mesh_path(), self._tmp / s.file)
        for name, data in self.extra_files.items():
            (self._tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (self._tmp / name).write_bytes(data)
        if self.path.exists():
            shutil.rmtree(self.path)
        os.replace(self._tmp, self.path)
        return self.path

    def abort(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> "RecordingWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def open_recording(path: str | Path) -> Recording:
    """Open a recording folder, RealSense bag (.bag/.db3) or video (.mp4 etc.)."""
    path = Path(path)
    if not path.exists():
        raise RecordingError(path, "recording does not exist")
    if path.is_dir():
        return FolderRecording(path)
    suffix = path.suffix.lower()
    if suffix in (".bag", ".db3"):
        from vid2sim.datasets.realsense import BagRecording

        return BagRecording(path)
    if suffix in (".mp4", ".avi", ".mov", ".mkv", ".webm"):
        from vid2sim.datasets.video import VideoRecording

        return VideoRecording(path)
    raise RecordingError(path, f"unknown recording type {suffix!r} (a folder, .bag, .db3 or a video)")


def write_first_frames(rec: Recording, dst: str | Path, frames: int, overwrite: bool = False) -> Path:
    """A recording folder at ``dst`` with the first ``frames`` frames of ``rec`` (depth and colour
    as stored, same camera and shapes.json): a clip cut in time, e.g. to hold its end back.
    Its ``actuation.npz`` keeps every row: past the cut they are the actuator's planned motion."""
    if not 1 <= frames <= rec.num_frames:
        raise ValueError(f"{rec.path}: cannot keep {frames} of its {rec.num_frames} frames")
    with RecordingWriter(dst, rec.camera, rec.shapes, overwrite=overwrite) as w:
        if rec.actuation is not None:
            w.add_file(ACTUATION_FILE, rec.actuation.to_bytes())
        for i in range(frames):
            w.add(rec.depth(i) if rec.has_depth else None, rec.color(i) if rec.has_color else None)
    return Path(dst)
