"""ONNX DFT, STFT and the window generators through ``from_onnx`` + ``compile``: the onnx
wheel's backend node cases, onnxruntime on odd shapes (complex input, zero padding and
truncation by ``dft_length``, odd lengths, ``irfft``), and the refusals."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from test_frontend_onnx_models import _run_backend_cases

import mlc_mlir as mlc
from mlc_mlir.errors import BuildError

CASES = ["test_dft", "test_dft_axis_opset19", "test_dft_rfft", "test_dft_irfft_opset19", "test_stft",
         "test_stft_with_window", "test_hannwindow_symmetric", "test_hammingwindow", "test_blackmanwindow"]


@pytest.mark.parametrize("name", CASES)
def test_backend_case(name):
    _run_backend_cases("OnnxBackendNodeModelTest", [name])


def _dft_model(x_shape, length, axis, inverse, onesided, opset=20):
    inits = []
    names = ["x", "", ""]
    if length is not None:
        inits.append(helper.make_tensor("len", TensorProto.INT64, (), [length]))
        names[1] = "len"
    attrs = dict(inverse=inverse, onesided=onesided)
    if opset >= 20:
        inits.append(helper.make_tensor("axis", TensorProto.INT64, (), [axis]))
        names[2] = "axis"
    else:
        attrs["axis"] = axis
    node = helper.make_node("DFT", [v for v in names if v] if opset < 20 else names, ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check_ort(model, feeds, rtol=1e-4, atol=1e-4):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = mlc.compile(mlc.from_onnx(model))(*[feeds[i.name] for i in model.graph.input])
    np.testing.assert_allclose(np.asarray(got), sess.run(None, feeds)[0], rtol=rtol, atol=atol)


@pytest.mark.parametrize("x_shape,length,axis,inverse,onesided", [
    ((2, 7, 3, 2), None, 1, 0, 0),    # complex, odd length
    ((2, 5, 3, 1), 8, 1, 0, 1),       # real, zero padded, onesided
    ((3, 4, 9, 2), 6, -2, 1, 0),      # complex inverse, truncated
    ((2, 3, 6, 1), None, 2, 0, 0),    # real, another axis
])
def test_dft_matches_onnxruntime(rng, x_shape, length, axis, inverse, onesided):
    x = rng.standard_normal(x_shape).astype(np.float32)
    _check_ort(_dft_model(x_shape, length, axis, inverse, onesided), {"x": x})


@pytest.mark.parametrize("bins,length", [(5, 8), (5, 9), (4, 9)])
def test_irfft_matches_numpy(rng, bins, length):
    """Inverse onesided: the Hermitian half spectrum (even and odd lengths, fewer bins than
    ``L // 2 + 1`` read as zeros) to the real signal, as ``numpy.fft.irfft``."""
    spec = rng.standard_normal((2, bins, 2)).astype(np.float32)
    model = _dft_model(spec.shape, length, 1, 1, 1)
    got = np.asarray(mlc.compile(mlc.from_onnx(model))(spec))
    want = np.fft.irfft(spec[..., 0] + 1j * spec[..., 1], n=length, axis=1)[..., None]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_stft_matches_onnxruntime(rng):
    x = rng.standard_normal((2, 37, 1)).astype(np.float32)
    w = np.hanning(10).astype(np.float32)
    node = helper.make_node("STFT", ["x", "step", "w", "len"], ["y"], onesided=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [helper.make_tensor("step", TensorProto.INT64, (), [4]),
                               helper.make_tensor("w", TensorProto.FLOAT, (10,), w),
                               helper.make_tensor("len", TensorProto.INT64, (), [10])])
    _check_ort(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), {"x": x})


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("size,periodic", [(1, 1), (7, 0), (12, 1)])
def test_windows_match_onnxruntime(op, size, periodic):
    node = helper.make_node(op, ["n"], ["y"], periodic=periodic)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [helper.make_tensor("n", TensorProto.INT64, (), [size])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ort = pytest.importorskip("onnxruntime")
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.zeros(1, np.float32)})[0]
    got = mlc.compile(mlc.from_onnx(model))(np.zeros(1, np.float32))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


def test_dft_refusals():
    with pytest.raises(BuildError, match=r"\(DFT\): input 'input' has shape \(2, 4, 3\); expected a last axis of "
                                         r"size 1 \(real\) or 2 \(complex\)"):
        mlc.from_onnx(_dft_model((2, 4, 3), None, 1, 0, 0))
    with pytest.raises(BuildError, match=r"\(DFT\): axis 2; expected in \[0, 2\) \(not the complex axis\)"):
        mlc.from_onnx(_dft_model((2, 4, 2), None, -1, 0, 0))
