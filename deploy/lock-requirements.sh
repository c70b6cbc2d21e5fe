#!/bin/bash
# Regenerate the image's hash-locked Python requirements from pyproject.toml:
#
#     deploy/lock-requirements.sh
#
#   deploy/requirements.lock        [project] dependencies: what the image's venv runs
#   deploy/requirements-build.lock  [build-system] requires: what builds fpgaserve's wheel in the
#                                   Containerfile's build stage (with --no-build-isolation, so
#                                   that nothing is downloaded without a hash; these packages
#                                   never reach the runtime image)
#
# Every package is pinned with the sha256 of each of its files on PyPI (--generate-hashes), and
# the Containerfile installs them with `pip install --require-hashes`: a file that differs from
# the one locked here (a compromised mirror, a re-uploaded release) fails the build.
#
# Resolved for the image's interpreter: CPython 3.11 on Linux (Debian bookworm's python3). The
# hashes cover every file of each pinned release (all platforms), so the lock also installs on
# arm64.
#
# Re-run after any change to the dependencies in pyproject.toml, and commit both files.
#
# The resolver is uv (installed into a scratch venv from PyPI, then removed), asked for PyPI
# itself: this machine's pip configuration (PIP_CONFIG_FILE, PIP_FIND_LINKS, a local mirror)
# and uv's own configuration files are ignored, so the hashes are those of PyPI's files, which
# every builder downloads, not those of a local wheel cache.
#
# Environment: PYTHON (the interpreter that makes the scratch venv; default python3),
# FPGASERVE_LOCK_INDEX (default https://pypi.org/simple).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
python=${PYTHON:-python3}
index=${FPGASERVE_LOCK_INDEX:-https://pypi.org/simple}
# uv is pinned so that a re-run with unchanged inputs writes the same files (the output
# format and the resolver's preferences change between releases); bump it deliberately
uv_version=0.13.9
python_version=3.11

log() { printf 'lock-requirements: %s\n' "$*" >&2; }

# nothing from this machine's package configuration (see above)
unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_NO_INDEX
for v in $(compgen -e); do
    case $v in UV_*) unset "$v" ;; esac
done
export PIP_CONFIG_FILE=/dev/null

scratch=$(mktemp -d "${TMPDIR:-/tmp}/fpgaserve-lock.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

log "installing uv $uv_version into a scratch venv from $index"
"$python" -m venv "$scratch/venv"
"$scratch/venv/bin/pip" install -q --disable-pip-version-check --index-url "$index" "uv==$uv_version"
uv="$scratch/venv/bin/uv"

compile=(
    "$uv" pip compile --quiet --no-config --no-cache
    --index-url "$index" --generate-hashes
    --python-version "$python_version" --python-platform linux
    --custom-compile-command "deploy/lock-requirements.sh"
)

cd "$repo"  # relative paths in the files' "# via" comments

log "deploy/requirements.lock from pyproject.toml [project] dependencies"
"${compile[@]}" pyproject.toml -o deploy/requirements.lock

# the build backend's requirements, as written in [build-system] requires
"$python" - >"$scratch/build-requirements.in" <<'EOF'
import tomllib

with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["build-system"]["requires"]))
EOF
log "deploy/requirements-build.lock from pyproject.toml [build-system] requires: $(tr '\n' ' ' <"$scratch/build-requirements.in")"
cp "$scratch/build-requirements.in" "$scratch/build-system-requires.txt"
(cd "$scratch" && "${compile[@]}" build-system-requires.txt -o "$here/requirements-build.lock")
log "done: $(grep -c '^[A-Za-z0-9]' deploy/requirements.lock) runtime and $(grep -c '^[A-Za-z0-9]' deploy/requirements-build.lock) build packages"
