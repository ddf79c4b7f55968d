"""The main job end to end: ``mlc demo`` agrees 100% with scikit-learn."""

import subprocess
import sys


def test_demo_end_to_end(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mlc_mlir.cli.mlc", "demo", "--dump-ir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "agreement w/ sklearn: 100.00% (batch 360), 100.00% (batch 1)" in out
    acc = float(out.split("accuracy            :")[1].split("%")[0])
    assert acc > 90.0
    diff = float(out.split("max |logit diff|    :")[1].split()[0])
    assert diff < 1e-3
    assert "numpy/ours" in out
    graph = (tmp_path / "00-graph.mlir").read_text()
    assert "linalg.matmul" in graph and "vector.fma" in graph  # batch-1 ops + scheduled batch
    assert "transform.structured.hoist_pad" in (tmp_path / "schedule.transform.mlir").read_text()
    assert "sch.cache_read" in (tmp_path / "schedule.trace.py").read_text()
    assert "llvm.func" in (tmp_path / "02-lower.mlir").read_text()
