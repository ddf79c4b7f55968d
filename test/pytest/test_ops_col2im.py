"""``ops.col2im`` against PyTorch's ``fold`` (2-D: strides, pads, dilations, odd sizes,
overlapping and disjoint blocks) and a numpy loop (1-D, 3-D, uneven pads, int), plus its errors."""

import itertools

import numpy as np
import pytest
from opcheck import build_only, run

from mlc_mlir import ops
from mlc_mlir.errors import BuildError

torch = pytest.importorskip("torch")


def _blocks(size, k, s, p, d):
    return [(size[i] + p[i] + p[len(size) + i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(len(size))]


def _numpy_col2im(x, size, k, s, p, d):
    """The definition: add each column's block at its place in the padded image, then crop."""
    nd = len(size)
    blocks = _blocks(size, k, s, p, d)
    n, ck, _ = x.shape
    c = ck // int(np.prod(k))
    out = np.zeros((n, c) + tuple(size[i] + p[i] + p[nd + i] for i in range(nd)), x.dtype)
    cols = x.reshape((n, c) + tuple(k) + (-1,))
    for li, b in enumerate(itertools.product(*[range(B) for B in blocks])):
        for kp in itertools.product(*[range(kk) for kk in k]):
            pos = tuple(b[i] * s[i] + kp[i] * d[i] for i in range(nd))
            out[(slice(None), slice(None)) + pos] += cols[(slice(None), slice(None)) + kp + (li,)]
    return out[(slice(None), slice(None)) + tuple(slice(p[i], p[i] + size[i]) for i in range(nd))]


@pytest.mark.parametrize("c,size,k,s,p,d", [
    (3, (7, 9), (2, 3), (1, 2), (1, 0), (1, 1)), (2, (8, 6), (3, 2), (2, 1), (0, 1), (2, 1)),
    (1, (5, 5), (5, 5), 1, 0, 1), (4, (6, 10), (2, 2), (2, 2), 0, 1), (2, (11, 4), (3, 1), (3, 1), (2, 1), (1, 2))])
def test_2d_matches_torch_fold(c, size, k, s, p, d):
    two = lambda v: v if isinstance(v, tuple) else (v, v)  # noqa: E731
    blocks = _blocks(size, k, two(s), two(p) * 2, two(d))
    x = np.random.default_rng(0).standard_normal((2, c * k[0] * k[1], blocks[0] * blocks[1])).astype(np.float32)
    want = torch.nn.functional.fold(torch.from_numpy(x), size, k, dilation=d, padding=p, stride=s).numpy()
    np.testing.assert_allclose(run(lambda a: ops.col2im(a, size, k, strides=s, pads=p, dilations=d), x), want,
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype,size,k,s,p,d", [
    ("float32", (9,), (3,), (2,), (1, 2), (1,)), ("float64", (4, 5, 3), (2, 3, 2), (1, 2, 1), (1, 0, 0, 0, 1, 1), (1, 1, 2)),
    ("int32", (6, 5), (2, 2), (2, 1), (0, 1, 1, 0), (1, 2))])
def test_nd_matches_numpy(dtype, size, k, s, p, d):
    blocks = _blocks(size, k, s, p, d)
    x = (np.random.default_rng(1).standard_normal((2, 3 * int(np.prod(k)), int(np.prod(blocks)))) * 10).astype(dtype)
    want = _numpy_col2im(x, size, k, s, p, d)
    np.testing.assert_allclose(run(lambda a: ops.col2im(a, size, k, strides=s, pads=p, dilations=d), x), want,
                               rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("shape,kw,msg", [
    ((1, 4, 10), dict(image_shape=(4, 4), block_shape=(2, 2)),
     r"argument 'x' has shape \(1, 4, 10\); expected \(N, C \* 4, 9\): 3 x 3 blocks of 2 x 2 in \(4, 4\)"),
    ((1, 6, 9), dict(image_shape=(4, 4), block_shape=(2, 2)), r"argument 'x' has shape \(1, 6, 9\)"),
    ((4, 9), dict(image_shape=(4, 4), block_shape=(2, 2)), r"argument 'x' has shape \(4, 9\)"),
    ((1, 4, 1), dict(image_shape=(4, 4), block_shape=(5, 2)), r"blocks \[5, 2\] with dilations \[1, 1\] span \[5, 2\]"),
    ((1, 4, 9), dict(image_shape=(4, 4), block_shape=(2, 2), strides=(0, 1)), r"argument 'strides' is \(0, 1\)"),
    ((1, 4, 9), dict(image_shape=(4, 4), block_shape=(2, 2), pads=(1, 1, 1)), r"argument 'pads' is \(1, 1, 1\)"),
])
def test_bad_input_raises(shape, kw, msg):
    with pytest.raises(BuildError, match="col2im: " + msg):
        build_only(lambda a: ops.col2im(a, **kw), (shape, "float32"))
