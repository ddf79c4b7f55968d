"""A channel concatenation between NHWC convolutions (SqueezeNet's fire module: a 1x1 squeeze
conv, then a 1x1 and a 3x3 expand conv concatenated on channels, read by the next conv) stays
in NHWC after the ``layout`` stage (``PropagateTransposes``' concat rule): no activation is
transposed back to NCHW around it, each expand conv writes its channel slice of the
concatenation in place (no copy after bufferization), and the compiled model matches
onnxruntime."""

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir.ir.pass_pipeline import run_pass_pipeline
from mlc_mlir.pipeline.compile import run_stages
from mlc_mlir.pipeline.options import CompileOptions
from mlc_mlir.target import host_target

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _fire_model(rng, c=16, s=8, e=16, hw=12):
    """x (1, c, hw, hw) -> squeeze 1x1 (s) -> relu -> [expand 1x1 (e), expand 3x3 pad 1 (e)]
    -> relu each -> concat on channels -> 1x1 conv (c) -> relu: an onnx.ModelProto."""
    def w(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    inits = [w("ws", (s, c, 1, 1)), w("bs", (s,)), w("w1", (e, s, 1, 1)), w("b1", (e,)),
             w("w3", (e, s, 3, 3)), w("b3", (e,)), w("wn", (c, 2 * e, 1, 1)), w("bn", (c,))]
    nodes = [
        helper.make_node("Conv", ["x", "ws", "bs"], ["s"]), helper.make_node("Relu", ["s"], ["sr"]),
        helper.make_node("Conv", ["sr", "w1", "b1"], ["e1"]), helper.make_node("Relu", ["e1"], ["e1r"]),
        helper.make_node("Conv", ["sr", "w3", "b3"], ["e3"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["e3"], ["e3r"]),
        helper.make_node("Concat", ["e1r", "e3r"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "wn", "bn"], ["n"]), helper.make_node("Relu", ["n"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "fire", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                            [1, c, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, hw, hw])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_fire_module_concat_in_nhwc_in_place_and_matches_onnxruntime():
    rng = np.random.default_rng(0)
    model = _fire_model(rng)
    mod = mlc.from_onnx(model)
    laid = run_stages(mod, CompileOptions(host_target(), threads=1), until="layout")[1]
    main = str(laid.get_function("main"))
    transposes = [ln for ln in main.splitlines() if "linalg.transpose" in ln]
    # the expand convs' results and the concatenation stay NHWC: the one transpose to NCHW
    # left is the output's (before the concat rule: each expand conv's result went to NCHW and
    # the concatenation back to NHWC)
    to_nchw = [ln for ln in transposes if "permutation = [0, 3, 1, 2]" in ln]
    assert len(to_nchw) == 1 and "return" not in to_nchw[0], transposes
    assert all("concat" not in ln for ln in transposes), transposes
    cat = [ln for ln in main.splitlines() if "tensor.insert_slice" in ln and "concat" in ln]
    assert len(cat) == 2 and all("into tensor<1x12x12x32xf32>" in ln for ln in cat), cat
    assert "[0, 0, 0, 16] [1, 12, 12, 16]" in cat[1], cat    # the second input: channels 16..32

    prepared = run_stages(mod, CompileOptions(host_target(), threads=1), until="prepare")[1]
    bufferized = run_pass_pipeline(prepared, "builtin.module(eliminate-empty-tensors,"
                                   "one-shot-bufferize{bufferize-function-boundaries "
                                   "function-boundary-type-conversion=identity-layout-map},"
                                   "canonicalize,cse)", "test")
    # copies into the concatenation (views of its 1x12x12x32 buffer, strides [4608, 384, 32, 1]);
    # other copies depend on the target's conv schedules (an im2col or GEMM reading a padded
    # buffer's interior may need one) and are not this test's subject
    lines = [ln for ln in str(bufferized).splitlines()
             if "memref.copy" in ln and "strided<[4608, 384, 32, 1]" in ln.rsplit(" to ", 1)[1]]
    copies = [ln.split("memref.copy")[1].split(":")[0].split(",") for ln in lines]
    # each expand conv wrote its slice of the concatenation: no copy but self-copies (a buffer
    # onto itself, what bufferization leaves of an in-place insert_slice), one per whole slice
    assert all(a.strip() == b.strip() for a, b in copies), copies
    assert sum(" to memref<1x12x12x16xf32, strided" in ln for ln in lines) == 2, lines

    x = rng.standard_normal((1, 16, 12, 12)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(mlc.compile(mod, threads=1)(x), ref, rtol=1e-4, atol=1e-4)


def _inception_model(rng, hw=14):
    """Two Inception blocks in a row, each concatenating on channels a 1x1 conv, 1x1 -> 3x3,
    1x1 -> 3x3 -> 3x3 (the 3x3s Winograd F(2x2, 3x3) by default) and a 3x3 average pool ->
    1x1, 16 channels each: several concatenations whose inputs are computed in interleaved
    order, moved before their producers by ``WriteReshapedIntoSlices``."""
    inits, nodes = [], []

    def conv(x, cin, cout, k, tag):
        for n, shape in ((f"{tag}_w", (cout, cin, k, k)), (f"{tag}_b", (cout,))):
            inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), n))
        nodes.append(helper.make_node("Conv", [x, f"{tag}_w", f"{tag}_b"], [f"{tag}_y"], pads=[k // 2] * 4))
        nodes.append(helper.make_node("Relu", [f"{tag}_y"], [f"{tag}_r"]))
        return f"{tag}_r"

    def block(x, c, tag):
        a = conv(x, c, 16, 1, tag + "a")
        b = conv(conv(x, c, 16, 1, tag + "b1"), 16, 16, 3, tag + "b2")
        cc = conv(conv(conv(x, c, 16, 1, tag + "c1"), 16, 16, 3, tag + "c2"), 16, 16, 3, tag + "c3")
        nodes.append(helper.make_node("AveragePool", [x], [tag + "p"], kernel_shape=[3, 3], pads=[1] * 4))
        nodes.append(helper.make_node("Concat", [a, b, cc, conv(tag + "p", c, 16, 1, tag + "d")], [tag + "cat"], axis=1))
        return tag + "cat"

    y = block(block("x", 16, "k1"), 64, "k2")
    graph = helper.make_graph(nodes, "inception", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, hw, hw])],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 64, hw, hw])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_inception_blocks_with_winograd_branches_match_onnxruntime():
    """The concatenations of two Inception blocks, moved before the Winograd producers that
    write into them, keep every value defined before its use (the module verifies) and the
    model matches onnxruntime."""
    rng = np.random.default_rng(0)
    model = _inception_model(rng)
    x = rng.standard_normal((1, 16, 14, 14)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(mlc.compile(mlc.from_onnx(model), threads=1)(x), want, rtol=1e-4, atol=1e-5)
