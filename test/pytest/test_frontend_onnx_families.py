"""ONNX AveragePool (dilations, ``ceil_mode`` with counted pads, uneven 3-D pads) and the
families Compress, ReverseSequence, Det, SwiGLU, MeanVarianceNormalization, EyeLike, Upsample,
Scatter, Pow with an integer base and a float exponent, BatchNormalization in training mode, BitCast through
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
         "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True",
         "test_compress_default_axis", "test_compress_negative_axis", "test_reversesequence_batch", "test_det_nd",
         "test_swiglu_alpha", "test_mvn", "test_eyelike_populate_off_main_diagonal", "test_eyelike_with_dtype",
         "test_scatter_with_axis", "test_upsample_nearest", "test_pow_types_int64_float32",
         "test_batchnorm_epsilon_training_mode", "test_bitcast_2d_float32_to_int32", "test_bitcast_int32_to_float32"]


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


def test_compress_matches_reference(rng):
    """A constant condition shorter than the axis (numpy: the rest is false) and one bound as
    a graph input with ``input_values``; a run-time condition is refused."""
    x = rng.standard_normal((3, 5, 2)).astype(np.float32)
    cond = np.array([True, False, True, True])
    node = helper.make_node("Compress", ["x", "c"], ["y"], axis=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [helper.make_tensor("c", TensorProto.BOOL, cond.shape, cond)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    np.testing.assert_array_equal(_run(model, {"x": x}), np.compress(cond, x, axis=1))
    free = _model("Compress", [("x", x.shape), ("c", (5,), TensorProto.BOOL)], {}, 11)
    c = np.array([0, 1, 1, 0, 1], bool)
    got = mlc.compile(mlc.from_onnx(free, input_values={"c": c}))(x)
    np.testing.assert_array_equal(np.asarray(got), ReferenceEvaluator(free).run(None, {"x": x, "c": c})[0])
    with pytest.raises(BuildError, match=r"\(Compress\): input 'condition' is computed at run time; "
                                         r"expected a constant"):
        mlc.from_onnx(free)
    with pytest.raises(BuildError, match=r"\(Compress\): input 'condition' has 31 entries; expected at most 30"):
        mlc.from_onnx(free, input_values={"c": np.ones(31, bool)})


@pytest.mark.parametrize("shape,time_axis,batch_axis", [((5, 3, 2, 3), 0, 1), ((4, 6), 1, 0), ((1, 7, 2), 1, 0)])
def test_reverse_sequence_matches_onnxruntime(rng, shape, time_axis, batch_axis):
    """Run-time lengths from 1 to the full time extent, trailing feature axes."""
    x = rng.standard_normal(shape).astype(np.float32)
    lens = rng.integers(1, shape[time_axis] + 1, shape[batch_axis]).astype(np.int64)
    model = _model("ReverseSequence", [("x", shape), ("lens", lens.shape, TensorProto.INT64)],
                   dict(time_axis=time_axis, batch_axis=batch_axis), 10)
    _check_ort(model, {"x": x, "lens": lens}, rtol=0, atol=0)


def test_reverse_sequence_refusals():
    with pytest.raises(BuildError, match=r"\(ReverseSequence\): input 'input' has shape \(4, 3, 2\) with time_axis 0, "
                                         r"batch_axis 2; expected rank >= 2 and the axes 0 and 1"):
        mlc.from_onnx(_model("ReverseSequence", [("x", (4, 3, 2)), ("l", (2,), TensorProto.INT64)],
                             dict(batch_axis=2), 10))


@pytest.mark.parametrize("shape", [(5, 5), (2, 3, 4, 4), (3, 1, 1), (2, 7, 7)])
def test_det_matches_numpy(rng, shape):
    """Random matrices (pivoting needed), 1 x 1 and a batch of singular ones (exactly 0)."""
    x = rng.standard_normal(shape).astype(np.float32)
    if shape == (2, 7, 7):
        x[0, 3] = x[0, 1] * 2.0  # two proportional rows
        x[1, :, 0] = 0.0         # a zero column: every pivot candidate of step 0 is 0
    model = _model("Det", [("x", shape)], {}, 11)
    want = np.linalg.det(x.astype(np.float64))
    np.testing.assert_allclose(_run(model, {"x": x}), want, rtol=1e-4, atol=1e-4)
    _check_ref(model, {"x": x}, rtol=1e-4, atol=1e-4)


def test_det_refusals():
    with pytest.raises(BuildError, match=r"det: argument 'x' has shape \(2, 3\); expected static \(\.\.\., n, n\)"):
        mlc.from_onnx(_model("Det", [("x", (2, 3))], {}, 11))
    with pytest.raises(BuildError, match=r"det: argument 'x' has order 65; expected at most 64"):
        mlc.from_onnx(_model("Det", [("x", (65, 65))], {}, 11))


def test_swiglu_and_mvn_match_reference(rng):
    a, b = (rng.standard_normal((2, 3, 5)).astype(np.float32) for _ in range(2))
    _check_ref(_model("SwiGLU", [("a", a.shape), ("b", b.shape)], dict(alpha=1.7), 28), {"a": a, "b": b})
    with pytest.raises(BuildError, match=r"\(SwiGLU\): inputs 'A' \(2, 3\) and 'B' \(1, 3\); expected identical"):
        mlc.from_onnx(_model("SwiGLU", [("a", (2, 3)), ("b", (1, 3))], {}, 28))
    x = (rng.standard_normal((2, 3, 4, 5)) * 3 + 1).astype(np.float32)
    for axes in ([0, 2, 3], [1, -1], [3]):
        _check_ort(_model("MeanVarianceNormalization", [("x", x.shape)], dict(axes=axes), 13), {"x": x}, rtol=1e-4,
                   atol=1e-5)


@pytest.mark.parametrize("shape,k,dtype", [((3, 5), 2, None), ((6, 2), -3, TensorProto.INT32),
                                           ((4, 4), 7, TensorProto.DOUBLE)])
def test_eye_like_matches_onnxruntime(shape, k, dtype):
    attrs = dict(k=k) if dtype is None else dict(k=k, dtype=dtype)
    model = _model("EyeLike", [("x", shape)], attrs, 9, out_type=dtype or TensorProto.FLOAT)
    _check_ort(model, {"x": np.zeros(shape, np.float32)}, rtol=0, atol=0)


@pytest.mark.parametrize("mode,scales", [("linear", [1.0, 1.0, 2.0, 3.0]), ("nearest", [1.0, 2.0, 1.5, 2.5])])
def test_upsample_matches_onnxruntime(rng, mode, scales):
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    node = helper.make_node("Upsample", ["x", "s"], ["y"], mode=mode)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [helper.make_tensor("s", TensorProto.FLOAT, (4,), scales)])
    _check_ort(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)]), {"x": x})


def test_pow_int_base_float_exponent_matches_reference(rng):
    a = rng.integers(0, 7, (3, 4)).astype(np.int32)  # a negative base with a fractional exponent is NaN
    b = rng.uniform(0, 3, (4,)).astype(np.float32).round(0) + np.float32(0.25) * (rng.uniform(size=4) > 0.5)
    model = _model("Pow", [("a", a.shape, TensorProto.INT32), ("b", b.shape)], {}, 15, out_type=TensorProto.INT32)
    _check_ref(model, {"a": a, "b": b.astype(np.float32)}, rtol=0, atol=0)


def test_batch_norm_training_mode_matches_reference(rng):
    """Batch statistics over (N, H, W) of a 4-D input with an odd momentum and epsilon, and
    the running statistics outputs."""
    x = rng.standard_normal((3, 4, 5, 2)).astype(np.float32)
    s, b, m = (rng.standard_normal(4).astype(np.float32) for _ in range(3))
    v = rng.uniform(0.5, 2.0, 4).astype(np.float32)
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1,
                            momentum=0.7, epsilon=1e-3)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, a.shape)
                                            for k, a in zip("xsbmv", (x, s, b, m, v))],
                              [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in ("y", "rm", "rv")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    feeds = dict(zip("xsbmv", (x, s, b, m, v)))
    got = mlc.compile(mlc.from_onnx(model))(x, s, b, m, v)
    for g, w in zip(got, ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("src,dst,onnx_to", [(np.float32, np.int32, TensorProto.INT32),
                                             (np.int64, np.float64, TensorProto.DOUBLE),
                                             (np.float16, np.int16, TensorProto.INT16)])
def test_bitcast_matches_numpy_view(rng, src, dst, onnx_to):
    """Odd shape, NaN/inf/negative zero bit patterns kept; bit widths must match."""
    x = (rng.standard_normal((3, 1, 5)) * 100).astype(src)
    if np.issubdtype(src, np.floating):
        x.flat[:3] = [np.nan, -np.inf, -0.0]
    src_t = helper.np_dtype_to_tensor_dtype(np.dtype(src))
    model = _model("BitCast", [("x", x.shape, src_t)], dict(to=onnx_to), 26, out_type=onnx_to)
    np.testing.assert_array_equal(_run(model, {"x": x}).view(np.uint8), x.view(dst).view(np.uint8))
    with pytest.raises(BuildError, match=r"bitcast: dtypes float32 -> int64; expected two non-bool dtypes of one bit"):
        mlc.from_onnx(_model("BitCast", [("x", (2,))], dict(to=TensorProto.INT64), 26, out_type=TensorProto.INT64))
