"""The cubins of a CUDA compile loaded by ordinary host functions
(:func:`mlc_mlir.pipeline.cuda_modules.load_gpu_binaries`), checked against MLIR's own
translation of ``gpu.binary``/``gpu.launch_func`` (``#gpu.select_object``) on the recording
stand-in runtime (:mod:`fake_cuda`): the same modules, kernels and launches, and a JIT object
with one code section. The GPU regression test of the crash it removes is
``test_cuda_models.test_compile_after_a_cuda_model_and_torch_on_the_gpu``."""

import ctypes
import importlib
import shutil
import struct

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.errors import PipelineError
from mlc_mlir.ir.module import Module
from mlc_mlir.ir.walk import find_ops
from mlc_mlir.pipeline.cuda_compile import lower_cuda
from mlc_mlir.pipeline.cuda_modules import load_gpu_binaries
from mlc_mlir.pipeline.options import CompileOptions
from mlc_mlir.runtime.memref import PackedArgs
from mlc_mlir.runtime.executable import engine_invoker
from mlc_mlir.target import Target

from fake_cuda import FakeCuda

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
CUDA = Target("cuda", cpu="generic", arch="sm_90")
CPU_STAGES = importlib.import_module("mlc_mlir.pipeline.compile").CPU_STAGES


def _model():
    """Three kernels (matmul, a softmax's reductions) with temporaries and a constant."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(64, 96))
        w = ops.constant(np.linspace(-1, 1, 96 * 128, dtype=np.float32).reshape(96, 128))
        f.output(ops.softmax(ops.relu(ops.matmul(x, w)), axis=-1))
    return bb.finish()


def _executable_sections(obj: bytes):
    """(name, size) of the sections of an ELF64 object with SHF_EXECINSTR and bytes."""
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", obj, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", obj, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    out = []
    for name, _, flags, _, _, size in headers:
        if flags & 0x4 and size:
            end = obj.index(b"\0", names_at + name)
            out.append((obj[names_at + name:end].decode(), size))
    return out


def _run(module, tmp_path, tag):
    """Load ``module`` on the fake runtime, call ``main`` once; returns what the runtime saw
    (module bytes, kernel names, launches with each argument as the buffer it points into and
    the offset, or as a plain value) and the JIT object's code sections."""
    fake = FakeCuda(module)
    engine = fake.load(CUDA)
    loads = [ctypes.string_at(a[0], a[1]) for n, a in fake.calls if n == "mgpuModuleLoad"]
    obj = tmp_path / f"{tag}.o"
    engine.dump_to_object_file(str(obj))
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((64, 96)).astype(np.float32), np.empty((64, 128), np.float32)]
    fake.reset()
    packed = PackedArgs([a.shape for a in arrays])
    packed.bind(arrays)
    engine_invoker(engine, "main")(packed)
    assert not fake.errors, fake.errors
    order = {start: i for i, start in enumerate(fake.buffers)}
    host = [(a.ctypes.data, a.nbytes) for a in arrays]

    def where(v):
        start = fake.owner(v)
        if start is not None:
            return ("device", order[start], v - start)
        for i, (base, n) in enumerate(host):
            if base <= v < base + n:
                return ("host", i, v - base)
        return ("value", v)

    names = [ctypes.string_at(a[1]).decode() for n, a in fake.calls if n == "mgpuModuleGetFunction"]
    grids = [a[1:8] for n, a in fake.calls if n == "mgpuLaunchKernel"]
    launches = [(g, [where(v) for v in values]) for g, (_, values) in zip(grids, fake.launches)]
    return {"loads": loads, "names": names, "launches": launches,
            "streams": len(set(s for s, _ in fake.launches))}, _executable_sections(obj.read_bytes())


@needs_ptxas
def test_cubins_loaded_by_host_functions_match_mlir_translation(tmp_path):
    """Against ``#gpu.select_object``'s translation: the same cubins loaded, the same kernels
    looked up and launched with the same grid, block, shared memory and arguments (each device
    pointer at the same offset of the same buffer), on one stream; no ``gpu.binary`` or
    ``gpu.launch_func`` left, the input module unchanged; the JIT object has one code section
    where MLIR's has two (``.text.startup`` for its module load/unload functions)."""
    _, lowered = lower_cuda(_model(), CompileOptions(target=CUDA), CPU_STAGES)
    ours = load_gpu_binaries(lowered)
    assert not find_ops(ours, "gpu.binary") and not find_ops(ours, "gpu.launch_func")
    assert len(find_ops(lowered, "gpu.binary")) >= 3   # left as it was
    want, want_sections = _run(lowered, tmp_path, "mlir")
    got, got_sections = _run(ours, tmp_path, "ours")
    assert len(want["launches"]) >= 3 and want["streams"] == 1
    assert sorted(got["loads"]) == sorted(want["loads"])
    assert got["names"] == want["names"]
    assert got["launches"] == want["launches"]
    assert got["streams"] == 1
    assert len(got_sections) == 1, got_sections
    assert ".text.startup" in {n for n, _ in want_sections}


def test_cubins_loaded_by_host_functions_refuse_ptx():
    """A ``gpu.binary`` with PTX is refused with the binary's name: its module would need
    ``mgpuModuleLoadJIT``, which the rewrite does not emit."""
    mod = Module.parse('module attributes {gpu.container_module} {\n'
                       '  gpu.binary @kernels [#gpu.object<#nvvm.target, assembly = "// ptx">]\n}')
    with pytest.raises(PipelineError, match=r"gpu.binary @kernels holds assembly code, not a cubin"):
        load_gpu_binaries(mod)
