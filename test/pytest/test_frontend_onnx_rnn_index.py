"""ONNX ``RNN``/``GRU``/``LSTM`` and the small families (Hardmax, OneHot, ScatterND, ReduceProd,
LpNormalization, LpPool, CenterCropPad, CumProd, IsInf, Round, Swish) through ``from_onnx`` + ``compile``: the onnx
wheel's own backend node cases (reference outputs from ``onnx.reference``), and onnxruntime as
the oracle for what those cases leave out (uneven ``sequence_lens``, bidirectional with biases
and initial states, ``linear_before_reset``, ``clip`` and parameterised activations)."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from test_frontend_onnx_models import _run_backend_cases

import mlc_mlir as mlc

CASES = ["test_lstm_with_peepholes", "test_lstm_batchwise", "test_lstm_bidirectional", "test_gru_reverse",
         "test_gru_with_initial_bias", "test_gru_batchwise", "test_simple_rnn_bidirectional",
         "test_rnn_seq_length", "test_hardmax_axis_0", "test_hardmax_one_hot", "test_onehot_negative_indices",
         "test_onehot_with_axis", "test_scatternd_multiply", "test_scatternd_add", "test_reduce_prod_do_not_keepdims_random",
         "test_lpnormalization_default", "test_lppool_2d_dilations", "test_lppool_2d_same_lower",
         "test_lppool_1d_default", "test_center_crop_pad_crop_and_pad", "test_cumprod_1d_reverse_exclusive",
         "test_cumprod_2d_axis_0", "test_isinf_negative", "test_isinf", "test_round", "test_swish"]


@pytest.mark.parametrize("name", CASES)
def test_backend_case(name):
    _run_backend_cases("OnnxBackendNodeModelTest", [name])


def _recurrent_model(op, gates, seq, batch, size, hidden, attrs, with_c):
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    f = TensorProto.FLOAT
    ins = [helper.make_tensor_value_info("X", f, (seq, batch, size)),
           helper.make_tensor_value_info("W", f, (dirs, gates * hidden, size)),
           helper.make_tensor_value_info("R", f, (dirs, gates * hidden, hidden)),
           helper.make_tensor_value_info("B", f, (dirs, 2 * gates * hidden)),
           helper.make_tensor_value_info("L", TensorProto.INT32, (batch,)),
           helper.make_tensor_value_info("H0", f, (dirs, batch, hidden))]
    names = ["X", "W", "R", "B", "L", "H0"]
    outs = ["Y", "Y_h"] + (["Y_c"] if with_c else [])
    if with_c:
        ins.append(helper.make_tensor_value_info("C0", f, (dirs, batch, hidden)))
        names.append("C0")
    node = helper.make_node(op, names, outs, hidden_size=hidden, **attrs)
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info(o, f, None) for o in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), dirs


@pytest.mark.parametrize("op,attrs", [
    ("LSTM", {"direction": "bidirectional"}),
    ("GRU", {"direction": "reverse", "linear_before_reset": 1}),
    ("RNN", {"direction": "forward", "clip": 0.8, "activations": ["LeakyRelu"], "activation_alpha": [0.3]}),
])
def test_recurrent_matches_onnxruntime(rng, op, attrs):
    ort = pytest.importorskip("onnxruntime")
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    seq, batch, size, hidden = 4, 3, 5, 6
    model, dirs = _recurrent_model(op, gates, seq, batch, size, hidden, attrs, op == "LSTM")
    feeds = {"X": rng.standard_normal((seq, batch, size)), "W": rng.standard_normal((dirs, gates * hidden, size)) * 0.5,
             "R": rng.standard_normal((dirs, gates * hidden, hidden)) * 0.5,
             "B": rng.standard_normal((dirs, 2 * gates * hidden)) * 0.3,
             "H0": rng.standard_normal((dirs, batch, hidden)) * 0.5}
    if op == "LSTM":
        feeds["C0"] = rng.standard_normal((dirs, batch, hidden)) * 0.5
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    feeds["L"] = np.array([4, 2, 3], np.int32)  # uneven lengths: padded steps keep the state
    order = [i.name for i in model.graph.input]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    got = mlc.compile(mlc.from_onnx(model))(*[feeds[k] for k in order])
    got = got if isinstance(got, (list, tuple)) else [got]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-5)


def test_lstm_input_forget_is_refused():
    f = TensorProto.FLOAT
    node = helper.make_node("LSTM", ["X", "W", "R"], ["", "Y_h"], hidden_size=2, input_forget=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", f, (2, 1, 3)),
                                            helper.make_tensor_value_info("W", f, (1, 8, 3)),
                                            helper.make_tensor_value_info("R", f, (1, 8, 2))],
                              [helper.make_tensor_value_info("Y_h", f, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    with pytest.raises(mlc.BuildError, match="input_forget"):
        mlc.from_onnx(model)
