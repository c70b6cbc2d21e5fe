"""``backend: "hls4ml"``: one hls4ml firmware, run on a card or emulated bit for bit.

The model repository says *what* the firmware is (the hls4ml project, the xclbin, the float
reference); the server's ``--fpga-mode`` says *how* it runs, so the same repository serves
on an Alveo host and in CI:

=========  =================================================================  ===========
mode       what runs                                                          exactness
=========  =================================================================  ===========
hardware   the xclbin on a PYNQ card (one Overlay per card, see cards.py)     the firmware
csim       hls4ml's C-simulation, compiled with g++ at load (csim.py)         bit-exact
numpy      vectorized ap_fixed emulation of the same firmware (emulator.py)   bit-exact
onnx       the float reference model.onnx through ONNX Runtime                float, not exact
=========  =================================================================  ===========

``auto`` is hardware when a card is present and the version has an xclbin; otherwise numpy
when the emulator reproduces every layer of the firmware bit for bit (it refuses anything
else when the model is built, naming the layer), else csim. The load log line says which
mode each model got and why.

config.pbtxt ``parameters`` (all optional):
``xclbin`` (file in the version folder; default: the only .xclbin/.awsxclbin there),
``compute_unit`` (default ``krnl_rtl_1``), ``cards`` (e.g. "0,1": the cards this model's
instances use, round-robin; default all), ``kernel_timeout_secs`` (default from
``--backend-config=hls4ml,kernel-timeout-secs=S``, else 5).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..base import Backend, BackendError, TensorDescription, config_parameter, version_file
from . import FPGA_MODES
from .project import Hls4mlProject, ProjectError

log = logging.getLogger("fpgaserve.hls4ml")

DEFAULT_KERNEL_TIMEOUT_S = 5.0
DEFAULT_COMPUTE_UNIT = "krnl_rtl_1"
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
    requested: str, config: dict, version_dir: str, project: Hls4mlProject | None = None
) -> tuple[str, str, Any]:
    """(mode, why, emulator) for this model version; ``why`` goes into the load log line.
    ``emulator`` is the FixedPointModel auto built to decide on numpy mode (reused), else None."""
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
        from .cards import available_cards

        cards = available_cards()
        if cards:
            return "hardware", f"auto: {len(cards)} card(s) found, {bitstream.name}", None
        no_card = f"{bitstream.name} present but no FPGA card found"
    # no card: the numpy emulator if it reproduces every layer bit for bit, else the C-simulation
    from .emulator import FixedPointModel

    try:
        emulator = FixedPointModel(project if project is not None else Hls4mlProject.load(version_dir))
    except ProjectError as e:  # UnsupportedLayerError names the layer; io_stream etc. land here too
        return "csim", f"auto: {no_card}; not every layer is emulated by numpy: {e}", None
    return "numpy", f"auto: {no_card}; every layer is emulated bit-exactly by numpy", emulator


class Hls4mlBackend(Backend):
    default_filename = "hls4ml_config.yml"
    # csim compiles and runs the firmware sources; hardware loads the bitstream onto a card
    executes_model_files = True

    @classmethod
    def describe_io(cls, config: dict, version_dir: str):
        project = Hls4mlProject.load(version_dir)
        ins = [TensorDescription(project.input.name, "FP32", project.input_shape)]
        outs = [TensorDescription(project.output.name, "FP32", (project.output.size,))]
        return ins, outs, True

    def __init__(self, config: dict, version_dir: str, instance_index: int, backend_config: dict | None = None):
        super().__init__(config, version_dir, instance_index, backend_config)
        self.project = Hls4mlProject.load(version_dir)
        self._check_io(config)
        self.mode, why, emulator = resolve_mode(
            self.backend_config.get("fpga-mode", "auto"), config, version_dir, self.project
        )
        self._runner = emulator if emulator is not None else self._make_runner()
        # without a card the firmware runs on the emulated device of its mode, which telemetry
        # reports as a device (EMU-<index>-<mode>); the hardware runner accounts its own calls
        self.emulated_device = None if self.mode == "hardware" else _emulated_device(self.mode)
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
        self.output_dims = tuple(int(d) for d in outs[0].get("dims", []))
        self.max_batch_size = int(config.get("max_batch_size", 0))

    def _make_runner(self):
        if self.mode in ("numpy", "csim"):
            self.project.weight_files()  # one clear error for missing weights, whichever mode
        if self.mode == "numpy":
            from .emulator import FixedPointModel

            return FixedPointModel(self.project)
        if self.mode == "csim":
            from .csim import CsimLibrary

            return CsimLibrary.load(self.project)
        if self.mode == "onnx":
            return OnnxReference(self.config, self.version_dir)
        return self._hardware_runner()

    def _hardware_runner(self):
        from .cards import CardPool
        from .hardware import HardwareRunner

        bitstream = find_bitstream(self.config, self.version_dir)
        if bitstream is None:
            raise BackendError(
                f"fpga-mode hardware needs an .xclbin or .awsxclbin in {self.version_dir} "
                "(build one with `fpgaserve pack --build-xclbin`, or serve with --fpga-mode csim)"
            )
        if self.project.accelerator is None:
            raise ProjectError(
                f"hls4ml project {self.project.path} is a {self.project.backend} project; a card runs "
                "VivadoAccelerator projects (the krnl_rtl kernel)"
            )
        pool = CardPool.instance()
        from .telemetry import device_telemetry

        device_telemetry().watch_cards(pool)
        timeout = float(
            config_parameter(self.config, "kernel_timeout_secs")
            or self.backend_config.get("kernel-timeout-secs", DEFAULT_KERNEL_TIMEOUT_S)
        )
        card = self._place(pool, str(bitstream))
        self.card = card
        return HardwareRunner(
            self.project,
            card,
            config_parameter(self.config, "compute_unit", DEFAULT_COMPUTE_UNIT),
            max(self.max_batch_size, 1),
            timeout,
        )

    def _place(self, pool, bitstream: str):
        """Acquire this instance's card.

        With a ``cards`` list the placement is the user's: instance i on cards[i mod n].
        Without one, a card holds one bitstream, so only cards already running this
        bitstream or unused ones qualify (other models may own the rest); instance i takes
        the i-th of those, so a model's instances spread over free cards.
        """
        spec = config_parameter(self.config, "cards")
        cards = _card_list(spec, pool.count())
        if spec:
            return pool.acquire(cards[self.instance_index % len(cards)], bitstream)
        real = os.path.realpath(bitstream)
        usable = [i for i in cards if pool.card(i).users == 0 or pool.card(i).xclbin_path == real]
        start = self.instance_index % len(usable) if usable else 0
        errors = []
        for i in usable[start:] + usable[:start]:  # another model may take a card meanwhile
            try:
                return pool.acquire(i, bitstream)
            except BackendError as e:
                errors.append(str(e))
        busy = ", ".join(f"card {i} runs {pool.card(i).xclbin_path}" for i in cards if i not in usable)
        raise BackendError(
            f"no FPGA card free for {bitstream}: {busy or '; '.join(errors)}. A card holds one bitstream: "
            "free a card, or link both kernels into one xclbin"
        )

    def _runner_note(self) -> str:
        card = getattr(self, "card", None)
        return f"; instance 0 on {card}" if card is not None else ""

    # ------------------------------------------------------------------ run
    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = inputs[self.input_name]
        rows = x.shape[0] if self.max_batch_size > 0 else 1
        x = x.reshape(rows, self.project.input.size)
        if self.emulated_device is None:
            y = self._runner.predict(x)
        else:
            with self.emulated_device.executing():
                y = self._runner.predict(x)
        y = y.astype(self.output_dtype, copy=False)
        shape = (rows, *self.output_dims) if self.max_batch_size > 0 else self.output_dims
        return {self.output_name: y.reshape(shape)}

    def close(self) -> None:
        close = getattr(self._runner, "close", None)
        if close is not None:
            close()


def _emulated_device(mode: str):
    from .emulated import emulated_devices
    from .telemetry import device_telemetry

    devices = emulated_devices()
    device_telemetry().watch_emulated(devices)
    return devices.device(mode)


def _card_list(spec: str | None, count: int) -> list[int]:
    if count == 0:
        raise BackendError(
            "fpga-mode hardware: no FPGA card found (pynq.Device.devices is empty: is XRT installed and "
            "XILINX_XRT set, e.g. by sourcing /opt/xilinx/xrt/setup.sh?)"
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
    fixed-point arithmetic; the README gives the measured deviation from csim."""

    def __init__(self, config: dict, version_dir: str):
        from ..onnxruntime_backend import _session

        path = Path(version_file(version_dir, "model.onnx", "the float reference"))
        if not path.is_file():
            raise BackendError(f"fpga-mode onnx needs the float reference {path}, which is missing")
        self.session = _session(str(path), config)
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
