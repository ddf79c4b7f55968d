"""ONNX decoder LLMs with symbolic sizes vs onnxruntime: the ops a ``torch.onnx.export``-ed
transformers decoder needs (GatherND, Range/CumSum/Reshape over dynamic dims, IsNaN, Sin/Cos),
each in a small onnx.helper model with ``dim_param`` inputs compiled once and run at several
sizes, and tiny GPT-2 / Llama / Qwen2 exported with dynamic batch and sequence axes."""

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.errors import BuildError, ExecutionError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper  # noqa: E402

RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def _check(model, feeds_list, rtol=1e-5, atol=1e-5, **import_args):
    """Import ``model`` once (dims stay symbolic), compile once, compare every output with
    onnxruntime for each feeds dict."""
    exe = mlc.compile(mlc.from_onnx(model, **import_args))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for feeds in feeds_list:
        want = sess.run(None, feeds)
        got = exe(*feeds.values())
        got = got if isinstance(got, (list, tuple)) else [got]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), w.astype(np.int8) if w.dtype == np.bool_ else w,
                                       rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------- ops
def test_gather_nd_dynamic_vs_onnxruntime():
    """GatherND with data and indices computed at run time, over symbolic sizes, negative
    indices, batch_dims 0 and 1."""
    nodes = [helper.make_node("GatherND", ["x", "i"], ["y"]),
             helper.make_node("GatherND", ["x", "j"], ["z"], batch_dims=1)]
    m = _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, ["b", "s", 4]),
                       helper.make_tensor_value_info("i", TP.INT64, ["n", 2]),
                       helper.make_tensor_value_info("j", TP.INT64, ["b", 3, 1])],
               [helper.make_empty_tensor_value_info("y"),
                helper.make_empty_tensor_value_info("z")])
    feeds = []
    for b, s, n in [(1, 1, 1), (2, 5, 3), (3, 9, 7)]:
        i = np.stack([RNG.integers(-b, b, n), RNG.integers(-s, s, n)], axis=1)
        feeds.append({"x": RNG.standard_normal((b, s, 4)).astype(np.float32), "i": i,
                      "j": RNG.integers(-s, s, (b, 3, 1))})
    _check(m, feeds)


def test_gather_nd_index_out_of_range_raises():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", ("s", 3), "float32")
        i = f.arg("i", (2, 1), "int64")
        f.output(ops.gather_nd(x, i))
    exe = mlc.compile(bb.finish())
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(np.asarray(exe(x, np.array([[3], [-4]]))), x[[3, -4]])
    with pytest.raises(ExecutionError, match="gather_nd"):
        exe(x, np.array([[0], [4]]))
    with pytest.raises(BuildError, match="gather_nd"):
        ops.gather_nd(np.zeros((2, 3), np.float32), np.zeros((2, 3), np.int64))


def test_shape_arithmetic_over_dynamic_dims_vs_onnxruntime():
    """What a decoder's mask and position code does with a dynamic ``seq``: Shape -> Range,
    Add of sizes, Expand to a symbolic shape, CumSum along ``seq``, Reshape
    ``(b*s, d) -> (b, s, d)``, Slice ending at a size, IsNaN, Sin/Cos, Not/And of BOOL."""
    c = lambda name, v: helper.make_tensor(name, TP.INT64, [len(v)], v)  # noqa: E731
    inits = [c("zero", [0]), c("one", [1]), c("ax0", [0]), c("minus1", [-1]), c("d", [4]),
             helper.make_tensor("z", TP.INT64, [], [0]), helper.make_tensor("u", TP.INT64, [], [1])]
    nodes = [
        helper.make_node("Shape", ["x"], ["sh"]),
        helper.make_node("Gather", ["sh", "one"], ["s1"], axis=0),
        helper.make_node("Squeeze", ["s1", "ax0"], ["s"]),
        helper.make_node("Range", ["z", "s", "u"], ["pos"]),                      # (s,)
        helper.make_node("Add", ["s1", "one"], ["s_plus"]),                        # [s + 1]
        helper.make_node("Gather", ["sh", "zero"], ["b1"], axis=0),
        helper.make_node("Concat", ["b1", "s1"], ["bs"], axis=0),
        helper.make_node("Expand", ["pos", "bs"], ["posb"]),                       # (b, s)
        helper.make_node("CumSum", ["posb", "one"], ["cs"]),
        helper.make_node("Concat", ["minus1", "d"], ["flat"], axis=0),
        helper.make_node("Reshape", ["x", "flat"], ["x2"]),                        # (b*s, 4)
        helper.make_node("Concat", ["b1", "s1", "d"], ["back"], axis=0),
        helper.make_node("Reshape", ["x2", "back"], ["x3"]),                        # (b, s, 4)
        helper.make_node("Cast", ["posb"], ["pf"], to=TP.FLOAT),
        helper.make_node("Sin", ["pf"], ["sn"]),
        helper.make_node("Cos", ["pf"], ["cn"]),
        helper.make_node("Concat", ["posb", "posb"], ["cat"], axis=1),             # (b, 2s)
        helper.make_node("Slice", ["cat", "one", "s_plus", "one"], ["sl"]),        # cat[:, 1:s+1]
        helper.make_node("Div", ["x3", "x3"], ["q"]),
        helper.make_node("IsNaN", ["q"], ["nan"]),
        helper.make_node("Not", ["nan"], ["ok"]),
        helper.make_node("Equal", ["sl", "posb"], ["same"]),
        helper.make_node("And", ["ok", "nan"], ["none"]),
    ]
    outs = ["cs", "x3", "sn", "cn", "sl", "nan", "ok", "none"]
    m = _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, ["b", "s", 4])],
               [helper.make_empty_tensor_value_info(o) for o in outs], inits)
    feeds = []
    for b, s in [(1, 1), (2, 7), (3, 33)]:
        x = RNG.standard_normal((b, s, 4)).astype(np.float32)
        x[0, 0, 0] = 0.0  # 0/0: a NaN
        feeds.append({"x": x})
    _check(m, feeds)


def test_slice_clamped_starts_and_size_min_max_vs_onnxruntime():
    """ONNX Slice on a ``dim_param`` axis with starts/ends past either end (-4095 as Mistral's
    sliding window, 100, INT64_MAX), steps 1 and 2; and Max/Min of
    Shape values sizing an Expand: one compile, sizes 1..40 (the clamps bite below 4095, 100)."""
    c = lambda name, v: helper.make_tensor(name, TP.INT64, [len(v)], v)  # noqa: E731
    inits = [c("b0", [-4095]), c("e0", [2**63 - 1]), c("b1", [1]), c("e1", [100]), c("st2", [2]),
             c("b2", [-7]), c("e2", [-2]), c("ax", [0]), c("k", [6]), c("one", [1]), c("three", [3])]
    nodes = [
        helper.make_node("Slice", ["x", "b0", "e0", "ax"], ["y0"]),
        helper.make_node("Slice", ["x", "b1", "e1", "ax", "st2"], ["y1"]),
        helper.make_node("Slice", ["x", "b2", "e2", "ax"], ["y2"]),
        helper.make_node("Shape", ["x"], ["sh"], start=0, end=1),
        helper.make_node("Sub", ["sh", "k"], ["d"]),
        helper.make_node("Max", ["d", "one"], ["rows"]),                 # max(n - 6, 1)
        helper.make_node("Min", ["rows", "sh", "k"], ["rows2"]),         # min(max(n - 6, 1), n, 6)
        helper.make_node("Concat", ["rows2", "three"], ["shape"], axis=0),
        helper.make_node("Expand", ["w", "shape"], ["z"]),
    ]
    m = _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, ["n", 3]),
                       helper.make_tensor_value_info("w", TP.FLOAT, [1, 3])],
               [helper.make_empty_tensor_value_info(o) for o in ("y0", "y1", "y2", "z")], inits)
    feeds = [{"x": RNG.standard_normal((n, 3)).astype(np.float32), "w": RNG.standard_normal((1, 3)).astype(np.float32)}
             for n in (1, 2, 5, 6, 7, 12, 40)]
    _check(m, feeds)


def test_slice_negative_steps_vs_onnxruntime():
    """ONNX Slice with steps -1 and -2 on a ``dim_param`` axis and a static one: reversal
    (INT64_MAX:INT64_MIN), starts/ends past either end and negative ones, compiled once, sizes
    where the clamps bite and where they do not."""
    big, small = 2**63 - 1, -(2**63)
    cases = [(big, small, -1), (-2, 0, -1), (100, -100, -2), (3, -7, -1), (-1, 5, -2), (0, 4, -1)]
    inits, nodes, outs = [], [], []
    for k, (b, e, st) in enumerate(cases):
        for nm, v in (("b", b), ("e", e), ("s", st)):
            inits.append(helper.make_tensor(f"{nm}{k}", TP.INT64, [1], [v]))
        inits.append(helper.make_tensor(f"a{k}", TP.INT64, [1], [0]))
        nodes.append(helper.make_node("Slice", ["x", f"b{k}", f"e{k}", f"a{k}", f"s{k}"], [f"y{k}"]))
        outs.append(f"y{k}")
    inits.append(helper.make_tensor("ax1", TP.INT64, [1], [1]))
    nodes.append(helper.make_node("Slice", ["x", "b0", "e0", "ax1", "s0"], ["flip"]))   # static axis 1
    nodes.append(helper.make_node("Slice", ["x", "b1", "e1", "ax1", "s1"], ["part"]))
    m = _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, ["n", 3])],
               [helper.make_empty_tensor_value_info(o) for o in outs + ["flip", "part"]], inits)
    _check(m, [{"x": RNG.standard_normal((n, 3)).astype(np.float32)} for n in (1, 2, 3, 6, 9, 30)])


def test_dim_param_bounds():
    """A dim_param is >= 1 unless ``dim_bounds`` says otherwise; a call outside raises."""
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", TP.FLOAT, ["s", 2])],
               [helper.make_tensor_value_info("y", TP.FLOAT, ["s", 2])])
    exe = mlc.compile(mlc.from_onnx(m))
    with pytest.raises(ExecutionError, match="s"):
        exe(np.zeros((0, 2), np.float32))
    exe = mlc.compile(mlc.from_onnx(m, dim_bounds={"s": (0, 4)}))
    assert np.asarray(exe(np.zeros((0, 2), np.float32))).shape == (0, 2)
    with pytest.raises(ExecutionError, match="s"):
        exe(np.zeros((5, 2), np.float32))


def test_arange_and_size_array_symbolic():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.arg("x", ("n",), "float32")
        n = f.dim("n")
        f.output(ops.arange(n, 2 * n + 1), ops.arange(0, n, 2, dtype="float32"), ops.arange(1.5, 4.0, 0.5),
                 ops.size_array(np.array([n, 3, 2 * n], dtype=object)))
    exe = mlc.compile(bb.finish())
    for n in (1, 4, 7):
        a, b, c, d = (np.asarray(v) for v in exe(np.zeros(n, np.float32)))
        np.testing.assert_array_equal(d, [n, 3, 2 * n])
        np.testing.assert_array_equal(a, np.arange(n, 2 * n + 1))
        np.testing.assert_array_equal(b, np.arange(0, n, 2, dtype=np.float32))
        np.testing.assert_allclose(c, np.arange(1.5, 4.0, 0.5))


# ---------------------------------------------------------------------------- decoders
def _decoder(kind):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(n_layer=1, n_embd=64, n_head=4, vocab_size=100)
        return transformers.GPT2LMHeadModel(cfg).eval()
    name = {"llama": "Llama", "qwen2": "Qwen2", "mistral": "Mistral"}[kind]   # Qwen2: q/k/v biases
    cfg = getattr(transformers, name + "Config")(num_hidden_layers=1, hidden_size=64, intermediate_size=172,
                                                 num_attention_heads=4, num_key_value_heads=2, vocab_size=100)
    return getattr(transformers, name + "ForCausalLM")(cfg).eval()


@pytest.mark.parametrize("kind,past", [("gpt2", False), ("gpt2", True), ("llama", True), ("qwen2", True),
                                       ("mistral", True)])
def test_exported_decoder_dynamic_vs_onnxruntime(kind, past, tmp_path):
    """A tiny transformers decoder through ``export_decoder`` (``torch.onnx.export``, dynamo,
    dynamic batch/seq/past axes; logits only or the decoder with past): one import with the
    dims symbolic, one compile, every output (logits, ``present.*``) equal to onnxruntime's on
    the same file at sequence lengths 1, 7 and 33 (and past lengths 1, 5, 20 and an empty
    past: ``dim_bounds`` allows 0).

    Mistral's sliding window (4096) keeps ``past[..., -4095:, :]`` (a Slice clamped at 0) and
    sizes its mask with ``Max`` of sizes; the exported graph is consistent only for
    ``past <= 4095`` (onnxruntime fails to broadcast beyond), which ``dim_bounds`` declares."""
    pytest.importorskip("onnxscript")
    from mlc_mlir.llm.onnx_export import export_decoder
    model = _decoder(kind)
    path = str(tmp_path / f"{kind}.onnx")
    inputs, outputs = export_decoder(model, path, past=past)
    m = onnx.load(path)
    assert [d.dim_param for d in m.graph.input[0].type.tensor_type.shape.dim] == ["batch", "seq"]
    assert [o.name for o in m.graph.output] == outputs
    kv = (4 if kind == "gpt2" else 2, 16)
    feeds = []
    for b, s, p in [(1, 1, 1), (2, 7, 5), (1, 33, 20)] + ([(1, 6, 0)] if past else []):
        f = {"input_ids": RNG.integers(0, 100, (b, s))}
        for name in inputs[1:]:
            f[name] = RNG.standard_normal((b, kv[0], p, kv[1])).astype(np.float32)
        feeds.append(f)
    bounds = {"past": (0, 4095 if kind == "mistral" else None)} if past else None
    _check(m, feeds, rtol=1e-4, atol=1e-4, dim_bounds=bounds)
