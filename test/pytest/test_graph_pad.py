"""``prepare_passes.PadToInsertSlice``: constant ``tensor.pad`` ops as fill + insert_slice, so the padded
value's producer writes into the interior of the padded buffer (no strided ``memrefCopy``)."""

import os
import re

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.pipeline import prepare_passes


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
    out = prepare_passes.PadToInsertSlice()(_pad_graph())
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
    out = prepare_passes.PadToInsertSlice()(mlc.Module.parse(src))
    assert "tensor.pad" in str(out) and "linalg.fill" not in str(out)


def test_compiled_pad_writes_in_place(tmp_path):
    """Through ``mlc.compile`` (the prepare stage runs the pass): the relu writes into the padded
    buffer, so the lowered code has no ``memrefCopy`` for it; numerics match numpy."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(1, 6, 7, 16))
        f.output(ops.pad(ops.relu(x), [(0, 0), (1, 1), (2, 0), (0, 0)], -np.inf))
    exe = mlc.compile(bb.finish(), dump_ir=str(tmp_path))
    assert "memrefCopy" not in open(os.path.join(tmp_path, "09-llvm.ll")).read()
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
    mod = prepare_passes.PadToInsertSlice()(_padded_argument_graph())
    out = prepare_passes.CopyIntoSlices()(mod)
    text = str(out)
    assert "insert_slice.copy" in text and "tensor.extract_slice" in text
    xn = np.random.default_rng(3).standard_normal((1, 6, 7, 16)).astype(np.float32)
    for m in (mod, out):
        np.testing.assert_array_equal(mlc.compile(m)(xn), np.pad(xn, [(0, 0), (1, 1), (1, 1), (0, 0)]))


def test_padded_argument_has_no_strided_copy(tmp_path):
    """``mlc.compile`` of a padded argument: the prepare stage copies it into the padded buffer
    with a ``linalg.generic`` (loops LLVM vectorizes), not the runtime's ``memrefCopy``."""
    exe = mlc.compile(_padded_argument_graph(), dump_ir=str(tmp_path))
    assert "memrefCopy" not in open(os.path.join(tmp_path, "09-llvm.ll")).read()
    xn = np.random.default_rng(4).standard_normal((1, 6, 7, 16)).astype(np.float32)
    np.testing.assert_array_equal(exe(xn), np.pad(xn, [(0, 0), (1, 1), (1, 1), (0, 0)]))


#: A ResNet-18 task as the tuner extracts it (constants as splats): its padded conv input is a
#: function argument inserted into the zero-filled buffer, its output goes into the next pad.
PADDED_ARGUMENT_TASK = """
#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d3, 0, 0)>
module {
  func.func @task(%arg0: tensor<1x56x56x64xf32>) -> tensor<1x30x30x128xf32> attributes {mlc.primitive} {
    %cst = arith.constant {mlc.name = "conv2d_5.bias_reshape.folded"} dense<0.25> : tensor<128x1x1xf32>
    %cst_0 = arith.constant {mlc.name = "conv2d_5.w_hwcf.folded"} dense<0.25> : tensor<3x3x64x128xf32>
    %cst_1 = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<1x58x58x64xf32>
    %1 = linalg.fill {mlc.name = "conv2d_5.x_pad"} ins(%cst_1 : f32) outs(%0 : tensor<1x58x58x64xf32>) -> tensor<1x58x58x64xf32>
    %2 = tensor.empty() : tensor<1x28x28x128xf32>
    %3 = linalg.fill {mlc.name = "conv2d_5.init"} ins(%cst_1 : f32) outs(%2 : tensor<1x28x28x128xf32>) -> tensor<1x28x28x128xf32>
    %4 = tensor.empty() : tensor<1x28x28x128xf32>
    %5 = tensor.empty() : tensor<1x30x30x128xf32>
    %6 = linalg.fill {mlc.name = "conv2d_6.x_pad"} ins(%cst_1 : f32) outs(%5 : tensor<1x30x30x128xf32>) -> tensor<1x30x30x128xf32>
    %inserted_slice = tensor.insert_slice %arg0 into %1[0, 1, 1, 0] [1, 56, 56, 64] [1, 1, 1, 1] : tensor<1x56x56x64xf32> into tensor<1x58x58x64xf32>
    %7 = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, mlc.name = "conv2d_5", strides = dense<2> : tensor<2xi64>} ins(%inserted_slice, %cst_0 : tensor<1x58x58x64xf32>, tensor<3x3x64x128xf32>) outs(%3 : tensor<1x28x28x128xf32>) -> tensor<1x28x28x128xf32>
    %8 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%7, %cst : tensor<1x28x28x128xf32>, tensor<128x1x1xf32>) outs(%4 : tensor<1x28x28x128xf32>) attrs =  {mlc.name = "conv2d_5.bias_add.fused"} {
    ^bb0(%in: f32, %in_3: f32, %out: f32):
      %9 = arith.addf %in, %in_3 : f32
      %10 = arith.maximumf %9, %cst_1 : f32
      linalg.yield %10 : f32
    } -> tensor<1x28x28x128xf32>
    %inserted_slice_2 = tensor.insert_slice %8 into %6[0, 1, 1, 0] [1, 28, 28, 128] [1, 1, 1, 1] : tensor<1x28x28x128xf32> into tensor<1x30x30x128xf32>
    return %inserted_slice_2 : tensor<1x30x30x128xf32>
  }
}
"""


def test_padded_argument_task_compiles_and_matches_torch():
    """The prepare stage copies the argument into the slice after scheduling: rewriting it
    before (in the layout rewrites) made the NHWC conv rule's transform script lose track of
    its input ('tracking listener failed to find replacement op')."""
    import torch
    x = np.random.default_rng(5).standard_normal((1, 56, 56, 64)).astype(np.float32)
    got = mlc.compile(mlc.Module.parse(PADDED_ARGUMENT_TASK), threads=1)(x)
    y = torch.nn.functional.conv2d(torch.from_numpy(x.transpose(0, 3, 1, 2)), torch.full((128, 64, 3, 3), 0.25),
                                   padding=1, stride=2).numpy().transpose(0, 2, 3, 1)
    want = np.pad(np.maximum(y + 0.25, 0), [(0, 0), (1, 1), (1, 1), (0, 0)])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_only_the_border_of_a_padded_buffer_is_filled():
    """``FillPadBorder``: one fill per padded side (low H, high H, low W; high C; no fill for the
    unpadded sides), none over the whole buffer; exact numerics vs numpy for both pads, also
    through ``mlc.compile`` (whose prepare stage runs the pass after ``PadToInsertSlice``)."""
    out = prepare_passes.FillPadBorder()(prepare_passes.PadToInsertSlice()(_pad_graph()))
    text = str(out)
    fills = re.findall(r"linalg.fill .*outs\(%\w+ : (tensor<[0-9x]+xf32>)\)", text)
    # y: low H 1, high H 1, low W 2 (over the 6 interior rows); z: high H 3, low/high C 1
    assert sorted(fills) == sorted(["tensor<1x1x9x16xf32>", "tensor<1x1x9x16xf32>",
                                    "tensor<1x6x2x16xf32>", "tensor<1x3x7x18xf32>",
                                    "tensor<1x6x7x1xf32>", "tensor<1x6x7x1xf32>"])
    assert text.count(".border") == 6
    xn = np.random.default_rng(2).standard_normal((1, 6, 7, 16)).astype(np.float32)
    for exe in (mlc.compile(out), mlc.compile(_pad_graph())):
        for got, want in zip(exe(xn), _want(xn)):
            np.testing.assert_array_equal(got, want)


def test_fill_pad_border_leaves_a_fill_that_is_read_elsewhere():
    """A filled buffer that something else reads too (here: returned) keeps its whole fill."""
    mod = mlc.Module.parse("""
func.func @main(%x: tensor<4x4xf32>) -> (tensor<6x4xf32>, tensor<6x4xf32>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<6x4xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<6x4xf32>) -> tensor<6x4xf32>
  %p = tensor.insert_slice %x into %f[1, 0] [4, 4] [1, 1] : tensor<4x4xf32> into tensor<6x4xf32>
  return %p, %f : tensor<6x4xf32>, tensor<6x4xf32>
}""")
    text = str(prepare_passes.FillPadBorder()(mod))
    assert text.count("linalg.fill") == 1 and ".border" not in text
    xn = np.arange(16, dtype=np.float32).reshape(4, 4)
    got_p, got_f = mlc.compile(mod)(xn)
    np.testing.assert_array_equal(got_p, np.pad(xn, [(1, 1), (0, 0)]))
    np.testing.assert_array_equal(got_f, np.zeros((6, 4), np.float32))


def _downsampling_block(ws):
    """ResNet-18's layer2 -> layer3 transition at a quarter of the channels: ``y`` is inserted
    into the padded input of the strided ``c2``, ``c2``'s output into a padded buffer, and the
    1x1 downsampling ``d`` reads ``y`` after both."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(1, 32, 28, 28))
        y = ops.relu(ops.conv2d(x, ws[0], padding=1, name="c1"))
        z = ops.relu(ops.add(ops.conv2d(y, ws[1], padding=1, name="c1b"), y))
        a = ops.relu(ops.conv2d(z, ws[2], strides=2, padding=1, name="c2"))
        b = ops.conv2d(a, ws[3], padding=1, name="c3")
        d = ops.conv2d(z, ws[4], strides=2, name="d")
        f.output(ops.relu(ops.add(b, d)))
    return bb.finish()


def test_residual_outputs_are_written_into_their_padded_buffers(tmp_path):
    """A value inserted into a padded buffer and read again later (the downsampling
    convolution): ``ReadInsertedSlices`` and the border filled first (``FillPadBorder``) in the
    prepare stage let One-Shot Bufferize compute it in place, with no strided ``memrefCopy``
    in and out of the buffer; numerics vs PyTorch. The stride-1 3x3 convolutions run as Winograd
    ones (a collapsed output transform, whose 6-D result the skip connection reads)."""
    import torch
    rng = np.random.default_rng(6)
    shapes = [(32, 32, 3, 3), (32, 32, 3, 3), (64, 32, 3, 3), (64, 64, 3, 3), (64, 32, 1, 1)]
    ws = [rng.standard_normal(s).astype(np.float32) * 0.1 for s in shapes]
    exe = mlc.compile(_downsampling_block(ws), dump_ir=str(tmp_path))
    assert "memrefCopy" not in open(os.path.join(tmp_path, "09-llvm.ll")).read()
    x = rng.standard_normal((1, 32, 28, 28)).astype(np.float32)
    conv = lambda t, w, s=1, p=1: torch.nn.functional.conv2d(t, torch.from_numpy(w), stride=s, padding=p)  # noqa: E731
    with torch.no_grad():
        y = torch.relu(conv(torch.from_numpy(x), ws[0]))
        z = torch.relu(conv(y, ws[1]) + y)
        want = torch.relu(conv(torch.relu(conv(z, ws[2], 2)), ws[3]) + conv(z, ws[4], 2, 0)).numpy()
    np.testing.assert_allclose(exe(x), want, rtol=1e-4, atol=1e-4)


def test_read_inserted_slices_redirects_only_later_readers():
    """``ReadInsertedSlices``: a reader after the insert reads ``extract_slice`` of the inserted
    tensor; a reader before it keeps the value; numerics unchanged."""
    mod = mlc.Module.parse("""
#id = affine_map<(i, j) -> (i, j)>
func.func @main(%x: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<6x4xf32>, tensor<4x4xf32>) {
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<4x4xf32>
  %y = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x4xf32>) outs(%e0 : tensor<4x4xf32>) {
    ^bb0(%a: f32, %o: f32):
      %m = arith.maximumf %a, %z : f32
      linalg.yield %m : f32
  } -> tensor<4x4xf32>
  %e1 = tensor.empty() : tensor<4x4xf32>
  %before = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : tensor<4x4xf32>) outs(%e1 : tensor<4x4xf32>) {
    ^bb0(%a: f32, %o: f32):
      %n = arith.negf %a : f32
      linalg.yield %n : f32
  } -> tensor<4x4xf32>
  %e = tensor.empty() : tensor<6x4xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<6x4xf32>) -> tensor<6x4xf32>
  %p = tensor.insert_slice %y into %f[1, 0] [4, 4] [1, 1] : tensor<4x4xf32> into tensor<6x4xf32>
  %e2 = tensor.empty() : tensor<4x4xf32>
  %after = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : tensor<4x4xf32>) outs(%e2 : tensor<4x4xf32>) {
    ^bb0(%a: f32, %o: f32):
      %d = arith.addf %a, %a : f32
      linalg.yield %d : f32
  } -> tensor<4x4xf32>
  return %before, %p, %after : tensor<4x4xf32>, tensor<6x4xf32>, tensor<4x4xf32>
}""")
    text = str(prepare_passes.ReadInsertedSlices()(mod))
    assert re.search(r"(%\S+) = tensor.extract_slice %inserted_slice\[1, 0\] \[4, 4\] \[1, 1\]", text)
    after = text[text.index("tensor.extract_slice"):]
    assert re.search(r"linalg.generic .*ins\(%extracted_slice :", after)       # the later reader
    y_name = re.search(r"tensor.insert_slice (%\w+) into", text).group(1)
    assert re.search(rf"linalg.generic .*ins\({y_name} :", text[:text.index("tensor.extract_slice")])
    xn = np.arange(-8, 8, dtype=np.float32).reshape(4, 4)
    before, p, after = mlc.compile(mod)(xn)
    y = np.maximum(xn, 0)
    np.testing.assert_array_equal(before, -y)
    np.testing.assert_array_equal(p, np.pad(y, [(1, 1), (0, 0)]))
    np.testing.assert_array_equal(after, 2 * y)
