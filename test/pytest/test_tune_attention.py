"""The fused attention kernel's knobs (key block, query rows per step, decode prefetch,
threads, exponential, register transposes) are decisions of the tuner: an attention of a model
is a task, every knob set emits a kernel that matches numpy at odd lengths (and keeps a NaN row
NaN), the short exponential matches numpy, a record's knobs round-trip through the trace and
are replayed by ``compile(database=)`` (and the result matches PyTorch), ties keep the
default."""

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import mlc_mlir as mlc  # noqa: E402
from mlc_mlir.schedule.rules.attention_knobs import (AttentionKnobs, decided_knobs, default_knobs,  # noqa: E402
                                                     knob_candidates)
from mlc_mlir.target import host_target  # noqa: E402
from mlc_mlir.tune import MeasureResult, TuningRecord  # noqa: E402
from mlc_mlir.tune.attention_task import extract_attention_tasks, kernel_module  # noqa: E402


class _SDPA(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _sdpa(qs=(1, 2, 37, 32), ks=(1, 2, 45, 32)):
    g = torch.Generator().manual_seed(0)
    args = tuple(torch.randn(s, generator=g) for s in (qs, ks, ks)) + \
        (torch.randn(1, 1, qs[2], ks[2], generator=g),)
    return mlc.from_torch(_SDPA(), args), args


@pytest.fixture(scope="module")
def sdpa_task():
    """``(mod, args, task)``: ``_sdpa()``'s module and inputs and its one attention task
    (``extract_attention_tasks`` emits every candidate kernel: seconds), imported and
    extracted once for the tests that read them (none changes them)."""
    mod, args = _sdpa()
    task, = extract_attention_tasks(mod, host_target())    # exactly one attention task
    return mod, args, task


def _numpy_attention(q, k, v, bias, scale):
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = scale * q.astype(np.float64) @ k.transpose(0, 1, 3, 2) + bias
    m = s.max(-1, keepdims=True)
    p = np.exp(s - np.where(np.isinf(m), 0, m))
    total = p.sum(-1, keepdims=True)
    return (p / np.where(total == 0, 1, total)) @ v


KNOBS = [(4, 3, 0, 1), (8, 2, 2, 2), (4, 4, 1, 2), (8, 1, 4, 1), (16, 1, 0, 2),
         # (key block, row vectors, prefetch, threads, exp degree, transpose)
         (16, 1, 1, 2, 6, 1), (4, 3, 0, 1, 6, 1), (8, 2, 2, 2, 0, 1), (8, 1, 4, 1, 6, 0)]
SHAPES = [  # q (B, H, Sq, D), k (B, Hkv, Skv, D)
    ((1, 2, 37, 32), (1, 2, 45, 32)),     # odd lengths: a tail of row blocks and of key blocks
    ((2, 4, 1, 64), (2, 2, 53, 64)),      # one query row (decode), grouped-query heads
    ((1, 2, 70, 16), (1, 2, 19, 16)),
]


@pytest.mark.parametrize("knobs", KNOBS)
@pytest.mark.parametrize("qs,ks", SHAPES)
def test_every_knob_set_matches_numpy(qs, ks, knobs):
    tgt = host_target()
    rng = np.random.default_rng(1)
    q = rng.standard_normal(qs, dtype=np.float32)
    k, v = (rng.standard_normal(ks, dtype=np.float32) for _ in range(2))
    bias = rng.standard_normal((1, qs[1], qs[2], ks[2])).astype(np.float32)
    if qs[2] > 3:
        bias[..., 3, :] = -np.inf     # a row with no key: 0, as torch's safe softmax
    types = [f"tensor<{'x'.join(map(str, s))}xf32>" for s in (qs, ks, ks, bias.shape)]
    knobs = AttentionKnobs(*knobs)
    assert knobs in knob_candidates(tgt, qs[3]) or knobs.key_block * knobs.row_vectors + knobs.row_vectors + 1 > \
        tgt.vector_registers, "a point of the space"
    exe = mlc.compile(kernel_module(types, 0.3, tgt, knobs))
    got = exe(q, k, v, bias)
    want = _numpy_attention(q, k, v, bias, 0.3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("knobs", [(16, 1, 0, 1, 0, 0), (8, 2, 0, 1, 6, 1)])
def test_a_nan_score_gives_a_nan_row_and_leaves_the_others(knobs):
    """A NaN in one query row: that row's output is NaN (as torch's), every other row matches
    numpy (the row maximum may leave a NaN score out; its exponential keeps the NaN)."""
    tgt = host_target()
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, 2, 48, 32), dtype=np.float32) for _ in range(3))
    q[0, 1, 5, 7] = np.nan
    exe = mlc.compile(kernel_module(["tensor<1x2x48x32xf32>"] * 3, 0.3, tgt, AttentionKnobs(*knobs)))
    got = exe(q, k, v)
    assert np.isnan(got[0, 1, 5]).all()
    got[0, 1, 5] = 0
    want = _numpy_attention(q, k, v, 0.0, 0.3)
    want[0, 1, 5] = 0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_the_space_holds_the_exp2_form_and_the_register_transposes():
    """Every knob set with the short exponential or the register transposes is a candidate
    of a head dim the lanes divide, and only the element-wise staging where they do not."""
    tgt = host_target()
    lanes = tgt.vector_lanes(32)
    cands = knob_candidates(tgt, 4 * lanes)
    assert {(c.exp_degree, c.transpose) for c in cands} == {(0, 0), (0, 1), (6, 0), (6, 1)}
    assert {c.transpose for c in knob_candidates(tgt, lanes + 1)} == {0}
    with pytest.raises(mlc.ScheduleError, match="transpose"):
        kernel_module(["tensor<1x1x8x" + str(lanes + 1) + "xf32>"] * 3, 1.0, tgt,
                      AttentionKnobs(4, 1, 0, 1, 0, 1))


def test_shifted_exp_matches_numpy_on_non_positive_arguments():
    """The short form of ``exp(x - shift)`` against float64 numpy: 2e-7 relative where the
    result is a normal float above 2^-125, within 2^-125 below, 0 for ``-inf``, NaN for NaN."""
    from mlc_mlir._mlir import arith_d, func_d, ir, tensor_d, vector_d
    from mlc_mlir.ir.context import new_context
    from mlc_mlir.schedule.rules.softmax_exp import shifted_exp

    x = np.concatenate([-np.geomspace(1e-8, 200, 4000), [0.0, -0.0, -np.inf, np.nan, -87.0, -88.5]])
    x = x.astype(np.float32)
    shift = np.float32(3.25)
    ctx = new_context()
    with ctx, ir.Location.unknown():
        m = ir.Module.create()
        vt = ir.VectorType.get([len(x)], ir.F32Type.get())
        tt = ir.RankedTensorType.get([len(x)], ir.F32Type.get())
        with ir.InsertionPoint(m.body):
            @func_d.FuncOp.from_py_func(tt, name="main")
            def main(a):
                zero = arith_d.ConstantOp(ir.IndexType.get(), 0).result
                pad = arith_d.ConstantOp(ir.F32Type.get(), 0.0).result
                sh = vector_d.broadcast(vt, arith_d.ConstantOp(ir.F32Type.get(), float(shift)).result)
                v = vector_d.transfer_read(vt, a, [zero], ir.AffineMapAttr.get(ir.AffineMap.get_identity(1)), pad,
                                           ir.ArrayAttr.get([ir.BoolAttr.get(True)]))
                e = shifted_exp(arith_d.addf(v, sh), sh, 6)
                return vector_d.transfer_write(tt, e, tensor_d.EmptyOp([len(x)], ir.F32Type.get()).result, [zero],
                                               ir.AffineMapAttr.get(ir.AffineMap.get_identity(1)),
                                               ir.ArrayAttr.get([ir.BoolAttr.get(True)]))
    got = mlc.compile(mlc.Module(m, ctx).verify())(x)
    want = np.exp(((x + shift) - shift).astype(np.float64))   # the f32 rounding of x - shift
    normal = want > 2.0 ** -125
    np.testing.assert_allclose(got[normal], want[normal], rtol=2e-7)
    tiny = (want <= 2.0 ** -125) & ~np.isnan(want)      # denormal or flushed to 0
    assert np.all(np.abs(got[tiny] - want[tiny]) < 2.0 ** -125) and np.isnan(got[np.isnan(want)]).all()
    assert got[np.isneginf(x)].tolist() == [0.0] and (got[x == 0] == 1).all()


def test_an_attention_is_a_task_and_its_knobs_round_trip(sdpa_task):
    mod, _, task = sdpa_task
    tgt = host_target()
    assert task.task.weight == 1 and task.task.flops == 4.0 * 2 * 37 * 45 * 32
    assert task.default == default_knobs(tgt, 32) and task.candidates[0] == task.default
    assert set(task.candidates) <= set(knob_candidates(tgt, 32))
    texts = [task.module_for(c) for c in task.candidates]
    assert len(set(texts)) == len(texts) > 4, "candidates emit distinct kernels"
    assert decided_knobs(mlc.Trace.from_json(task.trace_for(task.default))) is None
    for c in task.candidates[1:]:
        assert decided_knobs(mlc.Trace.from_json(task.trace_for(c))) == c


class Prefer:
    """An executor whose timings make the attention kernel ``text`` (the candidate whose record
    has trace ``trace``), and the whole model with its record (the model check), take ``ratio``
    of the time of every other candidate (1 ms)."""

    max_workers = 1
    shares_files = False

    def __init__(self, text, trace, ratio):
        self.text, self.trace, self.ratio = text, trace, ratio

    def measure(self, inputs, timeout_s):
        for i, inp in enumerate(inputs):
            fast = inp.module == self.text or any(TuningRecord.from_json(r).trace == self.trace
                                                  for r in inp.records)
            yield i, MeasureResult(((self.ratio if fast else 1.0),) * inp.repeat)

    def close(self):
        pass


def _extracted_once(monkeypatch, mod, task):
    """``tune(mod)`` gets ``[task]`` (what ``extract_attention_tasks(mod)`` returned for the
    fixture) instead of extracting it again (every candidate kernel emitted: seconds)."""
    import mlc_mlir.tune.tuner as tuner
    monkeypatch.setattr(tuner, "extract_attention_tasks",
                        lambda m, tgt: [task] if m is mod else extract_attention_tasks(m, tgt))


def _pick(task):
    """A candidate unlike the default in row vectors and threads."""
    return next(c for c in task.candidates if c.row_vectors == 2 and c.threads == 1)


def test_a_record_is_replayed_by_compile_and_matches_torch(tmp_path, sdpa_task, monkeypatch):
    mod, args, task = sdpa_task
    _extracted_once(monkeypatch, mod, task)
    want = _pick(task)
    db = mlc.tune(mod, trials=len(task.candidates) + 4, work_dir=str(tmp_path / "t"),
                  executor=Prefer(task.module_for(want), task.trace_for(want), 0.5), progress=False)
    assert decided_knobs(mlc.Trace.from_json(db.best(task.task.workload, host_target().key()).trace)) == want
    exe = mlc.compile(mod, database=db, dump_ir=str(tmp_path / "tuned"))
    mlc.compile(mod, dump_ir=str(tmp_path / "default"))
    tuned = (tmp_path / "tuned" / "01-layout.mlir").read_text()
    default = (tmp_path / "default" / "01-layout.mlir").read_text()
    rows = 2 * host_target().vector_lanes(32)
    assert re.search(rf"memref.alloca\(\) : memref<32x{rows}xf32>", tuned) and "scf.forall" not in tuned
    assert not re.search(rf"memref<32x{rows}xf32>", default) and "scf.forall" in default
    with torch.no_grad():
        ref = _SDPA()(*args).numpy()
    np.testing.assert_allclose(exe(*[a.numpy() for a in args]), ref, rtol=1e-5, atol=1e-5)


def test_a_tie_keeps_the_default_knobs(tmp_path, sdpa_task, monkeypatch):
    mod, _, task = sdpa_task
    _extracted_once(monkeypatch, mod, task)
    db = mlc.tune(mod, trials=len(task.candidates) + 4, work_dir=str(tmp_path / "t"),
                  executor=Prefer(task.module_for(_pick(task)), task.trace_for(_pick(task)), 0.99), progress=False)
    assert db.best(task.task.workload, host_target().key()).is_default
