# shellcheck shell=bash
# The bashio functions the add-on's scripts use, for tests/test_addon.py: the same semantics as bashio's
# lib/config.sh and lib/var.sh (options from $BASHIO_OPTIONS instead of /data/options.json), with the
# Supervisor call replaced by writing the payload bashio would POST to /discovery into $BASHIO_DISCOVERY.

bashio::config() {  # KEY [DEFAULT]: a string, true/false, a number, each item of a list on its own line, or null
    "${PYTHON:-python3}" - "$BASHIO_OPTIONS" "$1" "${2:-null}" <<'PY'
import json, sys
options, key, default = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
value = options.get(key)
if value is None:
    print(default)
elif isinstance(value, bool):
    sys.stdout.write("true" if value else "false")
elif isinstance(value, list):
    sys.stdout.write("\n".join(str(item) for item in value))
else:
    sys.stdout.write(str(value))
PY
}
bashio::config.true() { [[ "$(bashio::config "$1")" == "true" ]]; }
bashio::config.false() { [[ "$(bashio::config "$1")" == "false" ]]; }
bashio::config.has_value() {
    local value
    value="$(bashio::config "$1")"
    [[ "${value}" != "null" && -n "${value}" ]]
}
bashio::var.json() {  # KEY VALUE ...: a JSON object of strings (a value starting with ^ is raw JSON)
    "${PYTHON:-python3}" -c '
import json, sys
pairs = sys.argv[1:]
print("{" + ",".join(
    json.dumps(k) + ":" + (v[1:] if v.startswith("^") else json.dumps(v)) for k, v in zip(pairs[::2], pairs[1::2])
) + "}")' "$@"
}
bashio::discovery() {  # SERVICE CONFIG: what bashio POSTs to the Supervisor's /discovery
    bashio::var.json service "$1" config "^$2" > "$BASHIO_DISCOVERY"
    echo "stub-uuid"
}
bashio::log.info() { echo "INFO: $*" >&2; }
bashio::log.warning() { echo "WARNING: $*" >&2; }
bashio::log.error() { echo "ERROR: $*" >&2; }
