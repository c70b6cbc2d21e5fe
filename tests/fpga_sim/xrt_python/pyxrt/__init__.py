"""A test-only ``pyxrt``: XRT 2.17's Python binding surface over fpgaserve's simulated cards.

``import pyxrt`` finds this package when ``tests/fpga_sim/xrt_python`` is first on ``sys.path``
(``tests/fpga_sim/serve.py`` puts it there); the real module is ``$XILINX_XRT/python/pyxrt*.so``.
:data:`SIMULATED` is True here and absent from the real one; the card says so too, where it does
not disturb what real hosts read: ``get_info(host)`` and ``get_info(platform)`` carry
``"simulated": "true"``; ``get_info(name)`` is the shell VBNV, as on a real card.

The surface is the one ``src/python/pybind11/src/pyxrt.cpp`` binds at XRT 2.17 (202410.2.17.319):

* positional arguments only (pybind11 without ``py::arg`` names): keyword arguments raise
  TypeError, as do wrong argument types ("incompatible function arguments");
* enums behave like pybind11's ``py::enum_``: ``ert_cmd_state`` and ``xclBOSyncDirection`` are
  plain C enums (``==`` against an int works), ``xrt_info_device``, ``bo.flags``,
  ``kernel.cu_access_mode`` and ``xrt_msg_level`` are ``enum class`` (``==`` against an int is
  False); ``ert_cmd_state`` has no RUNNING and no MAX member; ``str()``/``repr()``/``.name``/
  ``.value``/``__members__`` as pybind11 prints them; only ``xrt_msg_level``, ``bo.flags`` and
  ``kernel.cu_access_mode`` export their members to the enclosing scope;
* ``device.get_info`` returns ``str`` for every key; the JSON keys are boost::property_tree's
  ``write_json`` output: pretty-printed with four spaces, every leaf a quoted string, ``/``
  escaped, empty subtrees as ``""``;
* every error is a RuntimeError ``"<what>: <strerror>"`` (``xrt_core::system_error``), except
  ``std::out_of_range`` -> IndexError; failed loads first print XRT's ``[XRT] ERROR:`` lines;
* ``bo.sync`` and ``run.wait`` block *holding the GIL* (the binding never releases it), for the
  modelled DMA time / until the command completes; ``run.wait(ms)`` returns
  ``ERT_CMD_STATE_TIMEOUT`` instead of raising; ``run.state()`` is NEW until completion;
* contexts and hardware contexts follow XRT 2.17's default ``Runtime.hw_context=true``:
  ``kernel(device, uuid, name)`` creates a hw_context, which loads a registered xclbin that is not
  on the card ("Failed to create hardware context" when the load is refused), and CU contexts
  fail as "failed to open cu context: <strerror>" (exclusive use by another kernel);
* ``kernel(*args)`` sets argument i from ``args[i]`` if it is a bo or a 32-bit C int and
  silently skips anything else (the binding swallows every exception), then starts the run;
* ``bo.map()`` is a writable 1-D ``'B'`` memoryview of the host copy; ``bo.read`` returns int8
  numpy; neither touches the card (only ``sync`` does). Unlike real pyxrt, the view keeps the
  memory alive (no use-after-free can be modelled); a non-contiguous array passed to
  ``bo.write`` raises here, where real pyxrt would copy raw memory from its first element.
* a bo in a bank the kernel's CUs are not connected to is handled as XRT does: CUs without that
  connection are dropped from the run; if none is left XRT prints a warning and runs on a copy of
  the buffer in the connected bank (so results written there never reach the caller's buffer).

Not bound by 2.17 and absent here too: ``run.abort``, ``kernel.offset``, register access,
``xclbin.get_ips``, ``hw_context`` methods, ``wait2``. ``add_callback`` raises TypeError: the
binding has no caster for Python callables (pybind11/functional.h is not included).

**Buffers over the caller's memory** (``FPGASERVE_SIM_XRT_VERSION=2.20`` or later; the default
2.17 has none): XRT 2.20 (202520.2.20.x) adds the submodule ``ext`` with ``ext.bo`` and
``ext.bo.access_mode`` (its values exported into ``ext.bo``: ``ext.bo.read``, ...; pyxrt.cpp binds
``xrt::ext::bo``, src/runtime_src/core/common/api/xrt_bo.cpp
implements it), positional arguments only, as here:

* ``ext.bo(device, userptr, size[, access])``: ``userptr`` is what pybind11 casts to ``void*``:
  a PyCapsule holding the address (or None); a Python int is refused (TypeError). XRT makes it a
  host-only buffer in memory group 0 (``adjust_buffer_flags``: XRT_BO_FLAGS_HOST_ONLY, bank and
  slot 0) and calls the driver's userptr ioctl (shim ``xclAllocUserPtrBO``), without checking
  the pointer itself (``alloc_ubuf``'s "userptr is not aligned" is the C++ ``xrt::bo`` userptr
  constructor's, which pyxrt does not bind). xocl then refuses an address that is not
  page-aligned (EINVAL), applies the bank checks of any buffer in topology bank 0, and pins the
  pages for writing (ENOMEM when they are not all mapped writable): "failed to allocate userptr
  bo: <strerror>". The buffer syncs between that memory and its device memory in bank 0, so a
  compute unit not connected to bank 0 gets XRT's copy into a connected bank (the warning
  above). An invalid access mode raises "xrt::ext::bo: invalid access mode" first.
* ``ext.bo(device, None, size[, access])``, ``ext.bo(device, size[, access])`` and the
  ``hw_context`` forms allocate host-only memory the driver provides (Alveo's host-memory bank,
  ``xbutil configure --host-mem``): not modelled, they fail as a card without it does ("failed
  to allocate bo: Invalid argument"). The export-handle forms take an ``xrt::pid_type`` pyxrt
  cannot build (TypeError). ``ext.kernel`` is not modelled.
* ``map()`` of such a buffer is a view of the caller's memory (XRT maps the pinned pages); the
  caller keeps that memory mapped while the buffer lives, as XRT requires.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import types
import weakref
from pathlib import Path
from typing import ClassVar

import numpy as np

_TESTS = Path(__file__).resolve().parents[3]
if str(_TESTS) not in sys.path:
    sys.path.append(str(_TESTS))

from fpga_sim import card as _card  # noqa: E402
from fpga_sim.errors import SimulationError  # noqa: E402
from fpga_sim.xclbin import CLOCK_TYPE_NAMES, MEM_TYPE_NAMES, Xclbin, XclbinError, read_xclbin  # noqa: E402

#: marks this module as the simulator (the real pyxrt has no such attribute)
SIMULATED = True
XCL_BO_FLAGS_NONE = 0
ENV_XRT_VERSION = "FPGASERVE_SIM_XRT_VERSION"
#: the XRT release whose binding this module presents (read at import): 2.17 (default) or 2.20+
XRT_VERSION = os.environ.get(ENV_XRT_VERSION, "").strip() or "2.17.319"
try:
    _RELEASE = tuple(int(p) for p in XRT_VERSION.split(".")[:2])
except ValueError:
    raise SimulationError(f"{ENV_XRT_VERSION} must be an XRT version such as 2.17.319 or 2.20.197") from None
if _RELEASE < (2, 17):
    raise SimulationError(f"{ENV_XRT_VERSION}={XRT_VERSION}: the simulated pyxrt models XRT 2.17 and later")
XRT_BRANCH = {(2, 17): "2024.1", (2, 18): "2024.2", (2, 19): "2025.1", (2, 20): "2025.2"}.get(_RELEASE, "unknown")
NULL_UUID = "00000000-0000-0000-0000-000000000000"


def _incompatible(what: str, args: tuple, kwargs: dict) -> TypeError:
    shown = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
    return TypeError(f"{what}: incompatible function arguments. Invoked with: {shown}")


def _no_kwargs(what: str, args: tuple, kwargs: dict) -> None:
    if kwargs:
        raise _incompatible(what, args, kwargs)


def _c_int(value, what: str, unsigned: bool = False) -> int:
    """pybind11's int caster: ints and objects with __index__ (no floats), in range."""
    if isinstance(value, float) or not hasattr(type(value), "__index__"):
        raise TypeError(f"{what}: incompatible function arguments")
    v = int(value.__index__())
    lo, hi = (0, 2**32 - 1) if unsigned else (-(2**31), 2**31 - 1)
    if not lo <= v <= hi:
        raise TypeError(f"{what}: incompatible function arguments")
    return v


def _size_t(value, what: str) -> int:
    """pybind11's caster for size_t: a non-negative int (or __index__), no floats."""
    if isinstance(value, float) or not hasattr(type(value), "__index__") or int(value.__index__()) < 0:
        raise TypeError(f"{what}: incompatible function arguments")
    return int(value.__index__())


def _raise(e: _card.CardError):
    for line in e.logs:
        print(f"[XRT] ERROR: {line}", file=sys.stderr)
    raise RuntimeError(str(e)) from None


# ---------------------------------------------------------------------------------- enums
class _Enum:
    """pybind11 ``py::enum_`` behaviour (see the module docstring)."""

    __slots__ = ("_value",)
    _names: ClassVar[dict[int, str]] = {}
    _convertible = False
    __members__: ClassVar[dict[str, _Enum]] = {}

    def __init__(self, value):
        self._value = _c_int(value, f"{type(self).__name__}.__init__", unsigned=True)

    @property
    def value(self) -> int:
        return self._value

    @property
    def name(self) -> str:
        # pybind11 sets each member as a class attribute after this property, so a member called
        # "name" (xrt_info_device.name) shadows it, as it does in the real binding
        return self._label()

    def _label(self) -> str:
        return self._names.get(self._value, "???")

    def __int__(self) -> int:
        return self._value

    def __index__(self) -> int:
        return self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __eq__(self, other) -> bool:
        if type(self)._convertible:
            return other is not None and self._value == other
        return type(other) is type(self) and other._value == self._value

    def __ne__(self, other) -> bool:
        return not self.__eq__(other)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self._label()}: {self._value}>"

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self._label()}"


def _make_enum(name: str, members: dict[str, int], convertible: bool, export_to: dict | None = None) -> type:
    cls = type(name, (_Enum,), {"__slots__": (), "_convertible": convertible})
    cls._names = {v: k for k, v in members.items()}
    cls.__members__ = {}
    for k, v in members.items():
        inst = cls(v)
        setattr(cls, k, inst)
        cls.__members__[k] = inst
        if export_to is not None:  # py::enum_::export_values(): members in the enclosing scope too
            export_to[k] = inst
    return cls


xclBOSyncDirection = _make_enum(
    "xclBOSyncDirection",
    {"XCL_BO_SYNC_BO_TO_DEVICE": 0, "XCL_BO_SYNC_BO_FROM_DEVICE": 1, "XCL_BO_SYNC_BO_GMIO_TO_AIE": 2,
     "XCL_BO_SYNC_BO_AIE_TO_GMIO": 3},
    True,
)  # fmt: skip
ert_cmd_state = _make_enum(
    "ert_cmd_state",
    {"ERT_CMD_STATE_NEW": 1, "ERT_CMD_STATE_QUEUED": 2, "ERT_CMD_STATE_COMPLETED": 4, "ERT_CMD_STATE_ERROR": 5,
     "ERT_CMD_STATE_ABORT": 6, "ERT_CMD_STATE_SUBMITTED": 7, "ERT_CMD_STATE_TIMEOUT": 8,
     "ERT_CMD_STATE_NORESPONSE": 9, "ERT_CMD_STATE_SKERROR": 10, "ERT_CMD_STATE_SKCRASHED": 11},
    True,
)  # fmt: skip
_INFO_KEYS = ["bdf", "interface_uuid", "kdma", "max_clock_frequency_mhz", "m2m", "name", "nodma", "offline",
              "electrical", "thermal", "mechanical", "memory", "platform", "pcie_info", "host", "dynamic_regions", "vmr"]  # fmt: skip
_INFO_VALUES = dict(zip(_INFO_KEYS, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 17, 18]))
xrt_info_device = _make_enum("xrt_info_device", _INFO_VALUES, False)
xrt_msg_level = _make_enum(
    "xrt_msg_level",
    {"emergency": 0, "alert": 1, "critical": 2, "error": 3, "warning": 4, "notice": 5, "info": 6, "debug": 7},
    False,
    export_to=globals(),
)


def enumerate_devices() -> int:
    """Number of (simulated) devices: FPGASERVE_SIM_CARDS."""
    return _card.card_count()


def log_message(*args, **kwargs) -> None:
    _no_kwargs("log_message", args, kwargs)
    if len(args) != 3 or not isinstance(args[0], xrt_msg_level) or not all(isinstance(a, str) for a in args[1:]):
        raise _incompatible("log_message", args, kwargs)
    level, tag, msg = args
    if int(level) <= int(xrt_msg_level.warning):
        print(f"[{tag}] {level._label().upper()}: {msg}", file=sys.stderr)


# ---------------------------------------------------------------------------------- uuid
_UUID_TEXT = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def _dashed(hex32: str) -> str:
    h = hex32.lower() if hex32 else "0" * 32
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class uuid:
    """``xrt::uuid``: built from the 36-character text form; only ``to_string()`` is bound
    (no ``__eq__``/``__str__``/``__hash__``: compare ``to_string()`` values)."""

    def __init__(self, *args, **kwargs):
        _no_kwargs("uuid.__init__", args, kwargs)
        if len(args) != 1 or not isinstance(args[0], str):
            raise _incompatible("uuid.__init__", args, kwargs)
        text = args[0]
        # uuid_parse accepts exactly the 36-character form; anything else leaves the bytes unset
        self._hex = text.replace("-", "").lower() if _UUID_TEXT.match(text) else "0" * 32

    @classmethod
    def _from_hex(cls, hex32: str) -> uuid:
        u = cls(NULL_UUID)
        u._hex = hex32.lower() if hex32 else "0" * 32
        return u

    def to_string(self, *args, **kwargs) -> str:
        _no_kwargs("to_string", args, kwargs)
        return _dashed(self._hex)


# ---------------------------------------------------------------------------------- xclbin
class _Vector(list):
    """pybind11 bind_vector: a list-like container."""


class xclbinkernel_vector(_Vector):
    pass


class xclbinmem_vector(_Vector):
    pass


class xclbinip_vector(_Vector):
    pass


class xclbin:
    """``xrt::xclbin`` read from a file: kernels, memories (GROUP_TOPOLOGY, as XRT uses), uuid,
    XSA name."""

    class xclbinkernel:
        def __init__(self, name: str = "", num_args: int = 0):
            self._name, self._num_args = name, num_args

        def get_name(self) -> str:
            return self._name

        def get_num_args(self) -> int:
            return self._num_args

    class xclbinmem:
        def __init__(self, mem=None):
            self._mem = mem

        def get_tag(self) -> str:
            return self._mem.tag if self._mem else ""

        def get_base_address(self) -> int:
            return self._mem.base if self._mem else 0

        def get_size_kb(self) -> int:
            return self._mem.size // 1024 if self._mem else 0

        def get_used(self) -> bool:
            return bool(self._mem and self._mem.used)

        def get_index(self) -> int:
            return self._mem.index if self._mem else 0

    class xclbinip:
        def __init__(self, name: str = ""):
            self._name = name

        def get_name(self) -> str:
            return self._name

    def __init__(self, *args, **kwargs):
        _no_kwargs("xclbin.__init__", args, kwargs)
        self._xb: Xclbin | None = None
        if not args:
            return
        if len(args) != 1 or not isinstance(args[0], str):
            raise _incompatible("xclbin.__init__", args, kwargs)
        try:
            self._xb = read_xclbin(args[0])
        except XclbinError as e:
            raise RuntimeError(str(e)) from None

    def _require(self) -> Xclbin:
        if self._xb is None:
            raise RuntimeError("Invalid xclbin")
        return self._xb

    def get_kernels(self) -> xclbinkernel_vector:
        xb = self._require()
        return xclbinkernel_vector(xclbin.xclbinkernel(k.name, len(k.args)) for k in xb.kernels.values())

    def get_xsa_name(self) -> str:
        return self._require().vbnv

    def get_uuid(self) -> uuid:
        return uuid._from_hex(self._require().uuid)

    def get_mems(self) -> xclbinmem_vector:
        return xclbinmem_vector(xclbin.xclbinmem(m) for m in self._require().groups)

    def get_axlf(self):
        raise TypeError("Unable to convert function return value to a Python type! The signature was\n\t(self) -> axlf")


# ---------------------------------------------------------------------------------- ptree JSON
def _ptree_json(tree) -> str:
    """boost::property_tree::write_json(pretty): a tree is a list of (key, subtree-or-str) pairs;
    a subtree whose keys are all "" is an array; an empty subtree prints as ""."""

    def esc(text: str) -> str:
        out = []
        for ch in text:
            if ch == '"':
                out.append('\\"')
            elif ch == "\\":
                out.append("\\\\")
            elif ch == "/":
                out.append("\\/")
            elif ch == "\n":
                out.append("\\n")
            elif ch == "\t":
                out.append("\\t")
            elif ord(ch) < 0x20:
                out.append(f"\\u{ord(ch):04x}")
            else:
                out.append(ch)
        return "".join(out)

    def write(node, indent: int) -> str:
        if isinstance(node, str) or (indent > 0 and not node):
            return f'"{esc(node if isinstance(node, str) else "")}"'
        pad, inner = " " * (4 * indent), " " * (4 * (indent + 1))
        if indent > 0 and all(k == "" for k, _ in node):
            items = [inner + write(v, indent + 1) for _, v in node]
            return "[\n" + ",\n".join(items) + "\n" + pad + "]"
        items = [f'{inner}"{esc(k)}": {write(v, indent + 1)}' for k, v in node]
        return "{\n" + ",\n".join(items) + ("\n" if items else "") + pad + "}"

    return write(tree, 0) + "\n"


def _arr(items) -> list:
    return [("", i) for i in items]


# ---------------------------------------------------------------------------------- device
#: xclbins this process loaded or registered, per card: XRT keeps them in its one core device
#: object per card and process, whichever xrt::device handle was used
_REGISTERED: dict[int, dict[str, Xclbin]] = {}


class _DeviceImpl:
    """What an ``xrt::device`` holds: the card and this process's open handle of it."""

    def __init__(self, card: _card.SimCard):
        self.card = card
        self.handle = card.open()
        self.registered = _REGISTERED.setdefault(card.index, {})
        weakref.finalize(self, self.handle.close)


class device:
    """``xrt::device(index | bdf)``: opens the card (held open while this object, or a kernel, bo
    or run made from it, is alive; the last one gone closes it, as the device file is closed)."""

    def __init__(self, *args, **kwargs):
        _no_kwargs("device.__init__", args, kwargs)
        self._impl: _DeviceImpl | None = None
        if not args:
            return
        if len(args) != 1:
            raise _incompatible("device.__init__", args, kwargs)
        target = args[0]
        if isinstance(target, str):
            if target.isdigit():
                index = int(target)
            else:
                found = (
                    _card.index_of_bdf(target)
                    if re.fullmatch(r"(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]", target)
                    else None
                )
                if found is None:
                    raise RuntimeError(f"No such device '{target}': Invalid argument")
                index = found
        else:
            index = _c_int(target, "device.__init__", unsigned=True)
        if index >= _card.card_count():
            raise RuntimeError(f" No such device with index '{index}'")
        self._impl = _DeviceImpl(_card.get_card(index))

    def _require(self) -> _DeviceImpl:
        if self._impl is None:
            raise RuntimeError("No device handle: Invalid argument")
        return self._impl

    @property
    def _simcard(self) -> _card.SimCard:
        """The simulated card behind this device (test helper; not part of pyxrt)."""
        return self._require().card

    def load_xclbin(self, *args, **kwargs) -> uuid:
        _no_kwargs("load_xclbin", args, kwargs)
        if len(args) != 1 or not isinstance(args[0], (str, xclbin)):
            raise _incompatible("load_xclbin", args, kwargs)
        impl = self._require()
        if isinstance(args[0], str):
            try:
                xb = read_xclbin(args[0])
            except XclbinError as e:
                raise RuntimeError(str(e)) from None
        else:
            xb = args[0]._require()
        try:
            impl.card.load(xb)
        except _card.CardError as e:
            _raise(e)
        impl.registered[xb.uuid] = xb
        return uuid._from_hex(xb.uuid)

    def register_xclbin(self, *args, **kwargs) -> uuid:
        """Records the xclbin with the device; the card is programmed when a hw_context is made."""
        _no_kwargs("register_xclbin", args, kwargs)
        if len(args) != 1 or not isinstance(args[0], xclbin):
            raise _incompatible("register_xclbin", args, kwargs)
        xb = args[0]._require()
        self._require().registered[xb.uuid] = xb
        return uuid._from_hex(xb.uuid)

    def get_xclbin_uuid(self, *args, **kwargs) -> uuid:
        _no_kwargs("get_xclbin_uuid", args, kwargs)
        return uuid._from_hex(self._require().card.loaded_uuid())

    def get_info(self, *args, **kwargs) -> str:
        _no_kwargs("get_info", args, kwargs)
        if len(args) != 1 or not isinstance(args[0], xrt_info_device):
            raise _incompatible("get_info", args, kwargs)
        return _info(self._require().card, args[0]._label())


def _info(card: _card.SimCard, key: str) -> str:
    if key == "bdf":
        return card.bdf
    if key == "interface_uuid":
        return _dashed(card.shell.interface_uuid)
    if key in ("kdma", "m2m", "nodma", "offline"):
        return "0"
    if key == "name":
        return card.vbnv
    if key == "max_clock_frequency_mhz":
        xb = card.xclbin if card.loaded_uuid() else None
        return str(max((mhz for _, _, mhz in xb.clocks), default=0) if xb else 500)
    builders = {
        "electrical": _electrical,
        "thermal": _thermal,
        "mechanical": _mechanical,
        "memory": _memory,
        "platform": _platform,
        "pcie_info": _pcie,
        "host": _host,
        "dynamic_regions": _dynamic_regions,
        "vmr": lambda c: [],
    }
    build = builders.get(key)
    return _ptree_json(build(card)) if build else "NA"


def _volts(mv: float) -> str:
    return f"{mv / 1000:.3f}"


def _electrical(card: _card.SimCard):
    if not _card.sensors_readable():
        # sdm_sensor_info: no /sys/bus/pci/devices/<bdf>/hwmon folder -> an empty list
        return [("msg", "No sensors present")]
    s = card.sensor_values()
    present = {
        "12v_aux": (s["12v_aux_mv"], s["12v_aux_ma"]),
        "12v_pex": (s["12v_pex_mv"], s["12v_pex_ma"]),
        "3v3_pex": (s["3v3_pex_mv"], s["3v3_pex_ma"]),
        "3v3_aux": (s["3v3_aux_mv"], 0),
        "vccint": (s["vccint_mv"], s["vccint_ma"]),
        "ddr_vpp_btm": (s["ddr_vpp_btm_mv"], 0),
        "ddr_vpp_top": (s["ddr_vpp_top_mv"], 0),
        "5v5_system": (s["5v5_mv"], 0),
        "1v2_top": (s["1v2_top_mv"], 0),
        "vcc_1v2_btm": (s["1v2_btm_mv"], 0),
        "1v8_top": (s["1v8_mv"], 0),
        "0v9_vcc": (s["mgt0v9_mv"], 0),
        "12v_sw": (s["12v_sw_mv"], 0),
        "mgt_vtt": (s["mgtvtt_mv"], 0),
    }
    rails = [
        ("12v_aux", "12 Volts Auxillary"), ("12v_pex", "12 Volts PCI Express"), ("3v3_pex", "3.3 Volts PCI Express"),
        ("3v3_aux", "3.3 Volts Auxillary"), ("vccint", "Internal FPGA Vcc"), ("vccint_io", "Internal FPGA Vcc IO"),
        ("ddr_vpp_btm", "DDR Vpp Bottom"), ("ddr_vpp_top", "DDR Vpp Top"), ("5v5_system", "5.5 Volts System"),
        ("1v2_top", "Vcc 1.2 Volts Top"), ("vcc_1v2_btm", "Vcc 1.2 Volts Bottom"), ("1v8_top", "1.8 Volts Top"),
        ("0v9_vcc", "0.9 Volts Vcc"), ("12v_sw", "12 Volts SW"), ("mgt_vtt", "Mgt Vtt"), ("3v3_vcc", "3.3 Volts Vcc"),
        ("hbm_1v2", "1.2 Volts HBM"), ("vpp2v5", "Vpp 2.5 Volts"), ("12v_aux1", "12 Volts Aux1"),
        ("vcc1v2_i", "Vcc 1.2 Volts i"), ("v12_in_i", "V12 in i"), ("v12_in_aux0_i", "V12 in Aux0 i"),
        ("v12_in_aux1_i", "V12 in Aux1 i"), ("vcc_aux", "Vcc Auxillary"), ("vcc_aux_pmc", "Vcc Auxillary Pmc"),
        ("vcc_ram", "Vcc Ram"), ("0v9_vccint_vcu", "0.9 Volts Vcc Vcu"),
    ]  # fmt: skip
    out = []
    for rid, desc in rails:
        mv, ma = present.get(rid, (0, 0))
        out.append(
            (
                "",
                [
                    ("id", rid),
                    ("description", desc),
                    ("voltage", [("volts", _volts(mv)), ("is_present", "true" if mv else "false")]),
                    ("current", [("amps", _volts(ma)), ("is_present", "true" if ma else "false")]),
                ],
            )
        )
    watts = (
        s["12v_pex_mv"] * s["12v_pex_ma"] + s["12v_aux_mv"] * s["12v_aux_ma"] + s["3v3_pex_mv"] * s["3v3_pex_ma"]
    ) / 1e6
    return [
        ("power_rails", out),
        ("power_consumption_max_watts", "225"),
        ("power_consumption_watts", f"{watts:.6f}"),
        ("power_consumption_warning", "false"),
    ]


def _thermal(card: _card.SimCard):
    if not _card.sensors_readable():
        return [("thermals", [("msg", "No sensors present")])]
    s = card.sensor_values()
    rows = [
        ("pcb_top_front", "PCB Top Front", s["pcb_top_front_c"]), ("pcb_top_rear", "PCB Top Rear", s["pcb_top_rear_c"]),
        ("pcb_bottom_front", "PCB Bottom Front", s["pcb_bottom_front_c"]), ("cage_temp_0", "Cage0", 0),
        ("cage_temp_1", "Cage1", 0), ("cage_temp_2", "Cage2", 0), ("cage_temp_3", "Cage3", 0),
        ("fpga0", "FPGA", s["fpga_c"]), ("int_vcc", "Int Vcc", s["int_vcc_c"]), ("fpga_hbm", "FPGA HBM", 0),
    ]  # fmt: skip
    return [
        (
            "thermals",
            _arr(
                [("location_id", lid), ("description", d), ("temp_C", str(t)), ("is_present", "true" if t else "false")]
                for lid, d, t in rows
            ),
        )
    ]


def _mechanical(card: _card.SimCard):
    if not _card.sensors_readable():
        return [("fans", [("msg", "No sensors present")])]
    s = card.sensor_values()
    fan = [
        ("location_id", "fpga_fan_1"),
        ("description", "FPGA Fan 1"),
        ("critical_trigger_temp_C", "65"),
        ("speed_rpm", str(s["fan_rpm"])),
        ("is_present", "true"),
    ]
    return [("fans", _arr([fan]))]


def _memory(card: _card.SimCard):
    c = card.counts
    metrics = _arr(
        [
            [("channel_id", "0"), ("host_to_card_bytes", hex(c["bytes_to_device"])), ("card_to_host_bytes", "0x0")],
            [("channel_id", "1"), ("host_to_card_bytes", "0x0"), ("card_to_host_bytes", hex(c["bytes_from_device"]))],
        ]
    )
    xb = card.xclbin if card.loaded_uuid() else None
    memories, groups = [], []
    if xb is not None:
        usage = {}
        for b in card.buffers:
            n, count = usage.get(b.bank, (0, 0))
            usage[b.bank] = (n + b.size, count + 1)
        s = card.sensor_values()
        for m in xb.groups:
            entry = [
                ("xclbin_uuid", _dashed(xb.uuid)),
                ("hw_context_slot", "0"),
                ("type", MEM_TYPE_NAMES.get(m.mem_type, "MEM_DRAM")),
                ("tag", m.tag),
                ("enabled", "true" if m.used else "false"),
                ("base_address", hex(m.base)),
                ("range_bytes", hex(m.size)),
            ]
            allocated, count = usage.get(m.index, (0, 0))
            extended = [("usage", [("allocated_bytes", str(allocated)), ("buffer_objects_count", str(count))])]
            if m.index < len(xb.mems) and m.mem_type == 1 and m.index < 4:
                extended.append(("temperature_C", str(s[f"dimm{m.index}_c"])))
            entry.append(("extended_info", extended))
            (memories if m.index < len(xb.mems) else groups).append(entry)
    board = [
        ("direct_memory_accesses", [("type", "pcie xdma"), ("metrics", metrics)]),
        (
            "memory",
            [("data_streams", []), ("memories", _arr(memories))]
            + ([("memory_groups", _arr(groups))] if groups else []),
        ),
    ]
    return [("board", board)]


def _platform(card: _card.SimCard):
    shell = card.shell
    xb = card.xclbin if card.loaded_uuid() else None
    clocks = xb.clocks if xb else [("DATA_CLK", 1, 300), ("KERNEL_CLK", 2, 500)]
    ddr = [b for b in shell.banks if b.tag.startswith(("DDR", "bank"))]
    platform = [
        (
            "static_region",
            [
                ("vbnv", shell.vbnv),
                ("logic_uuid", _dashed(shell.logic_uuid).upper()),
                ("jtag_idcode", "0x4b57093"),
                ("fpga_name", shell.fpga_part),
            ],
        ),
        (
            "clocks",
            _arr(
                [
                    ("id", name),
                    ("description", CLOCK_TYPE_NAMES.get(kind, "Unused").capitalize()),
                    ("freq_mhz", str(mhz)),
                ]
                for name, kind, mhz in clocks
            ),
        ),
        ("status", [("mig_calibrated", "true"), ("p2p_status", "disabled"), ("host_memory_status", "disabled")]),
        (
            "off_chip_board_info",
            [("ddr_size_bytes", str(sum(b.size for b in ddr))), ("ddr_count", str(len(ddr)))],
        ),
        (
            "controller",
            [
                ("satellite_controller", [("version", "4.2.0"), ("expected_version", "4.2.0")]),
                (
                    "card_mgmt_controller",
                    [("version", "3.1.0"), ("serial_number", f"SIM{card.index:09d}"), ("oem_id", "Xilinx")],
                ),
            ],
        ),
        ("macs", []),
        ("config", []),
        ("simulated", "true"),
    ]
    return [("platforms", _arr([platform]))]


def _pcie(card: _card.SimCard):
    return [
        ("vendor", "0x10ee"),
        ("device", "0x5005"),
        ("revision", "0x00"),
        ("sub_device", "0x000e"),
        ("sub_vendor", "0x10ee"),
        ("link_speed_gbit_sec", "8"),
        ("expected_link_speed_gbit_sec", "8"),
        ("express_lane_width_count", "16"),
        ("expected_express_lane_width_count", "16"),
        ("dma_thread_count", "2"),
        ("cpu_affinity", f"0-{(os.cpu_count() or 1) - 1}"),
        ("max_shared_host_mem_aperture_bytes", "0 Byte"),
        ("shared_host_mem_size_bytes", "0 Byte"),
        ("enabled_host_mem_size_bytes", "0 Byte"),
    ]


def _host(card: _card.SimCard):
    h = "simulated (fpgaserve tests/fpga_sim)"
    return [
        ("version", XRT_VERSION),
        ("branch", XRT_BRANCH),
        ("hash", h),
        ("build_date", "n/a"),
        ("drivers", _arr([[("name", "xocl"), ("version", XRT_VERSION), ("hash", h)],
                          [("name", "xclmgmt"), ("version", XRT_VERSION), ("hash", h)]])),
        ("simulated", "true"),
    ]  # fmt: skip


def _dynamic_regions(card: _card.SimCard):
    xb = card.xclbin if card.loaded_uuid() else None
    if xb is None:
        return [("dynamic_regions", [])]
    cus = []
    for cu in card.cus:
        busy = bool(cu.queue)
        mask = 0x1 if busy else 0x4
        cus.append(
            [
                ("name", f"{cu.kernel}:{cu.name}"),
                ("base_address", hex(cu.base)),
                ("usage", str(cu.completed)),
                ("type", "PL"),
                ("status", [("bit_mask", hex(mask)), ("bits_set", _arr(["START" if busy else "IDLE"]))]),
            ]
        )
    region = [("id", "0"), ("xclbin_uuid", _dashed(xb.uuid).upper()), ("compute_units", _arr(cus))]
    return [("dynamic_regions", _arr([region]))]


# ---------------------------------------------------------------------------------- hw_context
class hw_context:
    """``xrt::hw_context(device, uuid)`` (2.16-2.20: no methods): programs the card with the
    xclbin registered (or loaded) under ``uuid``, with the same rules as load_xclbin."""

    def __init__(self, *args, **kwargs):
        _no_kwargs("hw_context.__init__", args, kwargs)
        self._device: _DeviceImpl | None = None
        self._uuid = ""
        if not args:
            return
        if len(args) != 2 or not isinstance(args[0], device) or not isinstance(args[1], uuid):
            raise _incompatible("hw_context.__init__", args, kwargs)
        impl = args[0]._require()
        xb = impl.registered.get(args[1]._hex)
        if xb is None:
            raise RuntimeError(
                f"No xclbin with uuid '{args[1].to_string()}' registered with the device: Invalid argument"
            )
        try:
            impl.card.load(xb)
        except _card.CardError as e:
            for line in e.logs:
                print(f"[XRT] ERROR: {line}", file=sys.stderr)
            raise RuntimeError("Failed to create hardware context") from None
        self._device, self._uuid = impl, xb.uuid


# ---------------------------------------------------------------------------------- kernel
class _KernelImpl:
    """What a kernel holds: device, xclbin metadata, its CUs and their open contexts."""

    def __init__(self, dev: _DeviceImpl, xb: Xclbin, name: str, exclusive: bool):
        self.device = dev
        self.xclbin = xb
        kname, _, inst = name.partition(":")
        self.name = kname
        meta = xb.kernels.get(kname)
        if meta is None:
            raise RuntimeError(f"No such kernel '{kname}': Invalid argument")
        self.meta = meta
        self._connections: dict[int, dict[int, set[int]]] = {}
        cus = [cu for cu in xb.cus if cu.kernel == kname]
        if inst:
            wanted = {x.strip() for x in inst.strip("{}").split(",") if x.strip()}
            cus = [cu for cu in cus if cu.name in wanted]
        if not cus:
            raise RuntimeError(f"No compute units matching '{name}'")
        self.cus = [cu.index for cu in cus]
        try:
            self.ctx = dev.card.open_context(xb.uuid, self.cus, exclusive)
        except _card.CardError as e:
            # with Runtime.hw_context (default true) contexts open through DRM_IOCTL_XOCL_OPEN_CU_CTX
            raise RuntimeError(f"failed to open cu context: {os.strerror(e.errno)}") from None
        weakref.finalize(self, self.ctx.close, True)

    def connections(self, cu_index: int) -> dict[int, set[int]]:
        """Argument index -> the memory banks it is connected to on CU ``cu_index`` (the
        xclbin's metadata: made once per CU, not to be changed by callers)."""
        made = self._connections.get(cu_index)
        if made is None:
            cu = self.xclbin.cus[cu_index]
            made = self._connections[cu_index] = {arg: set(mems) for arg, mems in cu.arg_mems.items()}
        return made

    def payload_size(self) -> int:
        return max([0x10] + [a.offset + a.size for a in self.meta.args])


class kernel:
    """``xrt::kernel(device, uuid, name[, mode])`` or ``(hw_context, name)``; ``name`` may select
    CUs: ``"krnl:{krnl_1,krnl_2}"``. Opens a context on each CU (shared by default)."""

    cu_access_mode = _make_enum("cu_access_mode", {"exclusive": 0, "shared": 1, "none": 2}, False)

    def __init__(self, *args, **kwargs):
        _no_kwargs("kernel.__init__", args, kwargs)
        mode = kernel.cu_access_mode.shared
        if len(args) == 2 and isinstance(args[0], hw_context) and isinstance(args[1], str):
            ctx = args[0]
            if ctx._device is None:
                raise RuntimeError("No hardware context: Invalid argument")
            dev, uid, name = ctx._device, ctx._uuid, args[1]
        elif (
            len(args) in (3, 4)
            and isinstance(args[0], device)
            and isinstance(args[1], uuid)
            and isinstance(args[2], str)
        ):
            if len(args) == 4:
                if not isinstance(args[3], kernel.cu_access_mode):
                    raise _incompatible("kernel.__init__", args, kwargs)
                mode = args[3]
            dev, uid, name = args[0]._require(), args[1]._hex, args[2]
        else:
            raise _incompatible("kernel.__init__", args, kwargs)
        xb = dev.registered.get(uid)
        if xb is None:
            # the device does not know this xclbin: XRT finds no kernel metadata for it
            raise RuntimeError(f"No such kernel '{name.partition(':')[0]}': Invalid argument")
        if not isinstance(args[0], hw_context):
            # kernel(device, uuid, ...) makes its own hw_context, which (xrt.ini Runtime.hw_context,
            # default true) loads the xclbin: a no-op when it is loaded, the load rules otherwise
            try:
                dev.card.load(xb)
            except _card.CardError as e:
                for line in e.logs:
                    print(f"[XRT] ERROR: {line}", file=sys.stderr)
                raise RuntimeError("Failed to create hardware context") from None
        self._impl = _KernelImpl(dev, xb, name, mode == kernel.cu_access_mode.exclusive)

    def __call__(self, *args, **kwargs) -> run:
        _no_kwargs("kernel.__call__", args, kwargs)
        r = run(self)
        for i, item in enumerate(args):
            # pyxrt.cpp: try set_arg(i, item.cast<xrt::bo>()), then set_arg<int>(i, item.cast<int>()),
            # each inside catch (std::exception) {} - anything else is silently not set
            if isinstance(item, bo):
                try:
                    r.set_arg(i, item)
                except (RuntimeError, IndexError, TypeError):
                    pass
                continue
            try:
                value = _c_int(item, "cast<int>")
            except TypeError:
                continue
            try:
                r.set_arg(i, value)
            except (RuntimeError, IndexError, TypeError):
                pass
        r.start()
        return r

    def group_id(self, *args, **kwargs) -> int:
        """Memory bank index (bits 0-15) and slot (16-23) for a buffer of argument ``argno``: the
        largest topology index connected to that argument on the first CU (-1 -> 0xFFFF for an
        argument below the last memory argument without connections; IndexError past it)."""
        _no_kwargs("group_id", args, kwargs)
        if len(args) != 1:
            raise _incompatible("group_id", args, kwargs)
        argno = _c_int(args[0], "group_id")
        conns = self._impl.connections(self._impl.cus[0])
        size = max(conns, default=-1) + 1
        if argno < 0 or argno >= size:
            raise IndexError(
                f"vector::_M_range_check: __n (which is {argno % 2**64}) >= this->size() (which is {size})"
            )
        bank = max(conns[argno]) if conns.get(argno) else -1
        return (bank & 0xFFFF) | (0 << 16)


for _k, _v in kernel.cu_access_mode.__members__.items():
    setattr(kernel, _k, _v)


# ---------------------------------------------------------------------------------- bo
class bo:
    """``xrt::bo(device, size, flags, group)`` or the sub-buffer ``bo(parent, size, offset)``."""

    flags = _make_enum(
        "flags",
        {
            "normal": 0,
            "cacheable": 1 << 24,
            "device_only": 1 << 28,
            "host_only": 1 << 29,
            "p2p": 1 << 30,
            "svm": 1 << 27,
        },
        False,
    )

    def __init__(self, *args, **kwargs):
        _no_kwargs("bo.__init__", args, kwargs)
        if len(args) == 4 and isinstance(args[0], device) and isinstance(args[2], bo.flags):
            dev = args[0]._require()
            size = _size_t(args[1], "bo.__init__")
            group = _c_int(args[3], "bo.__init__", unsigned=True)
            flag = args[2]
            if flag in (bo.flags.host_only, bo.flags.p2p, bo.flags.svm):
                # host-memory, P2P and SVM buffers are not modelled
                raise RuntimeError("failed to allocate bo: Invalid argument")
            try:
                self._buf = dev.card.alloc(dev.handle, size, group & 0xFFFF, host=flag != bo.flags.device_only)
            except _card.CardError as e:
                raise RuntimeError(str(e)) from None
            self._device = dev
            self._group = group & 0xFFFF
            weakref.finalize(self, dev.card.free, self._buf)
        elif len(args) == 3 and isinstance(args[0], bo):
            parent = args[0]
            size = _size_t(args[1], "bo.__init__")
            offset = _size_t(args[2], "bo.__init__")
            try:
                self._buf = parent._device.card.sub_buffer(parent._buf, size, offset)
            except _card.CardError as e:
                raise RuntimeError(str(e)) from None
            self._device = parent._device
            self._group = parent._group
            self._parent = parent  # keeps the parent's memory
        else:
            raise _incompatible("bo.__init__", args, kwargs)

    def _host(self) -> memoryview:
        b = self._buf
        if b.root.userptr:  # the caller's memory (XRT maps the pinned pages)
            return memoryview((ctypes.c_char * b.size).from_address(b.root.userptr + b.offset)).cast("B")
        if b.root.host is None:
            raise RuntimeError("device only buffer has no host buffer: Invalid argument")
        return memoryview(b.root.host)[b.offset : b.offset + b.size]

    def write(self, *args, **kwargs) -> None:
        _no_kwargs("write", args, kwargs)
        if len(args) != 2:
            raise _incompatible("write", args, kwargs)
        data, seek = args[0], _c_int(args[1], "write", unsigned=True)
        try:
            view = memoryview(data)
        except TypeError:
            raise _incompatible("write", args, kwargs) from None
        if not view.c_contiguous:
            raise SimulationError(
                "bo.write got a non-contiguous buffer: real pyxrt copies itemsize*size raw bytes from its first "
                "element, ignoring the strides (garbage); pass a contiguous array"
            )
        raw = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        host = self._host()
        if seek + raw.nbytes > self._buf.size:
            raise RuntimeError("attempting to write past buffer size: Invalid argument")
        host[seek : seek + raw.nbytes] = raw

    def read(self, *args, **kwargs) -> np.ndarray:
        _no_kwargs("read", args, kwargs)
        if len(args) != 2:
            raise _incompatible("read", args, kwargs)
        size, skip = _c_int(args[0], "read", unsigned=True), _c_int(args[1], "read", unsigned=True)
        host = self._host()
        if size + skip > self._buf.size:
            raise RuntimeError("attempting to read past buffer size: Invalid argument")
        return np.frombuffer(bytes(host[skip : skip + size]), dtype=np.int8).copy()

    def sync(self, *args, **kwargs) -> None:
        """DMA between host and card, blocking for the transfer time *with the GIL held*. In XRT
        2.17 the driver's error for a range past the buffer is discarded (nothing is copied, no
        exception); a sub-buffer range past its parent raises, as xrt_bo.cpp checks it."""
        _no_kwargs("sync", args, kwargs)
        if len(args) not in (1, 3) or not isinstance(args[0], xclBOSyncDirection):
            raise _incompatible("sync", args, kwargs)
        direction = args[0]
        if len(args) == 3:
            size, offset = _c_int(args[1], "sync", unsigned=True), _c_int(args[2], "sync", unsigned=True)
        else:
            size, offset = self._buf.size, 0
        if int(direction) not in (0, 1):
            return  # AIE GMIO directions: nothing on an Alveo PL design
        if self._buf.parent is not None and offset + size > self._buf.size:
            raise RuntimeError("Invalid offset and size when syncing sub buffer: Invalid argument")
        if offset + size > self._buf.size:
            return  # xclSyncBO returns -EINVAL, which buffer_object::sync ignores
        try:
            self._device.card.dma(self._buf, int(direction) == 0, size, offset, hold_gil=True)
        except _card.CardError as e:
            raise RuntimeError(str(e)) from None

    def map(self, *args, **kwargs) -> memoryview:
        _no_kwargs("map", args, kwargs)
        return self._host()

    def size(self, *args, **kwargs) -> int:
        _no_kwargs("size", args, kwargs)
        return self._buf.size

    def address(self, *args, **kwargs) -> int:
        _no_kwargs("address", args, kwargs)
        return self._buf.address


for _k, _v in bo.flags.__members__.items():
    setattr(bo, _k, _v)


# ---------------------------------------------------------------------------------- ext (XRT >= 2.20)
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype, _capsule_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


def _void_pointer(value) -> int | None:
    """pybind11's ``void*`` caster: None -> nullptr, a PyCapsule -> its pointer; else not castable."""
    if value is None:
        return 0
    if type(value).__name__ == "PyCapsule":
        return int(_capsule_pointer(value, _capsule_name(value)) or 0)
    return None


def _make_ext() -> types.ModuleType:
    module = types.ModuleType("pyxrt.ext", "Submodule for external")
    members = {"none": 0, "read": 1, "write": 2, "read_write": 3, "local": 0, "shared": 4, "process": 8, "hybrid": 16}
    access_mode = _make_enum("access_mode", members, False)  # nested in ext.bo (below)
    access_mode._names = {}
    for name, value in members.items():  # pybind11 names a value by its first member
        access_mode._names.setdefault(value, name)
    access_mode.__or__ = lambda a, b: access_mode(int(a) | int(b))
    access_mode.__and__ = lambda a, b: access_mode(int(a) & int(b))

    class ext_bo(bo):
        """``xrt::ext::bo``: a host-only buffer, over the caller's memory when given a pointer."""

        def __init__(self, *args, **kwargs):
            _no_kwargs("bo.__init__", args, kwargs)
            access = 0
            userptr = None
            if len(args) in (3, 4) and isinstance(args[0], device) and _void_pointer(args[1]) is not None:
                if len(args) == 4 and not isinstance(args[3], access_mode):
                    raise _incompatible("bo.__init__", args, kwargs)
                userptr, size = _void_pointer(args[1]), _size_t(args[2], "bo.__init__")
                access = int(args[3]) if len(args) == 4 else 0
                dev = args[0]._require()
            elif len(args) in (2, 3) and isinstance(args[0], (device, hw_context)):
                if len(args) == 3 and not isinstance(args[2], access_mode):
                    raise _incompatible("bo.__init__", args, kwargs)
                size = _size_t(args[1], "bo.__init__")
                access = int(args[2]) if len(args) == 3 else 0
                dev = args[0]._require() if isinstance(args[0], device) else args[0]._device
                if dev is None:
                    raise RuntimeError("No hardware context: Invalid argument")
            else:
                raise _incompatible("bo.__init__", args, kwargs)
            if access & ~3 not in (0, 4, 8, 16):  # mode_to_access: one of local/shared/process/hybrid
                raise RuntimeError("xrt::ext::bo: invalid access mode")
            if not userptr:
                # the driver's own host-only memory: Alveo's host-memory bank, not modelled (disabled)
                raise RuntimeError("failed to allocate bo: Invalid argument")
            try:
                self._buf = dev.card.alloc_userptr(dev.handle, userptr, size, 0)
            except _card.CardError as e:
                raise RuntimeError(str(e)) from None
            self._device = dev
            self._group = 0  # memory group 0: XRT puts the bank and slot 0 into the flags
            weakref.finalize(self, dev.card.free, self._buf)

    ext_bo.__name__ = ext_bo.__qualname__ = "bo"
    # py::enum_<access_mode>(pyextbo, ...).export_values(): the enum and its values live in ext.bo
    ext_bo.access_mode = access_mode
    for name, value in access_mode.__members__.items():
        setattr(ext_bo, name, value)
    ext_bo.__module__ = "pyxrt.ext"
    module.bo = ext_bo
    return module


if _RELEASE >= (2, 20):
    ext = _make_ext()


# ---------------------------------------------------------------------------------- run
class run:
    """``xrt::run``: one execution of a kernel; keeps the kernel (and its contexts) alive."""

    def __init__(self, *args, **kwargs):
        _no_kwargs("run.__init__", args, kwargs)
        self._kernel: _KernelImpl | None = None
        self._cmd: _card.Command | None = None
        if not args:
            return
        if len(args) != 1 or not isinstance(args[0], kernel):
            raise _incompatible("run.__init__", args, kwargs)
        self._kernel = args[0]._impl
        self._cus = list(self._kernel.cus)
        self._payload = bytearray(self._kernel.payload_size())
        self._bos: dict[int, bo] = {}

    def _arg(self, index: int):
        args = self._kernel.meta.args if self._kernel else []
        if not 0 <= index < len(args):
            raise IndexError(
                f"vector::_M_range_check: __n (which is {index % 2**64}) >= this->size() (which is {len(args)})"
            )
        return args[index]

    def set_arg(self, *args, **kwargs) -> None:
        _no_kwargs("set_arg", args, kwargs)
        if len(args) != 2 or self._kernel is None:
            raise _incompatible("set_arg", args, kwargs)
        index = _c_int(args[0], "set_arg")
        value = args[1]
        arg = self._arg(index)
        if isinstance(value, bo):
            if arg.address_qualifier == 1:
                value = self._validate_bo(index, value)
            raw = value._buf.address.to_bytes(8, "little")
            self._bos[index] = value  # XRT binds the bo to the command (kept alive)
        else:
            raw = _c_int(value, "set_arg").to_bytes(4, "little", signed=True)
        n = min(arg.size, len(raw))
        self._payload[arg.offset : arg.offset + n] = raw[:n]

    def _validate_bo(self, index: int, buf: bo) -> bo:
        """run_impl::validate_bo_at_index: keep the CUs whose argument is connected to the bo's
        bank; with none left, warn and run on a copy in the connected bank (XRT's clone)."""
        k = self._kernel
        assert k is not None
        keep = [cu for cu in self._cus if buf._group in k.connections(cu).get(index, set())]
        if keep:
            self._cus = keep
            return buf
        target = next(iter(sorted(k.connections(self._cus[0]).get(index, {0}))), 0)
        print(
            f"[XRT] WARNING: Kernel {k.name} has no compute units with connectivity required for global argument at "
            f"index {index}. The argument is allocated in bank {buf._group}, the compute unit is connected to bank "
            f"{target}. Allocating local copy of argument buffer in connected bank.",
            file=sys.stderr,
        )
        dev = buf._device
        clone = object.__new__(bo)
        try:
            clone._buf = dev.card.alloc(dev.handle, buf._buf.size, target)
        except _card.CardError as e:
            raise RuntimeError(str(e)) from None
        clone._device, clone._group = dev, target
        weakref.finalize(clone, dev.card.free, clone._buf)
        dev.card.copy_device(buf._buf, clone._buf)
        return clone

    def start(self, *args, **kwargs) -> None:
        _no_kwargs("start", args, kwargs)
        if self._kernel is None:
            raise RuntimeError("run object is not initialized: Invalid argument")
        if self._cmd is not None and not self._kernel.device.card.command_done(self._cmd):
            raise RuntimeError("bad command state, can't launch")
        try:
            self._cmd = self._kernel.device.card.submit(self._cus, bytes(self._payload))
        except _card.CardError as e:
            raise RuntimeError(str(e)) from None

    def state(self, *args, **kwargs):
        _no_kwargs("state", args, kwargs)
        if self._cmd is None:
            return ert_cmd_state.ERT_CMD_STATE_NEW
        card = self._cmd.card
        if not card.command_done(self._cmd):
            return ert_cmd_state.ERT_CMD_STATE_NEW
        return (
            ert_cmd_state.ERT_CMD_STATE_ABORT if self._cmd.state == "aborted" else ert_cmd_state.ERT_CMD_STATE_COMPLETED
        )

    def wait(self, *args, **kwargs):
        """``wait()`` blocks until completion (forever for a hung command), ``wait(ms)`` at most
        ``ms`` milliseconds and then returns ERT_CMD_STATE_TIMEOUT; both hold the GIL."""
        _no_kwargs("wait", args, kwargs)
        if len(args) > 1:
            raise _incompatible("wait", args, kwargs)
        timeout = None
        if args:
            ms = _c_int(args[0], "wait", unsigned=True)
            timeout = None if ms == 0 else ms / 1000.0
        if self._cmd is None:
            return ert_cmd_state.ERT_CMD_STATE_NEW
        if not self._cmd.card.wait(self._cmd, timeout, hold_gil=True):
            return ert_cmd_state.ERT_CMD_STATE_TIMEOUT
        return self.state()

    def add_callback(self, *args, **kwargs):
        raise TypeError(
            "add_callback(): incompatible function arguments (pyxrt has no caster for Python callables: "
            "pybind11/functional.h is not included)"
        )


# the stand-in's own CPU (card.metered): every call into this binding from the server
for _cls in (xclbin, device, hw_context, kernel, bo, run):
    _card.meter_class(_cls)
if _RELEASE >= (2, 20):
    _card.meter_class(ext.bo)


__all__ = [
    "ENV_XRT_VERSION",
    "SIMULATED",
    "XCL_BO_FLAGS_NONE",
    "bo",
    "device",
    "enumerate_devices",
    "ert_cmd_state",
    "hw_context",
    "kernel",
    "log_message",
    "run",
    "uuid",
    "xclBOSyncDirection",
    "xclbin",
    "xclbinip_vector",
    "xclbinkernel_vector",
    "xclbinmem_vector",
    "xrt_info_device",
    "xrt_msg_level",
]
