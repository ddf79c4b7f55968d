"""The ``lower`` stage moves each top-level loop nest of a function holding several into a
``noinline`` function of its own (:func:`mlc_mlir.pipeline.outline_nests.outline_loop_nests`):
the calls replace the nests, constants are cloned into the callees, and compiled models give
numpy's results with one or two threads. ``CompileOptions.outline_nests`` decides which
functions are cut ("auto": those of ``OUTLINE_MIN_OPS`` operations or more), and the outputs
are the same bits with and without outlining."""

import sys

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.ir.module import Module
from mlc_mlir.ir.walk import find_ops
from mlc_mlir.pipeline import CompileOptions
from mlc_mlir.errors import PipelineError
from mlc_mlir.pipeline.outline_nests import (NEST_SUFFIX, OUTLINE_ATTR, OUTLINE_MIN_OPS, count_ops,
                                             outline_loop_nests)

_compile = sys.modules["mlc_mlir.pipeline.compile"]

_TWO_LOOPS = """
func.func @main(%a: memref<16xf32>, %b: memref<16xf32>) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %c1 = arith.constant 1 : index
  %f = arith.constant 2.0 : f32
  scf.for %i = %c0 to %c16 step %c1 {
    %x = memref.load %a[%i] : memref<16xf32>
    %y = arith.mulf %x, %f : f32
    memref.store %y, %b[%i] : memref<16xf32>
  }
  scf.for %i = %c0 to %c16 step %c1 {
    %x = memref.load %b[%i] : memref<16xf32>
    memref.store %x, %a[%i] : memref<16xf32>
  }
  return
}
"""


def _llvm_functions(mod: Module):
    with mod.context:
        return [str(f.attributes["sym_name"]).strip('"') for f in find_ops(mod, "llvm.func")]


def test_two_loops_become_two_noinline_functions_with_constants_inside():
    mod = outline_loop_nests(Module.parse(_TWO_LOOPS))
    mod.verify()
    with mod.context:
        names = mod.function_names()
        nests = sorted(n for n in names if n.startswith("main" + NEST_SUFFIX))
        assert len(nests) == 2 and len(names) == 3
        main = mod.get_function("main")
        assert not find_ops(main, "scf.for")
        assert sorted(str(c.attributes["callee"]).lstrip("@") for c in find_ops(main, "func.call")) == nests
        for n in nests:
            fn = mod.get_function(n)
            assert str(fn.attributes["sym_visibility"]) == '"private"'
            assert "noinline" in str(fn.attributes["passthrough"])
            assert len(find_ops(fn, "scf.for")) == 1
            assert not any(OUTLINE_ATTR in op.attributes for op in find_ops(fn, "scf.for"))
            # the loop's bounds and the multiplier are constants of the callee, not its arguments
            loop = find_ops(fn, "scf.for")[0]
            assert all(v.owner.name == "arith.constant" for v in list(loop.operands)[:3])
        muls = [op for n in nests for op in find_ops(mod.get_function(n), "arith.mulf")]
        assert len(muls) == 1 and muls[0].operands[1].owner.name == "arith.constant"


def test_one_loop_stays_in_place():
    text = _TWO_LOOPS.split("  scf.for %i", 2)
    one = text[0] + "  scf.for %i" + text[1] + "  return\n}\n"
    mod = Module.parse(one)
    out = outline_loop_nests(mod)
    assert out.function_names() == ["main"]


def test_min_ops_keeps_smaller_functions_in_place():
    mod = Module.parse(_TWO_LOOPS)
    with mod.context:
        size = count_ops(mod.get_function("main").operation)
    assert 10 < size < 40   # func, 4 constants, 2 loops with their bodies, return
    assert outline_loop_nests(mod, min_ops=size + 1).function_names() == ["main"]
    assert len(outline_loop_nests(Module.parse(_TWO_LOOPS), min_ops=size).function_names()) == 3


def _concat_of_dense(seed: int):
    """Two dense + relu layers written into one concatenation, then a third dense: units whose
    writes go into their consumer's buffer, kept in ``main`` by the ``tasks`` stage."""
    rng = np.random.default_rng(seed)
    w1, w2 = (rng.standard_normal((48, 32)).astype(np.float32) / 6 for _ in range(2))
    w3 = rng.standard_normal((16, 96)).astype(np.float32) / 10
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(8, 32), dtype="float32")
        a = ops.relu(ops.dense(x, w1, name="fc1"), name="relu1")
        b = ops.relu(ops.dense(x, w2, name="fc2"), name="relu2")
        f.output(ops.dense(ops.concat([a, b], axis=1), w3, name="fc3"))

    def reference(v):
        h = np.concatenate([np.maximum(v @ w1.T, 0), np.maximum(v @ w2.T, 0)], axis=1)
        return h @ w3.T

    return bb.finish(), reference


def _nests(mod: Module, **options):
    lowered = _compile.run_stages(mod, CompileOptions(target="cpu", **options), until="lower")[1]
    return [n for n in _llvm_functions(lowered) if n.startswith("main" + NEST_SUFFIX)]


@pytest.mark.parametrize("threads", [1, 2])
def test_model_with_several_nests_matches_numpy(threads):
    mod, reference = _concat_of_dense(0)
    assert _nests(mod, threads=threads, outline_nests="always")
    x = np.random.default_rng(1).standard_normal((8, 32)).astype(np.float32)
    exe = mlc.compile(mod, threads=threads, outline_nests="always")
    np.testing.assert_allclose(exe(x), reference(x), rtol=1e-4, atol=1e-4)


def test_option_decides_outlining_and_outputs_are_the_same_bits():
    mod, reference = _concat_of_dense(2)
    assert _nests(mod, threads=1, outline_nests="always")
    assert not _nests(mod, threads=1, outline_nests="never")
    assert not _nests(mod, threads=1)   # "auto": main is far below OUTLINE_MIN_OPS
    assert OUTLINE_MIN_OPS > 1000
    x = np.random.default_rng(3).standard_normal((8, 32)).astype(np.float32)
    outs = {k: mlc.compile(mod, threads=1, outline_nests=k)(x) for k in ("always", "never", "auto")}
    np.testing.assert_allclose(outs["always"], reference(x), rtol=1e-4, atol=1e-4)
    assert outs["always"].tobytes() == outs["never"].tobytes() == outs["auto"].tobytes()


def test_auto_outlines_a_function_of_min_ops(monkeypatch):
    mod, _ = _concat_of_dense(4)
    monkeypatch.setattr(_compile, "OUTLINE_MIN_OPS", 1)
    assert _nests(mod, threads=1)


def test_bad_outline_option_is_refused():
    with pytest.raises(PipelineError, match="outline_nests='sometimes'"):
        CompileOptions(target="cpu", outline_nests="sometimes")


_THREE_LOOPS = """
func.func @main(%a: memref<16xf32>, %b: memref<16xf32>, %c: memref<16xf32>, %d: memref<16xf32>) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %c1 = arith.constant 1 : index
  %two = arith.constant 2.0 : f32
  %three = arith.constant 3.0 : f32
  scf.for %i = %c0 to %c16 step %c1 {
    %x = memref.load %a[%i] : memref<16xf32>
    %y = arith.mulf %x, %two {mlc.name = "first"} : f32
    memref.store %y, %b[%i] : memref<16xf32>
  }
  scf.for %i = %c0 to %c16 step %c1 {
    %x = memref.load %c[%i] : memref<16xf32>
    %y = arith.mulf %x, %two {mlc.name = "second"} : f32
    memref.store %y, %d[%i] : memref<16xf32>
  }
  scf.for %i = %c0 to %c16 step %c1 {
    %x = memref.load %b[%i] : memref<16xf32>
    %y = arith.mulf %x, %three {mlc.name = "third"} : f32
    memref.store %y, %a[%i] : memref<16xf32>
  }
  return
}
"""


def test_identical_nests_share_one_function():
    mod = outline_loop_nests(Module.parse(_THREE_LOOPS))
    mod.verify()
    with mod.context:
        main = mod.get_function("main")
        callees = [str(c.attributes["callee"]).lstrip("@") for c in find_ops(main, "func.call")]
        nests = sorted(n for n in mod.function_names() if n.startswith("main" + NEST_SUFFIX))
        # the first two loops differ only in their buffers (arguments) and op names: one function
        assert len(callees) == 3 and callees[0] == callees[1] != callees[2]
        assert sorted(set(callees)) == nests
        scales = {n: [float(str(op.operands[1].owner.attributes["value"]).split(":")[0])
                      for op in find_ops(mod.get_function(n), "arith.mulf")] for n in nests}
        assert scales[callees[0]] == [2.0] and scales[callees[2]] == [3.0]


def _two_padded_convs(seed: int):
    """Two 3x3 convolutions + relu of equal shapes, each reading a zero-padded input: their
    border fills and kernels outline to equal functions."""
    rng = np.random.default_rng(seed)
    w1, w2 = (rng.standard_normal((8, 8, 3, 3)).astype(np.float32) / 8 for _ in range(2))
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(1, 8, 10, 10), dtype="float32")
        a = ops.relu(ops.conv2d(x, w1, padding=(1, 1), name="conv1"), name="relu1")
        f.output(ops.relu(ops.conv2d(a, w2, padding=(1, 1), name="conv2"), name="relu2"))

    def conv(v, w):
        p = np.pad(v, ((0, 0), (0, 0), (1, 1), (1, 1)))
        win = np.lib.stride_tricks.sliding_window_view(p, (3, 3), axis=(2, 3))  # n c h w kh kw
        return np.maximum(np.einsum("nchwij,ocij->nohw", win, w), 0)

    return bb.finish(), lambda v: conv(conv(v, w1), w2)


def test_model_with_identical_nests_merges_them_and_matches_numpy(monkeypatch):
    import mlc_mlir.pipeline.outline_nests as outline_nests
    merged = []

    def recording(module, functions):
        out = merge(module, functions)
        merged.append(out)
        return out

    merge = outline_nests.merge_identical_functions
    monkeypatch.setattr(outline_nests, "merge_identical_functions", recording)
    mod, reference = _two_padded_convs(5)
    x = np.random.default_rng(6).standard_normal((1, 8, 10, 10)).astype(np.float32)
    # direct convolutions (no Winograd transforms): the two layers' kernels and border fills
    out = mlc.compile(mod, threads=1, outline_nests="always", winograd=False)(x)
    assert merged and merged[0], "no two nests were merged"
    assert all(v not in merged[0] for v in merged[0].values())
    np.testing.assert_allclose(out, reference(x), rtol=1e-4, atol=1e-4)
    assert out.tobytes() == mlc.compile(mod, threads=1, outline_nests="never", winograd=False)(x).tobytes()
