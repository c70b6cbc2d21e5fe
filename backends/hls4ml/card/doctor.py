"""``fpgaserve doctor``: what a new FPGA host needs, checked before the first request.

::

    fpgaserve doctor [--model-repository R ...] [--card-api auto|xrt-c|xrt|pynq] [--server HOST:PORT] [--json]

Checks, in order, each reported as one row (``ok``, ``warn``, ``fail``, ``skip``):

* the runtime: which card API imports (``pyxrt``, PYNQ 3.0.1) and its XRT version;
* every card: BDF, shell (platform VBNV) and interface UUID, whether calls complete through
  ERT, whether its sensors are readable (containers often lack the xclmgmt sysfs they come
  from: reading nothing is reported, never shown as zero);
* every hls4ml model of the repositories that has an xclbin: the xclbin parses and has a
  bitstream, a card runs the shell it was linked for (and its interface UUID on 2RP shells),
  its kernel has a known ABI and matches ``card.json`` and the project (``manifest.resolve``:
  UUID, firmware hash, N_IN/N_OUT, precisions, argument signature), the buffers
  ``max_batch_size`` needs fit the compute units' banks, and one batch on every compute unit
  of the model on the card equals the numpy emulation (or the C-simulation) bit for bit.
* with ``--server``, a running fpgaserve's repository index (its HTTP port): every model
  version READY, else UNAVAILABLE with the server's reason, e.g. an instance whose process
  crashed too often (a C-simulation that segfaults) and stays down. What the server found at
  run time is only known to the server; the checks above cannot see it.

The exit status is non-zero when any row failed: a host without a card says so, names each
model it could not run, and fails.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ...base import BackendError, config_parameter
from ..project import Hls4mlProject
from .cards import CardPool
from .runtime import CardApi

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
BATCH_ROWS = 64


@dataclass
class Row:
    subject: str  # "runtime", "card 0", "model facile"
    check: str
    status: str
    detail: str = ""


class Doctor:
    def __init__(self, repositories: list[str], api_name: str = "auto", model_config_name: str = "", server: str = ""):
        self.repositories = repositories
        # a running server's HTTP address (host:port) whose repository index is reported
        self.server = server
        self.api_name = api_name
        # the server's --model-config-name: check the configs the server would load
        self.model_config_name = model_config_name
        self.rows: list[Row] = []
        self.api: CardApi | None = None
        self.pool: CardPool | None = None

    def add(self, subject: str, check: str, status: str, detail: str = "") -> None:
        self.rows.append(Row(subject, check, status, detail))

    @property
    def failed(self) -> bool:
        return any(r.status == FAIL for r in self.rows)

    # ------------------------------------------------------------------ runtime and cards
    def check_runtime(self) -> None:
        from .runtime import open_api

        try:
            self.api = open_api(self.api_name)
        except BackendError as e:
            self.add("runtime", "card API", FAIL, str(e))
            return
        sim = " (SIMULATED cards, not hardware)" if self.api.simulated else ""
        self.add("runtime", "card API", OK, f"{self.api.name}: {self.api.version()}{sim}")
        if self.api.name == "xrt":
            from .runtime import skipped_api

            why = skipped_api("xrt-c")
            self.add(
                "runtime",
                "GIL",
                WARN,
                "pyxrt holds the GIL in bo.sync, run.start/wait/state (every XRT release to 2.25), so one card's DMA "
                "stops every other instance's Python; card-api xrt-c (XRT's C API) does not"
                + (f" -- it was not used: {why}" if why else ""),
            )
        if self.api.name == "pynq":
            self.add(
                "runtime",
                "legacy API",
                WARN,
                "PYNQ 3.0.1 drives Alveo only with XRT <= 2.16; XRT's own pyxrt (card-api xrt) works with "
                "every release",
            )
        root = os.environ.get("XILINX_XRT")
        if root is None and not self.api.simulated:
            self.add("runtime", "XILINX_XRT", WARN, "not set: source /opt/xilinx/xrt/setup.sh")

    def check_cards(self) -> None:
        if self.api is None:
            return
        try:
            self.pool = CardPool(self.api, "off")
        except BackendError as e:
            self.add("cards", "probe", FAIL, str(e))
            return
        if self.pool.count() == 0:
            self.add(
                "cards", "probe", FAIL, "no FPGA card found (is the xocl driver loaded? `xbutil examine` lists cards)"
            )
            return
        for card in self.pool.cards():
            d = card.device
            subject = f"card {card.index}"
            sim = " (simulated)" if d.simulated else ""
            iface = f", interface {d.interface_uuid}" if d.interface_uuid else ""
            self.add(subject, "identity", OK, f"{d.bdf or 'no BDF'} shell {d.shell or '?'}{iface}{sim}")
            self.add(
                subject,
                "completion",
                OK if d.ert else WARN,
                "ERT (XRT's embedded scheduler)" if d.ert else "register polling (no ERT capability)",
            )
            reading = d.read_sensors()
            if reading.error or not (reading.rails or reading.temperatures):
                self.add(
                    subject,
                    "sensors",
                    WARN,
                    f"{reading.error or 'nothing reported'}: power and temperature metrics are left out "
                    "(in a container, the host's xclmgmt sysfs is not visible)",
                )
            else:
                power = f", {reading.power:.1f} W" if reading.power is not None else ""
                self.add(
                    subject,
                    "sensors",
                    OK,
                    f"{len(reading.rails)} rails, {len(reading.temperatures)} temperatures{power}",
                )

    # ------------------------------------------------------------------ models
    def check_models(self) -> None:
        for repo in self.repositories:
            root = Path(repo)
            if not root.is_dir():
                self.add(f"repository {repo}", "folder", FAIL, "not a directory")
                continue
            for model_dir in sorted(p for p in root.iterdir() if p.is_dir()):
                self._check_model(model_dir)

    def _check_model(self, model_dir: Path) -> None:
        from fpgaserve.server import model_config as mc

        config_path = mc.config_path(model_dir, self.model_config_name)
        if not config_path.is_file():
            return
        subject = f"model {model_dir.name}"
        try:
            config = mc.read_config_file(config_path)
        except Exception as e:
            self.add(subject, config_path.name, FAIL, str(e))
            return
        if mc.backend_name(config) != "hls4ml":
            return
        versions = sorted((int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()), reverse=True)
        if not versions:
            self.add(subject, "versions", FAIL, "no version folder")
            return
        version_dir = model_dir / str(versions[0])
        cfg = mc.config_dict(config)
        from ..backend import find_bitstream

        try:
            bitstream = find_bitstream(cfg, str(version_dir))
        except BackendError as e:
            self.add(subject, "xclbin", FAIL, str(e))
            return
        if bitstream is None:
            self.add(subject, "xclbin", SKIP, f"no xclbin in {version_dir}: served in emulation only")
            return
        try:
            project = Hls4mlProject.load(version_dir)
            from .manifest import resolve

            binding = resolve(project, version_dir, bitstream)
        except BackendError as e:
            self.add(subject, "xclbin and project", FAIL, str(e))
            return
        xclbin = binding.xclbin
        for warning in binding.warnings:
            self.add(subject, "card.json", WARN, warning)
        if not binding.warnings:
            self.add(
                subject, "card.json", OK, f"{bitstream.name} uuid {xclbin.uuid} matches the project it was packed with"
            )
        self.add(subject, "kernel", OK, binding.abi_class.title + ": " + binding.kernel.signature())
        if not xclbin.has_bitstream:
            self.add(
                subject,
                "bitstream",
                FAIL,
                f"{bitstream.name} has no BITSTREAM section: metadata only, no card can run it",
            )
        if self.pool is None or self.pool.count() == 0:
            self.add(subject, "card", FAIL, f"no card to run {bitstream.name} on (platform {xclbin.platform})")
            return
        from .runtime import shell_mismatch

        mismatches = {c.index: shell_mismatch(xclbin, c.device) for c in self.pool.cards()}
        cards = [c for c in self.pool.cards() if mismatches[c.index] is None]
        if not cards:
            self.add(subject, "platform", FAIL, "; ".join(m for m in mismatches.values() if m))
            return
        iface = f", interface {xclbin.interface_uuid}" if xclbin.interface_uuid else ""
        on = ", ".join(str(c.index) for c in cards)
        self.add(subject, "platform", OK, f"{xclbin.platform}{iface}: card(s) {on}")
        self._check_banks(subject, binding, cfg)
        self._run_batch(subject, binding, project, cards[0], cfg)

    def _check_banks(self, subject: str, binding, cfg: dict) -> None:
        abi = binding.make_abi()
        max_batch = max(int(cfg.get("max_batch_size", 0)), 1)
        rows = abi.call_rows(min(max_batch, abi.max_call_rows or max_batch))
        need = {abi.input_arg.id: abi.input_bytes(rows), abi.output_arg.id: abi.output_bytes(rows)}
        instances = sum(int(g.get("count", 1)) for g in cfg.get("instance_group", [])) or 1
        units = binding.xclbin.compute_units_of(binding.kernel.name)
        per_cu = -(-instances // max(len(units), 1))
        problems = []
        for cu in units:
            for arg_id, nbytes in need.items():
                bank = cu.bank_of(arg_id) if arg_id is not None else None
                if bank is not None and bank.size and nbytes * per_cu > bank.size:
                    problems.append(f"{cu.name}: {per_cu} x {nbytes} bytes > {bank.tag} ({bank.size} bytes)")
        if problems:
            self.add(subject, "banks", FAIL, "; ".join(problems) + ": lower max_batch_size or the instance count")
        else:
            per = ", ".join(
                f"{cu.name}: {'/'.join(sorted({b.tag for bs in cu.banks.values() for b in bs}))}" for cu in units
            )
            self.add(subject, "banks", OK, f"{rows} rows per call fit ({per})")

    def _run_batch(self, subject: str, binding, project: Hls4mlProject, card, cfg: dict) -> None:
        from .runner import CardRunner, Placement

        x = _batch(binding.io.n_in)
        try:
            expected, how = _reference(project, x)
        except BackendError as e:
            self.add(subject, "one batch", SKIP, f"no emulation to compare with: {e}")
            return
        try:
            card.load(binding.xclbin)
        except BackendError as e:
            self.add(subject, "one batch", FAIL, f"card {card.index}: {e}")
            return
        try:
            timeout = float(config_parameter(cfg, "kernel_timeout_secs") or 5.0)
            for name in card.compute_unit_names(binding.kernel.name):
                runner = None
                try:
                    card.load(binding.xclbin)  # the runner's reference, released when it closes
                    try:
                        runner = CardRunner(binding, [Placement(card, name)], 0, BATCH_ROWS, timeout, f"doctor/{name}")
                    except BaseException:
                        card.release()
                        raise
                    got = runner.predict(x)
                except Exception as e:
                    self.add(subject, f"one batch on {name}", FAIL, f"card {card.index}: {e}")
                    continue
                finally:
                    if runner is not None:
                        runner.close()
                same = got.shape == expected.shape and np.array_equal(got.view(np.uint64), expected.view(np.uint64))
                if same:
                    self.add(subject, f"one batch on {name}", OK, f"card {card.index}: {BATCH_ROWS} rows equal {how}")
                else:
                    bad = int(np.sum(np.any(got != expected, axis=1))) if got.shape == expected.shape else BATCH_ROWS
                    self.add(
                        subject,
                        f"one batch on {name}",
                        FAIL,
                        f"card {card.index}: {bad} of {BATCH_ROWS} rows differ from {how}",
                    )
        finally:
            card.release()

    # ------------------------------------------------------------------ a running server
    def check_server(self) -> None:
        """One row per model version in the server's repository index: READY is ok; UNAVAILABLE
        fails with the server's reason, except a version the operator unloaded."""
        if not self.server:
            return
        subject = f"server {self.server}"
        url = f"http://{self.server}/v2/repository/index"
        try:
            request = urllib.request.Request(url, data=b"{}", headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=10) as response:
                index = json.loads(response.read())
        except (OSError, ValueError) as e:  # URLError and HTTPError are OSErrors
            self.add(subject, "repository index", FAIL, f"{url}: {e}")
            return
        if not isinstance(index, list):
            self.add(subject, "repository index", FAIL, f"{url} answered {type(index).__name__}, not a list")
            return
        self.add(subject, "repository index", OK, f"{len(index)} model version(s)")
        for entry in index:
            if not isinstance(entry, dict):
                continue
            name, state = str(entry.get("name", "")), str(entry.get("state", ""))
            version, reason = str(entry.get("version", "")), str(entry.get("reason", ""))
            check = f"served version {version}" if version else "served"
            if state == "READY":
                self.add(f"model {name}", check, OK, "READY")
            elif reason == "unloaded":
                self.add(f"model {name}", check, SKIP, f"{state}: unloaded")
            else:
                self.add(f"model {name}", check, FAIL, f"{state}: {reason}" if reason else state)

    # ------------------------------------------------------------------ report
    def run(self) -> int:
        self.check_runtime()
        self.check_cards()
        self.check_models()
        self.check_server()
        return 1 if self.failed else 0

    def table(self) -> str:
        widths = (
            [max(len(getattr(r, f)) for r in self.rows) for f in ("subject", "check", "status")]
            if self.rows
            else [0, 0, 0]
        )
        lines = []
        for r in self.rows:
            lines.append(
                f"{r.subject:<{widths[0]}}  {r.check:<{widths[1]}}  {r.status.upper():<{widths[2]}}  {r.detail}"
            )
        verdict = "FAILED" if self.failed else "all checks passed"
        lines.append(
            f"fpgaserve doctor: {verdict} ({sum(r.status == FAIL for r in self.rows)} failed, "
            f"{sum(r.status == WARN for r in self.rows)} warnings)"
        )
        return "\n".join(lines)


def _batch(n_in: int) -> np.ndarray:
    """Random rows, zeros, negatives and values beyond the usual ap_fixed ranges."""
    rng = np.random.default_rng(2018)
    x = rng.standard_normal((BATCH_ROWS, n_in)).astype(np.float32)
    x[:4] = 0.0
    x[4:12] *= 40.0
    x[12:20] = -np.abs(x[12:20])
    return x


def _reference(project: Hls4mlProject, x: np.ndarray) -> tuple[np.ndarray, str]:
    from ..emulator import FixedPointModel

    try:
        return FixedPointModel(project).predict(x), "the numpy emulation"
    except BackendError:
        from ..csim import CsimLibrary

        return CsimLibrary.load(project).predict(x), "the C-simulation"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="fpgaserve doctor",
        description="Check this host's FPGA runtime and cards, and run one batch of every hls4ml model with an "
        "xclbin on a card, compared bit for bit with its emulation. Exits non-zero when a check fails.",
    )
    p.add_argument(
        "--model-repository", action="append", default=[], metavar="R", help="repository to check (repeatable)"
    )
    p.add_argument("--card-api", choices=("auto", "xrt-c", "xrt", "pynq"), default="auto")
    p.add_argument(
        "--model-config-name",
        default="",
        metavar="NAME",
        help="as the server's: check <model>/configs/NAME.pbtxt where it exists, else config.pbtxt",
    )
    p.add_argument(
        "--server",
        default="",
        metavar="HOST:PORT",
        help="also report a running fpgaserve's models from its repository index (its HTTP address), "
        "with the reason of any that is UNAVAILABLE",
    )
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    doctor = Doctor(args.model_repository, args.card_api, args.model_config_name, args.server)
    status = doctor.run()
    if args.json:
        print(json.dumps({"ok": status == 0, "rows": [asdict(r) for r in doctor.rows]}, indent=2))
    else:
        print(doctor.table())
    sys.stdout.flush()
    return status


__all__ = ["Doctor", "Row", "main"]
