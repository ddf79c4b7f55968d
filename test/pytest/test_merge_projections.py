"""Matmuls of one input with constant weights merged into one (``layout_passes.MergeProjections``):
which groups merge, the merged weight is the concatenation, numerics vs numpy through
``mlc.compile`` at 1 and 2 threads. Llama's q/k/v and gate/up projections becoming one GEMV
each in a compiled decode step whose greedy tokens match transformers is in test_llm.py
(``test_llama_decode_step_merges_qkv_and_gate_up``, on the tiny Llama compiled there)."""

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
