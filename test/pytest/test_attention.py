"""Fused attention (``layout_passes.FuseAttention`` + ``schedule.rules.attention``): torch's
``scaled_dot_product_attention`` (causal, boolean and additive masks, grouped-query heads, one
query row, odd lengths) and a dynamic-length builder attention vs PyTorch / numpy, each
checked to have been fused (the decode step of the tiny LLMs reading its caches in place is
test_llm.py's ``test_decode_step_never_copies_a_cache``, on the steps compiled there)."""

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import mlc_mlir as mlc  # noqa: E402
from mlc_mlir import ops  # noqa: E402
from mlc_mlir.target import host_target  # noqa: E402


class _SDPA(torch.nn.Module):
    def __init__(self, causal=False, gqa=False):
        super().__init__()
        self.causal, self.gqa = causal, gqa

    def forward(self, q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal,
                                              enable_gqa=self.gqa)


def _fused(tmp_path) -> str:
    """The scheduled IR after compile with dump_ir, asserting one fused call is there."""
    text = (tmp_path / "03-schedule.mlir").read_text()
    assert re.search(r"call @main_attention", text), "attention was not fused"
    return text


CASES = [  # q (B, H, Sq, D), k (B, Hkv, Skv, D), causal, mask, gqa
    ((2, 4, 17, 32), (2, 4, 17, 32), False, None, False),
    ((1, 4, 19, 32), (1, 4, 19, 32), True, None, False),
    ((1, 4, 1, 64), (1, 4, 37, 64), False, None, False),           # decode: one query row
    ((2, 4, 21, 16), (2, 2, 29, 16), False, "bool", True),         # GQA, a boolean mask
    ((1, 6, 1, 64), (1, 2, 50, 64), False, None, True),            # GQA decode
    ((1, 4, 23, 24), (1, 4, 40, 24), False, "float", False),       # additive mask per head
    ((1, 2, 5, 8), (1, 2, 9, 8), False, "float", False),            # fewer rows and keys than a block
]


@pytest.mark.parametrize("qs,ks,causal,mask,gqa", CASES)
def test_sdpa_is_fused_and_matches_torch(tmp_path, qs, ks, causal, mask, gqa):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(s, generator=g) for s in (qs, ks, ks))
    args = (q, k, v)
    if mask == "bool":
        m = torch.rand(qs[2], ks[2], generator=g) > 0.5
        m[:, 0] = True
        m[3, :] = False                 # a row with no key: 0, as torch's safe softmax
        args += (m,)
    elif mask == "float":
        args += (torch.randn(1, qs[1], qs[2], ks[2], generator=g),)
    with torch.no_grad():
        want = _SDPA(causal, gqa)(*args).numpy()
    exe = mlc.compile(mlc.from_torch(_SDPA(causal, gqa), args), dump_ir=str(tmp_path))
    _fused(tmp_path)
    got = exe(*[a.numpy().astype(np.int8) if a.dtype == torch.bool else a.numpy() for a in args])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_dynamic_query_length_attention_matches_numpy(tmp_path):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        q, k, v = f.arg("q", (4, "seq", 32)), f.arg("k", (4, 45, 32)), f.arg("v", (4, 45, 32))
        s = ops.multiply(ops.batch_matmul(q, ops.transpose(k, [0, 2, 1])), np.float32(0.3))
        f.output(ops.batch_matmul(ops.softmax(s), v))
    exe = mlc.compile(bb.finish(), dump_ir=str(tmp_path))
    _fused(tmp_path)
    rng = np.random.default_rng(0)
    k, v = (rng.standard_normal((4, 45, 32), dtype=np.float32) for _ in range(2))
    for n in (1, 7, 16, 45):
        q = rng.standard_normal((4, n, 32), dtype=np.float32)
        s = 0.3 * q @ k.transpose(0, 2, 1)
        p = np.exp(s - s.max(-1, keepdims=True))
        want = (p / p.sum(-1, keepdims=True)) @ v
        np.testing.assert_allclose(exe(q, k, v), want, rtol=1e-5, atol=1e-5)


def test_other_contractions_are_left_alone(tmp_path):
    """softmax(A B) C where the first product is no Q K^T of the same heads (B's batch is read
    transposed): no fusion, and the result is still right."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a, b, c = f.arg("a", (3, 5, 8)), f.arg("b", (8, 3, 6)), f.arg("c", (3, 6, 8))
        f.output(ops.batch_matmul(ops.softmax(ops.batch_matmul(a, ops.transpose(b, [1, 0, 2]))), c))
    exe = mlc.compile(bb.finish(), dump_ir=str(tmp_path))
    assert "call @main_attention" not in (tmp_path / "03-schedule.mlir").read_text()
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal(s, dtype=np.float32) for s in ((3, 5, 8), (8, 3, 6), (3, 6, 8)))
    s = a @ b.transpose(1, 0, 2)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(exe(a, b, c), (p / p.sum(-1, keepdims=True)) @ c, rtol=1e-5, atol=1e-5)


class _ConstantMask(torch.nn.Module):
    def __init__(self, mask):
        super().__init__()
        self.register_buffer("mask", mask)

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask)


@pytest.mark.parametrize("kind, operands", [("zeros", 3), ("equal rows", 4), ("random", 4)])
def test_a_constant_bias_is_dropped_or_passed_as_one_row(tmp_path, kind, operands):
    """A zero mask (BERT without padding) is not read; one whose query rows are equal is read
    as one row (``1x2x1x37``); any other stays whole. Each matches PyTorch."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 37, 32, generator=g) for _ in range(3))
    mask = {"zeros": torch.zeros(1, 1, 37, 37),
            "equal rows": torch.randn(1, 2, 1, 37, generator=g).expand(1, 2, 37, 37).clone(),
            "random": torch.randn(1, 2, 37, 37, generator=g)}[kind]
    net = _ConstantMask(mask)
    exe = mlc.compile(mlc.from_torch(net, (q, k, v)), dump_ir=str(tmp_path))
    call = re.search(r"call @main_attention\((.*)\) \{.*\} : \((.*)\) ->", _fused(tmp_path))
    assert len(call.group(2).split(", ")) == operands
    assert ("tensor<1x2x1x37xf32>" in call.group(2)) == (kind == "equal rows")
    with torch.no_grad():
        want = net(q, k, v).numpy()
    np.testing.assert_allclose(exe(q.numpy(), k.numpy(), v.numpy()), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
def test_attention_rows_use_the_compile_threads(tmp_path, threads):
    """The fused attention's rows run on at most the compile's threads: on one thread its
    loops are serial (no OpenMP region forking a team of one); results match torch either way."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(s, generator=g) for s in ((1, 4, 1, 64), (1, 4, 200, 64), (1, 4, 200, 64)))
    with torch.no_grad():
        want = _SDPA()(q, k, v).numpy()
    exe = mlc.compile(mlc.from_torch(_SDPA(), (q, k, v)), threads=threads, dump_ir=str(tmp_path))
    text = _fused(tmp_path)
    forall = re.search(r"func.func [^\n]*@main_attention.*?scf.forall", text, re.S)
    assert (forall is not None) == (threads > 1 and host_target().cores > 1)
    np.testing.assert_allclose(exe(q.numpy(), k.numpy(), v.numpy()), want, rtol=1e-5, atol=1e-5)
