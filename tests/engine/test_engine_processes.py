"""--engine-processes 2: two simulated cards, a model on each, served by two engine processes
behind the same frontend processes, as one server (docs: server/ipc/engines.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from support.card_serving import MODELS, SERVE, SIM_ENV, assert_bitwise, card_model, csim_reference, edge_inputs
from support.server_process import ServerProcess
from support.waiting import wait_until

pytestmark = [
    pytest.mark.skipif(shutil.which("g++") is None, reason="the simulated kernels run hls4ml's C-simulation (g++)"),
    pytest.mark.timeout(600),
]

CARD_OF = {"facile": 0, "jet_tagger": 1}


@pytest.fixture(scope="module")
def server(tmp_path_factory, csim_cache):
    root = tmp_path_factory.mktemp("engines_repo")
    for model, card in CARD_OF.items():
        card_model(root, model, model, {"cards": str(card)})
    card_model(root, "facile", "straddling", {"cards": "0,1"}, xclbin=False)
    control = tmp_path_factory.mktemp("engines-control")
    log = tmp_path_factory.mktemp("engines") / "fpgaserve.log"
    env = {k: v for k, v in os.environ.items() if k not in SIM_ENV}
    env.update(FPGASERVE_SIM_CARDS="2", FPGASERVE_SIM_CONTROL_DIR=str(control))
    args = ["--fpga-mode", "hardware", "--model-control-mode", "explicit", "--engine-processes", "2"]
    args += ["--frontend-processes", "2", "--allow-client-shm", "true"]
    args += ["--load-model", "facile", "--load-model", "jet_tagger"]
    proc = ServerProcess([root], *args, log_path=log, env=env, entry=[SERVE])
    proc.control = control
    proc.start(timeout=240)
    yield proc
    rc = proc.stop()
    assert rc == 0, f"server exited with {rc}: {proc.log()}"


def _infer(server: ServerProcess, model: str, x: np.ndarray) -> np.ndarray:
    name, out = MODELS[model][:2]
    t = grpcclient.InferInput(name, list(x.shape), "FP32")
    t.set_data_from_numpy(x)
    with grpcclient.InferenceServerClient(server.url) as client:
        return client.infer(model, [t], outputs=[grpcclient.InferRequestedOutput(out)]).as_numpy(out)


def _holders(server: ServerProcess, card: int) -> set[int]:
    state = json.loads((server.control / f"state-card{card}.json").read_text())
    return {int(pid) for pid in state["holders"]}


def _engine_pids(server: ServerProcess) -> dict[int, int]:
    """{engine index: pid}: engine 0 is the server's process, the others its children."""
    pids = {0: server.proc.pid}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if ppid == server.proc.pid and b"fpgaserve.server.ipc.engine_process" in argv:
            pids[int(argv[argv.index(b"fpgaserve.server.ipc.engine_process") + 3])] = int(entry)
    return pids


def test_both_models_answer_bit_for_bit(server, csim_cache):
    for model in CARD_OF:
        sets = edge_inputs(MODELS[model][2])
        for name in ("unit", "corners", "single"):
            x = sets[name]
            assert_bitwise(_infer(server, model, x), csim_reference(model, x, csim_cache), f"{model} {name}")


def test_each_engine_process_holds_only_its_card(server):
    for model in CARD_OF:  # both cards opened (a request ran on each)
        _infer(server, model, np.zeros((1, MODELS[model][2]), np.float32))
    pids = _engine_pids(server)
    assert sorted(pids) == [0, 1], pids
    for card in (0, 1):
        assert _holders(server, card) == {pids[card]}, (card, pids, server.log())
    assert re.search(r"engine process 1 \(pid \d+\) serves its models", server.log()), server.log()


def test_index_statistics_and_readiness_cover_both_engines(server):
    with grpcclient.InferenceServerClient(server.url) as client:
        index = {m.name: m for m in client.get_model_repository_index().models}
        assert index["facile"].state == index["jet_tagger"].state == "READY", index
        assert "straddling" in index
        for model in CARD_OF:
            _infer(server, model, np.ones((3, MODELS[model][2]), np.float32))
            assert client.is_model_ready(model)
        assert client.is_server_ready() and client.is_server_live()
        stats = {s.name: s for s in client.get_inference_statistics().model_stats}
        for model in CARD_OF:
            assert stats[model].inference_count >= 3, stats[model]
            one = client.get_inference_statistics(model).model_stats
            assert [s.name for s in one] == [model]


def test_metrics_have_both_models_and_both_cards(server):
    for model in CARD_OF:
        _infer(server, model, np.ones((2, MODELS[model][2]), np.float32))
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    for model in CARD_OF:
        m = re.search(rf'^nv_inference_count\{{model="{model}",version="1"\}} (\d+)', text, re.MULTILINE)
        assert m and int(m.group(1)) >= 2, text
    for card in (0, 1):
        assert re.search(rf'^nv_gpu_utilization\{{gpu_uuid="FPGA-{card}-[^"]+"\}} ', text, re.MULTILINE), text
    # one family each, host families once
    assert text.count("# TYPE nv_inference_count ") == 1
    assert len(re.findall(r"^nv_cpu_utilization ", text, re.MULTILINE)) == 1


def test_system_shared_memory_reaches_every_engine(server, csim_cache):
    """A region registered once is read by both engines (each model's inputs from it)."""
    size = 64 * max(MODELS[m][2] for m in CARD_OF) * 4
    key = f"/fpgaserve-engines-{os.getpid()}"
    handle = shm.create_shared_memory_region("engines_in", key, size)
    try:
        with grpcclient.InferenceServerClient(server.url) as client:
            client.register_system_shared_memory("engines_in", key, size)
            try:
                for model in CARD_OF:
                    x = edge_inputs(MODELS[model][2])["unit"][:64]
                    shm.set_shared_memory_region(handle, [x])
                    t = grpcclient.InferInput(MODELS[model][0], list(x.shape), "FP32")
                    t.set_shared_memory("engines_in", x.nbytes)
                    out = MODELS[model][1]
                    got = client.infer(model, [t], outputs=[grpcclient.InferRequestedOutput(out)]).as_numpy(out)
                    assert_bitwise(got, csim_reference(model, x, csim_cache), f"{model} from shared memory")
            finally:
                client.unregister_system_shared_memory("engines_in")
            assert list(client.get_system_shared_memory_status().regions) == []
            with pytest.raises(InferenceServerException, match="engines_in"):  # gone from engine 1 too
                t = grpcclient.InferInput(MODELS["jet_tagger"][0], [1, MODELS["jet_tagger"][2]], "FP32")
                t.set_shared_memory("engines_in", MODELS["jet_tagger"][2] * 4)
                client.infer("jet_tagger", [t])
    finally:
        shm.destroy_shared_memory_region(handle)


def test_load_and_unload_go_to_the_models_engine(server):
    x = np.ones((1, MODELS["jet_tagger"][2]), np.float32)
    pids = _engine_pids(server)
    with grpcclient.InferenceServerClient(server.url) as client:
        client.unload_model("jet_tagger")
        wait_until(lambda: not client.is_model_ready("jet_tagger"), "jet_tagger to unload")
        index = {m.name: m for m in client.get_model_repository_index().models}
        assert index["jet_tagger"].state == "UNAVAILABLE", index
        with pytest.raises(InferenceServerException):
            _infer(server, "jet_tagger", x)
        assert re.search(rf"^I\S+ \S+ {pids[1]} \S+\] unloaded model 'jet_tagger'", server.log(), re.MULTILINE)
        client.load_model("jet_tagger")
        assert client.is_model_ready("jet_tagger")
        _infer(server, "jet_tagger", x)
        log = server.log()
        assert re.search(rf"^I\S+ \S+ {pids[1]} \S+\] loaded model 'jet_tagger'", log, re.MULTILINE), log
        assert _holders(server, 1) == {pids[1]}  # engine 0 never opened card 1
        assert _holders(server, 0) == {pids[0]}
        # cards of both engine processes: refused before loading, with the reason
        with pytest.raises(InferenceServerException, match="cards of engine processes 0, 1"):
            client.load_model("straddling")


def test_an_engine_process_that_dies_stops_the_server(tmp_path_factory, csim_cache):
    root = tmp_path_factory.mktemp("engines_die_repo")
    card_model(root, "jet_tagger", "jet_tagger", {"cards": "1"})
    control = tmp_path_factory.mktemp("engines-die-control")
    env = {k: v for k, v in os.environ.items() if k not in SIM_ENV}
    env.update(FPGASERVE_SIM_CARDS="2", FPGASERVE_SIM_CONTROL_DIR=str(control))
    args = ["--fpga-mode", "hardware", "--engine-processes", "2", "--frontend-processes", "1"]
    log = tmp_path_factory.mktemp("engines-die") / "fpgaserve.log"
    proc = ServerProcess([root], *args, log_path=log, env=env, entry=[SERVE]).start(timeout=240)
    try:
        os.kill(_engine_pids(proc)[1], 9)
        assert proc.wait(timeout=60) == 1, proc.log()
        assert "engine process 1" in proc.log() and "the server stops" in proc.log()
    finally:
        proc.stop()
