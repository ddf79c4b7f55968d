"""``graph.PadToInsertSlice``: constant ``tensor.pad`` ops as fill + insert_slice, so the padded
value's producer writes into the interior of the padded buffer (no strided ``memrefCopy``)."""

import os

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import graph, ops


def _pad_graph():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(1, 6, 7, 16))
        y = ops.pad(ops.relu(x), [(0, 0), (1, 1), (2, 0), (0, 0)], -np.inf)   # computed source
        z = ops.pad(x, [(0, 0), (0, 3), (0, 0), (1, 1)], 0.5)                  # an argument
        f.output(y, z)
    return bb.finish()


def _want(xn):
    return (np.pad(np.maximum(xn, 0), [(0, 0), (1, 1), (2, 0), (0, 0)], constant_values=-np.inf),
            np.pad(xn, [(0, 0), (0, 3), (0, 0), (1, 1)], constant_values=0.5))


def test_pads_become_fill_and_insert_slice():
    out = graph.PadToInsertSlice()(_pad_graph())
    text = str(out)
    assert "tensor.pad" not in text
    assert text.count("linalg.fill") == 2 and text.count("tensor.insert_slice") == 2
    assert "[0, 1, 2, 0] [1, 6, 7, 16] [1, 1, 1, 1]" in text
    xn = np.random.default_rng(0).standard_normal((1, 6, 7, 16)).astype(np.float32)
    for got, want in zip(mlc.compile(out)(xn), _want(xn)):
        np.testing.assert_array_equal(got, want)


def test_pad_keeps_an_index_dependent_value():
    """A pad whose body computes the value from its indices is not a fill: it stays."""
    src = """
    func.func @main(%x: tensor<4xf32>) -> tensor<6xf32> {
      %p = tensor.pad %x low[1] high[1] {
      ^bb0(%i: index):
        %c = arith.index_cast %i : index to i32
        %v = arith.sitofp %c : i32 to f32
        tensor.yield %v : f32
      } : tensor<4xf32> to tensor<6xf32>
      return %p : tensor<6xf32>
    }"""
    out = graph.PadToInsertSlice()(mlc.Module.parse(src))
    assert "tensor.pad" in str(out) and "linalg.fill" not in str(out)


def test_compiled_pad_writes_in_place(tmp_path):
    """Through ``mlc.compile`` (the prepare stage runs the pass): the relu writes into the padded
    buffer, so the lowered code has no ``memrefCopy`` for it; numerics match numpy."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(1, 6, 7, 16))
        f.output(ops.pad(ops.relu(x), [(0, 0), (1, 1), (2, 0), (0, 0)], -np.inf))
    exe = mlc.compile(bb.finish(), dump_ir=str(tmp_path))
    assert "memrefCopy" not in open(os.path.join(tmp_path, "07-llvm.ll")).read()
    xn = np.random.default_rng(1).standard_normal((1, 6, 7, 16)).astype(np.float32)
    np.testing.assert_array_equal(exe(xn), _want(xn)[0])


def _padded_argument_graph():
    """A function argument padded with zeros (fill + insert_slice after PadToInsertSlice)."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(1, 6, 7, 16))
        f.output(ops.pad(x, [(0, 0), (1, 1), (1, 1), (0, 0)], 0.0))
    return bb.finish()


def test_argument_insert_becomes_a_copy_into_the_slice():
    mod = graph.PadToInsertSlice()(_padded_argument_graph())
    out = graph.CopyIntoSlices()(mod)
    text = str(out)
    assert "insert_slice.copy" in text and "tensor.extract_slice" in text
    xn = np.random.default_rng(3).standard_normal((1, 6, 7, 16)).astype(np.float32)
    for m in (mod, out):
        np.testing.assert_array_equal(mlc.compile(m)(xn), np.pad(xn, [(0, 0), (1, 1), (1, 1), (0, 0)]))
    # only the argument's insert is rewritten; functions= restricts the pass
    assert "insert_slice.copy" not in str(graph.CopyIntoSlices(functions=["other"])(mod))


def test_padded_argument_has_no_strided_copy(tmp_path):
    """``mlc.compile`` of a padded argument: the prepare stage copies it into the padded buffer
    with a ``linalg.generic`` (loops LLVM vectorizes), not the runtime's ``memrefCopy``."""
    exe = mlc.compile(_padded_argument_graph(), dump_ir=str(tmp_path))
    assert "memrefCopy" not in open(os.path.join(tmp_path, "07-llvm.ll")).read()
    xn = np.random.default_rng(4).standard_normal((1, 6, 7, 16)).astype(np.float32)
    np.testing.assert_array_equal(exe(xn), np.pad(xn, [(0, 0), (1, 1), (1, 1), (0, 0)]))
