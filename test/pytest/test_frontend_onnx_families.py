"""ONNX AveragePool (dilations, ``ceil_mode`` with counted pads, uneven 3-D pads) and the
families Compress, ReverseSequence, Det, SwiGLU, MeanVarianceNormalization, EyeLike through
``from_onnx`` + ``compile``: the onnx wheel's own backend node cases (reference outputs from
``onnx.reference``), onnxruntime or ``onnx.reference.ReferenceEvaluator`` on odd shapes, and
the refusals."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from test_frontend_onnx_models import _run_backend_cases

import mlc_mlir as mlc
from mlc_mlir.errors import BuildError

CASES = ["test_averagepool_2d_dilations", "test_averagepool_3d_dilations_small",
         "test_averagepool_2d_ceil_last_window_starts_on_pad",
         "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True"]


@pytest.mark.parametrize("name", CASES)
def test_backend_case(name):
    _run_backend_cases("OnnxBackendNodeModelTest", [name])


def _model(op, inputs, attrs, opset, out_type=TensorProto.FLOAT, domain=""):
    """One-node model; ``inputs``: (name, shape[, element type]) inputs (float32 by default)."""
    node = helper.make_node(op, [i[0] for i in inputs], ["y"], domain=domain, **attrs)
    vis = [helper.make_tensor_value_info(i[0], i[2] if len(i) > 2 else TensorProto.FLOAT, i[1]) for i in inputs]
    graph = helper.make_graph([node], "g", vis, [helper.make_tensor_value_info("y", out_type, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model, feeds):
    return np.asarray(mlc.compile(mlc.from_onnx(model))(*[feeds[i.name] for i in model.graph.input]))


def _check_ort(model, feeds, rtol=1e-5, atol=1e-5):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(_run(model, feeds), sess.run(None, feeds)[0], rtol=rtol, atol=atol)


def _check_ref(model, feeds, rtol=1e-5, atol=1e-5):
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(_run(model, feeds), want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("shape,attrs", [
    ((2, 3, 11), dict(kernel_shape=[3], dilations=[2], pads=[2, 1], strides=[2], ceil_mode=1, count_include_pad=1)),
    ((1, 2, 9, 7), dict(kernel_shape=[2, 3], dilations=[3, 2], pads=[1, 0, 1, 2], strides=[2, 1])),
    ((1, 2, 7, 6), dict(kernel_shape=[3, 2], pads=[1, 1, 1, 0], strides=[2, 2], ceil_mode=1, count_include_pad=1)),
    ((2, 1, 5, 6, 7), dict(kernel_shape=[2, 3, 2], pads=[1, 0, 1, 0, 2, 1], strides=[2, 1, 2])),
    ((1, 2, 6, 5, 7), dict(kernel_shape=[2, 2, 3], dilations=[2, 1, 2], pads=[0, 1, 1, 1, 0, 1],
                           ceil_mode=1, count_include_pad=1, strides=[2, 2, 1])),
])
def test_avg_pool_general_matches_onnxruntime(rng, shape, attrs):
    """Dilations, uneven pads, ``ceil_mode`` with counted pads (whose extra end padding is
    not counted), 1-D to 3-D."""
    x = rng.standard_normal(shape).astype(np.float32)
    _check_ort(_model("AveragePool", [("x", x.shape)], attrs, 19), {"x": x}, rtol=1e-5)
