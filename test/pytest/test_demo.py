"""The main job end to end: ``mlc demo`` agrees 100% with scikit-learn."""

import subprocess
import sys

from mlc_mlir.target import host_target


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
    assert "linalg.matmul" not in graph and "vector.fma" in graph  # both functions scheduled
    assert ("scf.forall" in graph) == (host_target().cores > 1)  # batch 360 runs on all cores
    assert "transform.structured.hoist_pad" in (tmp_path / "schedule.transform.mlir").read_text()
    assert "sch.cache_read" in (tmp_path / "schedule.trace.py").read_text()
    assert "llvm.func" in (tmp_path / "07-lower.mlir").read_text()


def _mlc(*args, prelude=""):
    code = f"import sys\n{prelude}\nfrom mlc_mlir.cli.mlc import main\nsys.exit(main({list(args)!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_bad_arguments_fail_before_training():
    r = _mlc("demo", "--dump-ir", "/proc/mlc-dump")
    assert r.returncode == 2 and "cannot create /proc/mlc-dump" in r.stderr and "Traceback" not in r.stderr
    assert "digits:" not in r.stdout  # refused before the model was trained
    r = _mlc("demo", "--seed", "-5")
    assert r.returncode == 2 and "expected an integer >= 0, got -5" in r.stderr


def test_demo_without_scikit_learn_names_the_extra():
    r = _mlc("demo", prelude="sys.modules['sklearn'] = None")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "pip install 'mlc-mlir[demo]'" in r.stderr
