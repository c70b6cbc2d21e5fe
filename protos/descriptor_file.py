"""Where the compiled wire schema lives: ``descriptors-<digest>.binpb`` beside the .proto files.

Shared by the build (setup.py's ``build_protos``, which loads this file by path: the package is
not importable while it is being built) and by ``fpgaserve.protos``, which loads the file at
import. Standard library only, for that reason.
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def proto_digest(proto_dir: Path) -> str:
    """First 16 hex digits of a SHA-256 over every ``*.proto`` in ``proto_dir`` (sorted by name;
    name and contents): descriptors compiled from other .proto contents are never loaded."""
    h = hashlib.sha256()
    for path in sorted(proto_dir.glob("*.proto")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def descriptor_path(proto_dir: Path) -> Path:
    """Where the build writes the descriptors of the .proto files now in ``proto_dir``."""
    return proto_dir / f"descriptors-{proto_digest(proto_dir)}.binpb"
