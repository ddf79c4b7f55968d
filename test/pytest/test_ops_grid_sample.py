"""``ops.grid_sample`` against PyTorch's ``grid_sample`` (2-D and 3-D, every mode, padding mode
and ``align_corners``) and the ONNX reference implementation (1-D and 3-D cubic, which PyTorch
lacks), plus its errors."""

import itertools

import numpy as np
import pytest
from opcheck import build_only, run

from mlc_mlir import ops
from mlc_mlir.errors import BuildError

torch = pytest.importorskip("torch")

_TORCH_MODE = {"nearest": "nearest", "linear": "bilinear", "cubic": "bicubic"}


def _torch(x, g, mode, pad, align):
    return torch.nn.functional.grid_sample(torch.from_numpy(x), torch.from_numpy(g), mode=_TORCH_MODE[mode],
                                           padding_mode=pad, align_corners=align).numpy()


def _grid(rng, shape, dtype=np.float32):
    """Coordinates in [-1.6, 1.6] (outside the input too), some exactly on pixel centres and
    half-way between them (rounding ties)."""
    g = rng.uniform(-1.6, 1.6, shape)
    g.reshape(-1)[::7] = 0.5
    g.reshape(-1)[::11] = -1.0
    return g.astype(dtype)


@pytest.mark.parametrize("mode,pad,align", list(itertools.product(
    ["nearest", "linear", "cubic"], ["zeros", "border", "reflection"], [False, True])))
def test_2d_matches_torch(mode, pad, align):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    g = _grid(rng, (2, 4, 9, 2))
    np.testing.assert_allclose(run(lambda a, b: ops.grid_sample(a, b, mode, pad, align), x, g),
                               _torch(x, g, mode, pad, align), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode,pad,align", [("nearest", "zeros", False), ("linear", "border", True),
                                            ("linear", "reflection", False), ("nearest", "reflection", True)])
def test_3d_matches_torch(mode, pad, align):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    g = _grid(rng, (1, 2, 3, 5, 3))
    np.testing.assert_allclose(run(lambda a, b: ops.grid_sample(a, b, mode, pad, align), x, g),
                               _torch(x, g, mode, pad, align), rtol=1e-5, atol=1e-5)


def test_float64_and_unit_axes_match_torch():
    """float64 arithmetic, a unit spatial axis (reflection about a single pixel) and a 1x1 output."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 1, 1, 6))
    for g in (_grid(rng, (3, 2, 5, 2), np.float64), _grid(rng, (3, 1, 1, 2), np.float64)):
        for mode, pad, align in (("linear", "reflection", True), ("cubic", "zeros", False),
                                 ("nearest", "border", False)):
            np.testing.assert_allclose(run(lambda a, b: ops.grid_sample(a, b, mode, pad, align), x, g),
                                       _torch(x, g, mode, pad, align), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_nan_coordinates_match_torch(mode):
    """A NaN coordinate reads no element (its taps are outside the input): 0 for nearest, NaN
    weights for linear and cubic, as in PyTorch with zero padding."""
    x = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)
    g = np.full((1, 1, 2, 2), np.nan, np.float32)
    g[0, 0, 1] = [0.0, 0.0]
    got = run(lambda a, b: ops.grid_sample(a, b, mode, "zeros", True), x, g)
    np.testing.assert_array_equal(got, _torch(x, g, mode, "zeros", True))


onnx = pytest.importorskip("onnx")


def _onnx_reference(x, g, mode, pad, align):
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=pad, align_corners=int(align))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                                            helper.make_tensor_value_info("g", TensorProto.FLOAT, g.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    return ReferenceEvaluator(model).run(None, {"x": x, "g": g})[0]


@pytest.mark.parametrize("shape,out,mode,align", [
    ((2, 3, 6), (2, 5), "linear", False), ((2, 3, 6), (2, 5), "cubic", True), ((1, 2, 7), (1, 4), "nearest", True),
    ((1, 2, 3, 4, 5), (1, 2, 3, 4), "cubic", False)])
def test_1d_and_3d_cubic_match_onnx_reference(shape, out, mode, align):
    """Zero padding (where ONNX's reference pads the coordinate as PyTorch does)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape).astype(np.float32)
    g = _grid(rng, out + (len(shape) - 2,))
    np.testing.assert_allclose(run(lambda a, b: ops.grid_sample(a, b, mode, "zeros", align), x, g),
                               _onnx_reference(x, g, mode, "zeros", align), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("specs,kw,msg", [
    ((((1, 2, 4, 4), "float32"), ((1, 3, 3, 3), "float32")), {}, r"argument 'grid' has shape \(1, 3, 3, 3\); expected \(1, O_1, O_2, 2\)"),
    ((((2, 2, 4, 4), "float32"), ((1, 3, 3, 2), "float32")), {}, r"argument 'grid' has shape \(1, 3, 3, 2\)"),
    ((((1, 4), "float32"), ((1, 3), "float32")), {}, r"argument 'x' has shape \(1, 4\); expected \(N, C, S_1"),
    ((((1, 2, 4, 4), "int32"), ((1, 3, 3, 2), "float32")), {}, r"argument 'x' has dtype int32; expected a float"),
    ((((1, 2, 4, 4), "float32"), ((1, 3, 3, 2), "int64")), {}, r"argument 'grid' has dtype int64"),
    ((((1, 2, 4, 4), "float32"), ((1, 3, 3, 2), "float32")), {"mode": "bilinear"}, r"argument 'mode' is 'bilinear'"),
    ((((1, 2, 4, 4), "float32"), ((1, 3, 3, 2), "float32")), {"padding_mode": "wrap"},
     r"argument 'padding_mode' is 'wrap'; expected one of \['zeros', 'border', 'reflection'\]"),
    ((((1, 2, 0, 4), "float32"), ((1, 3, 3, 2), "float32")), {}, r"argument .x. has shape \(1, 2, 0, 4\); expected non-empty spatial axes"),
])
def test_bad_input_raises(specs, kw, msg):
    with pytest.raises(BuildError, match="grid_sample: " + msg):
        build_only(lambda a, b: ops.grid_sample(a, b, **kw), *specs)
