# shellcheck shell=bash
# What tests/python313.sh and tests/python314.sh share (they source it): Debian packages installed on this machine,
# and packages of another Debian release fetched through an apt configuration of their own, in a folder of theirs
# (the system's sources, lists and cache are left alone). The sourcing script defines log.

DEBIAN_MIRROR="${WIS_DEBIAN_MIRROR:-http://deb.debian.org}"  # serves debian/ and debian-security/
DEBIAN_KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

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

apt_of_its_own() {  # apt_of_its_own DIR SOURCE...: an apt configuration in DIR, its indexes fetched, whose sources
                    # are the SOURCEs ("deb-src debian trixie main": a sources.list line with the mirror's folder for
                    # its URI, signed by Debian's archive keys)
    local dir="$1" source type rest
    shift
    mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/state"
    touch "$dir/state/status"  # nothing installed: apt resolves dependencies as for an empty system
    for source in "$@"; do
        read -r type rest <<< "$source"
        echo "$type [signed-by=$DEBIAN_KEYRING] $DEBIAN_MIRROR/$rest"
    done > "$dir/sources.list"
    apt_get "$dir" update >&2
}

apt_get() {  # apt_get DIR ARG...: apt-get with the configuration apt_of_its_own made in DIR
    local dir="$1"
    shift
    apt-get -o "Dir::Etc::SourceList=$dir/sources.list" -o Dir::Etc::SourceParts=/dev/null \
        -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null \
        -o "Dir::State=$dir/state" -o "Dir::State::Lists=$dir/lists" -o "Dir::State::status=$dir/state/status" \
        -o "Dir::Cache=$dir/cache" -o APT::Sandbox::User="$(id -un)" -qq "$@"
}
