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

The build never happens inside the model repository: that may be read-only, and hls4ml's
weight loader reads ``WEIGHTS_DIR``, an absolute path compiled into the library, so the
library must point at a copy that nobody moves or edits.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import ClassVar

import numpy as np

from .project import Hls4mlProject, ProjectError

SHIM_TEMPLATE = Path(__file__).with_name("batch_shim.cpp")
COMPILER = "g++"
COMPILE_TIMEOUT_S = 900
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
#  hls4ml uses -std=c++11; the ap_types/nnet_utils headers compile cleanly (no warnings) at C++17.
CXXFLAGS = ("-O3", "-std=c++17", "-fPIC", "-fno-gnu-unique", "-fvisibility=hidden")

_PLACEHOLDER = re.compile(r"@([A-Z_]+)@")

# hls4ml 1.3.0 writes the accelerator word types of ap_fixed I/O in its own precision syntax
# ("typedef fixed<16,6,TRN,WRAP,0> T_in;"), which is not a C++ type. Rewritten in the build copy.
_HLS4ML_TYPEDEF = re.compile(r"^(\s*typedef\s+)(u?)(fixed|int)<([^<>]*)>(\s+\w+\s*;)", re.MULTILINE)
_AXI_WORD_TYPE = re.compile(r"^\s*typedef\s+(.+?)\s+(T_in|T_out|input_axi_t|output_axi_t)\s*;", re.MULTILINE)


def default_cache_dir() -> Path:
    env = os.environ.get("FPGASERVE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "fpgaserve" / "csim"


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

    def __init__(self, project: Hls4mlProject, path: Path, word_types: tuple[str, str] | None, built: bool):
        self.project = project
        self.path = path
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
        self._lib = ctypes.CDLL(str(path))
        # ctypes.CDLL functions release the GIL for the duration of the call (PyDLL would not)
        self._fn = {}
        for dtype, suffix in ((np.float32, "float"), (np.float64, "double")):
            fn = getattr(self._lib, f"fpgaserve_predict_{suffix}")
            fn.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long)
            fn.restype = None
            self._fn[np.dtype(dtype)] = fn
        for what, expected in (("n_in", self.n_in), ("n_out", self.n_out)):
            fn = getattr(self._lib, f"fpgaserve_{what}")
            fn.restype = ctypes.c_long
            if fn() != expected:
                raise ProjectError(f"{path}: built for {what}={fn()}, the project says {expected}")

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(cls, project: Hls4mlProject, cache_dir: str | os.PathLike | None = None) -> CsimLibrary:
        """Build (or find in the cache) and load the C-simulation of ``project``.

        Raises ProjectError for anything that makes the project unservable: missing weights,
        g++ missing, compiler errors. Thread-safe; one library per content hash per process.
        """
        if project.io_type != "io_parallel" and project.accelerator is None:
            # an io_stream top function takes hls::stream arguments; hls4ml's Alveo wrapper
            # (<name>_axi) takes arrays for both io types, so it is what the batch shim calls
            raise ProjectError(
                f"hls4ml project {project.path}: the C-simulation serves io_parallel projects, and io_stream "
                "projects with hls4ml's VivadoAccelerator wrapper (<name>_axi)"
            )
        # checked before anything is compiled or loaded: hls4ml's loader would exit(1) instead
        weight_names = sorted(p.name for p in project.weight_files())
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
            so_path, word_types, built = _Builder(project, cache, content, weight_names).library()
            lib = cls(project, so_path, word_types, built)
            # Weights (and activation tables) load lazily behind static flags on the first call.
            # Make that first call here, under the loading lock and before the library is
            # published, so later calls from several instance threads only read them.
            lib.predict(np.zeros((1, lib.n_in), dtype=np.float64))
            with cls._registry_lock:
                cls._loaded[content] = lib
            return lib

    # ------------------------------------------------------------------ inference
    def predict(self, x: np.ndarray) -> np.ndarray:
        """(B, n_in) float32 or float64 -> (B, n_out) float64, row by row through the firmware."""
        x = np.asarray(x)
        fn = self._fn.get(x.dtype)
        if fn is None:
            raise TypeError(f"C-simulation input must be float32 or float64, got {x.dtype}")
        if x.ndim != 2 or x.shape[1] != self.n_in:
            raise ValueError(f"C-simulation input must have shape (batch, {self.n_in}), got {x.shape}")
        if self._float_in and x.dtype != np.float32:
            x = x.astype(np.float32)
            fn = self._fn[x.dtype]
        x = np.ascontiguousarray(x)
        y = np.empty((x.shape[0], self.n_out), dtype=np.float64)
        if x.shape[0]:
            fn(x.ctypes.data, y.ctypes.data, x.shape[0])
        if self._float_out:
            y = y.astype(np.float32).astype(np.float64)
        return y

    def __repr__(self) -> str:
        return f"CsimLibrary({str(self.path)!r}, n_in={self.n_in}, n_out={self.n_out})"


class _Builder:
    """Builds one project's library into the cache; safe against concurrent builders."""

    def __init__(self, project: Hls4mlProject, cache: Path, content: str, weight_names: list[str]):
        self.project = project
        self.cache = cache
        self.content = content
        self.weight_names = weight_names
        self.folder = cache / content
        self.accelerator = project.accelerator is not None
        self.compiler = _compiler_path()
        shim = SHIM_TEMPLATE.read_text()
        key = hashlib.sha256("\0".join([shim, *CXXFLAGS, _compiler_id(self.compiler)]).encode()).hexdigest()[:16]
        self.shim_text = shim
        self.shim_path = self.folder / f"fpgaserve_batch-{key}.cpp"
        self.so_path = self.folder / f"lib{project.name}-{key}.so"

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
        tmp = Path(tempfile.mkdtemp(prefix="build-", dir=self.folder))
        try:
            # one g++ per translation unit, in parallel (the firmware dominates; the shim is small)
            jobs = []
            for i, src in enumerate(sources):
                obj = tmp / f"{i}-{src.stem}.o"
                jobs.append((obj, self._spawn([*base, "-c", str(src), "-o", str(obj)])))
            errors = [self._wait(proc) for _, proc in jobs]
            first_error = next((e for e in errors if e is not None), None)
            if first_error is not None:
                raise _compile_error(self.project, first_error)
            out = tmp / self.so_path.name
            err = self._wait(self._spawn([*base, "-shared", *(str(o) for o, _ in jobs), "-o", str(out)]))
            if err is not None:
                raise _compile_error(self.project, err)
            # rename last: a library at so_path is always complete
            os.replace(out, self.so_path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _spawn(self, argv: list[str]) -> subprocess.Popen:
        try:
            return subprocess.Popen(
                argv, cwd=self.folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace"
            )
        except OSError as e:
            raise ProjectError(f"cannot run {argv[0]}: {e}") from None

    @staticmethod
    def _wait(proc: subprocess.Popen) -> str | None:
        """None when the compiler succeeded, else its output."""
        try:
            stdout, stderr = proc.communicate(timeout=COMPILE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return f"error: {COMPILER} did not finish within {COMPILE_TIMEOUT_S} s"
        return None if proc.returncode == 0 else (stderr or stdout or f"error: exit status {proc.returncode}")


__all__ = ["CXXFLAGS", "CsimLibrary", "default_cache_dir", "fix_axi_typedefs"]
