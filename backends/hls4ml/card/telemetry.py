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

Sources, per card: the card API's sensor reading (``runtime/``: ``pyxrt``'s ``get_info``
electrical/thermal/mechanical JSON, or pynq 3.0.1's ``xclDeviceInfo2`` fields, ``sensors`` and
``clocks``; a value the card does not report is left out, never exported as 0), the
xclbin's clock table when the runtime has none, and our own accounting in
:class:`~.cards.FpgaCard`: no hardware utilization counter exists, so ``fpga_utilization`` is
the fraction of wall time between two scrapes during which a call was in flight on the CU.
``fpga_healthy{device}`` and ``fpga_compute_unit_healthy{device,cu}`` are 1 while the card or
compute unit serves and 0 while it is out of service (a hang, a reset), see ``cards.py``.

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
import threading

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .runtime import SensorReading

log = logging.getLogger("fpgaserve.hls4ml.telemetry")


def read_sensors(card) -> SensorReading:
    """Sample a card's sensors once (a failing read leaves values out, logged at debug); the
    xclbin's clock table stands in for clocks the runtime does not report."""
    try:
        reading = card.device.read_sensors()
    except Exception as e:
        log.debug("card %s: sensors unavailable: %s", card.uid, e)
        reading = SensorReading(error=str(e))
    if not reading.clocks and card.xclbin is not None:
        reading.clocks = {name: float(mhz) for name, mhz in card.xclbin.clocks.items() if mhz}
    return reading


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
        reloads = CounterMetricFamily(
            "fpga_reloads", "Times the card was recovered (reset and reprogrammed) after a kernel hang", labels=dev
        )
        info = GaugeMetricFamily(
            "fpga_bitstream_info", "Loaded bitstream (value 1)", labels=["device", "shell", "xclbin_uuid", "simulated"]
        )
        healthy = GaugeMetricFamily(
            "fpga_healthy",
            "1 while the card serves on all its compute units, 0 while one is out of service or the card is reset",
            labels=dev,
        )
        cu_healthy = GaugeMetricFamily(
            "fpga_compute_unit_healthy",
            "1 while the compute unit takes calls, 0 after it hung until the card is reset",
            labels=["device", "cu"],
        )
        nv_util = GaugeMetricFamily(
            "nv_gpu_utilization",
            "FPGA device utilization rate [0.0 - 1.0] "
            "(mean busy fraction of its compute units; emulated devices: EMU-*)",
            labels=["gpu_uuid"],
        )
        nv_power = GaugeMetricFamily("nv_gpu_power_usage", "FPGA card power usage in watts", labels=["gpu_uuid"])
        # Triton's name and help; SuperSONIC's power panel divides usage by it
        nv_power_limit = GaugeMetricFamily(
            "nv_gpu_power_limit", "FPGA card power management limit in watts", labels=["gpu_uuid"]
        )
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
            "Devices hls4ml models run on (value 1): mode hardware for a card, else the emulation "
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
            if reading.power_limit_watts is not None:  # never a made-up limit
                nv_power_limit.add_metric([uid], round(reading.power_limit_watts, 3))
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
            healthy.add_metric([uid], 1 if snap.health == "ok" else 0)
            for cu, ok in sorted(snap.cu_healthy.items()):
                cu_healthy.add_metric([uid, cu], 1 if ok and snap.health != "resetting" else 0)
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
            healthy,
            cu_healthy,
            info,
            device_info,
            nv_util,
            nv_power,
            nv_power_limit,
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
            from ... import register_telemetry

            _PROCESS_COLLECTOR = FpgaTelemetryCollector()
            register_telemetry(_PROCESS_COLLECTOR)
        return _PROCESS_COLLECTOR
