"""``ops.embedding_bag`` against PyTorch's ``embedding_bag``: every mode, empty bags,
``include_last_offset``, ``padding_idx``, per-sample weights, run-time and constant offsets;
plus its errors and the run-time index check."""

import numpy as np
import pytest
from opcheck import build_only, run

from mlc_mlir import ops
from mlc_mlir.errors import BuildError, ExecutionError

torch = pytest.importorskip("torch")
F = torch.nn.functional

IDX = np.array([1, 2, 4, 5, 4, 3, 2, 9, 2, 0, 7], np.int64)


def _torch(w, idx, off, **kw):
    psw = kw.pop("per_sample_weights", None)
    return F.embedding_bag(torch.from_numpy(idx), torch.from_numpy(w), torch.from_numpy(off),
                           per_sample_weights=None if psw is None else torch.from_numpy(psw), **kw).numpy()


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("off,last", [(np.array([0, 4, 4, 7], np.int64), False),
                                      (np.array([0, 3, 3, 8, 11], np.int32), True),
                                      (np.array([0], np.int64), False)])
@pytest.mark.parametrize("pad", [None, 2])
def test_matches_torch(mode, off, last, pad):
    w = np.random.default_rng(0).standard_normal((10, 5)).astype(np.float32)
    want = _torch(w, IDX, off, mode=mode, include_last_offset=last, padding_idx=pad)
    got = run(lambda a, b, c: ops.embedding_bag(a, b, c, mode=mode, include_last_offset=last, padding_idx=pad),
              w, IDX, off)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_weighted_sum_and_constant_offsets_match_torch():
    rng = np.random.default_rng(1)
    w, p = rng.standard_normal((10, 3)), rng.standard_normal(IDX.size)
    off = np.array([0, 2, 9], np.int64)
    want = _torch(w, IDX, off, mode="sum", per_sample_weights=p)
    got = run(lambda a, b, c: ops.embedding_bag(a, b, off, per_sample_weights=c), w, IDX, p)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_index_out_of_range_raises_at_run_time():
    w = np.zeros((4, 2), np.float32)
    with pytest.raises(ExecutionError, match=r"argument 'indices' holds 4, outside \[0, 4\)"):
        run(lambda a, b, c: ops.embedding_bag(a, b, c), w, np.array([0, 4], np.int64), np.array([0], np.int64))


@pytest.mark.parametrize("specs,kw,msg", [
    ((((4, 2), "float32"), ((3,), "int64"), ((2,), "int64")), {"mode": "min"}, r"argument 'mode' is 'min'"),
    ((((4, 2), "int32"), ((3,), "int64"), ((2,), "int64")), {}, r"argument 'weight' has shape \(4, 2\) and dtype int32"),
    ((((4, 2), "float32"), ((3, 1), "int64"), ((2,), "int64")), {}, r"argument 'indices' has shape \(3, 1\)"),
    ((((4, 2), "float32"), ((3,), "float32"), ((2,), "int64")), {}, r"argument 'indices' has shape \(3,\) and dtype float32"),
    ((((4, 2), "float32"), ((3,), "int64"), ((1,), "int64")), {"include_last_offset": True},
     r"arguments 'indices' \(3,\) and 'offsets' \(1,\); expected static lengths and at least one bag"),
])
def test_bad_input_raises(specs, kw, msg):
    with pytest.raises(BuildError, match="embedding_bag: " + msg):
        build_only(lambda a, b, c: ops.embedding_bag(a, b, c, **kw), *specs)


def test_per_sample_weights_only_with_sum():
    with pytest.raises(BuildError, match=r"embedding_bag: argument 'per_sample_weights' has shape \(3,\) with mode "
                                         r"'mean'; expected \(3,\) with mode 'sum'"):
        build_only(lambda a, b, c, d: ops.embedding_bag(a, b, c, mode="mean", per_sample_weights=d),
                   ((4, 2), "float32"), ((3,), "int64"), ((2,), "int64"), ((3,), "float32"))
