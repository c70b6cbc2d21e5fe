#!/bin/sh
# Podman configuration that works on the project's machines, kept out of the system's.
#
#     eval "$(deploy/podman-env.sh)"      # then podman build/run/images/... as usual
#
# Writes (idempotently) a containers.conf and a storage.conf under
# ${FPGASERVE_PODMAN_ROOT:-<repo>/.tools/podman} and prints the two `export` lines that point
# podman (and buildah) at them. Everything that uses the fpgaserve image -- build-image.sh,
# tests/deployment/test_image.py, a person running the container by hand -- must use the same two
# variables, or it sees another image store.
#
# Why not podman's defaults:
#  * crun (podman's default runtime) refuses this host's hybrid cgroup layout: use runc;
#  * the default ulimits ask for more open files than the host's hard limit, so every
#    container fails to start: nofile is set to the hard limit of the caller (`ulimit -Hn`);
#  * images stay in a directory of our own instead of /var/lib/containers.
#
# Environment: FPGASERVE_PODMAN_ROOT (storage and config directory),
# FPGASERVE_PODMAN_DRIVER (storage driver: overlay, the default, or vfs where overlay mounts
# are impossible; changing it needs an empty storage directory).
# Rootful podman only (build-image.sh needs root for apt-get and debootstrap anyway).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
root=${FPGASERVE_PODMAN_ROOT:-$repo/.tools/podman}
driver=${FPGASERVE_PODMAN_DRIVER:-overlay}
mkdir -p "$root/storage"
root=$(cd "$root" && pwd)

# Run-time state (locks, container state, the network namespace files) belongs on a tmpfs
# that a reboot clears, as /run is on most machines; podman resets its state when it finds
# the directory empty. One directory per storage root, so two checkouts never share it.
tag=$(printf '%s' "$root" | cksum | cut -d' ' -f1)
runroot=${FPGASERVE_PODMAN_RUNROOT:-/run/fpgaserve-podman/$tag}
mkdir -p "$runroot/libpod"

nofile=$(ulimit -Hn)
if [ "$nofile" = unlimited ]; then
    nofile=1048576
fi

write_if_changed() {  # path, content: rewrite only when different (keeps mtimes quiet)
    if [ ! -f "$1" ] || [ "$(cat "$1")" != "$2" ]; then
        printf '%s\n' "$2" >"$1.tmp.$$"
        mv "$1.tmp.$$" "$1"
    fi
}

write_if_changed "$root/containers.conf" "# written by deploy/podman-env.sh
[containers]
default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=32768:32768\"]
log_driver = \"k8s-file\"

[engine]
runtime = \"runc\"
cgroup_manager = \"cgroupfs\"
events_logger = \"file\"
tmp_dir = \"$runroot/libpod\""

write_if_changed "$root/storage.conf" "# written by deploy/podman-env.sh
[storage]
driver = \"$driver\"
graphroot = \"$root/storage\"
runroot = \"$runroot/storage\""

# single-quoted for eval (a storage path with a single quote in it is not supported)
printf "export CONTAINERS_CONF='%s'\n" "$root/containers.conf"
printf "export CONTAINERS_STORAGE_CONF='%s'\n" "$root/storage.conf"
