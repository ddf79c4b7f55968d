"""User errors of ``mlc`` and of the importers: one line on stderr, exit code 2, no traceback
(``--debug`` adds it); ``from_onnx`` / ``from_torch`` raise ``MlcError`` s naming the file."""

import pickle
import subprocess
import sys

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir.cli.mlc import main

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402


def _mlc(*args):
    return subprocess.run([sys.executable, "-m", "mlc_mlir.cli.mlc", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def _model(shape=(2, 3)):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    return helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                             opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    onnx.save(_model(), d / "good.onnx")
    onnx.save(_model(("n", 3)), d / "dyn.onnx")
    onnx.save(_model((None, 3)), d / "unnamed.onnx")    # a dynamic dim without a name
    data = (d / "good.onnx").read_bytes()
    (d / "trunc.onnx").write_bytes(data[:len(data) // 2])
    (d / "garbage.onnx").write_bytes(b"\x8f\xff not a protobuf" * 8)
    (d / "dir.onnx").mkdir()
    (d / "dir.npy").mkdir()
    np.save(d / "x.npy", np.ones((2, 3), np.float32))
    np.save(d / "pickled.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (d / "pickle.npy").write_bytes(pickle.dumps([1, 2]))
    assert main(["compile", str(d / "good.onnx"), "-o", str(d / "good.so")]) == 0
    return d


PROBES = {
    "missing model": ("compile", "{d}/missing.onnx", "-o", "{d}/o.so"),
    "garbage model": ("compile", "{d}/garbage.onnx", "-o", "{d}/o.so"),
    "truncated model": ("compile", "{d}/trunc.onnx", "-o", "{d}/o.so"),
    "directory model": ("compile", "{d}/dir.onnx", "-o", "{d}/o.so"),
    "not .onnx": ("compile", "{d}/x.npy", "-o", "{d}/o.so"),
    "unnamed dynamic dim": ("compile", "{d}/unnamed.onnx", "-o", "{d}/o.so"),
    "bad shape spec": ("compile", "{d}/dyn.onnx", "-o", "{d}/o.so", "--input-shape", "x=a,b"),
    "unknown input": ("compile", "{d}/dyn.onnx", "-o", "{d}/o.so", "--input-shape", "zz=2,3"),
    "bad target": ("compile", "{d}/good.onnx", "-o", "{d}/o.so", "--target", "nope"),
    "unwritable output": ("compile", "{d}/good.onnx", "-o", "/proc/o.so"),
    "missing library": ("run", "{d}/missing.so", "--input", "{d}/x.npy"),
    "missing input": ("run", "{d}/good.so", "--input", "{d}/missing.npy"),
    "directory input": ("run", "{d}/good.so", "--input", "{d}/dir.npy"),
    "object input": ("run", "{d}/good.so", "--input", "{d}/pickled.npy"),
    "pickle input": ("run", "{d}/good.so", "--input", "{d}/pickle.npy"),
    "too many inputs": ("run", "{d}/good.so", "--input", "{d}/x.npy", "--input", "{d}/x.npy"),
    "tune non-mlir": ("tune", "{d}/good.onnx", "--trials", "1", "-o", "{d}/t"),
    "unknown command": ("bogus",),
}


def _main(argv, capfd):
    """``mlc``'s ``main(argv)`` in this process: (exit code, stderr); argparse's own errors exit
    through ``SystemExit``. ``capfd`` sees what native code writes to fd 2 as well."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    return code, capfd.readouterr().err


@pytest.mark.parametrize("probe", sorted(PROBES))
def test_user_error_is_one_line_and_exit_2(files, probe, capfd):
    code, err = _main([a.format(d=files) for a in PROBES[probe]], capfd)
    assert code == 2, (code, err)
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert "error" in err


@pytest.mark.parametrize("probe", ["garbage model", "missing input", "unknown command"])
def test_the_process_exits_2_with_one_line(files, probe):
    """The same probes through a real ``python -m mlc_mlir.cli.mlc`` process (its exit status)."""
    r = _mlc(*[a.format(d=files) for a in PROBES[probe]])
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback(files, where, capfd):
    args = ["compile", files / "missing.onnx", "-o", files / "o.so"]
    code, err = _main(["--debug", *args] if where == "before" else [*args, "--debug"], capfd)
    assert code == 2 and "Traceback" in err and "FileNotFoundError" in err


def test_good_run_still_works(files, capfd):
    code = main(["run", str(files / "good.so"), "--input", str(files / "x.npy")])
    out, err = capfd.readouterr()
    assert code == 0 and "output 0: shape (2, 3) dtype float32" in out, err


@pytest.mark.parametrize("name, what", [("missing.onnx", "cannot read"), ("dir.onnx", "cannot read"),
                                        ("garbage.onnx", "not a valid ONNX model"),
                                        ("trunc.onnx", "not a valid ONNX model")])
def test_from_onnx_file_errors(files, name, what):
    with pytest.raises(mlc.BuildError, match=what) as e:
        mlc.from_onnx(str(files / name))
    assert name in str(e.value)


def test_from_onnx_refuses_unknown_input_names(files):
    with pytest.raises(mlc.BuildError, match=r"names \['zz'\], which are not inputs"):
        mlc.from_onnx(str(files / "dyn.onnx"), input_shapes={"zz": (2, 3)})
    with pytest.raises(mlc.BuildError, match="input_values"):
        mlc.from_onnx(str(files / "good.onnx"), input_values={"y": np.ones(2)})


def test_from_onnx_malformed_node_names_it():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    node = helper.make_node("Transpose", ["x"], ["y"], name="t0")
    node.attribute.extend([helper.make_attribute("perm", "not ints")])
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(mlc.MlcError, match="t0|perm"):
        mlc.from_onnx(model)


def test_from_torch_export_errors_are_build_errors():
    torch = pytest.importorskip("torch")

    class Bad(torch.nn.Module):
        def forward(self, x):
            return x @ torch.ones(5, 2)

    with pytest.raises(mlc.BuildError, match="torch.export.export failed.*reduction dim"):
        mlc.from_torch(Bad(), (torch.ones(2, 3),))
    with pytest.raises(mlc.BuildError, match="expected a torch.nn.Module"):
        mlc.from_torch(lambda x: x, (torch.ones(2),))


def test_from_onnx_missing_external_data(tmp_path):
    from onnx import numpy_helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    model = helper.make_model(helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0)
    (tmp_path / "m.data").unlink()
    with pytest.raises(mlc.BuildError, match="m.onnx .*external data"):
        mlc.from_onnx(str(tmp_path / "m.onnx"))
