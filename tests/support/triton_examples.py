"""Where Triton's own Python example clients are (tests/protocol/test_*_triton_examples.py):
NVIDIA's scripts (triton-inference-server/client, src/python/examples), never committed here."""

from __future__ import annotations

import os
from pathlib import Path

from support.server_process import ROOT

# a script every copy of the examples has: the folder that holds it holds the others
MARKER = "simple_http_infer_client.py"


def examples_dir() -> Path | None:
    """``$FPGASERVE_TRITON_EXAMPLES`` or ``<repo>/.tools/triton-client-examples``, whichever holds the examples."""
    for candidate in (os.environ.get("FPGASERVE_TRITON_EXAMPLES"), ROOT / ".tools" / "triton-client-examples"):
        if candidate and Path(candidate, MARKER).is_file():
            return Path(candidate)
    return None
