"""Every op kind's default GPU schedule through the public ``mlc.compile(mod, target="cuda")``
(the whole CPU-shared stage list: graph, schedule, prepare; then the GPU lowering, with the
kernels assembled by ``ptxas`` for sm_90 as ``cubin-format=bin`` does when ptxas is on PATH).
Without a GPU the call ends, after all of that, in the clear "needs a GPU" ExecutionError; on a
GPU the results are compared with numpy / PyTorch. A stage that only a lower-level entry point
skipped (the CPU prepare stage's border fills reaching the CUDA path) fails here."""

import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.runtime.cuda import cuda_available
from mlc_mlir.schedule.default_rules import classify
from mlc_mlir.schedule.schedule import Schedule
from mlc_mlir.target import Target

pytestmark = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
CUDA = Target("cuda", cpu="generic", arch="sm_90")
rng = np.random.default_rng(0)


def _r(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _t(a):
    return torch.from_numpy(a).double()


X4, W3, WG, WT = _r(1, 8, 12, 12), _r(16, 8, 3, 3), _r(8, 2, 3, 3), _r(8, 4, 4, 4)
A, B, BA, BB = _r(64, 48), _r(48, 32), _r(3, 16, 24), _r(3, 24, 8)
TABLE, IDX = _r(10, 6), np.array([[0, 9], [-3, 4]], np.int64)

#: name -> (graph builder on the function's args, inputs, oracle). Together they reach every
#: key of GPU_RULES (checked below) and the pads, flips and checks around them.
CASES = {
    "elementwise_gelu": (lambda f, x: ops.gelu(x), [A], None),
    "broadcast_add": (lambda f, x, b: ops.relu(ops.add(x, b)), [A, _r(48)], lambda a, b: np.maximum(a + b, 0)),
    "transpose": (lambda f, x: ops.transpose(x, [1, 0]), [A], lambda a: a.T),
    "row_sum": (lambda f, x: ops.sum(x, axis=1), [A], lambda a: a.sum(1)),
    "softmax": (lambda f, x: ops.softmax(x, axis=-1), [A],
                lambda a: np.exp(a - a.max(-1, keepdims=True)) / np.exp(a - a.max(-1, keepdims=True)).sum(-1, keepdims=True)),
    "matmul": (lambda f, a, b: ops.matmul(a, b), [A, B], lambda a, b: a @ b),
    "batch_matmul": (lambda f, a, b: ops.batch_matmul(a, b), [BA, BB], lambda a, b: a @ b),
    "conv2d_padded": (lambda f, x, w: ops.relu(ops.conv2d(x, w, padding=1)), [X4, W3],
                      lambda x, w: F.relu(F.conv2d(_t(x), _t(w), padding=1)).numpy()),
    "conv2d_constant_weight_strided": (lambda f, x: ops.conv2d(x, W3, strides=2, padding=1), [X4],
                                       lambda x: F.conv2d(_t(x), _t(W3), stride=2, padding=1).numpy()),
    "grouped_conv2d": (lambda f, x, w: ops.conv2d(x, w, padding=1, groups=4), [X4, WG],
                       lambda x, w: F.conv2d(_t(x), _t(w), padding=1, groups=4).numpy()),
    "conv_transpose2d": (lambda f, x, w: ops.conv_transpose2d(x, w, strides=2, padding=1), [X4, WT],
                         lambda x, w: F.conv_transpose2d(_t(x), _t(w), stride=2, padding=1).numpy()),
    "max_pool2d_padded": (lambda f, x: ops.max_pool2d(x, 3, strides=2, padding=(1, 1)), [X4],
                          lambda x: F.max_pool2d(_t(x), 3, stride=2, padding=1).numpy()),
    "avg_pool2d": (lambda f, x: ops.avg_pool2d(x, 2), [X4], lambda x: F.avg_pool2d(_t(x), 2).numpy()),
    "take_checked": (lambda f, t, i: ops.take(t, i), [TABLE, IDX], lambda t, i: t[i]),
    "layer_norm": (lambda f, x: ops.layer_norm(x, np.ones(48, np.float32), np.zeros(48, np.float32), axis=-1), [A],
                   lambda a: F.layer_norm(_t(a), (48,), eps=1e-5).numpy()),
}


def _module(name):
    build, inputs, _ = CASES[name]
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        args = [f.arg(f"x{i}", a.shape, dtype=str(a.dtype)) for i, a in enumerate(inputs)]
        f.output(build(f, *args))
    return bb.finish()


@pytest.mark.parametrize("name", sorted(CASES))
def test_public_compile_for_cuda(name):
    mod = _module(name)
    if not cuda_available():
        with pytest.raises(mlc.ExecutionError, match="needs a GPU"):
            mlc.compile(mod, target=CUDA)
        return
    _, inputs, oracle = CASES[name]
    got = mlc.compile(mod, target=CUDA)(*inputs)
    if oracle is not None:
        np.testing.assert_allclose(got, oracle(*inputs), rtol=1e-4, atol=1e-4)


def test_cases_reach_every_gpu_rule():
    from mlc_mlir.schedule.rules.gpu_rules import GPU_RULES
    kinds = set()
    for name in CASES:
        sch = Schedule(_module(name))
        kinds |= {classify(info) for info in sch.model.ops.values()}
    assert set(GPU_RULES) - {"conv2d_nhwc", "pooling_nhwc"} <= kinds, set(GPU_RULES) - kinds
