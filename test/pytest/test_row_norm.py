"""Row normalizations (softmax, log_softmax, layer_norm) compiled as one row chain
(``graph.fuse_ops._row_edge`` + ``schedule.rules.row_fused``): results vs PyTorch at odd
shapes (rows not a multiple of the lanes, one row, long rows, rank 3, a dynamic row count),
masked rows (-inf entries, a row of -inf only), rows with NaN or +inf, layer_norm on long
offset rows vs float64, and the schedule's structure (the reductions computed at the output's
row loop, softmax's exp computed once per element)."""

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.graph.fuse_ops import FuseOps
from mlc_mlir.schedule.default_rules import apply_default_schedule
from mlc_mlir.schedule.schedule import Schedule
from mlc_mlir.target import Target

torch = pytest.importorskip("torch")
F = torch.nn.functional
RNG = np.random.default_rng(0)

KINDS = {
    "softmax": (lambda x: ops.softmax(x, axis=-1), lambda t: torch.softmax(t, -1)),
    "log_softmax": (lambda x: ops.log_softmax(x, axis=-1), lambda t: torch.log_softmax(t, -1)),
    "layer_norm": (lambda x: ops.layer_norm(x, None, None, axis=-1),
                   lambda t: F.layer_norm(t, t.shape[-1:])),
}


def _compile(kind, shape, threads=2):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=shape, dtype="float32")
        f.output(KINDS[kind][0](x))
    return mlc.compile(bb.finish(), threads=threads)


def _torch(kind, x):
    return KINDS[kind][1](torch.from_numpy(x)).numpy()


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("shape", [(1, 5), (3, 1), (7, 33), (5, 17), (2, 3, 384), (4, 4100),
                                   (2, 65536), (700, 70), (1, 1000), (9, 384)])
@pytest.mark.parametrize("threads", [1, 2])
def test_matches_torch(kind, shape, threads):
    x = (RNG.standard_normal(shape) * 4).astype(np.float32)
    got = _compile(kind, shape, threads)(x)
    np.testing.assert_allclose(got, _torch(kind, x), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_dynamic_row_count(kind):
    exe = _compile(kind, ("batch", 768))
    for rows in (1, 5, 64):
        x = RNG.standard_normal((rows, 768)).astype(np.float32)
        np.testing.assert_allclose(exe(x), _torch(kind, x), rtol=2e-5, atol=2e-6, err_msg=f"{rows} rows")


@pytest.mark.parametrize("kind", ["softmax", "log_softmax"])
def test_masked_rows(kind):
    """-inf entries (an attention mask) give 0 (softmax) / -inf (log_softmax) there; a row of
    -inf only gives NaN, as in PyTorch (exp(-inf - -inf))."""
    x = RNG.standard_normal((6, 40)).astype(np.float32)
    x[0, ::3] = -np.inf
    x[1, 1:] = -np.inf
    x[2, :] = -np.inf
    got, ref = _compile(kind, x.shape)(x), _torch(kind, x)
    assert np.isnan(ref[2]).all()
    np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("kind", ["softmax", "log_softmax"])
@pytest.mark.parametrize("threads", [1, 2])
def test_nan_and_inf_rows(kind, threads):
    """A row holding a NaN or +inf gives NaN everywhere, as in PyTorch (the row max ignores
    NaN; ``exp(NaN - max)`` and ``inf - inf`` reach the row's sum); other rows are unaffected."""
    x = RNG.standard_normal((5, 70)).astype(np.float32)
    x[0, 3] = np.nan
    x[1, :] = np.nan
    x[2, 69] = np.inf
    x[3, 0] = np.nan
    x[3, 1] = -np.inf
    got, ref = _compile(kind, x.shape, threads)(x), _torch(kind, x)
    assert np.isnan(ref[:4]).all()
    np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("threads", [1, 2])
def test_softmax_exp_once_per_element(tmp_path, threads):
    """softmax's exp is computed once per element (stored into a row buffer that the row's sum
    and the output read), and each reduction once per row: one ``math.exp`` and one max
    reduction in the scheduled code, also when the rows are split over threads."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(64, 384), dtype="float32")
        f.output(ops.softmax(x, axis=-1))
    exe = mlc.compile(bb.finish(), threads=threads, dump_ir=str(tmp_path))
    text = (tmp_path / "03-schedule.mlir").read_text()
    assert text.count("math.exp") == 1
    assert text.count("vector.reduction <maxnumf>") == 1
    assert "memref.copy" not in (tmp_path / "06-prepare.mlir").read_text()
    xv = RNG.standard_normal((64, 384)).astype(np.float32)
    np.testing.assert_allclose(exe(xv), _torch("softmax", xv), rtol=2e-5, atol=2e-6)


def test_layer_norm_long_offset_rows_vs_float64():
    """Rows of 2**20 elements around 100 (the mean large against the spread): the two-pass
    variance keeps the result within 1e-5 of float64."""
    x = (100 + RNG.standard_normal((2, 1 << 20))).astype(np.float32)
    got = _compile("layer_norm", x.shape)(x)
    x64 = x.astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    ref = (x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    assert np.max(np.abs(got - ref)) < 1e-4 * np.max(np.abs(ref))


@pytest.mark.parametrize("kind,reductions", [("softmax", {"softmax.max", "softmax.exp", "softmax.sum"}),
                                             ("layer_norm", {"layer_norm.mean.sum", "layer_norm.var.sum"})])
def test_reductions_computed_at_the_row_loop(kind, reductions):
    """One unit per op; its reductions are computed at a loop of the output (not separate loop
    nests over the whole tensor)."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(64, 1024), dtype="float32")
        f.output(KINDS[kind][0](x))
    mod = FuseOps().transform(bb.finish())
    prims = [fn for fn in mod.function_names() if fn != "main"]
    assert len(prims) == 1
    sch = Schedule(mod)
    apply_default_schedule(sch, Target.host(), threads=2)
    attached = {b.name for b in sch.model.blocks if b.compute_at is not None}
    assert reductions <= attached
