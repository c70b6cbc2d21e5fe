"""The C-simulation runtime: an hls4ml project compiled with g++ and called in batches.

hls4ml's ``HLSModel.predict`` calls its bridge once per sample from a Python loop. Here the
project's firmware is compiled together with ``batch_shim.cpp``, whose entry points loop over
the rows of a batch in C++; ctypes releases the GIL for the whole call, so several model
instances (threads) run their batches in parallel.

Builds are cached on disk, one folder per ``Hls4mlProject.content_hash()`` (any change to the
firmware, weights, templates or hls4ml version gives a new folder, hence a rebuild):

    <cache>/<content_hash>/firmware/...              copy of the project's sources + templates
    <cache>/<content_hash>/fpgaserve_batch-<key>.cpp  the shim, filled in for this project
    <cache>/<content_hash>/lib<name>-<key>.so         the library (<key>: shim, flags, g++)
    <cache>/<content_hash>.lock                        serialises builders (fcntl.flock)

The cache is FPGASERVE_CACHE_DIR (else ~/.cache/fpgaserve/csim). Where that is read-only (an
image's cache in an apptainer SIF or a ``--read-only`` container), finished builds are still
loaded from it and new ones go to a per-user directory (``fallback_cache_dir``), logged once.

The build never happens inside the model repository: that may be read-only, and hls4ml's
weight loader reads ``WEIGHTS_DIR``, an absolute path compiled into the library, so the
library must point at a copy that nobody moves or edits.

Compiles are bounded (``CompileLimits``): every g++ process (and its cc1plus, as, ld children)
runs under an address-space limit, the whole compile under a wall-clock limit, and one process
compiles one project at a time. A real io_parallel project once made cc1plus grow past 20 GiB
on a 24 GiB host; bounded, that is a load error naming the limit instead of a host in swap or
an OOM kill of the server.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import itertools
import logging
import os
import re
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from ...hosting import helper_group, stopped_by_us
from ..project import Hls4mlProject, ProjectError
from .stack import stack_bytes_for

log = logging.getLogger("fpgaserve.hls4ml")

SHIM_TEMPLATE = Path(__file__).with_name("batch_shim.cpp")
COMPILER = "g++"
#: lines of g++'s stderr quoted in a ProjectError
ERROR_LINES = 20

# Flags, and why:
#  -O3 -fPIC: as hls4ml's build_lib.sh (same optimisation level as the reference library).
#  -std=c++17: the brief's language level; the ap_types/nnet_utils headers compile with it.
#  -fno-gnu-unique: build_lib.sh adds it too. Without it, static locals of inline/template
#    functions (the activation lookup tables, e.g. nnet::sigmoid<...>::sigmoid_table, and
#    their "initialized" flags) become STB_GNU_UNIQUE symbols, which the dynamic loader merges
#    across every library in the process, RTLD_LOCAL or not: two projects whose layers have the
#    same mangled names would share one table (the first one loaded), and dlclose could not
#    unload the library.
#  -fvisibility=hidden: the same protection for everything else (weights arrays, myproject());
#    only the shim's fpgaserve_* entry points are exported.
#  No -ffast-math, no -march=native: conversions to and from float must stay IEEE exact, as in
#    hls4ml's build, and the activation tables are filled with float math at run time (exp,
#    division), which FMA contraction on a newer CPU target could change (baseline x86-64 has
#    no FMA). A cache shared by several machines also stays valid.
#  -fstack-clash-protection: a function whose locals are megabytes (hls4ml's layer outputs) moves
#    its stack pointer page by page, touching each: a row that outruns the stack the shim gave it
#    faults on that stack's guard page, instead of writing past it into another mapping. It adds
#    probes to the frames only, no change to any value computed.
#  hls4ml uses -std=c++11; the ap_types/nnet_utils headers compile cleanly (no warnings) at C++17.
CXXFLAGS = ("-O3", "-std=c++17", "-fPIC", "-fno-gnu-unique", "-fvisibility=hidden", "-fstack-clash-protection")

_PLACEHOLDER = re.compile(r"@([A-Z_]+)@")

# hls4ml 1.3.0 writes the accelerator word types of ap_fixed I/O in its own precision syntax
# ("typedef fixed<16,6,TRN,WRAP,0> T_in;"), which is not a C++ type. Rewritten in the build copy.
_HLS4ML_TYPEDEF = re.compile(r"^(\s*typedef\s+)(u?)(fixed|int)<([^<>]*)>(\s+\w+\s*;)", re.MULTILINE)
_AXI_WORD_TYPE = re.compile(r"^\s*typedef\s+(.+?)\s+(T_in|T_out|input_axi_t|output_axi_t)\s*;", re.MULTILINE)


def default_cache_dir() -> Path:
    """FPGASERVE_CACHE_DIR, else ~/.cache/fpgaserve/csim. Where this process cannot write
    there, builds go to :func:`fallback_cache_dir` (see ``CsimLibrary.load``)."""
    env = os.environ.get("FPGASERVE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "fpgaserve" / "csim"


# ---------------------------------------------------------------------------- read-only caches
# An image's cache holds the bundled models' builds, and is read-only where the image is: an
# apptainer SIF, `podman run --read-only`, a sandbox run without --writable. Finished builds are
# still used from there; a model that needs a build compiles into a per-user directory instead
# of failing to load.


def _writable_dir(path: Path) -> tuple[bool, str]:
    """Whether this process can create ``path``'s files (making ``path`` first if it does not
    exist), and why not. os.access answers for this process's user and for read-only mounts
    (EROFS) alike."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            return False, "no existing parent directory"
        probe = probe.parent
    if not probe.is_dir():
        return False, f"{probe} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        try:
            read_only = bool(os.statvfs(probe).f_flag & os.ST_RDONLY)
        except OSError:
            read_only = False
        where = "" if probe == path else f" ({probe} is the nearest existing directory)"
        return False, ("on a read-only file system" if read_only else f"not writable by uid {os.getuid()}") + where
    return True, ""


def _own_private_dir(path: Path) -> bool:
    """``path`` exists or was made (mode 0700), belongs to this user and no one else may write
    it: a shared directory (/tmp) must not hand this process libraries another user planted."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.lstat()
    except OSError:
        return False
    return path.is_dir() and not path.is_symlink() and st.st_uid == os.getuid() and not st.st_mode & 0o022


def fallback_cache_dir() -> Path | None:
    """Where a build goes when the configured cache is not writable: $XDG_CACHE_HOME (else
    ~/.cache)/fpgaserve/csim, where a user's builds persist across runs (apptainer binds the
    home directory), else <temp dir>/fpgaserve-csim-<uid> (a container's /tmp, rebuilt per
    container), each only if this user owns it and no one else may write it. None if neither is
    usable."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    home = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    for candidate in (home / "fpgaserve" / "csim", Path(tempfile.gettempdir()) / f"fpgaserve-csim-{os.getuid()}"):
        if _writable_dir(candidate)[0] and _own_private_dir(candidate):
            return candidate
    return None


#: (configured, fallback) cache pairs already logged: the switch is said once per process
_fallbacks_logged: set[tuple[Path, Path]] = set()
_fallbacks_lock = threading.Lock()


# ---------------------------------------------------------------------------- compile limits
#: the memory budget when none is set: half the memory this process may use (the host's RAM, or
#: its cgroup's memory.max in a container), at most 8 GiB. Half leaves room for the server
#: itself and the models it already serves; 8 GiB is ~30x what the bundled projects' largest
#: cc1plus needs (~270 MiB resident) and far more than a project that compiles in reasonable
#: time takes, while a runaway compile (the >20 GiB report) is stopped well before it takes a
#: 24 GiB host down.
DEFAULT_MEMORY_CAP_MB = 8192
DEFAULT_COMPILE_TIMEOUT_S = 900.0
#: csim compiles at once per process. Several models loading in parallel (the repository loads
#: them concurrently) would each run g++ under a whole budget; one at a time keeps the process
#: within one budget. A constant, not a setting: more would need the budget split among them.
MAX_CONCURRENT_COMPILES = 1
_compile_slots = threading.BoundedSemaphore(MAX_CONCURRENT_COMPILES)
#: the address space given to each of the small translation units (batch shim, accelerator
#: wrapper: ap_types headers and a few lines, ~200 MiB measured) when they compile beside the
#: firmware; see _Builder._compile for when they do
SIDE_UNIT_MB = 512

MEMORY_SETTING = "csim-compile-memory-mb"
TIMEOUT_SETTING = "csim-compile-timeout-secs"
MEMORY_ENV = "FPGASERVE_CSIM_COMPILE_MEMORY_MB"
TIMEOUT_ENV = "FPGASERVE_CSIM_COMPILE_TIMEOUT_S"

# what g++, cc1plus, as and ld print when an allocation fails under the address-space limit
_OUT_OF_MEMORY = re.compile(
    r"virtual memory exhausted|memory exhausted|out of memory allocating|Cannot allocate memory|std::bad_alloc"
)
# g++ reporting a child (cc1plus) killed by a signal: SIGKILL (an OOM killer) or SIGSEGV (the
# stack could not grow within the address-space limit)
_CHILD_KILLED = re.compile(r"(Killed|Segmentation fault) signal terminated program (\S+)")


def _memory_available_mb() -> int:
    """The physical memory this process may use, in MiB: the host's, or its cgroup v2 limit."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        cgroup = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if cgroup.isdigit():
            total = min(total, int(cgroup))
    except OSError:
        pass
    return total // (1 << 20)


def default_memory_mb() -> int:
    return max(1, min(DEFAULT_MEMORY_CAP_MB, _memory_available_mb() // 2))


@dataclass(frozen=True)
class CompileLimits:
    """How much one csim compile may take: ``memory_mb`` MiB of address space in all (every
    g++ process the build runs, together) and ``timeout_s`` seconds of wall clock (compile and
    link, counted once this process's compile slot is free)."""

    memory_mb: int
    timeout_s: float

    @classmethod
    def resolve(
        cls, settings: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None
    ) -> CompileLimits:
        """The limits from the server's hls4ml settings (``--backend-config=hls4ml,KEY=VALUE``),
        else the environment (``FPGASERVE_CSIM_COMPILE_MEMORY_MB``, ``..._TIMEOUT_S``: what
        ``fpgaserve doctor`` and the image's precompile read), else the defaults. Raises
        ValueError naming the setting for a value that is not a positive number."""
        settings = settings or {}
        environ = os.environ if environ is None else environ

        def positive(key: str, env: str, parse: Callable[[str], float], default: float, unit: str) -> float:
            if key in settings:
                value, where = settings[key], f"hls4ml {key}"
            else:
                value, where = environ.get(env, "").strip(), env
                if not value:
                    return default
            try:
                number = parse(value)
            except ValueError:
                number = 0
            if not 0 < number < float("inf"):
                raise ValueError(f"{where} must be a positive {unit}, got '{value}'")
            return number

        memory_mb = int(positive(MEMORY_SETTING, MEMORY_ENV, int, default_memory_mb(), "whole number of MiB"))
        timeout_s = positive(TIMEOUT_SETTING, TIMEOUT_ENV, float, DEFAULT_COMPILE_TIMEOUT_S, "number of seconds")
        return cls(memory_mb, timeout_s)


class CompileLimitError(ProjectError):
    """The compile ran past its memory or time limit (not an error in the project's code)."""


def _raise_hint(setting: str, env: str) -> str:
    return f"raise it with --backend-config=hls4ml,{setting}=N (or {env} for fpgaserve doctor and the image build)"


def fix_axi_typedefs(text: str) -> str:
    """``typedef fixed<16,6,TRN,WRAP,0> T_in;`` -> ``typedef ap_fixed<16,6,AP_TRN,AP_WRAP,0> T_in;``."""

    def repl(m: re.Match) -> str:
        prefix, unsigned, kind, args, rest = m.groups()
        parts = [a.strip() for a in args.split(",")]
        # quantisation and overflow modes are the 3rd and 4th parameters of ap_fixed
        parts = [p if i < 2 or p.isdigit() or p.startswith("AP_") else f"AP_{p}" for i, p in enumerate(parts)]
        return f"{prefix}ap_{unsigned}{kind}<{','.join(parts)}>{rest}"

    return _HLS4ML_TYPEDEF.sub(repl, text)


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _compiler_path() -> str:
    path = shutil.which(COMPILER)
    if path is None:
        raise ProjectError(
            f"the C-simulation needs the C++ compiler {COMPILER}, which is not on PATH "
            "(install g++, e.g. apt-get install g++, or serve the model with another --fpga-mode)"
        )
    return path


_compiler_ids: dict[str, str] = {}


def _compiler_id(path: str) -> str:
    """``g++ --version``'s first line: part of the build key (a new compiler gives a new library)."""
    if path not in _compiler_ids:
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ProjectError(f"cannot run {path} --version: {e}") from None
        _compiler_ids[path] = (out.stdout.splitlines() or [""])[0]
    return _compiler_ids[path]


def _compile_error(project: Hls4mlProject, stderr: str) -> ProjectError:
    lines = stderr.strip().splitlines()
    # g++ prefixes an error with "In file included from" lines; show from the first error on,
    # so the quoted lines are the error, not context or warnings before it
    first = next((i for i, line in enumerate(lines) if "error" in line), 0)
    quoted = "\n".join(lines[first : first + ERROR_LINES])
    more = "" if len(lines) <= first + ERROR_LINES else f"\n... ({len(lines) - first - ERROR_LINES} more lines)"
    return ProjectError(f"hls4ml project {project.path}: the C-simulation does not compile:\n{quoted}{more}")


class CsimLibrary:
    """One compiled C-simulation, loaded once per process and shared by all instances."""

    # process-wide registry (class attributes on purpose: shared by every model instance)
    _loaded: ClassVar[dict[str, CsimLibrary]] = {}
    _loading_locks: ClassVar[dict[str, threading.Lock]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        project: Hls4mlProject,
        path: Path,
        word_types: tuple[str, str] | None,
        built: bool,
        stack_bytes: int,
    ):
        self.project = project
        self.path = path
        #: the stack of the thread the shim runs each batch on (stack.py's estimate for one row)
        self.stack_bytes = stack_bytes
        self.n_in = project.input.size
        self.n_out = project.output.size
        # a kernel that quantizes on chip (VitisAccelerator HW_Quant) is handed float32 and
        # returns float32; the batch shim converts float -> input_t and result_t -> double itself
        io = project.host_io
        self._float_in = project.accelerator is None and io.input == "float"
        self._float_out = project.accelerator is None and io.output == "float"
        #: accelerator stream word types (T_in, T_out) from <name>_axi.h, None for plain projects
        self.word_types = word_types
        #: whether this load compiled the library (False: found in the build cache)
        self.built = built
        # io_stream layers keep their line buffers and pixel counters in function statics:
        # two samples through them at once would mix; calls are serialised (the GIL is still
        # released, other models' libraries run meanwhile)
        self._serial = threading.Lock() if project.io_type == "io_stream" else None
        self._lib = ctypes.CDLL(str(path))
        # ctypes.CDLL functions release the GIL for the duration of the call (PyDLL would not)
        self._fn = {}
        for dtype, suffix in ((np.float32, "float"), (np.float64, "double")):
            fn = getattr(self._lib, f"fpgaserve_predict_{suffix}")
            fn.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_size_t)
            fn.restype = ctypes.c_int
            self._fn[np.dtype(dtype)] = fn
        for what, expected in (("n_in", self.n_in), ("n_out", self.n_out)):
            fn = getattr(self._lib, f"fpgaserve_{what}")
            fn.restype = ctypes.c_long
            if fn() != expected:
                raise ProjectError(f"{path}: built for {what}={fn()}, the project says {expected}")

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(
        cls,
        project: Hls4mlProject,
        cache_dir: str | os.PathLike | None = None,
        limits: CompileLimits | None = None,
        name: str | None = None,
    ) -> CsimLibrary:
        """Build (or find in the cache) and load the C-simulation of ``project``.

        A build runs within ``limits`` (default: ``CompileLimits.resolve()``, from the
        environment); ``name`` (the model's) names the project in errors. Raises ProjectError
        for anything that makes the project unservable: missing weights, g++ missing, compiler
        errors, CompileLimitError when the compile ran past its memory or time limit, and a
        ProjectError naming the model and the size when one row needs more stack than the cap
        (stack.py; checked before anything is compiled). Thread-safe; one library per content
        hash per process.
        """
        if project.io_type not in ("io_parallel", "io_stream"):
            raise ProjectError(
                f"hls4ml project {project.path}: the C-simulation serves io_parallel and io_stream projects, "
                f"not {project.io_type}"
            )
        # checked before anything is compiled or loaded: hls4ml's loader would exit(1) instead
        weight_names = sorted(p.name for p in project.weight_files())
        stack_bytes = stack_bytes_for(project, name)
        content = project.content_hash()
        with cls._registry_lock:
            lib = cls._loaded.get(content)
            if lib is not None:
                return lib
            lock = cls._loading_locks.setdefault(content, threading.Lock())
        with lock:
            with cls._registry_lock:
                lib = cls._loaded.get(content)
            if lib is not None:
                return lib
            cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
            if limits is None:
                try:
                    limits = CompileLimits.resolve()
                except ValueError as e:
                    raise ProjectError(str(e)) from None
            builder = _Builder(project, cache, content, weight_names, limits, name)
            if not builder.ready():
                builder = cls._writable_builder(builder)
            so_path, word_types, built = builder.library()
            lib = cls(project, so_path, word_types, built, stack_bytes)
            # Weights (and activation tables) load lazily behind static flags on the first call.
            # Make that first call here, under the loading lock and before the library is
            # published, so later calls from several instance threads only read them.
            lib.predict(np.zeros((1, lib.n_in), dtype=np.float64))
            with cls._registry_lock:
                cls._loaded[content] = lib
            log.info(
                "%s: its C-simulation runs each batch on a thread with a %d MiB stack (estimated from its layers; "
                "address space reserved per batch running at once, memory only as far as a row reaches)",
                builder.label,
                stack_bytes >> 20,
            )
            return lib

    @staticmethod
    def _writable_builder(builder: _Builder) -> _Builder:
        """``builder`` if its cache is writable, else the same build in fallback_cache_dir()
        (a finished build in the configured cache was looked for first). Raises ProjectError
        when no cache directory can be written."""
        cache = builder.cache
        writable, why = _writable_dir(cache)
        if writable:
            return builder
        fallback = fallback_cache_dir()
        if fallback is None:
            raise ProjectError(
                f"{builder.label}: cannot build its C-simulation: the build cache {cache} is {why}, and neither "
                f"$XDG_CACHE_HOME/fpgaserve/csim (~/.cache) nor {tempfile.gettempdir()}/fpgaserve-csim-{os.getuid()} "
                "is a directory of this user's that it can write; set FPGASERVE_CACHE_DIR to one"
            )
        with _fallbacks_lock:
            first = (cache, fallback) not in _fallbacks_logged
            _fallbacks_logged.add((cache, fallback))
        if first:
            log.info(
                "C-simulation build cache %s is %s: finished builds there are used, new ones are compiled into %s",
                cache,
                why,
                fallback,
            )
        return builder.moved_to(fallback)

    # ------------------------------------------------------------------ inference
    def predict(self, x: np.ndarray, dtype: type = np.float64, piece_rows: int | None = None) -> np.ndarray:
        """(B, n_in) float32 or float64 -> (B, n_out) of ``dtype``, row by row through the firmware,
        on a thread of the library's with ``stack_bytes`` of stack (the GIL released meanwhile).
        With ``piece_rows``, at most that many rows per call, each piece's float64 results
        converted into the output at once (a float32 output is then never held as float64 whole).
        Raises MemoryError when that thread cannot be started (its stack cannot be mapped)."""
        x = np.asarray(x)
        if x.dtype not in self._fn:
            raise TypeError(f"C-simulation input must be float32 or float64, got {x.dtype}")
        if x.ndim != 2 or x.shape[1] != self.n_in:
            raise ValueError(f"C-simulation input must have shape (batch, {self.n_in}), got {x.shape}")
        rows = x.shape[0]
        step = rows if piece_rows is None else max(1, piece_rows)
        if step >= rows and np.dtype(dtype) == np.float64:
            return self._predict_rows(x)
        out: np.ndarray = np.empty((rows, self.n_out), dtype)
        for a in range(0, rows, step):
            out[a : a + step] = self._predict_rows(x[a : a + step])
        return out

    def _predict_rows(self, x: np.ndarray) -> np.ndarray:
        fn = self._fn[x.dtype]
        if self._float_in and x.dtype != np.float32:
            x = x.astype(np.float32)
            fn = self._fn[x.dtype]
        x = np.ascontiguousarray(x)
        y = np.empty((x.shape[0], self.n_out), dtype=np.float64)
        err = 0
        if x.shape[0] and self._serial is not None:
            with self._serial:
                err = fn(x.ctypes.data, y.ctypes.data, x.shape[0], self.stack_bytes)
        elif x.shape[0]:
            err = fn(x.ctypes.data, y.ctypes.data, x.shape[0], self.stack_bytes)
        if err:
            raise MemoryError(
                f"{self.project.path}: cannot start the C-simulation's thread with its "
                f"{self.stack_bytes >> 20} MiB stack: {os.strerror(err)}"
            )
        if self._float_out:
            y = y.astype(np.float32).astype(np.float64)
        return y

    def __repr__(self) -> str:
        return f"CsimLibrary({str(self.path)!r}, n_in={self.n_in}, n_out={self.n_out})"


class _Builder:
    """Builds one project's library into the cache; safe against concurrent builders."""

    def __init__(
        self,
        project: Hls4mlProject,
        cache: Path,
        content: str,
        weight_names: list[str],
        limits: CompileLimits,
        name: str | None = None,
    ):
        self.project = project
        self.limits = limits
        #: the project as errors name it: the model's name and the project folder
        self.label = f"hls4ml project '{name}' ({project.path})" if name else f"hls4ml project {project.path}"
        self._logs = itertools.count()
        self.cache = cache
        self.content = content
        self.weight_names = weight_names
        self.folder = cache / content
        self.accelerator = project.accelerator is not None
        self.compiler = _compiler_path()
        shim = SHIM_TEMPLATE.read_text()
        key = hashlib.sha256("\0".join([shim, *CXXFLAGS, _compiler_id(self.compiler)]).encode()).hexdigest()[:16]
        self.shim_text = shim
        self._name = name
        self.shim_path = self.folder / f"fpgaserve_batch-{key}.cpp"
        self.so_path = self.folder / f"lib{project.name}-{key}.so"

    def moved_to(self, cache: Path) -> _Builder:
        """The same build, in another cache directory."""
        return _Builder(self.project, cache, self.content, self.weight_names, self.limits, self._name)

    def library(self) -> tuple[Path, tuple[str, str] | None, bool]:
        built = False
        if not self._ready():
            lock_path = self.cache / f"{self.content}.lock"
            try:
                self.cache.mkdir(parents=True, exist_ok=True)
                lock_path.touch()
            except OSError as e:
                raise ProjectError(f"cannot use the C-simulation build cache {self.cache}: {e}") from None
            with open(lock_path, "a") as lock_file:
                # another process may hold this while it builds; flock blocks until it is done
                fcntl.flock(lock_file, fcntl.LOCK_EX)
                try:
                    if not self._ready():
                        self._build()
                        built = True
                finally:
                    fcntl.flock(lock_file, fcntl.LOCK_UN)
        return self.so_path, self._word_types(), built

    def ready(self) -> bool:
        """Whether the cache holds this build, finished (readable is enough)."""
        return self._ready()

    def _ready(self) -> bool:
        """A finished build: the library exists (renamed into place last) and the weights it reads."""
        if not self.so_path.is_file() or not (self.folder / ".copied").is_file():
            return False
        weights = self.folder / "firmware" / "weights"
        return all((weights / n).is_file() for n in self.weight_names)

    def _word_types(self) -> tuple[str, str] | None:
        if not self.accelerator:
            return None
        header = (self.folder / "firmware" / f"{self.project.name}_axi.h").read_text()
        found = {name: ctype for ctype, name in _AXI_WORD_TYPE.findall(header)}
        t_in = found.get("T_in", found.get("input_axi_t"))
        t_out = found.get("T_out", found.get("output_axi_t"))
        return (t_in, t_out) if t_in and t_out else None

    # ------------------------------------------------------------------ build steps
    def _build(self) -> None:
        weights = self.folder / "firmware" / "weights"
        if not (self.folder / ".copied").is_file() or not all((weights / n).is_file() for n in self.weight_names):
            self._copy_sources()
        self.shim_path.write_text(self._fill_shim())
        self._compile()

    def _copy_sources(self) -> None:
        """The sources the content hash covers, plus the template libraries, under firmware/."""
        if self.folder.exists():
            shutil.rmtree(self.folder)  # an interrupted or damaged copy
        firmware = self.folder / "firmware"
        try:
            for lib, src in self.project.template_dirs().items():
                shutil.copytree(src, firmware / lib)
            # after the templates: the project's generated nnet_code_gen.h replaces the generic one
            for src in self.project.source_files():
                dst = firmware / src.relative_to(self.project.firmware_dir)
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
            if self.accelerator:
                axi = firmware / f"{self.project.name}_axi.h"
                if not axi.is_file():
                    raise ProjectError(
                        f"hls4ml project {self.project.path}: the VivadoAccelerator project has no "
                        f"firmware/{axi.name} (the accelerator wrapper the card runs)"
                    )
                axi.write_text(fix_axi_typedefs(axi.read_text()))
        except OSError as e:
            raise ProjectError(f"cannot copy hls4ml project {self.project.path} to {self.folder}: {e}") from None
        (self.folder / ".copied").write_text(self.content + "\n")

    def _fill_shim(self) -> str:
        values = {
            "PROJECT": self.project.name,
            "ACCELERATOR": "1" if self.accelerator else "0",
            "IO_STREAM": "1" if self.project.io_type == "io_stream" else "0",
            "N_IN": str(self.project.input.size),
            "N_OUT": str(self.project.output.size),
            "IN_CTYPE": self.project.input.ctype,
            "OUT_CTYPE": self.project.output.ctype,
        }
        unknown = set(_PLACEHOLDER.findall(self.shim_text)) - values.keys()
        if unknown:
            raise RuntimeError(f"{SHIM_TEMPLATE}: unknown placeholders {sorted(unknown)}")
        return _PLACEHOLDER.sub(lambda m: values[m.group(1)], self.shim_text)

    def _compile(self) -> None:
        firmware = self.folder / "firmware"
        sources = [firmware / f"{self.project.name}.cpp"]
        if self.accelerator:
            sources.append(firmware / f"{self.project.name}_axi.cpp")
        sources.append(self.shim_path)
        weights_dir = _c_string(str((firmware / "weights").resolve()))
        base = [self.compiler, *CXXFLAGS, f"-I{firmware / 'ap_types'}", f"-I{self.folder}"]
        base.append(f"-DWEIGHTS_DIR={weights_dir}")
        budget = self.limits.memory_mb
        tmp = Path(tempfile.mkdtemp(prefix="build-", dir=self.folder))
        try:
            objects = [tmp / f"{i}-{src.stem}.o" for i, src in enumerate(sources)]
            units = [[*base, "-c", str(src), "-o", str(obj)] for src, obj in zip(sources, objects, strict=True)]
            # The memory budget bounds the build's total, and the translation units compile in
            # parallel or one after another so that the sum of their limits stays within it:
            # * the firmware (first unit) is the one that grows with the network, the shim and
            #   accelerator wrapper are a fixed ~200 MiB each (ap_types headers);
            # * with a budget of 4x the side units' share or more, all compile at once: each
            #   side unit gets SIDE_UNIT_MB and the firmware the rest (>= 3/4 of the budget);
            # * below that (small budgets, e.g. a small container), one at a time, each with
            #   the whole budget: splitting a small budget would starve the firmware, while
            #   running the side units after it costs ~2-3 s, little against a large compile.
            side = SIDE_UNIT_MB * (len(units) - 1)
            if budget >= 4 * side:
                steps = [[(units[0], budget - side), *((unit, SIDE_UNIT_MB) for unit in units[1:])]]
            else:
                steps = [[(unit, budget)] for unit in units]
            out = tmp / self.so_path.name
            steps.append([([*base, "-shared", *(str(o) for o in objects), "-o", str(out)], budget)])
            with _compile_slot(self.label):
                deadline = time.monotonic() + self.limits.timeout_s
                for step in steps:
                    self._run(step, deadline, tmp)
            # rename last: a library at so_path is always complete
            os.replace(out, self.so_path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _run(self, step: list[tuple[list[str], int]], deadline: float, tmp: Path) -> None:
        """Run g++ commands at once, each ``(argv, MiB of address space)``, until ``deadline``.

        Each runs in a session of its own, so that on the deadline (or any exception) killing
        its process group also ends the cc1plus, as and ld it started. The address-space limit
        is set by ``sh -c 'ulimit -v'`` before exec'ing g++ (not preexec_fn, unsafe in this
        multithreaded server) and inherited by every child. Output goes to files, not pipes:
        one chatty g++ cannot block while another is waited for. Each group is registered as
        this process's helper while it runs (``helper_group``): whatever ends this process or
        abandons its loads (the server stopping, a load given up on) ends the compile too."""
        running: list[tuple[subprocess.Popen, Path, int]] = []
        groups = contextlib.ExitStack()
        try:
            for argv, limit_mb in step:
                log_path = tmp / f"{next(self._logs)}.log"
                running.append((self._spawn(argv, limit_mb, log_path), log_path, limit_mb))
                groups.enter_context(helper_group(running[-1][0].pid))
            for proc, _, _ in running:
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    raise CompileLimitError(
                        f"compiling the C-simulation of {self.label} did not finish within its "
                        f"{self.limits.timeout_s:g} s time limit ({TIMEOUT_SETTING}); "
                        f"{_raise_hint(TIMEOUT_SETTING, TIMEOUT_ENV)}"
                    ) from None
            abandoned = [proc for proc, _, _ in running if stopped_by_us(proc.pid)]
        finally:
            for proc, _, _ in running:
                if proc.poll() is None:  # still ours (not reaped): its group is its own
                    _kill_group(proc)
            groups.close()
        if abandoned:
            raise ProjectError(f"compiling the C-simulation of {self.label} was stopped: its load was abandoned")
        failures = [(proc, path.read_text(errors="replace"), limit) for proc, path, limit in running]
        failures = [f for f in failures if f[0].returncode != 0]
        for proc, output, limit_mb in failures:
            found = self._memory_failure(proc, output)
            if found is not None:
                evidence, certain = found
                what = "ran out of its" if certain else "was most likely stopped by its"
                share = "" if limit_mb == self.limits.memory_mb else f" (this step's share: {limit_mb} MiB)"
                raise CompileLimitError(
                    f"compiling the C-simulation of {self.label} {what} {self.limits.memory_mb} MiB "
                    f"memory limit ({MEMORY_SETTING}){share}: {evidence}; "
                    f"{_raise_hint(MEMORY_SETTING, MEMORY_ENV)}"
                )
        if failures:
            proc, output, _ = failures[0]
            raise _compile_error(self.project, output or f"error: {COMPILER} exit status {proc.returncode}")

    @staticmethod
    def _memory_failure(proc: subprocess.Popen, output: str) -> tuple[str, bool] | None:
        """(evidence, certain) that the compiler ran out of memory, else None: a memory error
        is reported from what the compiler said, never from its exit status alone. Certain: an
        allocation failure it printed. Likely: g++ or its cc1plus killed by a signal, which under
        an address-space limit is a stack that could not grow or an OOM killer."""
        for line in output.splitlines():
            if _OUT_OF_MEMORY.search(line):
                return f'{COMPILER} said "{line.strip()[:300]}"', True
        for line in output.splitlines():
            if _CHILD_KILLED.search(line):
                return f'{COMPILER} said "{line.strip()[:300]}"', False
        if proc.returncode is not None and proc.returncode < 0:
            return f"{COMPILER} was killed by {signal.Signals(-proc.returncode).name}", False
        return None

    def _spawn(self, argv: list[str], limit_mb: int, log_path: Path) -> subprocess.Popen:
        kib = limit_mb * 1024
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        if hard != resource.RLIM_INFINITY:
            kib = min(kib, hard // 1024)  # a lower hard limit cannot be raised; ulimit would fail
        try:
            with open(log_path, "wb") as out:
                return subprocess.Popen(
                    ["/bin/sh", "-c", 'ulimit -v "$0" && exec "$@"', str(kib), *argv],
                    cwd=self.folder,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    # g++'s own temporary files (cc*.s, cc*.o) in the build folder, which goes
                    # with the build: a compile killed mid-way leaves none in /tmp
                    env=dict(os.environ, TMPDIR=str(log_path.parent)),
                )
        except OSError as e:
            raise ProjectError(f"cannot run {argv[0]}: {e}") from None


#: how long a killed compile's processes may take to be gone
_KILL_WAIT_S = 5.0


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL g++'s process group and wait until none of it runs: g++ itself is reaped here;
    its cc1plus, reparented once g++ is gone, takes a moment to free its memory and exit (then
    it is a zombie until init reaps it, which may take a second, but holds nothing). A load
    error must not return while a compiler it started still holds memory or CPU."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    deadline = time.monotonic() + _KILL_WAIT_S
    while time.monotonic() < deadline and _group_runs(proc.pid):
        time.sleep(0.02)


def _group_runs(pgid: int) -> bool:
    """Whether a process of group ``pgid`` exists that is not a zombie."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # a member that is not ours: look at /proc
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


@contextlib.contextmanager
def _compile_slot(label: str) -> Iterator[None]:
    """Holds one of the process's MAX_CONCURRENT_COMPILES compile slots (a wait is logged)."""
    if not _compile_slots.acquire(blocking=False):
        log.info("%s: waiting for another C-simulation compile in this process to finish", label)
        _compile_slots.acquire()
    try:
        yield
    finally:
        _compile_slots.release()


__all__ = [
    "CXXFLAGS",
    "CompileLimitError",
    "CompileLimits",
    "CsimLibrary",
    "default_cache_dir",
    "default_memory_mb",
    "fallback_cache_dir",
    "fix_axi_typedefs",
]
