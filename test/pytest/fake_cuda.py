"""A stand-in for ``libmlir_cuda_runtime.so`` that runs a CUDA module's host code on the CPU.

Each ``mgpu*`` function the lowered module declares is bound (``load_engine``'s
``native_symbols``) to a ctypes callback that records the call: "device" memory is host memory
(``mgpuMemAlloc`` returns a zeroed buffer, ``mgpuMemcpy`` copies bytes), kernels do not run
(``mgpuLaunchKernel`` records the function, the stream and the launch parameters' 8-byte
slots). So the host code's calls per call (streams, allocations, copies, launches) and the
memory it hands the kernels are observable without a GPU.
"""

import ctypes
import re

import numpy as np

from mlc_mlir.pipeline.aot import translate_to_llvmir
from mlc_mlir.pipeline.libraries import runtime_library_paths
from mlc_mlir.runtime.executable import load_engine
from mlc_mlir.target import Target

P, I64, I32, I8 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_int8

#: mgpu function -> (result type, argument types) as the runtime wrappers define them.
SIGNATURES = {
    "mgpuModuleLoad": (P, [P, I64]), "mgpuModuleUnload": (None, [P]),
    "mgpuModuleGetFunction": (P, [P, P]),
    "mgpuLaunchKernel": (None, [P, I64, I64, I64, I64, I64, I64, I32, P, P, P, I64]),
    "mgpuStreamCreate": (P, []), "mgpuStreamSynchronize": (None, [P]),
    "mgpuStreamDestroy": (None, [P]),
    "mgpuMemAlloc": (P, [I64, P, I8]), "mgpuMemFree": (None, [P, P]),
    "mgpuMemcpy": (None, [P, P, I64, P]),
}


class FakeCuda:
    """Records the calls of the lowered module's host code; ``calls`` is the list of
    ``(name, args)`` since the last :meth:`reset`; ``buffers`` maps each live allocation's
    address to its bytes."""

    def __init__(self, lowered):
        self._lowered = lowered
        self.ll = translate_to_llvmir(lowered)
        self.errors = []
        self.reset()
        self.buffers = {}
        self._handles = 0x1000
        self.symbols = []
        for name in sorted(set(re.findall(r"^declare [^@]*@(mgpu\w+)\(", self.ll, re.M))):
            if name not in SIGNATURES:
                raise AssertionError(f"the host code calls {name}, which the fake runtime lacks")
            res, args = SIGNATURES[name]
            cb = ctypes.CFUNCTYPE(res, *args)(self._recorder(name))
            self.symbols.append((name, cb))

    def _recorder(self, name):
        def call(*args):
            try:
                self.calls.append((name, args))
                return getattr(self, "_" + name[4:], lambda *a: None)(*args)
            except Exception as e:   # a ctypes callback cannot raise: keep it for the test
                self.errors.append(f"{name}{args}: {e!r}")
                return None
        return call

    def _handle(self):
        self._handles += 0x10
        return self._handles

    def _ModuleLoad(self, data, size):
        assert ctypes.string_at(data, 4) == b"\x7fELF"
        return self._handle()

    def _ModuleGetFunction(self, module, name):
        return self._handle()

    def _StreamCreate(self):
        self.streams.append(self._handle())
        return self.streams[-1]

    def _MemAlloc(self, size, stream, shared):
        buf = np.zeros(max(size, 1), np.uint8)
        self.buffers[buf.ctypes.data] = buf
        return buf.ctypes.data

    def _MemFree(self, ptr, stream):
        assert self.buffers.pop(ptr, None) is not None, f"mgpuMemFree of {ptr:#x}: not allocated"

    def _Memcpy(self, dst, src, size, stream):
        ctypes.memmove(dst, src, size)

    def _LaunchKernel(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra, n):
        slots = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        values = [ctypes.cast(slots[i], ctypes.POINTER(ctypes.c_uint64))[0] for i in range(n)]
        self.launches.append((stream, values))

    def reset(self):
        self.calls, self.launches, self.streams = [], [], []

    def count(self, name: str) -> int:
        return sum(1 for n, _ in self.calls if n == name)

    def owner(self, address: int):
        """The allocation (start address) that holds ``address``, or None."""
        for start, buf in self.buffers.items():
            if start <= address < start + buf.nbytes:
                return start
        return None

    def load(self, cuda: Target):
        """JIT the module with this runtime (and the C runner utils); runs its constructors."""
        self.reset()
        c_runner = [p for p in runtime_library_paths(cuda) if "c_runner_utils" in p]
        return load_engine(self._lowered, 2, c_runner, native_symbols=self.symbols)
