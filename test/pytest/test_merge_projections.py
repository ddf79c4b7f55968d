"""Matmuls of one input with constant weights merged into one (``layout_passes.MergeProjections``):
which groups merge, the merged weight is the concatenation, numerics vs numpy through
``mlc.compile`` at 1 and 2 threads, and Llama's q/k/v and gate/up projections become one GEMV
each in a compiled decode step whose greedy tokens match transformers."""

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.ir.walk import find_ops
from mlc_mlir.pipeline import layout_passes

TOL = dict(rtol=1e-5, atol=1e-5)


def projections_module(m, k, ns, shared_input=True, seed=0, dynamic=False, weights=None):
    """(module, x, weights) of ``[x @ w for w in weights]`` (``x`` (m, k), ``w`` (k, n)
    constants, random unless given), each projection reading ``x`` through its own reshape
    like the torch importer's ``(1, m, k) -> (m, k)``; ``shared_input=False`` gives the last
    one another input; ``dynamic``: ``m`` is the symbolic size ``m``."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, m, k)).astype(np.float32)
    ws = weights or [rng.standard_normal((k, n)).astype(np.float32) for n in ns]
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a = f.arg("x", shape=(1, "m" if dynamic else m, k))
        b = ops.relu(a)
        outs = []
        for i, w in enumerate(ws):
            src = ops.sigmoid(a) if (not shared_input and i == len(ws) - 1) else b
            outs.append(ops.matmul(ops.reshape(src, (-1, k)), w))
        f.output(*outs)
    return bb.finish(), x, ws


def matmuls(mod):
    return find_ops(mod, "linalg.matmul")


@pytest.mark.parametrize("dynamic", [False, True])
def test_merges_the_projections_of_one_input(dynamic):
    mod, _, ws = projections_module(1, 32, (32, 16, 16), dynamic=dynamic)
    asked = []
    out = layout_passes.MergeProjections(lambda *a: asked.append(a) or True)(mod)
    assert asked == [(-1 if dynamic else 1, 32, (32, 16, 16), "float32")]
    ms = matmuls(out)
    assert len(ms) == 1
    assert "tensor<32x64xf32>" in str(ms[0].operands[1].type)
    np.testing.assert_array_equal(out.constant_value(ms[0].operands[1].owner.attributes["value"]),
                                  np.concatenate(ws, axis=1))
    text = str(out)
    rows = "%dim_2" if dynamic else "1"
    assert text.count("tensor.extract_slice") == 3 and f"[0, 48] [{rows}, 16]" in text


def test_steps_sharing_derived_weights_share_the_merged_weight():
    """Two modules of one model's weights (a prefill and a decode step) given one derived-weight
    store concatenate each group once: both constants read the same buffer."""
    store, merged, ws = {}, [], None
    for dynamic in (True, False):
        mod, _, ws = projections_module(1, 32, (32, 16, 16), dynamic=dynamic, weights=ws)
        mod.derived_weights = store
        out = layout_passes.MergeProjections()(mod)
        (mm,) = matmuls(out)
        merged.append(out.constant_value(mm.operands[1].owner.attributes["value"]))
    np.testing.assert_array_equal(merged[0], np.concatenate(ws, axis=1))
    assert merged[0].ctypes.data == merged[1].ctypes.data


@pytest.mark.parametrize("case", ["other_input", "declined", "single"])
def test_leaves_matmuls_it_does_not_merge(case):
    ns = (32,) if case == "single" else (32, 16, 16)
    mod, _, _ = projections_module(1, 32, ns, shared_input=case != "other_input")
    select = (lambda m, k, ns, dtype: False) if case == "declined" else None
    out = layout_passes.MergeProjections(select)(mod)
    expected = {"other_input": 2, "declined": 3, "single": 1}[case]
    assert len(matmuls(out)) == expected


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m", [1, 5])
@pytest.mark.parametrize("dynamic", [False, True])
def test_merged_projections_match_numpy(m, threads, dynamic):
    mod, x, ws = projections_module(m, 96, (128, 64, 64), dynamic=dynamic)
    exe = mlc.compile(mod, threads=threads)
    got = exe(x)
    h = np.maximum(x, 0).reshape(-1, 96).astype(np.float64)
    for g, w in zip(got, ws):
        np.testing.assert_allclose(g, h @ w, **TOL)


def test_llama_decode_step_merges_qkv_and_gate_up_and_generates_transformers_tokens():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from mlc_mlir.llm.export import import_step
    from mlc_mlir.pipeline.layout import merge_projections
    from mlc_mlir.pipeline.options import CompileOptions
    from mlc_mlir.target import host_target
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=96,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=100)
    hf = transformers.LlamaForCausalLM(cfg).eval()
    step = import_step(hf, 32, 1)
    assert len(matmuls(step)) == 2 * 7 + 1           # q, k, v, o, gate, up, down per layer; head
    merged = merge_projections(step, host_target(), ["main"], CompileOptions(host_target()))
    shapes = sorted(str(op.operands[1].type) for op in matmuls(merged))
    assert len(shapes) == 2 * 4 + 1                  # qkv, o, gate_up, down per layer; head
    assert shapes.count("tensor<64x128xf32>") == 2   # q 64 + k 32 + v 32
    assert shapes.count("tensor<64x192xf32>") == 2   # gate 96 + up 96
    lm = mlc.llm.compile_causal_lm(hf, max_seq_len=32, threads=2)
    ids = torch.tensor([[1, 5, 7, 2]])
    want = hf.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0).numpy()
    np.testing.assert_array_equal(lm.generate(ids.numpy(), max_new_tokens=8), want)
