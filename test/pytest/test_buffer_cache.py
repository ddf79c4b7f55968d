"""The buffer cache linked into compiled code, and compiled code that does not depend on
``dump_ir``: a module compiled with and without dumping is the same machine code, and its calls
allocate the same way (no buffer mapped again on each call) whatever the process freed before."""

import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir._mlir import ExecutionEngine
from mlc_mlir.ir.module import Module
from mlc_mlir.pipeline import jit_weights
from mlc_mlir.pipeline.buffer_cache import link_buffer_cache
from mlc_mlir.runtime.executable import load_engine

_ALLOCATOR = """
llvm.func @malloc(i64) -> !llvm.ptr
llvm.func @free(!llvm.ptr)
llvm.func @take(%n: i64) -> !llvm.ptr {
  %p = llvm.call @malloc(%n) : (i64) -> !llvm.ptr
  llvm.return %p : !llvm.ptr
}
llvm.func @give(%p: !llvm.ptr) {
  llvm.call @free(%p) : (!llvm.ptr) -> ()
  llvm.return
}
"""


def _packed(engine, name, restype=None):
    """Call ``_mlir_<name>`` (the engine's packed wrapper): one pointer per argument and result."""
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(engine.raw_lookup(name))

    def call(*args):
        cells = [ctypes.c_uint64(a) for a in args] + ([ctypes.c_uint64()] if restype else [])
        ptrs = (ctypes.c_void_p * len(cells))(*[ctypes.addressof(c) for c in cells])
        fn(ptrs)
        return cells[-1].value if restype else None

    return call


def test_buffer_cache_reuses_blocks_of_the_same_size():
    """Linked into a module, the cache hands a freed block of at least 64 KiB back to the next
    request of exactly its size; other sizes get new blocks; blocks keep malloc's 16-byte
    alignment; a module that allocates nothing is left as it is."""
    mod = link_buffer_cache(Module.parse(_ALLOCATOR))
    text = str(mod)
    assert "llvm.call @mlc_buffer_alloc" in text and "llvm.call @malloc(%n)" not in text
    assert "llvm.mlir.global_dtors" in text
    engine = load_engine(mod, 2, [])
    take, give = _packed(engine, "take", restype=True), _packed(engine, "give")
    a, b, small = take(1 << 20), take(1 << 20), take(64)
    assert a and b and small and a % 16 == 0 and small % 16 == 0 and a != b
    give(a)
    c = take(1 << 20)
    d = take((1 << 20) + 64)
    assert c == a and d not in (a, b) and d % 16 == 0
    for p in (b, c, d, small):
        give(p)
    assert take(1 << 20) in (b, c)
    plain = Module.parse("llvm.func @f() {\n  llvm.return\n}")
    assert link_buffer_cache(plain) is plain


def _conv():
    w = np.random.default_rng(0).standard_normal((64, 64, 3, 3)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.conv2d(f.arg("x", (1, 64, 56, 56)), w, padding=1))
    return bb.finish()


def _engine(exe) -> ExecutionEngine:
    return next(k for k in exe._keepalive if isinstance(k, ExecutionEngine))


def test_dump_ir_does_not_change_the_machine_code(tmp_path, monkeypatch):
    """The issue's conv2d (1x64x56x56, 3x3 -> 64, constant weights) compiled with and without
    ``dump_ir``: the JIT's object code is byte-identical, and the dumped 09-llvm.ll is the
    module the JIT got (it calls the buffer cache, not malloc). The weights are compiled into
    the object here: linked weights (``jit_weights``) are addressed absolutely, so two compiles
    that fold the filter into two arrays differ by those addresses only."""
    monkeypatch.setattr(jit_weights, "LINK_MIN_BYTES", 1 << 62)
    mod = _conv()
    plain = mlc.compile(mod, threads=1)
    dumped = mlc.compile(mod, threads=1, dump_ir=str(tmp_path / "ir"))
    objects = []
    for name, exe in (("plain", plain), ("dumped", dumped)):
        path = str(tmp_path / f"{name}.o")
        _engine(exe).dump_to_object_file(path)
        objects.append(open(path, "rb").read())
    assert len(objects[0]) > 1000 and objects[0] == objects[1]
    ll = open(tmp_path / "ir" / "09-llvm.ll").read()
    # malloc is called once: in the cache's definition of mlc_buffer_alloc
    assert "call ptr @mlc_buffer_alloc" in ll and ll.count("call ptr @malloc(") == 1
    assert "define internal ptr @mlc_buffer_alloc" in ll
    x = np.random.default_rng(1).standard_normal((1, 64, 56, 56)).astype(np.float32)
    np.testing.assert_array_equal(plain(x), dumped(x))


_FAULTS = """
import resource, sys, tempfile
import numpy as np
sys.path.insert(0, {test_dir!r})
from test_buffer_cache import _conv
import mlc_mlir as mlc
exe = mlc.compile(_conv(), threads=1, dump_ir=tempfile.mkdtemp() if {dump} else None)
x = np.ones((1, 64, 56, 56), np.float32)
exe.benchmark(x, number=1, repeat=1, warmup=1)     # first call: the buffers are mapped
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
exe.benchmark(x, number=20, repeat=1, warmup=0)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.parametrize("dump", [False, True])
def test_calls_map_no_buffers_with_or_without_dump(dump):
    """In a fresh process, 20 calls of the conv2d take next to no page faults with and without
    ``dump_ir`` (counted with getrusage, not timed): the buffer cache keeps the intermediate
    buffers (~3 MB) mapped. Before, without ``dump_ir`` every call mapped them again (~1500
    faults per call, 3 ms instead of 0.6 ms); with it, glibc's mmap threshold had been raised by
    the freed LLVM IR text and they stayed."""
    code = _FAULTS.format(test_dir=os.path.dirname(os.path.abspath(__file__)), dump=dump)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    faults = int(proc.stdout.split()[-1])
    # one buffer mapped again per call would be >= 20 * 16 faults (64 KiB blocks)
    assert faults < 20 * 16, faults
