"""``mlc tune MODULE.mlir``: tunes, keeps records, resumes; bad input is one line."""

import json
import subprocess
import sys

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import ops


def _mlc(*args):
    return subprocess.run([sys.executable, "-m", "mlc_mlir.cli.mlc", *args], capture_output=True,
                          text=True, timeout=300)


def test_tune_a_module_file_and_resume(tmp_path):
    rng = np.random.default_rng(0)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", (16, 32))
        f.output(ops.relu(ops.dense(x, rng.standard_normal((24, 32)).astype(np.float32))))
    src = tmp_path / "dense.mlir"
    src.write_text(str(bb.finish()))
    out = tmp_path / "records"
    r = _mlc("tune", str(src), "--trials", "4", "-o", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "main" in r.stdout and "speedup" in r.stdout
    lines = [line for line in (out / "database.jsonl").read_text().splitlines()
             if not json.loads(line)["final"]]   # the search's records, then re-measured finalists
    assert len(lines) == 4 and all(json.loads(line)["workload"] for line in lines)
    r = _mlc("tune", str(src), "--trials", "6", "-o", str(out))  # resumes: 2 more
    assert r.returncode == 0, r.stderr[-3000:]
    assert sum(not json.loads(line)["final"] for line in (out / "database.jsonl").read_text().splitlines()) == 6


def test_tune_bad_input_is_one_line(tmp_path):
    r = _mlc("tune", str(tmp_path / "missing.mlir"), "--trials", "2", "-o", str(tmp_path / "o"))
    assert r.returncode == 2 and r.stderr.startswith("error: tune: cannot read") and "Traceback" not in r.stderr
    r = _mlc("tune", str(tmp_path / "missing.mlir"), "--trials", "0")
    assert r.returncode == 2 and "expected an integer >= 1" in r.stderr
