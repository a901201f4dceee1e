"""The ``vid2sim`` command line.

Stage subcommands are generated from each stage's frozen ``Config`` dataclass, so
every setting has exactly one documented default, in the stage module.
"""
from __future__ import annotations

import atexit
import dataclasses
import inspect
import json
import logging
import io
import os
import signal
import sys
import textwrap
import tokenize
import traceback
import types
import typing
from pathlib import Path
from typing import Any, Optional

import rich.markup
import typer
from rich.console import Console
from rich.logging import RichHandler

from vid2sim.pipeline import run as runner
from vid2sim.pipeline.config import is_group
from vid2sim.pipeline.logs import RepeatFilter

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Turn a video of a moving mechanism into a simulation of it (a URDF digital twin).")
err = Console(stderr=True)
USER_ERRORS = runner.USER_ERRORS  # their messages name the file and the problem: printed as they are
_DEBUG = {"on": False}  # set by --debug: show the traceback of a failure as well
_REPEATS: dict[str, RepeatFilter | None] = {"filter": None}  # the log handler's filter, without --verbose


@app.callback()
def _main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging."),
          debug: bool = typer.Option(False, "--debug", help="On failure, print the Python traceback too."),
          threads: int = typer.Option(0, "--threads", min=0,
                                      help="CPU threads for torch (0: its default, every core). Use 1 when "
                                           "several vid2sim processes share the machine: two processes of 2 "
                                           "threads on 2 cores tracked at 5 s/frame instead of 0.1.")) -> None:
    _DEBUG["on"] = debug
    handler = RichHandler(console=err, show_path=False, show_time=False)
    if not verbose:  # a warning met once per frame is shown once, the repeats counted (pipeline/logs)
        _REPEATS["filter"] = RepeatFilter()
        handler.addFilter(_REPEATS["filter"])
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(message)s", handlers=[handler])
    if threads:
        import torch

        torch.set_num_threads(threads)


def parse_sets(sets: list[str] | None) -> dict[str, dict]:
    """``--set stage.key=value`` -> {stage: {key: value}}, ``key`` a setting's path in its stage
    (``gates.gate_m``); the value is parsed as JSON when it parses, else kept as a string."""
    out: dict[str, dict] = {}
    for s in sets or []:
        if "=" not in s or "." not in s.split("=", 1)[0]:
            raise runner.StageError(f"--set {s!r}: expected STAGE.KEY=VALUE, e.g. track.iterations=40")
        k, v = s.split("=", 1)
        stage, key = k.split(".", 1)
        out.setdefault(stage, {})[key] = _json_or_text(v)
    return out


def _json_or_text(v: str) -> Any:
    """A setting's value from the command line: parsed as JSON when it parses, else the text."""
    try:
        return json.loads(v)
    except json.JSONDecodeError:
        return v


@app.command()
def synth(name: str = typer.Argument(..., help="Mechanism: cartpole, double_pendulum, pendulum3, rott, tree5, cabinet, thrown, pushed; "
                                                     "known actuators: pushed_box, pushed_cylinder, driven_pendulum."),
          out: Path = typer.Option(..., "--out", help="Recording folder to write."),
          seed: int = typer.Option(0, help="Random seed (initial state, noise; with --scene random also the scene)."),
          frames: int = typer.Option(120, help="Number of frames."),
          fps: float = typer.Option(30.0, help="Frames per second."),
          size: str = typer.Option("320x240", help="Image size WxH (--scene default only; a random scene draws it)."),
          noise: Optional[str] = typer.Option(None, help="Sensor model: none | realistic (default none); with "
                                                         "--scene random also random (the default: the seed picks)."),
          scene: str = typer.Option("default", help="default: the fitted close-up camera, floor and wall; random: "
                                                    "size, framing, background, distractors, colours, light, sensor "
                                                    "and renderer drawn from the seed (truth.json 'scene')."),
          overwrite: bool = typer.Option(False, help="Replace OUT if it exists.")) -> None:
    """Make a synthetic recording with ground truth (PyBullet physics, independent renderer)."""
    from vid2sim.datasets.synthetic import MECHANISMS, PUSH_MECHANISMS, SCENE_NOISE, SCENES, make_recording
    from vid2sim.datasets.synthetic.sensor import NOISE_MODES

    if name not in MECHANISMS + PUSH_MECHANISMS:
        raise runner.StageError(f"unknown mechanism {name!r}; choose one of {', '.join(MECHANISMS + PUSH_MECHANISMS)}")
    if scene not in SCENES:
        raise runner.StageError(f"--scene {scene!r}: choose one of {', '.join(SCENES)}")
    modes = NOISE_MODES if scene == "default" else SCENE_NOISE
    if noise is not None and noise not in modes:
        raise runner.StageError(f"--noise {noise!r}: with --scene {scene} choose one of {', '.join(modes)}")
    try:
        w, h = (int(x) for x in size.lower().split("x"))
    except ValueError:
        raise runner.StageError(f"--size {size!r}: expected WxH, e.g. 320x240") from None
    path = make_recording(name, out, seed=seed, frames=frames, fps=fps, size=(w, h), noise=noise, overwrite=overwrite,
                          scene=scene)
    err.print(f"[green]wrote[/] {path}")


@app.command()
def convert(src: Path = typer.Argument(..., help="RealSense .bag/.db3 or video file."),
            dst: Path = typer.Argument(..., help="Recording folder to write."),
            overwrite: bool = typer.Option(False, help="Replace DST if it exists.")) -> None:
    """Convert a bag or video into the recording folder format."""
    from vid2sim.datasets.convert import convert as do_convert

    err.print(f"[green]wrote[/] {do_convert(src, dst, overwrite=overwrite)}")


@app.command("inspect")
def inspect_cmd(rec: Path = typer.Argument(..., help="Recording (folder, bag or video)."),
                sheet: Optional[Path] = typer.Option(None, help="Contact-sheet PNG (default: ./<name>_contact.png)."),
                n: int = typer.Option(12, help="Frames on the contact sheet."),
                stride: int = typer.Option(1, help="Look at every stride-th frame for the statistics."),
                as_json: bool = typer.Option(False, "--json", help="Print the statistics as JSON.")) -> None:
    """Frame count, sizes, depth range and holes; writes a contact-sheet PNG."""
    from vid2sim.datasets.inspect import contact_sheet, format_summary, inspect as do_inspect
    from vid2sim.datasets.recording import open_recording

    with open_recording(rec) as r:
        info = do_inspect(r, stride=stride)
        print(json.dumps(info, indent=2, default=str) if as_json else format_summary(info))
        sheet = sheet or Path.cwd() / f"{Path(rec).stem}_contact.png"
        contact_sheet(r, sheet, n=n)
    err.print(f"[green]contact sheet[/] {sheet}")


@app.command("train-segmenter")
def train_segmenter_cmd(images: Path = typer.Option(..., help="Folder of 16-bit depth PNGs (+ camera.json) or RGB frames."),
                        masks: Path = typer.Option(..., help="Folder of instance-id PNGs + labels.json."),
                        out: Path = typer.Option(..., "--out", help="Checkpoint to write (.pt)."),
                        checkpoint: Optional[Path] = typer.Option(None, help="Start from this checkpoint (default: the shipped one)."),
                        iters: int = typer.Option(300, help="Training iterations."),
                        lr: float = typer.Option(2e-4, help="Learning rate."),
                        batch: int = typer.Option(2, help="Images per iteration.")) -> None:
    """Fine-tune the learned segmenter on your own labelled frames."""
    from vid2sim.models.segmenter.train import train_segmenter

    path = train_segmenter(images, masks, out, checkpoint=checkpoint, iters=iters, lr=lr, batch=batch)
    err.print(f"[green]wrote[/] {path}  (use it with --set segment.method=learned --set segment.checkpoint={path})")


@app.command()
def batch(recs: list[Path] = typer.Argument(..., help="Recordings (folders, bags or videos)."),
          out: Path = typer.Option(..., "--out", help="Folder for one run folder per recording and the summary."),
          ray_address: Optional[str] = typer.Option(None, help="Existing Ray cluster address (default: start a local one)."),
          set_: Optional[list[str]] = typer.Option(None, "--set", help="Override a setting: STAGE.KEY=VALUE."),
          num_cpus: Optional[int] = typer.Option(None, help="CPUs of the local Ray cluster (default: all).")) -> None:
    """Process many recordings on Ray; a failed recording does not stop the others."""
    from vid2sim.pipeline.batch import run_batch

    rows = run_batch(recs, out, ray_address=ray_address, overrides=parse_sets(set_), num_cpus=num_cpus)
    for r in rows:
        colour = {"ok": "green", "partial": "yellow"}.get(r["status"], "red")
        err.print(f"[{colour}]{r['status']:>8}[/] {r['recording']}  {r['error']}", highlight=False)
    print(out / "summary.html")
    failed = [r for r in rows if r["status"] == "failed"]
    if failed:
        e = runner.StageError(f"{out / 'summary.html'}: {len(failed)} of {len(rows)} recordings failed "
                              f"(first: {failed[0]['recording']}: {failed[0]['error']})")
        e.stage = "batch"
        raise e


def _progress_printer():
    def on_stage(name: str, what: str) -> None:
        colour = {"start": "cyan", "ran": "green", "cached": "blue", "not available": "yellow"}[what]
        err.print(f"[{colour}]{name:>10}[/] {what if what != 'start' else '...'}")
    return on_stage


@app.command("run")
def run_cmd(rec: Path = typer.Argument(..., help="Recording (folder, bag or video)."),
            out: Path = typer.Option(..., "--out", help="Run folder."),
            settings: Optional[Path] = typer.Option(None, help="Settings JSON (as saved in a run's settings.json)."),
            set_: Optional[list[str]] = typer.Option(None, "--set", help="Override a setting: STAGE.KEY=VALUE (repeatable)."),
            force: bool = typer.Option(False, help="Re-run stages even when cached.")) -> None:
    """Run every stage in order, re-running only what changed."""
    configs = runner.resolve_configs(parse_sets(set_), settings)
    status = runner.run_pipeline(rec, out, configs, force=force, on_stage=_progress_printer())
    err.print(f"[bold]run folder[/] {out}")
    if (out / "report.html").exists():
        print(out / "report.html")
    if "not available" in status.values():
        missing = [k for k, v in status.items() if v == "not available"]
        err.print(f"[yellow]stopped before {', '.join(missing)}: not implemented in this build (see README)[/]")


def field_docs(cls: type) -> dict[str, str]:
    """Each dataclass field's ``#`` comment in the source of ``cls``, joined into one line.

    A field's comment is the block of comment lines directly above it (at the field's own
    indentation, no blank line between), then its trailing comment and the comment-only lines
    below it that are indented further than the field (continuation lines). Fields with no
    comment are absent. The comments in the stage modules are the one home of this text.
    """
    src = textwrap.dedent(inspect.getsource(cls))
    lines: dict[int, dict] = {}  # line number -> {"comment": (col, text), "code": [tokens]}
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        row = lines.setdefault(tok.start[0], {"comment": None, "code": []})
        if tok.type == tokenize.COMMENT:
            row["comment"] = (tok.start[1], tok.string.lstrip("#").strip())
        else:
            row["code"].append(tok)
    names = {f.name for f in dataclasses.fields(cls)}
    head = min(n for n, r in lines.items() if r["code"] and r["code"][0].string == "class")
    body_col = min((r["code"][0].start[1] for n, r in lines.items() if n > head and r["code"]), default=4)
    docs: dict[str, list[str]] = {}
    above: list[str] = []  # comment lines waiting for the field below them
    last: str | None = None  # the field whose continuation lines may follow
    for n in range(head + 1, len(src.splitlines()) + 1):
        row = lines.get(n)
        if row is None:  # blank line
            above, last = [], None
            continue
        code, comment = row["code"], row["comment"]
        if not code:
            col, text = comment
            if col > body_col and last is not None:
                docs[last].append(text)
            else:
                above.append(text)
                last = None
            continue
        first = code[0]
        if (first.start[1] == body_col and first.type == tokenize.NAME and first.string in names
                and len(code) > 1 and code[1].string == ":"):
            docs[first.string] = above + ([comment[1]] if comment else [])
            last = first.string
        elif first.start[1] == body_col:
            last = None  # another statement of the class body (docstring, method)
        above = []
    return {k: " ".join(v) for k, v in docs.items() if v}


def _scalar(hint: Any) -> type | None:
    """The option type of a setting: int, float, str or bool, also when it may be null (None)."""
    if hint in (int, float, str, bool):
        return hint
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    return args[0] if optional and len(args) == 1 and args[0] in (int, float, str, bool) else None


JSON_OPTION = "__json"  # suffix of the parameter name of an option whose value is parsed as JSON


def _setting_options(cls: type, group: str = "", panel: str | None = None) -> list[inspect.Parameter]:
    """One ``--NAME`` option per setting of ``cls`` (``--GROUP.NAME`` inside a group, shown under
    the group's own heading in --help); a setting that is not a scalar (a tuple, a dict, a union such
    as bool | str) takes its value as JSON, as ``--set`` does."""
    hints, docs, default = typing.get_type_hints(cls), field_docs(cls), cls()
    params = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if is_group(hint):
            title = f"{group}{f.name}: {docs.get(f.name, '')}".rstrip(": ")
            params += _setting_options(hint, f"{group}{f.name}.", title)
            continue
        t = _scalar(hint)
        name = f.name.replace('_', '-')
        opt = f"--{group}{name}" if t is not bool else f"--{group}{name}/--{group}no-{name}"  # a switch: on/off
        value = getattr(default, f.name)
        help_ = f"{docs.get(f.name, '')} (default {value!r})".lstrip()
        param = f"{group}{f.name}".replace(".", "__")
        if t is None:
            help_ = f"{docs.get(f.name, '')} (JSON; default {json.dumps(value, default=str)})".lstrip()
            t, param = str, param + JSON_OPTION
        params.append(inspect.Parameter(param, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[t],
                                        default=typer.Option(None, opt, help=help_, rich_help_panel=panel)))
    return params


def _stage_command(spec: runner.StageSpec) -> None:
    """Register ``vid2sim <stage> REC --out RUN --<setting> ...`` built from the stage's Config."""

    def command(**kwargs: Any) -> None:
        rec, out, force, sets = kwargs.pop("rec"), kwargs.pop("out"), kwargs.pop("force"), kwargs.pop("set_")
        overrides = parse_sets(sets)
        overrides.setdefault(spec.name, {}).update(
            {k.removesuffix(JSON_OPTION).replace("__", "."): _json_or_text(v) if k.endswith(JSON_OPTION) else v
             for k, v in kwargs.items() if v is not None})
        configs = runner.resolve_configs(overrides)
        runner.run_pipeline(rec, out, configs, stages=[spec.name], force=force, on_stage=_progress_printer())

    params = [
        inspect.Parameter("rec", inspect.Parameter.KEYWORD_ONLY, annotation=Path,
                          default=typer.Argument(..., help="Recording (folder, bag or video).")),
        inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, annotation=Path,
                          default=typer.Option(..., "--out", help="Run folder (inputs from earlier stages are read here).")),
        inspect.Parameter("force", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                          default=typer.Option(False, help="Re-run even when cached.")),
        inspect.Parameter("set_", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[list[str]],
                          default=typer.Option(None, "--set", help="Override a setting: STAGE.KEY=VALUE.")),
    ]
    doc = "Run only this stage."
    if spec.available():
        mod = spec.module()
        doc = (mod.__doc__ or doc).strip().splitlines()[0]
        params += _setting_options(getattr(mod, spec.config_class))
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__doc__ = doc
    app.command(spec.name, help=doc)(command)


for _spec in runner.STAGES:
    _stage_command(_spec)


def _command_and_target(argv: list[str]) -> tuple[str, str]:
    """The subcommand named in ``argv`` and its first positional argument ("" where absent)."""
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    for k, a in enumerate(argv):
        if a in commands:
            takes_value = {o for p in commands[a].params if not getattr(p, "is_flag", True) for o in p.opts}
            rest = iter(argv[k + 1:])
            for x in rest:
                if x in takes_value:
                    next(rest, None)
                elif not x.startswith("-"):
                    return a, x
            return a, ""
    return "vid2sim", ""


def error_line(e: BaseException, argv: list[str]) -> str:
    """One line for a failure: ``STAGE: FILE: cause``. A user error (bad input, missing
    artifact...) keeps its own message, which names the file, prefixed with the stage that
    raised it (``e.stage``, set by the runner) or else the command; anything else is
    ``COMMAND: TARGET: ExceptionType: message``."""
    msg = " ".join(str(e).split()) or type(e).__name__
    command, target = _command_and_target(argv)
    if isinstance(e, USER_ERRORS):
        where = getattr(e, "stage", None) or command
        return msg if msg.startswith(f"{where}:") else f"{where}: {msg}"
    where = f"{command}: {target}: " if target else f"{command}: "
    return f"{where}{type(e).__name__}: {msg}"


def _interrupt(signum, frame) -> None:
    """Ctrl-C: interrupts the command (KeyboardInterrupt, exit code 130). A second one while
    the process shuts down (threads joined, caches flushed: seconds on a loaded machine) ends
    it at once with exit code 130, and once the exit handlers run further ones are ignored:
    Python's finalisation would otherwise die of SIGINT or print a traceback from where it landed."""
    signal.signal(signal.SIGINT, lambda *_: os._exit(130))
    atexit.register(signal.signal, signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _say_repeats() -> None:
    """The line naming the repeated warnings the log handler hid, if it hid any."""
    line = _REPEATS["filter"].summary() if _REPEATS["filter"] is not None else None
    if line:
        err.print(line, markup=False, highlight=False)


def main() -> None:
    """Run the CLI. Every failure ends in one ``error:`` line and exit code 2 (``--debug``:
    with its traceback); Ctrl-C in exit code 130."""
    argv = sys.argv[1:]
    signal.signal(signal.SIGINT, _interrupt)
    try:
        app()  # usage errors, --help and Ctrl-C (exit code 130) are handled by typer itself
    except SystemExit:
        _say_repeats()
        raise
    except KeyboardInterrupt:
        err.print("[red]interrupted[/]")
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - the one place every failure is turned into a line
        if _DEBUG["on"]:
            traceback.print_exc()
        _say_repeats()  # before the error line, which stays the last
        # escaped: a message's own brackets ("tuple[int, ...]", "['a', 'b']") are not Rich markup
        err.print(f"[red]error:[/] {rich.markup.escape(error_line(e, argv))}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
