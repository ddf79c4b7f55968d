"""The GPU chapter's examples (mlc.ai "GPU acceleration", part 1), written as a user would:
each lowers to PTX that ``ptxas -arch=sm_90`` accepts; on a GPU (skipped without one) each
result matches numpy."""

import io
import re
import shutil

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import te
from mlc_mlir.pipeline.cuda import check_ptx, compile_to_ptx
from mlc_mlir.runtime.cuda import cuda_available

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA driver/GPU")

N = 256   # matmul size (the chapter uses 1024; 256 keeps the test fast)


def vecadd(n=1024):
    bb = mlc.GraphBuilder()
    A, B = te.placeholder((n,), name="A"), te.placeholder((n,), name="B")
    te.create_function(bb, "main", [A, B, te.compute((n,), lambda i: A[i] + B[i], name="C")])
    return bb.finish()


def window_sum(n=1024):
    bb = mlc.GraphBuilder()
    A = te.placeholder((n + 3,), name="A")
    te.create_function(bb, "main", [A, te.compute((n,), lambda i: A[i] + A[i + 1] + A[i + 2], name="C")])
    return bb.finish()


def matmul(n=N):
    bb = mlc.GraphBuilder()
    A, B = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    te.create_function(bb, "main", [A, B, C])
    return bb.finish()


def sch_vecadd():
    sch = mlc.Schedule(vecadd())
    (i,) = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, 128])
    sch.bind(i0, "blockIdx.x")
    sch.bind(i1, "threadIdx.x")
    return sch


def sch_slide_binding():
    """The seed slide: reorder(xi, xo); the outer loop bound to threads, the inner to blocks."""
    sch = mlc.Schedule(vecadd(128))
    (x,) = sch.get_loops(sch.get_block("C"))
    xo, xi = sch.split(x, [None, 4])
    sch.reorder(xi, xo)
    sch.bind(xo, "threadIdx.x")
    sch.bind(xi, "blockIdx.x")
    return sch


def sch_window_sum():
    sch = mlc.Schedule(window_sum())
    block_C = sch.get_block("C")
    (i,) = sch.get_loops(block_C)
    i0, i1 = sch.split(i, [None, 128])
    sch.bind(i0, "blockIdx.x")
    sch.bind(i1, "threadIdx.x")
    A_shared = sch.cache_read(block_C, 0, "shared")
    sch.compute_at(A_shared, i1)
    ax = sch.get_loops(A_shared)[-1]
    _, ax1 = sch.split(ax, [None, 128])
    sch.bind(ax1, "threadIdx.x")
    return sch


def sch_local_blocking(tl=(8, 8), tb=(8, 8), tk=4):
    sch = mlc.Schedule(matmul())
    block_C = sch.get_block("C")
    C_local = sch.cache_write(block_C, 0, "local")
    i, j, k = sch.get_loops(block_C)
    i0, i1, i2 = sch.split(i, [None, tb[0], tl[0]])
    j0, j1, j2 = sch.split(j, [None, tb[1], tl[1]])
    k0, k1 = sch.split(k, [None, tk])
    sch.unroll(k1)
    sch.reorder(i0, j0, i1, j1, k0, k1, i2, j2)
    sch.reverse_compute_at(C_local, j1)
    sch.bind(i0, "blockIdx.y")
    sch.bind(j0, "blockIdx.x")
    sch.bind(i1, "threadIdx.y")
    sch.bind(j1, "threadIdx.x")
    sch.decompose_reduction(block_C, k0)
    return sch


def gram(n=N):
    """``C = A @ A``: one buffer read by ``(i, k)`` and by ``(k, j)``, two reads to stage."""
    bb = mlc.GraphBuilder()
    A = te.placeholder((n, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * A[k, j], axis=k), name="C")
    te.create_function(bb, "main", [A, C])
    return bb.finish()


def sch_shared_blocking(tl=(8, 8), tb=(8, 8), tk=8, payload=matmul):
    sch = mlc.Schedule(payload())
    block_C = sch.get_block("C")
    C_local = sch.cache_write(block_C, 0, "local")
    i, j, k = sch.get_loops(block_C)
    i0, i1, i2 = sch.split(i, [None, tb[0], tl[0]])
    j0, j1, j2 = sch.split(j, [None, tb[1], tl[1]])
    k0, k1 = sch.split(k, [None, tk])
    sch.reorder(i0, j0, i1, j1, k0, k1, i2, j2)
    sch.reverse_compute_at(C_local, j1)
    sch.bind(i0, "blockIdx.y")
    sch.bind(j0, "blockIdx.x")
    sch.bind(sch.fuse(i1, j1), "threadIdx.x")
    nthread = tb[0] * tb[1]
    for idx in (0, 1):
        cache = sch.cache_read(block_C, idx, "shared")
        sch.compute_at(cache, k0)
        inner = sch.fuse(*sch.get_loops(cache)[-2:])
        _, tx, vec = sch.split(inner, [None, nthread, 4])
        sch.vectorize(vec)
        sch.bind(tx, "threadIdx.x")
    sch.decompose_reduction(block_C, k0)
    return sch


EXAMPLES = [sch_vecadd, sch_slide_binding, sch_window_sum, sch_local_blocking, sch_shared_blocking]
SHARED = {sch_window_sum, sch_shared_blocking}


@needs_ptxas
@pytest.mark.parametrize("make", EXAMPLES, ids=lambda f: f.__name__)
def test_seed_example_ptx(make):
    sch = make()
    ptx = compile_to_ptx(sch.mod)
    assert len(ptx) == 1
    text = next(iter(ptx.values()))
    check_ptx(text, arch="sm_90")
    assert "%ctaid" in text and "%tid.x" in text
    if make in SHARED:
        assert ".shared" in text and "bar.sync" in text   # cooperative fetch, then barrier
    # the trace replays to the same transform script
    again = mlc.Schedule.from_trace(sch.payload, mlc.Trace.from_json(sch.trace.as_json()))
    assert str(again.as_transform_script()) == str(sch.as_transform_script())


def test_block_axes_in_any_order():
    sch = sch_local_blocking()
    text = str(sch.as_transform_script())
    assert "#gpu.block<y>, #gpu.block<x>" in text


def test_local_cache_is_private_not_memref_copy():
    text = next(iter(compile_to_ptx(sch_local_blocking().mod).values()))
    # the thread's tile lives in registers (no local memory, no device malloc), stored once
    assert "memrefCopy" not in text and ".local" not in text and "malloc" not in text
    assert "fma.rn.f32" in text


def cross(n=64):
    """``C[i, j] = A[i + 1, j] + A[i, j + 1]``: no read's tile covers the union of both."""
    bb = mlc.GraphBuilder()
    A = te.placeholder((n + 1, n + 1), name="A")
    te.create_function(bb, "main", [A, te.compute((n, n), lambda i, j: A[i + 1, j] + A[i, j + 1],
                                                  name="C")])
    return bb.finish()


def sch_cross():
    sch = mlc.Schedule(cross())
    block_C = sch.get_block("C")
    i, j = sch.get_loops(block_C)
    i0, i1 = sch.split(i, [None, 8])
    j0, j1 = sch.split(j, [None, 32])
    sch.reorder(i0, j0, i1, j1)
    sch.bind(i0, "blockIdx.y")
    sch.bind(j0, "blockIdx.x")
    sch.bind(i1, "threadIdx.y")
    sch.bind(j1, "threadIdx.x")
    sch.compute_at(sch.cache_read(block_C, 0, "shared"), j1)
    return sch


def _shared_arrays(ptx):
    """Bytes of each ``.shared`` array of a kernel."""
    return [int(n) for n in re.findall(r"\.shared \.align \d+ \.b8 \w+\[(\d+)\]", ptx)]


@needs_ptxas
def test_window_sum_stages_the_union_of_its_reads():
    """TVM's cache_read + compute_at stages A[128 b : 128 b + 130] once per block (the 128
    elements of its threads and the 2 of the halo) and all three reads come from it."""
    sch = sch_window_sum()
    ptx = next(iter(compile_to_ptx(sch.mod).values()))
    check_ptx(ptx, arch="sm_90")
    assert _shared_arrays(ptx) == [130 * 4]
    # the three reads of the sum, each from shared memory
    assert len(re.findall(r"ld\.shared\.(?:b32|f32)", ptx)) == 3


@needs_ptxas
def test_stencil_stages_one_copy_of_the_union():
    """Reads whose tiles overlap without one covering the others (8 x 32 threads reading
    A[i + 1, j] and A[i, j + 1]) share one staged 9 x 33 tile."""
    ptx = next(iter(compile_to_ptx(sch_cross().mod).values()))
    check_ptx(ptx, arch="sm_90")
    assert _shared_arrays(ptx) == [9 * 33 * 4]


def test_show_prints_the_fetch_binding():
    """show() prints the fetch loops as scheduled, a bound loop with the threads' extent
    (TVM: ``for ax0_1 in T.thread_binding(64, thread="threadIdx.x")``)."""
    text = sch_shared_blocking().show(file=io.StringIO())
    assert text.count('for ax0_1 in thread_binding(64, thread="threadIdx.x"):') == 2
    assert "shared tile 64x8, vectorized: ax0_2=4" in text and "packing" not in text
    text = sch_window_sum().show(file=io.StringIO())
    assert 'for ax0_1 in thread_binding(128, thread="threadIdx.x"):' in text
    assert "shared tile 130" in text


@needs_ptxas
def test_vectorized_fetch_is_a_vector_load():
    """vectorize(4) on the fetch: each thread moves 16 bytes at once, global to shared, and
    the thread's 8x8 tile goes back the same way; the kernel's buffers and shared arrays are
    declared 16-byte aligned (what proves it; the runtime checks foreign buffers)."""
    ptx = next(iter(compile_to_ptx(sch_shared_blocking().mod).values()))
    check_ptx(ptx, arch="sm_90")
    vec = r"\.v4\.(?:b32|f32)"
    assert len(re.findall(r"ld\.global" + vec, ptx)) == 4     # (2 A + 2 B rows of 4) per k0
    assert not re.findall(r"ld\.global\.(?:b32|f32)", ptx)
    assert len(re.findall(r"st\.shared" + vec, ptx)) == 4
    assert len(re.findall(r"st\.global" + vec, ptx)) == 16     # 8x8 floats
    assert re.findall(r"\.shared \.align (\d+)", ptx) == ["16", "16"]
    # the allocated and aligned pointers of A, B, C
    assert len(re.findall(r"\.param \.u64 \.ptr \.align 16", ptx)) == 6


@needs_ptxas
def test_reads_of_one_buffer_by_other_dims_are_staged_apart():
    """A @ A: the A panel and the B panel are tiles of one buffer by different dims, each its
    own staged copy, as for two buffers."""
    sch = sch_shared_blocking(payload=gram)
    ptx = next(iter(compile_to_ptx(sch.mod).values()))
    check_ptx(ptx, arch="sm_90")
    assert _shared_arrays(ptx) == [64 * 8 * 4, 8 * 64 * 4]


def test_a_buffer_is_cached_once():
    sch = mlc.Schedule(window_sum())
    block_C = sch.get_block("C")
    sch.cache_read(block_C, 0, "shared")
    with pytest.raises(mlc.ScheduleError, match="already cached"):
        sch.cache_read(block_C, 2, "shared")


def test_no_block_binding_is_a_schedule_error():
    sch = mlc.Schedule(vecadd())
    (i,) = sch.get_loops(sch.get_block("C"))
    _, i1 = sch.split(i, [None, 128])
    sch.bind(i1, "threadIdx.x")
    with pytest.raises(mlc.ScheduleError, match="blockIdx"):
        sch.mod


# ---------------------------------------------------------------- on a GPU only
def _run(sch, *arrays):
    exe = mlc.compile(sch.mod, target="cuda")
    return exe["main"](*arrays)


@needs_gpu
def test_gpu_vecadd_matches_numpy():
    a, b = np.random.rand(1024).astype("float32"), np.random.rand(1024).astype("float32")
    np.testing.assert_allclose(_run(sch_vecadd(), a, b), a + b, rtol=1e-6)


@needs_gpu
def test_gpu_window_sum_matches_numpy():
    a = np.random.rand(1027).astype("float32")
    np.testing.assert_allclose(_run(sch_window_sum(), a), a[:-3] + a[1:-2] + a[2:-1], rtol=1e-5)


@needs_gpu
def test_gpu_misaligned_device_buffer_is_refused():
    """The kernels assume 16-byte aligned buffers: a view 4 bytes into one is refused."""
    exe = mlc.compile(sch_vecadd().mod, target="cuda")
    a = np.random.rand(1025).astype("float32")
    base = mlc.DeviceArray.from_numpy(a)
    view = mlc.DeviceArray(base.ptr + 4, (1024,), np.float32, owner=base)
    b = mlc.DeviceArray.from_numpy(np.ones(1024, "float32"))
    with pytest.raises(mlc.ExecutionError, match="16 bytes"):
        exe["main"].on_device(view, b)
    np.testing.assert_allclose(exe["main"].on_device(mlc.DeviceArray.from_numpy(a[1:]), b).numpy(),
                               a[1:] + 1, rtol=1e-6)


@needs_gpu
def test_gpu_gram_matches_numpy():
    a = np.random.rand(N, N).astype("float32")
    np.testing.assert_allclose(_run(sch_shared_blocking(payload=gram), a), a @ a, rtol=1e-4)


@needs_gpu
def test_gpu_stencil_union_matches_numpy():
    a = np.random.rand(65, 65).astype("float32")
    np.testing.assert_allclose(_run(sch_cross(), a), a[1:, :-1] + a[:-1, 1:], rtol=1e-6)


@needs_gpu
@pytest.mark.parametrize("make", [sch_local_blocking, sch_shared_blocking], ids=lambda f: f.__name__)
def test_gpu_matmul_matches_numpy(make):
    a, b = np.random.rand(N, N).astype("float32"), np.random.rand(N, N).astype("float32")
    np.testing.assert_allclose(_run(make(), a, b), a @ b, rtol=1e-4)
