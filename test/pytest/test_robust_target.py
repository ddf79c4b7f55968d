"""Targets and artifacts of another machine: unknown CPU names, code for features the host lacks,
damaged libraries. Each failure mode used to end the process (LLVM's fatal error handler,
SIGILL, SIGBUS), so each case runs in a child process and the test reads its exit status."""

import subprocess
import sys
import textwrap

import pytest

import mlc_mlir as mlc
from mlc_mlir.target import Target, llvm_names, HOST_TRIPLE


def _child(code: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter; returns the finished process (never raises on a
    signal: ``returncode`` is then negative)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout)


_RELU = """
import numpy as np, mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.target import Target
bb = mlc.GraphBuilder()
with bb.function("main") as f:
    x = f.arg("x", (4, 8))
    f.output(ops.relu(x))
mod = bb.finish()
"""


@pytest.mark.parametrize("cpu, close", [("nonexistent-cpu", None), ("cortex-a72", None),
                                        ("znver33", "znver3"), ("skylakeavx512", "skylake-avx512")])
def test_unknown_or_foreign_cpu_is_a_target_error(cpu, close):
    """A CPU name LLVM does not know for x86-64 raises TargetError when the Target is built,
    naming the CPU and close valid names; before, compiling for it ended the process."""
    proc = _child(_RELU + f"""
try:
    exe = mlc.compile(mod, target=Target("cpu", cpu={cpu!r}, features=("avx2",), vector_bits=256))
    exe(np.ones((4, 8), np.float32))
    print("NO ERROR")
except mlc.TargetError as e:
    print("TargetError:", e)
""")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("TargetError:") and repr(cpu) in proc.stdout, proc.stdout
    if close:
        assert close in proc.stdout.split("close names:")[1]


def test_unknown_feature_is_a_target_error():
    with pytest.raises(mlc.TargetError, match=r"feature 'avx512fp61'.*close names: avx512fp16"):
        Target("cpu", cpu="znver3", features=("avx2", "avx512fp61"))
    with pytest.raises(mlc.TargetError, match="tuple of LLVM feature names"):
        Target("cpu", cpu="znver3", features="avx2")


def test_llvm_names_are_llc_lists():
    """The lists come from llc for the triple: x86 CPUs and features, no ARM CPU."""
    cpus, features = llvm_names(HOST_TRIPLE)
    assert {"znver3", "sapphirerapids", "x86-64-v3", "generic"} <= cpus
    assert "cortex-a72" not in cpus
    assert {"avx2", "fma", "avx512f", "avx512fp16"} <= features
    assert mlc.target.host_target().cpu in cpus
