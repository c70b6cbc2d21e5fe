"""How pytest-xdist's workers share the suite (tests/conftest.py's ``pytest_xdist_make_scheduler``).

A work unit is a test module: its module-scoped fixtures (servers, compiled projects, the
real Triton) are then built once, by one worker, as in a run without workers. What
:data:`SPREAD` names is the exception: a module whose tests share no costly fixture, or one
test function of a module (``module::function``) that uses none of the module's fixtures; each
of those tests is a unit of its own, and all workers take them.

Units are handed out in collection order (tests/conftest.py puts the longest modules first,
so that no worker starts an hour-long module when the others are done); xdist's own reorder
(most tests first) is off: the number of tests says nothing about their time.
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

# modules whose tests share no costly fixture (a tmp folder at most), and test functions that
# use none of their module's fixtures: one unit per test
SPREAD: frozenset[str] = frozenset(
    {
        # nine nested pytest runs, one per protocol module, each with its own servers
        "test_processes.py::test_protocol_suites_with_the_other_process_model",
        # a fresh venv per Python version
        "test_install.py",
        # fpgaserve pack and a server of their own each (not the module's three servers)
        "test_hls4ml_serving.py::test_pack_pytorch_model_and_serve",
        "test_hls4ml_serving.py::test_pack_existing_hls4ml_project",
        "test_hls4ml_serving.py::test_pack_keras_and_qonnx_models_and_serve",
        "test_hls4ml_serving.py::test_pack_qonnx_model_without_a_runnable_float_reference",
        "test_hls4ml_serving.py::test_inputs_and_outputs_come_from_the_firmware",
    }
)


class ModuleScheduling(LoadScopeScheduling):
    def __init__(self, config, log=None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False

    def _split_scope(self, nodeid: str) -> str:
        module, _, rest = nodeid.partition("::")
        name = module.rsplit("/", 1)[-1]
        function = rest.split("[", 1)[0]
        return nodeid if name in SPREAD or f"{name}::{function}" in SPREAD else module
