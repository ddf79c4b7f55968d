"""Private LLVM-dialect functions that differ only in integer constants become one function
taking them as arguments (:func:`mlc_mlir.pipeline.constant_variants.merge_constant_variants`):
the calls pass each member's values; small values, constants with other users (a division) and
functions whose address is taken stay apart; a compiled model whose outlined nests differ only
in their sizes gives numpy's result, the same bits as without the merging."""

import sys

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir._mlir import ir
from mlc_mlir.ir.module import Module
from mlc_mlir.ir.walk import find_ops
from mlc_mlir.pipeline.constant_variants import MIN_PARAMETER, merge_constant_variants

_compile = sys.modules["mlc_mlir.pipeline.compile"]


def _module(variants, address_taken: str = "") -> Module:
    """``main(%p)`` calling private ``@f<i>(%p)``, each storing ``(%p[0] <op> a) * b`` to
    ``%p[0]``; ``variants`` lists ``(op, a, b)`` per function."""
    funcs, calls = [], []
    for i, (op, a, b) in enumerate(variants):
        calls.append(f"    llvm.call @f{i}(%p) : (!llvm.ptr) -> ()")
        funcs.append(f"""
  llvm.func @f{i}(%p: !llvm.ptr) attributes {{sym_visibility = "private"}} {{
    %a = llvm.mlir.constant({a} : index) : i64
    %b = llvm.mlir.constant({b} : index) : i64
    %x = llvm.load %p : !llvm.ptr -> i64
    %y = {op} %x, %a : i64
    %z = llvm.mul %y, %b : i64
    llvm.store %z, %p : i64, !llvm.ptr
    llvm.return
  }}""")
    taken = f"    %f = llvm.mlir.addressof @{address_taken} : !llvm.ptr\n" if address_taken else ""
    text = ("module {\n  llvm.func @main(%p: !llvm.ptr) {\n" + taken + "\n".join(calls)
            + "\n    llvm.return\n  }" + "".join(funcs) + "\n}")
    return Module.parse(text)


def _calls(mod: Module):
    """``(callee, [constant operands])`` of each call, in order."""
    with mod.context:
        out = []
        for call in find_ops(mod, "llvm.call"):
            owners = [v.owner for v in call.operands if not isinstance(v.owner, ir.Block)]
            out.append((ir.FlatSymbolRefAttr(call.attributes["callee"]).value,
                        [ir.IntegerAttr(o.attributes["value"]).value for o in owners
                         if o.name == "llvm.mlir.constant"]))
        return out


def _functions(mod: Module):
    with mod.context:
        return [str(f.attributes["sym_name"]).strip('"') for f in find_ops(mod, "llvm.func")]


def test_functions_differing_in_constants_share_one():
    mod = _module([("llvm.add", 100, 1000), ("llvm.add", 200, 1000), ("llvm.add", 300, 2000)])
    assert merge_constant_variants(mod) == {"f1": "f0", "f2": "f0"}
    mod.verify()
    assert _functions(mod) == ["main", "f0"]
    # one argument per constant that differs (a: 100/200/300, b: 1000/1000/2000)
    assert _calls(mod) == [("f0", [100, 1000]), ("f0", [200, 1000]), ("f0", [300, 2000])]


def test_identical_functions_share_one_without_arguments():
    mod = _module([("llvm.add", 100, 1000), ("llvm.add", 100, 1000)])
    assert merge_constant_variants(mod) == {"f1": "f0"}
    mod.verify()
    assert _calls(mod) == [("f0", []), ("f0", [])]


def test_equal_columns_share_one_argument():
    mod = _module([("llvm.add", 100, 100), ("llvm.add", 200, 200)])
    assert merge_constant_variants(mod) == {"f1": "f0"}
    assert _calls(mod) == [("f0", [100]), ("f0", [200])]


def test_small_values_divisions_and_taken_addresses_stay_apart():
    small = MIN_PARAMETER - 1
    assert merge_constant_variants(_module([("llvm.add", small, 100), ("llvm.add", 100, 100)])) == {}
    assert merge_constant_variants(_module([("llvm.sdiv", 100, 100), ("llvm.sdiv", 200, 100)])) == {}
    assert merge_constant_variants(_module([("llvm.add", 100, 100), ("llvm.add", 200, 100)],
                                           address_taken="f1")) == {}
    # the divisor splits the group; within a part the multiplier becomes an argument
    mod = _module([("llvm.sdiv", 100, 1000), ("llvm.sdiv", 200, 1000), ("llvm.sdiv", 100, 3000)])
    assert merge_constant_variants(mod) == {"f2": "f0"}
    mod.verify()
    assert _calls(mod) == [("f0", [1000]), ("f1", []), ("f0", [3000])]


def _two_sizes():
    """The same elementwise unit on two sizes: outlined, the nests differ only in trip counts."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(64, 256), dtype="float32")
        y = f.arg("y", shape=(64, 512), dtype="float32")
        f.output(ops.relu(ops.multiply(x, x, name="m1"), name="r1"),
                 ops.relu(ops.multiply(y, y, name="m2"), name="r2"))
    return bb.finish()


def test_model_with_nests_of_two_sizes_merges_them_and_matches_numpy(monkeypatch):
    merged = []

    def recording(module):
        out = merge(module)
        merged.append(out)
        return out

    merge = _compile.merge_constant_variants
    monkeypatch.setattr(_compile, "merge_constant_variants", recording)
    mod = _two_sizes()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    y = rng.standard_normal((64, 512)).astype(np.float32)
    out = mlc.compile(mod, threads=1, outline_nests="always")(x, y)
    assert merged and merged[0], "the two nests were not merged"
    np.testing.assert_allclose(out[0], np.maximum(x * x, 0), rtol=1e-6)
    np.testing.assert_allclose(out[1], np.maximum(y * y, 0), rtol=1e-6)
    monkeypatch.setattr(_compile, "merge_constant_variants", lambda module: {})
    apart = mlc.compile(mod, threads=1, outline_nests="always")(x, y)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(out, apart))
