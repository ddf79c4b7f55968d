"""prepare_passes.ApproximateMath (mlc-approximate-math): the polynomial exp, erf, tanh, log, log1p and
expm1 vs numpy/scipy (float64 references) on dense grids and special values, in scalar loops (schedule='none') and vectorized (default
schedules); the op is really replaced, and approximate_math=False keeps libm."""

import numpy as np
import pytest
from scipy.special import erf

import mlc_mlir as mlc
from mlc_mlir import ops, te
from mlc_mlir.pipeline.prepare_passes.math_approximation import ApproximateMath
from mlc_mlir.ir.walk import has_op
from opcheck import build_only

GRID = 1 << 16


def _compile(fn, n, **kw):
    return mlc.compile(build_only(fn, ((n,), "float32")), **kw)


@pytest.mark.parametrize("schedule", ["default", "none"])
def test_exp_matches_numpy_to_one_ulp(schedule):
    x = np.linspace(-87.3, 88.7, GRID, dtype=np.float32)
    got = _compile(ops.exp, GRID, schedule=schedule)(x)
    ref = np.exp(x.astype(np.float64))
    assert np.max(np.abs(got - ref) / ref) < 2.5e-7  # 1 ulp of f32 is 1.19e-7 relative


def test_exp_special_values():
    x = np.array([-np.inf, -1e30, -100.0, -87.5, 0.0, 1e-30, 88.72, 89.0, 1e30, np.inf, np.nan,
                  -np.nan, 1.0, -1.0, 10.0, -10.0], dtype=np.float32)
    got = _compile(ops.exp, x.size)(x)
    with np.errstate(over="ignore"):
        ref = np.exp(x)
    assert np.isnan(got[10]) and np.isnan(got[11])
    keep = ~np.isnan(ref)
    np.testing.assert_allclose(got[keep], ref[keep], rtol=2.5e-7, atol=1.2e-38)  # denormals flush


@pytest.mark.parametrize("schedule", ["default", "none"])
def test_erf_matches_scipy(schedule):
    x = np.concatenate([np.linspace(-6, 6, GRID - 4, dtype=np.float32),
                        np.array([np.inf, -np.inf, 1e-30, -1e-30], np.float32)])
    got = _compile(ops.erf, GRID, schedule=schedule)(x)
    np.testing.assert_allclose(got, erf(x.astype(np.float64)), rtol=0, atol=5e-7)
    assert np.isnan(_compile(ops.erf, 1)(np.array([np.nan], np.float32))).all()


def test_softmax_and_gelu_numerics_with_approximation(rng):
    x = (rng.standard_normal((16, 384)) * 4).astype(np.float32)
    sm = mlc.compile(build_only(lambda a: ops.softmax(a, axis=-1), ((16, 384), "float32")))(x)
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    np.testing.assert_allclose(sm, e / e.sum(-1, keepdims=True), rtol=2e-6, atol=1e-9)
    g = mlc.compile(build_only(lambda a: ops.gelu(a, approximate="none"), ((16, 384), "float32")))(x)
    xd = x.astype(np.float64)
    np.testing.assert_allclose(g, 0.5 * xd * (1 + erf(xd / np.sqrt(2))), rtol=1e-6, atol=1e-6)


def test_the_pass_replaces_f32_ops_only():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a = f.arg("a", shape=(8,), dtype="float32")
        b = f.arg("b", shape=(8,), dtype="float64")
        f.output(ops.erf(ops.exp(a)), ops.exp(b))
    out = ApproximateMath()(bb.finish())
    assert not has_op(out, "math.erf")
    text = str(out)
    assert text.count("math.exp") == 1 and "f64" in text.split("math.exp")[1].split("\n")[0]
    with pytest.raises(mlc.PipelineError, match="cannot approximate.*math.sin"):
        ApproximateMath(["math.sin"])


def test_approximate_math_false_keeps_libm(tmp_path):
    mod = build_only(ops.exp, ((8,), "float32"))
    mlc.compile(mod, approximate_math=False, dump_ir=str(tmp_path))
    assert "math.exp" in (tmp_path / "04-math.mlir").read_text()
    mlc.compile(mod, dump_ir=str(tmp_path))
    assert "math.exp" not in (tmp_path / "04-math.mlir").read_text()
    with pytest.raises(mlc.PipelineError, match="approximate_math"):
        mlc.compile(mod, approximate_math="yes")


def _te_unary(fn, n):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", (n,))
        f.output(te.compute((n,), lambda i: fn(x[i]), name="y"))
    return bb.finish()


def _ulp_error(got, ref):
    """Error in units of the float32 spacing at the float64 reference."""
    return np.abs(got.astype(np.float64) - ref) / np.spacing(np.abs(ref).astype(np.float32))


@pytest.mark.parametrize("schedule", ["default", "none"])
def test_tanh_within_two_ulp(schedule):
    x = np.concatenate([np.linspace(-10, 10, GRID - 8, dtype=np.float32),
                        np.array([0.0, -0.0, 1e-30, 3.9e-4, -4.1e-4, 8.0, np.inf, -np.inf],
                                 np.float32)])
    got = _compile(ops.tanh, GRID, schedule=schedule)(x)
    ref = np.tanh(x.astype(np.float64))
    assert np.max(_ulp_error(got, ref)) <= 2
    assert np.isnan(_compile(ops.tanh, 1)(np.array([np.nan], np.float32))).all()


@pytest.mark.parametrize("schedule", ["default", "none"])
def test_log_within_two_ulp_over_the_normal_range(schedule):
    x = np.concatenate([np.logspace(-37.9, 38.5, GRID // 2, dtype=np.float32),
                        np.linspace(0.5, 2.0, GRID // 2, dtype=np.float32)])
    got = _compile(ops.log, GRID, schedule=schedule)(x)
    ref = np.log(x.astype(np.float64))
    assert np.max(_ulp_error(got, ref)) <= 2


def test_log_special_values():
    x = np.array([0.0, -0.0, -1.0, -np.inf, np.inf, np.nan, 1.0], np.float32)
    got = _compile(ops.log, x.size)(x)
    np.testing.assert_array_equal(got[:2], [-np.inf, -np.inf])
    assert np.isnan(got[2:4]).all() and got[4] == np.inf and np.isnan(got[5]) and got[6] == 0


@pytest.mark.parametrize("schedule", ["default", "none"])
def test_log1p_and_expm1_keep_relative_accuracy_near_zero(schedule):
    tiny = np.array([1e-30, -1e-30, 1e-12, -1e-12, 1e-7, -1e-7], np.float32)
    x = np.concatenate([np.linspace(-0.999, 1e4, GRID // 2, dtype=np.float32), tiny,
                        np.linspace(-1e-3, 1e-3, GRID // 2 - tiny.size, dtype=np.float32)])
    got = mlc.compile(_te_unary(te.log1p, GRID), schedule=schedule)(x)
    ref = np.log1p(x.astype(np.float64))
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=0)
    y = np.concatenate([np.linspace(-80, 88, GRID // 2, dtype=np.float32), tiny,
                        np.linspace(-1e-3, 1e-3, GRID // 2 - tiny.size, dtype=np.float32)])
    got = mlc.compile(_te_unary(te.expm1, GRID), schedule=schedule)(y)
    np.testing.assert_allclose(got, np.expm1(y.astype(np.float64)), rtol=1e-6, atol=0)


def test_log1p_and_expm1_special_values():
    x = np.array([-1.0, -2.0, np.inf, np.nan, 0.0, 100.0, -np.inf], np.float32)
    l1p = mlc.compile(_te_unary(te.log1p, x.size))(x)
    assert l1p[0] == -np.inf and np.isnan(l1p[1]) and l1p[2] == np.inf and np.isnan(l1p[3])
    assert l1p[4] == 0 and abs(l1p[5] - np.log1p(100.0)) < 1e-5 and np.isnan(l1p[6])
    em1 = mlc.compile(_te_unary(te.expm1, x.size))(x)
    assert em1[2] == np.inf and np.isnan(em1[3]) and em1[4] == 0 and em1[6] == -1
    with np.errstate(over="ignore"):  # expm1(100) overflows float32
        ref = np.expm1(x[[0, 1, 5]].astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(em1[[0, 1, 5]], ref, rtol=1e-6)


def test_tanh_gelu_is_vectorized_without_libm_calls(tmp_path):
    mod = build_only(lambda a: ops.gelu(a, approximate="tanh"), ((64, 64), "float32"))
    mlc.compile(mod, dump_ir=str(tmp_path))
    llvm = (tmp_path / "09-llvm.ll").read_text()
    assert "tanhf" not in llvm and "fma <" in llvm.replace("@llvm.fma.v", "fma <")
