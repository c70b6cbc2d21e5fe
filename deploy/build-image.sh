#!/bin/bash
# Build the fpgaserve OCI image with podman, without pulling any image from a registry.
#
#     sudo deploy/build-image.sh [TAG]        # TAG defaults to localhost/fpgaserve:latest
#
# 1. Installs podman, buildah, debootstrap and runc with apt-get if they are missing.
# 2. Base image (localhost/debian-minbase:bookworm, reused when it exists): a stock Debian
#    bookworm root file system, `debootstrap --variant=minbase bookworm` from the Debian
#    mirror apt is configured with (what debian:bookworm-slim holds), imported with
#    `podman import`. Skipped when FPGASERVE_BASE_IMAGE names another image (for instance
#    docker.io/library/debian:bookworm-slim where a registry is reachable).
# 3. `podman build -f deploy/Containerfile --build-arg BASE_IMAGE=<base>` of the repository:
#    the Containerfile installs the Debian packages with apt and the Python packages from
#    deploy/requirements.lock (hash-checked). pip reaches PyPI with the host's CA bundle,
#    mounted into the build steps only (never part of the image).
# 4. Prints the image's size (`podman image inspect --format '{{.Size}}'`) to stderr.
#
# Progress goes to stderr; the LAST line of stdout is the image name.
#
# Podman runs with the configuration of deploy/podman-env.sh (runc, ulimits within the
# host's hard limits, image storage in ${FPGASERVE_PODMAN_ROOT:-<repo>/.tools/podman}).
# Use the same to run the image:
#
#     eval "$(deploy/podman-env.sh)"
#     podman run --rm -p 8000-8002:8000-8002 localhost/fpgaserve:latest
#
# Environment:
#   FPGASERVE_PODMAN_ROOT    image storage and podman configuration (see podman-env.sh)
#   FPGASERVE_DEBIAN_MIRROR  Debian mirror for debootstrap (default: the one apt uses here,
#                            from /etc/apt/sources.list{,.d/*.list,.d/*.sources}); the base
#                            image's apt uses it too
#   FPGASERVE_BASE_IMAGE     base image (default localhost/debian-minbase:bookworm, made here)
#   FPGASERVE_REBUILD_BASE=1 make the base image again even if it exists
#   FPGASERVE_BUILD_NO_CACHE=1  build every Containerfile step again (no layer cache)
#
# Needs root (apt-get, debootstrap, rootful podman). After a build, the earlier builds of the
# image that are no longer tagged are removed (`podman image prune`, fpgaserve images only).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
tag=${1:-localhost/fpgaserve:latest}
default_base=localhost/debian-minbase:bookworm
base=${FPGASERVE_BASE_IMAGE:-$default_base}
suite=bookworm
# what the base image is, as a label: a base made by an older version of this script (with
# packages of its own) is not reused
base_kind="debootstrap --variant=minbase $suite"

log() { printf 'build-image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (apt-get, debootstrap and rootful podman need it)"

# -------------------------------------------------------------------------- 1. tools
missing=()
for p in podman buildah debootstrap runc; do
    command -v "$p" >/dev/null 2>&1 || [ -x "/usr/sbin/$p" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q "${missing[@]}" >&2; then
        apt-get update -q >&2  # a stale or empty package index on a fresh machine
        apt-get install -y -q "${missing[@]}" >&2
    fi
fi
export PATH="$PATH:/usr/sbin:/sbin"

eval "$("$here/podman-env.sh")"
# one build at a time per image store (a test session and a person, say): they would race
# for the base image's tag, and the prune below must not remove what another build uses
exec 9>"$(dirname "$CONTAINERS_STORAGE_CONF")/build.lock"
flock 9

# -------------------------------------------------------------------------- 2. base image
debian_mirror() {
    if [ -n "${FPGASERVE_DEBIAN_MIRROR:-}" ]; then
        echo "$FPGASERVE_DEBIAN_MIRROR"
        return
    fi
    local f uri
    # deb822 files: the first enabled "deb" stanza whose Suites has bookworm itself
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        uri=$(awk -v suite="$suite" '
            BEGIN { RS = ""; FS = "\n" }
            {
                types = ""; uris = ""; suites = ""; enabled = "yes"
                for (i = 1; i <= NF; i++) {
                    if ($i ~ /^[ \t]*#/ || !match($i, /^[A-Za-z-]+:/)) continue
                    key = tolower(substr($i, 1, RLENGTH - 1)); val = substr($i, RLENGTH + 1)
                    gsub(/^[ \t]+|[ \t]+$/, "", val)
                    if (key == "types") types = val
                    else if (key == "uris") uris = val
                    else if (key == "suites") suites = val
                    else if (key == "enabled") enabled = tolower(val)
                }
                if (enabled != "no" && (" " types " ") ~ / deb / && (" " suites " ") ~ (" " suite " ")) {
                    split(uris, u, /[ \t]+/); print u[1]; exit
                }
            }' "$f")
        if [ -n "$uri" ]; then echo "$uri"; return; fi
    done
    # one-line format: deb [options] URI SUITE COMPONENTS...
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        uri=$(awk -v suite="$suite" '
            $1 == "deb" {
                i = 2
                if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                if ($(i + 1) == suite) { print $i; exit }
            }' "$f")
        if [ -n "$uri" ]; then echo "$uri"; return; fi
    done
    echo http://deb.debian.org/debian
}

rootfs=""
cleanup_rootfs() {
    [ -n "$rootfs" ] && [ -d "$rootfs" ] || return 0
    # a debootstrap that failed half-way may leave /proc, /sys or /dev mounted inside:
    # unmount them first, and never let rm cross into another file system
    awk -v d="$rootfs" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/mounts | sort -r |
        while read -r m; do umount -l "$m" || true; done
    rm -rf --one-file-system "$rootfs"
}
trap cleanup_rootfs EXIT

if [ "$base" != "$default_base" ]; then
    log "base image $base (FPGASERVE_BASE_IMAGE; podman pulls it if it is not here)"
elif [ "${FPGASERVE_REBUILD_BASE:-0}" != 1 ] &&
    [ "$(podman image inspect --format '{{index .Labels "org.fpgaserve.base"}}' "$base" 2>/dev/null || true)" = "$base_kind" ]; then
    log "reusing base image $base"
else
    mirror=$(debian_mirror)
    start=$(date +%s)
    rootfs=$(mktemp -d "${TMPDIR:-/var/tmp}/fpgaserve-rootfs.XXXXXX")
    log "debootstrap --variant=minbase $suite from $mirror"
    debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >&2 \
        || die "debootstrap failed (see above; $rootfs/debootstrap/debootstrap.log)"
    # no downloaded packages or indexes in the image, nor this host's name and resolver
    # (podman provides /etc/hostname and /etc/resolv.conf to every container)
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/debootstrap
    rm -f "$rootfs/etc/hostname" "$rootfs/etc/resolv.conf"
    tar --numeric-owner -C "$rootfs" -c . |
        podman import --change "LABEL org.fpgaserve.base=$base_kind" \
            --change 'CMD ["/bin/bash"]' - "$base" >&2
    cleanup_rootfs
    rootfs=""
    log "base image $base made in $(($(date +%s) - start)) s"
fi

# -------------------------------------------------------------------------- 3. the image
start=$(date +%s)
# --network host: RUN steps (apt, pip) use the host's network as it is (no bridge or
# firewall set-up needed); the Containerfile itself needs nothing podman-specific
build=(podman build --network host --build-arg "BASE_IMAGE=$base" -f "$here/Containerfile" -t "$tag")
if [ "$base" = "$default_base" ]; then
    build+=(--pull=never)  # made above; "localhost/" is no registry to ask
fi
ca=/etc/ssl/certs/ca-certificates.crt
if [ -f "$ca" ]; then
    # the host's CA bundle for pip in the build steps only (a proxy's CA may be in it); beside
    # the image's own bundle, which apt's ca-certificates writes in the first step
    build+=(-v "$ca:/run/fpgaserve-build-ca.crt:ro" --build-arg PIP_CERT=/run/fpgaserve-build-ca.crt)
fi
if [ "${FPGASERVE_BUILD_NO_CACHE:-0}" = 1 ]; then
    build+=(--no-cache)
fi
log "${build[*]} $repo"
"${build[@]}" "$repo" >&2
log "image $tag built in $(($(date +%s) - start)) s"
# earlier builds of the image that lost their tag to this one (each holds a copy of the
# venv); the build stage's cached layers stay, and so does any image a container still uses
podman image prune -f --filter label=org.opencontainers.image.title=fpgaserve >&2 || true
# the size podman reports for the image: every layer, the base's included (uncompressed)
size=$(podman image inspect --format '{{.Size}}' "$tag")
log "image $tag size: $size bytes ($((size / 1000000)) MB), from podman image inspect --format '{{.Size}}' $tag"
echo "$tag"
