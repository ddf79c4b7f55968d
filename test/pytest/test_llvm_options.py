"""MLIR's printer options set through LLVM's command line (:mod:`mlc_mlir.ir.llvm_options`):
inside ``printing_assumes_verified`` an op is printed without being verified first (an op that
fails to verify keeps its custom form), outside it MLIR verifies again (the generic form)."""

from mlc_mlir._mlir import ir
from mlc_mlir.ir.llvm_options import printing_assumes_verified


def test_printing_assumes_verified_only_inside_the_block():
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = False
        module = ir.Module.create()
        i32, i64 = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64)
        with ir.InsertionPoint(module.body):
            a = ir.Operation.create("arith.constant", results=[i32],
                                    attributes={"value": ir.IntegerAttr.get(i32, 1)}).result
            b = ir.Operation.create("arith.constant", results=[i64],
                                    attributes={"value": ir.IntegerAttr.get(i64, 2)}).result
            # an i32 plus an i64: fails to verify, its custom printer still works
            op = ir.Operation.create("arith.addi", results=[i32], operands=[a, b])
        assert '= "arith.addi"(' in str(op), str(op)   # verified first: the generic form
        with printing_assumes_verified() as ok:
            assert ok
            with printing_assumes_verified():   # nested: still on after the inner block
                pass
            assert "= arith.addi %" in str(op), str(op)   # not verified: the custom form
        assert '= "arith.addi"(' in str(op), str(op)   # verified again after the block
