"""Run the host code of a CUDA compile without a GPU: MLIR's CUDA runtime wrappers (``mgpu*``)
are replaced by host stand-ins that check every call against the buffers it may touch.

* "Device" memory (``mgpuMemAlloc``) is handed out from an address range reserved with
  ``PROT_NONE``: host code that dereferences a device pointer (a ``memcpy``, load or store left
  on the host between kernels) dies with SIGSEGV, so :func:`run_lowered` runs the host code in a
  child process and reports the signal. Each allocation's bytes live in a shadow buffer.
* ``mgpuMemcpy`` checks both ends: a device range must lie inside one live allocation, a host
  destination inside one of the numpy buffers the call was given (a copy past a host buffer
  corrupts the heap and crashes later, elsewhere); then it copies (shadow <-> host).
* ``mgpuLaunchKernel`` runs nothing (the outputs are not computed) but checks that no kernel
  argument points into a host buffer; ``mgpuMemFree`` that it frees a live allocation once.

Source: the stand-ins of ``test_jit_runs_the_module_load_constructors`` (test_cuda_host.py);
the calls and signatures of MLIR's ``mlir/lib/ExecutionEngine/CudaRuntimeWrappers.cpp``.

Used as a script by :func:`run_lowered`: ``python cuda_hostsim.py JOBS_JSON``.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

#: The signature (restype, argtypes) of each CUDA runtime wrapper the host code may call.
_V, _P, _U64, _I64 = None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int64
SIGNATURES = {
    "mgpuModuleLoad": (_P, [_P, _U64]),
    "mgpuModuleLoadJIT": (_P, [_P, ctypes.c_int]),
    "mgpuModuleUnload": (_V, [_P]),
    "mgpuModuleGetFunction": (_P, [_P, ctypes.c_char_p]),
    "mgpuLaunchKernel": (_V, [_P] + [_I64] * 6 + [ctypes.c_int32, _P, _P, _P, _U64]),
    "mgpuStreamCreate": (_P, []),
    "mgpuStreamDestroy": (_V, [_P]),
    "mgpuStreamSynchronize": (_V, [_P]),
    "mgpuStreamWaitEvent": (_V, [_P, _P]),
    "mgpuEventCreate": (_P, []),
    "mgpuEventDestroy": (_V, [_P]),
    "mgpuEventSynchronize": (_V, [_P]),
    "mgpuEventRecord": (_V, [_P, _P]),
    "mgpuMemAlloc": (_P, [_U64, _P, ctypes.c_bool]),
    "mgpuMemFree": (_V, [_P, _P]),
    "mgpuMemcpy": (_V, [_P, _P, _U64, _P]),
    "mgpuMemset32": (_V, [_P, ctypes.c_uint32, _U64, _P]),
    "mgpuMemset16": (_V, [_P, ctypes.c_uint16, _U64, _P]),
    "mgpuSetDefaultDevice": (_V, [ctypes.c_int32]),
}

_PROT_NONE, _MAP_PRIVATE, _MAP_ANONYMOUS, _MAP_NORESERVE = 0, 0x02, 0x20, 0x4000
_ALIGN = 256   # cuMemAlloc's alignment


class FakeDevice:
    """The ``mgpu*`` stand-ins over a reserved ``PROT_NONE`` range of ``size`` bytes; ``host``
    lists the ``(address, bytes)`` of the numpy buffers a call may write. ``problems`` collects
    what the checks found (strings), ``log`` each copy ``(kind, dst, src, bytes)``."""

    def __init__(self, size: int = 1 << 34):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        base = libc.mmap(None, size, _PROT_NONE, _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE,
                         -1, 0)
        if base in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap of the fake device range failed")
        self.base, self.end, self._next = base, base + size, base
        self.live = {}       # device address -> (bytes, shadow ndarray)
        self.host = []       # (address, bytes) of the call's numpy buffers
        self.problems, self.log = [], []
        self.launches = 0

    def _device(self, addr: int, n: int, what: str):
        """The shadow address of device range [addr, addr + n), or None (a problem noted)."""
        for start, (size, shadow) in self.live.items():
            if start <= addr < start + size:
                if addr + n > start + size:
                    self.problems.append(f"{what}: {n} bytes at device offset {addr - start} "
                                         f"overrun the {size}-byte allocation")
                    return None
                return shadow.ctypes.data + (addr - start)
        self.problems.append(f"{what}: device address {addr:#x} is not in a live allocation")
        return None

    def _host_write(self, addr: int, n: int, what: str) -> bool:
        if any(a <= addr and addr + n <= a + size for a, size in self.host):
            return True
        self.problems.append(f"{what}: writes {n} bytes at host {addr:#x}, outside every numpy "
                             f"buffer of the call {[(hex(a), s) for a, s in self.host]}")
        return False

    def is_device(self, addr: int) -> bool:
        return addr is not None and self.base <= addr < self.end

    def mem_alloc(self, n, stream, shared):
        addr = self._next
        self._next += -(-max(int(n), 1) // _ALIGN) * _ALIGN + _ALIGN   # a gap after each
        self.live[addr] = (int(n), np.zeros(max(int(n), 1), np.uint8))
        return addr

    def mem_free(self, addr, stream):
        if addr not in self.live:
            self.problems.append(f"mgpuMemFree of {addr if addr is None else hex(addr)}: not a "
                                 "live device allocation")
            return
        del self.live[addr]

    def memcpy(self, dst, src, n, stream):
        kind = ("D" if self.is_device(dst) else "H") + "<-" + ("D" if self.is_device(src) else "H")
        self.log.append((kind, dst, src, int(n)))
        d = self._device(dst, n, "mgpuMemcpy dst") if self.is_device(dst) else \
            (dst if self._host_write(dst, n, "mgpuMemcpy") else None)
        s = self._device(src, n, "mgpuMemcpy src") if self.is_device(src) else src
        if d is not None and s is not None:
            ctypes.memmove(d, s, n)

    def memset(self, dst, value, count, stream, width):
        d = self._device(dst, count * width, f"mgpuMemset{8 * width}")
        if d is not None:
            view = (ctypes.c_char * (count * width)).from_address(d)
            np.frombuffer(view, np.uint32 if width == 4 else np.uint16)[:] = value

    def launch(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra, count):
        self.launches += 1
        if min(gx, gy, gz, bx, by, bz) < 1 or bx * by * bz > 1024:
            self.problems.append(f"launch {self.launches}: grid {(gx, gy, gz)} block {(bx, by, bz)}")
        args = (ctypes.c_void_p * count).from_address(params)
        for i in range(count):
            v = ctypes.c_uint64.from_address(args[i]).value
            if any(a <= v < a + size for a, size in self.host):
                self.problems.append(f"launch {self.launches}: argument {i} points into a host "
                                     "buffer (a kernel cannot read host memory)")

    def symbols(self, names):
        """``[(name, ctypes function)]`` for ``load_engine(native_symbols=...)``; keep them alive.

        Raises
        ------
        KeyError
            If a name has no stand-in (add it to :data:`SIGNATURES`)."""
        counter = iter(range(0x1000, 1 << 40, 0x10))
        impl = {
            "mgpuMemAlloc": self.mem_alloc, "mgpuMemFree": self.mem_free,
            "mgpuMemcpy": self.memcpy, "mgpuLaunchKernel": self.launch,
            "mgpuMemset32": lambda d, v, c, s: self.memset(d, v, c, s, 4),
            "mgpuMemset16": lambda d, v, c, s: self.memset(d, v, c, s, 2),
        }
        out = []
        for name in names:
            res, args = SIGNATURES[name]
            fn = impl.get(name)
            if fn is None:
                fn = (lambda *a: next(counter)) if res is not None else (lambda *a: None)
            out.append((name, ctypes.CFUNCTYPE(res, *args)(fn)))
        return out


def _signature(spec: dict):
    from mlc_mlir.ir.module import FunctionSignature, TensorSpec
    return FunctionSignature(spec["name"], tuple(TensorSpec(n, tuple(s), d) for n, s, d in spec["args"]),
                             tuple(TensorSpec(n, tuple(s), d) for n, s, d in spec["results"]), {})


def _run_one(mlir_file: str, specs: list) -> dict:
    """Load one lowered module on a fresh fake device and call each function of ``specs`` once
    on random numpy inputs (results as out-params)."""
    from mlc_mlir.ir import dtypes
    from mlc_mlir.ir.module import Module
    from mlc_mlir.pipeline.aot import translate_to_llvmir
    from mlc_mlir.pipeline.libraries import runtime_library_paths
    from mlc_mlir.runtime.executable import Function, engine_invoker, load_engine
    from mlc_mlir.target import Target

    with open(mlir_file) as f:
        lowered = Module.parse(f.read())
    declared = set(re.findall(r"^declare [^@]*@([\w.]+)\(", translate_to_llvmir(lowered), re.M))
    names = sorted(n for n in declared if n.startswith("mgpu"))
    dev = FakeDevice()
    stubs = dev.symbols(names)
    libs = [p for p in runtime_library_paths(Target.cuda()) if "c_runner_utils" in p]
    engine = load_engine(lowered, 2, libs, native_symbols=stubs)
    rng = np.random.default_rng(0)
    for spec in specs:
        sig = _signature(spec)
        fn = Function(sig, engine_invoker(engine, sig.name))
        args = [rng.standard_normal(a.shape).astype(dtypes.to_numpy_dtype(a.dtype))
                for a in sig.args]
        outs = [np.empty(r.shape, dtypes.to_numpy_dtype(r.dtype)) for r in sig.results]
        dev.host = [(a.ctypes.data, a.nbytes) for a in args + outs]
        fn(*args, out=outs[0] if len(outs) == 1 else outs)
    result = {"problems": dev.problems, "copies": dev.log, "launches": dev.launches,
              "foreign": sorted(declared.difference(names))}
    del engine, fn   # the module destructors (and the resident memory's unload) run here
    gc.collect()
    result["leaked"] = len(dev.live)
    return result


def run_lowered(modules) -> list:
    """Run the host code of each ``(lowered, signatures)`` of ``modules`` (``lowered``:
    :func:`mlc_mlir.pipeline.cuda_compile.lower_cuda`'s module; ``signatures``: ``{name:
    FunctionSignature}``, static shapes) on a :class:`FakeDevice`, in child processes (one for
    all, a new one after a crash). Returns per module ``{"returncode", "problems", "copies",
    "launches", "leaked", "foreign", "stderr"}``: ``returncode`` -11 (SIGSEGV) when its host
    code touched device memory, 0 when it ran; ``foreign``: the functions the host code
    declares besides the ``mgpu*`` wrappers (``malloc``, ``free``, ``llvm.memcpy``: host
    memory work, also on paths the call did not take)."""
    with tempfile.TemporaryDirectory() as d:
        jobs = []
        for i, (lowered, signatures) in enumerate(modules):
            mlir = os.path.join(d, f"m{i}.mlir")   # text: bytecode needs 64-byte aligned buffers
            with open(mlir, "w") as f:
                f.write(str(lowered))
            jobs.append((mlir, [{"name": n, "args": [(a.name, list(a.shape), a.dtype) for a in s.args],
                                 "results": [(r.name, list(r.shape), r.dtype) for r in s.results]}
                                for n, s in signatures.items()]))
        spec = os.path.join(d, "jobs.json")
        results: list = []
        while len(results) < len(jobs):
            with open(spec, "w") as f:
                json.dump(jobs[len(results):], f)
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), spec],
                                  capture_output=True, text=True, timeout=900)
            done = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
            results += [dict(r, returncode=0, stderr="") for r in done]
            if proc.returncode < 0 and len(results) < len(jobs):   # the next one crashed
                results.append({"returncode": proc.returncode, "problems": [], "copies": [],
                                "launches": 0, "leaked": 0, "foreign": [],
                                "stderr": proc.stderr[-4000:]})
            elif proc.returncode != 0 or len(done) == 0:
                raise RuntimeError(f"cuda_hostsim child failed ({proc.returncode}):\n{proc.stderr}")
    return results


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        for mlir_file, specs in json.load(f):
            print(json.dumps(_run_one(mlir_file, specs)), flush=True)
