"""Host code of a CUDA function: numpy arguments are copied into device buffers and results back
(``gpu.memcpy`` -> ``mgpuMemcpy``, nothing registered with ``mgpuMemHostRegister``); the kernels
themselves live in ``<name>__device``, which ``Function.on_device`` calls on arrays kept in GPU
memory. IR checks run everywhere; numerics need a GPU (skipped without one)."""

import ctypes
import gc
import importlib
import re
import shutil

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.pipeline.aot import translate_to_llvmir
from mlc_mlir.pipeline.cuda_compile import lower_cuda
from mlc_mlir.pipeline.libraries import runtime_library_paths
from mlc_mlir.pipeline.options import CompileOptions
from mlc_mlir.runtime import DeviceArray, as_device_array
from mlc_mlir.runtime.cuda import cuda_available
from mlc_mlir.runtime.executable import load_engine
from mlc_mlir.target import Target

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA driver/GPU")
CUDA = Target("cuda", cpu="generic", arch="sm_90")
CPU_STAGES = importlib.import_module("mlc_mlir.pipeline.compile").CPU_STAGES


def mlp():
    """Two inputs, a weight, two kernels with a temporary between them, one result."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x, w = f.arg("x", shape=(128, 64)), f.arg("w", shape=(64, 256))
        f.output(ops.add(ops.relu(ops.matmul(x, w)), f.arg("b", shape=(128, 256))))
    return bb.finish()


def _functions(ll: str) -> dict:
    """LLVM IR text -> {function name: body text}."""
    out = {}
    for m in re.finditer(r"^define [^@]*@([\w.]+)\(.*?^}", ll, re.M | re.S):
        out[m.group(1)] = m.group(0)
    return out


@needs_ptxas
def test_host_code_copies_instead_of_registering():
    _, lowered = lower_cuda(mlp(), CompileOptions(target=CUDA), CPU_STAGES)
    ll = translate_to_llvmir(lowered)
    fns = _functions(ll)
    assert "mgpuMemHostRegister" not in ll
    host, dev = fns["main"], fns["main__device"]
    # three inputs in, one result out; buffers allocated and freed on the device
    assert host.count("call void @mgpuMemcpy(") == 4
    assert host.count("@mgpuMemAlloc(") == 4 and host.count("call void @mgpuMemFree(") == 4
    assert "@main__device(" in host and "mgpuLaunchKernel" not in host
    # the kernels run in main__device, on device buffers: no copies there; the temporary between
    # the two kernels is device memory
    assert dev.count("call void @mgpuLaunchKernel(") >= 2
    assert "mgpuMemcpy" not in dev and "@mgpuMemAlloc(" in dev and "@malloc" not in dev
    assert "_mlir_ciface_main__device" in fns


def test_on_device_needs_a_cuda_function():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.relu(f.arg("x", shape=(4,))))
    exe = mlc.compile(bb.finish())
    with pytest.raises(mlc.ExecutionError, match="compiled for target='cuda'"):
        exe.on_device(np.ones(4, np.float32))
    with pytest.raises(mlc.ExecutionError, match="compiled for target='cuda'"):
        exe.benchmark(np.ones(4, np.float32), device=True)


def test_host_memory_is_not_a_device_array():
    with pytest.raises(mlc.ExecutionError, match="not in GPU memory.*__cuda_array_interface__"):
        as_device_array(np.ones(4, np.float32))


class _Strided:
    __cuda_array_interface__ = {"shape": (4, 4), "typestr": "<f4", "data": (1 << 20, False),
                                "version": 3, "strides": (4, 16)}


def test_non_contiguous_cuda_array_is_refused():
    with pytest.raises(mlc.ExecutionError, match=r"strides \(4, 16\).*C-contiguous \(16, 4\)"):
        as_device_array(_Strided())


class _Offset:
    __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": ((1 << 20) + 4, False),
                                "version": 3, "strides": None}


def test_cuda_array_at_an_element_offset_is_refused():
    # the kernels' arguments are llvm.align 16 (ld.global.v4): a view one float in is refused
    with pytest.raises(mlc.ExecutionError, match=r"0x100004, not a multiple of 16 bytes"):
        as_device_array(_Offset())


@pytest.mark.skipif(cuda_available(), reason="a CUDA driver is present")
def test_device_array_without_a_driver_is_a_clear_error():
    with pytest.raises(mlc.ExecutionError, match="DeviceArray needs a GPU"):
        DeviceArray.from_numpy(np.ones(4, np.float32))


def _inputs():
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(np.float32) for s in ((128, 64), (64, 256), (128, 256))]


def _ref(x, w, b):
    return np.maximum(x @ w, 0) + b


@needs_gpu
def test_numpy_call_copies_in_and_out():
    args = _inputs()
    np.testing.assert_allclose(mlc.compile(mlp(), target="cuda")(*args), _ref(*args),
                               rtol=1e-4, atol=1e-4)


@needs_gpu
def test_on_device_keeps_arrays_on_the_gpu():
    exe = mlc.compile(mlp(), target="cuda")
    args = _inputs()
    dev = [DeviceArray.from_numpy(a) for a in args]
    y = exe.on_device(*dev)
    assert isinstance(y, DeviceArray) and y.shape == (128, 256)
    np.testing.assert_allclose(y.numpy(), _ref(*args), rtol=1e-4, atol=1e-4)
    out = DeviceArray.empty((128, 256), np.float32)
    assert exe.on_device(*dev, out=out) is out
    np.testing.assert_allclose(out.numpy(), _ref(*args), rtol=1e-4, atol=1e-4)
    with pytest.raises(mlc.ExecutionError, match="argument 'w' is float32\\(64, 128\\)"):
        exe.on_device(dev[0], DeviceArray.empty((64, 128), np.float32), dev[2])
    assert exe.benchmark(*args, number=3, repeat=2, device=True).min_ms > 0


@needs_gpu
def test_torch_cuda_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    exe = mlc.compile(mlp(), target="cuda")
    args = _inputs()
    ts = [torch.from_numpy(a).cuda() for a in args]
    y = torch.as_tensor(exe.on_device(*ts), device="cuda")
    np.testing.assert_allclose(y.cpu().numpy(), _ref(*args), rtol=1e-4, atol=1e-4)
    out = torch.empty((128, 256), device="cuda")
    exe.on_device(*ts, out=out)
    np.testing.assert_allclose(out.cpu().numpy(), _ref(*args), rtol=1e-4, atol=1e-4)


@needs_ptxas
def test_jit_runs_the_module_load_constructors():
    """The cubins are loaded by global constructors; ``load_engine`` must run them (a GPU run
    found every launch failing with CUDA_ERROR_INVALID_HANDLE when it did not). Here the CUDA
    runtime wrappers are replaced by ctypes stand-ins that record the calls."""
    _, lowered = lower_cuda(mlp(), CompileOptions(target=CUDA), CPU_STAGES)
    ll = translate_to_llvmir(lowered)
    loads, unloads = [], []
    names = sorted(set(re.findall(r"^declare [^@]*@(mgpu\w+)\(", ll, re.M)))
    stubs = []
    for name in names:
        if name == "mgpuModuleLoad":
            cb = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64)(
                lambda data, size: loads.append(ctypes.string_at(data, 4)) or 0x1000 + len(loads))
        elif name == "mgpuModuleUnload":
            cb = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda m: unloads.append(m))
        else:
            cb = ctypes.CFUNCTYPE(ctypes.c_void_p)(lambda: pytest.fail("a kernel ran"))
        stubs.append((name, cb))
    assert "mgpuModuleLoad" in names
    c_runner = [p for p in runtime_library_paths(CUDA) if "c_runner_utils" in p]
    engine = load_engine(lowered, 2, c_runner, native_symbols=stubs)
    # one cubin (an ELF image) per kernel module, loaded before any function is called
    assert len(loads) >= 2 and all(head == b"\x7fELF" for head in loads)
    assert not unloads
    del engine   # the destructors unload every module
    gc.collect()
    assert sorted(unloads) == [0x1000 + i for i in range(1, len(loads) + 1)]


def _with_constant():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.add(f.arg("x", shape=(3, 40)),
                         ops.constant(np.arange(120, dtype=np.float32).reshape(3, 40))))
    return bb.finish()


@needs_ptxas
def test_constants_are_copied_to_the_device():
    """A weight (``memref.get_global``, host memory) is copied into a device buffer before the
    kernels read it; on an H200 kernels given the host pointer read garbage or faulted."""
    _, lowered = lower_cuda(_with_constant(), CompileOptions(target=CUDA), CPU_STAGES)
    dev = _functions(translate_to_llvmir(lowered))["main__device"]
    launch = dev.index("@mgpuLaunchKernel(")
    assert "call void @mgpuMemcpy(" in dev[:launch] and "@mgpuMemFree(" in dev[launch:]


@needs_gpu
def test_constants_reach_the_kernels():
    x = np.random.default_rng(0).standard_normal((3, 40), np.float32)
    got = mlc.compile(_with_constant(), target="cuda")(x)
    np.testing.assert_allclose(got, x + np.arange(120, dtype=np.float32).reshape(3, 40), rtol=1e-6)
