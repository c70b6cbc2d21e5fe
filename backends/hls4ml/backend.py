"""``backend: "hls4ml"``: one hls4ml firmware, run on a card or emulated bit for bit.

The model repository says *what* the firmware is (the hls4ml project, the xclbin, the float
reference); the server's ``--fpga-mode`` says *how* it runs, so the same repository serves
on an Alveo host and in CI:

=========  ==================================================================  ================
mode       what runs                                                           exactness
=========  ==================================================================  ================
hardware   the xclbin on a card: XRT's C API, pyxrt or PYNQ (``card/``)        the firmware
csim       hls4ml's C-simulation, compiled with g++ at load (``csim/``)        bit-exact
numpy      vectorized ap_fixed emulation of the same firmware (``emulator/``)  bit-exact
onnx       the float reference model.onnx through ONNX Runtime                 float, not exact
=========  ==================================================================  ================

``auto`` is hardware when a card is present and the version has an xclbin; otherwise numpy
when the emulator reproduces every layer of the firmware bit for bit (it refuses anything
else when the model is built, naming the layer), else csim. The load log line says which
mode each model got and why. Every mode reproduces the same conversions at the firmware's
boundary (``Hls4mlProject.host_io``: what the kernel passes in and out), so they agree bit
for bit whatever kernel ABI the xclbin has (``card/abi/``).

config.pbtxt ``parameters`` (all optional):
``xclbin`` (file in the version folder; default: the only .xclbin/.awsxclbin there),
``compute_unit`` (a compute unit name, a comma-separated list, or ``*``: every compute unit of
the model's kernel, the default; instances are spread over them on all the model's cards),
``cards`` (e.g. "0,1": the cards this model uses; default: every card free or already running
its xclbin), ``kernel_timeout_secs`` (default from ``kernel-timeout-secs``, else 5).

Server-wide (``--backend-config=hls4ml,<key>=<value>``): ``fpga-mode``, ``kernel-timeout-secs``,
``card-api`` (``auto``: XRT's C API when ``libxrt_coreutil`` loads, else pyxrt when it imports,
else PYNQ; ``xrt-c``; ``xrt``; ``pynq``: ``card/runtime/``), ``card-reset``
(``auto``: run ``xbutil reset`` after a hang; ``off``: log the operator's command),
``card-retry-secs`` (health probes retry a card waiting for a reset at most this often, 10),
``csim-compile-memory-mb`` and ``csim-compile-timeout-secs`` (bounds of the g++ build of a
csim model: csim.CompileLimits, else ``FPGASERVE_CSIM_COMPILE_MEMORY_MB``/``..._TIMEOUT_S``).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ..base import Backend, BackendError, TensorDescription, config_parameter, version_file
from . import FPGA_MODES, memory
from .project import Hls4mlProject, ProjectError

log = logging.getLogger("fpgaserve.hls4ml")

DEFAULT_KERNEL_TIMEOUT_S = 5.0
DEFAULT_COMPUTE_UNIT = "*"
_BITSTREAM_SUFFIXES = (".xclbin", ".awsxclbin")
# the wire types the firmware's float ports take; anything else is a config mistake
_FLOAT_TYPES = {"TYPE_FP32": np.float32, "TYPE_FP64": np.float64}


def find_bitstream(config: dict, version_dir: str) -> Path | None:
    """The xclbin/awsxclbin of this version: the ``xclbin`` parameter, else the only one there."""
    named = config_parameter(config, "xclbin")
    if named:
        path = Path(version_file(version_dir, named, "parameter xclbin"))
        if not path.is_file():
            raise BackendError(f"parameter xclbin names '{named}', which is not in {version_dir}")
        return path
    found = sorted(p for p in Path(version_dir).iterdir() if p.suffix in _BITSTREAM_SUFFIXES and p.is_file())
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise BackendError(f"{version_dir} holds several bitstreams ({names}); name one with parameter xclbin")
    return found[0] if found else None


def resolve_mode(
    requested: str,
    config: dict,
    version_dir: str,
    project: Hls4mlProject | None = None,
    card_api: str = "auto",
    emulator: Any = None,
) -> tuple[str, str, Any]:
    """(mode, why, emulator) for this model version; ``why`` goes into the load log line.
    The returned ``emulator`` is the FixedPointModel auto built to decide on numpy mode (reused),
    else None; one given (built by an earlier decision for this version) is reused instead of
    building another."""
    if requested not in FPGA_MODES:
        raise BackendError(f"unknown fpga-mode '{requested}' (choose from {', '.join(FPGA_MODES)})")
    named = config_parameter(config, "xclbin")
    if named:  # in every mode: a config names no file outside its model directory
        version_file(version_dir, named, "parameter xclbin")
    if requested != "auto":
        return requested, "--fpga-mode " + requested, None
    bitstream = find_bitstream(config, version_dir)
    if bitstream is None:
        no_card = "no xclbin in the version folder"
    else:
        from .card.runtime import available_devices

        cards = available_devices(card_api)
        if cards:
            return "hardware", f"auto: {len(cards)} card(s) found, {bitstream.name}", None
        no_card = f"{bitstream.name} present but no FPGA card found"
    # no card: the numpy emulator if it reproduces every layer bit for bit, else the C-simulation
    from .emulator import FixedPointModel

    try:
        if emulator is None:
            emulator = FixedPointModel(project if project is not None else Hls4mlProject.load(version_dir))
    except ProjectError as e:  # UnsupportedLayerError names the layer; io_stream etc. land here too
        return "csim", f"auto: {no_card}; not every layer is emulated by numpy: {e}", None
    return "numpy", f"auto: {no_card}; every layer is emulated bit-exactly by numpy", emulator


# The emulator auto mode built in the engine's process to decide whether a version runs in an
# instance process (``instance_process_by_default``), kept for the version's first instance,
# which would otherwise build the same one again at once (the 512x512x3 separable io_stream
# network: 1.4 s of its load, measured on a shared machine; a 512x512 io_parallel convolution
# also parses its 250 MB im2col filler again). Keyed by the version folder; taken once, and
# replaced by the next decision for that folder.
_DECIDED: dict[str, Any] = {}
_DECIDED_LOCK = threading.Lock()


def _keep_decided(version_dir: str, emulator: Any) -> None:
    with _DECIDED_LOCK:
        _DECIDED[os.path.realpath(version_dir)] = emulator


def _take_decided(version_dir: str) -> Any:
    with _DECIDED_LOCK:
        return _DECIDED.pop(os.path.realpath(version_dir), None)


class Hls4mlBackend(Backend):
    default_filename = "hls4ml_config.yml"
    # csim compiles and runs the firmware sources; hardware loads the bitstream onto a card
    executes_model_files = True
    #: whether this object accounts the emulated device's busy time (not in an instance
    #: process: the server's side of it does, where the telemetry is)
    accounts_device = True
    #: whether this object's process encodes its outputs for the wire (the engine's; not an
    #: instance process), which the memory it sets aside for its batches then counts
    encodes_outputs = True

    @classmethod
    def describe_io(cls, config: dict, version_dir: str):
        project = Hls4mlProject.load(version_dir)
        ins = [TensorDescription(project.input.name, "FP32", project.input_shape)]
        outs = [TensorDescription(project.output.name, "FP32", (project.output.size,))]
        return ins, outs, True

    @classmethod
    def instance_process_by_default(cls, config: dict, version_dir: str, backend_config: dict) -> bool:
        """True where the version runs in csim mode (``--fpga-mode csim``, or ``auto`` choosing
        it): the C-simulation is the operator's firmware C++, compiled at load, and a bug in it
        (a bad pointer, an abort) must fail its batch, not the server. The numpy emulator, the
        float reference and a card's runner are fpgaserve's code and stay in-process. A version
        whose mode cannot be resolved is left in-process: its load then fails with the reason."""
        requested = backend_config.get("fpga-mode", "auto")
        if requested != "auto":
            return requested == "csim"
        try:
            mode, _, emulator = resolve_mode(
                requested, config, version_dir, None, backend_config.get("card-api", "auto")
            )
        except BackendError:
            return False
        if emulator is not None:  # numpy: the version's first instance (in this process) takes it
            _keep_decided(version_dir, emulator)
        return mode == "csim"

    # the parent side of an instance process accounts the emulated device and reads the mode
    # the child resolved (by name: that module imports this one)
    instance_process_host = "fpgaserve.backends.hls4ml.csim.hosted:HostedHls4mlBackend"

    def __init__(self, config: dict, version_dir: str, instance_index: int, backend_config: dict | None = None):
        super().__init__(config, version_dir, instance_index, backend_config)
        requested = self.backend_config.get("fpga-mode", "auto")
        # taken first, so that it is not kept when this load fails
        decided = _take_decided(version_dir) if requested == "auto" else None
        self.project = Hls4mlProject.load(version_dir)
        self._check_io(config)
        self.mode, why, emulator = resolve_mode(
            requested, config, version_dir, self.project, self.backend_config.get("card-api", "auto"), decided
        )
        self._runner = emulator if emulator is not None else self._make_runner()
        # what its batches will take, set aside now: a model that does not fit fails here, alone
        try:
            self.memory, self._piece_rows = memory.plan(
                config.get("name", ""), self.mode, config, self.project, self._runner, self.encodes_outputs
            )
            self._reservation = memory.reserve(self.memory, instance_index)
        except BaseException:
            close = getattr(self._runner, "close", None)
            if close is not None:
                close()
            raise
        self.memory_note = self.memory.note()
        # without a card the firmware runs on the emulated device of its mode, which telemetry
        # reports as a device (EMU-<index>-<mode>); the hardware runner accounts its own calls
        self.emulated_device = (
            None if self.mode == "hardware" or not self.accounts_device else emulated_device(self.mode)
        )
        if instance_index == 0:
            log.info(
                "model %s: hls4ml project %s (%s, %s) runs in %s mode (%s)%s",
                config.get("name"),
                self.project.path,
                self.project.backend,
                self.project.io_type,
                self.mode,
                why,
                self._runner_note(),
            )

    # ------------------------------------------------------------------ load
    def _check_io(self, config: dict) -> None:
        ins, outs = config.get("input", []), config.get("output", [])
        if len(ins) != 1 or len(outs) != 1:
            raise BackendError(
                f"an hls4ml model has one input and one output tensor; config declares {len(ins)} input(s) "
                f"and {len(outs)} output(s)"
            )
        inp, out = ins[0], outs[0]
        self.input_name, self.output_name = inp["name"], out["name"]
        for spec, port, what in ((inp, self.project.input, "input"), (out, self.project.output, "output")):
            dtype = spec.get("data_type", "TYPE_INVALID")
            if dtype not in _FLOAT_TYPES:
                raise BackendError(
                    f"{what} '{spec['name']}' is {dtype}; the hls4ml backend takes TYPE_FP32 or TYPE_FP64 "
                    "(the firmware quantizes to its ap_fixed types itself)"
                )
            dims = [int(d) for d in spec.get("dims", [])]
            count = int(np.prod(dims)) if dims else 1
            if -1 in dims or count != port.size:
                raise BackendError(
                    f"{what} '{spec['name']}' has dims {dims} ({count} elements) but the firmware's "
                    f"{port.name}[] has {port.size}"
                )
        self.output_dtype = _FLOAT_TYPES[outs[0]["data_type"]]
        # the output's shape as the backend makes it: its reshape where it has one (the server
        # presents the config's dims to clients; an empty reshape is a scalar per row)
        made = out["reshape"].get("shape", []) if "reshape" in out else out.get("dims", [])
        self.output_dims = tuple(int(d) for d in made)
        self.max_batch_size = int(config.get("max_batch_size", 0))

    def _make_runner(self):
        if self.mode in ("numpy", "csim"):
            self.project.weight_files()  # one clear error for missing weights, whichever mode
        if self.mode == "numpy":
            from .emulator import FixedPointModel

            return FixedPointModel(self.project)
        if self.mode == "csim":
            from .csim import CompileLimits, CsimLibrary

            try:
                limits = CompileLimits.resolve(self.backend_config)
            except ValueError as e:  # the CLI refuses bad values at startup; an embedder may not
                raise BackendError(str(e)) from None
            return CsimLibrary.load(self.project, limits=limits, name=self.config.get("name"))
        if self.mode == "onnx":
            return OnnxReference(self.config, self.version_dir)
        return self._hardware_runner()

    def _hardware_runner(self):
        from .card import telemetry
        from .card.cards import CardPool
        from .card.manifest import resolve
        from .card.runner import CardRunner
        from .card.runtime import open_api

        bitstream = find_bitstream(self.config, self.version_dir)
        if bitstream is None:
            raise BackendError(
                f"fpga-mode hardware needs an .xclbin or .awsxclbin in {self.version_dir} "
                "(build one with `fpgaserve pack --build-xclbin`, or bring one with `fpgaserve pack --xclbin`; "
                "or serve with --fpga-mode csim)"
            )
        binding = resolve(self.project, self.version_dir, bitstream)
        if self.instance_index == 0:
            for warning in binding.warnings:
                log.warning("model %s: %s", self.config.get("name"), warning)
        api = open_api(self.backend_config.get("card-api", "auto"))
        pool = CardPool.instance(
            api, self.backend_config.get("card-reset", "auto"), self.backend_config.get("engine-cards", "")
        )
        telemetry.device_telemetry().watch_cards(pool)
        timeout = float(
            config_parameter(self.config, "kernel_timeout_secs")
            or self.backend_config.get("kernel-timeout-secs", DEFAULT_KERNEL_TIMEOUT_S)
        )
        placements = self._placements(pool, binding)
        home = placements[self.instance_index % len(placements)]
        self.card = home.card
        self.card.load(binding.xclbin)
        retry = self.backend_config.get("card-retry-secs")
        if retry is not None:
            self.card.retry_s = float(retry)
        try:
            runner = CardRunner(
                binding,
                placements,
                self.instance_index,
                max(self.max_batch_size, 1),
                timeout,
                f"{self.config.get('name')}/{self.instance_index}",
            )
        except BaseException:
            self.card.release()
            raise
        if self.instance_index == 0:
            log.info(
                "model %s: %s; %d compute unit(s): %s",
                self.config.get("name"),
                binding.describe(),
                len(placements),
                ", ".join(f"card {p.card.index} {p.cu}" for p in placements),
            )
        return runner

    def _placements(self, pool, binding) -> list:
        """The (card, compute unit) pairs this model's instances are spread over, interleaved
        across cards so that consecutive instances land on different cards first.

        With a ``cards`` list the cards are the user's; without one, a card holds one xclbin,
        so only cards already running this one or unused ones qualify (other models may own
        the rest). Every instance computes the same list (instances load one after another)."""
        from .card.runner import Placement

        spec = config_parameter(self.config, "cards")
        indices = _card_list(spec, pool.count())
        uuid = binding.xclbin.uuid
        if not spec:
            indices = [i for i in indices if pool.owns(i)]  # (--engine-processes: this process's cards)
            usable = []
            for i in indices:
                card = pool.card(i)
                if card.users == 0 or (card.xclbin is not None and card.xclbin.uuid == uuid):
                    usable.append(i)
            if not usable:
                busy = ", ".join(f"card {i} runs {pool.card(i).xclbin_path}" for i in indices)
                raise BackendError(
                    f"no FPGA card free for {binding.xclbin.path}: {busy}. A card holds one xclbin: "
                    "free a card, or link both kernels into one xclbin"
                )
            indices = usable
        wanted = config_parameter(self.config, "compute_unit", DEFAULT_COMPUTE_UNIT).replace(" ", "")
        available = [cu.name for cu in binding.xclbin.compute_units_of(binding.kernel.name)]
        if wanted == "*":
            names = available
        else:
            names = [n for n in wanted.split(",") if n]
            missing = [n for n in names if n not in available]
            if missing or not names:
                raise BackendError(
                    f"parameter compute_unit '{wanted}' names {', '.join(missing) or 'nothing'}; "
                    f"{os.path.basename(binding.xclbin.path)} has compute units {', '.join(available) or 'none'} "
                    f"of {binding.kernel.name} (or '*' for all)"
                )
        if not names:
            raise BackendError(f"{binding.xclbin.describe()} has no compute unit of kernel {binding.kernel.name}")
        return [Placement(pool.card(i), name) for name in names for i in indices]

    def health(self) -> str | None:
        runner = self._runner
        if self.mode != "hardware" or runner is None:
            return None
        cards = {id(p.card): p.card for p in runner.placements}.values()
        reasons = [r for r in (card.health() for card in cards) if r is not None]
        # the instance serves while any of the model's cards does (it moves to a serving CU)
        return "; ".join(reasons) if len(reasons) == len(cards) else None

    def _runner_note(self) -> str:
        card = getattr(self, "card", None)
        return f"; instance 0 on {card}" if card is not None else ""

    # ------------------------------------------------------------------ run
    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = inputs[self.input_name]
        rows = x.shape[0] if self.max_batch_size > 0 else 1
        shape = (rows, *self.output_dims) if self.max_batch_size > 0 else self.output_dims
        if rows == 0:  # nothing to compute (a card cannot transfer 0 bytes): 0 rows out, as Triton answers
            return {self.output_name: np.zeros(shape, self.output_dtype)}
        x = x.reshape(rows, self.project.input.size)
        # the numpy emulator and the card write their result in the output's dtype (no float64
        # array to convert)
        kwargs: dict[str, Any] = {"dtype": self.output_dtype} if self.mode in ("numpy", "hardware", "csim") else {}
        if self._piece_rows is not None:
            kwargs["piece_rows"] = self._piece_rows  # csim: float64 rows in pieces (memory.py)
        try:
            if self.emulated_device is None:
                y = self._runner.predict(x, **kwargs)
            else:
                with self.emulated_device.executing():
                    y = self._runner.predict(x, **kwargs)
            y = y.astype(self.output_dtype, copy=False)
        except MemoryError as e:  # named: the model, the batch, what it allocated and how much
            raise memory.batch_memory_error(self.config.get("name", ""), self.mode, rows, e) from None
        return {self.output_name: y.reshape(shape)}

    def location(self) -> str | None:
        home = getattr(self._runner, "home", None)  # a card's runner; an emulator has none
        return f"card {home.card.index} {home.cu}" if home is not None else None

    def close(self) -> None:
        self._reservation.release()
        close = getattr(self._runner, "close", None)
        if close is not None:
            close()


def emulated_device(mode: str):
    from .card.telemetry import device_telemetry
    from .emulated import emulated_devices

    devices = emulated_devices()
    device_telemetry().watch_emulated(devices)
    return devices.device(mode)


def _card_list(spec: str | None, count: int) -> list[int]:
    if count == 0:
        raise BackendError(
            "fpga-mode hardware: no FPGA card found (is XRT installed and /opt/xilinx/xrt/setup.sh sourced? "
            "`fpgaserve doctor` checks the host)"
        )
    if not spec:
        return list(range(count))
    try:
        cards = [int(c) for c in spec.replace(" ", "").split(",") if c]
    except ValueError:
        raise BackendError(f"parameter cards must list card indices such as \"0,1\", got '{spec}'") from None
    bad = [c for c in cards if not 0 <= c < count]
    if not cards or bad:
        raise BackendError(f"parameter cards '{spec}' names card(s) {bad or spec}; this host has {count} card(s)")
    return cards


class OnnxReference:
    """The float reference ``model.onnx`` (fpga-mode onnx): quick, but not the firmware's
    fixed-point arithmetic; docs/hls4ml.md gives the measured deviation from csim."""

    def __init__(self, config: dict, version_dir: str):
        from .. import backend_class

        path = Path(version_file(version_dir, "model.onnx", "the float reference"))
        if not path.is_file():
            raise BackendError(
                f"no float reference (model.onnx) was packed for this model: fpga-mode onnx needs {path}; "
                "serve it with --fpga-mode numpy or csim, or pack it again with --float-reference MODEL.onnx"
            )
        # through the registry, as the engine finds backends: ONNX Runtime's session as its backend makes it
        self.session = backend_class("onnxruntime").open_session(str(path), config)  # type: ignore[attr-defined]
        ins, outs = self.session.get_inputs(), self.session.get_outputs()
        if len(ins) != 1 or len(outs) < 1:
            raise BackendError(f"{path} must have one input (has {len(ins)})")
        self.input_name = ins[0].name
        self.output_name = outs[0].name
        # an image model's graph takes [batch, C, H, W]; the backend hands over [batch, C*H*W]
        dims = ins[0].shape[1:]
        self.item_shape = tuple(dims) if all(isinstance(d, int) for d in dims) and len(dims) > 1 else None

    def predict(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        if self.item_shape is not None:
            x = x.reshape(x.shape[0], *self.item_shape)
        y = self.session.run([self.output_name], {self.input_name: x})[0]
        return y.reshape(y.shape[0], -1)
