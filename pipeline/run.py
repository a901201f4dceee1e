"""String the stages together, cache their artifacts, write everything atomically.

A stage runs again only when its inputs changed: its cache key is a hash of the
stage's settings, the bytes of its input artifacts, the recording's fingerprint and
the vid2sim version. The key is stored in ``RUN/.cache/<stage>.json`` *after* the
stage's files were renamed into place, so a run killed mid-stage leaves either the
old complete state or no cache record, and ``vid2sim run`` resumes from there.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import time
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from vid2sim.datasets.errors import RecordingError
from vid2sim.datasets.recording import Recording, open_recording
from vid2sim.pipeline.artifacts import Articulation, ArtifactError, JointPositions, PoseTracks, Posterior, Segmentation
from vid2sim.datasets.atomic import OutputError, ensure_writable_dir, write_json

log = logging.getLogger(__name__)

SETTINGS_FILE = "settings.json"
MIN_FRAMES = 10


class StageError(RuntimeError):
    """A stage cannot run (missing input, stage not available in this build...), or failed."""


# Errors whose message already names the file and the problem; anything else a stage raises
# is wrapped into a StageError "STAGE: RECORDING: ExceptionType: message".
USER_ERRORS = (RecordingError, ArtifactError, OutputError, StageError, FileExistsError, PermissionError,
               NotImplementedError)


@dataclass(frozen=True)
class StageSpec:
    name: str
    config_class: str  # attribute of vid2sim.pipeline.<name>
    inputs: tuple[str, ...]  # artifact files in RUN this stage reads
    outputs: tuple[str, ...]  # files in RUN this stage writes
    optional: tuple[str, ...] = ()  # files it reads when present (part of the cache key, not required)
    reads: tuple[str, ...] = ()     # other stages' settings it uses, "stage.field" (part of the cache key)

    @property
    def module_name(self) -> str:
        return f"vid2sim.pipeline.{self.name}"

    def available(self) -> bool:
        return importlib.util.find_spec(self.module_name) is not None

    def module(self):
        return importlib.import_module(self.module_name)

    def default_config(self):
        return getattr(self.module(), self.config_class)()


STAGES: tuple[StageSpec, ...] = (
    StageSpec("segment", "SegmentConfig", (), ("segmentation.npz",)),
    StageSpec("track", "TrackConfig", ("segmentation.npz",), ("poses.npz",)),
    StageSpec("articulate", "ArticulateConfig", ("poses.npz",), ("articulation.json", "joint_positions.npz")),
    StageSpec("identify", "IdentifyConfig", ("articulation.json", "joint_positions.npz", "poses.npz"),
              ("params.json", "params_train.json"), reads=("forecast.holdout",)),
    StageSpec("export", "ExportConfig", ("articulation.json", "params.json", "poses.npz"), ("model.urdf",)),
    StageSpec("forecast", "ForecastConfig", ("poses.npz", "articulation.json", "joint_positions.npz", "params.json",
                                             "params_train.json", "model.urdf"), ("forecast.npz", "forecast.json")),
    # the report shows whatever later stages wrote: a changed artifact must re-make it
    StageSpec("report", "ReportConfig", ("segmentation.npz",), ("report.html",),
              optional=("poses.npz", "articulation.json", "joint_positions.npz", "params.json", "params_train.json",
                        "model.urdf", "forecast.json", "forecast.npz")),
)
STAGE_BY_NAME = {s.name: s for s in STAGES}


def _version() -> str:
    try:
        return importlib.metadata.version("vid2sim")
    except importlib.metadata.PackageNotFoundError:
        return "dev"


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def config_to_json(cfg: Any) -> dict:
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=str))


def config_from_json(cls: type, d: dict, source: str) -> Any:
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - set(names))
    if unknown:
        raise StageError(f"{source}: unknown setting(s) {', '.join(unknown)} for {cls.__name__}; known: {', '.join(names)}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for k, v in d.items():
        default = getattr(cls(), k)
        v = tuple(v) if isinstance(default, tuple) and isinstance(v, list) else v
        if not _fits(v, hints[k]):
            raise StageError(f"{source}: setting {k}={v!r} of {cls.__name__} must be {_type_name(hints[k])}")
        kwargs[k] = v
    try:
        return cls(**kwargs)
    except ValueError as e:    # a setting's own checks (choices, ranges)
        raise StageError(f"{source}: {e}") from e


def _fits(value: Any, hint: Any) -> bool:
    """Whether a JSON-decoded value fits a config field's annotation (an int is a float; a bool
    is neither; unions, tuple[X, ...] and plain classes are checked, anything else is let through)."""
    if hint is Any:
        return True
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return any(_fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    origin = typing.get_origin(hint)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_fits(x, args[0]) for x in value)
        return len(args) == len(value) and all(_fits(x, a) for x, a in zip(value, args))
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _type_name(hint: Any) -> str:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return " or ".join(_type_name(a) for a in typing.get_args(hint))
    if hint is type(None):
        return "null"
    if typing.get_origin(hint) is None and isinstance(hint, type):
        return hint.__name__
    return str(hint)


def _load_inputs(run_dir: Path, spec: StageSpec) -> None:
    missing = [f for f in spec.inputs if not (run_dir / f).exists()]
    if missing:
        raise StageError(f"{run_dir / missing[0]}: missing; stage '{spec.name}' needs {', '.join(spec.inputs)} "
                         f"(run the earlier stages first, e.g. `vid2sim run`)")


def shared_settings(spec: StageSpec, configs: dict[str, Any]) -> dict[str, Any]:
    """The other stages' settings ``spec`` reads ({"stage.field": value}), from ``configs``
    (a stage missing there contributes its default)."""
    out = {}
    for key in spec.reads:
        stage, name = key.split(".", 1)
        cfg = configs.get(stage) if stage in configs else STAGE_BY_NAME[stage].default_config()
        out[key] = getattr(cfg, name)
    return out


def _call_stage(spec: StageSpec, cfg: Any, rec: Recording, run_dir: Path, shared: dict[str, Any]) -> None:
    """Load the stage's inputs, run it, and save its artifacts atomically."""
    mod = spec.module()
    _load_inputs(run_dir, spec)
    p = lambda f: run_dir / f  # noqa: E731
    shapes = rec.shapes
    if spec.name in ("segment", "identify", "export") and shapes is None:
        raise RecordingError(rec.path / "shapes.json", "shapes.json is missing; the segment, identify and export stages need the shape library")
    if spec.name == "segment":
        mod.run(cfg, rec, run_dir).save(p("segmentation.npz"))
    elif spec.name == "track":
        mod.run(cfg, rec, Segmentation.load(p("segmentation.npz")), run_dir).save(p("poses.npz"))
    elif spec.name == "articulate":
        art, jp = mod.run(cfg, PoseTracks.load(p("poses.npz")), run_dir, shapes=shapes)
        from vid2sim.pipeline.identify_push import planar_root   # a pushed part on a floor slides (planar root)

        art, jp = planar_root(art, jp, PoseTracks.load(p("poses.npz")), rec, shapes) or (art, jp)
        jp.save(p("joint_positions.npz"))
        art.save(p("articulation.json"))
    elif spec.name == "identify":
        train, post = mod.run_with_holdout(cfg, Articulation.load(p("articulation.json")),
                                           JointPositions.load(p("joint_positions.npz")), PoseTracks.load(p("poses.npz")),
                                           shapes, run_dir, rec=rec, holdout=shared["forecast.holdout"])
        train.save(p(Posterior.TRAIN_FILE))
        post.save(p(Posterior.FILE))
    elif spec.name == "export":
        mod.run(cfg, Articulation.load(p("articulation.json")), Posterior.load(p("params.json")), shapes,
                PoseTracks.load(p("poses.npz")), run_dir)
    elif spec.name == "forecast":
        fc = mod.run(cfg, rec, PoseTracks.load(p("poses.npz")), Articulation.load(p("articulation.json")),
                     JointPositions.load(p("joint_positions.npz")), Posterior.load(p("params.json")), run_dir,
                     post_train=Posterior.load(p(Posterior.TRAIN_FILE)))
        fc.save(run_dir)
    elif spec.name == "report":
        mod.run(cfg, rec, run_dir)
    else:  # pragma: no cover - STAGES is closed
        raise StageError(f"unknown stage {spec.name}")
    for f in spec.outputs:
        if not (run_dir / f).exists():
            raise StageError(f"{run_dir / f}: stage '{spec.name}' finished without writing it")


def _call_stage_guarded(spec: StageSpec, cfg: Any, rec: Recording, run_dir: Path, shared: dict[str, Any]) -> None:
    """``_call_stage``, its failures tagged with the stage (``e.stage``) for the one-line error."""
    try:
        _call_stage(spec, cfg, rec, run_dir, shared)
    except USER_ERRORS as e:
        e.stage = spec.name  # type: ignore[attr-defined]
        raise
    except Exception as e:  # noqa: BLE001 - a bug or an input no check foresaw: still one line
        msg = " ".join(str(e).split())
        wrapped = StageError(f"{spec.name}: {rec.path}: {type(e).__name__}: {msg}")
        wrapped.stage = spec.name  # type: ignore[attr-defined]
        raise wrapped from e


def cache_key(spec: StageSpec, cfg: Any, rec: Recording, run_dir: Path, shared: dict[str, Any] | None = None) -> str:
    h = hashlib.sha256()
    h.update(json.dumps({"stage": spec.name, "config": config_to_json(cfg), "version": _version(),
                         "recording": rec.fingerprint(), "shared": shared or {}}, sort_keys=True, default=str).encode())
    for f in spec.inputs:
        h.update(f.encode() + _file_digest(run_dir / f).encode())
    for f in spec.optional:
        h.update(f.encode() + (_file_digest(run_dir / f) if (run_dir / f).exists() else "absent").encode())
    return h.hexdigest()


def is_cached(spec: StageSpec, key: str, run_dir: Path) -> bool:
    rec_file = run_dir / ".cache" / f"{spec.name}.json"
    if not rec_file.exists() or not all((run_dir / f).exists() for f in spec.outputs):
        return False
    try:
        stored = json.loads(rec_file.read_text())
    except json.JSONDecodeError:
        return False
    if stored.get("key") != key:
        return False
    # An output edited (or damaged) after the stage wrote it invalidates the cache.
    return all(stored.get("outputs", {}).get(f) == _file_digest(run_dir / f) for f in spec.outputs)


def run_stage(spec: StageSpec, cfg: Any, rec: Recording, run_dir: Path, force: bool = False,
              configs: dict[str, Any] | None = None) -> bool:
    """Run one stage unless cached (``configs``: every stage's settings, for those ``spec.reads``).
    Returns True when it ran."""
    _load_inputs(run_dir, spec)
    shared = shared_settings(spec, configs or {})
    key = cache_key(spec, cfg, rec, run_dir, shared)
    if not force and is_cached(spec, key, run_dir):
        log.info("%s: up to date (cached)", spec.name)
        return False
    t0 = time.perf_counter()
    _call_stage_guarded(spec, cfg, rec, run_dir, shared)
    outputs = {f: _file_digest(run_dir / f) for f in spec.outputs}
    write_json(run_dir / ".cache" / f"{spec.name}.json",
               {"key": key, "outputs": outputs, "seconds": round(time.perf_counter() - t0, 3)})
    return True


def resolve_configs(overrides: dict[str, dict] | None = None, settings_file: Path | None = None) -> dict[str, Any]:
    """Default configs of the available stages, updated from a settings file and overrides."""
    base: dict[str, dict] = {}
    if settings_file is not None:
        try:
            base = json.loads(Path(settings_file).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise StageError(f"{settings_file}: cannot read settings ({e})") from None
    for stage, d in (overrides or {}).items():
        base.setdefault(stage, {}).update(d)
    unknown = sorted(set(base) - set(STAGE_BY_NAME))
    if unknown:
        raise StageError(f"{settings_file or 'settings'}: unknown stage(s) {', '.join(unknown)}")
    configs = {}
    for spec in STAGES:
        if not spec.available():
            continue
        cls = getattr(spec.module(), spec.config_class)
        configs[spec.name] = config_from_json(cls, base.get(spec.name, {}), str(settings_file or "settings"))
    return configs


def run_pipeline(recording: str | Path, run_dir: str | Path, configs: dict[str, Any] | None = None,
                 stages: list[str] | None = None, force: bool = False,
                 on_stage: Callable[[str, str], None] | None = None) -> dict[str, str]:
    """Run the stages in order; returns {stage: 'ran' | 'cached' | 'not available'}.

    Stages missing from this build stop the chain (later stages need their files);
    that is reported, never papered over.
    """
    with open_recording(recording) as rec:
        return _run_stages(rec, Path(run_dir), configs, stages, force, on_stage)


def _run_stages(rec: Recording, run_dir: Path, configs: dict[str, Any] | None, stages: list[str] | None,
                force: bool, on_stage: Callable[[str, str], None] | None) -> dict[str, str]:
    wanted = stages or [s.name for s in STAGES]
    if rec.num_frames < MIN_FRAMES and {"track", "articulate"} & set(wanted):
        raise RecordingError(rec.path, f"has {rec.num_frames} frame(s); the pipeline needs at least {MIN_FRAMES} "
                                       "(joints are inferred from motion)")
    run_dir = ensure_writable_dir(run_dir)
    for stale in run_dir.glob(".*.tmp*"):  # left by a run that was killed mid-write; never read
        stale.unlink()
    configs = configs if configs is not None else resolve_configs()
    write_json(run_dir / SETTINGS_FILE, {name: config_to_json(c) for name, c in configs.items()})
    status: dict[str, str] = {}
    for spec in STAGES:
        if spec.name not in wanted:
            continue
        if spec.name not in configs:
            status[spec.name] = "not available"
            if on_stage:
                on_stage(spec.name, "not available")
            log.warning("stage '%s' is not available in this build; stopping before it", spec.name)
            # The report shows whatever exists, so it still runs when it can.
            report = STAGE_BY_NAME["report"]
            if "report" in wanted and "report" in configs and all((run_dir / f).exists() for f in report.inputs):
                ran = run_stage(report, configs["report"], rec, run_dir, force=force, configs=configs)
                status["report"] = "ran" if ran else "cached"
            break
        if on_stage:
            on_stage(spec.name, "start")
        ran = run_stage(spec, configs[spec.name], rec, run_dir, force=force, configs=configs)
        status[spec.name] = "ran" if ran else "cached"
        if on_stage:
            on_stage(spec.name, status[spec.name])
    return status
