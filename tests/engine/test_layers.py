"""The source layout's rules, read from the imports (docs/architecture.md draws them).

Every import statement of every module of server/, backends/, pack/ and protos/ counts,
wherever it is: at module level, inside a function, under ``if TYPE_CHECKING:``. From them:

* no import circle among the modules (a package's ``__init__`` importing its modules, which
  import names of the package back, is one);
* each room imports only the rooms below it that ``MAY_IMPORT`` allows: frontends -> data
  plane -> engine -> backend contract <- backends, with the foundation (errors, data types,
  model configuration, protos) under everyone and the entry points (command line, wiring,
  process programs) above everyone;
* a backend imports no other backend (they meet through the registry), and code outside
  ``backends/hosting/`` reaches it through the package, its one interface;
* no module imports another's private name (``from m import _x``, ``m._x``).

Unit tests on the source text: no server, a second or two.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# source folders and their import names (pyproject.toml's package-dir)
FOLDERS = {
    "server": "fpgaserve.server",
    "backends": "fpgaserve.backends",
    "pack": "fpgaserve.pack",
    "protos": "fpgaserve.protos",
}
# imported by its own name where it runs (the Python backend's model processes put its folder on
# sys.path): the same module as its file
STUB = "triton_python_backend_utils"
STUB_MODULE = "fpgaserve.backends.python.stub.triton_python_backend_utils"

# (room, module prefixes); a module is in the room of its longest matching prefix, where a
# prefix names a module and every module below it
ROOMS = {
    "entry": (
        "fpgaserve.server.cli",
        "fpgaserve.server.app",
        "fpgaserve.server.flags",
        "fpgaserve.server.eventloop",
        "fpgaserve.server.cpus",
        "fpgaserve.server.ipc.frontend_process",
        "fpgaserve.server.ipc.engine_process",
    ),
    "frontends": ("fpgaserve.server.frontends",),
    "ipc": ("fpgaserve.server.ipc",),
    "metrics": ("fpgaserve.server.metrics",),
    "dataplane": ("fpgaserve.server.dataplane", "fpgaserve.server.shared_memory", "fpgaserve.server.log_settings"),
    "engine": ("fpgaserve.server.engine",),
    "pack": ("fpgaserve.pack",),
    "backend": (
        "fpgaserve.backends.numpy_backend",
        "fpgaserve.backends.onnxruntime_backend",
        "fpgaserve.backends.python",
        "fpgaserve.backends.hls4ml",
    ),
    "hosting": ("fpgaserve.backends.hosting",),
    "contract": ("fpgaserve.backends.base",),
    "foundation": (
        "fpgaserve.server.errors",
        "fpgaserve.server.datatypes",
        "fpgaserve.server.model_config",
        "fpgaserve.protos",
    ),
}
# package __init__s that are rooms of their own (not their subpackages')
EXACT = {"fpgaserve.backends": "contract", "fpgaserve.server": "foundation"}

# which rooms each room may import (its own included)
MAY_IMPORT = {
    "entry": set(ROOMS),
    "frontends": {"frontends", "dataplane", "foundation"},
    "ipc": {"ipc", "metrics", "dataplane", "engine", "hosting", "foundation"},
    "metrics": {"metrics", "engine", "hosting", "contract", "foundation"},
    "dataplane": {"dataplane", "engine", "foundation"},
    "engine": {"engine", "hosting", "contract", "foundation"},
    "pack": {"pack", "backend", "contract", "foundation"},
    "backend": {"backend", "hosting", "contract", "foundation"},
    "hosting": {"hosting", "contract", "foundation"},
    "contract": {"contract"},
    "foundation": {"foundation"},
}


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported module (one of ours)
    where: str  # file:line
    names: tuple[str, ...]  # names taken from the target (from-imports), else ()

    def __str__(self) -> str:
        return f"{self.where}: {self.source} imports {self.target}"


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


MODULES = _modules()


def _ours(name: str) -> str | None:
    """The module of ours that ``name`` (a module or a name inside one) is, or None."""
    if name == STUB or name.startswith(STUB + "."):
        return STUB_MODULE
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> Iterator[Import]:
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    where = path.relative_to(ROOT)
    for node in ast.walk(tree):  # every import statement, wherever it is
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _ours(alias.name)
                if target is not None:
                    yield Import(module, target, f"{where}:{node.lineno}", ())
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                # ``from package import module`` imports that module; any other name comes
                # from the module (or package __init__) that defines it
                candidate = f"{origin}.{alias.name}"
                target = candidate if candidate in MODULES else _ours(origin)
                if target is not None:
                    names = () if candidate in MODULES else (alias.name,)
                    yield Import(module, target, f"{where}:{node.lineno}", names)


IMPORTS = [i for module, path in MODULES.items() for i in _imports(module, path) if i.target != i.source]


def room(module: str) -> str:
    if module in EXACT:
        return EXACT[module]
    best, length = None, -1
    for name, prefixes in ROOMS.items():
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = name, len(prefix)
    assert best is not None, f"{module} is in no room: add it to ROOMS (and docs/architecture.md)"
    return best


def _backend(module: str) -> str:
    """Which backend a module of the backend room belongs to (its folder or module under backends/)."""
    return module.split(".")[2]


def test_every_module_has_a_room():
    for module in MODULES:
        room(module)


def test_no_import_circle():
    edges: dict[str, dict[str, Import]] = {m: {} for m in MODULES}
    for i in IMPORTS:
        edges[i.source].setdefault(i.target, i)
    # Tarjan's strongly connected components, iteratively
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for start in MODULES:
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(component)
    described = []
    for component in circles:
        inside = [str(i) for m in sorted(component) for t, i in edges[m].items() if t in component]
        described.append("a circle of " + ", ".join(sorted(component)) + ":\n    " + "\n    ".join(inside))
    assert not described, "import circles:\n" + "\n".join(described)


def test_each_room_imports_only_what_it_may():
    wrong = []
    for i in IMPORTS:
        source, target = room(i.source), room(i.target)
        if target not in MAY_IMPORT[source]:
            allowed = ", ".join(sorted(MAY_IMPORT[source]))
            wrong.append(f"{i} ({source} -> {target}; {source} may import: {allowed})")
    assert not wrong, "imports against the layers of docs/architecture.md:\n" + "\n".join(wrong)


def test_backends_meet_only_through_the_registry():
    wrong = [
        f"{i} (a backend imports another backend; find it through fpgaserve.backends.backend_class)"
        for i in IMPORTS
        if room(i.source) == "backend" and room(i.target) == "backend" and _backend(i.source) != _backend(i.target)
    ]
    assert not wrong, "\n".join(wrong)


def test_hosting_is_used_through_its_package():
    wrong = [
        f"{i} (outside backends/hosting/, import fpgaserve.backends.hosting: its one interface)"
        for i in IMPORTS
        if room(i.target) == "hosting" and room(i.source) != "hosting" and i.target != "fpgaserve.backends.hosting"
    ]
    assert not wrong, "\n".join(wrong)


def test_no_private_name_crosses_modules():
    wrong = [
        f"{i} and takes its private {name}"
        for i in IMPORTS
        for name in i.names
        if name.startswith("_") and not name.startswith("__")
    ]
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        aliases = {}  # names bound to modules of ours by ``import``/``from package import module``
        for i in (i for i in IMPORTS if i.source == module and not i.names):
            aliases[i.target.rpartition(".")[2]] = i.target
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and _ours(alias.name) is not None:
                        aliases[alias.asname] = _ours(alias.name)
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                wrong.append(
                    f"{path.relative_to(ROOT)}:{node.lineno}: {module} uses {aliases[node.value.id]}.{node.attr}"
                )
    assert not wrong, "private names across modules:\n" + "\n".join(wrong)


def test_no_source_file_over_900_lines():
    """One file a concept; flags.py, the declaration of every command-line flag, is the exception."""
    long = [
        f"{path.relative_to(ROOT)}: {n} lines"
        for path in MODULES.values()
        if path != ROOT / "server" / "flags.py" and (n := len(path.read_text().splitlines())) > 900
    ]
    assert not long, long


def test_the_rule_reads_the_imports():
    """The scan itself: it sees imports known to be there, in functions and under TYPE_CHECKING."""
    found = {(i.source, i.target) for i in IMPORTS}
    assert ("fpgaserve.server.frontends.grpc", "fpgaserve.server.dataplane.api") in found
    # inside a function (the card API opens its runtime by need)
    assert ("fpgaserve.backends.hls4ml.card.runtime", "fpgaserve.backends.hls4ml.card.runtime.xrt_c") in found
    # under TYPE_CHECKING
    assert ("fpgaserve.server.ipc.engine_server", "fpgaserve.server.ipc.engines") in found
    # the Python backend's stub, imported by its own name
    assert ("fpgaserve.backends.python.host", STUB_MODULE) in found
