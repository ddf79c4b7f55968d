"""Targets and artifacts of another machine: unknown CPU names, code for features the host lacks,
damaged libraries. Each failure mode used to end the process (LLVM's fatal error handler,
SIGILL, SIGBUS), so each case runs in a child process and the test reads its exit status."""

import json
import subprocess
import sys
import textwrap

import numpy as np
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


_FOREIGN = _RELU + """
from mlc_mlir.target import host_target
host = host_target()
# the host's instruction set plus one it lacks: the code needs a machine this is not
missing = sorted(set(ISA) - set(host.features))[0]
foreign = Target("cpu", cpu="sapphirerapids", features=host.features + (missing,),
                 vector_bits=host.vector_bits, vector_registers=host.vector_registers)
exe = mlc.compile(mod, target=foreign)
lib = exe.export_library(LIB)
print("MISSING", missing)
for what, call in (("jit", lambda: exe(np.ones((4, 8), np.float32))),
                   ("aot", lambda: mlc.runtime.load_library(lib)(np.ones((4, 8), np.float32)))):
    try:
        call()
        print(what, "RAN")
    except mlc.ExecutionError as e:
        print(what, "ExecutionError:", e)
"""


def test_code_for_features_the_host_lacks_is_refused(tmp_path):
    """A target with an instruction-set feature this machine lacks compiles and exports (cross
    compiling), but neither the JIT nor load_library runs its code: ExecutionError names the
    missing feature (before, the call ran into SIGILL). The library records the target's CPU
    and features in its .json and in the .so."""
    from mlc_mlir.target import ISA_FEATURES, host_target
    if not set(ISA_FEATURES) - set(host_target().features):
        pytest.skip("this machine has every feature mlc detects")
    lib = str(tmp_path / "foreign.so")
    proc = _child(f"ISA = {sorted(ISA_FEATURES)!r}\nLIB = {lib!r}\n" + _FOREIGN)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    missing = proc.stdout.split("MISSING ")[1].split()[0]
    for what in ("jit", "aot"):
        line = next(l for l in proc.stdout.splitlines() if l.startswith(what + " "))
        assert "ExecutionError" in line and f"lacks: {missing}" in line, proc.stdout
    meta = json.loads(open(lib + ".json").read())
    assert meta["target"]["cpu"] == "sapphirerapids" and missing in meta["target"]["features"]
    embedded = subprocess.run(["strings", lib], capture_output=True, text=True).stdout
    assert '"cpu": "sapphirerapids"' in embedded and f'"{missing}"' in embedded


def test_edited_target_in_json_is_refused(tmp_path):
    """Removing the missing feature from the .json does not get the code run: the .so's own
    record of the target disagrees."""
    from mlc_mlir.target import ISA_FEATURES, host_target
    host = host_target()
    absent = sorted(set(ISA_FEATURES) - set(host.features))
    if not absent:
        pytest.skip("this machine has every feature mlc detects")
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(mlc.ops.relu(f.arg("x", (4, 8))))
    foreign = Target("cpu", cpu=host.cpu, features=host.features + (absent[0],))
    lib = mlc.compile(bb.finish(), target=foreign).export_library(str(tmp_path / "f.so"))
    meta = json.loads(open(lib + ".json").read())
    meta["target"]["features"].remove(absent[0])
    with open(lib + ".json", "w") as f:
        json.dump(meta, f)
    with pytest.raises(mlc.ExecutionError, match="does not match the target and signatures"):
        mlc.runtime.load_library(lib)


def _library(tmp_path) -> str:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 32)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(mlc.ops.relu(mlc.ops.dense(f.arg("x", (4, 32)), w)))
    return mlc.compile(bb.finish()).export_library(str(tmp_path / "good.so"))


@pytest.mark.parametrize("cut", ["half", "4k", "flip"])
def test_damaged_library_is_refused(tmp_path, cut):
    """A truncated .so (half of it, its first 4 KiB) or one with a changed byte is refused with
    ExecutionError by load_library and with one line by `mlc run`, in child processes (before,
    both died with SIGBUS); the size and SHA-256 recorded at export are checked first."""
    lib = _library(tmp_path)
    data = open(lib, "rb").read()
    if cut == "flip":
        i = len(data) // 2
        data = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]
    else:
        data = data[:len(data) // 2] if cut == "half" else data[:4096]
    with open(lib, "wb") as f:
        f.write(data)
    proc = _child(f"""
import mlc_mlir as mlc
try:
    mlc.runtime.load_library({lib!r})
    print("LOADED")
except mlc.ExecutionError as e:
    print("ExecutionError:", e)
""")
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    expected = "another SHA-256" if cut == "flip" else f"is {len(data)} bytes; export_library wrote"
    assert proc.stdout.startswith("ExecutionError:") and expected in proc.stdout, proc.stdout
    x = tmp_path / "x.npy"
    np.save(x, np.ones((4, 32), np.float32))
    cli = subprocess.run([sys.executable, "-m", "mlc_mlir.cli.mlc", "run", lib, "--input", str(x)],
                         capture_output=True, text=True, timeout=300)
    assert cli.returncode > 0, (cli.returncode, cli.stderr[-2000:])
    assert expected in cli.stdout + cli.stderr
