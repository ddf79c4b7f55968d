"""Vectorized elementwise kernels (``target="cuda"``): the default GPU schedule gives each thread a
16-byte vector where the innermost dim allows it (``vector_lanes``), which the CUDA lowering
turns into ``ld.global.v4`` / ``st.global.v4`` (:mod:`mlc_mlir.pipeline.cuda_vectors`); odd
extents and strided inputs stay scalar, broadcast inputs are one scalar load. CI checks the PTX
(``ptxas -arch=sm_90``); on a GPU, numerics against numpy."""

import itertools
import math
import re
import shutil

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.pipeline.cuda import check_ptx, compile_to_ptx
from mlc_mlir.pipeline.ptx_facts import ptxas_usage
from mlc_mlir.runtime import as_device_array
from mlc_mlir.runtime.cuda import cuda_available
from mlc_mlir.schedule.default_rules import apply_default_schedule, default_schedule
from mlc_mlir.schedule.rules.gpu_rules import VECTOR_STEPS, vector_lanes
from mlc_mlir.target import Target

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA driver/GPU")
CUDA = Target("cuda", cpu="generic", arch="sm_90")


def graph(fn, *shapes, dtype="float32"):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(fn(*[f.arg(f"x{i}", shape=s, dtype=dtype) for i, s in enumerate(shapes)]))
    return bb.finish()


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _transpose_add(a, b):
    return ops.add(ops.transpose(a, (1, 0)), b)


#: name -> (graph fn, input shapes, numpy reference, dtype)
CASES = {
    "add_1d": (ops.add, [(1 << 16,), (1 << 16,)], np.add, "float32"),
    "add_f16": (ops.add, [(1 << 16,), (1 << 16,)], np.add, "float16"),
    "relu": (ops.relu, [(256, 1024)], lambda x: np.maximum(x, 0), "float32"),
    "gelu": (ops.gelu, [(512, 1024)], _gelu_tanh, "float32"),
    "row_broadcast": (ops.add, [(64, 1024), (1024,)], np.add, "float32"),
    "column_broadcast": (ops.add, [(64, 1024), (64, 1)], np.add, "float32"),
    "scalar_broadcast": (ops.add, [(64, 1024), (1,)], np.add, "float32"),
    "odd_rows": (ops.add, [(63, 999), (63, 999)], np.add, "float32"),
    "odd_1d": (ops.add, [(3 * 5 * 7 * 11 * 13,), (3 * 5 * 7 * 11 * 13,)], np.add, "float32"),
    "prime_1d": (ops.add, [(1000003,), (1000003,)], np.add, "float32"),
    "ragged_rows": (ops.add, [(16, 50257), (50257,)], np.add, "float32"),   # 50257 = 29 * 1733
    "gather": (lambda t: ops.take(t, np.array([3, 0, 7, 3], np.int64), axis=0), [(8, 1024)],
               lambda t: t[[3, 0, 7, 3]], "float32"),
    "compare": (ops.greater, [(64, 1024), (64, 1024)], np.greater, "float32"),
    "transposed_input": (_transpose_add, [(256, 512), (512, 256)],
                         lambda a, b: a.T + b, "float32"),
}


def _ptx(name):
    fn, shapes, _, dtype = CASES[name]
    ptx = compile_to_ptx(default_schedule(graph(fn, *shapes, dtype=dtype), CUDA))
    for text in ptx.values():
        check_ptx(text, arch="sm_90")
    return "\n".join(ptx.values())


def _global(ptx):
    """``(vector loads, scalar loads, vector stores, scalar stores)`` to global memory."""
    return (len(re.findall(r"ld\.global\.v\d\.", ptx)), len(re.findall(r"ld\.global\.(?:b|f|u|s)\d+", ptx)),
            len(re.findall(r"st\.global\.v\d\.", ptx)), len(re.findall(r"st\.global\.(?:b|f|u|s)\d+", ptx)))


@needs_ptxas
@pytest.mark.parametrize("name", ["add_1d", "add_f16", "relu", "gelu", "row_broadcast"])
def test_divisible_rows_use_128_bit_accesses(name):
    n_in = len(CASES[name][1])
    ptx = _ptx(name)
    assert _global(ptx) == (n_in, 0, 1, 0)
    assert len(re.findall(r"ld\.global\.v4\.b32", ptx)) == n_in   # 16 bytes each


@needs_ptxas
@pytest.mark.parametrize("name", ["column_broadcast", "scalar_broadcast"])
def test_broadcast_input_is_one_scalar_load(name):
    # the broadcast operand has stride 0 along the vector: one scalar splat over the lanes
    assert _global(_ptx(name)) == (1, 1, 1, 0)


@needs_ptxas
@pytest.mark.parametrize("name", ["odd_rows", "odd_1d"])
def test_odd_extents_stay_scalar(name):
    assert _global(_ptx(name)) == (0, 2, 0, 1)


@needs_ptxas
@pytest.mark.parametrize("name", ["prime_1d", "ragged_rows"])
def test_ragged_rows_take_full_blocks_and_a_guarded_tail(name):
    """No divisor of the row gives a warp of threads: blocks of 256 threads, the last one
    partial (its threads past the row's end skip the body), not blocks of 29 or 1 threads."""
    ptx = _ptx(name)
    assert ".maxntid 256, 1, 1" in ptx
    assert re.search(r"setp\.\w+\.u64\s+%p\d+", ptx) and re.search(r"@%p\d+ bra", ptx)
    assert _global(ptx) == (0, 2, 0, 1)


@needs_ptxas
def test_transposed_input_is_not_vectorized_but_its_consumer_is():
    ptx = _ptx("transposed_input")
    assert "ld.global.v4" in ptx and "st.global.v4" in ptx   # the add reads a contiguous copy
    assert re.search(r"ld\.global\.b32", ptx)                 # the transpose kernel: scalar


@needs_ptxas
def test_vector_kernels_do_not_spill():
    for text in compile_to_ptx(default_schedule(graph(ops.gelu, (512, 1024)), CUDA)).values():
        use = ptxas_usage(text)
        assert (use.spill_stores, use.spill_loads) == (0, 0), use


def _infos(mod):
    return list(mlc.Schedule(mod).model.ops.values())


def test_vector_lanes_follow_the_element_width_and_the_inputs():
    def lanes(fn, *shapes, dtype="float32"):
        (info,) = _infos(graph(fn, *shapes, dtype=dtype))
        return vector_lanes(CUDA.cuda_arch, info, len(info.dims) - 1)

    assert lanes(ops.add, (4096,), (4096,)) == [4, 2, 1]
    assert lanes(ops.add, (4096,), (4096,), dtype="float16") == [8, 4, 2, 1]
    assert lanes(ops.add, (64, 1026), (64, 1026)) == [2, 1]         # 1026 = 2 * 513
    assert lanes(ops.add, (64, 999), (64, 999)) == [1]
    assert lanes(ops.add, (64, 64), (64, 64)) == [2, 1]             # a warp of threads per row
    assert lanes(ops.add, (64, 1024), (64, 1)) == [4, 2, 1]         # broadcast input
    assert lanes(ops.greater, (64, 1024), (64, 1024)) == [4, 2, 1]  # f32 in, a byte out
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:   # an i1 input: a vector of i1 is bit-packed in memory
        f.output(ops.where(f.arg("c", shape=(64, 1024), dtype="bool"),
                           f.arg("a", shape=(64, 1024)), f.arg("b", shape=(64, 1024))))
    (info,) = _infos(bb.finish())
    assert vector_lanes(CUDA.cuda_arch, info, 1) == [1]


@needs_ptxas
def test_gather_keeps_one_lane():
    """ops.take reads its table in the body (tensor.extract), which the maps do not describe."""
    (info,) = [i for i in _infos(graph(CASES["gather"][0], (8, 1024))) if i.gathers]
    assert vector_lanes(CUDA.cuda_arch, info, len(info.dims) - 1) == [1]
    _ptx("gather")


def test_strided_input_keeps_one_lane():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a = f.arg("a", shape=(512, 512))
        f.output(ops.add(a, ops.transpose(a, (1, 0))))
    infos = _infos(bb.finish())
    # after fusion (or not) some op reads an input along a non-contiguous dim: one lane there
    strided = [i for i in infos if any(len(u) == 2 and u[-1] != 1 for u in i.operand_dims[:i.num_inputs])]
    assert strided
    for info in strided:
        assert vector_lanes(CUDA.cuda_arch, info, 1) == [1]


@needs_ptxas
def test_scalar_kernel_stays_reachable_as_a_decision():
    """The vector width is a sampled decision: replaying the default trace with one lane gives
    the scalar kernel."""
    mod = graph(ops.add, (1 << 16,), (1 << 16,))
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, CUDA)
    (i,) = [i for i, inst in enumerate(sch.trace.insts) if inst.kind == "sample_categorical"
            and inst.attrs["candidates"] == [4, 2, 1]]
    scalar = mlc.Schedule.from_trace(mod, sch.trace, decisions={i: 2})
    ptx = "\n".join(compile_to_ptx(scalar.mod).values())
    check_ptx(ptx)
    assert _global(ptx) == (0, 2, 0, 1)


def _with_decisions(mod, choices):
    """The default CUDA schedule of ``mod`` replayed with the decision over each candidate list
    of ``choices`` (``{tuple of candidates: value}``) set to ``value``."""
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, CUDA)
    decisions = {}
    for candidates, value in choices.items():
        (i,) = [i for i, inst in enumerate(sch.trace.insts) if inst.kind == "sample_categorical"
                and inst.attrs["candidates"] == list(candidates)]
        decisions[i] = list(candidates).index(value)
    return mlc.Schedule.from_trace(mod, sch.trace, decisions=decisions)


@needs_ptxas
def test_vectors_per_thread_form_a_block_strided_loop_without_barriers():
    """Four vectors per thread: in each step the block's 256 threads take adjacent 16-byte
    vectors (the next step 256 * 16 bytes further), no barrier between the steps."""
    sch = _with_decisions(graph(ops.add, (1 << 16,), (1 << 16,)), {VECTOR_STEPS: 4})
    ptx = "\n".join(compile_to_ptx(sch.mod).values())
    check_ptx(ptx)
    assert _global(ptx) == (8, 0, 4, 0)
    assert "bar.sync" not in ptx
    steps = sorted(int(m) for m in re.findall(r"st\.global\.v4\.b32\s+\[%rd\d+\+(\d+)\]", ptx))
    assert steps == [4096, 8192, 12288]


def test_vector_of_a_partial_tile_is_refused():
    sch = mlc.Schedule(graph(ops.relu, (999,)))
    (i,) = sch.get_loops(sch.get_block("relu"))
    i0, i1, i2 = sch.split(i, [None, 64, 4])
    sch.bind(i0, "blockIdx.x")
    sch.bind(i1, "threadIdx.x")
    sch.vectorize(i2)
    with pytest.raises(mlc.ScheduleError, match="partial tiles.*divide the extent"):
        sch.mod


class _Misaligned:
    __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": ((1 << 20) + 4, False),
                                "version": 3, "strides": None}


def test_misaligned_device_array_is_refused():
    with pytest.raises(mlc.ExecutionError, match=r"0x100004.*multiple of 16 bytes"):
        as_device_array(_Misaligned())


@needs_gpu
@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_elementwise_numerics(name):
    fn, shapes, ref, dtype = CASES[name]
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(dtype) for s in shapes]
    out = mlc.compile(graph(fn, *shapes, dtype=dtype), target="cuda")(*args)
    tol = 1e-3 if dtype == "float16" else 1e-5
    np.testing.assert_allclose(out.astype(np.float32), ref(*args).astype(np.float32),
                               rtol=tol, atol=tol)


#: (lanes, vectors per thread) of a broadcast add (16, 32768) + (32768,): other points of the space
DECISIONS = [(1, 1), (4, 1), (4, 4), (2, 8)]
SHAPES = [(16, 32768), (32768,)]


def _decided_add(lanes, steps):
    return _with_decisions(graph(ops.add, *SHAPES), {(4, 2, 1): lanes, VECTOR_STEPS: steps})


@pytest.mark.parametrize("shape", [(1 << 26,), (16, 32768), (64, 4096), (63, 1000), (3, 4096 * 3)])
def test_every_candidate_combination_splits_the_row_whole(shape):
    """Threads, steps and lanes are sampled independently: every combination of their
    candidates must divide the row (a partial tile has no vector: a failed candidate)."""
    sch = mlc.Schedule(graph(ops.relu, shape))
    apply_default_schedule(sch, CUDA)
    cands = [inst.attrs["candidates"] for inst in sch.trace.insts if inst.kind == "sample_categorical"]
    assert len(cands) in (1, 2, 3)
    for combo in itertools.product(*cands):
        assert shape[-1] % math.prod(combo) == 0, (shape, combo)


@needs_ptxas
@pytest.mark.parametrize("lanes,steps", DECISIONS)
def test_decisions_lower_to_clean_ptx(lanes, steps):
    ptx = "\n".join(compile_to_ptx(_decided_add(lanes, steps).mod).values())
    check_ptx(ptx)
    vector = lanes > 1
    assert _global(ptx) == ((2 * steps, 0, steps, 0) if vector else (0, 2 * steps, 0, steps))


@needs_gpu
@pytest.mark.parametrize("lanes,steps", DECISIONS)
def test_cuda_elementwise_decisions_numerics(lanes, steps):
    """Other points of the rule's space (scalar, block-strided vectors) against numpy."""
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(s).astype("float32") for s in SHAPES)
    out = mlc.compile(_decided_add(lanes, steps).mod, target="cuda")(a, b)
    np.testing.assert_array_equal(out, a + b)


@needs_gpu
def test_cuda_elementwise_on_device_refuses_a_misaligned_slice():
    torch = pytest.importorskip("torch")
    exe = mlc.compile(graph(ops.add, (1024,), (1024,)), target="cuda")
    x = torch.arange(1025, dtype=torch.float32, device="cuda")
    with pytest.raises(mlc.ExecutionError, match="multiple of 16 bytes"):
        exe.on_device(x[1:], x[1:])
    got = exe.on_device(x[:1024], x[:1024]).numpy()
    np.testing.assert_array_equal(got, 2 * np.arange(1024, dtype=np.float32))
