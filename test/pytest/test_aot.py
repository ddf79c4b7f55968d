"""AOT: export a compiled module as a .so and load it back in a fresh process, no recompiling."""

import json
import re
import os
import subprocess
import sys

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops


def _module(params: bool):
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((32, 16)).astype(np.float32)
    b0 = rng.standard_normal(32).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(8, 16))
        w = f.param("w0", w0) if params else w0
        f.output(ops.relu(ops.dense(x, w, b0)))
    return bb.finish(), lambda xn: np.maximum(xn @ w0.T + b0, 0)


@pytest.mark.parametrize("params", [False, True])
def test_export_and_load_in_fresh_process(tmp_path, params):
    mod, ref = _module(params)
    exe = mlc.compile(mod)
    lib = exe.export_library(str(tmp_path / "mlp.so"))
    assert os.path.exists(lib) and os.path.exists(lib + ".json")
    assert os.path.exists(lib + ".params.npz") == params
    x = np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code = (f"import numpy as np, mlc_mlir.runtime as rt\n"
            f"lib = rt.load_library({lib!r})\n"
            f"np.save({str(tmp_path / 'y.npy')!r}, lib(np.load({str(tmp_path / 'x.npy')!r})))\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    y = np.load(tmp_path / "y.npy")
    np.testing.assert_allclose(y, exe(x), rtol=1e-6)
    np.testing.assert_allclose(y, ref(x), rtol=1e-4, atol=1e-4)


def test_weights_are_embedded_by_the_assembler(tmp_path):
    """A weight of at least EXTERNAL_CONSTANT_BYTES leaves the LLVM IR: it is a hidden symbol
    of exactly its size, defined by the assembled constants (.incbin); small ones stay in the
    IR. Exporting twice (the lowered module is not changed by the split) gives the same result."""
    from mlc_mlir.pipeline.aot import EXTERNAL_CONSTANT_BYTES
    rng = np.random.default_rng(2)
    w = rng.standard_normal((256, 64)).astype(np.float32)   # 64 KiB
    b = rng.standard_normal(256).astype(np.float32)         # 1 KiB: stays in the IR
    assert w.nbytes >= EXTERNAL_CONSTANT_BYTES > b.nbytes
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(4, 64))
        f.output(ops.relu(ops.dense(x, w, b)))
    exe = mlc.compile(bb.finish())
    x = rng.standard_normal((4, 64)).astype(np.float32)
    for name in ("a.so", "b.so"):
        lib = exe.export_library(str(tmp_path / name))
        y = mlc.runtime.load_library(lib)(x)
        np.testing.assert_allclose(y, np.maximum(x @ w.T + b, 0), rtol=1e-4, atol=1e-4)
    sizes = [int(line.split()[1], 16) for line in subprocess.run(
        ["nm", "-S", lib], capture_output=True, text=True, check=True).stdout.splitlines()
        if "__constant" in line and len(line.split()) == 4]
    assert w.nbytes in sizes and b.nbytes not in sizes


def test_loaded_library_validates_inputs(tmp_path):
    mod, _ = _module(False)
    lib = mlc.runtime.load_library(mlc.compile(mod).export_library(str(tmp_path / "m.so")))
    with pytest.raises(mlc.ExecutionError, match=r"argument 'x' has shape \(2, 16\); expected \(8, 16\)"):
        lib(np.zeros((2, 16), np.float32))
    with pytest.raises(mlc.ExecutionError, match="no LLVM module to export"):
        lib.export_library(str(tmp_path / "again.so"))


def test_load_missing_library_is_clean(tmp_path):
    with pytest.raises(mlc.ExecutionError, match="cannot load"):
        mlc.runtime.load_library(str(tmp_path / "nope.so"))


def _scaled_module(scale: float):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(4, 8))
        f.output(ops.multiply(ops.exp(x), np.full((4, 8), scale, np.float32)))
    return bb.finish()


def test_reexport_to_same_path_loads_the_new_library(tmp_path):
    path = str(tmp_path / "lib.so")
    x = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32)
    mlc.compile(_scaled_module(2.0)).export_library(path)
    first = mlc.runtime.load_library(path)
    np.testing.assert_allclose(first(x), np.exp(x) * 2.0, rtol=1e-5)
    mod, ref = _module(False)           # a different signature and computation, same path
    mlc.compile(mod).export_library(path)
    second = mlc.runtime.load_library(path)
    x2 = np.random.default_rng(3).standard_normal((8, 16)).astype(np.float32)
    np.testing.assert_allclose(second(x2), ref(x2), rtol=1e-4, atol=1e-4)
    mlc.compile(_scaled_module(-1.0)).export_library(path)   # same signature, new values
    np.testing.assert_allclose(mlc.runtime.load_library(path)(x), -np.exp(x), rtol=1e-5)
    np.testing.assert_allclose(first(x), np.exp(x) * 2.0, rtol=1e-5)  # still the first one


def _exported(tmp_path):
    mod, _ = _module(False)
    return mlc.compile(mod).export_library(str(tmp_path / "m.so"))


def test_tampered_json_is_refused(tmp_path):
    lib = _exported(tmp_path)
    meta = json.loads(open(lib + ".json").read())
    meta["functions"]["main"]["args"][0]["shape"] = [2, 16]
    meta["functions"]["main"]["results"][0]["shape"] = [2, 32]
    with open(lib + ".json", "w") as f:
        json.dump(meta, f)
    with pytest.raises(mlc.ExecutionError, match="does not match the target and signatures compiled into m.so"):
        mlc.runtime.load_library(lib)


@pytest.mark.parametrize("edit, match", [
    (lambda m: m.pop("functions"), "is not an mlc-library-v2 file"),
    (lambda m: m["functions"]["main"]["args"][0].pop("shape"), r"function 'main' argument lacks \['shape'\]"),
    (lambda m: m["functions"]["main"].pop("results"), "needs 'args' and 'results' lists"),
    (lambda m: m["functions"]["main"]["results"][0].update(dtype="float99"), "has dtype 'float99'"),
])
def test_incomplete_json_is_refused(tmp_path, edit, match):
    lib = _exported(tmp_path)
    meta = json.loads(open(lib + ".json").read())
    edit(meta)
    with open(lib + ".json", "w") as f:
        json.dump(meta, f)
    with pytest.raises(mlc.ExecutionError, match=match):
        mlc.runtime.load_library(lib)
    with open(lib + ".json", "w") as f:
        f.write("{not json")
    with pytest.raises(mlc.ExecutionError, match="is not JSON"):
        mlc.runtime.load_library(lib)


@pytest.mark.parametrize("path", ["/proc/x.so", "/proc/nope/x.so"])
def test_unwritable_export_path_is_refused(path):
    mod, _ = _module(False)
    exe = mlc.compile(mod)
    # refused before compiling: the folder cannot be created or written into
    with pytest.raises(mlc.ExecutionError, match=r"export_library: cannot (write into|create) /proc"):
        exe.export_library(path)


def test_generated_functions_carry_the_target():
    """The lower stage gives every LLVM function the target's CPU and features (JIT and ``llc``
    alike), with ``+prefer-no-scatter`` on AVX-512 targets only, and no feature that a listed
    one implies turned off (``AVX2`` lists avx, avx2 and fma: SSE stays on); checked on fixed
    targets without running their code."""
    from targets import AVX2, AVX512
    from mlc_mlir.pipeline.aot import translate_to_llvmir
    from mlc_mlir.pipeline.compile import run_stages
    from mlc_mlir.pipeline.options import CompileOptions
    mod, _ = _module(False)
    for target, cpu, scatter in ((AVX2, "znver1", False), (AVX512, "sapphirerapids", True)):
        _, lowered = run_stages(mod, CompileOptions(target=target))
        ll = translate_to_llvmir(lowered)
        groups = re.findall(r'attributes #\d+ = \{[^}]*"target-cpu"="(\w+)" "target-features"="([^"]*)"', ll)
        assert groups and all(c == cpu and "+fma" in f for c, f in groups)
        assert all(("+prefer-no-scatter" in f) == scatter for _, f in groups)
        # what the listed features imply stays on: LLVM's -sse2 would turn AVX off again
        assert not any(re.search(r"-(sse2|sse4\.2|avx|avx2)\b", f) for _, f in groups)
        assert len(re.findall(r"^define ", ll, re.M)) == len(re.findall(r"^define [^\n]*#\d+ ", ll, re.M))
