#!/usr/bin/env bash
# The environments of the Home Assistant suites (tests/ha), built once into a cache outside the checkout:
#   tests/ha/env.sh HA_VERSION   make (or reuse) the venv that runs those tests on that Home Assistant version;
#                                print its path (progress goes to stderr)
# The versions, each through pytest-homeassistant-custom-component (its `hass` fixture) in a venv of its own:
#   2026.2.3  (0.13.316) needs Python >= 3.13.2, which Debian bookworm lacks: python313 builds Python 3.13 from
#             Debian trixie's source package python3.13, fetched with `apt-get source` through an apt
#             configuration of its own (the system's sources are left alone)
#   2024.3.3  (0.13.109) runs on this machine's Python 3 (3.11), the older, non-streaming TTS path
# The cache is ${WIS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wyoming-wis}; a stamp beside each build says what
# it was built from, so a second run reuses it. Delete the cache to build everything again (about 8 min on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/../.."

CACHE="${WIS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wyoming-wis}"
DEBIAN_MIRROR="${WIS_DEBIAN_MIRROR:-http://deb.debian.org}"  # serves debian/ and debian-security/
# What the built Python needs from Debian bookworm: the compiler, and the headers of the modules Home
# Assistant imports (ssl, sqlite3, ctypes, bz2, lzma, zlib, readline, dbm, uuid, curses)
BUILD_DEPS=(build-essential pkg-config dpkg-dev xz-utils libssl-dev libffi-dev zlib1g-dev libsqlite3-dev libbz2-dev
            liblzma-dev libreadline-dev libgdbm-dev libgdbm-compat-dev uuid-dev libncurses-dev)

log() { echo "tests/ha/env.sh: $*" >&2; }

apt_install() {  # apt_install PACKAGE...: install those of the Debian packages that are missing
    local missing=() package sudo=""
    for package in "$@"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
    done
    [ ${#missing[@]} -eq 0 ] && return
    command -v apt-get >/dev/null || { log "install ${missing[*]} (apt-get is not here)"; exit 1; }
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    log "installing ${missing[*]} from Debian"
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

python313() {  # python313: the path of Python 3.13, built once from Debian trixie's source package python3.13
    local prefix="$CACHE/python3.13" recipe="trixie python3.13, orig tarball + series *.patch, configure --prefix"
    local python="$prefix/bin/python3.13" check='import bz2, ctypes, lzma, readline, sqlite3, ssl, uuid, zlib'
    if [ "$(cat "$prefix/.wis-built" 2>/dev/null)" = "$recipe" ] && "$python" -c "$check" 2>/dev/null; then
        echo "$python"
        return
    fi
    apt_install "${BUILD_DEPS[@]}"
    local work="$CACHE/build-python3.13"
    local apt="$work/apt"
    rm -rf "$work" "$prefix"
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/state" "$work/src"
    touch "$apt/state/status"
    # deb-src lines for trixie and its security updates; apt picks the newest python3.13 of the two
    local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    printf 'deb-src [signed-by=%s] %s trixie main\n' "$keyring" "$DEBIAN_MIRROR/debian" > "$apt/sources.list"
    printf 'deb-src [signed-by=%s] %s trixie-security main\n' "$keyring" "$DEBIAN_MIRROR/debian-security" \
        >> "$apt/sources.list"
    local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
                -o "Dir::State=$apt/state" -o "Dir::State::Lists=$apt/lists" -o "Dir::State::status=$apt/state/status"
                -o "Dir::Cache=$apt/cache" -o APT::Sandbox::User="$(id -un)" -qq)
    log "fetching Debian trixie's source package python3.13"
    apt-get "${opts[@]}" update >&2
    # apt checks each file against the signed Sources index; --download-only: no dpkg-source, whose Debian
    # patches (*.diff in debian/patches/series) re-lay Python for Debian's own paths (dist-packages, multiarch)
    (cd "$work/src" && apt-get "${opts[@]}" source --download-only python3.13 >/dev/null)
    tar -xf "$work"/src/python3.13_*.orig.tar.xz -C "$work"
    tar -xf "$work"/src/python3.13_*.debian.tar.xz -C "$work"
    local source patch
    source="$(find "$work" -maxdepth 1 -type d -name 'Python-3.13.*')"
    log "building $(basename "$source") ($(basename "$work"/src/*.dsc .dsc)) into $prefix, about 6 min"
    # the upstream fixes Debian carries (CVE backports and crash fixes) are the series' *.patch entries
    while read -r patch; do
        patch -d "$source" -p1 -s --forward < "$work/debian/patches/$patch"
    done < <(grep -E '^[^#].*\.patch$' "$work/debian/patches/series")
    if ! (cd "$source" && ./configure --prefix="$prefix" && make -j"$(nproc)" && make install) \
        > "$work/build.log" 2>&1; then
        tail -n 40 "$work/build.log" >&2
        log "building Python failed; the whole log is $work/build.log"
        exit 1
    fi
    "$python" -c "$check" || { log "the built Python lacks a module Home Assistant needs"; exit 1; }
    basename "$work"/src/*.dsc .dsc > "$prefix/.wis-source"  # the Debian version it was built from, for people
    echo "$recipe" > "$prefix/.wis-built"
    rm -rf "$work"
    echo "$python"
}

ha_venv() {  # ha_venv HA_VERSION: the path of the venv with that Home Assistant, made or reused
    local version="$1" phcc python pythons pins=()
    case "$version" in
        2026.2.3) phcc=0.13.316; python="$(python313)"; pythons="3.13" ;;
        # HA 2024.3's http imports hass-nabucasa, whose acme (unpinned: pip takes 2.8) needs josepy 1's ComparableX509
        2024.3.3) phcc=0.13.109; python="${PYTHON:-python3}"; pythons="3.11 3.12"; pins=("josepy<2") ;;
        *) log "no Home Assistant $version here (2026.2.3 or 2024.3.3)"; exit 2 ;;
    esac
    case " $pythons " in
        *" $("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])') "*) ;;
        *) log "Home Assistant $version needs Python $pythons; $python is $("$python" -V 2>&1)"; exit 1 ;;
    esac
    local venv="$CACHE/ha-$version" want
    # keyed on what goes in: the test plugin's version, pins, the Python, and the integrations whose requirements it adds
    want="$(printf '%s\n' "$phcc" "${pins[@]}" "$("$python" -VV)" "$(cat tests/ha/requirements.py)" | sha256sum | cut -d' ' -f1)"
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
    installed="$("$venv/bin/python" -c 'import homeassistant.const as c; print(c.__version__)')"
    [ "$installed" = "$version" ] || { log "pytest-homeassistant-custom-component $phcc brought HA $installed"; exit 1; }
    # Core integrations' own requirements (wyoming, hassil, mutagen, ...) are not in the homeassistant package:
    # Home Assistant pip-installs them when it sets one up, which tests skip. Install them here, pinned as HA pins.
    "$venv/bin/python" tests/ha/requirements.py > "$venv/integration-requirements.txt"
    local constraints
    constraints="$("$venv/bin/python" -c 'import homeassistant, pathlib; print(pathlib.Path(homeassistant.__file__).parent)')"
    "$venv/bin/python" -m pip install --quiet --quiet -r "$venv/integration-requirements.txt" "${pins[@]}" \
        -c "$constraints/package_constraints.txt" >&2
    echo "$want" > "$venv/.wis-installed"
    echo "$venv"
}

[ $# -eq 1 ] || { echo "usage: tests/ha/env.sh HA_VERSION" >&2; exit 2; }
ha_venv "$1"
