#!/usr/bin/env bash
# A folder of wheels for installing wyoming-wis[bundled] with no index (tests/test_wheel.py, the add-on's install test):
#   tests/wheelhouse.sh PYTHON   make (or reuse) the wheels of every dependency of wyoming-wis[bundled], of what
#                                builds the package (pyproject.toml's build-system), and the turn-taking model's wheel
#                                (without its dependencies, as the add-on installs it), for that Python; print the folder
# Built once into ${WIS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wyoming-wis}/wheelhouse-<Python X.Y>; a stamp
# (pyproject.toml, TURN_WHEEL and the Python) says what it was built from, so a second run reuses it. Progress goes
# to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -eq 1 ] || { echo "usage: tests/wheelhouse.sh PYTHON" >&2; exit 2; }
python="$1"
CACHE="${WIS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wyoming-wis}"
version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
house="$CACHE/wheelhouse-$version"
TURN_WHEEL="pipecat-ai==1.14.0"  # as run.sh and addon/install.sh install it
want="$({ cat pyproject.toml; echo "$TURN_WHEEL"; "$python" -VV; } | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$house/.wis-built" 2>/dev/null)" = "$want" ]; then
    echo "$house"
    exit
fi

# The requirements, read from pyproject.toml
requirements="$("$python" - <<'EOF'
import tomllib
with open("pyproject.toml", "rb") as file:
    project = tomllib.load(file)
print("\n".join(
    project["build-system"]["requires"]
    + project["project"]["dependencies"]
    + project["project"]["optional-dependencies"]["bundled"]
))
EOF
)"
echo "tests/wheelhouse.sh: building the wheels of wyoming-wis[bundled] for Python $version into $house" >&2
mkdir -p "$CACHE"
work="$(mktemp -d "$CACHE/.wheelhouse-$version.XXXXXX")"
trap 'rm -rf "$work"' EXIT
printf '%s\n' "$requirements" > "$work/requirements.txt"
# Wheels from PyPI where there are any; pip builds the rest from their sdists. pip talks on stderr only.
"$python" -m pip wheel --quiet --prefer-binary --wheel-dir "$work/wheels" -r "$work/requirements.txt" >&2
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$work/wheels" "$TURN_WHEEL" >&2
echo "$want" > "$work/wheels/.wis-built"
rm -rf "$house"
mv "$work/wheels" "$house"
echo "$house"
