"""Debian packages the integration tests need (podman, nginx, HAProxy, Prometheus), installed once.

The deployment tests run the infrastructure users have (issue 10): real podman, a real proxy,
a real Prometheus. CI starts on a machine with none of them, so a test asks for the packages
it needs with :func:`require_packages`; they are installed with apt-get (as root, or through
passwordless sudo), once per session, and the test skips saying why when that is impossible
(no root, no package index). Installing never starts the packages' services: the tests run
their own instances on free loopback ports with their own configuration files.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

import pytest

# the command each package provides: what tells that it is installed
COMMANDS = {
    "podman": "podman",
    "buildah": "buildah",
    "debootstrap": "debootstrap",
    "runc": "runc",
    "nginx": "nginx",
    "haproxy": "haproxy",
    "prometheus": "prometheus",
}


def _missing(packages: tuple[str, ...]) -> list[str]:
    return [
        p
        for p in packages
        if shutil.which(COMMANDS.get(p, p)) is None and not os.path.exists(f"/usr/sbin/{COMMANDS.get(p, p)}")
    ]


def _apt_prefix() -> list[str] | None:
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        return ["sudo", "-n"]
    return None


@functools.cache
def _install(packages: tuple[str, ...]) -> str:
    """'' when every package is there afterwards, else why not."""
    missing = _missing(packages)
    if not missing:
        return ""
    if shutil.which("apt-get") is None:
        return f"{', '.join(missing)} not installed and this machine has no apt-get"
    prefix = _apt_prefix()
    if prefix is None:
        return f"{', '.join(missing)} not installed and apt-get needs root (no passwordless sudo)"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = [*prefix, "apt-get", "install", "-y", "-q", *missing]
    proc = subprocess.run(install, capture_output=True, text=True, env=env, timeout=900)
    if proc.returncode != 0:  # a stale or empty package index on a fresh machine
        subprocess.run([*prefix, "apt-get", "update", "-q"], capture_output=True, env=env, timeout=600)
        proc = subprocess.run(install, capture_output=True, text=True, env=env, timeout=900)
    still = _missing(packages)
    if still:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        return f"apt-get install {' '.join(missing)} failed (rc {proc.returncode}): {tail}"
    return ""


def require_packages(*packages: str) -> None:
    """Install the Debian packages if needed; ``pytest.skip`` with the reason if impossible."""
    why = _install(tuple(sorted(packages)))
    if why:
        pytest.skip(why)
