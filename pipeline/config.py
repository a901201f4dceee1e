"""Stage settings: frozen dataclasses, optionally grouped into nested dataclasses.

A stage's ``Config`` holds scalar and tuple settings and, for a large stage, *groups*:
fields whose type is itself a frozen dataclass (``TrackConfig.gates``). A setting is
named by its path below the stage, ``gates.gate_m``; on the command line
``--set track.gates.gate_m=0.02`` or ``vid2sim track --gates.gate-m 0.02``, in a
settings file ``{"track": {"gates": {"gate_m": 0.02}}}``.

Leaf names are unique within a stage (``leaf_paths`` checks), which gives two things:

- the cache key hashes the settings by leaf name (``flat_settings``), so grouping or
  regrouping settings leaves cached runs valid;
- an old ungrouped name (``track.gate_m``) is rejected with one line naming its new
  path (``track.gates.gate_m``), never silently mapped.
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any


class ConfigError(ValueError):
    """A settings file or override that does not fit the stage's Config (the message names it)."""


def is_group(hint: Any) -> bool:
    """Whether a field annotation is a settings group (a dataclass type)."""
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def leaf_paths(cls: type, prefix: str = "") -> dict[str, str]:
    """{leaf name: dotted path} of every setting of ``cls``, groups walked; raises
    ``ConfigError`` when two leaves share a name or a group is named like a leaf."""
    out: dict[str, str] = {}
    groups: dict[str, str] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        if is_group(hints[f.name]):
            groups[f.name] = path
            sub = leaf_paths(hints[f.name], path + ".")
        else:
            sub = {f.name: path}
        for leaf, p in sub.items():
            if leaf in out:
                raise ConfigError(f"{cls.__name__}: setting name {leaf!r} is used twice ({out[leaf]}, {p})")
            out[leaf] = p
    clash = sorted(set(groups) & set(out))
    if clash:
        raise ConfigError(f"{cls.__name__}: group {groups[clash[0]]} is named like the setting {out[clash[0]]}")
    return out


def config_to_json(cfg: Any) -> dict:
    """The settings as saved in ``settings.json``: nested dicts, one per group."""
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=str))


def flat_settings(cfg: Any) -> dict:
    """{leaf name: value} of every setting, groups flattened (what the cache key hashes)."""
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        out.update(flat_settings(v) if dataclasses.is_dataclass(v) else {f.name: v})
    return json.loads(json.dumps(out, default=str))


def set_path(d: dict, path: str, value: Any) -> None:
    """Put ``value`` at dotted ``path`` into the nested dict ``d`` (creating groups)."""
    *groups, leaf = path.split(".")
    for g in groups:
        sub = d.get(g)
        d[g] = sub = dict(sub) if isinstance(sub, dict) else {}
        d = sub
    d[leaf] = value


def get_path(cfg: Any, path: str) -> Any:
    """The setting at dotted ``path`` of a config."""
    for name in path.split("."):
        cfg = getattr(cfg, name)
    return cfg


def config_from_json(cls: type, d: dict, source: str, prefix: str = "") -> Any:
    """``cls`` built from its (nested) JSON settings ``d``; every problem raises ``ConfigError``
    ``SOURCE: PREFIX.NAME ...`` (``prefix``: the stage, or the stage and the group)."""
    names = {f.name: f for f in dataclasses.fields(cls)}
    where = f"{prefix}." if prefix else ""
    unknown = sorted(set(d) - set(names))
    if unknown:
        moved = leaf_paths(cls)
        for k in unknown:
            if k in moved:
                raise ConfigError(f"{source}: setting {where}{k} is now {where}{moved[k]} (settings are grouped; "
                                  f"see `vid2sim {prefix.split('.')[0] or 'STAGE'} --help`)")
        raise ConfigError(f"{source}: unknown setting(s) {', '.join(where + k for k in unknown)} for {cls.__name__}; "
                          f"known: {', '.join(names)}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for k, v in d.items():
        if is_group(hints[k]):
            if not isinstance(v, dict):
                raise ConfigError(f"{source}: {where}{k} is a group of settings ({', '.join(leaf_paths(hints[k]))}), "
                                  f"not a value; set one as {where}{k}.NAME=VALUE")
            kwargs[k] = config_from_json(hints[k], v, source, f"{where}{k}")
            continue
        default = getattr(cls(), k)
        v = tuple(v) if isinstance(default, tuple) and isinstance(v, list) else v
        if not _fits(v, hints[k]):
            raise ConfigError(f"{source}: setting {where}{k}={v!r} of {cls.__name__} must be {_type_name(hints[k])}")
        kwargs[k] = v
    try:
        return cls(**kwargs)
    except ValueError as e:    # a setting's own checks (choices, ranges)
        raise ConfigError(f"{source}: {e}") from e


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
