"""The lowered module's global variables in name order (``pipeline.global_order``): upstream
One-Shot Bufferize creates the globals of constants in an order that changes from run to run, so
a compile sorts them; other ops keep their order, and the compiled code still matches numpy."""

import re

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.ir.module import Module
from mlc_mlir.pipeline.global_order import sort_globals

UNSORTED = """
memref.global "private" constant @c_b : memref<2xf32> = dense<2.0>
func.func private @f() { return }
memref.global "private" constant @c_c : memref<2xf32> = dense<3.0>
func.func private @g() { return }
memref.global "private" constant @c_a : memref<2xf32> = dense<1.0>
"""


def _names(text, kind):
    return re.findall(rf"{re.escape(kind)} [^@\n]*@(\w+)", text)


def test_globals_move_to_the_start_in_name_order():
    mod = sort_globals(Module.parse(UNSORTED))
    text = str(mod)
    assert _names(text, "memref.global") == ["c_a", "c_b", "c_c"]
    assert _names(text, "func.func") == ["f", "g"]
    assert text.index("@c_c") < text.index("@f")
    mod.verify()


def test_compiled_module_lists_its_constants_in_name_order(tmp_path):
    rng = np.random.default_rng(0)
    cs = [rng.standard_normal(n).astype(np.float32) for n in (24, 40, 56, 72, 88, 104)]
    x = rng.standard_normal((3, 16)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a = f.arg("x", shape=x.shape)
        outs = [ops.sum(ops.concat([a, ops.broadcast_to(ops.constant(c), (3, c.size))], 1), axis=1)
                for c in cs]
        f.output(*outs)
    exe = mlc.compile(bb.finish(), dump_ir=str(tmp_path))
    for got, c in zip(exe(x), cs):
        np.testing.assert_allclose(got, x.sum(1) + c.sum(), rtol=1e-4, atol=1e-4)
    names = _names((tmp_path / "07-lower.mlir").read_text(), "llvm.mlir.global")
    assert len(names) >= len(cs) and names == sorted(names)
