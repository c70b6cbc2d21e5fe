"""The suite's own layout (tests/README.md): tests by area, each folder with its conftest.py,
no test module directly under tests/, and no test module importing another one (what two
need is in tests/support/)."""

from __future__ import annotations

import ast

from support.server_process import ROOT

TESTS = ROOT / "tests"
AREAS = ("protocol", "engine", "backends", "hls4ml", "cards", "deployment", "security", "differential", "benchmarks")
# not areas: the card stand-in, the conformance repository, the fixture and helper modules
OTHERS = ("fpga_sim", "models", "support")


def _test_modules() -> set[str]:
    return {p.stem for p in TESTS.rglob("test_*.py") if "fpga_sim" not in p.parts}


def test_every_area_is_a_folder_with_its_conftest():
    for area in AREAS:
        assert (TESTS / area / "conftest.py").is_file(), f"tests/{area}/conftest.py is missing"
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    assert folders <= set(AREAS) | set(OTHERS), (
        f"folders under tests/ that are no area: {folders - set(AREAS) - set(OTHERS)}"
    )


def test_no_test_module_directly_under_tests():
    assert not sorted(p.name for p in TESTS.glob("test_*.py"))


def test_test_module_names_are_unique():
    # pytest imports them by basename (rootdir-relative, no __init__.py): two alike would collide
    paths = [p for p in TESTS.rglob("test_*.py") if "fpga_sim" not in p.parts]
    assert len(paths) == len({p.name for p in paths})


def test_no_module_imports_a_test_module():
    modules = _test_modules()
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                if set(name.split(".")) & modules:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert not offenders, "\n".join(offenders)
