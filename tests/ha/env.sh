#!/usr/bin/env bash
# The environments of the Home Assistant suites (tests/ha), built once into a cache outside the checkout:
#   tests/ha/env.sh HA_VERSION   make (or reuse) the venv that runs those tests on that Home Assistant version;
#                                print its path (progress goes to stderr)
# The versions, each through pytest-homeassistant-custom-component (its `hass` fixture) in a venv of its own:
#   2026.11.0 (0.13.375, the newest, which pins HA 2026.10.4: 2026.11.0 goes over it with pip --no-deps) needs Python
#             >= 3.14.2: tests/python314.sh makes Python 3.14 from Debian sid's binary packages
#   2026.2.3  (0.13.316) needs Python >= 3.13.2, which Debian bookworm lacks: tests/python313.sh builds Python 3.13
#             from Debian trixie's source package python3.13 (the main suite's second run shares it)
#   2024.3.3  (0.13.109) runs on this machine's Python 3 (3.11), the older, non-streaming TTS path
# The cache is ${WIS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wyoming-wis} (the same as tests/python31[34].sh's);
# a stamp beside each build says what it was built from, so a second run reuses it. Delete the cache to build
# everything again (about 8 min on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/../.."

CACHE="${WIS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wyoming-wis}"
log() { echo "tests/ha/env.sh: $*" >&2; }

ha_venv() {  # ha_venv HA_VERSION: the path of the venv with that Home Assistant, made or reused
    local version="$1" phcc brings="$1" python pythons pins=()
    case "$version" in
        # no test plugin pins 2026.11 yet: the newest brings 2026.10.4
        2026.11.0) phcc=0.13.375; brings=2026.10.4; python="$(tests/python314.sh)"; pythons="3.14" ;;
        2026.2.3) phcc=0.13.316; python="$(tests/python313.sh)"; pythons="3.13" ;;
        # HA 2024.3's http imports hass-nabucasa, whose acme (unpinned: pip takes 2.8) needs josepy 1's ComparableX509
        2024.3.3) phcc=0.13.109; python="${PYTHON:-python3}"; pythons="3.11 3.12"; pins=("josepy<2") ;;
        *) log "no Home Assistant $version here (2026.11.0, 2026.2.3 or 2024.3.3)"; exit 2 ;;
    esac
    case " $pythons " in
        *" $("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])') "*) ;;
        *) log "Home Assistant $version needs Python $pythons; $python is $("$python" -V 2>&1)"; exit 1 ;;
    esac
    local venv="$CACHE/ha-$version" want
    # keyed on what goes in: HA's and the test plugin's versions, pins, the Python, and the integrations whose
    # requirements it adds
    want="$(printf '%s\n' "$version" "$phcc" "${pins[@]}" "$("$python" -VV)" "$(cat tests/ha/requirements.py)" \
        | sha256sum | cut -d' ' -f1)"
    if [ "$(cat "$venv/.wis-installed" 2>/dev/null)" = "$want" ]; then
        echo "$venv"
        return
    fi
    log "installing Home Assistant $version (pytest-homeassistant-custom-component $phcc) into $venv"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    # (stdout carries the venv's path: pip says anything it has to say on stderr)
    "$venv/bin/python" -m pip install --quiet --quiet --upgrade pip >&2
    "$venv/bin/python" -m pip install --quiet --quiet "pytest-homeassistant-custom-component==$phcc" >&2
    local installed
    installed="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("homeassistant"))')"
    [ "$installed" = "$brings" ] || { log "pytest-homeassistant-custom-component $phcc brought HA $installed"; exit 1; }
    if [ "$brings" != "$version" ]; then
        # without its requirements, which the next step installs as this version pins them
        "$venv/bin/python" -m pip install --quiet --quiet --no-deps "homeassistant==$version" >&2
    fi
    # Core integrations' own requirements (wyoming, hassil, mutagen, ...) are not in the homeassistant package:
    # Home Assistant pip-installs them when it sets one up, which tests skip. Install them here, pinned as HA pins,
    # with Home Assistant's own (the plugin's HA brought them; one installed over it lacks its new ones: httpx2, ...).
    "$venv/bin/python" tests/ha/requirements.py > "$venv/integration-requirements.txt"
    local constraints
    constraints="$("$venv/bin/python" -c 'import importlib.util as u; print(u.find_spec("homeassistant").origin)')"
    "$venv/bin/python" -m pip install --quiet --quiet -r "$venv/integration-requirements.txt" "${pins[@]}" \
        -c "$(dirname "$constraints")/package_constraints.txt" >&2
    installed="$("$venv/bin/python" -c 'import homeassistant.const as c; print(c.__version__)')"
    [ "$installed" = "$version" ] || { log "$venv has Home Assistant $installed"; exit 1; }
    echo "$want" > "$venv/.wis-installed"
    echo "$venv"
}

[ $# -eq 1 ] || { echo "usage: tests/ha/env.sh HA_VERSION" >&2; exit 2; }
ha_venv "$1"
