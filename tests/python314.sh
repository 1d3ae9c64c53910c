#!/usr/bin/env bash
# Python 3.14, for Home Assistant 2026.11 (tests/ha/env.sh), which needs Python >= 3.14.2:
#   tests/python314.sh   make it once (or reuse it); print the path of its python3.14 (progress goes to stderr)
# Debian bookworm has no Python 3.14, and Debian sid's source packages are not served here, but its binary packages
# are: this downloads sid's python3.14-venv and every package it depends on in sid (as apt resolves them for an
# empty system, through an apt configuration of its own; the system's sources are left alone), and the C headers
# (libpython3.14-dev), unpacks them into ${WIS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wyoming-wis}/python3.14
# and makes the interpreter run with sid's loader and libraries (patchelf). A stamp says how it was made and from
# which packages, so a second run reuses it (the first takes well under a minute). Delete that folder to make it
# again, from whatever sid has then.
set -euo pipefail
# apt_install, apt_of_its_own, apt_get
# shellcheck source=/dev/null
source "$(dirname "$0")/debian.sh"

CACHE="${WIS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wyoming-wis}"
# patchelf, and the compiler for the packages without wheels for 3.14 (HA 2026.11's pymicro-vad, pyspeex-noise)
TOOLS=(patchelf build-essential)

log() { echo "tests/python314.sh: $*" >&2; }

python314() {  # python314: the path of Python 3.14, made once from Debian sid's binary packages
    local root="$CACHE/python3.14"
    local recipe="sid python3.14-venv and its dependencies + libpython3.14-dev, dpkg-deb -x, patchelf (loader, RPATH)"
    local python="$root/usr/bin/python3.14" check='import bz2, ctypes, lzma, readline, sqlite3, ssl, uuid, zlib, venv'
    check+='; import sys; assert sys.version_info >= (3, 14, 2), sys.version'  # Home Assistant 2026.11's least
    if [ "$(head -n 1 "$root/.wis-built" 2>/dev/null)" = "$recipe" ] && "$python" -c "$check" 2>/dev/null; then
        echo "$python"
        return
    fi
    apt_install "${TOOLS[@]}"
    local work="$CACHE/build-python3.14"
    local apt="$work/apt" packages=()
    rm -rf "$work" "$root"
    mkdir -p "$work/debs" "$root"
    log "fetching Debian sid's python3.14"
    apt_of_its_own "$apt" "deb debian sid main"
    # every package apt would install on an empty system (libc6 and the libraries of ssl, sqlite3, ctypes, ...:
    # bookworm's are older than those sid's python3.14 was built against), and the headers (not their dependencies)
    mapfile -t packages < <(apt_get "$apt" --simulate --no-install-recommends install python3.14-venv \
        | awk '$1 == "Inst" { print $2 }')
    [ ${#packages[@]} -gt 0 ] || { log "apt found no python3.14-venv in sid"; exit 1; }
    packages+=(libpython3.14-dev)
    # apt checks each file against the signed Packages index
    (cd "$work/debs" && apt_get "$apt" download "${packages[@]}")
    log "unpacking ${#packages[@]} packages of sid into $root"
    local deb
    for deb in "$work"/debs/*.deb; do
        dpkg-deb -x "$deb" "$root"
        echo "$(dpkg-deb --field "$deb" Package)=$(dpkg-deb --field "$deb" Version)" >> "$work/versions"
    done
    local lib="$root/usr/lib/x86_64-linux-gnu"
    # sid's loader, and sid's libraries before the system's: an RPATH (not RUNPATH) on the executable applies to
    # everything it loads, the extension modules in lib-dynload and their libraries (libssl, libffi, ...) too
    patchelf --set-interpreter "$lib/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$lib" "$python"
    # Debian's ensurepip takes pip from WHEEL_PKG_DIR, /usr/share/python-wheels: this machine's (bookworm's pip 23
    # fails on 3.14), or none. Point it at sid's (python3-pip-whl), so `python3.14 -m venv` brings pip.
    sed -i "s|'WHEEL_PKG_DIR': '/usr/share/python-wheels/'|'WHEEL_PKG_DIR': '$root/usr/share/python-wheels/'|" \
        "$root/usr/lib/python3.14/_sysconfigdata__linux_x86_64-linux-gnu.py"
    # Debian's include/python3.14/pyconfig.h includes <x86_64-linux-gnu/python3.14/pyconfig.h> from the system's
    # include path, which is bookworm's: the real one in its place
    cp "$root/usr/include/x86_64-linux-gnu/python3.14/pyconfig.h" "$root/usr/include/python3.14/pyconfig.h"
    "$python" -c "$check" || { log "sid's Python lacks a module Home Assistant needs"; exit 1; }
    if ! { "$python" -m venv "$work/venv" && "$work/venv/bin/python" -m pip --version >&2; }; then
        log "sid's Python makes no venv with pip"
        exit 1
    fi
    { echo "$recipe"; cat "$work/versions"; } > "$root/.wis-built"  # the packages' versions, for people
    rm -rf "$work"
    echo "$python"
}

[ $# -eq 0 ] || { echo "usage: tests/python314.sh" >&2; exit 2; }
python314
