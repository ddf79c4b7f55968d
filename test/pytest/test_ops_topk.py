"""``ops.topk`` against ``torch.topk`` / numpy: largest and smallest, any axis, ties by the
lower index, -inf inputs, integers at their extremes."""

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.errors import BuildError

torch = pytest.importorskip("torch")


def _run(x, k, **kw):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        t = f.arg("x", shape=x.shape, dtype=str(x.dtype))
        f.output(*ops.topk(t, k, **kw))
    return mlc.compile(bb.finish())(x)


def _stable_topk(x, k, axis):
    """numpy oracle for the k largest floats: a stable sort of -x keeps the lower index first
    among equal values (-(-inf) = inf sorts them last, in index order)."""
    idx = np.take(np.argsort(-x, axis=axis, kind="stable"), np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx


@pytest.mark.parametrize("axis,largest", [(-1, True), (1, False), (0, True)])
def test_matches_torch_topk(axis, largest):
    x = np.random.default_rng(0).standard_normal((5, 9, 4)).astype(np.float32)
    values, indices = _run(x, 3, axis=axis, largest=largest)
    tv, ti = torch.topk(torch.from_numpy(x), 3, dim=axis, largest=largest, sorted=True)
    np.testing.assert_array_equal(values, tv.numpy())
    np.testing.assert_array_equal(indices, ti.numpy())
    assert indices.dtype == np.int64


def test_ties_take_the_lower_index_and_neg_inf_is_not_a_masked_element():
    x = np.array([[3.0, 1.0, 3.0, 3.0, -np.inf, -np.inf],
                  [-np.inf, -np.inf, -np.inf, 0.0, 0.0, -np.inf]], np.float32)
    values, indices = _run(x, 6, axis=1)
    want_v, want_i = _stable_topk(x, 6, 1)
    np.testing.assert_array_equal(indices, want_i)
    np.testing.assert_array_equal(values, want_v)
    assert indices[1].tolist() == [3, 4, 0, 1, 2, 5]


def test_integer_extremes_smallest():
    info = np.iinfo(np.int32)
    x = np.array([5, info.min, info.max, -1, info.min, 0], np.int32)
    values, indices = _run(x, 4, largest=False)
    np.testing.assert_array_equal(values, [info.min, info.min, -1, 0])
    np.testing.assert_array_equal(indices, [1, 4, 3, 5])
    values, indices = _run(x, 2, largest=True)
    np.testing.assert_array_equal(values, [info.max, 5])
    np.testing.assert_array_equal(indices, [2, 0])


@pytest.mark.parametrize("k,axis,msg", [(0, -1, "argument 'k' is 0"), (7, -1, "argument 'k' is 7"),
                                        (2, 2, "argument 'axis' is 2")])
def test_bad_arguments_name_the_problem(k, axis, msg):
    bb = mlc.GraphBuilder()
    with pytest.raises(BuildError, match=msg):
        with bb.function("main") as f:
            f.output(*ops.topk(f.arg("x", shape=(2, 6)), k, axis=axis))
