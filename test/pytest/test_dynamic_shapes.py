"""Symbolic shapes: one compile serves every size. Ops on ``tensor<?x...>`` vs numpy at sizes
1, odd and the maximum, with plain loops (``schedule="none"``) and the default schedule; the
build-time shape errors; the call-time size and bound checks."""

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.errors import BuildError, ExecutionError
from mlc_mlir.pipeline.layout_passes import SpecializeUnitRows
from mlc_mlir.graph.fold_constant import FoldConstant
from mlc_mlir.graph.fuse_ops import FuseOps
from mlc_mlir.ir.symbolic import parse, symbol
from mlc_mlir.runtime import load_library
from mlc_mlir.schedule.default_rules import apply_default_schedule
from mlc_mlir.target import Target
from mlc_mlir.tune.task import extract_tasks

RNG = np.random.default_rng(0)
W = RNG.standard_normal((16, 24)).astype(np.float32)
SIZES = [{"n": 1, "m": 1}, {"n": 7, "m": 13}, {"n": 64, "m": 33}]


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _layer_norm(x):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * 2 + 1


CONV_W = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)


def _conv_relu(x):
    """3x3 convolution (padding 1) + relu in numpy (sliding windows)."""
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))   # n, c, h, w, 3, 3
    return np.maximum(np.einsum("nchwij,fcij->nfhw", win, CONV_W), 0)


def _bounded(lo):
    def build(f, x):
        f.dim("n", min=lo, max=64)
        return ops.slice(x, [1], [None]) if lo == 2 else ops.slice(x, [None], [-1])
    return build


def _last_row(f, x):
    """``x[-1:]``: a begin counted from the end of a symbolic axis (bounds prove n >= 1)."""
    f.dim("n", min=1, max=64)
    return ops.slice(x, [-1], [None]) + 1.0


#: name -> (build(f, *args), numpy reference, argument shapes)
CASES = {
    "elementwise": (lambda f, x, b: ops.relu(x + b) * 2.0, lambda x, b: np.maximum(x + b, 0) * 2,
                    [("n", "m", 8), (8,)]),
    "broadcast": (lambda f, x, y: x * y + 1.0, lambda x, y: x * y + 1, [("n", 1), (1, "m")]),
    "gelu": (lambda f, x: ops.gelu(x), None, [("n", 5)]),
    "matmul_m": (lambda f, a: ops.matmul(a, W[:, :16]), lambda a: a @ W[:, :16], [("n", 16)]),
    "matmul_mk": (lambda f, a, b: ops.matmul(a, b), lambda a, b: a @ b, [("n", "m"), ("m", 24)]),
    "matmul_all": (lambda f, a, b: ops.matmul(a, b), lambda a, b: a @ b, [("n", "m"), ("m", "n")]),
    "dense": (lambda f, x: ops.dense(x, W, np.ones(16, np.float32)), lambda x: x @ W.T + 1,
              [("n", 24)]),
    "batch_matmul": (lambda f, a, b: ops.batch_matmul(a, b), lambda a, b: a @ b,
                     [(2, "n", "m"), (2, "m", 5)]),
    "sum_rows": (lambda f, x: ops.sum(x, axis=1), lambda x: x.sum(1), [("n", "m")]),
    "max_cols": (lambda f, x: ops.max(x, axis=0), lambda x: x.max(0), [("n", "m")]),
    "mean": (lambda f, x: ops.mean(x, axis=-1, keepdims=True), lambda x: x.mean(-1, keepdims=True),
             [("n", "m")]),
    "softmax": (lambda f, x: ops.softmax(x, axis=-1), _softmax, [("n", "m")]),
    "layer_norm": (lambda f, x: ops.layer_norm(x, np.full(32, 2, np.float32), np.ones(32, np.float32)),
                   _layer_norm, [("n", 32)]),
    "reshape": (lambda f, x: ops.reshape(x, (-1, 4)), lambda x: x.reshape(-1, 4), [("n", 8)]),
    "reshape_flat": (lambda f, x: ops.reshape(x, (f.dim("n") * 8,)), lambda x: x.reshape(-1),
                     [("n", 8)]),
    "concat_dyn_axis": (lambda f, x, y: ops.concat([x, y], axis=0), lambda x, y: np.concatenate([x, y]),
                        [("n", 3), ("m", 3)]),
    "concat": (lambda f, x, y: ops.concat([x, y], axis=1), lambda x, y: np.concatenate([x, y], 1),
               [("n", 3), ("n", 2)]),
    "slice_static_axis": (lambda f, x: ops.slice(x, [0, 1], [None, 3]), lambda x: x[:, 1:3],
                          [("n", 5)]),
    "slice_from": (_bounded(2), lambda x: x[1:], [("n", 3)]),
    "slice_to_end_minus_1": (_bounded(1), lambda x: x[:-1], [("n", 3)]),
    "slice_last_row": (_last_row, lambda x: x[-1:] + 1, [("n", 3)]),
    "reshape_minus1_beside_symbolic": (lambda f, x: ops.reshape(x, (-1, x.shape[1])) * 2.0,
                                       lambda x: x.reshape(-1, x.shape[1]) * 2, [(2, "n", 3)]),
    "arange_rows": (lambda f, x: x + ops.reshape(ops.arange(1, x.shape[0] + 1, dtype="float32"), (x.shape[0], 1)),
                    lambda x: x + np.arange(1, x.shape[0] + 1)[:, None], [("n", 3)]),
    "transpose": (lambda f, x: ops.transpose(x), lambda x: x.T, [("n", "m")]),
    "conv2d_batch": (lambda f, x: ops.relu(ops.conv2d(x, CONV_W, padding=(1, 1))), _conv_relu,
                     [("n", 3, 6, 6)]),
}


def _concrete(shape, sizes):
    return tuple(sizes.get(d, 2) if isinstance(d, str) else d for d in shape)


def _module(case):
    build, _, shapes = CASES[case]
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        args = [f.arg(f"a{i}", shape=s, dtype="float32") for i, s in enumerate(shapes)]
        f.output(build(f, *args))
    return bb.finish()


def _gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


@pytest.mark.parametrize("schedule", ["none", "default"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_one_compile_serves_every_size(case, schedule):
    mod = _module(case)
    _, ref, shapes = CASES[case]
    ref = ref or _gelu
    exe = mlc.compile(mod, schedule=schedule)
    sizes = SIZES if not case.startswith("slice_from") else [{"n": 2}, {"n": 7}, {"n": 64}]
    for sz in sizes:
        arrays = [RNG.standard_normal(_concrete(s, sz)).astype(np.float32) for s in shapes]
        np.testing.assert_allclose(exe(*arrays), ref(*arrays), rtol=2e-4, atol=2e-4,
                                   err_msg=f"{case} at {sz}")


def test_update_slice_of_a_symbolic_length_and_arange_steps():
    """A symbolic-length update (a prompt's keys) written at a run-time offset into a static
    buffer (a KV cache) vs numpy at lengths 1, odd and the maximum; integer aranges with steps."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.dim("n", min=1, max=40)
        c, u, p = f.arg("c", (40, 8)), f.arg("u", ("n", 8)), f.arg("p", (1,), "int64")
        new = ops.update_slice(c, u, [p, 0])
        f.write_argument(c, new)
        f.output(ops.sum(new, axis=0))
    exe = mlc.compile(bb.finish())
    for n, at in ((1, 39), (7, 5), (40, 0), (9, 35)):   # 35 + 9 > 40: clamped to 31, as XLA
        c = RNG.standard_normal((40, 8)).astype(np.float32)
        u = RNG.standard_normal((n, 8)).astype(np.float32)
        want = c.copy()
        start = min(at, 40 - n)
        want[start:start + n] = u
        np.testing.assert_allclose(exe(c, u, np.array([at])), want.sum(0), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(c, want)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", (5,), "int64")
        f.output(ops.add(x, ops.arange(10, 0, -2)), ops.arange(0, 5, 1, "int32"))
    got = mlc.compile(bb.finish())(np.zeros(5, np.int64))
    np.testing.assert_array_equal(got[0], np.arange(10, 0, -2))
    np.testing.assert_array_equal(got[1], np.arange(5, dtype=np.int32))
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:   # a step over a symbolic length: ceil(m / 2) elements
        y = f.arg("y", ("m",))
        f.output(ops.add(ops.cast(ops.arange(1, y.shape[0], 2), "float32"), 0.5))
    exe = mlc.compile(bb.finish())
    for m in (1, 2, 7):
        np.testing.assert_array_equal(exe(np.zeros(m, np.float32)), np.arange(1, m, 2) + 0.5)
    with pytest.raises(BuildError, match="arange: .*non-zero delta"):
        with mlc.GraphBuilder().function("main") as f:
            ops.arange(0, f.arg("y", ("m",)).shape[0], 0)
    bb = mlc.GraphBuilder()
    with pytest.raises(BuildError, match="update_slice: argument 'update'"):
        with bb.function("main") as f:   # an unbounded length may not fit the buffer
            c, u = f.arg("c", (40, 8)), f.arg("u", ("m", 8))
            f.output(ops.update_slice(c, u, [0, 0]))


def test_types_and_signature():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=("batch", "seq", 128))
        f.dim("seq", min=1, max=2048)
        y = ops.relu(x)
        assert str(y.type) == "tensor<?x?x128xf32>"
        assert [str(d) for d in y.shape] == ["batch", "seq", "128"]
        f.output(ops.reshape(y, (f.dim("batch") * f.dim("seq"), 128)))
    mod = bb.finish()
    sig = mod.signature("main")
    assert [str(d) for d in sig.results[0].shape] == ["batch*seq", "128"]
    assert sig.dims == {"seq": (1, 2048)}
    text = str(mod)
    assert "tensor.dim" in text and "tensor.empty(%dim" in text


def test_build_time_errors():
    bb = mlc.GraphBuilder()
    with pytest.raises(BuildError, match=r"broadcastable \(dimension -1: 7 vs n\)"):
        with bb.function("a") as f:
            ops.add(f.arg("x", shape=("n",)), f.arg("y", shape=(7,)))
    bb = mlc.GraphBuilder()
    with pytest.raises(BuildError, match="m vs n.*use one name"):
        with bb.function("a") as f:
            ops.add(f.arg("x", shape=("n",)), f.arg("y", shape=("m",)))
    bb = mlc.GraphBuilder()
    with pytest.raises(BuildError, match=r"matmul: argument 'b' has shape \(m, 4\); expected \(n, N\)"):
        with bb.function("a") as f:
            ops.matmul(f.arg("x", shape=(2, "n")), f.arg("y", shape=("m", 4)))
    bb = mlc.GraphBuilder()
    with pytest.raises(BuildError, match=r"argument 'begin' is -3 \+ m, whose sign the bounds"):
        with bb.function("a") as f:
            m = f.arg("y", shape=("m",)).shape[0]
            ops.slice(f.arg("x", shape=("n",)), [m - 3], [None])
    bb = mlc.GraphBuilder()
    with pytest.raises(BuildError, match="cannot reshape"):
        with bb.function("a") as f:
            ops.reshape(f.arg("x", shape=("n", 3)), (-1, 4))
    bb = mlc.GraphBuilder()
    with pytest.raises(BuildError, match="min=1, max=2048"):
        with bb.function("a") as f:
            f.dim("seq", min=1, max=2048)
            f.dim("seq", max=4)


def test_call_checks_sizes_and_bounds():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(2, "seq"))
        y = f.arg("y", shape=("seq",))
        f.dim("seq", min=1, max=2048)
        f.output(x + y)
    exe = mlc.compile(bb.finish())
    with pytest.raises(ExecutionError, match=r"size 'seq' is 7 in x.shape\[1\] but 9 in y.shape\[0\]"):
        exe(np.zeros((2, 7), np.float32), np.zeros(9, np.float32))
    with pytest.raises(ExecutionError, match=r"size 'seq' is 3000 \(x.shape\[1\]\); expected at most 2048"):
        exe(np.zeros((2, 3000), np.float32), np.zeros(3000, np.float32))
    with pytest.raises(ExecutionError, match=r"size 'seq' is 0 \(x.shape\[1\]\); expected at least 1"):
        exe(np.zeros((2, 0), np.float32), np.zeros(0, np.float32))
    with pytest.raises(ExecutionError, match=r"argument 'x' has shape \(3, 4\); expected \(2, seq\)"):
        exe(np.zeros((3, 4), np.float32), np.zeros(4, np.float32))
    with pytest.raises(ExecutionError, match=r"argument 'x' has shape \(4,\); expected \(2, seq\)"):
        exe(np.zeros(4, np.float32), np.zeros(4, np.float32))
    a, b = RNG.standard_normal((2, 5)).astype(np.float32), RNG.standard_normal(5).astype(np.float32)
    np.testing.assert_allclose(exe(a, b), a + b)
    out = np.empty((2, 5), np.float32)
    exe(a, b, out=out)
    np.testing.assert_allclose(out, a + b)
    with pytest.raises(ExecutionError, match=r"has shape \(2, 4\); expected \(2, 5\)"):
        exe(a, b, out=np.empty((2, 4), np.float32))


def test_derived_argument_size_is_checked():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=("n",))
        y = f.arg("y", shape=("2*n",))
        f.output(ops.concat([x, x], axis=0) + y)
    exe = mlc.compile(bb.finish())
    a, b = np.arange(3, dtype=np.float32), np.ones(6, np.float32)
    np.testing.assert_allclose(exe(a, b), np.concatenate([a, a]) + b)
    with pytest.raises(ExecutionError, match=r"argument 'y' has shape\[0\] = 5; expected 2\*n = 6"):
        exe(a, np.ones(5, np.float32))


def test_fused_primitives_of_symbolic_shapes():
    """FuseOps outlines dynamic ops with their sizes (tensor.dim) re-read inside each primitive;
    the compiled module returns an argument too (a copy with dynamic sizes)."""
    w = RNG.standard_normal((16, 8)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=("n", 16))
        y = ops.relu(ops.matmul(x, w) + np.ones(8, np.float32))
        f.output(ops.softmax(y), x)
    mod = bb.finish()
    fused = FuseOps()(mod)
    assert len(fused.function_names()) > 1
    for m in (mod, fused):
        exe = mlc.compile(m)
        for n in (1, 5, 64):
            xv = RNG.standard_normal((n, 16)).astype(np.float32)
            r, xx = exe(xv)
            np.testing.assert_allclose(r, _softmax(np.maximum(xv @ w + 1, 0)), rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(xx, xv)


def _two_arg_module(kind, m, n, k):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a, b = f.arg("a", shape=(m, k)), f.arg("b", shape=(k, n))
        f.output(ops.matmul(a, b, name="op") if kind == "matmul" else ops.relu(a, name="op"))
    return bb.finish()


def _replays(sch, mod):
    t2 = mlc.Trace.from_json(sch.trace.as_json())
    assert t2 == sch.trace
    assert str(mlc.Schedule.from_trace(mod, t2).mod) == str(sch.mod)


@pytest.mark.parametrize("kind", ["elementwise", "matmul"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_split_with_partial_tiles(kind, dynamic):
    """split factors that do not divide the extent (13 rows by 4, 20 columns by 8) or a dynamic
    extent: partial tiles, the vectorized one with masks; vs numpy and replayed from JSON."""
    m = "m" if dynamic else 13
    mod = _two_arg_module(kind, m, 20, 9)
    sch = mlc.Schedule(mod)
    loops = sch.get_loops(sch.get_block("op"))
    i0, i1 = sch.split(loops[0], [None, 4])
    j0, j1 = sch.split(loops[1], [None, 8])
    assert [sch.get(lp).extent for lp in (i0, i1, j0, j1)] == [None if dynamic else 4, 4, 3 if kind == "matmul" else 2, 8]
    if kind == "matmul":
        sch.reorder(i0, j0, loops[2], i1, j1)
    else:
        sch.reorder(i0, j0, i1, j1)
    sch.parallel(i0)
    sch.vectorize(i1)
    _replays(sch, mod)
    text = str(sch.mod)
    assert "affine.min" in text and "vector.create_mask" in text
    exe = mlc.compile(sch.mod)
    for rows in ([1, 13, 30] if dynamic else [13]):
        a = RNG.standard_normal((rows, 9)).astype(np.float32)
        b = RNG.standard_normal((9, 20)).astype(np.float32)
        want = a @ b if kind == "matmul" else np.maximum(a, 0)
        np.testing.assert_allclose(exe(a, b), want, rtol=1e-5, atol=1e-5)


def test_split_factor_errors():
    sch = mlc.Schedule(_two_arg_module("matmul", "m", 20, 9))
    i, j, k = sch.get_loops(sch.get_block("op"))
    with pytest.raises(mlc.ScheduleError, match=r"dynamic extent; expected factors \[None, <ints>"):
        sch.split(i, [4, None])
    with pytest.raises(mlc.ScheduleError, match=r"do not cover extent 20 of loop j"):
        sch.split(j, [2, 8])
    with pytest.raises(mlc.ScheduleError, match=r"dynamic extent inside the vectorized tile"):
        sch.vectorize(i)


def test_default_schedule_peels_dynamic_matmul():
    """The default rule for a matmul of dynamic M: register tiles over M x N, the loop over M
    peeled (full tiles static and unmasked, the remainder one row at a time); no padding."""
    w = RNG.standard_normal((64, 96)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.matmul(f.arg("x", shape=("n", 64)), w, name="mm"))
    mod = bb.finish()
    sch = apply_default_schedule(mlc.Schedule(mod), Target.host(), threads=1)
    assert "mm" in str(sch.trace) and "split" in str(sch.trace)
    text = str(sch.mod)
    assert "vector.create_mask" not in text and "tensor.pad" not in text
    assert "vector.fma" in text or "vector.contract" in text or "vector.outerproduct" in text
    exe = mlc.compile(sch.mod)
    for n in (1, 3, 17, 64):
        x = RNG.standard_normal((n, 64)).astype(np.float32)
        np.testing.assert_allclose(exe(x), x @ w, rtol=1e-4, atol=1e-4)


def test_aot_library_keeps_the_symbolic_signature(tmp_path):
    """export_library writes the symbolic sizes and bounds; the loaded library serves every
    size and checks bounds like the JIT."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=("n", 8))
        f.dim("n", min=1, max=100)
        f.output(ops.softmax(x * 2.0))
    path = mlc.compile(bb.finish()).export_library(str(tmp_path / "dyn.so"))
    lib = load_library(path)
    assert [str(d) for d in lib["main"].signature.args[0].shape] == ["n", "8"]
    for n in (1, 9, 100):
        x = RNG.standard_normal((n, 8)).astype(np.float32)
        np.testing.assert_allclose(lib(x), _softmax(2 * x), rtol=1e-5, atol=1e-6)
    with pytest.raises(ExecutionError, match=r"size 'n' is 101 \(x.shape\[0\]\); expected at most 100"):
        lib(np.zeros((101, 8), np.float32))


def test_from_torch_keeps_export_dims_symbolic():
    """torch.export Dims become named symbolic sizes with their bounds (no silent
    specialization to the example shape); ``view(b * s, ...)`` goes through sym_size and
    size arithmetic."""
    torch = pytest.importorskip("torch")
    from torch.export import Dim

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 32)
            self.ln = torch.nn.LayerNorm(32)

        def forward(self, x):
            return torch.softmax(torch.nn.functional.gelu(self.ln(self.lin(x))), -1).mean(1)

    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3).eval()
    mod = mlc.from_torch(lin, (torch.randn(2, 4),),
                         dynamic_shapes={"input": {0: Dim("batch", min=1, max=64)}})
    sig = mod.signature("main")
    assert [str(d) for d in sig.args[-1].shape] == ["batch", "4"] and sig.dims == {"batch": (1, 64)}
    exe = mlc.compile(mod)
    for b in (1, 5, 64):
        x = torch.randn(b, 4)
        np.testing.assert_allclose(exe(x.numpy()), lin(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(ExecutionError, match="size 'batch' is 65"):
        exe(np.zeros((65, 4), np.float32))
    block = Block().eval()
    mod = mlc.from_torch(block, (torch.randn(2, 8, 16),),
                         dynamic_shapes={"x": {1: Dim("seq", min=1, max=128)}})
    exe = mlc.compile(mod)
    for s in (1, 7, 128):
        x = torch.randn(2, s, 16)
        np.testing.assert_allclose(exe(x.numpy()), block(x).detach().numpy(), rtol=1e-4, atol=1e-5)

    class Sum(torch.nn.Module):   # *args: one spec tuple covers more inputs than x has dims
        def forward(self, x, *ys):
            return x.sum(1) + sum(ys)

    ys = tuple(torch.randn(3) for _ in range(4))
    mod = mlc.from_torch(Sum(), (torch.randn(3, 5), *ys),
                         dynamic_shapes={"x": {1: Dim("cols", min=1, max=9)}, "ys": (None,) * 4})
    assert mod.signature("main").dims == {"cols": (1, 9)}


def test_from_onnx_keeps_dim_params_symbolic():
    """An ONNX dim_param stays a symbolic size (Shape -> Reshape included) unless input_shapes
    fixes it; one compile matches onnxruntime at several batch sizes."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from mlc_mlir.frontends.onnx import from_onnx
    from test_frontend_onnx import _mlp_model
    model = _mlp_model()
    mod = from_onnx(model)
    assert [str(d) for d in mod.signature("main").args[0].shape] == ["batch", "8"]
    assert from_onnx(model, input_shapes={"x": (3, 8)}).signature("main").args[0].shape == (3, 8)
    exe = mlc.compile(mod.bind_params())
    sess = ort.InferenceSession(model.SerializeToString())
    for b in (1, 3, 32):
        x = RNG.standard_normal((b, 8)).astype(np.float32)
        np.testing.assert_allclose(exe(x), sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_cuda_target_refuses_symbolic_sizes():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.relu(f.arg("x", shape=("n", 4))))
    with pytest.raises(mlc.PipelineError, match=r"\['main'\] have symbolic sizes"):
        mlc.build_library(bb.finish(), "/nonexistent/x.so", target="cuda")


def test_fold_constant_on_a_dynamic_graph():
    """FoldConstant folds the constant subgraph (relu, transpose of a weight) and leaves the
    dynamic ops; the folded module serves every size."""
    w = RNG.standard_normal((8, 16)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=("n", 16))
        f.output(ops.matmul(x, ops.transpose(ops.relu(w))) + 1.0)
    mod = bb.finish()
    folded = FoldConstant(mlc.compile)(mod)
    assert "linalg.transpose" in str(mod) and "linalg.transpose" not in str(folded)
    exe = mlc.compile(folded)
    for n in (1, 9):
        x = RNG.standard_normal((n, 16)).astype(np.float32)
        np.testing.assert_allclose(exe(x), x @ np.maximum(w, 0).T + 1, rtol=1e-5, atol=1e-5)


def test_unit_rows_specialization():
    """SpecializeUnitRows: a matmul of dynamic M becomes an scf.if on M == 1 calling a static
    1-row version or the dynamic one; the default schedule gives each its rule; both branches
    vs numpy from one compile."""
    w = RNG.standard_normal((32, 48)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.relu(ops.matmul(f.arg("x", shape=("n", 32)), w, name="mm")))
    mod = bb.finish()
    sp = SpecializeUnitRows()(mod)
    assert sorted(sp.function_names()) == ["main", "main_mm_rows", "main_mm_rows1"]
    text = str(sp)
    assert "scf.if" in text and "tensor<1x32xf32>" in text and "linalg.matmul" not in \
        text.split("func.func @main(")[1]
    exe = mlc.compile(mod)
    for n in (1, 2, 13):
        x = RNG.standard_normal((n, 32)).astype(np.float32)
        np.testing.assert_allclose(exe(x), np.maximum(x @ w, 0), rtol=1e-4, atol=1e-4)


def test_symbolic_size_algebra():
    """SymDim: canonical polynomials (provable equality only), text round trip, evaluation."""
    b, s = symbol("batch"), symbol("seq")
    assert b * s == s * b and s + s == 2 * s and (s + 1) - s == 1 and isinstance((s + 1) - s, int)
    assert b != s and (2 * s) // 2 == s
    for text in ("batch*seq", "2*seq + 1", "(seq + 1)//2", "seq - 1"):
        d = parse(text)
        assert parse(str(d)) == d
    assert parse("(seq + 1)//2").evaluate({"seq": 6}) == 3 and parse("2*seq - batch").evaluate(
        {"seq": 5, "batch": 3}) == 7
    with pytest.raises(BuildError, match="not an expression"):
        parse("seq +")


def test_tuning_tasks_skip_symbolic_sizes():
    """Primitives with symbolic sizes are no tuning tasks (measuring needs concrete sizes; the
    default schedule serves them); a module with nothing static left says so."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=("n", 16))
        y = f.arg("y", shape=(4, 16))
        f.output(ops.relu(x) * 2.0, ops.exp(y))
    tasks = extract_tasks(bb.finish())
    assert len(tasks) == 1
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.relu(f.arg("x", shape=("n", 16))))
    with pytest.raises(mlc.TuningError, match="no unit to tune .*with static shapes"):
        extract_tasks(bb.finish())


def test_slice_clamps_symbolic_bounds_vs_numpy():
    """Python/ONNX slice rules on a symbolic axis: negative bounds count from the end and every
    bound clamps to ``0 .. n``; one compile serves sizes where the clamps bite (n < |bound|)
    and where they do not, each result equal to numpy's. The result sizes carry ``min``/``max``
    (text form parsed back by the runtime) and a clamp the dims' bounds decide disappears."""
    cases = [(-5, None, 1), (2, -1, 1), (1, 7, 2), (-100, 3, 1), (-4, -1, 2), (3, 100, 3), (6, 2, 1), (-2, None, 1)]
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", ("n", 3), "float32")
        f.output(*[ops.slice(x, [b], [e], strides=[s]) for b, e, s in cases])
    mod = bb.finish()
    assert "max(-5 + n, 0)" in str(mod) and "arith.maxsi" in str(mod)
    exe = mlc.compile(mod)
    for n in (0, 1, 2, 3, 5, 8, 13, 120):
        xv = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
        got = exe(xv)
        for (b, e, s), g in zip(cases, got):
            np.testing.assert_array_equal(np.asarray(g), xv[b:e:s])
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.dim("n", min=5)
        y = ops.slice(f.arg("x", ("n", 3), "float32"), [-5], [None])
        f.output(y)
    assert y.shape == (5, 3)     # n >= 5: start n - 5, no clamp left
    assert "maxsi" not in str(bb.finish())


def test_symbolic_min_max_algebra():
    """``min``/``max`` atoms: constant differences decide, nesting flattens, text parses back,
    values evaluate, and the scope's bounds see through ``r - max(a, b) = min(r - a, r - b)``."""
    from mlc_mlir.builder.symbols import SymbolScope
    from mlc_mlir.ir.symbolic import maximum, minimum, parse, symbol
    n, m = symbol("n"), symbol("m")
    assert minimum(n + 1, n) == n and maximum(n + 1, n) == n + 1 and minimum(3, 5) == 3
    d = minimum(minimum(n, m), n + 4)
    assert str(d) == "min(m, n)" and parse(str(d)) == d
    e = maximum(n - 4095, 0)
    assert parse(str(n - e)) == n - e and (n - e).evaluate({"n": 5000}) == 4095
    assert (n - e).evaluate({"n": 7}) == 7 and e.symbols() == ("n",)
    scope = SymbolScope.__new__(SymbolScope)
    scope.bounds = {}
    assert scope.lower_bound(n - e) == 0 and scope.upper_bound(n - e) == 4095
    assert scope.maximum(n - e, 0) == n - e and scope.minimum(n - e, 4095) == n - e
    scope.bounds = {"n": (0, 4000)}
    assert scope.maximum(n - 4095, 0) == 0
