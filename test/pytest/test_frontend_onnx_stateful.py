"""ONNX CausalConvWithState and LinearAttention (opset 27) through ``from_onnx`` +
``compile``: the onnx wheel's backend node cases, ``onnx.reference.ReferenceEvaluator`` on odd
shapes (GQA, per-channel decay, scalar beta, past states), and the refusals."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from test_frontend_onnx_models import _run_backend_cases

import mlc_mlir as mlc
from mlc_mlir.errors import BuildError

CASES = ["test_causal_conv_with_state_with_bias_and_past_state", "test_causal_conv_with_state_kernel_size_one",
         "test_causal_conv_with_state_silu", "test_linear_attention_gated_delta_gqa",
         "test_linear_attention_gated_per_head_decay", "test_linear_attention_decode_step",
         "test_linear_attention_linear_t1_no_past"]


@pytest.mark.parametrize("name", CASES)
def test_backend_case(name):
    _run_backend_cases("OnnxBackendNodeModelTest", [name])


def _model(op, inputs, attrs, n_out=2):
    """One node of opset 27 with float32 inputs ``(name, shape)`` ('' for an omitted one)."""
    node = helper.make_node(op, [name for name, _ in inputs], [f"y{i}" for i in range(n_out)], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(name, TensorProto.FLOAT, s)
                                            for name, s in inputs if name],
                              [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None) for i in range(n_out)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 27)])


def _check_ref(model, feeds, rtol=1e-4, atol=1e-5):
    want = ReferenceEvaluator(model).run(None, feeds)
    got = mlc.compile(mlc.from_onnx(model))(*[feeds[i.name] for i in model.graph.input])
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("b,c,length,k,past,bias,act", [
    (3, 5, 7, 3, True, True, "silu"), (1, 2, 1, 6, True, False, "none"), (2, 3, 4, 2, False, True, "swish")])
def test_causal_conv_with_state_matches_reference(rng, b, c, length, k, past, bias, act):
    feeds = {"x": rng.standard_normal((b, c, length)).astype(np.float32),
             "w": rng.standard_normal((c, 1, k)).astype(np.float32)}
    inputs = [("x", (b, c, length)), ("w", (c, 1, k)), ("bias" if bias else "", (c,)),
              ("past" if past else "", (b, c, k - 1))]
    if bias:
        feeds["bias"] = rng.standard_normal(c).astype(np.float32)
    if past:
        feeds["past"] = rng.standard_normal((b, c, k - 1)).astype(np.float32)
    _check_ref(_model("CausalConvWithState", inputs, dict(activation=act)), feeds)


@pytest.mark.parametrize("rule,hq,hkv,decay_per_channel,beta_last,past,scale", [
    ("linear", 3, 3, False, None, True, 0.0), ("gated", 4, 2, True, None, False, 0.3),
    ("delta", 2, 1, False, 1, True, 0.0), ("gated_delta", 6, 2, False, 2, True, 0.0),
    ("gated_delta", 2, 2, True, 1, False, 1.5)])
def test_linear_attention_matches_reference(rng, rule, hq, hkv, decay_per_channel, beta_last, past, scale):
    b, t, dk, dv = 2, 5, 3, 4
    feeds = {"q": rng.standard_normal((b, t, hq * dk)).astype(np.float32) * 0.5,
             "k": rng.standard_normal((b, t, hkv * dk)).astype(np.float32) * 0.5,
             "v": rng.standard_normal((b, t, hkv * dv)).astype(np.float32)}
    inputs = [("q", (b, t, hq * dk)), ("k", (b, t, hkv * dk)), ("v", (b, t, hkv * dv)), ("", None), ("", None),
              ("", None)]
    if past:
        feeds["past"] = rng.standard_normal((b, hkv, dk, dv)).astype(np.float32)
        inputs[3] = ("past", (b, hkv, dk, dv))
    if rule in ("gated", "gated_delta"):
        g_shape = (b, t, hkv * dk if decay_per_channel else hkv)
        feeds["g"] = -rng.uniform(0.0, 1.0, g_shape).astype(np.float32)
        inputs[4] = ("g", g_shape)
    if beta_last is not None:
        feeds["beta"] = rng.uniform(0.0, 1.0, (b, t, beta_last)).astype(np.float32)
        inputs[5] = ("beta", (b, t, beta_last))
    while inputs[-1][0] == "":
        inputs.pop()
    attrs = dict(q_num_heads=hq, kv_num_heads=hkv, update_rule=rule, scale=scale)
    _check_ref(_model("LinearAttention", inputs, attrs), feeds)


def test_stateful_refusals():
    with pytest.raises(BuildError, match=r"\(LinearAttention\): input 'decay' is absent; update_rule 'gated' requires"):
        mlc.from_onnx(_model("LinearAttention", [("q", (1, 2, 4)), ("k", (1, 2, 4)), ("v", (1, 2, 4))],
                             dict(q_num_heads=1, kv_num_heads=1, update_rule="gated")))
    with pytest.raises(BuildError, match=r"\(LinearAttention\): the sequence has 65 tokens; expected at most 64"):
        mlc.from_onnx(_model("LinearAttention", [("q", (1, 65, 4)), ("k", (1, 65, 4)), ("v", (1, 65, 4))],
                             dict(q_num_heads=1, kv_num_heads=1, update_rule="linear")))
    with pytest.raises(BuildError, match=r"\(CausalConvWithState\): inputs 'input' \(1, 2, 3\) and 'weight' "
                                         r"\(3, 1, 2\); expected \(B, C, L\) and \(C, 1, K\)"):
        mlc.from_onnx(_model("CausalConvWithState", [("x", (1, 2, 3)), ("w", (3, 1, 2))], {}))
