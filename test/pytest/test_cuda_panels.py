"""The shared-memory matmul's memory traffic in the PTX (:mod:`mlc_mlir.pipeline.cuda_panels`):
16-byte global loads of the staged panels (kernel arguments ``llvm.align 16``), the ``A`` panel
stored ``k``-major so that a thread's rows are one ``ld.shared.v4``; numerics on the GPU
(skipped without a driver), including shapes that no vector width divides."""

import re
import shutil

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.pipeline.cuda import check_ptx, compile_to_ptx
from mlc_mlir.pipeline.ptx_facts import ptx_loops, ptxas_usage
from mlc_mlir.runtime.cuda import cuda_available
from mlc_mlir.schedule.default_rules import default_schedule
from mlc_mlir.target import Target
from mlc_mlir.tune.gpu_space import MatmulTiles, sample_gpu_matmul

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA driver/GPU")
CUDA = Target("cuda", cpu="generic", arch="sm_90")


def _matmul(m, k, n, dtype="float32"):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.matmul(f.arg("a", shape=(m, k), dtype=dtype), f.arg("b", shape=(k, n), dtype=dtype)))
    return bb.finish()


def _tiled(m, k, n, t: MatmulTiles):
    sch = mlc.Schedule(_matmul(m, k, n))
    sample_gpu_matmul(sch, sch.get_block("matmul"), t, CUDA.cuda_arch)
    return sch.mod


def _ptx(mod) -> str:
    (ptx,) = compile_to_ptx(mod).values()
    check_ptx(ptx)
    return ptx


def _k_loop(ptx: str) -> str:
    """The outer k loop (the longest PTX loop)."""
    first, last = max(ptx_loops(ptx), key=lambda s: s[1] - s[0])
    return "\n".join(ptx.splitlines()[first:last + 1])


@needs_ptxas
def test_staged_panels_load_16_byte_vectors():
    ptx = _ptx(_tiled(256, 128, 256, MatmulTiles(16, 16, 8, 8, 8)))
    assert len(re.findall(r"\.param \.u64 \.ptr \.align 16", ptx)) == 6   # 2 pointers x 3 memrefs
    loop = _k_loop(ptx)
    # one 128x8 A and one 8x128 B panel over 256 threads: one 16-byte load each
    assert loop.count("ld.global.v4.b32") == 2 and "ld.global.b32" not in loop


@needs_ptxas
def test_a_panel_is_read_as_vectors_of_a_threads_rows():
    ptx = _ptx(_tiled(256, 128, 256, MatmulTiles(16, 16, 8, 8, 8)))
    loop = _k_loop(ptx)
    # per k step: the thread's 8 rows of A and 8 columns of B, two 16-byte loads each
    fmas = loop.count("fma.rn.f32")
    assert fmas % 64 == 0 and fmas > 0
    assert loop.count("ld.shared.v4.b32") * 16 == fmas and "ld.shared.b32" not in loop
    # the A panel is written transposed: 4 scalar stores per 16-byte global load, k rows of
    # 128 + 4 floats (528 bytes) apart
    stores = re.findall(r"st\.shared\.b32\s+\[%rd\d+(\+\d+)?\]", loop)
    assert stores == ["", "+528", "+1056", "+1584"]


@needs_ptxas
def test_unaligned_shapes_keep_scalar_loads():
    """777 x 1029 @ 1029 x 513: no row of A or B starts at a multiple of 16 bytes; LLVM proves
    nothing and the loads stay 4-byte (the alignment is only LLVM's proof from the base)."""
    ptx = _ptx(default_schedule(_matmul(777, 1029, 513), CUDA))
    assert "ld.global.v4" not in ptx and "ld.global" in ptx


@needs_ptxas
@pytest.mark.parametrize("prefetch", [1, 0])
def test_next_panels_are_prefetched_into_registers(prefetch):
    """prefetch=1: the first panels are loaded before the k loop; each iteration stores the
    registers into shared memory, passes one barrier, then loads the next panels (k + 8,
    clamped to the last panel at 120) ahead of the FMAs -- two barriers per step instead of
    three. prefetch=0 keeps the load-store-barrier copies."""
    ptx = _ptx(_tiled(256, 128, 256, MatmulTiles(16, 16, 8, 8, 8, prefetch)))
    loop = _k_loop(ptx)
    before = ptx[:ptx.index(loop)]
    first_fma = loop.index("fma.rn.f32")
    if prefetch:
        assert before.count("ld.global.v4.b32") == 2 and loop.count("bar.sync") == 2
        head = loop[:first_fma]
        assert head.index("st.shared") < head.index("bar.sync") < head.index("ld.global.v4.b32")
        assert head.count("ld.global.v4.b32") == 2 and re.search(r"min\.[us]64\s+%rd\d+, %rd\d+, 120;", head)
    else:
        assert "ld.global" not in before and loop.count("bar.sync") == 3
        assert loop[:first_fma].rindex("ld.global") < loop[:first_fma].rindex("bar.sync")


@needs_ptxas
def test_default_4096_kernel_fits_128_registers_without_spills():
    """The default f32 4096 matmul (128 x 128 blocks of 256 threads, 8 x 8 per thread,
    prefetch): .maxnreg 128, and ptxas needs no local memory for it."""
    ptx = _ptx(default_schedule(_matmul(4096, 4096, 4096), CUDA))
    assert ".maxntid 256, 1, 1" in ptx and ".maxnreg 128" in ptx
    use = ptxas_usage(ptx)
    assert 64 < use.registers <= 128 and use.spill_stores == use.spill_loads == 0


@needs_gpu
@pytest.mark.parametrize("shape,tiles", [
    ((256, 128, 256), None), ((256, 128, 256), MatmulTiles(16, 16, 8, 8, 8, 0)),
    ((256, 64, 512), MatmulTiles(8, 16, 4, 8, 16)), ((128, 8, 256), MatmulTiles(8, 8, 4, 4, 8)),
    ((512, 256, 128), MatmulTiles(16, 16, 4, 4, 8)), ((256, 64, 256), MatmulTiles(8, 32, 8, 4, 8)),
    ((777, 1029, 513), None)])
def test_cuda_panel_matmul_matches_numpy(shape, tiles):
    m, k, n = shape
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    mod = default_schedule(_matmul(m, k, n), CUDA) if tiles is None else _tiled(m, k, n, tiles)
    np.testing.assert_allclose(mlc.compile(mod, target="cuda")(a, b), a @ b, rtol=1e-4, atol=1e-3)


@needs_gpu
def test_cuda_float16_panel_matmul_matches_numpy():
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s, np.float32).astype(np.float16) for s in ((100, 64), (64, 96)))
    got = mlc.compile(default_schedule(_matmul(100, 64, 96, "float16"), CUDA), target="cuda")(a, b)
    want = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=5e-2)


_OUTLINED = """
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @k(%a: memref<16xf32>, %b: memref<16xf32>, %n: index) kernel
        attributes {known_block_size = array<i32: 64, 1, 1>} {
      gpu.return
    }
  }
  func.func @f(%x: memref<16xf32>, %raw: memref<128xi8>) {
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %v = memref.view %raw[%c4][] : memref<128xi8> to memref<16xf32>
    gpu.launch_func @k::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%x : memref<16xf32>, %v : memref<16xf32>, %c1 : index)
    return
  }
}
"""


def test_only_arguments_aligned_on_the_host_are_annotated():
    """A function argument keeps its 16-byte alignment; a memref.view 4 bytes into a buffer
    does not (no llvm.align); every kernel may use 128 registers per thread (half of 255)."""
    from mlc_mlir.ir.module import Module
    from mlc_mlir.ir.walk import find_ops
    from mlc_mlir.pipeline.cuda_panels import annotate_kernels
    out = annotate_kernels(Module.parse(_OUTLINED), CUDA.cuda_arch)
    with out.context:
        (f,) = find_ops(out, "gpu.func")
        attrs = [str(a) for a in f.attributes["arg_attrs"]]
        assert attrs == ["{llvm.align = 16 : i64}", "{}", "{}"]
        assert str(f.attributes["nvvm.maxnreg"]) == "128 : i32"
    from mlc_mlir.pipeline.cuda_panels import max_registers
    # 1024 threads of 128 registers would not launch (64 Ki registers per block)
    assert [max_registers(CUDA.cuda_arch, t) for t in (64, 256, 512, 1024)] == [128, 128, 128, 64]
