"""``pipeline.strided_copies.strided_copies_to_loops``: on buffers, a ``memref.copy`` of a buffer
onto itself is erased, one with a non-contiguous side (the interior of a padded buffer) becomes
a ``linalg.copy`` (loops LLVM vectorizes, not the runtime's element-wise ``memrefCopy``), one
between contiguous buffers stays; a model whose repeated fire modules pass the interiors of
padded buffers to shared units compiles to the same numbers as onnxruntime."""

import sys

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir._mlir import ir
from mlc_mlir.ir.module import Module
from mlc_mlir.ir.walk import find_ops
from mlc_mlir.pipeline.strided_copies import contiguous, strided_copies_to_loops

compile_module = sys.modules["mlc_mlir.pipeline.compile"]   # the module, not mlc.compile

ort = pytest.importorskip("onnxruntime")

_COPIES = """
func.func @f(%a: memref<1x6x6x4xf32>, %b: memref<1x4x4x4xf32>, %c: memref<1x4x4x4xf32>) {
  %s = memref.subview %a[0, 1, 1, 0] [1, 4, 4, 4] [1, 1, 1, 1]
      : memref<1x6x6x4xf32> to memref<1x4x4x4xf32, strided<[144, 24, 4, 1], offset: 28>>
  memref.copy %s, %b : memref<1x4x4x4xf32, strided<[144, 24, 4, 1], offset: 28>> to memref<1x4x4x4xf32>
  memref.copy %b, %c : memref<1x4x4x4xf32> to memref<1x4x4x4xf32>
  memref.copy %s, %s : memref<1x4x4x4xf32, strided<[144, 24, 4, 1], offset: 28>> to memref<1x4x4x4xf32, strided<[144, 24, 4, 1], offset: 28>>
  return
}
"""


def test_strided_copy_becomes_linalg_copy_self_copy_goes_contiguous_stays():
    mod = Module.parse(_COPIES)
    out = strided_copies_to_loops(mod)
    with out.context:
        copies = find_ops(out, "memref.copy")
        lcopies = find_ops(out, "linalg.copy")
        assert len(copies) == 1 and str(copies[0].operands[0].type) == "memref<1x4x4x4xf32>"
        assert len(lcopies) == 1 and "strided" in str(lcopies[0].operands[0].type)
        assert len(find_ops(out, "func.call")) == 1
    out.verify()
    with mod.context:
        assert len(find_ops(mod, "memref.copy")) == 3      # the input is left as it was


_MANY = """
func.func @f(%a: memref<1x6x6x4xf32>, %b: memref<1x4x4x4xf32>, %c: memref<1x6x6x4xf32>,
             %d: memref<8x6xi32>, %e: memref<8x4xi32>) {
  %s = memref.subview %a[0, 1, 1, 0] [1, 4, 4, 4] [1, 1, 1, 1]
      : memref<1x6x6x4xf32> to memref<1x4x4x4xf32, strided<[144, 24, 4, 1], offset: 28>>
  memref.copy %s, %b : memref<1x4x4x4xf32, strided<[144, 24, 4, 1], offset: 28>> to memref<1x4x4x4xf32>
  %t = memref.subview %c[0, 1, 1, 0] [1, 4, 4, 4] [1, 1, 1, 1]
      : memref<1x6x6x4xf32> to memref<1x4x4x4xf32, strided<[144, 24, 4, 1], offset: 28>>
  memref.copy %b, %t : memref<1x4x4x4xf32> to memref<1x4x4x4xf32, strided<[144, 24, 4, 1], offset: 28>>
  %u = memref.subview %d[0, 1] [8, 4] [1, 1] : memref<8x6xi32> to memref<8x4xi32, strided<[6, 1], offset: 1>>
  memref.copy %u, %e : memref<8x4xi32, strided<[6, 1], offset: 1>> to memref<8x4xi32>
  return
}
"""


def test_strided_copies_share_one_kernel_per_rank_and_element_type():
    # two rank-4 f32 copies (either side strided) call one kernel, the rank-2 i32 one another
    out = strided_copies_to_loops(Module.parse(_MANY))
    with out.context:
        calls = [str(c.attributes["callee"]) for c in find_ops(out, "func.call")]
        assert len(calls) == 3 and len(set(calls)) == 2 and calls[0] == calls[1]
        assert len(find_ops(out, "linalg.copy")) == 2 and not find_ops(out, "memref.copy")
        assert sorted(out.function_names()) == sorted(["f", *set(c.lstrip("@") for c in calls)])
    out.verify()


def test_contiguous():
    with ir.Context():
        def t(s):
            return ir.MemRefType(ir.Type.parse(s))
        assert contiguous(t("memref<4x8xf32>"))
        assert contiguous(t("memref<4x8xf32, strided<[8, 1], offset: 16>>"))
        assert contiguous(t("memref<4x1x8xf32, strided<[8, 99, 1]>>"))     # a size-1 dim
        assert not contiguous(t("memref<4x8xf32, strided<[16, 1]>>"))
        assert not contiguous(t("memref<?x8xf32>"))


def _two_fires(rng, c=128, s=32, e=64, hw=27):
    """Two fire modules of the same shapes in a row (squeeze 1x1, expand 1x1 and 3x3, concat
    of ``2 e = c`` channels): the
    second's units are calls of the first's (shared units), each passed the interior of the
    squeeze output's padded buffer."""
    from onnx import TensorProto, helper, numpy_helper
    inits, nodes, x = [], [], "x"
    for i in range(2):
        def w(name, shape):
            inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32),
                                                 f"{name}{i}"))
            return f"{name}{i}"
        nodes += [helper.make_node("Conv", [x, w("ws", (s, c, 1, 1)), w("bs", (s,))], [f"s{i}"]),
                  helper.make_node("Relu", [f"s{i}"], [f"sr{i}"]),
                  helper.make_node("Conv", [f"sr{i}", w("w1", (e, s, 1, 1)), w("b1", (e,))], [f"e1{i}"]),
                  helper.make_node("Relu", [f"e1{i}"], [f"e1r{i}"]),
                  helper.make_node("Conv", [f"sr{i}", w("w3", (e, s, 3, 3)), w("b3", (e,))], [f"e3{i}"],
                                   pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"e3{i}"], [f"e3r{i}"]),
                  helper.make_node("Concat", [f"e1r{i}", f"e3r{i}"], [f"cat{i}"], axis=1)]
        x = f"cat{i}"
    graph = helper.make_graph(nodes, "fires",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 2 * e, hw, hw])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("threads", [1, 2])
def test_fire_modules_with_shared_units_match_onnxruntime(monkeypatch, threads):
    """With two threads the interiors of the padded squeeze outputs (1x27x27x32 floats, over
    two L1d's worth) are copied by the threaded kernel: 27 rows of 27 x 32 split unevenly over
    the two threads; the output as onnxruntime's either way."""
    pytest.importorskip("onnx")
    rng = np.random.default_rng(0)
    model = _two_fires(rng)
    x = rng.standard_normal((1, 128, 27, 27)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"x": x})[0]
    seen = []

    def spy(module, *args):     # the copies the lowering rewrites (SqueezeNet's fire4 and fire5 shapes)
        out = strided_copies_to_loops(module, *args)
        with out.context:
            seen.append((len(find_ops(out, "linalg.copy")), len(find_ops(out, "scf.forall"))))
        return out

    monkeypatch.setattr(compile_module, "strided_copies_to_loops", spy)
    got = mlc.compile(mlc.from_onnx(model), threads=threads)(x)
    assert seen and seen[0][0] > 0, seen       # strided copies were made loops
    assert (seen[0][1] > 0) == (threads > 1), seen
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3)


_THREADED = """
func.func @f(%a: memref<1x9x9x2048xf32>, %b: memref<1x7x7x2048xf32>, %c: memref<1x3x3x4xf32>,
             %d: memref<1x5x5x4xf32>) {
  %s = memref.subview %a[0, 1, 1, 0] [1, 7, 7, 2048] [1, 1, 1, 1]
      : memref<1x9x9x2048xf32> to memref<1x7x7x2048xf32, strided<[165888, 18432, 2048, 1], offset: 20480>>
  memref.copy %b, %s : memref<1x7x7x2048xf32> to memref<1x7x7x2048xf32, strided<[165888, 18432, 2048, 1], offset: 20480>>
  %t = memref.subview %d[0, 1, 1, 0] [1, 3, 3, 4] [1, 1, 1, 1]
      : memref<1x5x5x4xf32> to memref<1x3x3x4xf32, strided<[100, 20, 4, 1], offset: 24>>
  memref.copy %c, %t : memref<1x3x3x4xf32> to memref<1x3x3x4xf32, strided<[100, 20, 4, 1], offset: 24>>
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %c2 step %c1 {
    memref.copy %b, %s : memref<1x7x7x2048xf32> to memref<1x7x7x2048xf32, strided<[165888, 18432, 2048, 1], offset: 20480>>
  }
  return
}
"""


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_large_top_level_copies_take_the_threaded_kernel(threads):
    # the 392 KB copy at the top level: threads over the leading dims that give each thread an
    # iteration (1 x 7 rows: 7 over 2 or 3 threads, uneven); the 144 B one and the one inside a
    # loop stay serial; one thread: serial
    out = strided_copies_to_loops(Module.parse(_THREADED), threads, 32 << 10)
    out.verify()
    with out.context:
        calls = [str(c.attributes["callee"]) for c in find_ops(out, "func.call")]
        foralls = find_ops(out, "scf.forall")
    if threads == 1:
        assert len(set(calls)) == 1 and not foralls
    else:
        assert calls[0] == "@mlc_strided_copy_4d_f32_threads2" and calls[1] == calls[2] != calls[0]
        assert len(foralls) == 1 and len(foralls[0].regions[0].blocks[0].arguments) == 2


def test_a_large_index_copy_stays_serial_with_threads():
    # index has no bit width in the bindings: the threaded kernel's byte count is for integer
    # and float elements; an index copy keeps the serial kernel (it raised AttributeError)
    text = """func.func @f(%a: memref<64x64xindex, strided<[128, 1]>>, %b: memref<64x64xindex>) {
  memref.copy %a, %b : memref<64x64xindex, strided<[128, 1]>> to memref<64x64xindex>
  return
}"""
    out = strided_copies_to_loops(Module.parse(text), 2, 1024)
    out.verify()
    with out.context:
        assert [str(c.attributes["callee"]) for c in find_ops(out, "func.call")] == ["@mlc_strided_copy_2d_index"]
        assert not find_ops(out, "scf.forall")
