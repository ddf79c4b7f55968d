"""ONNX ``Attention``, ``RotaryEmbedding`` (opsets 23/24) and the loss ops through ``from_onnx`` + ``compile`` on the
onnx wheel's own backend node cases (reference outputs from ``onnx.reference``). Attention: 3-D
and 4-D inputs, grouped query heads, past/present caches, boolean and additive masks, causal and
sliding windows, softcap, ``nonpad_kv_seqlen``, the ``qk_matmul_output`` modes, fully-masked
rows. Losses: NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss with weights, ignore_index
(negative and out of range), every reduction, the log_prob output; plus PyTorch's
``cross_entropy`` as a second oracle."""

import unittest

import numpy as np
import onnx
import onnx.backend.test
import pytest
import torch
from onnx import TensorProto, helper

import mlc_mlir as mlc
from mlc_mlir.frontends.onnx_backend import make_backend

CASES = ["test_attention_3d_gqa_causal", "test_attention_3d_diff_heads_with_past_and_present",
         "test_attention_3d_with_past_and_present_qk_matmul_softcap",
         "test_attention_4d_with_past_and_present_qk_matmul_bias_4d_mask_causal",
         "test_attention_4d_attn_mask_bool_4d", "test_attention_4d_softcap_neginf_mask",
         "test_attention_4d_gqa_causal_nonpad_decode", "test_attention_4d_causal_nonpad_batch_prefill",
         "test_attention_4d_diff_heads_mask4d_padded_kv", "test_attention_local_window_with_past",
         "test_attention_bidirectional_window", "test_attention_23_fullymasked_qk_matmul_output_mode3_zero",
         "test_attention_4d_with_qk_matmul_softmax", "test_attention_causal_boolmask_nan_robustness",
         "test_nllloss_NCd1d2d3_none_no_weight_negative_ii", "test_nllloss_NCd1d2_with_weight_reduction_sum_ii",
         "test_nllloss_NCd1_mean_weight_negative_ii", "test_sce_NCd1d2d3_sum_weight_high_ii_log_prob",
         "test_sce_mean_no_weight_ii_4d", "test_rotary_embedding", "test_rotary_embedding_3d_input",
         "test_rotary_embedding_interleaved", "test_rotary_embedding_no_position_ids_interleaved",
         "test_rotary_embedding_with_rotary_dim"]


@pytest.mark.parametrize("name", CASES)
def test_backend_case(name):
    bt = onnx.backend.test.BackendTest(make_backend(mlc.compile), __name__)
    bt.include(f"^{name}_cpu$")
    suite = unittest.TestSuite()
    suite.addTests(unittest.TestLoader().loadTestsFromTestCase(bt.test_cases["OnnxBackendNodeModelTest"]))
    result = unittest.TestResult()
    suite.run(result)
    bad = [f"{t}: {e.strip().splitlines()[-1]}" for t, e in result.failures + result.errors]
    assert result.testsRun - len(result.skipped) == 1 and not bad, "\n".join(bad)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_softmax_cross_entropy_matches_torch(rng, reduction):
    scores = rng.standard_normal((4, 5, 3)).astype(np.float32)
    labels = rng.integers(0, 5, (4, 3)).astype(np.int64)
    labels[0, 1] = labels[2, 2] = -100
    weight = rng.random(5).astype(np.float32) + 0.5
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["s", "y", "w"], ["loss"],
                            reduction=reduction, ignore_index=-100)
    out_shape = (4, 3) if reduction == "none" else ()
    graph = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("s", TensorProto.FLOAT, scores.shape),
        helper.make_tensor_value_info("y", TensorProto.INT64, labels.shape),
        helper.make_tensor_value_info("w", TensorProto.FLOAT, weight.shape)],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, out_shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    got = np.asarray(mlc.compile(mlc.from_onnx(model))(scores, labels, weight))
    ref = torch.nn.functional.cross_entropy(torch.from_numpy(scores), torch.from_numpy(labels),
                                            weight=torch.from_numpy(weight), ignore_index=-100,
                                            reduction=reduction).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
