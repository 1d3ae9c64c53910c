#!/usr/bin/env bash
# Python 3.13, for the main suite's second run (./run.sh test) and Home Assistant 2026.2 (tests/ha/env.sh):
#   tests/python313.sh   build it once (or reuse it); print the path of its python3.13 (progress goes to stderr)
# Debian bookworm has no Python 3.13, and the add-on's base image (Debian trixie) has 3.13.5: this builds that one,
# from trixie's source package python3.13, fetched with `apt-get source` through an apt configuration of its own
# (the system's sources are left alone). It goes to ${WIS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wyoming-wis}/
# python3.13, with a stamp saying what it was built from, so a second run reuses it (the build takes about 6 min on
# 2 cores). Delete that folder to build it again.
set -euo pipefail
# apt_install, apt_of_its_own, apt_get
# shellcheck source=/dev/null
source "$(dirname "$0")/debian.sh"

CACHE="${WIS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wyoming-wis}"
# What the built Python needs from Debian bookworm: the compiler, and the headers of the modules Home
# Assistant imports (ssl, sqlite3, ctypes, bz2, lzma, zlib, readline, dbm, uuid, curses)
BUILD_DEPS=(build-essential pkg-config dpkg-dev xz-utils libssl-dev libffi-dev zlib1g-dev libsqlite3-dev libbz2-dev
            liblzma-dev libreadline-dev libgdbm-dev libgdbm-compat-dev uuid-dev libncurses-dev)

log() { echo "tests/python313.sh: $*" >&2; }

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
    mkdir -p "$work/src"
    log "fetching Debian trixie's source package python3.13"
    # deb-src lines for trixie and its security updates; apt picks the newest python3.13 of the two
    apt_of_its_own "$apt" "deb-src debian trixie main" "deb-src debian-security trixie-security main"
    # apt checks each file against the signed Sources index; --download-only: no dpkg-source, whose Debian
    # patches (*.diff in debian/patches/series) re-lay Python for Debian's own paths (dist-packages, multiarch)
    (cd "$work/src" && apt_get "$apt" source --download-only python3.13 >/dev/null)
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

[ $# -eq 0 ] || { echo "usage: tests/python313.sh" >&2; exit 2; }
python313
