"""Known actuators of a recording: ``actuation.npz`` (docs/formats.md §1.2).

A robot that pushes or drives the mechanism knows where its tool was (its own joint
encoders), so the recording carries the tool's pose per frame and its shape from
``shapes.json``, and optionally known generalised forces at named joints. This module
reads, validates and writes that file; it does not render the actuator nor simulate
its contacts (``pipeline/actuators.py`` and ``pipeline/identify_push.py`` do).
"""
from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vid2sim.datasets.errors import RecordingError
from vid2sim.datasets.shapes import Shape

FILE = "actuation.npz"
REQUIRED = ("names", "shapes", "world_from_actuator")
OPTIONAL = ("joint_effort", "effort_joints")


@dataclass(frozen=True)
class Actuation:
    """names, shapes: (A,) actuator names and their shape names in ``shapes.json``;
    world_from_actuator: (T, A, 4, 4) float64 world poses (m), T >= the recording's frames; A may be 0
    when only joint efforts are known
    (rows past its last frame are the planned motion); joint_effort: (T, D) N m or N at the
    joints ``effort_joints`` (D,), or None."""

    names: tuple[str, ...]
    shapes: tuple[str, ...]
    world_from_actuator: np.ndarray
    joint_effort: np.ndarray | None = None
    effort_joints: tuple[str, ...] = ()

    @property
    def num_frames(self) -> int:
        return int(self.world_from_actuator.shape[0])

    def poses(self, i: int) -> np.ndarray:
        """(A, 4, 4) actuator poses of frame i (the last row past the end: the tool holds still)."""
        return self.world_from_actuator[min(i, self.num_frames - 1)]

    def positions(self, a: int = 0) -> np.ndarray:
        """(T, 3) world position of actuator ``a``'s shape centre in every row."""
        return self.world_from_actuator[:, a, :3, 3]

    def shape_of(self, library: dict[str, Shape], a: int = 0) -> Shape:
        return library[self.shapes[a]]

    def to_bytes(self) -> bytes:
        """The ``actuation.npz`` file's content (compressed npz)."""
        arrays = dict(names=np.array(self.names, dtype=str), shapes=np.array(self.shapes, dtype=str),
                      world_from_actuator=np.asarray(self.world_from_actuator, np.float64))
        if self.joint_effort is not None:
            arrays["joint_effort"] = np.asarray(self.joint_effort, np.float64)
            arrays["effort_joints"] = np.array(self.effort_joints, dtype=str)
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        return buf.getvalue()

    def save(self, path: str | Path) -> Path:
        """Write atomically to ``path`` (a file name or a recording folder)."""
        from vid2sim.datasets.atomic import write_bytes

        path = Path(path)
        path = path / FILE if path.is_dir() else path
        write_bytes(path, self.to_bytes())
        return path


def _strings(path: Path, z, key: str) -> tuple[str, ...]:
    a = z[key]
    if a.ndim != 1 or a.dtype.kind not in "US":
        raise RecordingError(path, f"{key} must be a 1-D array of strings, got {a.dtype} {a.shape}")
    return tuple(str(s) for s in a)


def validate(path: Path, act: Actuation, shapes: dict[str, Shape] | None, num_frames: int | None) -> None:
    """RecordingError naming ``path`` when ``act`` breaks the contract of docs/formats.md §1.2."""
    A = len(act.names)
    if A == 0 and act.joint_effort is None:
        raise RecordingError(path, "names is empty and there is no joint_effort (an actuation file lists at least "
                                   "one actuator or a known joint effort)")
    if len(set(act.names)) != A:
        raise RecordingError(path, f"actuator names repeat: {list(act.names)}")
    if len(act.shapes) != A:
        raise RecordingError(path, f"shapes has {len(act.shapes)} entries but names has {A}")
    W = act.world_from_actuator
    if W.ndim != 4 or W.shape[1:] != (A, 4, 4):
        raise RecordingError(path, f"world_from_actuator must be [T, {A}, 4, 4], got {list(W.shape)}")
    if not np.all(np.isfinite(W)):
        raise RecordingError(path, "world_from_actuator has non-finite values")
    R = W[..., :3, :3]
    err = np.abs(R @ np.swapaxes(R, -1, -2) - np.eye(3)).max(axis=(-1, -2))
    bad = np.argwhere((err > 1e-4) | (np.linalg.det(R) < 0) | (np.abs(W[..., 3, :] - [0, 0, 0, 1]).max(-1) > 1e-9))
    if len(bad):
        t, a = bad[0]
        raise RecordingError(path, f"world_from_actuator[{t}, {a}] is not a rigid transform "
                                   f"({len(bad)} such rows; rotation must be orthonormal, det +1, last row 0 0 0 1)")
    if num_frames is not None and W.shape[0] < num_frames:
        raise RecordingError(path, f"world_from_actuator has {W.shape[0]} rows but the recording has {num_frames} "
                                   "frames (one pose per frame at least)")
    if shapes is not None:
        missing = sorted({s for s in act.shapes if s not in shapes})
        if missing:
            raise RecordingError(path, f"actuator shape(s) {', '.join(missing)} are not in shapes.json "
                                       f"(it lists {', '.join(sorted(shapes))})")
    if act.joint_effort is not None:
        E = act.joint_effort
        D = len(act.effort_joints)
        if E.ndim != 2 or E.shape != (W.shape[0], D):
            raise RecordingError(path, f"joint_effort must be [T={W.shape[0]}, D={D}] (D = len(effort_joints)), "
                                       f"got {list(E.shape)}")
        if not np.all(np.isfinite(E)):
            raise RecordingError(path, "joint_effort has non-finite values")


def load_actuation(path: str | Path, shapes: dict[str, Shape] | None = None,
                   num_frames: int | None = None) -> Actuation:
    """Read and validate ``actuation.npz`` (``path``: the file or its recording folder).

    shapes: the recording's library, to check every actuator's shape is in it;
    num_frames: the recording's frame count, to check a pose per frame."""
    path = Path(path)
    path = path / FILE if path.is_dir() else path
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in REQUIRED if k not in z.files]
            if missing:
                raise RecordingError(path, f"missing key(s) {', '.join(missing)} (needs {', '.join(REQUIRED)})")
            unknown = sorted(set(z.files) - set(REQUIRED) - set(OPTIONAL))
            if unknown:
                raise RecordingError(path, f"unknown key(s) {', '.join(unknown)}")
            if ("joint_effort" in z.files) != ("effort_joints" in z.files):
                raise RecordingError(path, "joint_effort and effort_joints come together (one without the other)")
            names, shp = _strings(path, z, "names"), _strings(path, z, "shapes")
            W = z["world_from_actuator"]
            if W.dtype.kind not in "fiu":
                raise RecordingError(path, f"world_from_actuator must be numbers, got {W.dtype}")
            effort = z["joint_effort"].astype(np.float64) if "joint_effort" in z.files else None
            ej = _strings(path, z, "effort_joints") if "effort_joints" in z.files else ()
    except FileNotFoundError:
        raise RecordingError(path, "actuation.npz is missing") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        if isinstance(e, RecordingError):
            raise
        raise RecordingError(path, f"cannot be read as an npz archive ({e})") from None
    act = Actuation(names, shp, W.astype(np.float64), effort, ej)
    validate(path, act, shapes, num_frames)
    return act
