"""ONNX GridSample, AffineGrid, DepthToSpace, SpaceToDepth, Col2Im and 3-D pooling through ``from_onnx`` +
``compile``: the onnx wheel's own backend node cases (reference outputs from
``onnx.reference``), onnxruntime for what they leave out, and the refusals."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from test_frontend_onnx_models import _run_backend_cases

import mlc_mlir as mlc
from mlc_mlir.errors import BuildError

CASES = ["test_gridsample", "test_gridsample_reflection_padding", "test_gridsample_bicubic",
         "test_gridsample_nearest_align_corners_1_additional_1",
         "test_gridsample_volumetric_bilinear_align_corners_0", "test_maxpool_3d_dilations_use_ref_impl_large",
         "test_maxpool_3d_default", "test_lppool_3d_default", "test_averagepool_3d_default",
         "test_col2im_pads", "test_col2im_dilations", "test_col2im_5d", "test_depthtospace_crd_mode_example",
         "test_spacetodepth_crd_mode_example", "test_spacetodepth_example", "test_affine_grid_3d_align_corners"]


@pytest.mark.parametrize("name", CASES)
def test_backend_case(name):
    _run_backend_cases("OnnxBackendNodeModelTest", [name])


def _model(op, inputs, attrs, opset):
    """One-node model; ``inputs``: (name, shape) float32 inputs."""
    node = helper.make_node(op, [n for n, _ in inputs], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check_ort(model, feeds, rtol=1e-5, atol=1e-5):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)[0]
    got = mlc.compile(mlc.from_onnx(model))(*[feeds[i.name] for i in model.graph.input])
    np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("mode,pad,align,opset", [("bilinear", "border", 1, 16), ("bicubic", "zeros", 0, 16),
                                                  ("nearest", "reflection", 0, 20), ("linear", "reflection", 1, 20),
                                                  ("cubic", "border", 0, 20), ("cubic", "reflection", 1, 20)])
def test_grid_sample_matches_onnxruntime(rng, mode, pad, align, opset):
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    g = rng.uniform(-1.3, 1.3, (2, 3, 4, 2)).astype(np.float32)
    model = _model("GridSample", [("x", x.shape), ("g", g.shape)],
                   dict(mode=mode, padding_mode=pad, align_corners=align), opset)
    _check_ort(model, {"x": x, "g": g})


def test_grid_sample_refusals():
    with pytest.raises(BuildError, match=r"\(GridSample\): attribute 'mode' is 'linear'; expected one of "
                                         r"\['bilinear', 'nearest', 'bicubic'\] at opset 16"):
        mlc.from_onnx(_model("GridSample", [("x", (1, 1, 3, 3)), ("g", (1, 2, 2, 2))], dict(mode="linear"), 16))
    with pytest.raises(BuildError, match=r"\(GridSample\): input 'X' has shape \(1, 1, 3, 3, 3\); expected "
                                         r"\(N, C, H, W\) at opset 16"):
        mlc.from_onnx(_model("GridSample", [("x", (1, 1, 3, 3, 3)), ("g", (1, 2, 2, 2, 3))], {}, 16))


def test_pool_3d_matches_onnxruntime(rng):
    """Uneven 3-D pads: max pooling (lowest-value pads), Lp pooling (zero pads, p = 3) and
    average pooling with symmetric counted pads."""
    x = rng.standard_normal((2, 3, 5, 6, 7)).astype(np.float32)
    for op, attrs in (("MaxPool", dict(kernel_shape=[2, 3, 2], pads=[1, 0, 1, 0, 2, 1], strides=[2, 1, 2])),
                      ("LpPool", dict(kernel_shape=[3, 2, 2], pads=[0, 1, 1, 1, 0, 1], p=3)),
                      ("AveragePool", dict(kernel_shape=[3, 3, 2], pads=[1, 1, 0, 1, 1, 0], count_include_pad=1))):
        _check_ort(_model(op, [("x", x.shape)], attrs, 18), {"x": x}, rtol=1e-4)


@pytest.mark.parametrize("op,mode", [("DepthToSpace", "DCR"), ("DepthToSpace", "CRD"), ("SpaceToDepth", "DCR")])
def test_depth_space_match_onnxruntime(rng, op, mode):
    shape = (2, 27, 2, 5) if op == "DepthToSpace" else (2, 3, 6, 9)
    x = rng.standard_normal(shape).astype(np.float32)
    attrs = dict(blocksize=3, **({"mode": mode} if op == "DepthToSpace" else {}))
    _check_ort(_model(op, [("x", shape)], attrs, 13), {"x": x}, rtol=0, atol=0)


def test_depth_space_refusals():
    with pytest.raises(BuildError, match=r"\(DepthToSpace\): input 'input' has 6 channels; expected a multiple "
                                         r"of blocksize\^2 = 4"):
        mlc.from_onnx(_model("DepthToSpace", [("x", (1, 6, 2, 2))], dict(blocksize=2), 13))
    with pytest.raises(BuildError, match=r"\(SpaceToDepth\): input 'input' has shape \(1, 1, 5, 4\); expected H "
                                         r"and W multiples of blocksize 2"):
        mlc.from_onnx(_model("SpaceToDepth", [("x", (1, 1, 5, 4))], dict(blocksize=2), 13))


@pytest.mark.parametrize("size,align", [((2, 3, 5, 4), 0), ((2, 1, 1, 7), 1), ((1, 2, 3, 4, 5), 0), ((1, 2, 3, 1, 2), 1)])
def test_affine_grid_matches_torch(rng, size, align):
    """Against ``torch.nn.functional.affine_grid`` (odd sizes, unit axes, 2-D and 3-D)."""
    torch = pytest.importorskip("torch")
    d = len(size) - 2
    theta = rng.standard_normal((size[0], d, d + 1)).astype(np.float32)
    node = helper.make_node("AffineGrid", ["theta", "size"], ["y"], align_corners=align)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("theta", TensorProto.FLOAT, theta.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [helper.make_tensor("size", TensorProto.INT64, (len(size),), size)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    want = torch.nn.functional.affine_grid(torch.from_numpy(theta), size, align_corners=bool(align)).numpy()
    np.testing.assert_allclose(mlc.compile(mlc.from_onnx(model))(theta), want, rtol=1e-5, atol=1e-6)


def test_affine_grid_refusal():
    node = helper.make_node("AffineGrid", ["theta", "size"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("theta", TensorProto.FLOAT, (1, 2, 3))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [helper.make_tensor("size", TensorProto.INT64, (5,), (1, 1, 2, 2, 2))])
    with pytest.raises(BuildError, match=r"\(AffineGrid\): inputs 'theta' \(1, 2, 3\) and 'size' \[1, 1, 2, 2, 2\]; "
                                         r"expected \(N, 2, 3\) with \(N, C, H, W\)"):
        mlc.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]))
