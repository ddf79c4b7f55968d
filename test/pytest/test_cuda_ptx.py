"""CUDA lowering without a GPU: bound schedules lower to PTX that ptxas accepts."""

import shutil

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.errors import PipelineError
from mlc_mlir.pipeline.cuda import check_ptx, compile_to_ptx

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")


def _bound_matmul():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.matmul(f.arg("a", shape=(256, 128)), f.arg("b", shape=(128, 256))))
    mod = bb.finish()
    sch = mlc.Schedule(mod)
    blk = sch.get_block("matmul")
    i, j, k = sch.get_loops(blk)
    i0, i1 = sch.split(i, [None, 16])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i0, j0, i1, j1, k)
    sch.bind(i0, "blockIdx.x")
    sch.bind(j0, "blockIdx.y")
    sch.bind(i1, "threadIdx.x")
    sch.bind(j1, "threadIdx.y")
    return sch


def _bound_elementwise():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.gelu(f.arg("x", shape=(512, 1024))))
    sch = mlc.Schedule(bb.finish())
    i, j = sch.get_loops(sch.get_block("gelu"))
    j0, j1 = sch.split(j, [None, 256])
    sch.reorder(i, j0, j1)
    sch.bind(i, "blockIdx.x")
    sch.bind(j0, "blockIdx.y")
    sch.bind(j1, "threadIdx.x")
    return sch


def _bound_conv2d():
    """conv2d with sampled tile sizes: output channels and rows over blocks x threads."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(1, 16, 32, 32))
        f.output(ops.conv2d(x, np.ones((32, 16, 3, 3), np.float32), padding=0))
    sch = mlc.Schedule(bb.finish())
    n, fo, h, w, c, kh, kw = sch.get_loops(sch.get_block("conv2d"))
    f0, f1 = sch.split(fo, sch.sample_perfect_tile(fo, n=2, max_innermost_factor=8))
    h0, h1 = sch.split(h, [None, sch.sample_categorical([5, 6], [0.5, 0.5])])
    sch.reorder(n, f0, h0, f1, h1, w, c, kh, kw)
    sch.bind(f0, "blockIdx.x")
    sch.bind(h0, "blockIdx.y")
    sch.bind(f1, "threadIdx.x")
    sch.bind(h1, "threadIdx.y")
    return sch


@pytest.mark.parametrize("make", [_bound_matmul, _bound_elementwise, _bound_conv2d])
def test_bound_kernels_lower_to_ptx(make):
    sch = make()
    ptx = compile_to_ptx(sch.mod)
    assert len(ptx) == 1
    text = next(iter(ptx.values()))
    assert ".target sm_90" in text and ".entry" in text
    # a sampled one-trip thread loop is no forall dim: some thread axis is used, maybe not x
    assert "%ctaid.x" in text and "%tid." in text


@needs_ptxas
@pytest.mark.parametrize("make", [_bound_matmul, _bound_elementwise, _bound_conv2d])
def test_ptxas_accepts_the_ptx(make):
    for text in compile_to_ptx(make().mod).values():
        check_ptx(text, arch="sm_90")


def test_unbound_module_has_no_kernel():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.relu(f.arg("x", shape=(4, 4))))
    with pytest.raises(PipelineError, match="no GPU kernel was produced"):
        compile_to_ptx(bb.finish())


@needs_ptxas
def test_ptxas_rejection_is_reported():
    with pytest.raises(PipelineError, match="ptxas rejected the PTX"):
        check_ptx(".version 8.0\n.target sm_90\nthis is not ptx\n")


def test_cuda_computation_left_on_the_host_is_refused():
    """An op nobody bound to the GPU would run on the host, on device memory (a SIGSEGV when the
    host dereferences it): the lowering refuses it by name."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.gelu(ops.relu(f.arg("x", shape=(64, 256)))))
    sch = mlc.Schedule(bb.finish())
    i, j = sch.get_loops(sch.get_block("gelu"))
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    with pytest.raises(PipelineError, match=r"\['relu'\] would run on the host, on device memory"):
        compile_to_ptx(sch.mod)
