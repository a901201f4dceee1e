"""Typed stage artifacts with save/load to the files named in docs/formats.md §2.

Every ``save`` is atomic and every ``load`` validates, raising ``ArtifactError``
naming the file and the problem (e.g. an artifact edited by hand into an invalid
state). Stages exchange these dataclasses, never plain dicts.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vid2sim.datasets.atomic import write_json, write_npz

JOINT_TYPES = ("revolute", "prismatic", "fixed", "free", "planar")


class ArtifactError(ValueError):
    def __init__(self, path: str | Path, problem: str):
        self.path = Path(path)
        super().__init__(f"{self.path}: {problem}")


def _load_npz(path: Path, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    path = Path(path)
    if not path.exists():
        raise ArtifactError(path, "missing (run the stage that writes it first)")
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in keys if k not in z.files]
            if missing:
                raise ArtifactError(path, f"missing array(s) {', '.join(missing)}")
            return {k: z[k] for k in z.files}
    except ArtifactError:
        raise
    except Exception as e:  # zipfile.BadZipFile, ValueError, OSError...
        raise ArtifactError(path, f"cannot be read as .npz ({type(e).__name__}: {e})") from None


def _load_json(path: Path, keys: tuple[str, ...]) -> dict:
    path = Path(path)
    if not path.exists():
        raise ArtifactError(path, "missing (run the stage that writes it first)")
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ArtifactError(path, f"not valid JSON ({e})") from None
    if not isinstance(d, dict):
        raise ArtifactError(path, "must be a JSON object")
    missing = [k for k in keys if k not in d]
    if missing:
        raise ArtifactError(path, f"missing key(s) {', '.join(missing)}")
    return d


def _strs(a) -> list[str]:
    return [str(x) for x in np.asarray(a).tolist()]


@dataclass(frozen=True)
class Segmentation:
    """masks: (K, H, W) uint8 for frame ``frame``; one library shape name and score per instance.
    fit_masks: (K, H, W) uint8 or None: where segment refined the masks' boundaries on the colour
    image (``segment_refine``), the masks as the depth segmentation drew them, which track fits its
    start poses, background and colours to; None where ``masks`` are those."""

    masks: np.ndarray
    frame: int
    shape_names: list[str]
    scores: np.ndarray
    fit_masks: np.ndarray | None = None
    FILE = "segmentation.npz"

    def __post_init__(self):
        k = len(self.shape_names)
        if self.masks.ndim != 3 or self.masks.shape[0] != k or len(self.scores) != k:
            raise ValueError(f"segmentation: {self.masks.shape} masks, {k} names, {len(self.scores)} scores")
        if self.fit_masks is not None and self.fit_masks.shape != self.masks.shape:
            raise ValueError(f"segmentation: {self.fit_masks.shape} fit masks for {self.masks.shape} masks")

    def for_fits(self) -> "Segmentation":
        """This segmentation with ``fit_masks`` as its masks (itself where there are none)."""
        if self.fit_masks is None:
            return self
        return Segmentation(self.fit_masks, self.frame, self.shape_names, self.scores)

    def save(self, path: str | Path) -> None:
        extra = {} if self.fit_masks is None else {"fit_masks": self.fit_masks.astype(np.uint8)}
        write_npz(path, masks=self.masks.astype(np.uint8), frame=np.int64(self.frame),
                  shape_names=np.array(self.shape_names, dtype=str), scores=np.asarray(self.scores, np.float64),
                  **extra)

    @staticmethod
    def load(path: str | Path) -> "Segmentation":
        z = _load_npz(Path(path), ("masks", "frame", "shape_names", "scores"))
        fit = z["fit_masks"].astype(np.uint8) if "fit_masks" in z else None
        try:
            return Segmentation(z["masks"].astype(np.uint8), int(z["frame"]), _strs(z["shape_names"]), z["scores"],
                                fit)
        except ValueError as e:
            raise ArtifactError(path, str(e)) from None


@dataclass(frozen=True)
class PoseTracks:
    """world_from_body: (T, M, 4, 4); residual: (T,) per-frame fit residual; lost: (T, M) bool;
    depth_noise_k: the k of the depth noise sigma = k z^2 the tracker used (None: not recorded)."""

    world_from_body: np.ndarray
    body_names: list[str]
    shape_names: list[str]
    residual: np.ndarray
    fps: float = 30.0
    lost: np.ndarray | None = None
    depth_noise_k: float | None = None
    FILE = "poses.npz"

    @staticmethod
    def from_truth(truth: dict, world_from_body: np.ndarray, fps: float) -> "PoseTracks":
        """Error-free tracks of a synthetic recording: its ``truth.json`` dict and true poses
        (T, M, 4, 4) in truth body order (``truth_poses.npz``); zero residual, nothing lost."""
        W = np.asarray(world_from_body, float)
        return PoseTracks(W, [b["name"] for b in truth["bodies"]], [b["shape"] for b in truth["bodies"]],
                          np.zeros(len(W)), fps)

    def __post_init__(self):
        T = self.world_from_body
        if T.ndim != 4 or T.shape[2:] != (4, 4) or T.shape[1] != len(self.body_names) or len(self.shape_names) != T.shape[1]:
            raise ValueError(f"poses: world_from_body {T.shape} vs {len(self.body_names)} body names")
        if len(self.residual) != T.shape[0]:
            raise ValueError(f"poses: residual has {len(self.residual)} entries for {T.shape[0]} frames")
        if not np.all(np.isfinite(T)):
            raise ValueError("poses: world_from_body has non-finite entries")

    @property
    def num_frames(self) -> int:
        return self.world_from_body.shape[0]

    def head(self, frames: int) -> "PoseTracks":
        """The tracks of the first ``frames`` frames."""
        lost = None if self.lost is None else self.lost[:frames]
        return PoseTracks(self.world_from_body[:frames], list(self.body_names), list(self.shape_names),
                          self.residual[:frames], self.fps, lost, self.depth_noise_k)

    def save(self, path: str | Path) -> None:
        lost = np.zeros(self.world_from_body.shape[:2], bool) if self.lost is None else self.lost
        extra = {} if self.depth_noise_k is None else {"depth_noise_k": np.float64(self.depth_noise_k)}
        write_npz(path, world_from_body=self.world_from_body.astype(np.float64), body_names=np.array(self.body_names, dtype=str),
                  shape_names=np.array(self.shape_names, dtype=str), residual=np.asarray(self.residual, np.float64),
                  fps=np.float64(self.fps), lost=lost.astype(bool), **extra)

    @staticmethod
    def load(path: str | Path) -> "PoseTracks":
        z = _load_npz(Path(path), ("world_from_body", "body_names", "shape_names", "residual"))
        try:
            return PoseTracks(z["world_from_body"].astype(np.float64), _strs(z["body_names"]), _strs(z["shape_names"]),
                              z["residual"], float(z.get("fps", 30.0)), z.get("lost"),
                              None if z.get("depth_noise_k") is None else float(z["depth_noise_k"]))
        except ValueError as e:
            raise ArtifactError(path, str(e)) from None


@dataclass(frozen=True)
class Joint:
    """One joint in world coordinates at frame 0 (axis unit vector, pivot a point on the axis)."""

    name: str
    type: str
    parent: str
    child: str
    axis: tuple[float, float, float] = (0.0, 0.0, 1.0)
    pivot: tuple[float, float, float] = (0.0, 0.0, 0.0)
    cost: float = 0.0

    def to_json(self) -> dict:
        return {"name": self.name, "type": self.type, "parent": self.parent, "child": self.child,
                "axis": [float(a) for a in self.axis], "pivot": [float(p) for p in self.pivot],
                "cost": float(self.cost) if math.isfinite(self.cost) else None}


@dataclass(frozen=True)
class Articulation:
    """The kinematic forest: bodies and joints (each body is the child of exactly one joint)."""

    bodies: list[str]
    joints: list[Joint]
    FILE = "articulation.json"

    def __post_init__(self):
        names = set(self.bodies)
        seen_children: set[str] = set()
        for j in self.joints:
            if j.type not in JOINT_TYPES:
                raise ValueError(f"joint {j.name!r}: unknown type {j.type!r} (one of {', '.join(JOINT_TYPES)})")
            if j.child not in names:
                raise ValueError(f"joint {j.name!r}: child {j.child!r} is not a body")
            if j.parent != "world" and j.parent not in names:
                raise ValueError(f"joint {j.name!r}: parent {j.parent!r} is neither 'world' nor a body")
            if j.child in seen_children:
                raise ValueError(f"body {j.child!r} is the child of two joints")
            seen_children.add(j.child)
            a = np.asarray(j.axis, float)
            if a.shape != (3,) or not np.all(np.isfinite(a)) or abs(np.linalg.norm(a) - 1) > 1e-3:
                raise ValueError(f"joint {j.name!r}: axis must be a finite unit 3-vector, got {list(j.axis)}")
            if len(j.pivot) != 3 or not np.all(np.isfinite(j.pivot)):
                raise ValueError(f"joint {j.name!r}: pivot must be a finite 3-vector")

    def joint_of(self, body: str) -> Joint | None:
        return next((j for j in self.joints if j.child == body), None)

    @staticmethod
    def from_truth(truth: dict) -> "Articulation":
        """The true articulation of a synthetic recording from its ``truth.json`` dict
        (docs/formats.md): what a perfect articulate stage would find."""
        joints = [Joint(j["name"], j["type"], j["parent"], j["child"], tuple(j["axis"]), tuple(j["pivot"]))
                  for j in truth["joints"]]
        return Articulation([b["name"] for b in truth["bodies"]], joints)

    def save(self, path: str | Path) -> None:
        write_json(path, {"bodies": list(self.bodies), "joints": [j.to_json() for j in self.joints]})

    @staticmethod
    def load(path: str | Path) -> "Articulation":
        d = _load_json(Path(path), ("bodies", "joints"))
        try:
            joints = [Joint(j["name"], j["type"], j["parent"], j["child"], tuple(j["axis"]), tuple(j["pivot"]),
                            float("inf") if j.get("cost") is None else float(j["cost"])) for j in d["joints"]]
            return Articulation(list(d["bodies"]), joints)
        except (KeyError, TypeError, ValueError) as e:
            raise ArtifactError(path, f"invalid articulation ({type(e).__name__}: {e})") from None


@dataclass(frozen=True)
class JointPositions:
    """q: (T, dofs) in the URDF's joint coordinates; root_pose: (T, 7) xyz+xyzw for floating roots."""

    q: np.ndarray
    names: list[str]
    root_pose: np.ndarray | None = None
    FILE = "joint_positions.npz"

    def __post_init__(self):
        if self.q.ndim != 2 or self.q.shape[1] != len(self.names):
            raise ValueError(f"joint positions: q {self.q.shape} vs {len(self.names)} names")
        if not np.all(np.isfinite(self.q)):
            raise ValueError("joint positions: q has non-finite entries")
        if self.root_pose is not None and self.root_pose.shape != (self.q.shape[0], 7):
            raise ValueError(f"joint positions: root_pose {self.root_pose.shape}, expected ({self.q.shape[0]}, 7)")

    def save(self, path: str | Path) -> None:
        arrays = {"q": self.q.astype(np.float64), "names": np.array(self.names, dtype=str)}
        if self.root_pose is not None:
            arrays["root_pose"] = self.root_pose.astype(np.float64)
        write_npz(path, **arrays)

    @staticmethod
    def load(path: str | Path) -> "JointPositions":
        z = _load_npz(Path(path), ("q", "names"))
        try:
            return JointPositions(z["q"].astype(np.float64), _strs(z["names"]), z.get("root_pose"))
        except ValueError as e:
            raise ArtifactError(path, str(e)) from None


@dataclass(frozen=True)
class Posterior:
    """The identify stage's result: particles (N, P) over parameters ``names`` within ``limits``.

    ``identifiable`` (pipeline/identifiability.py): the scale anchor, each identifiable
    combination's estimate, median and 50 %/90 % intervals, and the parameters that end at a
    limit with the reason; empty where nothing was identified."""

    names: list[str]
    limits: dict[str, tuple[float, float]]
    estimate: dict[str, float]
    particles: np.ndarray
    method: str
    log_likelihood: float
    extra: dict = field(default_factory=dict)
    identifiable: dict = field(default_factory=dict)
    FILE = "params.json"
    TRAIN_FILE = "params_train.json"  # the posterior fitted on the frames before the held-back ones

    def __post_init__(self):
        if self.particles.ndim != 2 or self.particles.shape[1] != len(self.names):
            raise ValueError(f"params: particles {self.particles.shape} vs {len(self.names)} names")
        for n in self.names:
            if n not in self.limits or n not in self.estimate:
                raise ValueError(f"params: {n!r} lacks limits or an estimate")
            lo, hi = self.limits[n]
            if not (lo <= hi) or not math.isfinite(self.estimate[n]):
                raise ValueError(f"params: {n!r} has limits [{lo}, {hi}] / estimate {self.estimate[n]}")

    def save(self, path: str | Path) -> None:
        write_json(path, {"names": self.names, "limits": {k: list(v) for k, v in self.limits.items()},
                          "estimate": self.estimate, "particles": self.particles.tolist(), "method": self.method,
                          "log_likelihood": float(self.log_likelihood),
                          **({"identifiable": self.identifiable} if self.identifiable else {}),
                          **({"extra": self.extra} if self.extra else {})})

    @staticmethod
    def load(path: str | Path) -> "Posterior":
        d = _load_json(Path(path), ("names", "limits", "estimate", "particles", "method", "log_likelihood"))
        try:
            return Posterior(list(d["names"]), {k: (float(v[0]), float(v[1])) for k, v in d["limits"].items()},
                             {k: float(v) for k, v in d["estimate"].items()}, np.asarray(d["particles"], float).reshape(-1, len(d["names"])),
                             str(d["method"]), float(d["log_likelihood"]), d.get("extra", {}),
                             _identifiable(d.get("identifiable", {})))
        except (KeyError, TypeError, ValueError) as e:
            raise ArtifactError(path, f"invalid parameters ({type(e).__name__}: {e})") from None


def _identifiable(d) -> dict:
    """params.json's ``identifiable`` dict, checked for the keys the report reads."""
    if not isinstance(d, dict):
        raise TypeError(f"identifiable must be an object, got {type(d).__name__}")
    for k, v in d.get("quantities", {}).items():
        if not all(len(v.get(f"interval{p}", ())) == 2 for p in (50, 90)) or "estimate" not in v:
            raise ValueError(f"identifiable quantity {k!r} lacks its estimate or 50/90 % intervals")
    return d
