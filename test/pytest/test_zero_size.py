"""Zero-size tensors follow numpy: ops on them compile and return empty results, or the
reduction's identity (sum of nothing = 0, a matmul with K = 0 is zeros); reductions without an
identity (max, argmax) are BuildErrors, as numpy raises."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import mlc_mlir as mlc
from mlc_mlir import ops

#: Extents that exercise the empty case, the unit case, and primes (no tile divides them).
EXTENTS = st.sampled_from([0, 1, 2, 3, 7, 13, 16])
SETTINGS = settings(max_examples=12, derandomize=True, deadline=None)


def _compile(shapes, build):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(build(*[f.arg(f"a{i}", s) for i, s in enumerate(shapes)]))
    return mlc.compile(bb.finish())


def _inputs(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _check(shapes, build, ref):
    xs = _inputs(shapes)
    got = _compile(shapes, build)(*xs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # numpy's mean of an empty slice
        want = ref(*xs)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)


@SETTINGS
@given(EXTENTS, EXTENTS)
def test_elementwise(m, n):
    _check([(m, n), (n,)], lambda a, b: ops.relu(ops.add(a, b)), lambda a, b: np.maximum(a + b, 0))


@SETTINGS
@given(EXTENTS, EXTENTS, EXTENTS)
def test_matmul(m, k, n):
    _check([(m, k), (k, n)], ops.matmul, lambda a, b: a @ b)


@SETTINGS
@given(EXTENTS, EXTENTS, st.sampled_from(["sum", "mean"]), st.sampled_from([0, 1]))
def test_reduction(m, n, kind, axis):
    _check([(m, n)], lambda x: getattr(ops, kind)(x, axis=axis), lambda x: getattr(np, kind)(x, axis=axis))


@pytest.mark.parametrize("kind", ["max", "min", "argmax"])
def test_reduction_without_identity_is_refused(kind):
    with pytest.raises(mlc.BuildError, match="has size 0"):
        _compile([(3, 0)], lambda x: getattr(ops, kind)(x, axis=1))


def test_conv_and_pool_of_an_empty_batch():
    w = np.ones((4, 3, 3, 3), np.float32)
    _check([(0, 3, 8, 8)], lambda x: ops.max_pool2d(ops.conv2d(x, w), 2), lambda x: np.zeros((0, 4, 3, 3), np.float32))


def test_from_torch_empty_batch():
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval()
    x = torch.randn(0, 4)
    got = mlc.compile(mlc.from_torch(model, (x,)))(x.numpy())
    assert got.shape == (0, 3) and got.dtype == np.float32


def test_from_onnx_empty_input_shape():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    exe = mlc.compile(mlc.from_onnx(model, input_shapes={"x": (0, 3)}))
    assert exe(np.zeros((0, 3), np.float32)).shape == (0, 3)


def test_fold_zero_size_pass_leaves_no_zero_extent():
    from mlc_mlir import graph
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a, b = f.arg("a", (3, 0)), f.arg("b", (0, 4))
        f.output(ops.relu(ops.matmul(a, b)), ops.exp(a))
    text = graph.FoldZeroSizeOps()(bb.finish()).to_text()
    assert "linalg.matmul" not in text and "math.exp" not in text
    assert "linalg.fill" in text and "tensor.empty() : tensor<3x0xf32>" in text


@pytest.mark.parametrize("build, ref", [
    (lambda a: ops.slice(a, [1], [1]), lambda a: a[1:1]),
    (lambda a: ops.slice(a, [0, 2], [2, 2]), lambda a: a[0:2, 2:2]),
    (lambda a: ops.concat([a, ops.slice(a, [2], [2])], axis=0), lambda a: np.concatenate([a, a[2:2]])),
    (lambda a: ops.concat([ops.slice(a, [0, 3], [2, 3]), ops.slice(a, [0, 1], [2, 1])], axis=0),
     lambda a: np.zeros((4, 0), np.float32)),
])
def test_empty_slices_and_concats(build, ref):
    _check([(2, 3)], build, ref)


def test_softmax_and_resize_of_empty_tensors():
    _check([(2, 0, 3)], lambda x: ops.softmax(x, axis=1), lambda x: x)
    _check([(1, 2, 0, 4)], lambda x: ops.resize(x, scales=(1, 1, 2, 2)), lambda x: np.zeros((1, 2, 0, 8), np.float32))
    with pytest.raises(mlc.BuildError, match="resize: x .* is empty"):
        _compile([(1, 2, 0, 4)], lambda x: ops.resize(x, sizes=(1, 2, 3, 8)))


def test_tune_sees_the_folded_module(tmp_path):
    """Tasks come from the module with zero-size ops folded, as compile schedules it: the
    K = 0 dense is its zero fill and leaves only the bias add and relu to tune."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", (2, 0))
        f.output(ops.relu(ops.dense(x, np.ones((3, 0), np.float32), np.ones(3, np.float32))))
    mod = bb.finish()
    db = mlc.tune(mod, trials=2, work_dir=str(tmp_path), progress=False)
    trials = [r for r in db.records() if not r.final]   # the rest: re-measured finalists
    assert len(trials) == 2 and all("goto_params" not in (r.error or "") for r in db.records())
    np.testing.assert_array_equal(mlc.compile(mod, database=db)(np.zeros((2, 0), np.float32)),
                                  np.ones((2, 3), np.float32))
