"""Run-time checks: the gather family (take / gather, gather_elements, PyTorch's embedding)
reports an index out of range as an ``ExecutionError`` naming the op, the argument, the value and
the valid range (JIT and AOT library); in-range indices, negative ones of ONNX/numpy included,
give numpy's result. Hypothesis draws the index tensors; each op is compiled once."""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mlc_mlir as mlc
from mlc_mlir.runtime import load_library
from mlc_mlir import ops

N = 7                       # rows of the gathered axis
I64 = np.iinfo(np.int64)
#: Index values hypothesis draws from: every valid one, the edges and far outside.
VALUES = st.one_of(st.integers(-N - 2, N + 1), st.sampled_from([I64.min, I64.max, -(2 ** 40), 2 ** 40, 10 ** 7]))


def _compile(build):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(build(f))
    return mlc.compile(bb.finish())


_cache = {}


def _exe(kind):
    if kind not in _cache:
        if kind == "take":
            _cache[kind] = _compile(lambda f: ops.take(f.arg("x", (3, N, 2)), f.arg("i", (2, 3), "int64"), axis=1))
        elif kind == "gather_i32":
            _cache[kind] = _compile(lambda f: ops.gather(f.arg("x", (N, 4)), f.arg("i", (5,), "int32")))
        elif kind == "gather_elements":
            _cache[kind] = _compile(lambda f: ops.gather_elements(f.arg("x", (3, N)), f.arg("i", (3, 4), "int64"),
                                                                  axis=1))
        elif kind == "embedding":
            emb = torch.nn.Embedding(N, 4)
            _cache[kind] = (mlc.compile(mlc.from_torch(emb, (torch.zeros(2, 3, dtype=torch.int64),))), emb)
    return _cache[kind]


def _expect(call, want_fn, idx, lo):
    """In range: numpy's result; else ExecutionError naming the offending value and range."""
    bad = idx[(idx < lo) | (idx >= N)]
    if bad.size:
        with pytest.raises(mlc.ExecutionError, match=rf"argument 'indices' holds -?\d+, outside \[{lo}, {N}\)") as e:
            call()
        assert int(str(e.value).split("holds ")[1].split(",")[0]) in {int(v) for v in bad} | {I64.min + 1}
    else:
        np.testing.assert_array_equal(call(), want_fn())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(VALUES, min_size=6, max_size=6))
def test_take_checks_indices(vals):
    x = np.arange(3 * N * 2, dtype=np.float32).reshape(3, N, 2)
    idx = np.array(vals, dtype=np.int64).reshape(2, 3)
    _expect(lambda: _exe("take")(x, idx), lambda: np.take(x, idx, axis=1), idx, -N)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(-N - 3, N + 3) | st.sampled_from([-(2 ** 31), 2 ** 31 - 1]), min_size=5, max_size=5))
def test_gather_int32_checks_indices(vals):
    x = np.random.default_rng(0).standard_normal((N, 4)).astype(np.float32)
    idx = np.array(vals, dtype=np.int32)
    _expect(lambda: _exe("gather_i32")(x, idx), lambda: np.take(x, idx, axis=0), idx, -N)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(VALUES, min_size=12, max_size=12))
def test_gather_elements_checks_indices(vals):
    x = np.arange(3 * N, dtype=np.float32).reshape(3, N)
    idx = np.array(vals, dtype=np.int64).reshape(3, 4)
    _expect(lambda: _exe("gather_elements")(x, idx),
            lambda: np.take_along_axis(x, np.where(idx < 0, idx + N, idx), axis=1), idx, -N)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(VALUES, min_size=6, max_size=6))
def test_embedding_raises_where_pytorch_raises(vals):
    """PyTorch's embedding accepts [0, n) only: negative indices are errors too."""
    exe, emb = _exe("embedding")
    idx = np.array(vals, dtype=np.int64).reshape(2, 3)
    try:
        want = emb(torch.from_numpy(idx)).detach().numpy()
    except IndexError:
        want = None
    if want is None:
        with pytest.raises(mlc.ExecutionError, match=rf"holds -?\d+, outside \[0, {N}\)"):
            exe(idx)
    else:
        np.testing.assert_array_equal(exe(idx), want)


def test_issue_examples():
    exe = _compile(lambda f: ops.take(f.arg("t", (10, 2)), f.arg("i", (3,), "int64")))
    t = np.arange(20, dtype=np.float32).reshape(10, 2)
    np.testing.assert_array_equal(exe(t, np.array([0, 9, -3])), t[[0, 9, -3]])
    with pytest.raises(mlc.ExecutionError, match=r"main: take 'take': argument 'indices' holds 10000000, "
                                                 r"outside \[-10, 10\) \(axis 0 of x \(10, 2\)\)"):
        exe(t, np.array([0, 10 ** 7, -3]))
    emb = torch.nn.Embedding(10, 4)
    exe = mlc.compile(mlc.from_torch(emb, (torch.tensor([1, 2]),)))
    with pytest.raises(mlc.ExecutionError, match=r"holds 1099511627776, outside \[0, 10\)"):
        exe(np.array([1, 2 ** 40]))


def test_checks_are_not_results_and_survive_export(tmp_path):
    """The check is a trailing result of the compiled function, dropped from what a call
    returns; an exported library keeps it (metadata ``check``) and raises the same error."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x, i = f.arg("x", (5, 3)), f.arg("i", (4,), "int32")
        f.output(ops.take(x, i), ops.relu(x))
    mod = bb.finish()
    sig = mod.signature("main")
    assert [r.check is not None for r in sig.results] == [False, False, True]
    x = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)
    lib = load_library(mlc.compile(mod).export_library(str(tmp_path / "take.so")))
    got, relu = lib(x, np.array([4, -5, 0, 1], np.int32))
    np.testing.assert_array_equal(got, x[[4, -5, 0, 1]])
    np.testing.assert_array_equal(relu, np.maximum(x, 0))
    out = (np.empty((4, 3), np.float32), np.empty((5, 3), np.float32))
    with pytest.raises(mlc.ExecutionError, match=r"holds 5, outside \[-5, 5\)"):
        lib(x, np.array([4, 5, 0, 1], np.int32), out=out)


def test_numpy_indices_are_checked_when_built():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", (4, 2))
        with pytest.raises(mlc.BuildError, match=r"take 'take': argument 'indices' holds 4, outside \[-4, 4\)"):
            ops.take(x, np.array([0, 4]))
        with pytest.raises(mlc.BuildError, match=r"holds -3, outside \[-2, 2\)"):
            ops.gather_elements(x, np.array([[0, -3]]), axis=1)
        with pytest.raises(mlc.BuildError, match=r"axis 0 of x \(0, 2\) has size 0"):
            ops.take(f.arg("e", (0, 2)), f.arg("i", (1,), "int64"))
        f.output(ops.take(x, np.array([0, -4, 3])))
