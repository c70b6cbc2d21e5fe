"""The hardware path through gRPC, with the real tritonclient, against simulated Alveo cards.

The server is the unmodified fpgaserve CLI started through ``tests/fpga_sim/serve.py``, which
puts the simulator's ``pyxrt`` first on the import path (``tests/fpga_sim/xrt_python``) and its
``xbutil`` first on PATH, so fpgaserve's card API (``runtime/xrt.py`` over pyxrt; the ABI server:
``runtime/xrt_c.py`` over the C double of ``libxrt_coreutil.so.2``, ``FPGASERVE_SIM_API=xrt-c``)
drives simulated cards that behave as XRT does on an Alveo card (``tests/fpga_sim/card.py``). The models are the
bundled FACILE and jet tagger projects, copied into a temporary repository with an xclbin
written next to each (``fpga_sim.xclbin``) and ``card.json`` recorded as ``fpgaserve pack
--xclbin`` records it, so ``--fpga-mode hardware`` and ``auto`` find a card and a bitstream. A
simulated kernel computes with hls4ml's C-simulation of the project it was "linked" from, so a
client must receive exactly the bytes the in-process ``CsimLibrary`` gives: any difference is
a fault on the hardware path (encoding, buffer handling, lengths, syncs, slicing of batches).

The simulator writes ``stats-card<N>.json`` into its control folder after every change: they
show which card ran what (kernel starts, programs, hangs, resets) without reading a clock.
Where two things must happen at the same time, the simulator's rendezvous proves it (a held
kernel is released only when two kernels execute at once; a serializing server would make it
time out).

One module-scoped server runs four simulated cards in hardware mode:

=====  ===================  ===================================================
card   model                why
=====  ===================  ===================================================
0      facile               ``cards: "0"``, ``kernel_timeout_secs: "2"``: the hang test
1      jet_tagger           ``cards: "1"``: pinning
2, 3   facile_pair          ``count: 2``, ``cards: "2,3"``, no dynamic batcher:
                            one model on two cards
=====  ===================  ===================================================

``bad_cards`` (``cards: "1,7"``) and ``no_xclbin`` are in the repository too; the server runs
with ``--model-control-mode explicit`` so their load errors come back from RepositoryModelLoad.
Other servers: ``--fpga-mode auto`` on two cards, every kernel ABI on one card, readiness with
``card-reset=off``, and ``hardware`` with no card at all.
"""

from __future__ import annotations

import csv
import os
import queue
import re
import shutil
import subprocess
import threading
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from support.card_serving import (
    MODELS,
    abi_model,
    assert_bitwise,
    card_model,
    card_stats,
    card_stats_after,
    csim_reference,
    edge_inputs,
    serve_cards,
    write_card_xclbin,
)
from support.server_process import BUNDLED_REPO, ROOT, ServerProcess
from support.tools import perf_analyzer_path
from support.waiting import wait_until

pytestmark = [
    pytest.mark.skipif(shutil.which("g++") is None, reason="the simulated kernels run hls4ml's C-simulation (g++)"),
    pytest.mark.timeout(600),
]

CARD_OF = {"facile": 0, "jet_tagger": 1}
PAIR_CARDS = (2, 3)
HANG_TIMEOUT_S = 2  # facile's kernel_timeout_secs: the length of a hang
# facile_pair's kernel timeout outlasts the simulator's rendezvous timeout (20 s), so a server
# that serialized the two cards fails on the rendezvous fault, not on a kernel timeout
PAIR_TIMEOUT_S = 60
# perf_analyzer's metrics parser (client_backend/triton/triton_client_backend.cc): one label,
# a plain decimal
GPU_SAMPLE = re.compile(r'^(nv_gpu_\w+)\{gpu_uuid="([^"]+)"\} (\d+\.?\d*)$')


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("fpga_repo")
    uuids = {
        "facile": card_model(root, "facile", "facile", {"cards": "0", "kernel_timeout_secs": str(HANG_TIMEOUT_S)}),
        "jet_tagger": card_model(root, "jet_tagger", "jet_tagger", {"cards": "1"}),
        "facile_pair": card_model(
            root,
            "facile",
            "facile_pair",
            {"cards": "2,3", "kernel_timeout_secs": str(PAIR_TIMEOUT_S)},
            count=2,
            batcher=False,
        ),
        "bad_cards": card_model(root, "facile", "bad_cards", {"cards": "1,7"}),
        "no_xclbin": card_model(root, "facile", "no_xclbin", {"cards": "0"}, xclbin=False),
    }
    return type("Repo", (), {"path": root, "uuids": uuids})


@pytest.fixture(scope="module")
def hw(repo, tmp_path_factory, csim_cache):
    proc = serve_cards(repo.path, tmp_path_factory, "hw", "hardware", 4, "facile", "jet_tagger", "facile_pair")
    yield proc
    rc = proc.stop()
    assert rc == 0, f"server exited with {rc}: {proc.log()}"


def _all_stats_after(server: ServerProcess, before: list[dict], completions: int) -> list[dict]:
    """Every card's stats once ``completions`` more kernel calls completed on them together."""

    def settled():
        now = _all_stats(server, len(before))
        done = sum(a["kernel_completions"] - b["kernel_completions"] for a, b in zip(now, before))
        return done >= completions and now

    return wait_until(settled, f"{completions} more completed kernel call(s) on the cards")


def _all_stats(server: ServerProcess, cards: int = 4) -> list[dict]:
    return [card_stats(server, c) for c in range(cards)]


def _quiet_stats(server: ServerProcess, cards: int = 4) -> list[dict]:
    """Every card's stats once two reads a few flush periods apart agree: a baseline that no
    change made before it (by an earlier test's last request) can still alter."""
    previous = _all_stats(server, cards)
    for _ in range(50):
        time.sleep(0.15)
        now = _all_stats(server, cards)
        if now == previous:
            return now
        previous = now
    raise AssertionError("the simulated cards' stats kept changing")


# ------------------------------------------------------------------------------ clients
def _input(model: str, x: np.ndarray):
    name = MODELS[model.replace("_pair", "")][0]
    t = grpcclient.InferInput(name, list(x.shape), "FP32")
    t.set_data_from_numpy(x)
    return t


def _infer(url: str, model: str, x: np.ndarray) -> np.ndarray:
    out = MODELS[model.replace("_pair", "")][1]
    with grpcclient.InferenceServerClient(url) as client:
        result = client.infer(model, [_input(model, x)], outputs=[grpcclient.InferRequestedOutput(out)])
        return result.as_numpy(out)


# ------------------------------------------------------------------------------ bit-exactness
@pytest.mark.parametrize("model", sorted(MODELS))
def test_hardware_equals_csim_bit_for_bit(hw, csim_cache, model):
    card = CARD_OF[model]
    before = _quiet_stats(hw)[card]
    sets = edge_inputs(MODELS[model][2])
    for name, x in sets.items():
        assert_bitwise(_infer(hw.url, model, x), csim_reference(model, x, csim_cache), f"{model} {name}")
    after = card_stats_after(hw, card, before, len(sets))
    # every request was one kernel call on the model's card (not a silent fallback to emulation)
    assert after["kernel_starts"] - before["kernel_starts"] == len(sets)
    assert after["kernel_completions"] - before["kernel_completions"] == len(sets)
    assert after["bytes_to_device"] - before["bytes_to_device"] == sum(x.size for x in sets.values()) * 4
    assert after["hung"] == [] and after["programs"] == before["programs"]


def test_hardware_mode_is_logged_per_model(hw):
    log = hw.log_path.read_text(errors="replace")  # the whole log: hw.log() keeps only its end
    for model, card in CARD_OF.items():
        assert re.search(
            rf"model {model}: hls4ml project .* runs in hardware mode \(--fpga-mode hardware\); "
            rf"instance 0 on card {card} FPGA-{card}-\S+ \(simulated\) running model\.xclbin",
            log,
        ), hw.log()


def test_auto_mode_picks_hardware_when_card_and_xclbin_exist(repo, tmp_path_factory, csim_cache):
    proc = serve_cards(repo.path, tmp_path_factory, "auto", "auto", 2, "facile", "jet_tagger")
    try:
        for model in MODELS:
            assert re.search(
                rf"model {model}: hls4ml project .* runs in hardware mode \(auto: 2 card\(s\) found, model\.xclbin\)",
                proc.log(),
            ), proc.log()
            before = card_stats(proc, CARD_OF[model])
            sets = edge_inputs(MODELS[model][2])
            for name in ("unit", "saturating", "negative", "zeros", "corners"):
                x = sets[name]
                assert_bitwise(_infer(proc.url, model, x), csim_reference(model, x, csim_cache), f"auto {model} {name}")
            assert card_stats_after(proc, CARD_OF[model], before, 5)["kernel_starts"] - before["kernel_starts"] == 5
    finally:
        assert proc.stop() == 0, proc.log()


def test_unpinned_models_get_cards_of_their_own(tmp_path_factory, csim_cache):
    """Without a cards parameter each model takes a card that is free or already runs its
    bitstream: two models with different xclbins share a two-card host."""
    root = tmp_path_factory.mktemp("unpinned_repo")
    for model in MODELS:
        card_model(root, model, model, {})
    proc = serve_cards(root, tmp_path_factory, "unpinned", "hardware", 2, *MODELS)
    try:
        used = {}
        for model in MODELS:
            before = _all_stats(proc, 2)
            x = edge_inputs(MODELS[model][2])["corners"]
            assert_bitwise(_infer(proc.url, model, x), csim_reference(model, x, csim_cache), f"unpinned {model}")
            after = _all_stats_after(proc, before, 1)
            used[model] = [c for c in range(2) if after[c]["kernel_starts"] > before[c]["kernel_starts"]]
        assert sorted(used.values()) == [[0], [1]], used
    finally:
        assert proc.stop() == 0, proc.log()


# ------------------------------------------------------------------------------ a hung kernel
def test_hung_kernel_fails_its_batch_and_the_card_is_reset(hw, csim_cache):
    """A hung CU fails its batch with UNAVAILABLE; the other model's card serves on all along;
    the server resets the card with `xbutil reset` (the simulator's stand-in: it refuses while
    any process holds the card, so every handle must be released first) and facile serves again."""
    card = CARD_OF["facile"]
    before = card_stats(hw, card)
    other_before = card_stats(hw, CARD_OF["jet_tagger"])
    x_hung = edge_inputs(47)["unit"][:5]
    y_other = edge_inputs(16)["unit"][:8]
    with grpcclient.InferenceServerClient(hw.url) as client:
        fails_before = client.get_inference_statistics("facile").model_stats[0].inference_stats.fail.count
        # the other model, on another card, is served in a steady stream all along
        stop = threading.Event()
        other_results: list = []

        def other_traffic():
            while True:
                try:
                    other_results.append(_infer(hw.url, "jet_tagger", y_other))
                except Exception as e:  # broad on purpose: reported below
                    other_results.append(e)
                if stop.is_set():
                    return

        streamer = threading.Thread(target=other_traffic)
        streamer.start()
        try:
            (hw.control / f"hang-card{card}").touch()  # the next kernel start on card 0 hangs
            with pytest.raises(InferenceServerException) as err:
                client.infer("facile", [_input("facile", x_hung)])
            wait_until(lambda: card_stats(hw, card)["resets"] > before["resets"], "the card to be reset")
            wait_until(lambda: client.is_model_ready("facile"), "facile to be ready again")
        finally:
            stop.set()
            streamer.join()
        fails_after = client.get_inference_statistics("facile").model_stats[0].inference_stats.fail.count

    assert err.value.status() == "StatusCode.UNAVAILABLE", (err.value.status(), err.value.message())
    message = err.value.message()
    assert re.search(
        rf"kernel krnl_rtl_1 on card {card} \(FPGA-{card}-\S+\) did not finish a call of 5 rows within {HANG_TIMEOUT_S} s",
        message,
    ), message
    want_other = csim_reference("jet_tagger", y_other, csim_cache)
    for y in other_results:
        assert isinstance(y, np.ndarray), y
        assert_bitwise(y, want_other, "jet_tagger during the hang")
    assert fails_after - fails_before == 1  # exactly the hung batch failed

    after = card_stats(hw, card)
    assert after["hangs"] == before["hangs"] + 1 and after["hung"] == [] and not after["bad_state"]
    assert after["resets"] == before["resets"] + 1  # a device reset, the only way out on XRT
    # a reset leaves no xclbin on the card: the server programmed it again
    assert after["xclbin_uuid"] == before["xclbin_uuid"] and after["programs"] >= 1
    assert "hang requested through the control folder" in " ".join(after["faults"])
    other = card_stats(hw, CARD_OF["jet_tagger"])
    assert other["programs"] == other_before["programs"] and other["hangs"] == other_before["hangs"]
    # at least one jet_tagger kernel started while card 0 was hung: nothing card-wide or
    # server-wide waited for the hung card (the simulator counts it at the kernel start)
    moved = other["starts_while_another_card_hung"] - other_before["starts_while_another_card_hung"]
    assert moved >= 1, (len(other_results), other)
    assert re.search(r"card 0 \(FPGA-0-\S+\): xbutil reset --device 0000:65:00\.1 --force", hw.log()), hw.log()
    # and the card serves again
    x = edge_inputs(47)["corners"]
    assert_bitwise(_infer(hw.url, "facile", x), csim_reference("facile", x, csim_cache), "facile after the reset")


# ------------------------------------------------------------------------------ cards
def test_one_model_on_two_cards_executes_on_both_at_once(hw, csim_cache):
    before = _quiet_stats(hw)
    # arm the simulator's rendezvous: the next kernel is held until two execute at the same
    # moment; only a server that runs the two instances' cards in parallel gets there
    (hw.control / "rendezvous").write_text("2")
    # no dynamic batching: each request is one execution, so while the first is held on one
    # card the next goes to the other instance (merged into one batch they could not meet)
    xs = [edge_inputs(47)["unit"][40 * i : 40 * i + 17 + i] for i in range(8)]
    done: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(hw.url) as client:
        for i, x in enumerate(xs):
            client.async_infer(
                "facile_pair",
                [_input("facile_pair", x)],
                callback=lambda result, error, i=i: done.put((i, result, error)),
            )
        results = {}
        for _ in xs:
            i, result, error = done.get(timeout=120)
            assert error is None, error
            results[i] = result.as_numpy("output/BiasAdd")
    for i, x in enumerate(xs):
        assert_bitwise(results[i], csim_reference("facile", x, csim_cache), f"facile_pair request {i}")
    after = _all_stats_after(hw, before, len(xs))
    assert not (hw.control / "rendezvous").exists()  # consumed by a kernel start
    starts = [a["kernel_starts"] - b["kernel_starts"] for a, b in zip(after, before)]
    assert starts[0] == starts[1] == 0, starts  # facile_pair stays on its cards
    assert starts[2] >= 1 and starts[3] >= 1, starts
    assert starts[2] + starts[3] == len(xs), starts  # no dynamic batcher: one execution per request
    for c in PAIR_CARDS:
        stats = after[c]
        assert not [f for f in stats["faults"] if "rendezvous" in f], stats["faults"]
        assert stats["rendezvous"]["state"] == "met" and stats["rendezvous"]["peak"] >= 2, stats
        assert stats["hung"] == []


def test_cards_parameter_pins_the_model(hw, repo, csim_cache):
    before = _quiet_stats(hw)
    x = edge_inputs(16)["unit"][:100]
    for _ in range(3):
        assert_bitwise(_infer(hw.url, "jet_tagger", x), csim_reference("jet_tagger", x, csim_cache), "jet_tagger")
    after = _all_stats_after(hw, before, 3)
    starts = [a["kernel_starts"] - b["kernel_starts"] for a, b in zip(after, before)]
    assert starts == [0, 3, 0, 0]
    # each card was programmed with its model's xclbin, and only with it
    uuids = repo.uuids
    assert [s["xclbin_uuid"] for s in after] == [
        uuids["facile"],
        uuids["jet_tagger"],
        uuids["facile_pair"],
        uuids["facile_pair"],
    ]
    assert after[1]["xclbin"].endswith("jet_tagger/1/model.xclbin")


def test_load_errors_are_clear(hw, repo):
    with grpcclient.InferenceServerClient(hw.url) as client:
        with pytest.raises(InferenceServerException) as err:
            client.load_model("bad_cards")
        assert re.search(
            r"parameter cards '1,7' names card\(s\) \[7\]; this host has 4 card\(s\)", err.value.message()
        ), err.value.message()
        with pytest.raises(InferenceServerException) as err:
            client.load_model("no_xclbin")
        assert re.search(
            r"fpga-mode hardware needs an \.xclbin or \.awsxclbin in \S+no_xclbin/1", err.value.message()
        ), err.value.message()
        for name in ("bad_cards", "no_xclbin"):
            assert not client.is_model_ready(name)
        assert client.is_model_ready("facile") and client.is_model_ready("jet_tagger")
    x = edge_inputs(47)["single"]
    assert _infer(hw.url, "facile", x).shape == (1, 1)


# ------------------------------------------------------------------------------ telemetry
def _scrape(server: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=30) as r:
        return r.read().decode()


def _parse(text: str) -> dict[str, list[tuple[dict, float]]]:
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, list[tuple[dict, float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def _one(samples, name, **labels) -> float:
    found = [v for lab, v in samples.get(name, []) if all(lab.get(k) == val for k, val in labels.items())]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


def _card_uids(samples) -> list[str]:
    """Card uids (the device / gpu_uuid label) in card order, from fpga_bitstream_info."""
    uids = sorted({lab["device"] for lab, _ in samples["fpga_bitstream_info"]}, key=lambda u: int(u.split("-")[1]))
    assert [u.split("-")[1] for u in uids] == ["0", "1", "2", "3"], uids
    return uids


def _buffer_bytes(model: str) -> int:
    """The runner's device buffers: max_batch_size rows in and out, 4-byte words (float I/O)."""
    _, _, n_in, n_out = MODELS[model]
    return 16384 * (n_in + n_out) * 4


def test_telemetry_on_the_metrics_endpoint(hw, repo, csim_cache):
    first_text = _scrape(hw)
    first = _parse(first_text)
    uids = _card_uids(first)
    dev = uids[CARD_OF["facile"]]
    stats_before = _quiet_stats(hw)[CARD_OF["facile"]]
    rows = [10 + 7 * i for i in range(6)]
    x_all = edge_inputs(47)["unit"]
    for i, n in enumerate(rows):
        x = x_all[100 * i : 100 * i + n]
        assert_bitwise(_infer(hw.url, "facile", x), csim_reference("facile", x, csim_cache), "facile")
    second_text = _scrape(hw)
    second = _parse(second_text)
    third_text = _scrape(hw)
    third = _parse(third_text)
    stats_after = card_stats_after(hw, CARD_OF["facile"], stats_before, len(rows))

    def delta(name, **labels):
        return _one(second, name, **labels) - _one(first, name, **labels)

    # one kernel call per batch, on facile's card and nowhere else
    assert delta("fpga_kernel_calls_total", device=dev, cu="krnl_rtl_1") == len(rows)
    for other in uids[1:]:
        for lab, _ in second["fpga_kernel_calls_total"]:
            if lab["device"] == other:
                assert delta("fpga_kernel_calls_total", **lab) == 0, lab
    assert delta("fpga_kernel_duration_us_total", device=dev, cu="krnl_rtl_1") > 0
    to_dev = delta("fpga_dma_bytes_total", device=dev, direction="to_device")
    assert to_dev == sum(rows) * 47 * 4 == stats_after["bytes_to_device"] - stats_before["bytes_to_device"]
    assert delta("fpga_dma_bytes_total", device=dev, direction="from_device") == sum(rows) * 1 * 4
    util = _one(second, "fpga_utilization", device=dev, cu="krnl_rtl_1")
    assert 0 < util <= 1, util  # busy for a part of the time between the two scrapes
    assert _one(second, "fpga_utilization", device=uids[CARD_OF["jet_tagger"]], cu="krnl_rtl_1") == 0.0
    assert _one(second, "fpga_reloads_total", device=dev) == stats_after["resets"]  # recoveries after a hang
    assert _one(second, "fpga_memory_used_bytes", device=dev) == _buffer_bytes("facile")
    assert _one(second, "fpga_memory_total_bytes", device=dev) == 16 << 30  # the one DDR bank the design uses

    for uid in uids:
        assert 10 < _one(second, "fpga_power_usage_watts", device=uid) < 225  # an Alveo U250's range
        assert 20 < _one(second, "fpga_temperature_celsius", device=uid, sensor="fpga0") < 110  # XRT's location id
        e1, e2, e3 = (_one(s, "fpga_energy_consumption_joules_total", device=uid) for s in (first, second, third))
        assert 0 <= e1 < e2 < e3, (uid, e1, e2, e3)  # power integrated between scrapes
        # Triton's name, no _total suffix: read from the text (the parser would rename it)
        m = re.search(rf'^nv_energy_consumption\{{gpu_uuid="{re.escape(uid)}"\}} (\S+)$', third_text, re.MULTILINE)
        assert m and float(m[1]) == e3, (uid, e3)
        assert _one(second, "fpga_bitstream_info", device=uid, simulated="true") == 1
    info = [lab for lab, _ in second["fpga_bitstream_info"] if lab["device"] == dev]
    assert info[0]["xclbin_uuid"] == repo.uuids["facile"] and info[0]["simulated"] == "true", info
    assert info[0]["shell"] == "xilinx_u250_gen3x16_xdma_shell_4_1", info

    # the GPU aliases perf_analyzer reads: exactly the gpu_uuid label, plain decimals
    for text in (first_text, second_text):
        lines = [line for line in text.splitlines() if line.startswith("nv_gpu_")]
        # utilization, power usage and limit, memory used and total: XRT reports the limit
        assert len(lines) == 5 * len(uids), lines
        parsed = {}
        for line in lines:
            m = GPU_SAMPLE.match(line)
            assert m, f"perf_analyzer cannot parse {line!r}"
            parsed[(m[1], m[2])] = m[3]
        assert {uid for _, uid in parsed} == set(uids)
    assert parsed[("nv_gpu_memory_total_bytes", dev)] == str(16 << 30)
    assert parsed[("nv_gpu_memory_used_bytes", dev)] == str(_buffer_bytes("facile"))
    assert float(parsed[("nv_gpu_utilization", dev)]) == pytest.approx(util, abs=1e-4)
    assert float(parsed[("nv_gpu_power_usage", dev)]) == pytest.approx(
        _one(second, "fpga_power_usage_watts", device=dev), abs=1e-3
    )
    # the simulated U250's power_consumption_max_watts, what SuperSONIC's power panel divides by
    assert float(parsed[("nv_gpu_power_limit", dev)]) == 225


def test_perf_analyzer_collects_card_metrics(hw, tmp_path):
    pa = perf_analyzer_path()
    uids = _card_uids(_parse(_scrape(hw)))
    out_csv = tmp_path / "facile.csv"
    cmd = [
        pa,
        "-m",
        "facile",
        "-u",
        hw.url,
        "-i",
        "grpc",
        "-b",
        "64",
        "--concurrency-range",
        "1",
        "--measurement-interval",
        "1000",
        "--stability-percentage",
        "100",
        "--collect-metrics",
        "--metrics-url",
        f"localhost:{hw.metrics_port}/metrics",
        "--metrics-interval",
        "500",
        "-f",
        str(out_csv),
        "--verbose-csv",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    info = f"{' '.join(cmd)}\nrc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
    assert proc.returncode == 0, info
    assert "Server Prometheus Metrics" in proc.stdout and f"{uids[0]} :" in proc.stdout, info
    with open(out_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1, rows
    row = rows[0]

    def per_card(column: str) -> dict[str, float]:
        # perf_analyzer writes "<gpu_uuid>:<value>;" for every card it saw
        assert column in row, f"no '{column}' column: {list(row)}"
        pairs = [p.rsplit(":", 1) for p in row[column].split(";") if p]
        return {uid: float(v) for uid, v in pairs}

    util = per_card("Avg GPU Utilization")
    power = per_card("Avg GPU Power Usage")
    used = per_card("Max GPU Memory Usage")
    total = per_card("Total GPU Memory")
    for values in (util, power, used, total):
        assert sorted(values) == sorted(uids), values
    facile_card, idle_card = uids[CARD_OF["facile"]], uids[CARD_OF["jet_tagger"]]
    assert 0 < util[facile_card] <= 1 and util[idle_card] == 0, util
    # the simulated card draws more while its kernel runs
    assert power[facile_card] > power[idle_card] > 10, power
    assert used[facile_card] == _buffer_bytes("facile") and used[idle_card] == _buffer_bytes("jet_tagger"), used
    assert set(total.values()) == {16 << 30}, total


def test_hardware_mode_without_a_card_is_a_load_error(repo, tmp_path_factory):
    proc = serve_cards(repo.path, tmp_path_factory, "nocard", "hardware", 0)
    try:
        with grpcclient.InferenceServerClient(proc.url) as client:
            with pytest.raises(InferenceServerException) as err:
                client.load_model("facile")
            assert re.search(r"fpga-mode hardware: no FPGA card found", err.value.message()), err.value.message()
            assert not client.is_model_ready("facile")
    finally:
        assert proc.stop() == 0, proc.log()


@pytest.fixture(scope="module")
def abi_server(tmp_path_factory, csim_cache):
    """One card per kernel ABI: krnl_rtl (2 CUs), kernel_wrapper native and HW_Quant (2 CUs each),
    FaaST (4 CUs), each model with two instances per compute unit."""
    from fpga_sim.projects import faast_project, kernel_wrapper_project

    repo = tmp_path_factory.mktemp("abi_repo")
    jet = BUNDLED_REPO / "jet_tagger" / "1"
    specs = {}
    v = repo / "rtl" / "1"
    shutil.copytree(jet, v)
    write_card_xclbin(v, "krnl_rtl", cus=2)
    specs["rtl"] = (v, 16, 5, 4, 4096, 0)
    for name, quant in (("wrapper", False), ("wrapper_float", True)):
        v = kernel_wrapper_project(jet, repo / name / "1", num_kernel=2, hw_quant=quant)
        write_card_xclbin(v, "kernel_wrapper", cus=2)
        specs[name] = (v, 16, 5, 4, 4096, len(specs))
    v = faast_project(repo / "faast" / "1")
    write_card_xclbin(v, "faast", cus=4)
    specs["faast"] = (v, 16, 1, 8, 16384, len(specs))
    for name, (v, n_in, n_out, count, max_batch, card) in specs.items():
        abi_model(repo, name, v, n_in, n_out, count, max_batch)
        with (repo / name / "config.pbtxt").open("a") as f:
            f.write(f'parameters {{ key: "cards" value: {{ string_value: "{card}" }} }}\n')
    # every ABI through XRT's C API, the default on a real host (the hw server runs pyxrt)
    proc = serve_cards(repo, tmp_path_factory, "abis", "hardware", len(specs), *specs, api="xrt-c")
    proc.specs = specs
    yield proc
    assert proc.stop() == 0, proc.log()


@pytest.mark.parametrize("model", ["rtl", "wrapper", "wrapper_float", "faast"])
def test_every_kernel_abi_serves_bit_exact_results(abi_server, model):
    """Over gRPC, on the card, equal bit for bit to what --fpga-mode numpy serves (the emulator
    reproduces each project's boundary: T_in words, native input_t, or float with HW_Quant)."""
    from fpgaserve.backends.hls4ml.emulator import FixedPointModel
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    version, n_in, _n_out, _count, _max_batch, card = abi_server.specs[model]
    emulator = FixedPointModel(Hls4mlProject.load(version))
    before = card_stats(abi_server, card)
    sets = edge_inputs(n_in)
    with grpcclient.InferenceServerClient(abi_server.url) as client:
        for name, x in sets.items():
            t = grpcclient.InferInput("x", list(x.shape), "FP32")
            t.set_data_from_numpy(x)
            got = client.infer(model, [t]).as_numpy("y")
            assert_bitwise(got, emulator.predict(x).astype(np.float32), f"{model} {name}")
    after = card_stats_after(abi_server, card, before, len(sets))
    assert after["kernel_completions"] - before["kernel_completions"] == len(sets)
    assert after["hung"] == [] and not after["faults"], after["faults"]
    # through XRT's C API, and none of its blocking calls (syncs, waits) held the GIL
    assert "through card-api xrt-c" in abi_server.log_path.read_text()
    assert after["xrt_c"]["blocking_calls"] > before["xrt_c"]["blocking_calls"], after["xrt_c"]
    assert after["xrt_c"]["blocking_calls_holding_gil"] == 0, after["xrt_c"]


def test_instances_are_spread_over_every_compute_unit(abi_server):
    """Two instances per compute unit: concurrent requests reach every CU of the card."""
    _version, n_in, _n_out, count, _max_batch, card = abi_server.specs["faast"]
    x = edge_inputs(n_in)["unit"][:300]
    done: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(abi_server.url) as client:
        for _ in range(3 * count):
            t = grpcclient.InferInput("x", list(x.shape), "FP32")
            t.set_data_from_numpy(x)
            client.async_infer("faast", [t], callback=lambda result, error: done.put(error))
        errors = [done.get(timeout=120) for _ in range(3 * count)]
    assert errors == [None] * len(errors)
    cus = card_stats(abi_server, card)["cus"]
    assert sorted(cus) == [f"alveo_hls4ml_{i}" for i in range(4)]
    assert all(c["completed"] > 0 for c in cus.values()), cus


# ------------------------------------------------------------------------------ readiness
def test_a_card_that_needs_a_reset_makes_the_model_not_ready(tmp_path_factory, csim_cache):
    """card-reset=off: the one compute unit hangs, the card is closed for the operator's reset,
    ModelReady and ServerReady turn false; after `xbutil reset` the next readiness probe
    reprograms the card and both are true again."""
    root = tmp_path_factory.mktemp("ready_repo")
    card_model(root, "facile", "facile", {"kernel_timeout_secs": "1"})
    proc = serve_cards(
        root,
        tmp_path_factory,
        "ready",
        "hardware",
        1,
        "facile",
        extra=("--backend-config=hls4ml,card-reset=off", "--backend-config=hls4ml,card-retry-secs=0.2"),
    )
    try:
        with grpcclient.InferenceServerClient(proc.url) as client:
            assert client.is_model_ready("facile") and client.is_server_ready()
            (proc.control / "hang-card0").touch()
            with pytest.raises(InferenceServerException) as err:
                client.infer("facile", [_input("facile", edge_inputs(47)["single"])])
            assert err.value.status() == "StatusCode.UNAVAILABLE"
            wait_until(lambda: not client.is_model_ready("facile"), "facile to become not ready")
            assert not client.is_server_ready()
            with pytest.raises(InferenceServerException) as err:
                client.infer("facile", [_input("facile", edge_inputs(47)["single"])])
            assert err.value.status() == "StatusCode.UNAVAILABLE"
            assert "no compute unit of this model serves" in err.value.message(), err.value.message()
            assert card_stats(proc, 0)["bad_state"]  # closed with the hung command outstanding
            wait_until(
                lambda: (
                    "needs a reset (card-reset=off): run `xbutil reset --device 0000:65:00.1 --force`" in proc.log()
                ),
                "the operator's command in the log",
            )
            reset = subprocess.run(
                [str(ROOT / "tests" / "fpga_sim" / "bin" / "xbutil"), "reset", "--device", "0000:65:00.1", "--force"],
                capture_output=True,
                text=True,
                env={**os.environ, "FPGASERVE_SIM_CONTROL_DIR": str(proc.control)},
                check=False,
            )
            assert "Successfully reset" in reset.stdout, reset.stdout + reset.stderr
            wait_until(lambda: client.is_model_ready("facile"), "a probe to bring facile back")
            assert client.is_server_ready()
            x = edge_inputs(47)["corners"]
            assert_bitwise(_infer(proc.url, "facile", x), csim_reference("facile", x, csim_cache), "after the reset")
    finally:
        assert proc.stop() == 0, proc.log()


# ------------------------------------------------------------------------------ request memory in place
def test_a_float32_request_reaches_the_card_from_the_frontends_arena(tmp_path_factory, csim_cache):
    """--frontend-processes 2 on XRT 2.20's binding: a large FP32 request for kernel_wrapper
    with HW_Quant is synced to the card from the arena block the frontend wrote (the engine's
    mapping, wrapped by pyxrt.ext.bo), not copied into a buffer first; the answer is bit for bit
    the emulator's."""
    from fpga_sim.projects import kernel_wrapper_project
    from fpgaserve.backends.hls4ml.emulator import FixedPointModel
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    repo = tmp_path_factory.mktemp("userptr_repo")
    version = kernel_wrapper_project(BUNDLED_REPO / "jet_tagger" / "1", repo / "wrapper_float" / "1", hw_quant=True)
    write_card_xclbin(version, "kernel_wrapper", cus=1)
    abi_model(repo, "wrapper_float", version, 16, 5, 1, 4096)
    saved = os.environ.get("FPGASERVE_SIM_XRT_VERSION")
    os.environ["FPGASERVE_SIM_XRT_VERSION"] = "2.20.197"
    try:
        server = serve_cards(
            repo, tmp_path_factory, "userptr", "hardware", 1, "wrapper_float", extra=("--frontend-processes", "2")
        )
    finally:
        if saved is None:
            os.environ.pop("FPGASERVE_SIM_XRT_VERSION")
        else:
            os.environ["FPGASERVE_SIM_XRT_VERSION"] = saved
    emulator = FixedPointModel(Hls4mlProject.load(version))
    rng = np.random.default_rng(5)
    try:
        with grpcclient.InferenceServerClient(server.url) as client:
            for rows in (2000, 4000):  # 125 and 250 KiB: page-aligned blocks
                x = rng.normal(0, 4, (rows, 16)).astype(np.float32)
                before = _quiet_stats(server, 1)[0]
                t = grpcclient.InferInput("x", list(x.shape), "FP32")
                t.set_data_from_numpy(x)
                got = client.infer("wrapper_float", [t]).as_numpy("y")
                assert_bitwise(got, emulator.predict(x).astype(np.float32), f"{rows} rows")
                after = card_stats_after(server, 0, before, 1)
                assert after["bytes_to_device"] - before["bytes_to_device"] == x.nbytes
                moved = after["bytes_to_device_userptr"] - before["bytes_to_device_userptr"]
                assert moved == x.nbytes, (rows, moved)
    finally:
        assert server.stop() == 0, server.log()
