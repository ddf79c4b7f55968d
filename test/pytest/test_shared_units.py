"""Repeated units are compiled once: the ``tasks`` stage outlines each distinct unit that occurs
more than once into one function called from every site (weights passed as arguments), the
result matches numpy / transformers, and units with in-place writes across their boundary stay
in the graph function; the progress line of a long compile, which ticks while LLVM runs with the
GIL released."""

import gc
import io
import ctypes
import logging
import sys
import time

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.pipeline import CompileOptions
from mlc_mlir.pipeline.progress import CompileProgress
from mlc_mlir.pipeline.shared_units import is_weight
from mlc_mlir.errors import PipelineError
from mlc_mlir.ir.constants import parsed_resource_blobs
from mlc_mlir.ir.module import Module
from mlc_mlir.ir.walk import find_ops
from mlc_mlir.pipeline.jit_weights import LINK_MIN_BYTES, link_weights
from mlc_mlir.runtime import jit_engine
from mlc_mlir.runtime.jit_engine import create_engine, initialize_engine

_compile = sys.modules["mlc_mlir.pipeline.compile"]


def _mlp(layers: int, width: int = 64, seed: int = 0):
    """``layers`` x (dense + bias + relu) of one width, each with its own constant weights, and
    the numpy reference."""
    rng = np.random.default_rng(seed)
    ws = [rng.standard_normal((width, width)).astype(np.float32) / np.sqrt(width) for _ in range(layers)]
    bs = [rng.standard_normal(width).astype(np.float32) for _ in range(layers)]
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        h = f.arg("x", shape=(4, width), dtype="float32")
        for i, (w, b) in enumerate(zip(ws, bs)):
            h = ops.relu(ops.dense(h, w, b, name=f"fc{i}"), name=f"relu{i}")
        f.output(h)

    def reference(x):
        for w, b in zip(ws, bs):
            x = np.maximum(x @ w.T + b, 0)
        return x

    return bb.finish(), reference


def _after_tasks(mod):
    return _compile.run_stages(mod, CompileOptions(target="cpu", threads=1), until="tasks")[1]


def _calls(mod):
    out = {}
    with mod.context:
        for f in mod.func_ops():
            for op in f.regions[0].blocks[0].operations if f.regions[0].blocks else []:
                if op.operation.name == "func.call":
                    callee = str(op.operation.attributes["callee"]).lstrip("@")
                    out.setdefault(callee, []).append(f.sym_name.value)
    return out


def test_repeated_layers_become_one_function_called_per_layer():
    mod, reference = _mlp(4)
    tasks = _after_tasks(mod)
    calls = _calls(tasks)
    private = [f for f in tasks.function_names() if f != "main"]
    # the four layers are one unit: one function, four calls, weights as arguments
    assert len(private) == 1 and calls == {private[0]: ["main"] * 4}
    with tasks.context:
        fn = tasks.get_function(private[0])
        assert "mlc.primitive" in fn.attributes and "passthrough" in fn.attributes
        body = fn.regions[0].blocks[0].operations
        assert not any(is_weight(op.operation) for op in body)
        assert len(fn.type.inputs) == 3   # activation, weight, bias
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(mod, threads=1)(x), reference(x), rtol=1e-4, atol=1e-4)


def test_distinct_units_are_not_merged():
    # the same ops on other shapes, and a unit that occurs once, stay apart / in place
    rng = np.random.default_rng(2)
    w1 = rng.standard_normal((64, 64)).astype(np.float32) / 8
    w2 = rng.standard_normal((64, 64)).astype(np.float32) / 8
    w3 = rng.standard_normal((16, 64)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(2, 64), dtype="float32")
        a = ops.relu(ops.dense(x, w1, name="a"))
        b = ops.relu(ops.dense(a, w2, name="b"))
        f.output(ops.dense(b, w3, name="c"))
    mod = bb.finish()
    tasks = _after_tasks(mod)
    calls = _calls(tasks)
    assert len(calls) == 1 and len(next(iter(calls.values()))) == 2   # a and b share, c does not
    with tasks.context:
        main = tasks.get_function("main")
        names = [op.operation.attributes["mlc.name"] for op in main.regions[0].blocks[0].operations
                 if "mlc.name" in op.operation.attributes and op.operation.name == "linalg.matmul"]
        assert [str(n).strip('"') for n in names] == ["c"]
    xv = rng.standard_normal((2, 64)).astype(np.float32)
    ref = np.maximum(np.maximum(xv @ w1.T, 0) @ w2.T, 0) @ w3.T
    np.testing.assert_allclose(mlc.compile(mod, threads=1)(xv), ref, rtol=1e-4, atol=1e-3)


def test_splat_constants_stay_inside_and_tell_units_apart():
    # three equal layers but for the splat constant they multiply by (kept in the kernel):
    # the two layers of one value share a function, the third stays in main
    rng = np.random.default_rng(3)
    n, scales = 16, (2.0, 2.0, 3.0)
    ws = [rng.standard_normal((n, n)).astype(np.float32) / n for _ in scales]
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        h = f.arg("x", shape=(n, n), dtype="float32")
        for i, (w, s) in enumerate(zip(ws, scales)):
            splat = ops.constant(np.broadcast_to(np.float32(s), (n, n)), name=f"s{i}")
            h = ops.multiply(ops.matmul(h, ops.constant(w, name=f"w{i}"), name=f"m{i}"), splat)
        f.output(h)
    mod = bb.finish()
    calls = _calls(_after_tasks(mod))
    assert sorted(len(v) for v in calls.values()) == [2]
    xv = rng.standard_normal((n, n)).astype(np.float32)
    ref = xv
    for w, s in zip(ws, scales):
        ref = (ref @ w) * s
    np.testing.assert_allclose(mlc.compile(mod, threads=1)(xv), ref, rtol=1e-4, atol=1e-4)


def test_decoder_layers_share_kernels_and_keep_cache_writes_in_place():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from mlc_mlir.llm.export import import_step, step_module

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=3, n_embd=64, n_head=4, vocab_size=100, n_positions=64)
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    mod = import_step(hf, 16, 1)
    tasks = _after_tasks(mod)
    calls = _calls(tasks)
    # each shared function serves every layer (the final layer norm shares the layers' too)
    assert len(calls) >= 10 and all(len(sites) >= 3 for sites in calls.values())
    with tasks.context:
        main = tasks.get_function("main")
        # the cache rows are written where they were: in main, into its in/out arguments
        inserts = [op for op in main.regions[0].blocks[0].operations
                   if op.operation.name == "tensor.insert_slice"
                   and isinstance(op.operation.operands[1].owner, type(main.regions[0].blocks[0]))]
        assert len(inserts) == 2 * 3
    caches = [np.random.default_rng(i).standard_normal((1, 4, 16, 16)).astype(np.float32) for i in range(6)]
    args = (np.array([[7]], np.int64), np.array(5, np.int64))
    mine = [c.copy() for c in caches]
    logits = mlc.compile(mod, threads=1)(*args, *mine)
    theirs = [torch.from_numpy(c.copy()) for c in caches]
    with torch.no_grad():
        ref = step_module(hf, 16)(*(torch.from_numpy(a) for a in args), *theirs)
    np.testing.assert_allclose(logits, ref.numpy(), rtol=1e-4, atol=1e-4)
    for a, b in zip(mine, theirs):   # the rows at position 5 written in place, like transformers'
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-5)


def test_symbolic_prefill_layers_share_kernels_written_into_the_callers_buffers():
    """A prefill step symbolic in ``seq``: its layers' units are shared too, each dynamic result
    written into a buffer the caller passes in; the calls survive the ``prepare`` stage (not
    inlined) and one compile matches transformers at two prompt lengths."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from mlc_mlir.llm.export import import_step, step_module

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=3, n_embd=64, n_head=4, vocab_size=100, n_positions=64)
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    mod = import_step(hf, 16)
    prepared = _compile.run_stages(mod, CompileOptions(target="cpu", threads=1), until="prepare")[1]
    calls = _calls(prepared)
    with prepared.context:
        dynamic = {f.sym_name.value for f in prepared.func_ops()
                   if any("?" in str(t) for t in f.type.inputs)}
    shared = [c for c in calls if c in dynamic and len(calls[c]) >= 3]
    assert len(shared) >= 5, calls
    exe = mlc.compile(mod, threads=1)
    for n in (5, 11):
        caches = [np.random.default_rng(i).standard_normal((1, 4, 16, 16)).astype(np.float32) for i in range(6)]
        ids = np.random.default_rng(n).integers(0, 100, (1, n))
        args = (ids, np.array(2, np.int64))
        mine = [c.copy() for c in caches]
        logits = exe(*args, *mine)
        theirs = [torch.from_numpy(c.copy()) for c in caches]
        with torch.no_grad():
            ref = step_module(hf, 16)(*(torch.from_numpy(a) for a in args), *theirs)
        np.testing.assert_allclose(logits, ref.numpy(), rtol=1e-4, atol=1e-4)
        for a, b in zip(mine, theirs):   # rows 2 .. 2 + n - 1 written in place
            np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-5)


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_line_is_rewritten_on_a_terminal_and_logged_elsewhere(caplog):
    tty = _Terminal()
    with CompileProgress(3, stream=tty, show_after=0.0) as p:
        p.stage(0, "graph")
        p.stage(2, "jit")
    text = tty.getvalue()
    assert "\r" in text and "[1/3] graph" in text and "[3/3] jit" in text and "done in" in text
    assert text.count("\n") == 1   # one line, rewritten

    tty = _Terminal()
    with pytest.raises(KeyboardInterrupt):
        with CompileProgress(3, stream=tty, show_after=0.0) as p:
            p.stage(0, "graph")
            raise KeyboardInterrupt
    assert tty.getvalue().endswith("\r") and "done" not in tty.getvalue()   # cleared

    quiet = _Terminal()
    with CompileProgress(3, stream=quiet, show_after=3600.0) as p:
        p.stage(0, "graph")
    assert quiet.getvalue() == ""   # a short compile shows nothing

    with caplog.at_level(logging.INFO, logger="mlc_mlir"):
        with CompileProgress(2, stream=io.StringIO(), show_after=0.0) as p:
            p.stage(1, "lower")
    assert any("[2/2] lower" in r.getMessage() for r in caplog.records)


def test_progress_line_ticks_while_a_stage_runs(caplog):
    """``ticking`` rewrites the running stage's line with the elapsed time until the block
    exits; without a terminal it logs the stage once, then every ``log_tick`` seconds."""
    tty = _Terminal()
    with CompileProgress(2, stream=tty, show_after=0.0) as p:
        p.stage(0, "lower")
        with p.ticking(1, "jit", tick=0.001):
            deadline = time.perf_counter() + 60
            while tty.getvalue().count("[2/2] jit") < 3 and time.perf_counter() < deadline:
                time.sleep(0.01)   # the main thread waits as it would in LLVM (GIL released)
        after = tty.getvalue().count("[2/2] jit")
    assert after >= 3 and tty.getvalue().count("[2/2] jit") == after   # the thread has stopped
    assert tty.getvalue().endswith("\n") and "done in" in tty.getvalue()

    with caplog.at_level(logging.INFO, logger="mlc_mlir"):
        with CompileProgress(1, stream=io.StringIO(), show_after=0.0) as p:
            with p.ticking(0, "jit", tick=0.001, log_tick=3600.0):
                time.sleep(0.05)
    assert sum("[1/1] jit" in r.getMessage() for r in caplog.records) == 1


_ADD = """
llvm.func @add(%a: i64, %b: i64) -> i64 {
  %c = llvm.add %a, %b : i64
  llvm.return %c : i64
}
llvm.func @_mlir_ciface_add(%a: i64, %b: i64) -> i64 {
  %c = llvm.call @add(%a, %b) : (i64, i64) -> i64
  llvm.return %c : i64
}
"""


@pytest.mark.parametrize("capi", [True, False])
def test_engine_made_without_the_gil_runs_and_reports_failures(capi, monkeypatch):
    """``create_engine`` (the C API called through ctypes, or the bindings' constructor where
    the C API library is missing) gives an engine that runs the code; a module LLVM cannot
    take raises PipelineError."""
    if not capi:
        monkeypatch.setattr(jit_engine, "_capi", lambda: None)
    mod = Module.parse(_ADD)
    with mod.context:
        engine = create_engine(mod.ir_module, 2, [])
        initialize_engine(engine)
        a, b, out = ctypes.c_int64(40), ctypes.c_int64(2), ctypes.c_int64(0)
        args = (ctypes.c_void_p * 3)(*[ctypes.addressof(c) for c in (a, b, out)])
        ctypes.CFUNCTYPE(None, ctypes.c_void_p)(engine.raw_lookup("add"))(args)
    assert out.value == 42
    bad = Module.parse("func.func @f(%a: i64) -> i64 {\n  return %a : i64\n}")   # not LLVM dialect
    with bad.context, pytest.raises(PipelineError, match="ExecutionEngine failed"):
        create_engine(bad.ir_module, 2, [])


def _weights(mod):
    """``{key: numpy value}`` of the ``dense_resource`` constants of ``mod`` 's functions."""
    with mod.context:
        attrs = [op.attributes["value"] for op in find_ops(mod, "arith.constant")]
        return {str(a): mod.constant_value(a) for a in attrs if str(a).startswith("dense_resource<")}


def test_a_module_parsed_from_its_text_reads_and_links_its_weights():
    """A tuning worker compiles the text of a task or model: its weights must be readable at
    compile time (folded with numpy, linked by the JIT on 64-byte lines) as the built module's
    are, not recompiled into the object, so the candidate is the code ``mlc.compile`` makes."""
    mod, reference = _mlp(2, width=128)
    parsed = Module.parse(str(mod))
    built, read = _weights(mod), _weights(parsed)
    assert len(built) == 4 and built.keys() == read.keys()   # two weights, two biases
    for key, value in built.items():
        assert read[key].dtype == value.dtype and np.array_equal(read[key], value), key
    lowered = _compile.run_stages(parsed, CompileOptions(target="cpu", threads=1))[1]
    _, symbols, arrays = link_weights(lowered)
    assert len(symbols) == 2 and all(a.ctypes.data % 64 == 0 and a.nbytes >= LINK_MIN_BYTES for a in arrays)
    x = np.random.default_rng(5).standard_normal((4, 128)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(parsed, threads=1)(x), reference(x), rtol=1e-4, atol=1e-4)


def test_parsed_blobs_are_viewed_as_their_element_type():
    """Hand-written text (``mlir-opt`` output): a quoted key, an i32 blob (4-byte alignment
    header, then little-endian bytes), and a blob whose size does not match its type."""
    text = '''
    func.func @main() -> (tensor<3xi32>, tensor<2xf32>) {
      %a = arith.constant dense_resource<"w::a"> : tensor<3xi32>
      %b = arith.constant dense_resource<short> : tensor<2xf32>
      return %a, %b : tensor<3xi32>, tensor<2xf32>
    }
    {-#
      dialect_resources: {
        builtin: {
          "w::a": "0x04000000010000000200000003000000",
          short: "0x040000000000803F"
        }
      }
    #-}'''
    mod = Module.parse(text)
    vals = _weights(mod)
    np.testing.assert_array_equal(vals['dense_resource<"w::a"> : tensor<3xi32>'], np.array([1, 2, 3], np.int32))
    assert vals["dense_resource<short> : tensor<2xf32>"] is None   # 4 bytes for 8
    # only the builtin dialect's blobs are dense_resource data: another dialect's, before or
    # after it, are not read (the same key there would otherwise replace the weight)
    other = text.replace("builtin: {", 'test: {\n "w::a": "0x0400000009000000" },\n builtin: {')
    other = other.replace('803F"\n        }', '803F"\n        },\n test2: {\n short: "0x0400000000000000"\n }')
    assert other.count('short: "0x0400000000000000"') == 1 and other.count('"w::a": "0x04000000090') == 1
    blobs = parsed_resource_blobs(other)
    assert sorted(blobs) == ['"w::a"', "short"] and blobs['"w::a"'].view(np.int32).tolist() == [1, 2, 3]
    assert blobs["short"].view(np.float32).tolist() == [1.0]


def test_large_weights_are_linked_not_compiled():
    mod, reference = _mlp(2, width=128)   # 64 KiB weights
    lowered = _compile.run_stages(mod, CompileOptions(target="cpu", threads=1))[1]
    linked, symbols, arrays = link_weights(lowered)

    def globals_(m):
        with m.context:
            return {str(op.operation.attributes["sym_name"]): "value" in op.operation.attributes
                    for op in m.ir_module.body.operations if op.operation.name == "llvm.mlir.global"}

    before, after = globals_(lowered), globals_(linked)
    assert before.keys() == after.keys()
    declared = [name for name, init in after.items() if before[name] and not init]
    assert len(declared) == len(symbols) == 2 and {n for n, _ in symbols} == {n.strip('"') for n in declared}
    assert all(addr.value == a.ctypes.data and addr.value % 16 == 0 for (_, addr), a in zip(symbols, arrays))
    assert 128 * 128 * 4 >= LINK_MIN_BYTES
    x = np.random.default_rng(4).standard_normal((4, 128)).astype(np.float32)
    # a Function outlives its Executable, module and context: the linked weights live with it
    fn = mlc.compile(mod, threads=1)["main"]
    del mod, lowered, linked, symbols, arrays
    gc.collect()
    junk = [np.full((128, 128), np.nan, np.float32) for _ in range(64)]   # reuse of freed memory
    np.testing.assert_allclose(fn(x), reference(x), rtol=1e-4, atol=1e-4)
    del junk
