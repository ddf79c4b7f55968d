"""Cross-thread (block-per-row) reductions on CUDA: a reduction loop bound to threadIdx becomes a
cooperative reduction (split_reduction + thread foralls) combined with warp shuffles (default)
or a shared-memory tree (``mlc.warp_shuffle = 0``); PTX checked with ptxas; numerics vs numpy on
a GPU (skipped without one)."""

import re
import shutil

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.errors import ScheduleError
from mlc_mlir.pipeline.cuda import check_ptx, compile_to_ptx
from mlc_mlir.pipeline.ptx_facts import ptxas_usage
from mlc_mlir.runtime.cuda import cuda_available
from mlc_mlir.schedule.default_rules import apply_default_schedule, default_schedule
from mlc_mlir.schedule.gpu_reduction import WARP_SHUFFLE
from mlc_mlir.target import Target

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA driver/GPU")
CUDA = Target("cuda", cpu="generic", arch="sm_90")


def graph(fn, *shapes):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(fn(*[f.arg(f"x{i}", shape=s) for i, s in enumerate(shapes)]))
    return bb.finish()


def row_reduce_schedule(op=ops.sum, rows=128, k=1024, threads=256, shuffle=None):
    """A user schedule: a block per row, ``threads`` threads on k; ``shuffle`` annotates the
    combine (None: the default, warp shuffles)."""
    sch = mlc.Schedule(graph(lambda x: op(x, axis=1), (rows, k)))
    blk = sch.get_block(op.__name__)
    i, kk = sch.get_loops(blk)
    _, k1 = sch.split(kk, [None, threads])
    sch.bind(i, "blockIdx.x")
    sch.bind(k1, "threadIdx.x")
    if shuffle is not None:
        sch.annotate(blk, WARP_SHUFFLE, int(shuffle))
    return sch


def row_sum_schedule(rows=128, k=1024, threads=256, shuffle=None):
    return row_reduce_schedule(ops.sum, rows, k, threads, shuffle)


def _softmax_ref(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _layer_norm_ref(x):
    m = x.mean(-1, keepdims=True)
    return (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5)


GAMMA, BETA = np.ones(768, np.float32), np.zeros(768, np.float32)
CASES = {
    "row_sum": (lambda x: ops.sum(x, axis=1), [(256, 512)], lambda x: x.sum(1)),
    "row_max_100": (lambda x: ops.max(x, axis=1), [(64, 100)], lambda x: x.max(1)),
    "sum_3d": (lambda x: ops.sum(x, axis=-1), [(4, 64, 512)], lambda x: x.sum(-1)),
    "mean": (lambda x: ops.mean(x, axis=-1), [(32, 1000)], lambda x: x.mean(-1)),
    "softmax": (lambda x: ops.softmax(x, axis=-1), [(128, 256)], _softmax_ref),
    "layer_norm": (lambda x: ops.layer_norm(x, GAMMA, BETA), [(64, 768)], _layer_norm_ref),
}


def _kernel(ptx, pattern):
    """The one kernel of ``ptx`` whose text matches ``pattern``."""
    found = [t for t in ptx.values() if re.search(pattern, t)]
    assert len(found) == 1, f"{len(found)} kernels match {pattern!r}"
    return found[0]


@needs_ptxas
def test_user_schedule_is_a_shared_memory_tree():
    sch = row_sum_schedule(shuffle=False)
    ptx = compile_to_ptx(sch.mod)
    assert len(ptx) == 1
    text = next(iter(ptx.values()))
    check_ptx(text)
    # 256 partials, then 32, in shared memory; three barriers; 256 threads, 128 blocks
    shared = sorted(int(n) for n in re.findall(r"\.shared \.align \d+ \.b8 \w+\[(\d+)\]", text))
    assert shared == [128, 1024]
    assert text.count("bar.sync") == 3
    assert ".maxntid 256, 1, 1" in text
    # the 4 loads per thread are 1 KiB apart (thread t reads k0*256 + t: coalesced)
    assert re.search(r"ld\.global\.\w+\s+%r\d+, \[%rd\d+\+1024\]", text)
    again = mlc.Schedule.from_trace(sch.payload, mlc.Trace.from_json(sch.trace.as_json()))
    assert str(again.as_transform_script()) == str(sch.as_transform_script())


def test_transform_script_uses_upstream_ops():
    text = str(row_sum_schedule().as_transform_script())
    assert "transform.structured.split_reduction" in text and "inner_parallel" in text
    assert "transform.structured.tile_reduction_using_forall" not in text
    assert text.count("#gpu.address_space<workgroup>") == 1
    assert f'"{WARP_SHUFFLE}"' in text
    tree = str(row_sum_schedule(shuffle=False).as_transform_script())
    assert "transform.structured.tile_reduction_using_forall" in tree
    assert tree.count("#gpu.address_space<workgroup>") == 2 and WARP_SHUFFLE not in tree


@needs_ptxas
@pytest.mark.parametrize("op,k,threads,levels", [(ops.sum, 1024, 256, (5, 3)), (ops.max, 100, 100, (5, 2)),
                                                 (ops.max, 96, 96, (5, 2)), (ops.sum, 64, 32, (5, 0))])
def test_combine_is_warp_shuffles_and_one_barrier(op, k, threads, levels):
    """Each warp combines with ``shfl.sync.bfly`` (5 levels), lane 0 of each warp writes one
    float to shared memory, one barrier, the first warp combines the warp totals (log2 of the
    warps, rounded up); a partial warp (100 threads) shuffles with a mask of its live lanes.
    One warp: no barrier, no shared memory. The partials never go through shared memory."""
    ptx = compile_to_ptx(row_reduce_schedule(op, 16, k, threads).mod)
    text = next(iter(ptx.values()))
    check_ptx(text)
    warps = -(-threads // 32)
    assert len(re.findall(r"shfl\.sync\.bfly\.b32", text)) == sum(levels)
    assert text.count("bar.sync") == (1 if warps > 1 else 0)
    shared = [int(n) for n in re.findall(r"\.shared \.align \d+ \.b8 \w+\[(\d+)\]", text)]
    assert shared == ([4 * warps] if warps > 1 else [])
    assert text.count("st.shared") == (1 if warps > 1 else 0)
    # the second level runs on `warps` lanes: clamp warps - 1, member mask of `warps` bits
    if levels[1]:
        assert f", {warps - 1}, {(1 << warps) - 1};" in text
    use = ptxas_usage(text)
    assert use.spill_stores == use.spill_loads == 0


@needs_ptxas
def test_shuffles_replace_the_tree():
    """The same schedule with the tree (``mlc.warp_shuffle = 0``): more barriers, the 256
    partials in shared memory, no shuffles."""
    tree = next(iter(compile_to_ptx(row_sum_schedule(shuffle=False).mod).values()))
    shuffle = next(iter(compile_to_ptx(row_sum_schedule().mod).values()))
    assert "shfl.sync" not in tree and "shfl.sync.bfly" in shuffle
    assert shuffle.count("bar.sync") < tree.count("bar.sync")
    assert "[1024]" in tree and "[1024]" not in shuffle


@needs_ptxas
@pytest.mark.parametrize("kind", sorted(CASES))
def test_default_reductions_are_cooperative(kind):
    fn, shapes, _ = CASES[kind]
    ptx = compile_to_ptx(default_schedule(graph(fn, *shapes), CUDA))
    for t in ptx.values():
        check_ptx(t)
    reducing = [t for t in ptx.values() if "shfl.sync.bfly.b32" in t]
    assert reducing, "no kernel reduces across threads"
    for t in reducing:
        # warp shuffles, then (a block per row) one barrier before the warp totals are combined
        # or (a warp per row, rows of 512 and 768) none
        warp_rows = ".maxntid 32, 8, 1" in t
        assert t.count("bar.sync") == (0 if warp_rows else 1), t.count("bar.sync")
        assert ("shared" in t) != warp_rows
        assert "%tid.x" in t and "%ctaid.x" in t
        use = ptxas_usage(t)
        assert (use.spill_stores, use.spill_loads) == (0, 0)


@needs_ptxas
def test_short_rows_get_a_warp_each():
    """Rows of 768 (BERT): 8 rows per block on threadIdx.y, a warp per row, each lane 24
    elements; no barrier and no shared memory. The rows are a sampled decision."""
    sch = mlc.Schedule(graph(lambda x: ops.sum(x, axis=-1), (64, 768)))
    apply_default_schedule(sch, CUDA)
    binds = [i.inputs[1] for i in sch.trace.insts if i.kind == "bind"]
    assert binds == ["blockIdx.x", "threadIdx.y", "threadIdx.x"]
    cands = [list(i.attrs["candidates"]) for i in sch.trace.insts if i.kind == "sample_categorical"]
    assert [1, 2, 4, 8, 16, 32] in cands and [0, 1] in cands
    text = next(iter(compile_to_ptx(sch.mod).values()))
    check_ptx(text)
    assert ".maxntid 32, 8, 1" in text and "bar.sync" not in text and ".shared" not in text
    assert len(re.findall(r"shfl\.sync\.bfly\.b32\s+%r\d+, %r\d+, \d+, 31, -1;", text)) == 5
    # a long row keeps a block per row
    sch = mlc.Schedule(graph(lambda x: ops.sum(x, axis=-1), (64, 4096)))
    apply_default_schedule(sch, CUDA)
    assert ".maxntid 256, 1, 1" in next(iter(compile_to_ptx(sch.mod).values()))


def rows_schedule(op=ops.sum, rows=64, k=256, nrows=4, threads=64, shuffle=None):
    """A user schedule: ``nrows`` rows per block on threadIdx.y, ``threads`` on k."""
    sch = mlc.Schedule(graph(lambda x: op(x, axis=1), (rows, k)))
    blk = sch.get_block(op.__name__)
    i, kk = sch.get_loops(blk)
    i0, i1 = sch.split(i, [None, nrows])
    _, k1 = sch.split(kk, [None, threads])
    sch.bind(i0, "blockIdx.x")
    sch.bind(i1, "threadIdx.y")
    sch.bind(k1, "threadIdx.x")
    if shuffle is not None:
        sch.annotate(blk, WARP_SHUFFLE, int(shuffle))
    return sch


@needs_ptxas
def test_rows_of_two_warps_share_one_barrier():
    """4 rows x 64 threads: each row's 2 warp totals at W[row, warp] (4 x 2 floats), one
    barrier, 5 + 1 shuffles."""
    text = next(iter(compile_to_ptx(rows_schedule().mod).values()))
    check_ptx(text)
    assert ".maxntid 64, 4, 1" in text and text.count("bar.sync") == 1
    assert re.findall(r"\.shared \.align \d+ \.b8 \w+\[(\d+)\]", text) == ["32"]
    assert len(re.findall(r"shfl\.sync\.bfly\.b32", text)) == 6


@needs_ptxas
@pytest.mark.parametrize("k,vec,loads", [(768, 4, 6), (64, 2, 1), (4096, 4, 4), (100, 1, 0)])
def test_threads_read_vectors_where_the_row_is_aligned(k, vec, loads):
    """Each thread reads ``vec`` contiguous floats per step: ``ld.global.v4``/``v2`` (behind a
    check of the buffer's alignment, the scalar loads of the same elements in the other
    branch, unless the buffer is known aligned); rows of 100 take no vector."""
    sch = mlc.Schedule(graph(lambda x: ops.sum(x, axis=-1), (16, k)))
    apply_default_schedule(sch, CUDA)
    vecs = [i for i in sch.trace.insts if i.kind == "sample_categorical" and
            list(i.attrs["candidates"])[:1] == [1] and max(i.attrs["candidates"]) <= 4]
    assert sch.get(sch.get_block("sum")).loops[-1].extent == vec and vecs
    text = next(iter(compile_to_ptx(sch.mod).values()))
    check_ptx(text)
    assert text.count(f"ld.global.v{vec}.b32") == loads if vec > 1 else "ld.global.v" not in text
    if vec > 1:
        # the scalar branch for a misaligned buffer is folded away where LLVM proves the row's
        # buffer aligned (a kernel argument declared llvm.align 16); else it stays, behind the check
        scalar = len(re.findall(r"ld\.global\.b32", text))
        check = re.search(rf"and\.b64\s+%rd\d+, %rd\d+, {4 * vec - 1};", text)
        assert (scalar, bool(check)) in ((0, False), (loads * vec, True))
    use = ptxas_usage(text)
    assert (use.spill_stores, use.spill_loads) == (0, 0)


@needs_ptxas
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int8", "float64"])
def test_shuffles_of_narrow_and_wide_types(dtype):
    """``nvvm.shfl.sync`` moves 32-bit registers: 16- and 8-bit partials are widened around
    each shuffle (an exact round trip), 64-bit ones split by the NVVM lowering."""
    for shape in [(16, 1024), (16, 768), (16, 100)]:
        ptx = compile_to_ptx(default_schedule(_typed_graph(ops.max, shape, dtype), CUDA))
        for t in ptx.values():
            check_ptx(t)
        assert any("shfl.sync.bfly" in t for t in ptx.values())


def _typed_graph(op, shape, dtype):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(op(f.arg("x", shape=shape, dtype=dtype), axis=-1))
    return bb.finish()


def test_rows_need_whole_warps():
    with pytest.raises(ScheduleError, match="multiple of the warp size"):
        compile_to_ptx(rows_schedule(k=100, threads=100).mod)


def test_default_rule_binds_the_reduction_loop():
    sch = mlc.Schedule(graph(lambda x: ops.sum(x, axis=-1), (4, 64, 512)))
    apply_default_schedule(sch, CUDA)
    binds = [i.inputs[1] for i in sch.trace.insts if i.kind == "bind"]
    assert binds == ["blockIdx.x", "threadIdx.x"]
    # the combine is a sampled decision: shuffles by default, the tree reachable
    samples = [i for i in sch.trace.insts if i.kind == "sample_categorical"]
    assert any(list(i.attrs["candidates"]) == [0, 1] for i in samples), samples
    assert sch.get(sch.get_block("sum")).annotations[WARP_SHUFFLE] == 1
    assert [i.kind for i in sch.trace.insts].count("fuse") == 1


def test_short_or_strided_reductions_stay_per_thread():
    for fn, shape in [(lambda x: ops.sum(x, axis=0), (512, 64)), (lambda x: ops.sum(x, axis=1), (256, 16))]:
        ptx = compile_to_ptx(default_schedule(graph(fn, shape), CUDA))
        assert not any(".shared" in t for t in ptx.values())


def test_reduction_loop_to_blockidx_is_refused():
    sch = mlc.Schedule(graph(lambda x: ops.sum(x, axis=1), (128, 1024)))
    i, k = sch.get_loops(sch.get_block("sum"))
    _, k1 = sch.split(k, [None, 256])
    with pytest.raises(ScheduleError, match="only its innermost loop"):
        sch.bind(k1, "blockIdx.x")


def test_outer_reduction_loop_is_refused():
    sch = mlc.Schedule(graph(lambda x: ops.sum(x, axis=1), (128, 1024)))
    i, k = sch.get_loops(sch.get_block("sum"))
    k0, _ = sch.split(k, [None, 256])
    with pytest.raises(ScheduleError, match="innermost loop"):
        sch.bind(k0, "threadIdx.x")


def test_parallel_loop_not_on_blocks_is_refused():
    sch = mlc.Schedule(graph(lambda x: ops.sum(x, axis=1), (128, 1024)))
    i, k = sch.get_loops(sch.get_block("sum"))
    i0, i1 = sch.split(i, [None, 2])
    _, k1 = sch.split(k, [None, 256])
    sch.bind(i0, "blockIdx.x")
    sch.bind(k1, "threadIdx.x")
    with pytest.raises(ScheduleError, match="expected every parallel loop bound to blockIdx"):
        sch.mod


@needs_gpu
@pytest.mark.parametrize("kind", sorted(CASES))
def test_cooperative_reduction_numerics(kind):
    fn, shapes, ref = CASES[kind]
    args = [np.random.rand(*s).astype("float32") for s in shapes]
    out = mlc.compile(graph(fn, *shapes), target="cuda")(*args)
    np.testing.assert_allclose(out, ref(*args), rtol=1e-4, atol=1e-5)


ROW_OPS = {"sum": (ops.sum, np.sum), "max": (ops.max, np.max), "mean": (ops.mean, np.mean)}


@needs_gpu
@pytest.mark.parametrize("k", [64, 96, 100, 256, 768, 4096, 65536])
@pytest.mark.parametrize("name", sorted(ROW_OPS))
def test_cuda_row_reduction_lengths(name, k):
    """Default schedules (warp shuffles; partial warps at 96 and 100) against numpy, signed
    data so that a lost or doubled partial shows in the sum and the mean."""
    op, ref = ROW_OPS[name]
    rows = 4 if k >= 4096 else 24
    x = np.random.default_rng(k).standard_normal((rows, k)).astype(np.float32)
    out = mlc.compile(graph(lambda a: op(a, axis=-1), (rows, k)), target="cuda")(x)
    np.testing.assert_allclose(out, ref(x.astype(np.float64), axis=-1), rtol=1e-4, atol=1e-3)


@needs_gpu
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("op,k,threads,nrows", [(ops.sum, 1024, 256, 0), (ops.max, 100, 100, 0),
                                                (ops.sum, 64, 32, 0), (ops.sum, 256, 64, 4),
                                                (ops.max, 768, 32, 8)])
def test_cuda_user_schedule_both_combines(op, k, threads, nrows, shuffle):
    sch = rows_schedule(op, 16, k, nrows, threads, shuffle) if nrows else \
        row_reduce_schedule(op, 16, k, threads, shuffle)
    x = np.random.default_rng(1).standard_normal((16, k)).astype(np.float32)
    out = mlc.compile(sch.mod, target="cuda")(x)
    np.testing.assert_allclose(out, x.sum(1) if op is ops.sum else x.max(1), rtol=1e-4, atol=1e-4)


@needs_gpu
@pytest.mark.parametrize("seed", range(4))
def test_cuda_sampled_softmax_schedules(seed):
    """Samples of the GPU space (rows per block, threads per row, shuffle or tree) on softmax
    over rows of 768, against numpy."""
    from mlc_mlir.tune.space_rules import default_space
    sch = mlc.Schedule(graph(lambda x: ops.softmax(x, axis=-1), (64, 768)), seed=seed, defaults=False)
    default_space(Target.cuda())(sch)
    x = np.random.default_rng(seed).standard_normal((64, 768)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(sch.mod, target="cuda")(x), _softmax_ref(x), rtol=1e-4, atol=1e-6)


@needs_gpu
@pytest.mark.parametrize("k", [768, 4096])
def test_cuda_misaligned_rows_are_refused_and_a_clone_runs(k):
    """A CUDA tensor that starts 4 bytes past an aligned address (a view at offset 1): the
    kernels' buffers are declared 16-byte aligned, so the call refuses it by name (on an H200 it
    was accepted and reduced by the scalar branch before that); its ``.clone()`` matches numpy."""
    torch = pytest.importorskip("torch")
    rows = 16
    exe = mlc.compile(graph(lambda a: ops.sum(a, axis=-1), (rows, k)), target="cuda")
    base = torch.randn(rows * k + 1, device="cuda")
    x = base[1:].view(rows, k)
    assert x.data_ptr() % 16 == 4
    with pytest.raises(mlc.ExecutionError, match="not a multiple of 16 bytes"):
        exe.on_device(x)
    got = exe.on_device(x.clone()).numpy()
    np.testing.assert_allclose(got, x.cpu().numpy().astype(np.float64).sum(-1), rtol=1e-4, atol=1e-3)


@needs_gpu
@pytest.mark.parametrize("k", [100, 768, 1024])
def test_cuda_float16_rows(k):
    """f16 partials shuffled through 32-bit registers: max exact, sum within f16 rounding."""
    x = np.random.default_rng(k).standard_normal((16, k)).astype(np.float16)
    got = mlc.compile(_typed_graph(ops.max, (16, k), "float16"), target="cuda")(x)
    np.testing.assert_array_equal(got, x.max(-1))
    got = mlc.compile(_typed_graph(ops.sum, (16, k), "float16"), target="cuda")(x)
    np.testing.assert_allclose(got.astype(np.float64), x.astype(np.float64).sum(-1), rtol=2e-2, atol=0.5)


@needs_ptxas
@pytest.mark.parametrize("k", [64, 768, 4096])
def test_row_total_is_stored_without_a_thread_partial(k):
    """The shuffled total alone reaches the output: after the last shuffle, the row's result is
    the last butterfly step plus the reduction's init (two adds). A thread's vector of partials
    (2 or 4 per step) once went into the final reduce too, adding one of them twice (wrong sums
    on an H200; the PTX showed a third add of the thread's second partial)."""
    text = next(iter(compile_to_ptx(default_schedule(graph(lambda x: ops.sum(x, axis=-1), (24, k)),
                                                     CUDA)).values()))
    check_ptx(text)
    tail = text[text.rindex("shfl.sync.bfly"):text.rindex("st.global")]
    assert len(re.findall(r"\badd(?:\.rn)?\.f32", tail)) == 2, tail
