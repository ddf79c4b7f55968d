"""ONNX If, Scan and Loop through ``from_onnx`` + ``compile`` (subgraphs inlined, loops
unrolled): the onnx wheel's backend node cases, onnxruntime on a reverse-direction Scan with
outer-scope reads, ``onnx.reference.ReferenceEvaluator`` on a run-time If, and the refusals."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from test_frontend_onnx_models import _run_backend_cases

import mlc_mlir as mlc
from mlc_mlir.errors import BuildError

CASES = ["test_if", "test_loop11", "test_scan9_sum", "test_scan9_multi_state", "test_affine_grid_3d_expanded",
         "test_linear_attention_gated_delta_expanded", "test_range_float_type_positive_delta_expanded"]

F = TensorProto.FLOAT


@pytest.mark.parametrize("name", CASES)
def test_backend_case(name):
    _run_backend_cases("OnnxBackendNodeModelTest", [name])


def _scan_model():
    """state (3,) += w * x_t over the rows of x (4, 3) read backwards (axis 0), and the
    per-step ``tanh(state)`` stacked along axis 1 in reverse; ``w`` is an outer-scope
    initializer read inside the body."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["x_t", "w"], ["wx"]), helper.make_node("Add", ["s_in", "wx"], ["s_out"]),
         helper.make_node("Tanh", ["s_out"], ["y_t"])], "body",
        [helper.make_tensor_value_info("s_in", F, [3]), helper.make_tensor_value_info("x_t", F, [3])],
        [helper.make_tensor_value_info("s_out", F, [3]), helper.make_tensor_value_info("y_t", F, [3])])
    node = helper.make_node("Scan", ["s0", "x"], ["s", "ys"], body=body, num_scan_inputs=1,
                            scan_input_directions=[1], scan_output_axes=[1], scan_output_directions=[1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("s0", F, [3]),
                                            helper.make_tensor_value_info("x", F, [4, 3])],
                              [helper.make_tensor_value_info("s", F, None),
                               helper.make_tensor_value_info("ys", F, None)],
                              [helper.make_tensor("w", F, [3], [0.5, -1.0, 2.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])


def _if_model(then_value, else_value):
    def branch(name, value):
        return helper.make_graph([helper.make_node("Mul", ["x", "c"], ["o"])], name, [],
                                 [helper.make_tensor_value_info("o", F, None)],
                                 [helper.make_tensor("c", F, np.shape(value), np.ravel(value))])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=branch("then", then_value),
                            else_branch=branch("else", else_value))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                                            helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info("y", F, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_scan_matches_reference(rng):
    model = _scan_model()
    feeds = {"s0": rng.standard_normal(3).astype(np.float32), "x": rng.standard_normal((4, 3)).astype(np.float32)}
    ort = pytest.importorskip("onnxruntime")  # onnx.reference has no reverse-direction Scan
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = mlc.compile(mlc.from_onnx(model))(feeds["s0"], feeds["x"])
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-6)


def test_if_with_run_time_condition_matches_reference(rng):
    model = _if_model([1.0, 2.0, 3.0], [-1.0, 0.5, 4.0])
    x = rng.standard_normal((2, 3)).astype(np.float32)
    exe = mlc.compile(mlc.from_onnx(model))
    for c in (True, False):
        want = ReferenceEvaluator(model).run(None, {"cond": np.array(c), "x": x})[0]
        np.testing.assert_allclose(np.asarray(exe(np.array(c, np.int8), x)), want, rtol=1e-6)


def test_control_flow_refusals():
    with pytest.raises(BuildError, match=r"\(If\): output 0 is float32 \(2, 3\) in then_branch and float32 "
                                         r"\(3, 2, 3\) in "
                                         r"else_branch with a condition computed at run time"):
        mlc.from_onnx(_if_model([1.0, 2.0, 3.0], [[[1.0]], [[2.0]], [[3.0]]]))
    body = helper.make_graph([helper.make_node("Identity", ["c_in"], ["c_out"]),
                              helper.make_node("Add", ["v_in", "v_in"], ["v_out"])], "body",
                             [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                              helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("v_in", F, [2])],
                             [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("v_out", F, [2])])
    node = helper.make_node("Loop", ["m", "", "v"], ["v_final"], body=body)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("m", TensorProto.INT64, []),
                                            helper.make_tensor_value_info("v", F, [2])],
                              [helper.make_tensor_value_info("v_final", F, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(BuildError, match=r"\(Loop\): input 'M' \(the trip count\) is computed at run time"):
        mlc.from_onnx(model)
    with pytest.raises(BuildError, match=r"\(Loop\): the loop runs more than 128 iterations"):
        mlc.from_onnx(model, input_values={"m": np.array(1000, np.int64)})
    v = np.array([1.0, -2.0], np.float32)
    got = mlc.compile(mlc.from_onnx(model, input_values={"m": np.array(3, np.int64)}))(v)
    np.testing.assert_allclose(np.asarray(got), v * 8)
