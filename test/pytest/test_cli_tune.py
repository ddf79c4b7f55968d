"""``mlc tune MODULE.mlir``: tunes, keeps records, resumes; bad input is one line. ``mlc``'s
``main(argv)`` runs in this process (conftest's ``mlc_main``; test_cli_errors runs ``python -m
mlc_mlir.cli.mlc`` as a real process)."""

import json

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import ops


def test_tune_a_module_file_and_resume(tmp_path, mlc_main):
    rng = np.random.default_rng(0)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", (16, 32))
        f.output(ops.relu(ops.dense(x, rng.standard_normal((24, 32)).astype(np.float32))))
    src = tmp_path / "dense.mlir"
    src.write_text(str(bb.finish()))
    out = tmp_path / "records"
    code, stdout, stderr = mlc_main("tune", str(src), "--trials", "4", "-o", str(out))
    assert code == 0, stderr[-3000:]
    assert "main" in stdout and "speedup" in stdout
    lines = [line for line in (out / "database.jsonl").read_text().splitlines()
             if not json.loads(line)["final"]]   # the search's records, then re-measured finalists
    assert len(lines) == 4 and all(json.loads(line)["workload"] for line in lines)
    code, _, stderr = mlc_main("tune", str(src), "--trials", "6", "-o", str(out))  # resumes: 2 more
    assert code == 0, stderr[-3000:]
    assert sum(not json.loads(line)["final"] for line in (out / "database.jsonl").read_text().splitlines()) == 6


def test_tune_bad_input_is_one_line(tmp_path, mlc_main):
    code, _, err = mlc_main("tune", str(tmp_path / "missing.mlir"), "--trials", "2", "-o", str(tmp_path / "o"))
    assert code == 2 and err.startswith("error: tune: cannot read") and "Traceback" not in err
    code, _, err = mlc_main("tune", str(tmp_path / "missing.mlir"), "--trials", "0")
    assert code == 2 and "expected an integer >= 1" in err
