"""What pyproject.toml declares against what the code does (issue 22).

* Every third-party module that server/, backends/, pack/ and protos/ import is a declared
  dependency: imports at module level in the base dependencies (they load with the server),
  lazy ones (inside a function: optional features) in the base or in the extra of their feature.
* The private aiohttp state server/frontends/http_listener.py reads exists in the installed aiohttp (the
  reason aiohttp is pinned to a minor release): a new release that renames it fails here, at
  once, rather than in the connection handling.
* fpgaserve.protos loads the descriptors the build compiled and refuses, naming the build
  command, when they are missing or were compiled from other .proto contents.

Unit tests, no server: a second or two.
"""

from __future__ import annotations

import ast
import asyncio
import functools
import importlib.metadata
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.server_process import ROOT

tomllib = pytest.importorskip("tomllib", reason="tomllib (Python 3.11+) reads pyproject.toml")

SCANNED = ("server", "backends", "pack", "protos")

# Imported by the code but not a PyPI distribution, with the reason.
# modules fpgaserve itself ships outside its package: the Python backend's
# triton_python_backend_utils, put on sys.path only in a model's instance process
SHIPPED = {path.stem for path in (ROOT / "backends" / "python" / "stub").glob("*.py")}

NOT_ON_PYPI = {
    # XRT's own Python binding, installed with XRT (/opt/xilinx/xrt/python); the card runtime
    # imports it only with --fpga-mode hardware on an XRT host
    "pyxrt",
}

# Optional features: a lazily imported module that is not a base dependency must be listed here,
# with the extras that must each declare it (the extra a user installs for that feature).
OPTIONAL_IMPORTS = {
    "pynq": {"card"},  # --fpga-mode hardware through PYNQ
    "torch": {"pack", "keras"},  # pack --pytorch; Keras 3's torch backend
    "keras": {"keras"},  # pack --keras
    "qonnx": {"qonnx"},  # pack --onnx of QONNX models
    "onnx": {"pack", "qonnx"},  # pack's ONNX export and QONNX graphs
}


def _name(requirement: str) -> str:
    """The PEP 503-normalised distribution name at the start of a requirement string."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {_name(r) for r in project["dependencies"]}
    extras = {extra: {_name(r) for r in reqs} for extra, reqs in project["optional-dependencies"].items()}
    return base, extras


@functools.cache
def _third_party_imports() -> list[tuple[str, str, bool]]:
    """(file, top-level module, imported at module level) for every absolute import of a module
    outside the standard library and fpgaserve. Module level includes imports under a top-level
    ``try``/``if`` (they run at import too)."""
    found = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            eager = set()
            for stmt in tree.body:
                nodes = ast.walk(stmt) if isinstance(stmt, (ast.Try, ast.If)) else [stmt]
                eager.update(id(n) for n in nodes if isinstance(n, (ast.Import, ast.ImportFrom)))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    top = module.split(".")[0]
                    if top in sys.stdlib_module_names or top == "fpgaserve" or top in SHIPPED:
                        continue
                    found.append((str(path.relative_to(ROOT)), top, id(node) in eager))
    return found


@functools.cache
def _installed() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()  # a scan of every installed distribution


def _distributions(top: str) -> set[str]:
    """The installed distributions that provide import name ``top`` (several for namespace
    packages such as google or opentelemetry); the import name itself when none is installed
    here (pynq lives only in the PYNQ venv)."""
    provided = _installed().get(top)
    return {_name(d) for d in provided} if provided else {_name(top)}


def test_scan_sees_the_imports():
    """The scan itself works: it finds imports that are known to be there."""
    found = {(f, top, eager) for f, top, eager in _third_party_imports()}
    assert ("server/frontends/http.py", "aiohttp", True) in found
    assert ("pack/from_pytorch.py", "torch", False) in found


def test_module_level_imports_are_base_dependencies():
    base, _ = _declared()
    missing = sorted(
        f"{file}: {top} (from {sorted(_distributions(top))})"
        for file, top, eager in _third_party_imports()
        if eager and top not in NOT_ON_PYPI and not _distributions(top) & base
    )
    assert not missing, f"imported at module level but not in [project] dependencies: {missing}"


def test_lazy_imports_are_declared_in_their_extras():
    base, extras = _declared()
    problems = []
    for file, top, eager in _third_party_imports():
        dists = _distributions(top)
        if eager or top in NOT_ON_PYPI or dists & base:
            continue
        if top not in OPTIONAL_IMPORTS:
            problems.append(f"{file}: {top} is neither a base dependency nor in OPTIONAL_IMPORTS (which extra?)")
            continue
        for extra in sorted(OPTIONAL_IMPORTS[top]):
            if not dists & extras.get(extra, set()):
                problems.append(f"{file}: {top} is not in the {extra!r} extra")
    assert not problems, sorted(set(problems))


def test_every_optional_import_is_still_imported():
    """OPTIONAL_IMPORTS and NOT_ON_PYPI list nothing the code no longer imports."""
    imported = {top for _, top, _ in _third_party_imports()}
    assert set(OPTIONAL_IMPORTS) | NOT_ON_PYPI <= imported, (set(OPTIONAL_IMPORTS) | NOT_ON_PYPI) - imported


def test_aiohttp_private_state_that_http_reads_exists():
    """server/frontends/http_listener.py's _Connection and _Server read these; pyproject.toml pins aiohttp
    to the minor release that has them."""
    from aiohttp import web
    from aiohttp.web_protocol import RequestHandler

    slots = {name for cls in RequestHandler.__mro__ for name in getattr(cls, "__slots__", ())}
    wanted = {"_manager", "_loop", "_request_in_progress", "_messages", "_request_count"}
    assert wanted <= slots, f"aiohttp {importlib.metadata.version('aiohttp')} lacks {sorted(wanted - slots)}"

    async def server_state() -> set[str]:
        server = web.Server(lambda request: web.Response())
        return {name for name in ("_loop", "_kwargs") if hasattr(server, name)}

    assert asyncio.run(server_state()) == {"_loop", "_kwargs"}


# ----------------------------------------------------------------------------- protos


def _import_protos(root: Path) -> subprocess.CompletedProcess:
    """Import fpgaserve.protos from ``root/fpgaserve/protos`` in a fresh interpreter (PYTHONPATH
    comes before an installed fpgaserve's finder)."""
    code = "import fpgaserve.protos as p; print(p.__file__); print(p.inference.ModelInferRequest.DESCRIPTOR.full_name)"
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(root)}
    )


def test_protos_load_the_built_descriptors_and_refuse_stale_or_missing_ones(tmp_path):
    built = sorted((ROOT / "protos").glob("descriptors-*.binpb"))
    if not built:
        pytest.skip("this checkout's protos were never built (python setup.py build_protos)")
    package = tmp_path / "fpgaserve" / "protos"
    package.mkdir(parents=True)
    for path in [ROOT / "protos" / "__init__.py", *sorted((ROOT / "protos").glob("*.proto")), *built]:
        shutil.copy(path, package)

    ok = _import_protos(tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == [str(package / "__init__.py"), "inference.ModelInferRequest"]

    # a .proto edited after the build: its descriptors are not loaded
    with open(package / "health.proto", "a") as f:
        f.write("\n// edited\n")
    stale = _import_protos(tmp_path)
    assert stale.returncode != 0
    assert "ImportError" in stale.stderr and "compiled from other .proto contents" in stale.stderr, stale.stderr
    assert "python setup.py build_protos" in stale.stderr, stale.stderr

    for path in package.glob("descriptors-*.binpb"):
        path.unlink()
    missing = _import_protos(tmp_path)
    assert "never built" in missing.stderr and "python setup.py build_protos" in missing.stderr, missing.stderr
