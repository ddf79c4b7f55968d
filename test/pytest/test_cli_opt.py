"""mlc-opt: pipelines by name and file, --pass-pipeline, stdin, exit codes (``main(argv)`` in
this process, and as a real ``python -m mlc_mlir.cli.mlc_opt`` process: its exit status and
output); the wheel's mlir-opt accepts every pipeline file and the builder's IR."""

import io
import os
import subprocess
import sys
import types

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir._mlir import MLIR_BIN_DIR
from mlc_mlir.cli.mlc_opt import main
from mlc_mlir.pipeline.registry import PIPELINES_DIR, available

MM = """func.func @main(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %e = tensor.empty() : tensor<4x16xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill {mlc.name = "matmul.init"} ins(%z : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = linalg.matmul {mlc.name = "matmul"} ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%f : tensor<4x16xf32>) -> tensor<4x16xf32>
  return %m : tensor<4x16xf32>
}"""


def _process(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "mlc_mlir.cli.mlc_opt", *args], input=stdin,
                          capture_output=True, text=True)


@pytest.fixture
def mlc_opt(capfd, monkeypatch):
    """``mlc_opt(*args, stdin=None)``: ``main(args)`` in this process with ``stdin`` as
    ``sys.stdin``; returns its exit code (argparse's own errors exit through ``SystemExit``),
    stdout and stderr (``capfd``: native writes to fd 1 and 2 too) like ``subprocess.run``."""
    def run(*args, stdin=None):
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin or ""))
        try:
            code = main(list(args))
        except SystemExit as e:
            code = e.code
        out, err = capfd.readouterr()
        return types.SimpleNamespace(returncode=code, stdout=out, stderr=err)
    return run


def test_the_process_exits_1_with_one_line_and_lists_pipelines():
    """Through a real process: its exit status and output."""
    r = _process("-", stdin="not mlir")
    assert r.returncode == 1 and r.stderr.startswith("mlc-opt: error: Module.parse") and "Traceback" not in r.stderr
    r = _process("--list-pipelines")
    assert r.returncode == 0 and r.stdout.split() == available()


def test_pipeline_by_name_file_and_text(tmp_path, mlc_opt):
    src = tmp_path / "mm.mlir"
    src.write_text(MM)
    by_name = mlc_opt(str(src), "--pipeline", "cpu")
    by_file = mlc_opt(str(src), "--pipeline", os.path.join(PIPELINES_DIR, "cpu.pipeline"))
    assert by_name.returncode == 0 and "llvm.func @main" in by_name.stdout
    assert by_name.stdout == by_file.stdout
    text = mlc_opt("-", "--pass-pipeline", "builtin.module(func.func(linalg-generalize-named-ops))", stdin=MM)
    assert text.returncode == 0 and "linalg.generic" in text.stdout
    out = tmp_path / "o.mlir"
    assert mlc_opt(str(src), "--mlc-fuse-ops", "-o", str(out)).returncode == 0
    assert "mlc.primitive" in out.read_text()


def test_errors_exit_1_with_one_line(mlc_opt):
    r = mlc_opt("-", stdin="not mlir")
    assert r.returncode == 1 and r.stderr.startswith("mlc-opt: error: Module.parse") and "Traceback" not in r.stderr
    r = mlc_opt("/nonexistent.mlir")
    assert r.returncode == 1 and "cannot read" in r.stderr
    r = mlc_opt("-", "--pass-pipeline", "builtin.module(no-such-pass)", stdin=MM)
    assert r.returncode == 1 and "cannot parse pipeline" in r.stderr


def test_list_pipelines(mlc_opt):
    r = mlc_opt("--list-pipelines")
    assert r.stdout.split() == available()


def test_wheel_mlir_opt_accepts_every_pipeline_file_and_builder_ir(tmp_path):
    rng = np.random.default_rng(0)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(2, 8))
        f.output(ops.gelu(ops.dense(x, rng.standard_normal((4, 8)).astype(np.float32))))
    src = tmp_path / "g.mlir"
    src.write_text(str(bb.finish()))
    for name in available():
        text = open(os.path.join(PIPELINES_DIR, f"{name}.pipeline")).read()
        if name in ("cuda", "cuda_kernels"):   # start after GPU mapping (a gpu.launch):
            continue                          # test/lit/pipelines/cuda.mlir runs both
        # the file's text verbatim, as `mlir-opt --pass-pipeline="$(cat pipelines/NAME.pipeline)"`
        r = subprocess.run(["bash", "-c", f'{MLIR_BIN_DIR}/mlir-opt --pass-pipeline="$(cat {PIPELINES_DIR}/{name}.pipeline)" {src}'],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"{name}: {r.stderr}"
        assert "llvm.func @main" in r.stdout
        assert text.strip().startswith("builtin.module(")


def test_unreadable_inputs_and_outputs_are_one_line_errors(tmp_path, mlc_opt):
    binary = tmp_path / "blob.mlir"
    binary.write_bytes(bytes(range(256)))
    r = mlc_opt(str(binary))
    assert r.returncode == 1 and r.stderr.startswith("mlc-opt: error: input") and "not UTF-8" in r.stderr
    src = tmp_path / "mm.mlir"
    src.write_text(MM)
    r = mlc_opt(str(src), "--schedule", str(tmp_path / "missing.json"))
    assert r.returncode == 1 and "cannot read --schedule file" in r.stderr and "Traceback" not in r.stderr
    r = mlc_opt(str(src), "-o", "/proc/mlc-out.mlir")
    assert r.returncode == 1 and "cannot write /proc/mlc-out.mlir" in r.stderr and "Traceback" not in r.stderr
