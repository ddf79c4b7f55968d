"""Register accumulation in the shared-memory matmul (:mod:`mlc_mlir.pipeline.cuda_buffers`):
the thread's ``ly x lx`` tile stays in registers across the ``k`` loop -- the inner loop is
``ld.shared`` + ``fma`` with no global store, no local memory, no device ``malloc`` -- and the
rewrites refuse to hoist when another access in the loop touches the same buffer."""

import re
import shutil

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.ir.module import Module
from mlc_mlir.ir.walk import find_ops
from mlc_mlir.pipeline.cuda import check_ptx, compile_to_ptx
from mlc_mlir.pipeline.ptx_facts import ptx_loops
from mlc_mlir.pipeline.cuda_buffers import clean_kernel_buffers
from mlc_mlir.runtime.cuda import cuda_available
from mlc_mlir.schedule.default_rules import default_schedule
from mlc_mlir.target import Target
from mlc_mlir.tune.gpu_space import MatmulTiles, sample_gpu_matmul

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA driver/GPU")
CUDA = Target("cuda", cpu="generic", arch="sm_90")


def _matmul(m=256, k=128, n=256):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.matmul(f.arg("a", shape=(m, k)), f.arg("b", shape=(k, n))))
    return bb.finish()


def _loops(ptx: str):
    """Bodies of the PTX loops."""
    lines = ptx.splitlines()
    return ["\n".join(lines[a:b + 1]) for a, b in ptx_loops(ptx)]


def _tiled(t: MatmulTiles):
    sch = mlc.Schedule(_matmul())
    sample_gpu_matmul(sch, sch.get_block("matmul"), t, CUDA.cuda_arch)
    return sch.mod


@needs_ptxas
@pytest.mark.parametrize("case", ["default", "8x8"])
def test_accumulator_stays_in_registers(case):
    mod = default_schedule(_matmul(), CUDA) if case == "default" else \
        _tiled(MatmulTiles(ty=8, tx=8, ly=8, lx=8, kt=8))
    (ptx,) = compile_to_ptx(mod).values()
    check_ptx(ptx)
    assert "malloc" not in ptx and ".local" not in ptx
    tile = 64   # 8 x 8 by default on sm_90 (256 x 256 gives 2 x 2 blocks of 128 x 128)
    # the result tile is stored once, after the k loop (16-byte vectors: llvm.align 16 buffers)
    widths = {"": 1, ".v2": 2, ".v4": 4}
    assert sum(widths[w] for w in re.findall(r"\bst\.global(\.v[24])?", ptx)) == tile
    k_loops = [b for b in _loops(ptx) if "fma.rn.f32" in b]
    assert k_loops
    for body in k_loops:
        assert "ld.shared" in body and "st.global" not in body
    inner = min(k_loops, key=len)
    assert inner.count("fma.rn.f32") >= tile and "ld.global" not in inner


_PAYLOAD = """
func.func @f(%a: memref<8xf32>, %c: memref<64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %cst = arith.constant 0.0 : f32
  gpu.launch blocks(%b0, %b1, %b2) in (%g0 = %c1, %g1 = %c1, %g2 = %c1)
             threads(%t0, %t1, %t2) in (%s0 = %c4, %s1 = %c1, %s2 = %c1) {
    %tile = memref.subview %c[%t0] [4] [1] : memref<64xf32> to memref<4xf32, strided<[1], offset: ?>>
    linalg.fill ins(%cst : f32) outs(%tile : memref<4xf32, strided<[1], offset: ?>>)
    scf.for %k = %c0 to %c4 step %c1 {
      %acc = memref.alloca() : memref<4xf32>
      linalg.copy ins(%tile : memref<4xf32, strided<[1], offset: ?>>) outs(%acc : memref<4xf32>)
      %x = memref.subview %a[%k] [4] [1] : memref<8xf32> to memref<4xf32, strided<[1], offset: ?>>
      linalg.add ins(%acc, %x : memref<4xf32>, memref<4xf32, strided<[1], offset: ?>>) outs(%acc : memref<4xf32>)
      EXTRA
      linalg.copy ins(%acc : memref<4xf32>) outs(%tile : memref<4xf32, strided<[1], offset: ?>>)
    }
    gpu.terminator
  }
  return
}
"""


@pytest.mark.parametrize("extra", ["", "READ"])
def test_hoist_only_without_other_accesses(extra):
    # a read of another part of %c inside the loop (another thread's tile) forbids the hoist
    read = ("%o = memref.subview %c[%k] [4] [1] : memref<64xf32> to memref<4xf32, strided<[1], "
            "offset: ?>>\n linalg.copy ins(%o : memref<4xf32, strided<[1], offset: ?>>) "
            "outs(%acc : memref<4xf32>)")
    mod = clean_kernel_buffers(Module.parse(_PAYLOAD.replace("EXTRA", read if extra else "")), CUDA.cuda_arch)
    with mod.context:
        (loop,) = find_ops(mod, "scf.for")
        inside = [op.name for op in loop.regions[0].blocks[0].operations]
        fill = find_ops(mod, "linalg.fill")[0]
        fills_acc = "memref.alloca" in str(fill.operands[1].owner)
    if extra:
        assert "memref.alloca" in inside and not fills_acc
    else:
        # alloca, fill and the store left the loop; the fill writes the registers
        assert "memref.alloca" not in inside and inside.count("linalg.copy") == 0 and fills_acc


@needs_gpu
def test_register_tiled_matmul_matches_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((256, 128), np.float32), rng.standard_normal((128, 256), np.float32)
    for mod in (default_schedule(_matmul(), CUDA), _tiled(MatmulTiles(8, 8, 8, 8, 8))):
        np.testing.assert_allclose(mlc.compile(mod, target="cuda")(a, b), a @ b, rtol=1e-4, atol=1e-4)


_REDUCE = """
func.func @f(%a: memref<4x16xf32>, %c: memref<4x16xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %cst = arith.constant 0.0 : f32
  gpu.launch blocks(%b0, %b1, %b2) in (%g0 = %c1, %g1 = %c1, %g2 = %c1)
             threads(%t0, %t1, %t2) in (%s0 = %c4, %s1 = %c1, %s2 = %c1) {
    %tile = memref.subview %c[%t0, 0] [1, 1] [1, 1] : memref<4x16xf32> to memref<1xf32, strided<[16], offset: ?>>
    %x = memref.subview SRC[%t0, 0] [1, 16] [1, 1] : memref<4x16xf32> to memref<1x16xf32, strided<[16, 1], offset: ?>>
    linalg.fill ins(%cst : f32) outs(%tile : memref<1xf32, strided<[16], offset: ?>>)
    linalg.reduce ins(%x : memref<1x16xf32, strided<[16, 1], offset: ?>>) outs(%tile : memref<1xf32, strided<[16], offset: ?>>) dimensions = [1]
      (%in: f32, %acc: f32) {
        %s = arith.addf %in, %acc : f32
        linalg.yield %s : f32
      }
    gpu.terminator
  }
  return
}
"""


@pytest.mark.parametrize("src", ["%a", "%c"])
def test_private_accumulator_unless_the_input_aliases_the_output(src):
    mod = clean_kernel_buffers(Module.parse(_REDUCE.replace("SRC", src)), CUDA.cuda_arch)
    with mod.context:
        (red,) = find_ops(mod, "linalg.reduce")
        private = "memref.alloca" in str(red.operands[1].owner)
        copies = find_ops(mod, "linalg.copy")
    if src == "%a":
        assert private and len(copies) == 1   # one store of the sum, after the reduction
    else:
        assert not private and not copies
