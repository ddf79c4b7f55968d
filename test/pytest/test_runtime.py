"""Executable: numerics, input validation, parameters, benchmark."""

import statistics

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.pipeline import CPU_STAGES
from mlc_mlir.pipeline.layout import LAYOUT_STEPS


def _mlp(rng, batch=2, params=False):
    w0 = rng.standard_normal((16, 8)).astype(np.float32)
    b0 = rng.standard_normal(16).astype(np.float32)
    w1 = rng.standard_normal((4, 16)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(batch, 8), dtype="float32")
        w = f.param("w0", w0) if params else w0
        f.output(ops.dense(ops.relu(ops.dense(x, w, b0)), w1))
    ref = lambda xn: np.maximum(xn @ w0.T + b0, 0) @ w1.T  # noqa: E731
    return bb.finish(), ref


def test_mlp_matches_numpy(rng):
    mod, ref = _mlp(rng)
    exe = mlc.compile(mod)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(exe(x), ref(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(exe["main"](x), ref(x), rtol=1e-5, atol=1e-5)


def test_repeated_calls_do_not_alias_outputs(rng):
    mod, ref = _mlp(rng)
    exe = mlc.compile(mod)
    x1 = rng.standard_normal((2, 8)).astype(np.float32)
    x2 = rng.standard_normal((2, 8)).astype(np.float32)
    y1, y2 = exe(x1), exe(x2)
    np.testing.assert_allclose(y1, ref(x1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y2, ref(x2), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad, match", [
    (lambda x: (x, x), "got 2 arguments; expected 1"),
    (lambda x: (x.astype(np.float64),), "argument 'x' has dtype float64; expected float32"),
    (lambda x: (x[:1],), r"argument 'x' has shape \(1, 8\); expected \(2, 8\)"),
    (lambda x: (np.ones((2, 16), np.float32)[:, ::2],), "not C-contiguous"),
    (lambda x: ([[1.0] * 8] * 2,), "argument 'x' is list; expected numpy.ndarray"),
    (lambda x: (x.astype(">f4"),), "argument 'x' has dtype >f4; expected float32"),
    (lambda x: (np.asfortranarray(x),), "argument 'x' is not C-contiguous"),
    (lambda x: (x.reshape(16),), r"argument 'x' has shape \(16,\); expected \(2, 8\)"),
    (lambda x: (x.view(np.int32),), "argument 'x' has dtype int32; expected float32"),
])
def test_input_validation(rng, bad, match):
    mod, _ = _mlp(rng)
    exe = mlc.compile(mod)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    with pytest.raises(mlc.ExecutionError, match=match):
        exe(*bad(x))


def test_read_only_and_offset_inputs(rng):
    """Inputs are passed by address: a read-only array (``a.ctypes.data``) and a C-contiguous
    view into a larger buffer (a writable buffer's ctypes view) give numpy's result."""
    mod, ref = _mlp(rng)
    exe = mlc.compile(mod)
    base = rng.standard_normal((5, 8)).astype(np.float32)
    view = base[3:]
    frozen = base[1:3].copy()
    frozen.flags.writeable = False
    np.testing.assert_allclose(exe(view), ref(view), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(exe(frozen), ref(frozen), rtol=1e-5, atol=1e-5)


def test_array_subclasses_and_views_give_numpys_result(rng):
    """Arguments that are not plain C-contiguous ndarrays of the exact dtype object go through
    the general checks: a subclass, a dtype equal to float32 but another object, a
    C-contiguous slice of a larger buffer; repeated calls return new arrays."""
    mod, ref = _mlp(rng)
    exe = mlc.compile(mod)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    sub = x.view(type("Sub", (np.ndarray,), {}))
    other_dtype = x.view(np.dtype("<f4", metadata={"unit": "m"}))
    wide = np.zeros((2, 9), np.float32)
    for arg in (sub, other_dtype, x.copy()):
        np.testing.assert_allclose(exe(arg), ref(x), rtol=1e-5, atol=1e-5)
    y1, y2 = exe(x), exe(x)
    assert y1 is not y2 and not np.shares_memory(y1, y2)
    with pytest.raises(mlc.ExecutionError, match=r"argument 'x' has shape \(2, 9\)"):
        exe(wide)


def test_data_address_is_the_first_element(rng):
    """``data_address`` gives numpy's data pointer for views, read-only, empty and bfloat16
    arrays (the address the descriptors are bound to)."""
    import ml_dtypes
    from mlc_mlir.runtime.memref import data_address
    base = rng.standard_normal((6, 8)).astype(np.float32)
    frozen = base.copy()
    frozen.flags.writeable = False
    for a in (base, base[2:], base[1:3, 4:], frozen, np.empty((0, 3), np.float32),
              base.astype(ml_dtypes.bfloat16), np.ones((), np.float32), base.T):
        assert data_address(a) == a.__array_interface__["data"][0]


def test_calls_from_several_threads_do_not_mix_arguments(rng):
    """Each thread binds its own descriptors: concurrent calls on different inputs give each
    input's result."""
    from concurrent.futures import ThreadPoolExecutor
    mod, ref = _mlp(rng)
    exe = mlc.compile(mod)
    xs = [rng.standard_normal((2, 8)).astype(np.float32) for _ in range(8)]

    def run(x):
        return [exe(x) for _ in range(200)]

    with ThreadPoolExecutor(4) as pool:
        for x, ys in zip(xs, pool.map(run, xs)):
            for y in ys:
                np.testing.assert_allclose(y, ref(x), rtol=1e-5, atol=1e-5)


def test_out_accepts_a_single_array_or_a_list(rng):
    mod, ref = _mlp(rng)
    exe = mlc.compile(mod)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    out = np.full((2, 4), np.nan, np.float32)
    assert exe(x, out=out) is out
    np.testing.assert_allclose(out, ref(x), rtol=1e-5, atol=1e-5)
    out2 = np.zeros((2, 4), np.float32)
    assert exe(x, out=[out2]) is out2
    np.testing.assert_allclose(out2, ref(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(mlc.ExecutionError, match=r"out array for .* has dtype float64; expected float32"):
        exe(x, out=np.zeros((2, 4)))
    with pytest.raises(mlc.ExecutionError, match="out has 2 arrays; expected 1"):
        exe(x, out=[out, out2])


def _matmul_exe(n=8):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a, b = f.arg("a", shape=(n, n)), f.arg("b", shape=(n, n))
        f.output(ops.matmul(a, b))
    return mlc.compile(bb.finish())


def test_out_aliasing_an_input_is_computed_through_a_copy(rng):
    exe = _matmul_exe()
    a = rng.standard_normal((8, 8)).astype(np.float32)
    b = rng.standard_normal((8, 8)).astype(np.float32)
    want = a @ b
    a_alias = a.copy()
    assert exe(a_alias, b, out=[a_alias]) is a_alias
    np.testing.assert_allclose(a_alias, want, rtol=1e-5, atol=1e-5)
    b_alias = b.copy()
    exe(a, b_alias, out=b_alias)
    np.testing.assert_allclose(b_alias, want, rtol=1e-5, atol=1e-5)
    both = a.copy()
    exe(both, both, out=both)                 # a @ a, written over a
    np.testing.assert_allclose(both, a @ a, rtol=1e-5, atol=1e-5)


def test_arguments_by_name(rng):
    mod, ref = _mlp(rng, params=True)
    exe = mlc.compile(mod)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(exe(x=x), ref(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(exe["main"](x=x), ref(x), rtol=1e-5, atol=1e-5)
    # a parameter by name replaces its bound value: relu(b0) @ w1.T does not depend on x
    w0 = np.zeros_like(mod.params["w0"])
    np.testing.assert_allclose(exe(x, w0=w0), exe(x * 3, w0=w0), rtol=1e-6)
    matmul = _matmul_exe(4)
    a = rng.standard_normal((4, 4)).astype(np.float32)
    b = rng.standard_normal((4, 4)).astype(np.float32)
    np.testing.assert_allclose(matmul(b=b, a=a), a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(matmul(a, b=b), a @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(mlc.ExecutionError, match=r"unknown argument name\(s\) \['x0'\]; expected names: \['x', 'w0'\]"):
        exe(x0=x)
    with pytest.raises(mlc.ExecutionError, match=r"missing \['b'\]"):
        matmul(a=a)
    with pytest.raises(mlc.ExecutionError, match="'a' given both by position and by name"):
        matmul(a, a=a, b=b)


def test_params_are_filled_in_and_bindable(rng):
    mod, ref = _mlp(rng, params=True)
    assert "w0" in mod.params
    x = rng.standard_normal((2, 8)).astype(np.float32)
    exe = mlc.compile(mod)
    np.testing.assert_allclose(exe(x), ref(x), rtol=1e-5, atol=1e-5)
    bound = mod.bind_params()
    assert bound.params == {}
    assert len(bound.signature("main").args) == 1
    assert "dense_resource" in str(bound)
    np.testing.assert_allclose(mlc.compile(bound)(x), ref(x), rtol=1e-5, atol=1e-5)


def test_explicit_param_value_changes_result(rng):
    mod, ref = _mlp(rng, params=True)
    exe = mlc.compile(mod)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    w = np.zeros_like(mod.params["w0"])
    # relu(0 + b0) @ w1.T does not depend on x
    y = exe(x, w)
    np.testing.assert_allclose(y, exe(x * 2, w), rtol=1e-6)


def test_benchmark_returns_ms(rng):
    mod, _ = _mlp(rng)
    exe = mlc.compile(mod)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    r = exe.benchmark(x, number=10, repeat=3)
    assert len(r.per_repeat_ms) == 3 and r.number == 10
    assert all(np.isfinite(t) and t > 0 for t in r.per_repeat_ms)
    assert r.min_ms == min(r.per_repeat_ms)
    assert r.median_ms == statistics.median(r.per_repeat_ms)
    assert r.mean_ms == pytest.approx(statistics.fmean(r.per_repeat_ms))
    assert exe.benchmark(x=x, number=1, repeat=1).number == 1   # inputs by name too
    with pytest.raises(mlc.ExecutionError, match="must be >= 1"):
        exe.benchmark(x, number=0)


def test_unknown_function_and_target(rng):
    mod, _ = _mlp(rng)
    with pytest.raises(mlc.PipelineError, match="unknown target 'tpu'"):
        mlc.compile(mod, target="tpu")
    with pytest.raises(mlc.PipelineError, match="no pipeline named 'nope'"):
        mlc.compile(mod, pipeline="nope")
    exe = mlc.compile(mod)
    with pytest.raises(mlc.ExecutionError, match="no function 'foo'"):
        exe["foo"]


def test_module_parse_from_text_compiles():
    text = """
    func.func @main(%a: tensor<4x8xf32>, %b: tensor<8x3xf32>) -> tensor<4x3xf32> {
      %e = tensor.empty() : tensor<4x3xf32>
      %z = arith.constant 0.0 : f32
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<4x3xf32>) -> tensor<4x3xf32>
      %r = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x3xf32>) outs(%f : tensor<4x3xf32>) -> tensor<4x3xf32>
      return %r : tensor<4x3xf32>
    }"""
    mod = mlc.Module.parse(text)
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    b = np.ones((8, 3), np.float32)
    np.testing.assert_allclose(mlc.compile(mod)(a, b), a @ b)


def test_module_parse_errors_are_clean():
    with pytest.raises(mlc.IRError, match="not valid MLIR"):
        mlc.Module.parse("func.func @f( {")
    with pytest.raises(mlc.IRError, match="failed to verify|not valid MLIR"):
        mlc.Module.parse("""func.func @f(%a: tensor<4xf32>) -> tensor<5xf32> {
          return %a : tensor<4xf32> }""")


def test_dump_ir_writes_each_stage(rng, tmp_path):
    mod, _ = _mlp(rng)
    mlc.compile(mod, dump_ir=str(tmp_path))
    names = sorted(p.name for p in tmp_path.iterdir())
    steps = [f"01-layout.{k}-{name}.mlir" for k, (name, _) in enumerate(LAYOUT_STEPS, 1)]
    assert names == sorted(["00-graph.mlir", *steps, "01-layout.mlir", "02-tasks.mlir", "03-schedule.mlir",
                            "04-math.mlir", "05-library.mlir", "06-prepare.mlir", "07-lower.mlir",
                            "08-denormals.mlir", "09-llvm.ll"])
    assert [s.name for s in CPU_STAGES] == ["graph", "layout", "tasks", "schedule", "math", "library",
                                            "prepare", "lower", "denormals"]
    # the tasks stage marks each op of a unit with its unit; the schedule stage drops the marks
    assert 'mlc.task = "fused_' in (tmp_path / "02-tasks.mlir").read_text()
    assert "mlc.task" not in (tmp_path / "03-schedule.mlir").read_text()
    assert "llvm.func" in (tmp_path / "07-lower.mlir").read_text()


def test_no_memory_leak_across_calls():
    """Intermediates are freed by the buffer-deallocation pipeline and outputs are numpy-owned:
    2000 calls that each materialize ~256 KB of temporaries must not grow the process."""
    import resource

    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(64, 256))
        h = ops.relu(ops.dense(x, np.ones((256, 256), np.float32)))
        f.output(ops.softmax(ops.dense(h, np.ones((10, 256), np.float32))))
    exe = mlc.compile(bb.finish())
    x = np.ones((64, 256), np.float32)
    for _ in range(50):
        exe(x)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(2000):
        exe(x)
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kb < 16 * 1024, f"RSS grew by {grown_kb} KB over 2000 calls (a leak would be ~500 MB)"


@pytest.mark.parametrize("schedule", ["default", "none"])
def test_accumulating_into_an_argument_leaves_the_array_unchanged(schedule):
    """``outs(%c)`` on an argument: the function writes a copy (the argument is marked
    bufferization.writable = false), the caller's array keeps its values."""
    text = """
    func.func @main(%a: tensor<4x8xf32>, %b: tensor<8x4xf32>, %c: tensor<4x4xf32>) -> tensor<4x4xf32> {
      %r = linalg.matmul {mlc.name = "m"} ins(%a, %b : tensor<4x8xf32>, tensor<8x4xf32>) outs(%c : tensor<4x4xf32>) -> tensor<4x4xf32>
      return %r : tensor<4x4xf32>
    }"""
    rng = np.random.default_rng(3)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((4, 8), (8, 4), (4, 4)))
    c0 = c.copy()
    exe = mlc.compile(mlc.Module.parse(text), schedule=schedule)
    for _ in range(2):
        np.testing.assert_allclose(exe(a, b, c), c0 + a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(c, c0)
