"""Repository agents named in a model's ``model_repository_agents`` block, run at load.

tritonserver loads agents as shared libraries from ``--repoagent-directory``; CMS's Triton
build ships one, ``checksum``, and SonicTriton configs carry its block::

    model_repository_agents { agents [ { name: "checksum"
        parameters [ { key: "MD5:1/model.onnx" value: "<32 hex digits>" } ] } ] }

Before a model loads, the checksum agent hashes each named file (relative to the model's
directory) and fails the load when a digest differs, so a tampered or half-copied model never
serves. This module is that agent, built in, with the Triton agent's rules and texts:

* key ``<algorithm>:<path>``: the algorithm is case-insensitive and only MD5 is known. Other
  algorithms fail with ``Unsupported checksum algorithm: X``, and a key with no ``:`` fails
  with ``failed to parse key: K``.
* the value is compared with the lower-case hex digest exactly. A mismatch fails with
  ``Mismatched MD5 hash for file P, expect: V, got: D``.
* a file that cannot be read fails with ``failed to open text file for read P: <strerror>``.

Stricter than Triton's agent, because a config is client input (RepositoryModelLoad
overrides):

* the path must stay inside the model directory (no ``..``, no absolute path, no symlink out);
* only regular files are hashed (a FIFO would block the load);
* files are streamed, never read whole.

Any other agent name fails the load: tritonserver also refuses a model whose agent it cannot
find, and serving a model whose required check was skipped would be the worse error.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

__all__ = ["AGENTS", "RepositoryAgentError", "run_load_agents"]

_CHUNK = 1 << 20


class RepositoryAgentError(Exception):
    """An agent refused the load; the text is the agent's."""


def _checksum(model_dir: Path, parameters: dict[str, str]) -> None:
    root = model_dir.resolve()
    for key, expected in parameters.items():
        algorithm, sep, relative = key.partition(":")
        if not sep:
            raise RepositoryAgentError(f"failed to parse key: {key}")
        if algorithm.lower() != "md5":
            raise RepositoryAgentError(f"Unsupported checksum algorithm: {algorithm}")
        digest = _md5_of(root, relative)
        if digest != expected:
            raise RepositoryAgentError(f"Mismatched MD5 hash for file {relative}, expect: {expected}, got: {digest}")


def _md5_of(root: Path, relative: str) -> str:
    def refuse(why: str) -> RepositoryAgentError:
        return RepositoryAgentError(f"failed to open text file for read {relative}: {why}")

    if not relative or "\0" in relative or os.path.isabs(relative):
        raise refuse("the path must be relative to the model directory")
    path = (root / relative).resolve()
    if path != root and root not in path.parents:
        raise refuse("the path leaves the model directory")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise refuse(e.strerror or str(e)) from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise refuse("not a regular file")
        h = hashlib.md5(usedforsecurity=False)
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


#: agent name -> action at load (model directory, the block's parameters)
AGENTS = {"checksum": _checksum}


def run_load_agents(config, model_dir: Path) -> None:
    """Run every agent of ``config.model_repository_agents`` for a load of ``model_dir``, in
    the block's order; ``RepositoryAgentError`` from the first that refuses."""
    for agent in config.model_repository_agents.agents:
        action = AGENTS.get(agent.name)
        if action is None:
            known = ", ".join(sorted(AGENTS))
            raise RepositoryAgentError(f"unknown repository agent '{agent.name}' (this server has: {known})")
        action(model_dir, dict(agent.parameters))
