"""pad_einsum and the padded default schedules of matmul / dense / batch_matmul: numerics vs
numpy on odd and prime shapes, the trace replays and serializes, the exported transform script
applies in upstream mlir-opt with the same result, errors name the primitive."""

import os

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.errors import ScheduleError
from mlc_mlir.schedule.cpu_recipes import goto_padding, schedule_matmul_goto, split_tile, tile_width
from mlc_mlir.schedule.default_rules import apply_default_schedule
from mlc_mlir.target import Target, missing_host_features
from targets import AVX2
from mlir_opt_replay import applied_in_mlir_opt

TOL = dict(rtol=1e-4, atol=1e-4)


def build(kind, shapes, seed=0):
    """(module, inputs, numpy reference) of a matmul, dense+bias+relu or batch_matmul."""
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        args = [f.arg(f"a{i}", shape=s) for i, s in enumerate(shapes)]
        if kind == "matmul":
            f.output(ops.matmul(*args))
            ref = xs[0].astype(np.float64) @ xs[1]
        elif kind == "dense":
            f.output(ops.relu(ops.dense(*args)))
            ref = np.maximum(xs[0].astype(np.float64) @ xs[1].T + xs[2], 0)
        else:
            f.output(ops.batch_matmul(*args))
            ref = xs[0].astype(np.float64) @ xs[1]
    return bb.finish(), xs, ref


def default_schedule(mod, threads):
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, AVX2, threads)
    return sch


def assert_replays(sch, mod):
    t2 = mlc.Trace.from_json(sch.trace.as_json())
    assert t2 == sch.trace
    replayed = mlc.Schedule.from_trace(mod, t2)
    assert str(replayed.as_transform_script()) == str(sch.trace.as_transform_script())
    assert str(replayed.mod) == str(sch.mod)


@pytest.mark.parametrize("m, k, n, threads", [(97, 53, 61, 2), (97, 53, 61, 1), (5, 3, 7, 2),
                                              (1, 19, 33, 2), (60, 201, 45, 2)])
def test_matmul_odd_shapes_default_schedule(m, k, n, threads):
    mod, xs, ref = build("matmul", [(m, k), (k, n)])
    sch = default_schedule(mod, threads)
    kinds = [i.kind for i in sch.trace.insts]
    # M and N that no register tile divides get edge tiles (no padded copies); only K pads
    assert ("pad_einsum" in kinds) == (goto_padding(AVX2, m, n, k, threads)[2] > 1)
    np.testing.assert_allclose(mlc.compile(sch.mod)(*xs), ref, **TOL)
    assert_replays(sch, mod)


@pytest.mark.parametrize("threads", [1, 2])
def test_padded_result_is_copied_out_without_memref_copy(tmp_path, threads):
    """A batch_matmul whose N is padded (23 -> a multiple of NR) returns the leading 23 columns
    of its padded result: the lower stage copies them out with a strided-copy kernel
    (``strided_copies_to_loops``; serial here: 10 KB is below two L1d's worth), not the
    runtime's element-by-element ``memrefCopy``; the result as numpy's."""
    mod, xs, ref = build("batch_matmul", [(3, 37, 29), (3, 29, 23)])
    exe = mlc.compile(mod, threads=threads, dump_ir=str(tmp_path))
    lowered = open(os.path.join(tmp_path, "07-lower.mlir")).read()
    assert "llvm.call @mlc_strided_copy_3d_f32(" in lowered
    assert "memrefCopy" not in open(os.path.join(tmp_path, "09-llvm.ll")).read()
    np.testing.assert_allclose(exe(*xs), ref, **TOL)


def test_goto_padding_decisions():
    # 1023 = 3 * 11 * 31: N pads to 1024 instead of an 11-wide register tile; 999 keeps KC = 333
    assert goto_padding(AVX2, 1000, 1023, 999, 2) == (1, 16, 1)
    # a prime K pads to the unroll factor, M to threads * MR
    assert goto_padding(AVX2, 97, 61, 53, 2) == (8, 16, 56)
    assert goto_padding(AVX2, 97, 61, 53, 1) == (4, 16, 56)
    # divisible shapes and GEMVs are left alone
    for shape in [(128, 128, 784), (512, 512, 512), (1, 1000, 512), (32, 48, 40)]:
        assert goto_padding(AVX2, *shape, 2) == (1, 1, 1)
    # N pads when the divisor tile would waste more: 23 -> 32 (a 1-wide tile otherwise)
    assert goto_padding(AVX2, 37, 23, 50, 2) == (8, 16, 1)
    # 300 has no power-of-two divisor of a whole vector: a 30-wide tile would be split into
    # unequal registers (tile_width), so N pads to 304; 48 keeps a 16-wide tile
    assert goto_padding(AVX2, 64, 300, 900, 1) == (1, 16, 1)
    assert goto_padding(AVX2, 64, 48, 900, 1) == (1, 1, 1)


def test_tile_width_is_a_power_of_two_dividing_n():
    for n in (1, 7, 24, 30, 48, 300, 320, 1023, 1024):
        for nr in (8, 16, 32, 48):
            w = tile_width(n, nr)
            assert n % w == 0 and w <= nr and w & (w - 1) == 0
            assert not (n % (2 * w) == 0 and 2 * w <= nr)   # the largest such
    # threads split a GEMV-like output by each thread's tile; larger ones keep N's tile
    assert split_tile(1, 1000, 2, 8, 32) == 4 and split_tile(1, 1000, 1, 8, 32) == 8
    assert split_tile(777, 1056, 2, 8, 32) == 32


@pytest.mark.parametrize("threads", [1, 2])
def test_dense_gemv_threads_match_numpy(threads):
    """A 1 x 1000 dense (M below the register tile's rows) on both threads: 2 x 500 columns of
    4-wide tiles (split_tile), the result as numpy's."""
    mod, xs, ref = build("dense", [(1, 64), (1000, 64), (1000,)])
    sch = default_schedule(mod, threads)
    assert ("parallel" in [i.kind for i in sch.trace.insts]) == (threads == 2)
    np.testing.assert_allclose(mlc.compile(sch.mod)(*xs), ref, **TOL)


@pytest.mark.parametrize("m, k, n", [(37, 50, 23), (128, 784, 128), (64, 900, 300)])
def test_dense_bias_relu(m, k, n):
    mod, xs, ref = build("dense", [(m, k), (n, k), (n,)])
    sch = default_schedule(mod, 2)
    kinds = [i.kind for i in sch.trace.insts]
    # a dense whose transposed B would end in a partial panel is padded and keeps its epilogue
    # apart; a divisible one fuses it into the tiles
    assert ("pad_einsum" in kinds) == ((m, k, n) != (128, 784, 128))
    assert ("reverse_compute_at" in kinds) == ((m, k, n) == (128, 784, 128))
    np.testing.assert_allclose(mlc.compile(sch.mod)(*xs), ref, **TOL)
    assert_replays(sch, mod)


@pytest.mark.parametrize("b, m, k, n", [(3, 37, 29, 23), (1, 13, 7, 5), (2, 16, 12, 32)])
def test_batch_matmul_odd_shapes(b, m, k, n):
    mod, xs, ref = build("batch_matmul", [(b, m, k), (b, k, n)])
    sch = default_schedule(mod, 2)
    np.testing.assert_allclose(mlc.compile(sch.mod)(*xs), ref, **TOL)
    assert_replays(sch, mod)


@pytest.mark.parametrize("b, m, k, n, threads", [(16, 49, 64, 32, 2), (6, 49, 16, 48, 2), (3, 13, 8, 16, 2),
                                                (16, 49, 64, 32, 1)])
def test_padded_batch_matmul_pads_each_threads_slice(b, m, k, n, threads):
    """A batch_matmul whose rows are padded (49 -> a multiple of MR, ResNet-50's 14x14 Winograd
    GEMMs) with the batches over the threads: each thread pads its own batches of A inside the
    ``scf.forall`` (no serial copy of all of A before the threads fork); the result as numpy's,
    also where the batches do not split evenly over the threads' count (3 batches: one thread)."""
    mod, xs, ref = build("batch_matmul", [(b, m, k), (b, k, n)])
    sch = default_schedule(mod, threads)
    text = str(sch.mod)
    forall = text.find("scf.forall")
    pad = text.find("tensor.pad %arg0")
    if forall >= 0 and m % 4:
        assert pad < 0 and "tensor.pad %extracted_slice" in text[forall:]
    np.testing.assert_allclose(mlc.compile(sch.mod)(*xs), ref, **TOL)
    assert_replays(sch, mod)


def test_pad_einsum_by_hand_exports_to_mlir_opt(tmp_path):
    """The padded Goto recipe: trace text, JSON round trip, replay, and the exported script in
    upstream mlir-opt gives the IR of ``sch.mod``."""
    mod, xs, ref = build("matmul", [(45, 30, ), (30, 21)])
    sch = mlc.Schedule(mod)
    blk = sch.get_block("matmul")
    sch.pad_einsum(blk, [8, 16, 4])
    assert [d.extent for d in sch.get(blk).dims] == [48, 32, 32]
    schedule_matmul_goto(sch, blk, threads=2, target=AVX2)
    assert "sch.pad_einsum(b0, [8, 16, 4])" in str(sch.trace)
    script = str(sch.transform_script())
    assert "transform.structured.pad" in script and "pad_to_multiple_of [8, 16, 4]" in script
    np.testing.assert_allclose(mlc.compile(sch.mod)(*xs), ref, **TOL)
    assert_replays(sch, mod)
    assert applied_in_mlir_opt(mod, sch, tmp_path) == str(sch.mod).strip()


def test_pad_einsum_that_changes_nothing_emits_nothing():
    mod, xs, ref = build("matmul", [(16, 8), (8, 32)])
    sch = mlc.Schedule(mod)
    blk = sch.get_block("matmul")
    sch.pad_einsum(blk, [4, 16, 1])
    assert "structured.pad" not in str(sch.transform_script())
    np.testing.assert_allclose(mlc.compile(sch.mod)(*xs), ref, **TOL)


def test_pad_einsum_errors():
    mod, _, _ = build("matmul", [(10, 6), (6, 12)])
    sch = mlc.Schedule(mod)
    blk = sch.get_block("matmul")
    with pytest.raises(ScheduleError, match="pad_einsum: argument 'padding'.*3 ints"):
        sch.pad_einsum(blk, [8, 16])
    with pytest.raises(ScheduleError, match="pad_einsum: argument 'padding' is 0"):
        sch.pad_einsum(blk, [8, 16, 0])
    i, j, k = sch.get_loops(blk)
    sch.split(i, [2, 5])
    with pytest.raises(ScheduleError, match="pad_einsum: block 'matmul' already has loop"):
        sch.pad_einsum(blk, [8, 16, 4])
    sch = mlc.Schedule(mod)
    blk = sch.get_block("matmul")
    sch.pad_einsum(blk, [8, 16, 4])
    with pytest.raises(ScheduleError, match="already padded"):
        sch.pad_einsum(blk, [8, 16, 4])
    # a max reduction cannot be padded with zeros
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.max(f.arg("x", shape=(6, 7)), axis=1))
    red = bb.finish()
    sch = mlc.Schedule(red)
    names = sorted(k[1] for k, info in sch.model.ops.items() if info.op_name != "linalg.fill")
    blk = sch.get_block(names[0])
    with pytest.raises(ScheduleError, match="cannot be padded with zeros"):
        sch.pad_einsum(blk, [1, 8])
    with pytest.raises(ScheduleError, match="trace: instruction 1 .*pad_einsum"):
        t = mlc.Schedule(mod)
        b = t.get_block("matmul")
        t.pad_einsum(b, [8, 16, 4])
        t.trace.insts[1].inputs[1] = [8, 16]
        mlc.Schedule.from_trace(mod, t.trace)


def test_dense_packs_b_transposed_and_exports_to_mlir_opt(tmp_path):
    """dense's B is (N, K): its panels are packed as (K, NR) (``hoist_pad ... transpose``), so
    the register tile reads whole packed rows (no strided column gather), and the script still
    applies in upstream mlir-opt with the result of ``sch.mod``."""
    mod, xs, ref = build("dense", [(32, 40), (48, 40), (48,)])
    sch = default_schedule(mod, 1)
    script = str(sch.transform_script())
    assert "transpose by [1, 0]" in script
    payload = str(sch.mod)
    assert "linalg.transpose" not in payload and "vector<16x1xf32>" not in payload
    np.testing.assert_allclose(mlc.compile(sch.mod)(*xs), ref, **TOL)
    assert_replays(sch, mod)
    assert applied_in_mlir_opt(mod, sch, tmp_path) == payload.strip()


SSE2 = Target("cpu", cpu="x86-64", features=("sse2",), vector_bits=128, vector_registers=16,
              l1d_bytes=32 << 10, l2_bytes=512 << 10, cores=2)


@pytest.mark.parametrize("target, avx2", [(AVX2, True), (SSE2, False)])
def test_dense_packing_transposes_whole_8x8_blocks(target, avx2, tmp_path):
    """A KC that 8 does not divide (K = 450 in one KC block) still packs dense's B in 8 x 8
    transposes, each reading its block of B's rows (no KC-wide copy of each row first): the
    loop over K blocks is peeled (``loop.peel``) and ends in one 2 x 8 block, not the whole
    panel cut into 2 x 2 blocks; on an AVX2 target the rule annotates the block so that the
    transposes take MLIR's AVX2 lowering, elsewhere the generic one. The result matches
    numpy, the trace replays, and the script applies in upstream mlir-opt."""
    mod, xs, ref = build("dense", [(32, 450), (48, 450), (48,)])
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, target, 1)
    script = str(sch.transform_script())
    assert "transform.loop.peel" in script
    assert ("avx2_lowering_strategy = true" in script) == avx2
    payload = str(sch.mod)
    assert "vector<8x8xf32>" in payload and "vector<2x8xf32>" in payload
    assert "vector<2x2xf32>" not in payload and "vector<1x450xf32>" not in payload
    assert ("llvm.inline_asm" in payload) == avx2   # the AVX2 patterns' vblendps
    if not missing_host_features(target.features):
        np.testing.assert_allclose(mlc.compile(sch.mod, target=target)(*xs), ref, **TOL)
    assert_replays(sch, mod)
    assert applied_in_mlir_opt(mod, sch, tmp_path) == payload.strip()


@pytest.mark.parametrize("threads, multiple, parallel_dim", [(2, 32, 1), (1, 16, None)])
def test_dense_pads_n_for_a_split_over_the_threads(threads, multiple, parallel_dim):
    """A dense with more columns than rows whose N is padded (300 is no multiple of NR = 16)
    pads N to a multiple of threads x NR, so the threads split N (each pads and packs its own
    columns of B) instead of M (each would pack all of B after a serial padded copy); one
    thread pads to NR. The result matches numpy and the trace replays."""
    mod, xs, ref = build("dense", [(64, 90), (300, 90), (300,)])
    sch = default_schedule(mod, threads)
    assert [i.inputs[1] for i in sch.trace.insts if i.kind == "pad_einsum"] == [[1, multiple, 1]]
    dims = {lp.dim for b in sch.model.blocks if b.info.num_inputs == 2 and len(b.dims) == 3
            for lp in b.loops if lp.kind == "parallel"}
    assert dims == ({parallel_dim} if parallel_dim is not None else set())
    np.testing.assert_allclose(mlc.compile(sch.mod)(*xs), ref, **TOL)
    assert_replays(sch, mod)
