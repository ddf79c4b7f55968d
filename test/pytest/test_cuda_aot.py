"""AOT for CUDA: a .so with host code and the embedded cubins, built without a GPU; loading it
without a driver is a clear ExecutionError (probed before the .so is loaded); on a GPU (skipped
without one) it runs in a fresh process that imports only numpy and the runtime."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir._mlir import MLIR_LIB_DIR
from mlc_mlir.pipeline.cuda_host import KERNELS_SUFFIX
from mlc_mlir.runtime.cuda import cuda_available

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA driver/GPU")


def _module():
    """matmul -> softmax: several kernels, buffers between them on the device."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.softmax(ops.matmul(f.arg("a", shape=(128, 64)), f.arg("b", shape=(64, 256))),
                             axis=-1))
    return bb.finish()


def _ref(a, b):
    y = a @ b
    e = np.exp(y - y.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    return mlc.build_library(_module(), str(tmp_path_factory.mktemp("aot") / "mm.so"), target="cuda")


@needs_ptxas
def test_library_embeds_the_cubins(library):
    data = open(library, "rb").read()
    # the host .so is one ELF; each kernel module's cubin is another one inside it
    assert data.count(b"\x7fELF") >= 3
    assert b"main" + KERNELS_SUFFIX.encode() + b"_kernel" in data
    # host entry (copies in and out) and device entry (kernels on device buffers)
    syms = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True, text=True).stdout
    assert "_mlir_ciface_main\n" in syms and "_mlir_ciface_main__device\n" in syms
    meta = json.load(open(library + ".json"))
    assert meta["device"] == "cuda" and list(meta["functions"]) == ["main"]
    needed = subprocess.run(["readelf", "-d", library], capture_output=True, text=True).stdout
    assert "libmlir_cuda_runtime.so" in needed and "$ORIGIN" in needed


@needs_ptxas
@pytest.mark.skipif(cuda_available(), reason="a CUDA driver is present")
def test_loading_without_a_driver_is_a_clear_error(library):
    with pytest.raises(mlc.ExecutionError, match=r"load_library\(mm.so\) needs a GPU: libcuda.so.1"):
        mlc.runtime.load_library(library)


def test_unknown_device_in_metadata_is_refused(tmp_path):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.relu(f.arg("x", shape=(4,))))
    lib = mlc.compile(bb.finish()).export_library(str(tmp_path / "r.so"))
    meta = json.load(open(lib + ".json"))
    meta["device"] = "rocm"
    json.dump(meta, open(lib + ".json", "w"))
    with pytest.raises(mlc.ExecutionError, match="has device 'rocm'"):
        mlc.runtime.load_library(lib)


@needs_gpu
def test_library_runs_with_numpy_and_the_cuda_runtime_only(library, tmp_path):
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    for f in (library, library + ".json"):
        shutil.copy(f, deploy)
    shutil.copy(os.path.join(MLIR_LIB_DIR, "libmlir_cuda_runtime.so"), deploy)
    rng = np.random.default_rng(0)
    inputs = [(rng.standard_normal((128, 64), np.float32), rng.standard_normal((64, 256), np.float32))
              for _ in range(2)]
    np.save(tmp_path / "in.npy", np.array([np.concatenate([a.ravel(), b.ravel()]) for a, b in inputs]))
    # the .so needs only libmlir_cuda_runtime.so (copied beside it) and the driver; each entry
    # runs twice on other inputs (the weights and buffers stay on the device between calls)
    code = ("import numpy as np, mlc_mlir.runtime as rt\n"
            f"lib = rt.load_library({str(deploy / 'mm.so')!r})\n"
            f"out = []\n"
            f"for v in np.load({str(tmp_path / 'in.npy')!r}):\n"
            "    a, b = v[:128 * 64].reshape(128, 64), v[128 * 64:].reshape(64, 256)\n"
            "    out.append(lib(a, b))\n"
            "    out.append(lib.on_device(rt.DeviceArray.from_numpy(a), rt.DeviceArray.from_numpy(b)).numpy())\n"
            f"np.save({str(tmp_path / 'y.npy')!r}, np.array(out))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "failed with" not in proc.stderr   # a CUDA call of the runtime, at exit included
    got = np.load(tmp_path / "y.npy")
    for i, (a, b) in enumerate(inputs):
        np.testing.assert_allclose(got[2 * i], _ref(a, b), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got[2 * i + 1], _ref(a, b), rtol=1e-4, atol=1e-5)


#: A stand-in for ``libmlir_cuda_runtime.so``: every ``mgpu*`` function the library imports
#: does nothing, except that the first module load registers an exit handler (as ``cuInit``
#: does in the driver: it tears the context down at exit) and each unload reports whether the
#: "driver" was still up.
_FAKE_RUNTIME = r"""
#include <stdio.h>
#include <stdlib.h>
static int torn_down, registered;
static void teardown(void) { torn_down = 1; }
void *mgpuModuleLoad(void *data, unsigned long size) {
  if (!registered) { registered = 1; atexit(teardown); }
  return (void *)0x1000;
}
void mgpuModuleUnload(void *module) {
  fprintf(stderr, torn_down ? "unload after teardown\n" : "unload ok\n");
}
"""


@needs_ptxas
def test_cuda_library_unloads_its_modules_before_the_driver_exits(library, tmp_path):
    """At process exit a CUDA library's module destructors ran after the driver's exit handler
    (on an H200: ``'cuModuleUnload(module)' failed with '<unknown>'`` once per module); the
    runtime unloads the library from Python's ``atexit`` instead. Checked with a stand-in
    runtime beside the library (no GPU needed)."""
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    for f in (library, library + ".json"):
        shutil.copy(f, deploy)
    undefined = subprocess.run(["nm", "-D", "--undefined-only", library], capture_output=True,
                               text=True, check=True).stdout.split()
    others = sorted({s for s in undefined if s.startswith("mgpu")} - {"mgpuModuleLoad", "mgpuModuleUnload"})
    src = tmp_path / "fake.c"
    src.write_text(_FAKE_RUNTIME + "".join(f"void *{s}(void) {{ return 0; }}\n" for s in others))
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libmlir_cuda_runtime.so", str(src),
                    "-o", str(deploy / "libmlir_cuda_runtime.so")], check=True)
    code = ("import mlc_mlir.runtime.library as L\n"
            "L.require_cuda = lambda what: None   # the stand-in runtime needs no driver\n"
            f"lib = L.load_library({str(deploy / 'mm.so')!r})\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    modules = open(library, "rb").read().count(b"\x7fELF") - 1   # the cubins inside the .so
    assert proc.stderr.count("unload ok") == modules >= 2, proc.stderr
    assert "unload after teardown" not in proc.stderr
