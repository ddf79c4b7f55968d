"""The main job end to end: ``mlc demo`` agrees 100% with scikit-learn; with ``--tune`` its
tuning records and curve stay on disk. ``mlc``'s ``main(argv)`` runs in this process
(conftest's ``mlc_main``; test_cli_errors runs ``python -m mlc_mlir.cli.mlc`` as a real process)."""

import importlib.util
import os
import re
import sys

from mlc_mlir.target import host_target


def test_demo_end_to_end_and_its_tuning_curve_stays_on_disk(tmp_path, mlc_main):
    """One ``mlc demo --dump-ir DIR --tune 2``: the default compile's numbers and dumped IR,
    then the tuning records and (with matplotlib) the curve, kept where the output says."""
    code, out, err = mlc_main("demo", "--dump-ir", str(tmp_path), "--tune", "2")
    assert code == 0, out + err
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
    # the tuning records and curve (tune() prints the curve's path) stay on disk
    lines = out.splitlines()
    kept = [ln for ln in lines if ln.startswith("tuning records and curve kept in ")]
    assert kept, lines
    folder = kept[0].split(" kept in ")[1].split("/ (")[0]
    assert os.path.isfile(os.path.join(folder, "database.jsonl"))
    if importlib.util.find_spec("matplotlib") is not None:
        assert os.path.isfile(os.path.join(folder, "tuning_curve.png"))
    for ln in lines:
        for path in re.findall(r"(/\S+\.png)", ln):
            assert os.path.isfile(path), ln


def test_bad_arguments_fail_before_training(mlc_main):
    code, out, err = mlc_main("demo", "--dump-ir", "/proc/mlc-dump")
    assert code == 2 and "cannot create /proc/mlc-dump" in err and "Traceback" not in err
    assert "digits:" not in out  # refused before the model was trained
    code, _, err = mlc_main("demo", "--seed", "-5")
    assert code == 2 and "expected an integer >= 0, got -5" in err


def test_demo_without_scikit_learn_names_the_extra(mlc_main, monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)     # `import sklearn` raises ImportError
    code, _, err = mlc_main("demo")
    assert code == 2 and err.count("\n") == 1, err
    assert "pip install 'mlc-mlir[demo]'" in err
