"""ONNX frontend: the new builder ops vs numpy, the shipped ONNX backend node cases (a smoke
subset through ``onnx.backend.test.BackendTest``), small onnx.helper models vs
``onnx.reference.ReferenceEvaluator``, import errors, and ``mlc compile`` / ``mlc run``."""

import math
import unittest

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops

onnx = pytest.importorskip("onnx")
import onnx.backend.test  # noqa: E402
from onnx import TensorProto as TP, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from mlc_mlir.cli.mlc import main as mlc_main  # noqa: E402
from mlc_mlir.frontends.onnx import from_onnx  # noqa: E402
from mlc_mlir.frontends.onnx_backend import make_backend  # noqa: E402

RNG = np.random.default_rng(0)


def _run(build, *arrays):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        args = [f.arg(f"a{i}", a.shape, str(a.dtype)) for i, a in enumerate(arrays)]
        outs = build(*args)
        f.output(*(outs if isinstance(outs, (list, tuple)) else [outs]))
    res = mlc.compile(bb.finish())(*arrays)
    return [np.asarray(r) for r in (res if isinstance(res, (list, tuple)) else [res])]


# ---------------------------------------------------------------------------- new builder ops
def test_math_ops_match_numpy():
    x = RNG.standard_normal((3, 4)).astype("float32")
    y = RNG.standard_normal((3, 4)).astype("float32")
    got = _run(lambda a, b: [ops.erf(a), ops.power(ops.abs(a), 1.5), ops.floor(a), ops.ceil(a),
                             ops.where(ops.less(a, b), a, b), ops.greater(a, b), ops.equal(a, a)], x, y)
    ref = [np.vectorize(math.erf)(x), np.abs(x) ** 1.5, np.floor(x), np.ceil(x), np.where(x < y, x, y),
           (x > y).astype(np.int8), np.ones_like(x, np.int8)]
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)


def test_indexing_ops_match_numpy():
    x = RNG.standard_normal((3, 1, 4)).astype("float32")
    idx = np.array([[0, -1], [2, 1]], np.int64)
    got = _run(lambda a, i: [ops.gather(a, i, axis=2), ops.squeeze(a, [1]), ops.unsqueeze(a, [0, 4]),
                             ops.expand(a, (2, 1)), *ops.split(a, [1, 3], axis=2)], x, idx)
    ref = [np.take(x, idx, axis=2), x[:, 0], x[None, ..., None], np.broadcast_to(x, (3, 2, 4)),
           x[..., :1], x[..., 1:]]
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)


def test_indexing_ops_errors():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", (3, 4), "float32")
        with pytest.raises(mlc.BuildError, match=r"squeeze: axis 0 .* has size 3; expected 1"):
            ops.squeeze(x, [0])
        with pytest.raises(mlc.BuildError, match=r"split: argument 'sizes' is \[1, 1\]"):
            ops.split(x, [1, 1])
        with pytest.raises(mlc.BuildError, match=r"where: argument 'cond' has dtype float32"):
            ops.where(x, x, x)
        f.output(x)


# ------------------------------------------------------------------ shipped backend node cases
SMOKE = ["test_relu", "test_add_bcast", "test_matmul_3d", "test_gemm_all_attributes",
         "test_conv_with_strides_padding", "test_maxpool_2d_pads", "test_softmax_axis_1",
         "test_transpose_all_permutations_2", "test_reshape_negative_dim", "test_concat_3d_axis_1",
         "test_averagepool_2d_strides", "test_gather_1", "test_unsqueeze_axis_1", "test_where_example",
         "test_batchnorm_example", "test_slice", "test_convtranspose_pads",
         "test_convtranspose_1d", "test_convtranspose_output_shape", "test_mod_mixed_sign_int32",
         "test_mod_mixed_sign_float32", "test_mod_broadcast", "test_gather_elements_negative_indices",
         "test_einsum_batch_diagonal", "test_einsum_batch_matmul", "test_resize_upsample_sizes_cubic",
         "test_resize_downsample_scales_linear_antialias", "test_resize_tf_crop_and_resize",
         "test_resize_upsample_sizes_nearest_floor_align_corners", "test_top_k_smallest"]


def test_backend_node_smoke_subset():
    bt = onnx.backend.test.BackendTest(make_backend(mlc.compile), __name__)
    for name in SMOKE:
        bt.include(f"^{name}_cpu$")
    suite = unittest.TestSuite()
    suite.addTests(unittest.TestLoader().loadTestsFromTestCase(bt.test_cases["OnnxBackendNodeModelTest"]))
    result = unittest.TestResult()
    suite.run(result)
    ran = result.testsRun - len(result.skipped)
    bad = [f"{t}: {e.strip().splitlines()[-1]}" for t, e in result.failures + result.errors]
    assert ran == len(SMOKE) and not bad, "\n".join(bad)


# ------------------------------------------------------------------------------ small models
def _mlp_model():
    w1 = RNG.standard_normal((16, 8)).astype("float32")
    b1 = RNG.standard_normal(16).astype("float32")
    w2 = RNG.standard_normal((8, 4)).astype("float32")
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Shape", ["r"], ["s"]),
             helper.make_node("Reshape", ["r", "s"], ["r2"]),
             helper.make_node("Split", ["r2"], ["p", "q"], axis=1, num_outputs=2),
             helper.make_node("Add", ["p", "q"], ["pq"]),
             helper.make_node("MatMul", ["pq", "w2"], ["m"]),
             helper.make_node("Erf", ["m"], ["e"]),
             helper.make_node("LogSoftmax", ["e"], ["y"], axis=-1)]
    g = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TP.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TP.FLOAT, None)],
        [helper.make_tensor(n, TP.FLOAT, a.shape, a.ravel()) for n, a in (("w1", w1), ("b1", b1), ("w2", w2))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _cnn_model():
    w = RNG.standard_normal((4, 3, 3, 3)).astype("float32")
    scale = RNG.uniform(0.5, 1.5, 4).astype("float32")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], auto_pad="SAME_UPPER", strides=[2, 2]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"]),
             helper.make_node("Clip", ["bn", "lo", "hi"], ["cl"]),
             helper.make_node("GlobalAveragePool", ["cl"], ["gp"]),
             helper.make_node("Flatten", ["gp"], ["y"])]
    inits = [helper.make_tensor("w", TP.FLOAT, w.shape, w.ravel()),
             helper.make_tensor("scale", TP.FLOAT, [4], scale),
             helper.make_tensor("bias", TP.FLOAT, [4], np.zeros(4, np.float32) + 0.1),
             helper.make_tensor("mean", TP.FLOAT, [4], np.zeros(4, np.float32)),
             helper.make_tensor("var", TP.FLOAT, [4], np.ones(4, np.float32)),
             helper.make_tensor("lo", TP.FLOAT, [], [0.0]), helper.make_tensor("hi", TP.FLOAT, [], [6.0])]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 3, 9, 9])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    # opset 15: onnx.reference's BatchNormalization-14 treats an absent training_mode as training
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])


@pytest.mark.parametrize("make, shape", [(_mlp_model, (5, 8)), (_cnn_model, (1, 3, 9, 9))])
def test_small_models_match_reference_evaluator(make, shape):
    model = make()
    x = RNG.standard_normal(shape).astype("float32")
    mod = from_onnx(model, input_shapes={"x": shape})
    assert not mod.params  # initializers are constants by default
    kept = from_onnx(model, input_shapes={"x": shape}, keep_params=True)
    assert set(kept.params) & {"w", "w1"}  # or params named like the initializers
    got = np.asarray(mlc.compile(mod)(x))
    ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def _mod_gather_einsum_model(opset):
    w = RNG.standard_normal((4, 3)).astype("float32")
    nodes = [helper.make_node("Mod", ["i", "d"], ["m"]),                    # numpy.mod, broadcast (3,)
             helper.make_node("Mod", ["i", "d"], ["mf"], fmod=1),           # numpy.fmod
             helper.make_node("GatherElements", ["x", "m"], ["g"], axis=-1),
             helper.make_node("Mod", ["g", "s"], ["gm"], fmod=1),           # float fmod
             helper.make_node("Einsum", ["gm", "w"], ["y"], equation="bi, ji -> bj")]
    g = helper.make_graph(
        nodes, "mge", [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3]),
                       helper.make_tensor_value_info("i", TP.INT64, [2, 3])],
        [helper.make_tensor_value_info("y", TP.FLOAT, None), helper.make_tensor_value_info("mf", TP.INT64, None)],
        [helper.make_tensor("d", TP.INT64, [3], [3, -3, 2]), helper.make_tensor("s", TP.FLOAT, [], [0.75]),
         helper.make_tensor("w", TP.FLOAT, w.shape, w.ravel())])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("opset", [13, 21])
def test_mod_gather_elements_einsum_match_reference_evaluator(opset):
    model = _mod_gather_einsum_model(opset)
    x = RNG.standard_normal((2, 3)).astype("float32") * 3
    i = np.array([[-7, 5, 0], [4, -2, -9]], np.int64)
    got = mlc.compile(from_onnx(model))(x, i)
    for g, r in zip(got, ReferenceEvaluator(model).run(None, {"x": x, "i": i})):
        np.testing.assert_allclose(np.asarray(g), r, rtol=1e-5, atol=1e-6)


def test_constant_node_the_reference_evaluator_cannot_fold_is_converted():
    """A node on constants only is folded with ``onnx.reference``; when its kernel fails
    (GatherElements picks with ``np.choose``, at most 64 choices: BERT's token-type ids from
    ``torch.onnx.export``), the converter builds the op instead of the import crashing."""
    data = RNG.integers(0, 9, (1, 512)).astype(np.int64)
    index = np.tile(np.arange(128, dtype=np.int64)[::-1], (1, 1))
    nodes = [helper.make_node("GatherElements", ["d", "k"], ["g"], axis=1),
             helper.make_node("Cast", ["g"], ["gf"], to=TP.FLOAT),
             helper.make_node("Add", ["x", "gf"], ["y"])]
    g = helper.make_graph(nodes, "ge", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 128])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)],
                          [helper.make_tensor("d", TP.INT64, data.shape, data.ravel()),
                           helper.make_tensor("k", TP.INT64, index.shape, index.ravel())])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = RNG.standard_normal((1, 128)).astype("float32")
    got = mlc.compile(from_onnx(model))(x)
    np.testing.assert_allclose(np.asarray(got), x + np.take_along_axis(data, index, 1), rtol=1e-6)


def test_mod_fmod_attribute_is_checked():
    node = helper.make_node("Mod", ["x", "x"], ["y"], name="m1", fmod=2)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TP.INT32, [3])],
                          [helper.make_tensor_value_info("y", TP.INT32, None)])
    with pytest.raises(mlc.BuildError, match=r"onnx node 'm1' \(Mod\): attribute 'fmod' is 2; expected 0 or 1"):
        from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))


# ------------------------------------------------------------------------------------ errors
def test_unnamed_dynamic_dim_needs_input_shapes():
    model = _mlp_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = ""
    with pytest.raises(mlc.BuildError, match=r"input 'x' has a dynamic dim 0 \('\?'\).*input_shapes"):
        from_onnx(model)


def test_unsupported_ops_are_listed_with_counts():
    nodes = [helper.make_node("NonZero", ["x"], ["a"]), helper.make_node("NonZero", ["a"], ["b"]),
             helper.make_node("Unique", ["b"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, [2, 2])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(mlc.BuildError, match=r"2 unsupported op type\(s\) at opset 18: NonZero \(x2\), Unique \(x1\)"):
        from_onnx(model)


def test_converter_error_names_node_and_attribute():
    node = helper.make_node("MaxPool", ["x"], ["y"], name="pool1", kernel_shape=[2, 2], storage_order=1)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 1, 4, 4])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(mlc.BuildError, match=r"onnx node 'pool1' \(MaxPool\): attribute 'storage_order' is 1"):
        from_onnx(model)


# --------------------------------------------------------------------------------------- CLI
def test_cli_compile_and_run(tmp_path, capsys):
    model = _cnn_model()
    onnx.save(model, tmp_path / "cnn.onnx")
    lib = tmp_path / "cnn.so"
    assert mlc_main(["compile", str(tmp_path / "cnn.onnx"), "--target", "cpu", "-o", str(lib)]) == 0
    x = RNG.standard_normal((1, 3, 9, 9)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    capsys.readouterr()
    assert mlc_main(["run", str(lib), "--input", str(tmp_path / "x.npy"), "--bench"]) == 0
    out = capsys.readouterr().out
    assert "output 0: shape (1, 4) dtype float32" in out and "latency:" in out and "median of" in out
    exe = mlc.runtime.load_library(str(lib))
    np.testing.assert_allclose(np.asarray(exe(x)), ReferenceEvaluator(model).run(None, {"x": x})[0],
                               rtol=1e-4, atol=1e-5)


def test_cli_compile_rejects_non_onnx(tmp_path, capsys):
    assert mlc_main(["compile", str(tmp_path / "m.pt"), "-o", str(tmp_path / "m.so")]) == 2
    assert "expected MODEL.onnx" in capsys.readouterr().err
