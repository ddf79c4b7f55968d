"""Cross-thread (block-per-row) reductions on CUDA: a reduction loop bound to threadIdx becomes a
cooperative reduction in shared memory (split_reduction + thread foralls); PTX checked with
ptxas; numerics vs numpy on a GPU (skipped without one)."""

import re
import shutil

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.errors import ScheduleError
from mlc_mlir.pipeline.cuda import check_ptx, compile_to_ptx
from mlc_mlir.runtime.cuda import cuda_available
from mlc_mlir.schedule.default_rules import apply_default_schedule, default_schedule
from mlc_mlir.target import Target

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA driver/GPU")
CUDA = Target("cuda", cpu="generic", arch="sm_90")


def graph(fn, *shapes):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(fn(*[f.arg(f"x{i}", shape=s) for i, s in enumerate(shapes)]))
    return bb.finish()


def row_sum_schedule(rows=128, k=1024, threads=256):
    sch = mlc.Schedule(graph(lambda x: ops.sum(x, axis=1), (rows, k)))
    blk = sch.get_block("sum")
    i, kk = sch.get_loops(blk)
    _, k1 = sch.split(kk, [None, threads])
    sch.bind(i, "blockIdx.x")
    sch.bind(k1, "threadIdx.x")
    return sch


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
    sch = row_sum_schedule()
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
    assert "transform.structured.tile_reduction_using_forall" in text
    assert text.count("#gpu.address_space<workgroup>") == 2


@needs_ptxas
@pytest.mark.parametrize("kind", sorted(CASES))
def test_default_reductions_are_cooperative(kind):
    fn, shapes, _ = CASES[kind]
    ptx = compile_to_ptx(default_schedule(graph(fn, *shapes), CUDA))
    for t in ptx.values():
        check_ptx(t)
    reducing = [t for t in ptx.values() if ".shared" in t]
    assert reducing, "no kernel reduces through shared memory"
    for t in reducing:
        assert "bar.sync" in t and "%tid.x" in t and "%ctaid.x" in t


def test_default_rule_binds_the_reduction_loop():
    sch = mlc.Schedule(graph(lambda x: ops.sum(x, axis=-1), (4, 64, 512)))
    apply_default_schedule(sch, CUDA)
    binds = [i.inputs[1] for i in sch.trace.insts if i.kind == "bind"]
    assert binds == ["blockIdx.x", "threadIdx.x"]
    assert [i.kind for i in sch.trace.insts].count("fuse") == 1


def test_short_or_strided_reductions_stay_per_thread():
    for fn, shape in [(lambda x: ops.sum(x, axis=0), (512, 64)), (lambda x: ops.sum(x, axis=1), (256, 16))]:
        ptx = compile_to_ptx(default_schedule(graph(fn, shape), CUDA))
        assert not any(".shared" in t for t in ptx.values())


def test_reduction_loop_to_blockidx_is_refused():
    sch = mlc.Schedule(graph(lambda x: ops.sum(x, axis=1), (128, 1024)))
    i, k = sch.get_loops(sch.get_block("sum"))
    _, k1 = sch.split(k, [None, 256])
    with pytest.raises(ScheduleError, match="only its innermost loop can be bound, to a threadIdx"):
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
