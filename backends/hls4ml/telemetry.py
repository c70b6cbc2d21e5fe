"""FPGA telemetry for the Prometheus endpoint: ``fpga_*`` families plus GPU-style aliases.

One collector per process (:func:`device_telemetry`, registered with the backends' telemetry
on first use) covers every device, so each family appears once on /metrics: the PYNQ cards of
the :class:`~.cards.CardPool` once a model opens one, and the emulated devices
(``EMU-<index>-<mode>``, emulated.py) once a model runs in an emulation mode. Its
``collect()`` runs once per scrape and reads each card's sensors once (on XRT every
``device_info`` read is an ``xclGetDeviceInfo2`` call into the driver).

``fpga_device_info{device, mode, emulated}`` (value 1) lists every device: ``mode`` is
``hardware`` for a card, else the emulation (``csim``, ``numpy``, ``onnx``). An emulated
device exports utilization, kernel calls and busy time, and nothing that would need a sensor
or a card's memory (no power, energy, temperature, clock, memory, DMA or bitstream families).

Sources, per card (pynq 3.0.1, ``pynq/pl_server/xrt_device.py`` and ``pynq/pmbus.py``):

* ``device.device_info`` (``xclDeviceInfo2``): rails in mV/mA (``m12VAux``/``mAuxCurr``,
  ``m12VPex``/``mPexCurr``, ``mVccIntVol``/``mCurrent``, voltage-only rails), temperatures in
  °C (``mOnChipTemp``, ``mFanTemp``, ``mDimmTemp[4]``, ``mSE98Temp[4]``; XRT reports 0 for a
  sensor the card lacks, so 0 °C is skipped), ``mFanRpm``;
* ``device.sensors`` (``{rail: XrtRail}``) when a device has no ``device_info``;
* ``device.clocks`` (``{"clockN": {"frequency": MHz}}``), else the xclbin's clock table;
* our own accounting in :class:`~.cards.FpgaCard`: no hardware utilization counter exists, so
  ``fpga_utilization`` is the fraction of wall time between two scrapes during which a kernel
  call was in flight on the CU (ap_start written -> ap_idle seen).

Card power is the 12 V input (``12v_aux`` + ``12v_pex``, as ``xbutil`` reports it); energy is
that power integrated (trapezoid) between scrapes.

perf_analyzer ``--collect-metrics`` only parses ``\\n<name>{gpu_uuid="..."} <plain decimal>``
for ``nv_gpu_utilization``, ``nv_gpu_power_usage``, ``nv_gpu_memory_used_bytes`` and
``nv_gpu_memory_total_bytes``: the aliases carry that single label, and
``fpgaserve.server.metrics.plain_gpu_values`` (applied to every scrape) rewrites
prometheus_client's exponent notation (which it uses from 10**6 up, e.g. ``1.6e+10`` bytes)
into the plain digits that regex can read.
"""

from __future__ import annotations

import logging
import math
import threading

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

log = logging.getLogger("fpgaserve.hls4ml.telemetry")

# (rail, voltage field mV, current field mA or None), xclDeviceInfo2 names as pynq's XrtInfoDump
RAILS = (
    ("12v_aux", "m12VAux", "mAuxCurr"),
    ("12v_pex", "m12VPex", "mPexCurr"),
    ("vccint", "mVccIntVol", "mCurrent"),
    ("0v85", "m0v85", None),
    ("12v_sw", "m12vSW", None),
    ("1v8", "m1v8Top", None),
    ("3v3_aux", "m3v3Aux", None),
    ("3v3_pex", "m3v3Pex", None),
    ("mgt0v9avcc", "mMgt0v9", None),
    ("mgtavtt", "mMgtVtt", None),
    ("sys_5v5", "mSys5v5", None),
)
INPUT_RAILS = ("12v_aux", "12v_pex")  # the card's supply: their sum is its power draw
# (sensor label, xclDeviceInfo2 field); arrays give label0..labelN
TEMPERATURES = (("fpga", "mOnChipTemp"), ("fan", "mFanTemp"), ("dimm", "mDimmTemp"), ("se98", "mSE98Temp"))


class _Reading:
    """One scrape's sensor values for one card; absent values are simply not there."""

    def __init__(self):
        self.rails: dict[str, dict[str, float]] = {}  # rail -> {"voltage": V, "current": A, "power": W}
        self.temperatures: dict[str, float] = {}
        self.fan_rpm: float | None = None
        self.clocks: dict[str, float] = {}

    @property
    def power(self) -> float | None:
        powers = [self.rails[r]["power"] for r in INPUT_RAILS if "power" in self.rails.get(r, {})]
        return sum(powers) if powers else None


def _number(value) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def read_sensors(card) -> _Reading:
    """Sample a card's sensors once; a failing read skips that value (logged at debug)."""
    device = card.device
    reading = _Reading()
    info = None
    try:
        info = device.device_info
    except Exception as e:
        log.debug("card %s: device_info unavailable: %s", card.uid, e)
    if info is not None:
        for rail, v_field, i_field in RAILS:
            try:
                mv = _number(getattr(info, v_field))
            except Exception as e:
                log.debug("card %s: rail %s voltage: %s", card.uid, rail, e)
                continue
            if not mv:  # 0 mV: the card has no such rail
                continue
            values = {"voltage": mv / 1000.0}
            if i_field is not None:
                try:
                    ma = _number(getattr(info, i_field))
                except Exception as e:
                    log.debug("card %s: rail %s current: %s", card.uid, rail, e)
                    ma = None
                if ma is not None:
                    values["current"] = ma / 1000.0
                    values["power"] = values["voltage"] * values["current"]
            reading.rails[rail] = values
        for label, name in TEMPERATURES:
            try:
                raw = getattr(info, name)
            except Exception as e:
                log.debug("card %s: temperature %s: %s", card.uid, name, e)
                continue
            try:
                items = list(raw)
                labelled = [(f"{label}{i}", t) for i, t in enumerate(items)]
            except TypeError:
                labelled = [(label, raw)]
            for sensor, t in labelled:
                t = _number(t)
                if t:  # XRT reports 0 for a sensor the card does not have
                    reading.temperatures[sensor] = t
        try:
            reading.fan_rpm = _number(info.mFanRpm)
        except Exception as e:
            log.debug("card %s: fan: %s", card.uid, e)
    if not reading.rails:
        _read_rail_sensors(card, reading)
    _read_clocks(card, reading)
    return reading


def _read_rail_sensors(card, reading: _Reading) -> None:
    """``device.sensors`` (pynq Rail objects) for devices without ``device_info``."""
    try:
        rails = card.device.sensors
        items = list(rails.items())
    except Exception as e:
        log.debug("card %s: sensors unavailable: %s", card.uid, e)
        return
    for name, rail in items:
        values = {}
        for quantity in ("voltage", "current", "power"):
            sensor = getattr(rail, quantity, None)
            if sensor is None:
                continue
            try:
                v = _number(sensor.value)
            except Exception as e:
                log.debug("card %s: rail %s %s: %s", card.uid, name, quantity, e)
                continue
            if v is not None:
                values[quantity] = v
        if values.get("voltage") or values.get("power"):
            reading.rails[str(name)] = values


def _read_clocks(card, reading: _Reading) -> None:
    clocks = None
    try:
        clocks = card.device.clocks
    except Exception as e:
        log.debug("card %s: clocks unavailable: %s", card.uid, e)
    if not clocks:
        overlay = card.overlay
        clocks = getattr(overlay, "clock_dict", None) if overlay is not None else None
    for name, clk in (clocks or {}).items():
        try:
            mhz = _number(clk["frequency"] if isinstance(clk, dict) else clk)
        except Exception as e:
            log.debug("card %s: clock %s: %s", card.uid, name, e)
            continue
        if mhz:
            label = clk.get("name") if isinstance(clk, dict) and clk.get("name") else name
            reading.clocks[str(label)] = mhz


class FpgaTelemetryCollector:
    """prometheus_client custom collector over a :class:`~.cards.CardPool` and the emulated devices."""

    def __init__(self, pool=None, emulated=None):
        self.pool = pool
        self.emulated = emulated  # an emulated.EmulatedDevices, or None
        self._lock = threading.Lock()  # two scrapers at once must not split one interval twice
        self._last_busy: dict[tuple[str, str], tuple[float, float]] = {}  # (card, cu) -> (time, busy s)
        self._last_power: dict[str, tuple[float, float]] = {}  # card -> (time, W)
        self._energy: dict[str, float] = {}

    def watch_cards(self, pool) -> None:
        """Report this pool's cards (a newer pool replaces an older one: both would list the
        same cards under the same labels)."""
        self.pool = pool

    def watch_emulated(self, devices) -> None:
        self.emulated = devices

    def collect(self):
        with self._lock:
            yield from self._collect()

    def _devices(self) -> list:
        found = []
        if self.pool is not None:
            try:
                found += self.pool.cards()
            except Exception as e:
                log.debug("FPGA telemetry: cannot list cards: %s", e)
        if self.emulated is not None:
            found += self.emulated.devices()
        return found

    def _utilization(self, key, now: float, busy: float) -> float:
        last = self._last_busy.get(key)
        self._last_busy[key] = (now, busy)
        if last is None or now <= last[0]:
            return 0.0
        return max(0.0, min(1.0, (busy - last[1]) / (now - last[0])))

    def _integrate(self, uid: str, now: float, power: float | None) -> float:
        last = self._last_power.get(uid)
        if power is None:
            self._last_power.pop(uid, None)
        else:
            self._last_power[uid] = (now, power)
            if last is not None and now > last[0]:
                self._energy[uid] = self._energy.get(uid, 0.0) + (last[1] + power) / 2 * (now - last[0])
        return self._energy.get(uid, 0.0)

    def _collect(self):
        dev = ["device"]
        util = GaugeMetricFamily(
            "fpga_utilization",
            "Fraction of time since the previous scrape a kernel call was running on the compute unit (0-1)",
            labels=["device", "cu"],
        )
        power = GaugeMetricFamily("fpga_power_usage_watts", "Card power draw (12 V inputs), watts", labels=dev)
        rail_power = GaugeMetricFamily(
            "fpga_rail_power_watts", "Power per supply rail, watts", labels=["device", "rail"]
        )
        rail_voltage = GaugeMetricFamily(
            "fpga_rail_voltage_volts", "Voltage per supply rail, volts", labels=["device", "rail"]
        )
        rail_current = GaugeMetricFamily(
            "fpga_rail_current_amperes", "Current per supply rail, amperes", labels=["device", "rail"]
        )
        energy = CounterMetricFamily(
            "fpga_energy_consumption_joules",
            "Card energy since the server started (integrated between scrapes), joules",
            labels=dev,
        )
        temp = GaugeMetricFamily(
            "fpga_temperature_celsius", "Card temperatures, degrees Celsius", labels=["device", "sensor"]
        )
        fan = GaugeMetricFamily("fpga_fan_rpm", "Card fan speed, revolutions per minute", labels=dev)
        clock = GaugeMetricFamily("fpga_clock_mhz", "Clock frequencies, MHz", labels=["device", "clock"])
        mem_used = GaugeMetricFamily("fpga_memory_used_bytes", "Bytes of fpgaserve's buffers on the card", labels=dev)
        mem_total = GaugeMetricFamily(
            "fpga_memory_total_bytes", "Bytes of the memory banks the loaded design uses", labels=dev
        )
        calls = CounterMetricFamily(
            "fpga_kernel_calls", "Kernel calls, counted as each one ends (done or timed out)", labels=["device", "cu"]
        )
        kernel_us = CounterMetricFamily(
            "fpga_kernel_duration_us",
            "Cumulative time a kernel call was running on the compute unit (ap_start to ap_idle; "
            "on an emulated device, an emulated execute), microseconds",
            labels=["device", "cu"],
        )
        dma = CounterMetricFamily(
            "fpga_dma_bytes", "Bytes synced between host and card", labels=["device", "direction"]
        )
        reloads = CounterMetricFamily("fpga_reloads", "Times the card was reprogrammed after a kernel hang", labels=dev)
        info = GaugeMetricFamily(
            "fpga_bitstream_info", "Loaded bitstream (value 1)", labels=["device", "shell", "xclbin_uuid", "simulated"]
        )
        nv_util = GaugeMetricFamily(
            "nv_gpu_utilization",
            "FPGA device utilization rate [0.0 - 1.0] "
            "(mean busy fraction of its compute units; emulated devices: EMU-*)",
            labels=["gpu_uuid"],
        )
        nv_power = GaugeMetricFamily("nv_gpu_power_usage", "FPGA card power usage in watts", labels=["gpu_uuid"])
        nv_used = GaugeMetricFamily(
            "nv_gpu_memory_used_bytes", "FPGA card memory used by fpgaserve, in bytes", labels=["gpu_uuid"]
        )
        nv_total = GaugeMetricFamily(
            "nv_gpu_memory_total_bytes", "FPGA card memory of the loaded design, in bytes", labels=["gpu_uuid"]
        )
        # Triton's name has no _total suffix: samples carry the bare name (as server/metrics.py does)
        nv_energy = Metric(
            "nv_energy_consumption", "FPGA card energy consumption in joules since the server started", "counter"
        )
        device_info = GaugeMetricFamily(
            "fpga_device_info",
            "Devices hls4ml models run on (value 1): mode hardware for a PYNQ card, else the emulation "
            '(csim, numpy, onnx) computing the firmware on the host, emulated="true"',
            labels=["device", "mode", "emulated"],
        )

        for card in self._devices():
            try:
                snap = card.snapshot()
            except Exception as e:
                log.debug("card %s: snapshot failed: %s", getattr(card, "uid", "?"), e)
                continue
            uid = snap.uid
            fractions = []
            for cu, (n_calls, busy) in sorted(snap.cus.items()):
                f = self._utilization((uid, cu), snap.now, busy)
                fractions.append(f)
                util.add_metric([uid, cu], f)
                calls.add_metric([uid, cu], n_calls)
                kernel_us.add_metric([uid, cu], busy * 1e6)
            card_util = sum(fractions) / len(fractions) if fractions else 0.0
            # 4 decimals: below 1e-4 Python would print exponent notation perf_analyzer cannot read
            nv_util.add_metric([uid], round(card_util, 4))
            device_info.add_metric([uid, snap.mode, "true" if snap.emulated else "false"], 1)
            if snap.emulated:
                continue  # no sensors, card memory, DMA or bitstream to report
            reading = read_sensors(card)
            p = reading.power
            total_energy = self._integrate(uid, snap.now, p)
            if p is not None:
                power.add_metric([uid], p)
                nv_power.add_metric([uid], round(p, 3))
            energy.add_metric([uid], total_energy)
            nv_energy.add_sample("nv_energy_consumption", {"gpu_uuid": uid}, total_energy)
            for rail, values in sorted(reading.rails.items()):
                if "voltage" in values:
                    rail_voltage.add_metric([uid, rail], values["voltage"])
                if "current" in values:
                    rail_current.add_metric([uid, rail], values["current"])
                if "power" in values:
                    rail_power.add_metric([uid, rail], values["power"])
            for sensor, t in sorted(reading.temperatures.items()):
                temp.add_metric([uid, sensor], t)
            if reading.fan_rpm is not None:
                fan.add_metric([uid], reading.fan_rpm)
            for name, mhz in sorted(reading.clocks.items()):
                clock.add_metric([uid, name], mhz)
            mem_used.add_metric([uid], snap.memory_used)
            nv_used.add_metric([uid], snap.memory_used)
            if snap.memory_total:
                mem_total.add_metric([uid], snap.memory_total)
                nv_total.add_metric([uid], snap.memory_total)
            dma.add_metric([uid, "to_device"], snap.dma_to_device)
            dma.add_metric([uid, "from_device"], snap.dma_from_device)
            reloads.add_metric([uid], snap.reloads)
            info.add_metric([uid, snap.name, snap.xclbin_uuid, "true" if snap.simulated else "false"], 1)
        yield from (
            util,
            power,
            rail_power,
            rail_voltage,
            rail_current,
            energy,
            temp,
            fan,
            clock,
            mem_used,
            mem_total,
            calls,
            kernel_us,
            dma,
            reloads,
            info,
            device_info,
            nv_util,
            nv_power,
            nv_used,
            nv_total,
            nv_energy,
        )


_PROCESS_COLLECTOR: FpgaTelemetryCollector | None = None
_PROCESS_COLLECTOR_LOCK = threading.Lock()


def device_telemetry() -> FpgaTelemetryCollector:
    """The process's one device collector, registered for /metrics when first asked for.

    One for cards and emulated devices together: two collectors would each emit the
    ``fpga_*`` and ``nv_gpu_*`` families, and a family twice on one page is not valid
    exposition text.
    """
    global _PROCESS_COLLECTOR  # noqa: PLW0603  (the process's one collector, created under the lock)
    with _PROCESS_COLLECTOR_LOCK:
        if _PROCESS_COLLECTOR is None:
            from .. import register_telemetry

            _PROCESS_COLLECTOR = FpgaTelemetryCollector()
            register_telemetry(_PROCESS_COLLECTOR)
        return _PROCESS_COLLECTOR
