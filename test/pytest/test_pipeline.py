"""compile() as named stages with frozen options; targets read from the host; bad options and
inputs that used to abort the process are MlcErrors."""

import dataclasses
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir.runtime.cuda import cuda_available
import mlc_mlir.target as target_mod
from mlc_mlir import ops
from mlc_mlir.errors import IRError, PipelineError
from mlc_mlir.pipeline import CPU_STAGES, CompileOptions
from mlc_mlir.target import Target, describe, get_target, host_target


def _add_relu(shape=(4, 8)):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a = f.arg("a", shape=shape, dtype="float32")
        b = f.arg("b", shape=shape, dtype="float32")
        f.output(ops.relu(ops.add(a, b)))
    return bb.finish()


def _run_isolated(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a child process: a regression to a process abort fails the test instead of
    killing pytest."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120)


def test_stages_are_listed_once_in_order():
    assert [s.name for s in CPU_STAGES] == ["graph", "layout", "tasks", "schedule", "math", "library",
                                            "prepare", "lower", "denormals"]


def test_options_are_a_cache_key(tmp_path):
    a = CompileOptions(target="cpu", threads=2)
    b = CompileOptions(target=host_target(), threads=2, dump_ir=str(tmp_path))
    assert a == b and hash(a) == hash(b)  # dump_ir only says where IR goes
    assert a != CompileOptions(target="cpu", threads=1)
    assert a != CompileOptions(target="cpu", threads=2, flush_denormals=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.threads = 3


@pytest.mark.parametrize("kwargs, match", [
    (dict(opt_level=7), "opt_level=7; expected 0, 1, 2 or 3"),
    (dict(opt_level=True), "opt_level=True"),
    (dict(threads=0), "threads=0"),
    (dict(threads=1.5), "threads=1.5"),
    (dict(flush_denormals="yes"), "flush_denormals='yes'"),
    (dict(target="tpu"), "unknown target 'tpu'"),
])
def test_bad_options_are_refused_before_compiling(kwargs, match):
    with pytest.raises(PipelineError, match=match):
        mlc.compile(_add_relu(), **kwargs)


def test_opt_level_out_of_range_never_reaches_llvm():
    # opt_level=7 used to hit an LLVM UNREACHABLE (process abort)
    proc = _run_isolated("""
        import mlc_mlir as mlc
        from mlc_mlir import ops
        bb = mlc.GraphBuilder()
        with bb.function("main") as f:
            f.output(ops.relu(f.arg("a", shape=(4,), dtype="float32")))
        try:
            mlc.compile(bb.finish(), opt_level=7)
        except mlc.MlcError as e:
            print("refused:", e)
    """)
    assert proc.returncode == 0 and "refused: compile: opt_level=7" in proc.stdout, proc.stderr


def test_memref_of_i1_in_a_parsed_module_is_refused():
    proc = _run_isolated("""
        import mlc_mlir as mlc
        mod = mlc.Module.parse('''
        func.func @main(%a: memref<4xi1>, %b: memref<4xi1>) {
          memref.copy %a, %b : memref<4xi1> to memref<4xi1>
          return
        }''')
        try:
            mlc.compile(mod)
        except mlc.MlcError as e:
            print("refused:", e)
    """)
    assert proc.returncode == 0, proc.stderr
    assert "refused: compile: 'func.func' has memref<4xi1>: a memref of i1 cannot be lowered" in proc.stdout


def test_compile_of_text_names_module_parse():
    with pytest.raises(IRError, match=r"expected an mlc.Module, got str; parse text with mlc.Module.parse"):
        mlc.compile("func.func @main() { return }")


def test_unwritable_dump_ir_is_a_pipeline_error():
    with pytest.raises(PipelineError, match="dump_ir folder"):
        mlc.compile(_add_relu(), dump_ir="/proc/mlc-dump")


def test_bad_pipeline_text_names_the_stage():
    with pytest.raises(PipelineError, match="lower: cannot parse pipeline"):
        mlc.compile(_add_relu(), pipeline="builtin.module(no-such-pass)")


def test_threads_reach_the_openmp_lowering(tmp_path, rng):
    mod = _add_relu((64, 32))
    sch = mlc.Schedule(mod)
    blk = sch.get_block("relu")
    i = sch.get_loops(blk)[0]
    sch.parallel(i)
    exe = mlc.compile(sch.mod, threads=2, dump_ir=str(tmp_path))
    a, b = (rng.standard_normal((64, 32)).astype(np.float32) for _ in range(2))
    np.testing.assert_allclose(exe(a, b), np.maximum(a + b, 0), rtol=1e-6)
    lowered = (tmp_path / "07-lower.mlir").read_text()
    assert "omp.parallel num_threads" in lowered


def test_host_target_is_read_from_the_machine():
    t = host_target()
    assert t.kind == "cpu" and t.cpu != "generic"
    flags = open("/proc/cpuinfo").read()
    assert ("avx512f" in t.features) == (" avx512f" in flags)
    assert ("avx2" in t.features) == (" avx2" in flags)
    assert t.vector_bits == (512 if "avx512f" in t.features else 256 if "avx" in t.features else 128)
    assert t.vector_registers == (32 if t.vector_bits == 512 else 16)
    assert t.vector_lanes(32) == t.vector_bits // 32
    assert t.cores == len(os.sched_getaffinity(0))
    assert t.l1d_bytes > 0 and t.l2_bytes >= t.l1d_bytes
    assert t.cpu in describe(t) and f"{t.cores} cores" in describe(t)
    assert get_target("cpu") is t and hash(t) == hash(dataclasses.replace(t))


def test_unknown_host_is_an_error_not_generic(monkeypatch):
    monkeypatch.setattr(target_mod, "_llvm_host_cpu", lambda: "generic")
    target_mod.host_target.cache_clear()
    try:
        with pytest.raises(PipelineError, match="does not recognize this host CPU"):
            target_mod.host_target()
    finally:
        monkeypatch.undo()
        target_mod.host_target.cache_clear()
    assert target_mod.host_target().cpu != "generic"


def test_cuda_targets():
    assert get_target("cuda").arch == "sm_90" and get_target("cuda:sm_80").arch == "sm_80"
    assert get_target("cuda").pipeline == "cuda"
    with pytest.raises(PipelineError, match="expected sm_<NN>"):
        get_target("cuda:volta")
    if not cuda_available():   # compiling for execution needs the driver: a clear error, no abort
        with pytest.raises(mlc.ExecutionError, match="needs a GPU"):
            mlc.compile(_add_relu(), target="cuda")


def test_hand_made_target_compiles_for_another_cpu(rng, tmp_path):
    # a user-given Target (no host detection): generic x86-64 with SSE only; the AOT library runs
    t = Target("cpu", cpu="x86-64", features=("sse2",), cores=1)
    exe = mlc.compile(_add_relu(), target=t)
    a, b = (rng.standard_normal((4, 8)).astype(np.float32) for _ in range(2))
    np.testing.assert_allclose(exe(a, b), np.maximum(a + b, 0))
    lib = mlc.runtime.load_library(exe.export_library(str(tmp_path / "sse.so")))
    np.testing.assert_allclose(lib(a, b), np.maximum(a + b, 0))


def test_results_merged_by_the_schedule_or_returned_twice_get_their_own_buffers(rng):
    # add(x, 3) and add(3, x) become one value after the default schedule's CSE; a parsed module
    # may return one value twice or return an argument: each result still gets its own buffer
    # (MLIR 22's buffer-results-to-out-params crashed on these)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(2, 3))
        f.output(ops.add(x, 3.0), ops.add(3.0, x))
    xv = rng.standard_normal((2, 3)).astype(np.float32)
    a, b = mlc.compile(bb.finish())(xv)
    np.testing.assert_allclose(a, xv + 3, rtol=1e-6)
    np.testing.assert_allclose(b, xv + 3, rtol=1e-6)
    assert not np.shares_memory(a, b)
    proc = _run_isolated("""
        import numpy as np
        import mlc_mlir as mlc
        mod = mlc.Module.parse('''
        func.func @main(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
          %e = tensor.empty() : tensor<4xf32>
          %n = linalg.negf ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>) -> tensor<4xf32>
          return %n, %n, %x : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
        }''')
        x = np.arange(4, dtype=np.float32)
        a, b, c = mlc.compile(mod)(x)
        assert (a == -x).all() and (b == -x).all() and (c == x).all(), (a, b, c)
        print("ok")
    """)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]
