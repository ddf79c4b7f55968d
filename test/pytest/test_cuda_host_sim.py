"""The host code of CUDA compiles, run without a GPU on a simulated device
(:mod:`cuda_hostsim`): it never touches device memory on the host, never copies past a numpy
buffer or a device allocation, passes kernels no host pointer and frees what it allocates.
On an H200 the grouped conv2d's host code ``memcpy``-ed its result between two device buffers
(``buffer-results-to-out-params`` copying a ``collapse_shape`` view into the out-param), and
the process died with SIGSEGV; here that shows as the child's SIGSEGV. Covers every GPU rule
kind (test_cuda_public_compile's cases), a conv net, a matmul on a transposed operand, the
MLP and a module with constants."""

import re
import importlib
import shutil

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir.ir import dtypes
from mlc_mlir.pipeline.aot import translate_to_llvmir
from mlc_mlir.pipeline.cuda_compile import lower_cuda
from mlc_mlir.pipeline.options import CompileOptions

from cuda_hostsim import run_lowered
from test_cuda_host import _with_constant, mlp
from test_cuda_models import _net, _transposed_matmul
from test_cuda_public_compile import CASES, CUDA, _module

pytestmark = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
CPU_STAGES = importlib.import_module("mlc_mlir.pipeline.compile").CPU_STAGES


def _residual_net():
    net, x = _net()
    return mlc.from_torch(net, (x,)).bind_params()


def nbytes(spec) -> int:
    return int(np.prod(spec.shape)) * dtypes.to_numpy_dtype(spec.dtype).itemsize


def _lower(mod):
    sig, lowered = lower_cuda(mod, CompileOptions(target=CUDA), CPU_STAGES)
    return lowered, sig


@pytest.fixture(scope="module")
def simulated():
    """name -> (result of the simulated run, lowered module)."""
    mods = {name: _module(name) for name in sorted(CASES)}
    mods.update(residual_cnn=_residual_net(), transposed_matmul=_transposed_matmul(), mlp=mlp(),
                constant=_with_constant())
    lowered = {name: _lower(m) for name, m in mods.items()}
    return dict(zip(lowered, zip(run_lowered(list(lowered.values())), lowered.values())))


@pytest.mark.parametrize("name", sorted(CASES) + ["residual_cnn", "transposed_matmul", "mlp",
                                                  "constant"])
def test_cuda_host_code_runs_on_a_simulated_device(simulated, name):
    res, (_, sigs) = simulated[name]
    assert res["returncode"] == 0, f"host code crashed (signal {-res['returncode']}): it " \
        f"touched device memory on the host\n{res['stderr']}"
    assert res["problems"] == []
    assert res["launches"] >= 1 and res["leaked"] == 0 and res["foreign"] == []
    # each numpy input goes in once and each result comes out once, with its exact size
    sig = sigs["main"]
    ins = sorted(c[3] for c in res["copies"] if c[0] == "D<-H")
    outs = sorted(c[3] for c in res["copies"] if c[0] == "H<-D")
    assert outs == sorted(nbytes(r) for r in sig.results)
    assert all(n in ins for n in {nbytes(a) for a in sig.args})


def _functions(ll: str) -> dict:
    """LLVM IR text -> {function name: body text}."""
    return {m.group(1): m.group(0) for m in re.finditer(r"^define [^@]*@([\w.]+)\(.*?^}", ll, re.M | re.S)}


def test_cuda_grouped_conv_result_is_copied_on_the_device(simulated):
    """The grouped conv's result view goes into the out-param with a device-to-device
    ``mgpuMemcpy``, not a host ``memcpy`` between device pointers."""
    res, (lowered, _) = simulated["grouped_conv2d"]
    assert [c[0] for c in res["copies"]].count("D<-D") == 1
    dev = _functions(translate_to_llvmir(lowered))["main__device"]
    assert "@llvm.memcpy" not in dev and dev.count("call void @mgpuMemcpy(") == 1
