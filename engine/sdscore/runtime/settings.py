"""A Scorer's settings declared once, as a frozen dataclass, and everything generated from it.

Each field is a `setting(default, help=..., ...)`: its type (the annotation), default, help, command-line
flag, choices, whether it is volatile for `--resume` (caches, parallelism, deadlines: a resumed run may
change them) and the modes of the command that use it. From the class come:

- `add_options(parser, options)`: the argparse options of `sdscore score PROTOCOL`;
- `settings_from_args(options, args)`: the mode and settings object of a parsed command line, after
  refusing options given for another mode (`--base-url` without `--judge openai`);
- `build(cls, *args, **keywords)`: the API's keyword check (an unknown keyword names the valid ones; a
  wrong type or choice names the setting) — a Scorer calls it once in `__init__`;
- `run_record(settings)`: the score-affecting settings as JSON-able values (volatile ones left out), the
  `settings` of a run record that `--resume` compares.

A command with several Scorers (`--judge embedding|openai`) is an `Options`: one settings class per value
of its mode option; a field of several classes is one option, for every mode whose class has it.
Light on purpose (argparse, dataclasses, typing): `sdscore --help` builds every protocol's options.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sdscore.errors import SdscoreError

_KEY = "sdscore.setting"


class SettingsError(SdscoreError, ValueError):
    """A Scorer's settings are wrong: an unknown name, a wrong type or choice, an option of another mode."""


@dataclasses.dataclass(frozen=True)
class _Meta:
    help: str
    cli: str | None
    choices: tuple | None
    volatile: bool
    needs: Mapping[str, tuple[str, ...]]
    type: Callable[[str], Any] | None
    metavar: str | None
    required: bool
    group: str | None = None
    record_none: bool = True


def setting(default: Any = dataclasses.MISSING, *, help: str = "", cli: str | None = "", choices: Sequence | None = None,
            volatile: bool = False, needs: Mapping[str, Sequence[str]] | None = None,
            type: Callable[[str], Any] | None = None, metavar: str | None = None, required: bool = False,
            group: str | None = None, record_none: bool = True) -> Any:
    """A settings dataclass field. cli: the flag (default: --the-field-name; None: an API-only setting;
    a bool defaulting to True gets a `--no-...` flag that stores False); needs: {other option's field:
    its values} — the option is refused on the command line unless that option has one of them (e.g.
    a seed that only `--orders random` uses); type: argparse's converter (default from the annotation);
    required: the command line must give it (the API may leave it None, e.g. to fail later with a
    clearer message); group: the title of the argument group its option is listed under in --help
    (default: its mode's group, or the command's); record_none=False: a None value is left out of the
    run record (a setting added later, e.g. a judge's temperature, so earlier records still match)."""
    meta = _Meta(help, cli, None if choices is None else tuple(choices), volatile,
                 {k: tuple(v) for k, v in (needs or {}).items()}, type, metavar, required, group, record_none)
    return dataclasses.field(default=default, metadata={_KEY: meta})


def _meta(field: dataclasses.Field) -> _Meta:
    meta = field.metadata.get(_KEY)
    if meta is None:
        raise TypeError(f"field {field.name!r} is not declared with setting()")
    return meta


def _flag(field: dataclasses.Field) -> str | None:
    meta = _meta(field)
    if meta.cli is None:
        return None
    if meta.cli:
        return meta.cli
    return "--" + field.name.replace("_", "-")


def fields(cls: type) -> tuple[dataclasses.Field, ...]:
    """The settings of a settings class, in declaration order."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"{cls!r} is not a settings dataclass")
    return dataclasses.fields(cls)


def volatile_names(cls: type) -> tuple[str, ...]:
    """The settings a resumed run may change (left out of the run record)."""
    return tuple(f.name for f in fields(cls) if _meta(f).volatile)


# ---- the API: keywords checked once ------------------------------------------------------------------


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _fits(value: Any, hint: Any) -> bool:
    """Whether value has the annotated type (unions, None, bool/int/float/str, paths, plain classes)."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is Path:
        return isinstance(value, (str, os.PathLike))
    target = origin or hint
    if target is typing.Literal:
        return value in typing.get_args(hint)
    if isinstance(target, type):
        if target is str and isinstance(value, str):
            return True
        if target in (tuple, list, Sequence) and isinstance(value, str):
            return False
        return isinstance(value, target)
    return True


def _type_name(hint: Any) -> str:
    if isinstance(hint, type) and typing.get_origin(hint) is None:
        return hint.__name__
    return str(hint).replace("typing.", "").replace("collections.abc.", "").replace("pathlib.", "")


def build(cls: type, *args: Any, **keywords: Any) -> Any:
    """A `cls` settings object from a Scorer's arguments (positional ones fill the fields in order; an
    instance of cls is taken as it is). SdscoreError for an unknown keyword (naming the valid ones), a
    missing required setting, a value of the wrong type or outside the setting's choices."""
    if len(args) == 1 and not keywords and isinstance(args[0], cls):
        return args[0]
    declared = fields(cls)
    names = [f.name for f in declared]
    if len(args) > len(names):
        raise SettingsError(f"{cls.__name__} takes at most {len(names)} positional settings, got {len(args)}")
    given = dict(zip(names, args))
    for name, value in keywords.items():
        if name in given:
            raise SettingsError(f"{cls.__name__}: setting {name!r} given twice")
        given[name] = value
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise SettingsError(f"unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} for "
                           f"{cls.__name__}; valid: {', '.join(names)}")
    missing = [f.name for f in declared if f.name not in given and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise SettingsError(f"{cls.__name__} needs {', '.join(map(repr, missing))}")
    hints = _hints(cls)
    for field in declared:
        if field.name not in given:
            continue
        value, meta = given[field.name], _meta(field)
        if not _fits(value, hints[field.name]):
            raise SettingsError(f"{field.name} must be {_type_name(hints[field.name])}, got {value!r} "
                                f"(a setting of {cls.__name__})")
        if meta.choices is not None and value is not None and value not in meta.choices:
            raise SettingsError(f"{field.name} must be one of {list(meta.choices)}, got {value!r} "
                                f"(a setting of {cls.__name__})")
    return cls(**given)


def keywords(settings: Any) -> dict[str, Any]:
    """The settings object's fields as keyword arguments (for a Scorer or a ScoringJob)."""
    return {f.name: getattr(settings, f.name) for f in fields(type(settings))}


def plain(value: Any) -> Any:
    """A JSON-able form of a setting (paths and other objects as text)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    return str(value)


def run_record(settings: Any) -> dict[str, Any]:
    """The settings that change scores, by name in sorted order, as JSON-able values (volatile ones left
    out; a record_none=False setting only when it is not None): what a run record keeps and a resumed
    run must match."""
    cls = type(settings)
    return {f.name: plain(getattr(settings, f.name)) for f in sorted(fields(cls), key=lambda f: f.name)
            if not _meta(f).volatile and (_meta(f).record_none or getattr(settings, f.name) is not None)}


# ---- the command line ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Options:
    """A command's options: the settings class of each value of its mode option (`--judge`), or one
    class and no mode option (mode=None). groups: {mode value: argument-group title} for the options only
    that mode uses; title: a group for all the options (default: the parser itself)."""

    classes: Mapping[str, type]
    mode: str | None = None
    mode_default: str | None = None
    mode_help: str = ""
    mode_required: bool = False
    groups: Mapping[str, str] = dataclasses.field(default_factory=dict)
    title: str | None = None

    def __post_init__(self) -> None:
        if self.mode is None and len(self.classes) != 1:
            raise TypeError("Options without a mode option take one settings class")

    def fields(self) -> dict[str, tuple[dataclasses.Field, tuple[str, ...]]]:
        """Every command-line setting → (its first declaration, the modes whose class has it)."""
        found: dict[str, tuple[dataclasses.Field, tuple[str, ...]]] = {}
        for mode, cls in self.classes.items():
            for field in fields(cls):
                if _flag(field) is None:
                    continue
                first, modes = found.get(field.name, (field, ()))
                if _flag(first) != _flag(field) or first.default != field.default:
                    raise TypeError(f"setting {field.name!r} is declared differently in {list(self.classes)}")
                found[field.name] = (first, (*modes, mode))
        return found


def _add(target, field: dataclasses.Field, hint: Any) -> None:
    meta, flag = _meta(field), _flag(field)
    default = None if field.default is dataclasses.MISSING else field.default
    kwargs: dict[str, Any] = {"dest": field.name}
    if meta.help:
        kwargs["help"] = meta.help
    if hint is bool or hint == "bool":
        kwargs["action"] = "store_false" if default else "store_true"
        target.add_argument(flag, **kwargs)
        return
    kwargs["default"] = default
    if meta.required:
        kwargs["required"] = True
    if meta.choices is not None:
        kwargs["choices"] = list(meta.choices)
    if meta.metavar is not None:
        kwargs["metavar"] = meta.metavar
    converter = meta.type
    if converter is None:
        plain_hint = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        if len(plain_hint) == 1 and plain_hint[0] in (int, float, Path):
            converter = plain_hint[0]
    if converter is not None:
        kwargs["type"] = converter
    target.add_argument(flag, **kwargs)


def add_options(parser: argparse.ArgumentParser, options: Options) -> None:
    """Add the command's options to parser: the mode option first, then each setting with a flag."""
    main = parser if options.title is None else parser.add_argument_group(options.title)
    if options.mode is not None:
        kwargs: dict[str, Any] = {"choices": list(options.classes), "help": options.mode_help}
        kwargs["required" if options.mode_required else "default"] = (
            True if options.mode_required else options.mode_default)
        main.add_argument("--" + options.mode.replace("_", "-"), dest=options.mode, **kwargs)
    groups: dict[str, Any] = {}
    all_modes = tuple(options.classes)
    for name, (field, modes) in options.fields().items():
        target, title = main, _meta(field).group
        if title is None and modes != all_modes and len(modes) == 1:
            title = options.groups.get(modes[0])
        if title is not None:
            if title not in groups:
                groups[title] = parser.add_argument_group(title)
            target = groups[title]
        hint = _hints(options.classes[modes[0]])[name]
        _add(target, field, hint)


def _refuse(args: argparse.Namespace, flags: Mapping[str, str], defaults: Mapping[str, Any], mode_dest: str,
            used_by: Mapping[str, Sequence[str]]) -> None:
    """SdscoreError naming every option given away from its default whose modes exclude the chosen one."""
    mode = getattr(args, mode_dest)
    stray: dict[str, list[str]] = {}
    for dest, modes in used_by.items():
        if mode not in modes and getattr(args, dest, None) != defaults[dest]:
            stray.setdefault(" or ".join(f"{flags[mode_dest]} {m}" for m in modes), []).append(flags[dest])
    if stray:
        count = sum(len(v) for v in stray.values())
        needs = "; ".join(f"{', '.join(opts)} {'is' if len(opts) == 1 else 'are'} for {wanted}"
                          for wanted, opts in stray.items())
        raise SettingsError(f"{needs}; with {flags[mode_dest]} {mode} {'it' if count == 1 else 'they'} "
                           f"would be ignored: drop {'it' if count == 1 else 'them'} or choose that mode")


def _default(field: dataclasses.Field) -> Any:
    return None if field.default is dataclasses.MISSING else field.default


def settings_from_args(options: Options, args: argparse.Namespace) -> tuple[str | None, Any]:
    """(mode, settings object) of a parsed command line. Options given (away from their default) for
    another mode, or without the value of another option they need, are refused with SdscoreError."""
    declared = options.fields()
    flags = {name: _flag(field) for name, (field, _) in declared.items()}
    defaults = {name: _default(field) for name, (field, _) in declared.items()}
    if options.mode is not None:
        flags[options.mode] = "--" + options.mode.replace("_", "-")
        all_modes = tuple(options.classes)
        _refuse(args, flags, defaults, options.mode,
                {name: modes for name, (_, modes) in declared.items() if modes != all_modes})
    mode = getattr(args, options.mode) if options.mode is not None else next(iter(options.classes))
    cls = options.classes[mode]
    needs: dict[str, dict[str, tuple[str, ...]]] = {}
    for field in fields(cls):
        if _flag(field) is not None:
            for other, values in _meta(field).needs.items():
                needs.setdefault(other, {})[field.name] = values
    for other, used_by in needs.items():
        _refuse(args, flags, defaults, other, used_by)
    given = {f.name: getattr(args, f.name) for f in fields(cls) if _flag(f) is not None}
    return mode, build(cls, **given)


def refuse_off_mode_keywords(options: Options, mode: str, given: Mapping[str, Any]) -> None:
    """SdscoreError for API keywords that the class of `mode` does not take but another mode's does."""
    cls = options.classes[mode]
    own = {f.name for f in fields(cls)}
    others = sorted(({f.name for c in options.classes.values() for f in fields(c)} - own) & set(given))
    if others:
        raise SettingsError(f"{', '.join(others)} {'is' if len(others) == 1 else 'are'} not a setting of "
                           f"{options.mode}={mode!r} ({cls.__name__}); valid: {', '.join(sorted(own))}")


def build_mode(options: Options, mode: str | None, given: Mapping[str, Any]) -> Any:
    """The settings object of `mode` (None: the options' mode_default) from API keywords: the keyword check
    of a Scorer with one settings class per value of its mode setting. SettingsError for a mode that is not
    one of options', a keyword of another mode's class, or what `build` refuses."""
    mode = options.mode_default if mode is None else mode
    if mode not in options.classes:
        raise SettingsError(f"unknown {options.mode or 'mode'} {mode!r}; expected one of {list(options.classes)}")
    refuse_off_mode_keywords(options, mode, given)
    return build(options.classes[mode], **given)
