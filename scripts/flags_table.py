"""`.venv/bin/python scripts/flags_table.py`: write README.md's configuration table from the real flags.

The tables, one per group of settings, sit between two markers in README.md and are made from `config.OPTIONS`,
so they can not drift from `--help`; a test fails, naming this command, when someone changes a flag and forgets to
run it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from itertools import groupby
from pathlib import Path

from wyoming_wis.config import OPTIONS
from wyoming_wis.flags import Option

BEGIN = "<!-- flags:begin (generated from wyoming_wis/config.py by: scripts/flags_table.py) -->"
END = "<!-- flags:end -->"
README = Path(__file__).resolve().parents[1] / "README.md"  # the repository's; this tool is not installed


def _flag(option: Option) -> str:
    if option.switch:
        return option.flag
    if option.optional_value:
        return f"{option.flag} [{option.metavar}]"
    return f"{option.flag} {option.metavar}"


def _default(option: Option) -> str:
    if option.switch or option.optional_value:
        return "on" if option.default else "off"
    if option.default is None or option.default == []:
        return "—"
    values = option.default if isinstance(option.default, list) else [option.default]
    return ", ".join(_value(value) for value in values)


def _value(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Path) and not value.is_absolute():
        return f"./{value}"
    return str(value)


def render(options: Iterable[Option] = OPTIONS) -> str:
    """The Markdown tables, one per section of --help: one row per flag, with its variable, default and help."""
    tables = []
    for section, listed in groupby(options, key=lambda option: option.section):
        rows = [f"**{section}**", "", "| flag | variable | default | meaning |", "|---|---|---|---|"]
        for option in listed:
            meaning = option.help.replace("|", "\\|")
            rows.append(f"| `{_flag(option)}` | `{option.env}` | {_default(option)} | {meaning} |")
        tables.append("\n".join(rows) + "\n")
    return "\n".join(tables)


def updated(readme: str, table: str) -> str:
    """`readme` with the text between the markers replaced by `table`."""
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README.md has no {BEGIN!r} ... {END!r} markers")
    return readme[: start + len(BEGIN)] + "\n" + table + readme[end:]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="scripts/flags_table.py", description=__doc__.splitlines()[0])
    parser.add_argument("readme", nargs="?", type=Path, default=README, help="README to update (default: the repo's)")
    parser.add_argument("--check", action="store_true", help="only say whether it is up to date (exit 1 if not)")
    args = parser.parse_args(argv)
    text = args.readme.read_text(encoding="utf-8")
    new = updated(text, render())
    if args.check:
        sys.exit(0 if new == text else f"{args.readme} is out of date: run scripts/flags_table.py")
    if new != text:
        args.readme.write_text(new, encoding="utf-8")
        print(f"updated {args.readme}")


if __name__ == "__main__":
    main()
