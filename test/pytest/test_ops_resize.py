"""``ops.resize`` (ONNX ``Resize`` semantics) against independent oracles: PyTorch's
``interpolate`` and the ONNX reference implementation."""

import itertools

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.errors import BuildError

torch = pytest.importorskip("torch")


def _run(x, **kw):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        t = f.arg("x", shape=x.shape, dtype=str(x.dtype))
        f.output(ops.resize(t, **kw))
    return mlc.compile(bb.finish())(x)


@pytest.mark.parametrize("mode,align", [("nearest", None), ("bilinear", False), ("bilinear", True),
                                        ("bicubic", False), ("bicubic", True)])
@pytest.mark.parametrize("size", [(11, 6), (3, 13)])
def test_matches_torch_interpolate(mode, align, size):
    """Up- and downsampling of H and W like ``torch.nn.functional.interpolate``: ``nearest`` is
    ONNX asymmetric + floor, ``bilinear``/``bicubic`` are half_pixel (align_corners=False, the
    cubic kernel with A = -0.75) or align_corners."""
    x = np.random.default_rng(0).standard_normal((2, 3, 7, 9)).astype(np.float32)
    want = torch.nn.functional.interpolate(torch.from_numpy(x), size=size, mode=mode,
                                           align_corners=align).numpy()
    if mode == "nearest":
        kw = dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    else:
        kw = dict(mode="linear" if mode == "bilinear" else "cubic",
                  coordinate_transformation_mode="align_corners" if align else "pytorch_half_pixel")
    got = _run(x, sizes=size, axes=[2, 3], **kw)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


onnx = pytest.importorskip("onnx")


def _onnx_reference(x, attrs, scales=None, sizes=None, roi=None):
    from onnx import helper, TensorProto
    from onnx.reference import ReferenceEvaluator
    inputs = ["x", "roi" if roi is not None else "", "scales" if scales is not None else "",
              "sizes" if sizes is not None else ""]
    while inputs[-1] == "":
        inputs.pop()
    node = helper.make_node("Resize", inputs, ["y"], **attrs)
    feeds = {"x": x}
    vi = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)]
    for name, v, dt in (("roi", roi, np.float32), ("scales", scales, np.float32), ("sizes", sizes, np.int64)):
        if v is not None:
            feeds[name] = np.asarray(v, dt)
            vi.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dt)),
                                                    feeds[name].shape))
    graph = helper.make_graph([node], "g", vi, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    return ReferenceEvaluator(model).run(None, feeds)[0]


CASES = [
    dict(mode="nearest", coordinate_transformation_mode=c, nearest_mode=m)
    for c, m in itertools.product(["half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"],
                                  ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
] + [
    dict(mode="linear", coordinate_transformation_mode="half_pixel_symmetric"),
    dict(mode="linear", antialias=1),
    dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1),
    dict(mode="cubic", antialias=1),
]


@pytest.mark.parametrize("attrs", CASES)
@pytest.mark.parametrize("scales", [[1.0, 1.0, 0.6, 1.7], [1.0, 1.0, 2.0, 0.5]])
def test_matches_onnx_reference_scales(attrs, scales):
    x = np.random.default_rng(1).standard_normal((1, 2, 8, 6)).astype(np.float32)
    want = _onnx_reference(x, attrs, scales=scales)
    kw = {k: (bool(v) if k in ("antialias", "exclude_outside") else v) for k, v in attrs.items()}
    # ONNX scales are float32: 1.7 rounds below 1.7, which moves a nearest tie
    scales32 = np.asarray(scales, np.float32).tolist()
    np.testing.assert_allclose(_run(x, scales=scales32, **kw), want, rtol=1e-5, atol=1e-5)


def test_crop_and_resize_extrapolates_and_keeps_aspect_ratio():
    x = np.random.default_rng(2).standard_normal((1, 1, 6, 7)).astype(np.float32)
    attrs = dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
                 extrapolation_value=-7.0, axes=[2, 3])
    roi = [-0.2, 0.3, 0.9, 1.4]   # starts then ends: part of the box lies outside the image
    want = _onnx_reference(x, attrs, sizes=[5, 4], roi=roi)
    assert (want == -7.0).any() and (want != -7.0).any()
    got = _run(x, sizes=[5, 4], roi=roi, mode="linear", axes=[2, 3], extrapolation_value=-7.0,
               coordinate_transformation_mode="tf_crop_and_resize")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    attrs = dict(mode="nearest", axes=[3, 2], keep_aspect_ratio_policy="not_larger")
    want = _onnx_reference(x, attrs, sizes=[20, 9])
    got = _run(x, sizes=[20, 9], mode="nearest", axes=[3, 2], keep_aspect_ratio_policy="not_larger")
    assert got.shape == want.shape == (1, 1, 9, 11)
    np.testing.assert_array_equal(got, want)


def test_nearest_resizes_integers_exactly():
    x = np.arange(24, dtype=np.int32).reshape(1, 4, 6)
    got = _run(x, scales=[1.0, 2.0, 0.5], mode="nearest", coordinate_transformation_mode="asymmetric",
               nearest_mode="floor")
    np.testing.assert_array_equal(got, x[:, np.arange(8) // 2][:, :, ::2])


@pytest.mark.parametrize("kw,msg", [
    (dict(scales=[2.0], sizes=[3]), "exactly one of 'sizes' and 'scales'"),
    (dict(scales=[2.0, 2.0]), "argument 'scales'"),
    (dict(sizes=[3], mode="area"), "argument 'mode' is 'area'"),
    (dict(sizes=[3], mode="nearest", antialias=True), "antialias"),
    (dict(sizes=[3], coordinate_transformation_mode="tf_crop_and_resize"), "needs 'roi'"),
    (dict(sizes=[3], axes=[1]), "argument 'axes'"),
])
def test_bad_arguments_name_the_problem(kw, msg):
    bb = mlc.GraphBuilder()
    with pytest.raises(BuildError, match=msg):
        with bb.function("main") as f:
            f.output(ops.resize(f.arg("x", shape=(5,)), **kw))
