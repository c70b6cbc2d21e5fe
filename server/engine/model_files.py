"""What a model repository's folders hold, read when a model loads: the model folders of the
repositories, a folder's version folders and the ones its version policy selects, its label
files, the signature poll mode compares, and the files a load request uploads.

Layout: ``<repo>/<model>/config.pbtxt`` and numeric version folders ``<repo>/<model>/<n>/``
(names starting with "0" are ignored, like Triton). Every name read from a config or a client
stays inside its model's folder.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

from fpgaserve.backends import BackendError
from fpgaserve.backends.base import path_inside

from .. import model_config as mc
from ..errors import escape_control, internal, invalid_argument

log = logging.getLogger("fpgaserve.repository")


def scan(paths: list[Path], owns=None) -> dict[str, Path]:
    """The model folders of the repositories ``paths``, by model name (the first repository
    that has a name wins, as in Triton); with ``owns`` (name, folder) -> bool, only those it
    owns (``--engine-processes``: the models placed on this engine process)."""
    found: dict[str, Path] = {}
    for repo in paths:
        if not repo.is_dir():
            log.error("model repository %s does not exist", repo)
            continue
        for child in sorted(repo.iterdir()):
            if child.is_dir() and not child.name.startswith("."):
                if child.name in found:
                    log.error("model '%s' appears in more than one repository; using %s", child.name, found[child.name])
                    continue
                found[child.name] = child
    if owns is not None:
        found = {name: path for name, path in found.items() if owns(name, path)}
    return found


def read_labels(model_dir: Path, config) -> dict[str, list[str]]:
    """Each output's label_filename (relative to the model directory, and inside it), read at
    load: a missing or escaping label file is a load error, and requests never touch the disk."""
    labels: dict[str, list[str]] = {}
    for out in config.output:
        name = out.label_filename
        if not name or name in labels:
            continue
        try:
            path = path_inside(model_dir, model_dir, name, f"output '{out.name}' label_filename")
        except BackendError as e:
            raise mc.ConfigError(str(e)) from None
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                labels[name] = [line.rstrip("\n") for line in f]
        except OSError as e:
            raise mc.ConfigError(f"output '{out.name}' label_filename '{name}' cannot be read: {e.strerror}") from None
    return labels


def dir_signature(model_dir: Path) -> str:
    """Hash of names, sizes and mtimes of every file under a model folder (poll mode)."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(model_dir):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(root, f)
            try:
                st = os.stat(p)
            except OSError:
                continue
            h.update(f"{os.path.relpath(p, model_dir)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def available_versions(model_dir: Path) -> list[int]:
    versions = []
    for child in model_dir.iterdir():
        if child.is_dir() and child.name.isdigit() and not child.name.startswith("0"):
            versions.append(int(child.name))
    return sorted(versions)


def select_versions(config, available: list[int], source: str) -> list[int]:
    policy = config.version_policy
    kind = policy.WhichOneof("policy_choice")
    if kind == "all":
        chosen = list(available)
    elif kind == "specific":
        missing = [v for v in policy.specific.versions if v not in available]
        if missing:
            raise mc.ConfigError(f"{source}: version_policy requests versions {missing} that do not exist")
        chosen = sorted(set(policy.specific.versions))
    else:
        n = policy.latest.num_versions if kind == "latest" else 1
        chosen = available[-n:] if available else []
    if not chosen:
        raise mc.ConfigError(f"{source}: no version folder to load (expected numeric folders such as 1/)")
    return chosen


# Triton's AutoCompleteBackendFields: a config naming neither platform nor backend (e.g. a
# RepositoryModelLoad override such as {"max_batch_size": 16}) gets them from the model file
# found in the newest version folder.


class TempDirReaper:
    """Removes a replaced model's uploaded files once its versions have drained."""

    def __init__(self, path: str):
        self.path = path

    def reap(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def materialize_files(name: str, files: dict[str, bytes]) -> str:
    """Write RepositoryModelLoad ``file:<version>/<name>`` contents into a private folder.

    Each path must stay inside it: relative, no '..' or empty components, no control
    characters. Files are created fresh (O_EXCL, no symlink followed)."""
    root = tempfile.mkdtemp(prefix="fpgaserve-load-")
    try:
        for rel, data in files.items():
            parts = rel.split("/")
            if (
                not rel
                or rel.startswith("/")
                or any(p in ("", ".", "..") for p in parts)
                or any(c < " " or c in "\\\x7f" for c in rel)
            ):
                raise invalid_argument(
                    f"failed to load '{name}', invalid file path '{escape_control(rel)}' in load parameters"
                )
            path = os.path.join(root, *parts)
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            except OSError as e:
                # a name longer than the file system takes (Triton's model_control example sends
                # 256 characters), a full disk: tritonserver's text and status for a load whose
                # files cannot be written, then the system's reason
                raise internal(
                    f"failed to load '{name}', failed to poll from model repository: cannot write file "
                    f"'{escape_control(rel)[:300]}': {e.strerror or 'error'}"
                ) from None
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root
