"""String the stages together, cache their artifacts, write everything atomically.

A stage runs again only when its inputs changed: its cache key is a hash of the
stage's settings, the bytes of its input artifacts, the recording's fingerprint and
the vid2sim version. The key is stored in ``RUN/.cache/<stage>.json`` *after* the
stage's files were renamed into place, so a run killed mid-stage leaves either the
old complete state or no cache record, and ``vid2sim run`` resumes from there.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from vid2sim.datasets.errors import RecordingError
from vid2sim.datasets.recording import Recording, open_recording
from vid2sim.pipeline.artifacts import Articulation, ArtifactError, JointPositions, PoseTracks, Posterior, Segmentation
from vid2sim.datasets.atomic import OutputError, ensure_writable_dir, write_json
from vid2sim.pipeline.config import ConfigError, config_from_json, config_to_json, flat_settings, get_path, set_path

log = logging.getLogger(__name__)

SETTINGS_FILE = "settings.json"
MIN_FRAMES = 10


class StageError(RuntimeError):
    """A stage cannot run (missing input, stage not available in this build...), or failed."""


# Errors whose message already names the file and the problem; anything else a stage raises
# is wrapped into a StageError "STAGE: RECORDING: ExceptionType: message" (a NotImplementedError,
# something the inputs ask for that is not supported, into "STAGE: FIRST INPUT: message").
USER_ERRORS = (RecordingError, ArtifactError, OutputError, StageError, ConfigError, FileExistsError, PermissionError,
               NotImplementedError)


# How a stage's entry point gets its arguments: each name in ``StageSpec.args``/``kwargs`` is one
# of the run's objects below, an artifact file of RUN (loaded by ARTIFACT_LOADERS), or
# "setting:STAGE.FIELD", another stage's setting listed in ``StageSpec.reads``.
RUN_OBJECTS = ("cfg", "rec", "run_dir", "shapes")
ARTIFACT_LOADERS: dict[str, Callable[[Path], Any]] = {
    "segmentation.npz": Segmentation.load,
    "poses.npz": PoseTracks.load,
    "articulation.json": Articulation.load,
    "joint_positions.npz": JointPositions.load,
    Posterior.FILE: Posterior.load,
    Posterior.TRAIN_FILE: Posterior.load,
}
SAVE_TO_RUN = "."  # in ``StageSpec.saves``: the returned object's ``save(RUN)`` writes its own files


@dataclass(frozen=True)
class StageSpec:
    """One stage: its settings class, the files it reads and writes, and how it is called:
    ``vid2sim.pipeline.<name>.<entry>(*args, **kwargs)``, whose return value (one object, or a
    tuple with one object per entry of ``saves``) is saved with ``obj.save(RUN / file)``."""

    name: str
    config_class: str  # attribute of vid2sim.pipeline.<name>
    inputs: tuple[str, ...]  # artifact files in RUN this stage reads
    outputs: tuple[str, ...]  # files in RUN this stage writes
    optional: tuple[str, ...] = ()  # files it reads when present (part of the cache key, not required)
    reads: tuple[str, ...] = ()     # other stages' settings it uses, "stage.field" (part of the cache key)
    args: tuple[str, ...] = ("cfg", "rec", "run_dir")  # positional arguments of the entry point (see RUN_OBJECTS)
    kwargs: tuple[tuple[str, str], ...] = ()  # (keyword, source) arguments of the entry point
    saves: tuple[str, ...] = ()  # file (or SAVE_TO_RUN) per returned object; (): the entry point writes its files
    entry: str = "run"  # the function of the stage module that runs it
    needs_shapes: bool = False  # the recording must have its shape library (shapes.json)

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
    StageSpec("segment", "SegmentConfig", (), ("segmentation.npz",), saves=("segmentation.npz",), needs_shapes=True),
    StageSpec("track", "TrackConfig", ("segmentation.npz",), ("poses.npz",),
              args=("cfg", "rec", "segmentation.npz", "run_dir"), saves=("poses.npz",)),
    StageSpec("articulate", "ArticulateConfig", ("poses.npz",), ("articulation.json", "joint_positions.npz"),
              entry="run_with_actuators", args=("cfg", "poses.npz", "run_dir"), kwargs=(("shapes", "shapes"), ("rec", "rec")),
              saves=("articulation.json", "joint_positions.npz")),
    StageSpec("identify", "IdentifyConfig", ("articulation.json", "joint_positions.npz", "poses.npz"),
              ("params.json", "params_train.json"), reads=("forecast.holdout",), entry="run_with_holdout",
              args=("cfg", "articulation.json", "joint_positions.npz", "poses.npz", "shapes", "run_dir"),
              kwargs=(("rec", "rec"), ("holdout", "setting:forecast.holdout")),
              saves=(Posterior.TRAIN_FILE, Posterior.FILE), needs_shapes=True),
    StageSpec("export", "ExportConfig", ("articulation.json", "params.json", "poses.npz"), ("model.urdf",),
              args=("cfg", "articulation.json", "params.json", "shapes", "poses.npz", "run_dir"), needs_shapes=True),
    StageSpec("forecast", "ForecastConfig", ("poses.npz", "articulation.json", "joint_positions.npz", "params.json",
                                             "params_train.json", "model.urdf"), ("forecast.npz", "forecast.json"),
              args=("cfg", "rec", "poses.npz", "articulation.json", "joint_positions.npz", "params.json", "run_dir"),
              kwargs=(("post_train", Posterior.TRAIN_FILE),), saves=(SAVE_TO_RUN,)),
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
        out[key] = get_path(cfg, name)
    return out


def _argument(source: str, cfg: Any, rec: Recording, run_dir: Path, shared: dict[str, Any]) -> Any:
    """The value of one entry-point argument named by ``source`` (see RUN_OBJECTS)."""
    if source.startswith("setting:"):
        return shared[source.split(":", 1)[1]]
    if source in RUN_OBJECTS:
        return {"cfg": cfg, "rec": rec, "run_dir": run_dir, "shapes": rec.shapes}[source]
    return ARTIFACT_LOADERS[source](run_dir / source)


def _call_stage(spec: StageSpec, cfg: Any, rec: Recording, run_dir: Path, shared: dict[str, Any]) -> None:
    """Load the stage's inputs, run it, and save its artifacts atomically (as ``spec`` says)."""
    _load_inputs(run_dir, spec)
    if spec.needs_shapes and rec.shapes is None:
        raise RecordingError(rec.path / "shapes.json", "shapes.json is missing; the segment, identify and export "
                                                       "stages need the shape library")
    entry = getattr(spec.module(), spec.entry)
    args = [_argument(a, cfg, rec, run_dir, shared) for a in spec.args]
    kwargs = {k: _argument(a, cfg, rec, run_dir, shared) for k, a in spec.kwargs}
    result = entry(*args, **kwargs)
    results = (result,) if len(spec.saves) == 1 else result
    for obj, f in zip(results if spec.saves else (), spec.saves):
        obj.save(run_dir if f == SAVE_TO_RUN else run_dir / f)
    for f in spec.outputs:
        if not (run_dir / f).exists():
            raise StageError(f"{run_dir / f}: stage '{spec.name}' finished without writing it")


def _call_stage_guarded(spec: StageSpec, cfg: Any, rec: Recording, run_dir: Path, shared: dict[str, Any]) -> None:
    """``_call_stage``, its failures tagged with the stage (``e.stage``) for the one-line error."""
    try:
        _call_stage(spec, cfg, rec, run_dir, shared)
    except NotImplementedError as e:  # what the inputs ask for is not supported: name the stage's first input
        msg = " ".join(str(e).split())
        msg = msg[len(spec.name) + 2:] if msg.startswith(f"{spec.name}: ") else msg
        wrapped = StageError(f"{spec.name}: {run_dir / spec.inputs[0] if spec.inputs else rec.path}: {msg}")
        wrapped.stage = spec.name  # type: ignore[attr-defined]
        raise wrapped from e
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
    # settings by leaf name (pipeline/config.py): grouping settings does not invalidate a cache
    h.update(json.dumps({"stage": spec.name, "config": flat_settings(cfg), "version": _version(),
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
    """Default configs of the available stages, updated from a settings file (nested JSON, as
    ``settings.json``) and ``overrides`` ({stage: {dotted setting path: value}})."""
    base: dict[str, dict] = {}
    if settings_file is not None:
        try:
            base = json.loads(Path(settings_file).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise StageError(f"{settings_file}: cannot read settings ({e})") from None
    for stage, d in (overrides or {}).items():
        for path, value in d.items():
            set_path(base.setdefault(stage, {}), path, value)
    unknown = sorted(set(base) - set(STAGE_BY_NAME))
    if unknown:
        raise StageError(f"{settings_file or 'settings'}: unknown stage(s) {', '.join(unknown)}")
    configs = {}
    for spec in STAGES:
        if not spec.available():
            continue
        cls = getattr(spec.module(), spec.config_class)
        configs[spec.name] = config_from_json(cls, base.get(spec.name, {}), str(settings_file or "settings"), spec.name)
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
