#!/usr/bin/env bash
# wyoming-wis on this machine, from a fresh clone:
#   ./run.sh [FLAGS...]        create .venv, install with the bundled models, start the server
#   ./run.sh test [PYTEST...]  install the test tools and XTTS (the xtts extra) too, and run the test suite
# A second run reuses .venv and reinstalls only when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")"

VENV="${WIS_VENV:-.venv}"
PYTHON="${PYTHON:-python3}"

install() {  # install() EXTRAS: the package, editable, with the given extras
    local extras="$1" stamp="$VENV/.wis-installed-$1" want
    if [ ! -x "$VENV/bin/python" ]; then
        "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
            || { echo "wyoming-wis needs Python 3.10 or newer ($PYTHON is $("$PYTHON" -V 2>&1))" >&2; exit 1; }
        echo "Creating virtual environment in $VENV" >&2
        "$PYTHON" -m venv "$VENV"
    fi
    want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        echo "Installing wyoming-wis[$extras] into $VENV" >&2
        "$VENV/bin/python" -m pip install --quiet --upgrade pip
        "$VENV/bin/python" -m pip install --quiet -e ".[$extras]"
        echo "$want" > "$stamp"
    fi
}

case "${1:-}" in
    test)
        shift
        install bundled,dev,xtts  # the XTTS tests run in CI, not skipped
        exec "$VENV/bin/python" -m pytest "$@"
        ;;
    *)
        install bundled
        exec "$VENV/bin/wyoming-wis" "$@"
        ;;
esac
