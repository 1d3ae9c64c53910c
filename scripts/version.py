#!/usr/bin/env python3
"""The package's version, kept in step everywhere it is written. pyproject.toml's [project] version is the source.

  scripts/version.py                  print the version (exit 1, saying what disagrees, unless every place agrees)
  scripts/version.py --check [--tag vX.Y.Z]
                                      the same without printing; with --tag, also that the tag names the version and
                                      that its changelog section is dated (what the release workflow checks first)
  scripts/version.py X.Y.Z            cut a release: write X.Y.Z everywhere and date its section of CHANGELOG.md
  scripts/version.py --notes          print the version's changelog section (the GitHub release's notes)
  scripts/version.py --name-images IMAGE
                                      write `image: IMAGE` (with `{arch}` in it) into the add-on's config.yaml, once

How the changelog is dated: entries are written under `## [Unreleased]` as changes land. `scripts/version.py X.Y.Z`
moves them into a new section `## [X.Y.Z] - YYYY-MM-DD`, dated the day it runs, which is the day the release is
cut and tagged. A version whose section was written before its release (0.1.0's) carries `- Unreleased` in place of
the date until then; the same command dates it. The tag's check refuses a section that is not dated.

addon/CHANGELOG.md, which the Supervisor shows on the add-on's page, is CHANGELOG.md without its [Unreleased] section:
the add-on's users get released versions only. This script writes it; --check says when it is not that copy.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSION = re.compile(r"\d+\.\d+\.\d+")
# Where the version is written: a file and the pattern whose one group is the version (each matches once).
PLACES = {
    "pyproject.toml": re.compile(r'^version = "([^"]*)"$', re.M),
    "addon/config.yaml": re.compile(r"^version: (\S*)$", re.M),  # what the Supervisor offers and pulls
    "addon/build.yaml": re.compile(r"^  WIS_VERSION: (\S*)$", re.M),  # the wheel the add-on's Dockerfile installs
}
CHANGELOG, ADDON_CHANGELOG, ADDON_CONFIG = "CHANGELOG.md", "addon/CHANGELOG.md", "addon/config.yaml"
UNRELEASED = "Unreleased"
HEADER = re.compile(r"^## \[(?P<name>[^\]]+)\](?: - (?P<date>\S+))?$", re.M)
LINK = re.compile(r"^\[(?P<name>[^\]]+)\]: (?P<url>\S+)$", re.M)
REPOSITORY = re.compile(r'^Homepage = "(https://github\.com/[^"]+)"$', re.M)  # pyproject's [project.urls]


class VersionError(Exception):
    """A version that cannot be written, or places that disagree."""


@dataclass
class Section:
    name: str  # a version, or "Unreleased"
    date: str | None  # YYYY-MM-DD, "Unreleased" before the release, None for [Unreleased] itself
    body: str


@dataclass
class Changelog:
    """A Keep a Changelog file: the text before the first section, the sections, the link references at the end."""

    preamble: str
    sections: list[Section]
    links: dict[str, str]

    @classmethod
    def parse(cls, text: str) -> Changelog:
        links = {match["name"].lower(): match["url"] for match in LINK.finditer(text)}
        text = LINK.sub("", text).rstrip() + "\n"
        headers = list(HEADER.finditer(text))
        sections = [
            Section(header["name"], header["date"], text[header.end() : end].strip("\n"))
            for header, end in zip(headers, [h.start() for h in headers[1:]] + [len(text)], strict=True)
        ]
        return cls(text[: headers[0].start()] if headers else text, sections, links)

    def render(self, unreleased: bool = True) -> str:
        """The file's text; without the [Unreleased] section (and its link) for the add-on's copy."""
        parts = [self.preamble.rstrip("\n")]
        for section in self.sections:
            if section.name == UNRELEASED and not unreleased:
                continue
            header = f"## [{section.name}]" + (f" - {section.date}" if section.date else "")
            parts.append(header + (f"\n\n{section.body}" if section.body else ""))
        names = [section.name.lower() for section in self.sections if unreleased or section.name != UNRELEASED]
        links = [f"[{name}]: {self.links[name]}" for name in names if name in self.links]
        return "\n\n".join(parts + (["\n".join(links)] if links else [])) + "\n"

    def section(self, name: str) -> Section | None:
        return next((section for section in self.sections if section.name == name), None)


def read(root: Path, place: str) -> str:
    """The version written in one place."""
    found = PLACES[place].findall((root / place).read_text(encoding="utf-8"))
    if len(found) != 1:
        raise VersionError(f"{place}: the version is written {len(found)} times, not once")
    return found[0]


def current(root: Path = ROOT) -> str:
    """The package version: pyproject.toml's."""
    return read(root, "pyproject.toml")


def changelog(root: Path) -> Changelog:
    return Changelog.parse((root / CHANGELOG).read_text(encoding="utf-8"))


def problems(root: Path = ROOT, tag: str | None = None) -> list[str]:
    """Everything that disagrees with pyproject.toml's version (empty when all is in step)."""
    try:
        version = current(root)
        found = {place: read(root, place) for place in PLACES}
    except VersionError as error:
        return [str(error)]
    said = [f"{place} has {value}, pyproject.toml {version}" for place, value in found.items() if value != version]
    if not VERSION.fullmatch(version):
        said.append(f"pyproject.toml's version {version} is not X.Y.Z")
    log = changelog(root)
    if not log.sections or log.sections[0].name != UNRELEASED or log.sections[0].date:
        said.append(f"{CHANGELOG} does not begin with ## [{UNRELEASED}]")
    for section in log.sections[1:]:  # dated, but for the version itself before its release
        dated = _is_date(section.date or "") or (section.name == version and section.date == UNRELEASED)
        if not VERSION.fullmatch(section.name) or not dated:
            said.append(f"{CHANGELOG}: '## [{section.name}] - {section.date}' is not '## [X.Y.Z] - YYYY-MM-DD'")
    entry = log.section(version)
    if entry is None:
        said.append(f"{CHANGELOG} has no section for {version}")
    if (root / ADDON_CHANGELOG).read_text(encoding="utf-8") != log.render(unreleased=False):
        said.append(f"{ADDON_CHANGELOG} is not {CHANGELOG} without [{UNRELEASED}]: run scripts/version.py {version}")
    if tag is not None:
        if tag != f"v{version}":
            said.append(f"the tag {tag} is not v{version}")
        if entry is not None and entry.date == UNRELEASED:
            said.append(f"{CHANGELOG}'s section for {version} is not dated: run scripts/version.py {version}")
    return said


def _is_date(text: str) -> bool:
    try:
        return datetime.date.fromisoformat(text).isoformat() == text
    except ValueError:
        return False


def set_version(version: str, root: Path = ROOT, today: datetime.date | None = None) -> None:
    """Write `version` everywhere and date its changelog section (moving [Unreleased]'s entries into it)."""
    if not VERSION.fullmatch(version):
        raise VersionError(f"{version} is not X.Y.Z")
    log = changelog(root)
    unreleased, entry = log.section(UNRELEASED), log.section(version)
    if unreleased is None:
        raise VersionError(f"{CHANGELOG} has no [{UNRELEASED}] section")
    if entry is not None and entry.date != UNRELEASED:
        raise VersionError(f"{version} was released on {entry.date}")
    if entry is not None and unreleased.body:
        raise VersionError(f"move the entries under [{UNRELEASED}] into [{version}] first")
    if entry is None and not unreleased.body:
        raise VersionError(f"nothing under [{UNRELEASED}] to release as {version}")
    if entry is None:
        entry = Section(version, None, unreleased.body)
        log.sections.insert(log.sections.index(unreleased) + 1, entry)
        unreleased.body = ""
    entry.date = (today or datetime.date.today()).isoformat()
    repository = REPOSITORY.search((root / "pyproject.toml").read_text(encoding="utf-8"))[1]
    previous = [section.name for section in log.sections if section.name not in (UNRELEASED, version)]
    log.links[UNRELEASED.lower()] = f"{repository}/compare/v{version}...HEAD"
    log.links[version] = (
        f"{repository}/compare/v{previous[0]}...v{version}" if previous else f"{repository}/releases/tag/v{version}"
    )
    for place, pattern in PLACES.items():
        path = root / place
        read(root, place)  # written once, so the substitution below changes exactly that
        path.write_text(pattern.sub(lambda match: _replace_group(match, version), path.read_text(encoding="utf-8")))
    (root / CHANGELOG).write_text(log.render(), encoding="utf-8")
    (root / ADDON_CHANGELOG).write_text(log.render(unreleased=False), encoding="utf-8")


def _replace_group(match: re.Match[str], value: str) -> str:
    whole, start = match.group(0), match.start(1) - match.start(0)
    return whole[:start] + value + whole[start + len(match.group(1)) :]


def name_images(image: str, root: Path = ROOT) -> bool:
    """Name the add-on's prebuilt images in config.yaml; True if it was written now, False if it was already."""
    if "{arch}" not in image or image != image.lower():
        raise VersionError(f"{image}: an add-on image name is lower case with {{arch}} in it")
    path = root / ADDON_CONFIG
    text = path.read_text(encoding="utf-8")
    named = re.search(r"^image: \"?([^\"\n]*)\"?$", text, re.M)
    if named:
        if named[1] != image:
            raise VersionError(f"{ADDON_CONFIG} already names {named[1]}, not {image}")
        return False
    line = PLACES[ADDON_CONFIG].search(text)
    comment = "# The images each release pushes: the Supervisor pulls image:version instead of building this folder."
    path.write_text(text[: line.end()] + f'\n{comment}\nimage: "{image}"' + text[line.end() :], encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("version", nargs="?", help="cut a release: write this version everywhere")
    parser.add_argument("--check", action="store_true", help="only check that every place agrees")
    parser.add_argument("--tag", help="also check that this tag (vX.Y.Z) names the version and that it is dated")
    parser.add_argument("--notes", action="store_true", help="print the version's changelog section")
    parser.add_argument("--name-images", metavar="IMAGE", help="name the add-on's images in config.yaml")
    args = parser.parse_args(argv)
    try:
        if args.version:
            set_version(args.version)
        elif args.name_images:
            written = name_images(args.name_images)
            print(f"{ADDON_CONFIG}: image {args.name_images}" + (" written" if written else " already named"))
            return 0
    except VersionError as error:
        print(f"scripts/version.py: {error}", file=sys.stderr)
        return 1
    said = problems(tag=args.tag)
    for problem in said:
        print(f"scripts/version.py: {problem}", file=sys.stderr)
    if said:
        return 1
    if args.notes:
        print(changelog(ROOT).section(current()).body)
    elif not args.check:
        print(current())
    return 0


if __name__ == "__main__":
    sys.exit(main())
