#!/usr/bin/env bash
# wyoming-wis on this machine, from a fresh clone:
#   ./run.sh [FLAGS...]        create .venv, install with the bundled models, start the server
#   ./run.sh test              install the test tools (Python and Debian) and XTTS (the xtts extra) too, and run the tests:
#                              the main suite on Python 3 (.venv), again on Python 3.13 (.venv-3.13, made with the
#                              Python that tests/python313.sh builds once), then the Home Assistant suites (tests/ha)
#                              on HA 2026.11.0, 2026.2.3 and 2024.3.3
#   ./run.sh test fast [PYTEST...]  the fast tier only (pytest -m fast: in-process, no server, model or browser;
#                              under a minute), on Python 3 (.venv) only; it needs neither Debian's tools nor XTTS
#   ./run.sh test [PYTEST...]  the main suite only, on Python 3 (.venv) only, with those pytest arguments
#   ./run.sh test py313 [PYTEST...]  the main suite only, on Python 3.13 (.venv-3.13) only
#   ./run.sh test ha [PYTEST...]  the Home Assistant suites only; their Python and venvs are built once into
#                              ${WIS_CACHE_DIR:-~/.cache/wyoming-wis} (tests/ha/env.sh; about 12 min the first time)
#   ./run.sh addon DIR [WHEEL] make DIR a local Home Assistant add-on folder from this checkout: addon/ and, in its
#                              dist/, the wheel built from here or WHEEL (the add-on's Dockerfile installs it); see README.md
#   ./run.sh bench [asr|tts|rtc] [FLAGS...]  run the benchmarks against the peer servers (all, or one with its flags)
#   ./run.sh bench soak [FLAGS...]           every frontend under 16 clients for 12 minutes (bench/soak.py)
#   ./run.sh bench abuse [FLAGS...]          every attack we know of, one after another (bench/abuse.py, SECURITY.md)
#   ./run.sh bench accuracy [FLAGS...]       our transcripts against faster-whisper's transcribe(), per utterance (bench/accuracy.py)
#   ./run.sh bench paths [FLAGS...]          every frontend's transcripts against the same, per utterance (bench/paths.py)
#   ./run.sh bench endpoint [FLAGS...]       last word to transcript: Home Assistant's VAD, the peer's, ours (bench/endpoint.py)
#   ./run.sh bench realtime [FLAGS...]       the same, OpenAI Realtime transcription (server_vad, semantic_vad) against our Wyoming path (bench/realtime.py)
#   ./run.sh bench ha_turns [FLAGS...]       the same through Home Assistant's own pipeline: its VAD, ours (bench/ha_turns.py)
#   ./run.sh bench ha_names [FLAGS...]       names from Home Assistant: ours with and without, the peer with --hass-token (bench/ha_names.py)
#   ./run.sh bench wake [FLAGS...]           wake words against wyoming-openwakeword: recall, false accepts, latency, streams (bench/wake.py)
# A second run reuses .venv (and .venv-3.13) and reinstalls only when pyproject.toml changed.
# The Dockerfiles install the same way (pip install ".[bundled]"); tests/test_docker.py keeps them in step.
set -euo pipefail
cd "$(dirname "$0")"

VENV="${WIS_VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
VENV313="${WIS_VENV313:-.venv-3.13}"  # ./run.sh test: the main suite again on the add-on's Python (Debian trixie's)
# The wheel that carries the turn-taking model (Smart Turn), installed without its dependencies: the server reads
# one file from it and imports none of it (ARCHITECTURE.md). The Dockerfiles and the add-on pin the same.
TURN_WHEEL="pipecat-ai==1.14.0"

venv() {  # venv [VENV PYTHON]: create VENV (default $VENV) with PYTHON (default $PYTHON) if it is not there
    local venv="${1:-$VENV}" python="${2:-$PYTHON}"
    [ -x "$venv/bin/python" ] && return
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || { echo "wyoming-wis needs Python 3.11 or newer ($python is $("$python" -V 2>&1))" >&2; exit 1; }
    echo "Creating virtual environment in $venv" >&2
    "$python" -m venv "$venv"
}

install() {  # install EXTRAS [VENV PYTHON]: the package, editable, with the given extras (and the turn-taking model's
             # wheel), into VENV (made with PYTHON)
    local extras="$1" venv="${2:-$VENV}" python="${3:-$PYTHON}" want
    local stamp="$venv/.wis-installed-$extras"
    venv "$venv" "$python"
    want="$({ cat pyproject.toml; echo "$TURN_WHEEL"; } | sha256sum | cut -d' ' -f1)"
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        echo "Installing wyoming-wis[$extras] into $venv" >&2
        "$venv/bin/python" -m pip install --quiet --upgrade pip
        "$venv/bin/python" -m pip install --quiet -e ".[$extras]"
        "$venv/bin/python" -m pip install --quiet --no-deps "$TURN_WHEEL"
        echo "$want" > "$stamp"
    fi
}

suite() {  # suite VENV [PYTEST...]: the main suite on VENV's Python; tests/test_wheel.py installs from its wheelhouse
    local venv="$1"
    shift
    WIS_WHEELHOUSE="$(tests/wheelhouse.sh "$venv/bin/python")" "$venv/bin/python" -m pytest "$@"
}

test_tools() {  # from Debian, for the tests: libvo-amrwbenc (AMR-WB, as a Willow device sends it), promtool, chromium, haproxy,
                # ffmpeg (Home Assistant's TTS converts with it), espeak-ng (recorded commands for tests/ha), strace
                # (tests/test_egress.py watches the server's every connection), iproute2's ss (tests/test_bounds.py reads
                # the kernel's buffers of the server's connections)
    local missing=()
    ldconfig -p | grep -q libvo-amrwbenc.so.0 || missing+=(libvo-amrwbenc0)
    command -v promtool >/dev/null || missing+=(prometheus)
    command -v chromium >/dev/null || missing+=(chromium)
    command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)  # tests/test_scale_out.py
    command -v ffmpeg >/dev/null || missing+=(ffmpeg)
    command -v espeak-ng >/dev/null || missing+=(espeak-ng)
    command -v strace >/dev/null || missing+=(strace)
    command -v ss >/dev/null || missing+=(iproute2)
    [ ${#missing[@]} -eq 0 ] && return
    command -v apt-get >/dev/null || { echo "The tests need ${missing[*]}; install them (apt-get is not here)" >&2; exit 1; }
    local sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "Installing ${missing[*]} from Debian for the tests" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

ha_tests() {  # ha_tests [PYTEST...]: tests/ha on each Home Assistant version, in its own venv (tests/ha/env.sh),
              # against this checkout's server, newest first; each runs even if another fails
    local server version venv arg status=0 where=(tests/ha)
    server="$(cd "$VENV" && pwd)/bin/wyoming-wis"
    for arg in "$@"; do [ -e "${arg%%::*}" ] && where=(); done  # the arguments name the tests to run
    for version in 2026.11.0 2026.2.3 2024.3.3; do
        venv="$(tests/ha/env.sh "$version")" || { status=1; continue; }
        echo "Home Assistant $version: tests/ha" >&2
        # (PYTHONPATH: for tests/ha/ha_first.py, which pytest loads before the plugins: see tests/ha/pytest.ini)
        WIS_HA_SERVER="$server" PYTHONPATH=tests/ha "$venv/bin/python" -m pytest -c tests/ha/pytest.ini "${where[@]}" "$@" \
            || status=1
    done
    return "$status"
}

case "${1:-}" in
    test)
        shift
        if [ "${1:-}" = fast ]; then
            shift
            install bundled,dev
            # Only the modules that mark themselves fast are even imported (the others' imports, PyTorch's
            # among them, take longer than these tests), unless the arguments name the tests to run.
            mapfile -t where < <(grep -lE '^pytestmark = .*pytest\.mark\.fast' tests/test_*.py)
            for arg in "$@"; do [ -e "${arg%%::*}" ] && where=(); done
            exec "$VENV/bin/python" -m pytest -m fast "${where[@]}" "$@"
        fi
        install bundled,dev,xtts  # the XTTS tests run in CI, not skipped
        test_tools
        # Python 3.13, built once from Debian trixie's source: the add-on's Python (tests/test_addon_install.py
        # installs the add-on with it, from its wheelhouse) and the second run of the main suite
        WIS_PYTHON313="$(tests/python313.sh)"
        WIS_WHEELHOUSE_313="$(tests/wheelhouse.sh "$WIS_PYTHON313")"
        export WIS_PYTHON313 WIS_WHEELHOUSE_313
        if [ "${1:-}" = ha ]; then
            shift
            ha_tests "$@"
            exit
        elif [ "${1:-}" = py313 ]; then
            shift
            install bundled,dev,xtts "$VENV313" "$WIS_PYTHON313"
            suite "$VENV313" "$@"
            exit
        elif [ $# -gt 0 ]; then
            suite "$VENV" "$@"
            exit
        fi
        install bundled,dev,xtts "$VENV313" "$WIS_PYTHON313"
        status=0
        suite "$VENV" || status=1
        echo "Python 3.13: tests/" >&2
        suite "$VENV313" || status=1
        ha_tests || status=1
        exit "$status"
        ;;
    addon)  # the add-on folder: addon/'s files, and dist/ with the wheel (this checkout's, or WHEEL) and its checksum
        dest="${2:?usage: ./run.sh addon DIR [WHEEL] (DIR: a folder in the local add-ons share, e.g. /addons/wyoming_wis)}"
        wheel="${3:-}"
        mkdir -p "$dest"
        [ "$dest" -ef addon ] || cp -R addon/. "$dest/"
        rm -rf "${dest:?}/dist"  # the wheel of an earlier build
        if [ -n "$wheel" ]; then
            mkdir "$dest/dist" && cp -- "$wheel" "$dest/dist/"
        else
            venv
            rm -rf build  # setuptools' staging folder: a file deleted here since the last build would stay in the wheel
            "$VENV/bin/python" -m pip wheel --quiet --no-deps --wheel-dir "$dest/dist" .
        fi
        (cd "$dest/dist" && sha256sum -- *.whl > SHA256SUMS)
        echo "Made $dest. In Home Assistant: the add-on store's menu > Check for updates, then Local add-ons >" \
            "wyoming-wis > Install (README.md, The add-on)" >&2
        ;;
    bench)  # each script installs its peer server into its own venv under bench/ once, then reuses it
        shift
        if [ "${1:-}" = abuse ]; then
            install bundled,dev,xtts  # its `clones` attack runs a second server with --xtts
        else
            install bundled,dev
        fi
        case "${1:-}" in
            asr|tts|rtc|soak|abuse|accuracy|paths|endpoint|realtime|ha_turns|ha_names|turn_signals|farfield|frontend|wake) script="bench/$1.py"; shift; exec "$VENV/bin/python" "$script" "$@" ;;
            "") "$VENV/bin/python" bench/asr.py && "$VENV/bin/python" bench/tts.py && exec "$VENV/bin/python" bench/rtc.py ;;
            *) echo "usage: ./run.sh bench [asr|tts|rtc|soak|abuse|accuracy|paths|endpoint|realtime|ha_turns|ha_names|turn_signals|farfield|frontend|wake] [FLAGS...]" >&2; exit 2 ;;
        esac
        ;;
    *)
        install bundled
        echo "Starting wyoming-wis (Ctrl+C stops it); it logs where it listens and how to add it to Home Assistant" >&2
        exec "$VENV/bin/wyoming-wis" "$@"
        ;;
esac
