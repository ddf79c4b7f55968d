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
from mlc_mlir._mlir import NativeExecutionEngine
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
    request of the same page count (the most recently freed first); other sizes get new
    blocks; mapped blocks are 64-byte aligned, small ones keep malloc's 16 bytes; a module that
    allocates nothing is left as it is."""
    mod = link_buffer_cache(Module.parse(_ALLOCATOR))
    text = str(mod)
    assert "llvm.call @mlc_buffer_alloc" in text and "llvm.call @malloc(%n)" not in text
    assert "llvm.mlir.global_dtors" in text
    engine = load_engine(mod, 2, [])
    take, give = _packed(engine, "take", restype=True), _packed(engine, "give")
    a, b, small = take(1 << 20), take(1 << 20), take(64)
    assert a and b and small and a % 64 == 0 and small % 16 == 0 and a != b
    give(a)
    c = take(1 << 20)
    d = take((1 << 20) + 64)      # the same pages as 1 MiB (+ the 64-byte header, 4 KiB pages)
    e = take(2 << 20)
    assert c == a and d not in (a, b) and e not in (a, b, d) and d % 64 == 0
    for p in (b, c, d, e, small):
        give(p)
    assert take(1 << 20) == d and take(1 << 20) == c and take((1 << 20) - 4096) not in (a, b, d, e)
    plain = Module.parse("llvm.func @f() {\n  llvm.return\n}")
    assert link_buffer_cache(plain) is plain


# The cache's counters, declared here as the cache declares them (link_buffer_cache keeps a
# module's own definition of a name), so the test reads them.
_COUNTERS = _ALLOCATOR + "".join(f"""
llvm.mlir.global internal @mlc_buffer_cache_{name}(0 : i64) {{alignment = 8 : i64}} : i64
llvm.func @{name}() -> i64 {{
  %p = llvm.mlir.addressof @mlc_buffer_cache_{name} : !llvm.ptr
  %v = llvm.load %p : !llvm.ptr -> i64
  llvm.return %v : i64
}}""" for name in ("idle", "live", "gen"))


def _mapped(address: int, size: int) -> bool:
    """Whether every page of ``[address, address + size)`` is mapped (``mincore`` fails with
    ENOMEM on an unmapped page)."""
    libc = ctypes.CDLL(None, use_errno=True)
    page = os.sysconf("SC_PAGE_SIZE")
    start = address - address % page
    pages = (address + size - start + page - 1) // page
    vec = (ctypes.c_ubyte * pages)()
    return libc.mincore(ctypes.c_void_p(start), ctypes.c_size_t(pages * page), vec) == 0


def test_buffer_cache_keeps_one_calls_blocks():
    """A call ends when no block is in use; a request that no idle block fits unmaps the idle
    blocks of earlier calls (the pages go back to the OS) and keeps those of the current one, so
    a run of ever different sizes holds one call's blocks, where keeping a block per size grew
    without bound; sizes that repeat are always reused."""
    engine = load_engine(link_buffer_cache(Module.parse(_COUNTERS)), 2, [])
    take, give = _packed(engine, "take", restype=True), _packed(engine, "give")
    idle, live, gen = (_packed(engine, n, restype=True) for n in ("idle", "live", "gen"))
    mib = 1 << 20
    x = take(4 * mib)
    assert (live(), idle(), gen()) == (4 * mib + 4096, 0, 0)
    give(x)                               # nothing in use: the next call starts
    assert (live(), idle(), gen()) == (0, 4 * mib + 4096, 1) and _mapped(x, 4 * mib)
    y = take(mib)                         # a miss: x, of the earlier call, is unmapped
    assert idle() == 0 and live() == mib + 4096
    assert not _mapped(x, 4 * mib)        # (a new mapping may reuse part of its range)
    z = take(2 * mib)
    give(y)
    w = take(3 * mib)                     # a miss; y is of this call: kept
    assert idle() == mib + 4096 and _mapped(y, mib) and take(mib) == y
    for p in (y, z, w):
        give(p)
    assert gen() == 2 and idle() == 6 * mib + 3 * 4096
    for _ in range(3):                    # the same sizes again: every block reused, none unmapped
        got = [take(mib), take(2 * mib), take(3 * mib)]
        assert sorted(got) == sorted([y, z, w])
        for p in got:
            give(p)
    rss = _rss()
    for k in range(64):                   # 64 calls of different sizes, 2..4 MiB, each touched
        size = 2 * mib + 8192 + k * 32768
        p = take(size)
        ctypes.memset(p, 1, size)
        give(p)
        assert live() == 0 and idle() == size + 4096
    # keeping every size would have added ~190 MiB of touched pages
    assert _rss() - rss < 64 * mib


# One call of an entry point that frees every block midway and then asks for another size:
# out[0], out[1] = the two blocks' addresses.
_MIDWAY = _COUNTERS + """
llvm.func @step(%out: !llvm.ptr) attributes {llvm.emit_c_interface} {
  %big = llvm.mlir.constant(4194304 : i64) : i64
  %a = llvm.call @malloc(%big) : (i64) -> !llvm.ptr
  llvm.store %a, %out : !llvm.ptr, !llvm.ptr
  llvm.call @free(%a) : (!llvm.ptr) -> ()
  %small = llvm.mlir.constant(1048576 : i64) : i64
  %b = llvm.call @malloc(%small) : (i64) -> !llvm.ptr
  %slot = llvm.getelementptr %out[1] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
  llvm.store %b, %slot : !llvm.ptr, !llvm.ptr
  llvm.call @free(%b) : (!llvm.ptr) -> ()
  llvm.return
}
"""


def test_a_call_that_frees_all_its_blocks_midway_keeps_them():
    """An entry point (``llvm.emit_c_interface``) marks where a call starts and ends: a call
    that frees every block and then asks for another size is still one call, so the miss keeps
    the first block, and the next call reuses both, no block mapped again. Ending a call when
    no block was in use unmapped the first block at the miss and mapped it again on every call
    (SqueezeNet: 4237 page faults and +6 ms per call)."""
    mod = link_buffer_cache(Module.parse(_MIDWAY))
    engine = load_engine(mod, 2, [])
    step = _packed(engine, "step")
    gen, idle = _packed(engine, "gen", restype=True), _packed(engine, "idle", restype=True)
    out = (ctypes.c_uint64 * 2)()
    seen = []
    for k in range(4):
        step(ctypes.addressof(out))
        seen.append((out[0], out[1]))
        assert gen() == k + 1 and idle() == 5 * (1 << 20) + 2 * 4096
    assert len(set(seen)) == 1 and _mapped(seen[0][0], 4 << 20)
    assert str(mod).count("llvm.call @mlc_buffer_call_enter") == 1


def _rss() -> int:
    """This process's resident bytes (``VmRSS``)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def test_symbolic_sizes_stay_correct_as_blocks_are_unmapped():
    """A function symbolic in its rows, with intermediate buffers of 64 KiB and more, called
    with sizes that change from call to call (blocks of other sizes unmapped, blocks of the
    same size reused) equals numpy each time."""
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((64, 512)) / 8).astype(np.float32)
    w2 = (rng.standard_normal((512, 64)) / 16).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", ("n", 64), "float32")
        f.output(ops.softmax(ops.matmul(ops.relu(ops.matmul(x, w1)), w2), axis=-1))
    exe = mlc.compile(bb.finish(), threads=2)
    for n in (700, 64, 300, 700, 1500, 33, 300):
        x = rng.standard_normal((n, 64)).astype(np.float32)
        h = np.maximum(x @ w1, 0) @ w2
        e = np.exp(h - h.max(-1, keepdims=True))
        np.testing.assert_allclose(np.asarray(exe(x)), e / e.sum(-1, keepdims=True), rtol=2e-4, atol=1e-6)


def _conv():
    w = np.random.default_rng(0).standard_normal((64, 64, 3, 3)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.conv2d(f.arg("x", (1, 64, 56, 56)), w, padding=1))
    return bb.finish()


def _engine(exe) -> NativeExecutionEngine:
    return next(k for k in exe._keepalive if isinstance(k, NativeExecutionEngine))


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
