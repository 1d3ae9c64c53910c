"""How a setting is written: a flag, a WIS_<FLAG> variable, a line of `--help`.

Settings are declared once, as fields of frozen dataclasses (config.py), each class with a `heading` (its
section of `--help` and of the README): `setting(...)` gives a field its flag's help, parser and kind, and its
default; `group(...)` nests one group of settings in another. Everything else is derived from those fields: the
flag is the field's name (`beam_size`: `--beam-size`, `WIS_BEAM_SIZE`), argparse's parser and its sections, the
environment names, and README.md's tables (scripts/flags_table.py). Precedence is flag, then environment, then
the field's default.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, TypeVar

from .values import parse_bool

ENV_PREFIX = "WIS_"
_OPTION, _GROUP = "wis_option", "wis_group"  # keys of a field's metadata

T = TypeVar("T")


@dataclass(frozen=True)
class Option:
    """One setting as declared: where its value lives, its heading, its flag, how to parse it and what it is for."""

    path: tuple[str, ...]  # attribute names from the settings' root down to the value: ("core", "asr", "beam_size")
    section: str  # the heading it is listed under in --help and the README: its group's `heading`
    help: str
    default: Any = None
    type: Callable[[str], Any] = str
    multiple: bool = False  # repeatable flag; comma-separated in the environment
    switch: bool = False  # flag without a value
    optional_value: bool = False  # `--flag` alone or `--flag VALUE`
    metavar: str | None = None
    secret: bool = False  # a key or a password: never shown (`described`)

    @property
    def dest(self) -> str:
        return self.path[-1]

    @property
    def flag(self) -> str:
        return "--" + self.dest.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.dest.upper()

    def of(self, settings: object) -> Any:
        """This setting's value in `settings`, an instance of the root it was declared under."""
        for name in self.path:
            settings = getattr(settings, name)
        return settings


def setting(
    help: str,
    default: Any = None,
    *,
    type: Callable[[str], Any] = str,
    metavar: str | None = None,
    multiple: bool = False,
    switch: bool = False,
    optional_value: bool = False,
    secret: bool = False,
) -> Any:
    """A field that is a setting; its name makes the flag. A `multiple` setting's value is a fresh list; a `secret`
    one (a key, a password) is never shown."""
    spelling = {
        "help": help,
        "type": type,
        "metavar": metavar,
        "multiple": multiple,
        "switch": switch,
        "optional_value": optional_value,
        "secret": secret,
    }
    if multiple:
        return field(default_factory=lambda: list(default or ()), metadata={_OPTION: spelling})
    return field(default=default, metadata={_OPTION: spelling})


def group(cls: type) -> Any:
    """A field that holds a group of settings, all at their defaults unless given."""
    return field(default_factory=cls, metadata={_GROUP: cls})


def options(root: type) -> tuple[Option, ...]:
    """Every setting declared under `root`: each group's subgroups first, then its own settings under its heading."""
    return tuple(_walk(root, ()))


def _walk(cls: type, path: tuple[str, ...]) -> Iterator[Option]:
    own = []
    for item in fields(cls):
        if _GROUP in item.metadata:
            yield from _walk(item.metadata[_GROUP], (*path, item.name))
        else:
            own.append(Option((*path, item.name), cls.heading, default=_default(item), **item.metadata[_OPTION]))
    yield from own


def _default(item: Field[Any]) -> Any:
    return item.default_factory() if item.default is MISSING else item.default


def argument_parser(declared: Sequence[Option], **kwargs: Any) -> argparse.ArgumentParser:
    """An argparse parser for `declared`, one help section per heading; `kwargs` go to ArgumentParser.

    Every flag defaults to None, so that `parse` can tell a flag not given and look in the environment.
    """
    parser = argparse.ArgumentParser(**kwargs)
    sections: dict[str, Any] = {}  # argparse's groups, by heading
    for option in declared:
        if option.section not in sections:
            sections[option.section] = parser.add_argument_group(option.section)
        sections[option.section].add_argument(option.flag, **_argument(option))
    return parser


def _argument(option: Option) -> dict[str, Any]:
    default = option.default
    if option.multiple and default:
        default = ", ".join(str(item) for item in default)
    shown_default = "" if default is None or default is False or default == [] else f" Default: {default}."
    kwargs: dict[str, Any] = {
        "dest": option.dest,
        "default": None,
        "help": f"{option.help}{shown_default} [env {option.env}]",
    }
    if option.switch:
        kwargs["action"] = "store_const"
        kwargs["const"] = True
    else:
        kwargs["type"] = option.type
        kwargs["metavar"] = option.metavar
        if option.multiple:
            kwargs["action"] = "append"
        if option.optional_value:
            kwargs["nargs"] = "?"
            kwargs["const"] = ""
    return kwargs


def parse(root: type[T], parser: argparse.ArgumentParser, argv: Sequence[str] | None, environ: Mapping[str, str]) -> T:
    """`root` from the flags in `argv`, else the variables in `environ`, else the defaults; exits (2) on an error.

    A group that refuses its values (ValueError from its `__post_init__`: settings that go together) exits too,
    with its message.
    """
    args = parser.parse_args(argv)
    values: dict[tuple[str, ...], Any] = {}
    for option in options(root):
        value = getattr(args, option.dest)
        if value is None and option.env in environ:
            try:
                value = _from_env(option, environ[option.env])
            except (ValueError, argparse.ArgumentTypeError) as err:
                parser.error(f"{option.env}={environ[option.env]!r}: {err}")
        if value is not None:
            values[option.path] = value
    try:
        return _build(root, (), values)
    except ValueError as err:
        parser.error(str(err))


def _build(cls: type[T], path: tuple[str, ...], values: Mapping[tuple[str, ...], Any]) -> T:
    """`cls` with the `values` given for it and its groups; the fields' defaults for the rest."""
    given: dict[str, Any] = {}
    for item in fields(cls):
        where = (*path, item.name)
        if _GROUP in item.metadata:
            given[item.name] = _build(item.metadata[_GROUP], where, values)
        elif where in values:
            given[item.name] = values[where]
    return cls(**given)


def _from_env(option: Option, text: str) -> Any:
    """Parse an environment value the way the flag would be parsed."""
    text = text.strip()
    if option.switch:
        return parse_bool(text)
    if option.optional_value:
        # WIS_ZEROCONF=1 (or empty) turns it on with the default name; =0 leaves it off; anything else is the value.
        if text == "":
            return ""
        try:
            return "" if parse_bool(text) else None
        except ValueError:
            return text
    if option.multiple:
        values = [option.type(part.strip()) for part in text.split(",") if part.strip()]
        if not values:
            raise ValueError("expected at least one value")
        return values
    return option.type(text)


HIDDEN = "***"  # what `described` shows of a secret's value


def described(root: object, declared: Sequence[Option]) -> str:
    """The settings of `root` that differ from their defaults, as the flags that would set them (`--beam-size 1
    --api-key ***`), wherever each came from (a flag or the environment): what the server logs when it starts, so
    the log says what it runs with and never a key or a password."""
    words: list[str] = []
    for option in declared:
        value = option.of(root)
        if value == option.default:
            continue
        for item in value if option.multiple else [value]:
            if option.switch or item == "":
                words.append(option.flag)
            else:
                words += [option.flag, HIDDEN if option.secret else shlex.quote(str(item))]
    return " ".join(words)
