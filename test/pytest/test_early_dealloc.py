"""``dealloc_after_last_use``: a buffer's ``memref.dealloc`` moves from the end of its block to
right after the last op that uses it or an alias of it; a buffer whose address escapes stays;
a compiled decoder frees a layer's buffers before the next layer allocates (the lowered IR);
results equal numpy."""

import re

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.ir.module import Module
from mlc_mlir.pipeline.compile import run_stages
from mlc_mlir.pipeline.early_dealloc import dealloc_after_last_use
from mlc_mlir.pipeline.options import CompileOptions

_CHAIN = """
func.func @f(%x: memref<64xf32>, %out: memref<64xf32>, %c: i1) {
  %a = memref.alloc() : memref<64xf32>
  memref.copy %x, %a : memref<64xf32> to memref<64xf32>
  %b = memref.alloc() : memref<64xf32>
  %va = memref.subview %a[0] [32] [1] : memref<64xf32> to memref<32xf32, strided<[1]>>
  %vb = memref.subview %b[0] [32] [1] : memref<64xf32> to memref<32xf32, strided<[1]>>
  memref.copy %va, %vb : memref<32xf32, strided<[1]>> to memref<32xf32, strided<[1]>>
  %d = scf.if %c -> (memref<64xf32>) {
    scf.yield %b : memref<64xf32>
  } else {
    %e = memref.alloc() : memref<64xf32>
    scf.yield %e : memref<64xf32>
  }
  memref.copy %d, %out : memref<64xf32> to memref<64xf32>
  memref.copy %b, %out : memref<64xf32> to memref<64xf32>
  %p = memref.alloc() : memref<64xf32>
  %addr = memref.extract_aligned_pointer_as_index %p : memref<64xf32> -> index
  memref.copy %x, %out : memref<64xf32> to memref<64xf32>
  %base, %off, %size, %stride = memref.extract_strided_metadata %d : memref<64xf32> -> memref<f32>, index, index, index
  memref.dealloc %a : memref<64xf32>
  memref.dealloc %base : memref<f32>
  memref.dealloc %p : memref<64xf32>
  return
}
"""


def _body(module: Module):
    """The lines of ``@f``'s body (the module printed once, so SSA names are consistent)."""
    return [line.strip() for line in str(module).splitlines() if line.startswith("    ")
            and not line.startswith("      ")]


def test_deallocs_move_after_the_last_use_of_any_alias():
    """``%a`` is freed right after the copy that reads its view; the ``scf.if`` result (``%b``
    or a new block, freed through its base buffer) after the last copy that reads it or ``%b``, the
    ``extract_strided_metadata`` moving with its dealloc; ``%p``, whose address escapes as an
    index, stays at the end."""
    before = _body(Module.parse(_CHAIN))
    body = _body(dealloc_after_last_use(Module.parse(_CHAIN)))
    assert sorted(body) == sorted(before)
    at = {k: next(i for i, t in enumerate(body) if t.startswith(k)) for k in (
        "memref.copy %subview,", "memref.dealloc %alloc :", "memref.copy %alloc_0, %arg1", "%base_buffer",
        "memref.dealloc %base_buffer", "memref.dealloc %alloc_2", "memref.copy %arg0, %arg1", "return")}
    assert at["memref.dealloc %alloc :"] == at["memref.copy %subview,"] + 1, body
    assert at["%base_buffer"] == at["memref.copy %alloc_0, %arg1"] + 1, body
    assert at["memref.dealloc %base_buffer"] == at["%base_buffer"] + 1, body
    assert at["memref.dealloc %alloc_2"] == at["return"] - 1, body
    unchanged = Module.parse(_CHAIN.replace("  memref.dealloc %a : memref<64xf32>\n", "")
                             .replace("  memref.dealloc %base : memref<f32>\n", ""))
    assert dealloc_after_last_use(unchanged) is unchanged


def _main_calls(module):
    """The buffer cache calls of the lowered ``main`` in order: ``A`` (alloc) and ``F`` (free);
    the compile's stages through ``lower`` (what ``mlc.compile`` dumps as ``07-lower.mlir``),
    without the LLVM code generation, which the check does not read."""
    text = str(run_stages(module, CompileOptions(target="cpu", threads=1), until="lower")[1])
    main = text[text.index("llvm.func @main("):]
    main = main[:main.index("\n  }\n")]
    return ["A" if c == "alloc" else "F" for c in re.findall(r"llvm\.call @mlc_buffer_(alloc|free)\(", main)]


def test_decoder_layers_free_their_buffers_before_the_next_layer_allocates():
    """The prefill step of a 2-layer GPT-2 (symbolic length): in the lowered ``main`` the first
    buffer is freed within the first layer, where ownership-based deallocation alone freed all
    of them after the last layer (every alloc before the first free)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from mlc_mlir.llm.export import import_step
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4,
                                                                 vocab_size=100)).eval()
    calls = _main_calls(import_step(model, 64))
    assert calls.count("A") > 20 and calls.index("F") < calls.count("A") // 4, "".join(calls)


def test_results_equal_numpy_with_buffers_freed_early():
    """Three layers of ``softmax(x @ w_i) * 2 + 1`` with symbolic rows equal numpy at several
    sizes (buffers freed after their last use and reused by the next layer)."""
    rng = np.random.default_rng(0)
    ws = [(rng.standard_normal((96, 96)) / 10).astype(np.float32) for _ in range(3)]
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", ("n", 96), "float32")
        for w in ws:
            x = ops.softmax(ops.matmul(x, w), axis=-1) * 2.0 + 1.0
        f.output(x)
    exe = mlc.compile(bb.finish(), threads=1)
    for n in (1, 37, 300):
        a = rng.standard_normal((n, 96)).astype(np.float32)
        want = a.astype(np.float64)
        for w in ws:
            h = want @ w
            e = np.exp(h - h.max(-1, keepdims=True))
            want = e / e.sum(-1, keepdims=True) * 2.0 + 1.0
        np.testing.assert_allclose(np.asarray(exe(a)), want, rtol=1e-4, atol=1e-5)
