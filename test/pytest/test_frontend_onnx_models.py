"""ONNX frontend, model sets and the converters they needed: single-node models vs
``onnx.reference.ReferenceEvaluator``, ConstantOfShape as a splat constant, the smallest light
model-zoo CNN and a subset of the ``pytorch-operator`` / ``pytorch-converted`` suites through
``onnx.backend.test.BackendTest`` (the full runs: ``benchmarks/conformance/onnx_backend.py
--suite all``), and ``mlc.from_onnx`` without importing onnx eagerly."""

import subprocess
import sys
import unittest

import numpy as np
import pytest

import mlc_mlir as mlc

onnx = pytest.importorskip("onnx")
import onnx.backend.test  # noqa: E402
from onnx import TensorProto as TP, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from mlc_mlir.frontends.onnx_backend import make_backend  # noqa: E402

RNG = np.random.default_rng(0)


def _node_model(op, shape, opset, extra_inits=(), out_type=TP.FLOAT, **attrs):
    inputs = ["x"] + [name for name, _ in extra_inits]
    node = helper.make_node(op, inputs, ["y"], **attrs)
    inits = [helper.make_tensor(name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape, a.ravel())
             for name, a in extra_inits]
    g = helper.make_graph([node], op, [helper.make_tensor_value_info("x", TP.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", out_type, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


I64 = lambda *v: np.array(v, np.int64)  # noqa: E731
CASES = [
    ("Elu", (3, 4), 13, (), {"alpha": 0.7}),
    ("Selu", (3, 4), 13, (), {}),
    ("Softsign", (3, 4), 13, (), {}),
    ("Sign", (3, 4), 13, (), {}),
    ("Shrink", (3, 4), 13, (), {"lambd": 0.4, "bias": 0.1}),
    ("HardSwish", (3, 4), 14, (), {}),
    ("Tile", (2, 3), 13, (("r", I64(2, 3)),), {}),
    ("Trilu", (2, 4, 5), 14, (("k", I64(1)),), {"upper": 0}),
    ("CumSum", (3, 4, 5), 14, (("axis", np.array(1, np.int64)),), {"exclusive": 1, "reverse": 1}),
    ("ReduceL2", (3, 4, 5), 18, (("axes", I64(1, 2)),), {"keepdims": 0}),
    ("ReduceLogSumExp", (3, 4, 5), 18, (("axes", I64(-1)),), {"keepdims": 1}),
    ("InstanceNormalization", (2, 3, 4, 5), 13,
     (("s", RNG.uniform(0.5, 1.5, 3).astype("float32")), ("b", RNG.standard_normal(3).astype("float32"))), {}),
    ("LRN", (1, 6, 5, 5), 13, (), {"size": 3, "alpha": 0.01, "beta": 0.75, "bias": 1.0}),
    ("Pad", (3, 4), 13, (("p", I64(1, 2, 2, 1)),), {"mode": "reflect"}),
    ("MaxPool", (1, 2, 9), 13, (), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ("AveragePool", (1, 2, 7, 7), 13, (), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    ("Conv", (1, 2, 9), 13, (("w", RNG.standard_normal((4, 2, 3)).astype("float32")),),
     {"pads": [1, 0], "strides": [2]}),
    ("Add", (2, 3, 4), 6, (("b", RNG.standard_normal(3).astype("float32")),), {"broadcast": 1, "axis": 1}),
]


@pytest.mark.parametrize("op, shape, opset, inits, attrs", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_converters_match_reference_evaluator(op, shape, opset, inits, attrs):
    model = _node_model(op, shape, opset, inits, **attrs)
    x = RNG.standard_normal(shape).astype("float32")
    got = np.asarray(mlc.compile(mlc.from_onnx(model).bind_params())(x))
    if opset < 7:  # onnx.reference has no legacy broadcast: numpy with B aligned at axis 1
        ref = x + inits[0][1].reshape(1, 3, 1)
    elif op == "LRN":  # onnx.reference's LRN loops over dim 0 instead of the channels: numpy
        sq = np.pad(x * x, ((0, 0), (1, 1), (0, 0), (0, 0)))
        ref = x / (1.0 + 0.01 / 3 * (sq[:, :-2] + sq[:, 1:-1] + sq[:, 2:])) ** 0.75
    else:
        ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_argmin_matches_numpy():
    model = _node_model("ArgMin", (3, 5), 13, out_type=TP.INT64, axis=1, keepdims=0)
    x = RNG.standard_normal((3, 5)).astype("float32")
    np.testing.assert_array_equal(np.asarray(mlc.compile(mlc.from_onnx(model))(x)), x.argmin(1))


def test_constant_of_shape_is_a_splat_constant():
    """ConstantOfShape (how the light model zoo stores its weights) is never materialized: the
    module holds one ``dense<v>`` splat, and the result matches numpy."""
    value = helper.make_tensor("v", TP.FLOAT, [1], [0.25])
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["w"], value=value),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, [2, 512])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)],
                          [helper.make_tensor("s", TP.INT64, [2], [512, 256])])
    mod = mlc.from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    assert "dense<2.500000e-01> : tensor<512x256xf32>" in str(mod)
    x = RNG.standard_normal((2, 512)).astype("float32")
    np.testing.assert_allclose(np.asarray(mlc.compile(mod)(x)), x @ np.full((512, 256), 0.25, np.float32),
                               rtol=1e-4, atol=1e-4)


def _run_backend_cases(category, names):
    bt = onnx.backend.test.BackendTest(make_backend(mlc.compile), __name__)
    for name in names:
        bt.include(f"^{name}_cpu$")
    suite = unittest.TestSuite()
    suite.addTests(unittest.TestLoader().loadTestsFromTestCase(bt.test_cases[category]))
    result = unittest.TestResult()
    suite.run(result)
    ran = result.testsRun - len(result.skipped)
    bad = [f"{t}: {e.strip().splitlines()[-1]}" for t, e in result.failures + result.errors]
    assert ran == len(names) and not bad, "\n".join(bad)


def test_light_squeezenet_matches_reference_output(tmp_path, monkeypatch):
    """The smallest of the light model-zoo CNNs (the others: the conformance script)."""
    monkeypatch.setenv("ONNX_HOME", str(tmp_path))  # the runner writes its inputs there
    _run_backend_cases("OnnxBackendRealModelTest", ["test_squeezenet"])


NODE_CASES = ["test_center_crop_pad_crop_and_pad_expanded", "test_layer_normalization_2d_axis0",
              "test_flatten_negative_axis1", "test_argmax_default_axis_example_select_last_index",
              "test_rms_normalization_2d_axis0", "test_group_normalization_example", "test_tile",
              "test_cumsum_1d_reverse_exclusive", "test_range_float_type_positive_delta",
              "test_training_dropout_zero_ratio", "test_castlike_FLOAT_to_DOUBLE_expanded",
              "test_reduce_l2_default_axes_keepdims_example", "test_acosh", "test_atan", "test_tan",
              "test_sinh_example", "test_scatter_elements_with_negative_indices",
              "test_scatter_elements_with_duplicate_indices", "test_scatter_elements_with_reduction_max",
              "test_edge_pad", "test_wrap_pad"]


def test_backend_node_cases_of_new_converters():
    """Shipped node cases of the converters added for the suites, including inputs bound at
    run because shape arithmetic feeds a static operand (center_crop_pad expanded)."""
    _run_backend_cases("OnnxBackendNodeModelTest", NODE_CASES)


def test_unsupported_op_fails_at_prepare_even_with_static_inputs():
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Unique", ["r"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3]),
                                       helper.make_tensor_value_info("s", TP.INT64, [2])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(mlc.BuildError, match=r"unsupported op type\(s\) at opset 13: Unique \(x1\)"):
        make_backend(mlc.compile).prepare(model)


def test_pytorch_operator_and_converted_subset():
    _run_backend_cases("OnnxBackendPyTorchOperatorModelTest",
                       ["test_operator_add_broadcast", "test_operator_repeat", "test_operator_pad",
                        "test_operator_params"])
    _run_backend_cases("OnnxBackendPyTorchConvertedModelTest",
                       ["test_Conv1d_pad1", "test_PReLU_2d_multiparam", "test_ReflectionPad2d",
                        "test_MaxPool1d_stride"])


def test_from_onnx_is_top_level_and_lazy():
    code = ("import sys, mlc_mlir as mlc; assert 'onnx' not in sys.modules; "
            "assert mlc.from_onnx.__module__ == 'mlc_mlir.frontends.onnx'; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr
