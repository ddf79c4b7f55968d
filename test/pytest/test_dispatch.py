"""Library dispatch (OpenBLAS from JIT code, Python kernels), the mlc dialect, rewrite patterns."""

import os
import subprocess

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import graph, ops
from mlc_mlir._mlir import MLIR_BIN_DIR
from mlc_mlir.ir.context import dialect_files


def _mlp(params=False):
    rng = np.random.default_rng(0)
    p = {"w0": rng.standard_normal((32, 16)).astype(np.float32), "b0": rng.standard_normal(32).astype(np.float32),
         "w1": rng.standard_normal((10, 32)).astype(np.float32), "b1": rng.standard_normal(10).astype(np.float32)}
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(4, 16))
        w0, b0, w1, b1 = ((f.param(k, v) for k, v in p.items()) if params else p.values())
        f.output(ops.dense(ops.relu(ops.dense(x, w0, b0)), w1, b1))
    ref = lambda xn: np.maximum(xn @ p["w0"].T + p["b0"], 0) @ p["w1"].T + p["b1"]  # noqa: E731
    return bb.finish(), ref


@mlc.register_func("test.relu", override=True)
def _relu(x, out):
    np.maximum(x, 0, out=out)


@mlc.register_func("test.linear", override=True)
def _linear(x, w, b, out):
    np.matmul(x, w.T, out=out)
    out += b


@mlc.register_func("test.boom", override=True)
def _boom(x, out):
    raise ValueError("kernel failed on purpose")


def test_openblas_sgemm_called_from_jit_code():
    mod, ref = _mlp()  # constant weights: dense is a plain matmul on W^T
    blas = graph.DispatchLibrary({"dense": "openblas.sgemm"})(mod)
    text = str(blas)
    assert text.count('callee = "openblas.sgemm"') == 2 and "linalg.matmul" not in text
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(blas)(x), ref(x), rtol=1e-4, atol=1e-4)


def test_python_kernels_mixture_module():
    mod, ref = _mlp(params=True)
    mixed = graph.DispatchLibrary({"relu": "test.relu", "dense_1": "test.linear"})(mod)
    text = str(mixed)
    assert 'callee = "test.relu"' in text and 'callee = "test.linear"' in text
    assert text.count("linalg.matmul") == 1        # the first dense stays compiled
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(mixed)(x), ref(x), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mlc.compile(mixed.bind_params())(x), ref(x), rtol=1e-4, atol=1e-4)


def test_kernel_exception_becomes_execution_error():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.relu(f.arg("x", shape=(2, 2))))
    exe = mlc.compile(graph.DispatchLibrary({"relu": "test.boom"})(bb.finish()))
    with pytest.raises(mlc.ExecutionError, match="kernel 'test.boom' raised ValueError"):
        exe(np.ones((2, 2), np.float32))
    with pytest.raises(mlc.ExecutionError, match="no LLVM module to export"):
        exe.export_library("/tmp/never.so")


def test_dispatch_errors():
    mod, _ = _mlp(params=True)
    with pytest.raises(mlc.BuildError, match="kernel 'nope' .* is not registered"):
        graph.DispatchLibrary({"relu": "nope"})
    with pytest.raises(mlc.BuildError, match="openblas.sgemm: .dense. reads a transposed operand"):
        graph.DispatchLibrary({"dense": "openblas.sgemm"})(mod)
    with pytest.raises(mlc.ExecutionError, match="already registered"):
        mlc.register_func("test.relu", _relu)


def test_dispatch_unknown_names_list_what_exists():
    mod, _ = _mlp(params=True)
    with pytest.raises(mlc.BuildError, match=r"no op matches \['dense_7', 'relux'\]; ops in the module "
                                             r"answer to \[.*'dense', 'dense.bias_add', .*'relu'.*\]"):
        graph.DispatchLibrary({"relux": "test.relu", "dense_7": "test.linear", "relu": "test.relu"})(mod)
    with pytest.raises(mlc.BuildError, match=r"kernel 'env.nope' \(for 'relu'\) is not registered; "
                                             r"registered kernels: \[.*'test.linear', 'test.relu'.*\], "
                                             r"native providers: \['openblas.sgemm'\]"):
        graph.DispatchLibrary({"relu": "env.nope"})
    with pytest.raises(mlc.BuildError, match="non-empty dict"):
        graph.DispatchLibrary({})


def test_dispatch_after_fusion_finds_named_ops():
    """FuseOps keeps named matmuls (a flatten is not pushed into them), so dispatch by name
    still works on a fused module."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((10, 32)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(2, 2, 4, 4))
        f.output(ops.relu(ops.dense(ops.flatten(x, start_dim=1), w)))
    fused = graph.FuseOps()(bb.finish())
    blas = graph.DispatchLibrary({"dense": "openblas.sgemm"})(fused)
    assert 'callee = "openblas.sgemm"' in str(blas) and "linalg.matmul" not in str(blas)
    xn = rng.standard_normal((2, 2, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(blas)(xn), np.maximum(xn.reshape(2, 32) @ w.T, 0),
                               rtol=1e-4, atol=1e-4)


def test_mlc_dialect_parses_in_upstream_mlir_opt(tmp_path):
    mod, _ = _mlp()
    text = graph.DispatchLibrary({"relu": "test.relu"})(mod).to_text()
    (tmp_path / "m.mlir").write_text(text)
    out = subprocess.run([os.path.join(MLIR_BIN_DIR, "mlir-opt"), f"--irdl-file={dialect_files()[0]}",
                          str(tmp_path / "m.mlir")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert '"mlc.call_library"' in out.stdout
    bad = text.replace('callee = "test.relu", ', "")
    (tmp_path / "bad.mlir").write_text(bad)
    out = subprocess.run([os.path.join(MLIR_BIN_DIR, "mlir-opt"), f"--irdl-file={dialect_files()[0]}",
                          str(tmp_path / "bad.mlir")], capture_output=True, text=True)
    assert out.returncode != 0 and "callee" in out.stderr


@graph.pattern("linalg.generic")
def _ewise_fma(op):
    if graph.body_ops(op) != ["arith.addf"]:
        return None
    mul = graph.producer(op.operands[0])
    if mul is None or graph.body_ops(mul) != ["arith.mulf"] or not graph.has_one_use(mul):
        return None
    return graph.elementwise([mul.operands[0], mul.operands[1], op.operands[1]], op.results[0].type,
                             graph.scalar.fma, name="ewise_fma")


def test_ewise_fma_rewrite():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x, y = f.arg("x", shape=(3, 4)), f.arg("y", shape=(3, 4))
        f.output(ops.add(ops.multiply(x, y), y))
    mod = bb.finish()
    out = graph.RewritePatterns([_ewise_fma])(mod)
    text = str(out)
    assert "math.fma" in text and "arith.mulf" not in text and 'mlc.name = "ewise_fma"' in text
    xn = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(mlc.compile(out)(xn, xn + 1), xn * (xn + 1) + xn + 1)


def test_pattern_returning_none_is_no_match_and_checks_arity():
    @graph.pattern("linalg.generic")
    def never(op):
        return None

    @graph.pattern("linalg.generic")
    def two_values(op):
        if graph.body_ops(op) != ["arith.addf"]:
            return None
        return [op.operands[0], op.operands[1]]

    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x, y = f.arg("x", shape=(3, 4)), f.arg("y", shape=(3, 4))
        f.output(ops.add(ops.exp(x), y))
    mod = bb.finish()
    same = graph.RewritePatterns([never])(mod)
    assert str(same).count("linalg.generic") == 2
    xn = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(mlc.compile(same)(xn, xn), np.exp(xn) + xn, rtol=1e-6)
    with pytest.raises(mlc.PipelineError, match="'two_values': returned 2 values for linalg.generic with 1"):
        graph.RewritePatterns([two_values])(mod)
    with pytest.raises(mlc.PipelineError, match="is not a Pattern"):
        graph.RewritePatterns([lambda op: None])
