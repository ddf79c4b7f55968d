"""``FoldConstant`` (``mlc-fold-constants``): evaluate ops whose inputs are all constants at
compile time and replace them by ``dense_resource`` constants (TVM Relay ``FoldConstant``).

The constant subgraph of each function (ops fed only by tensor constants, ``tensor.empty`` and
other foldable ops) is outlined into one function, compiled for the CPU with
:func:`mlc_mlir.compile` and run once; its results become constants. Typical use: layout
transforms of weights (``transpose(W)``) and arithmetic on constant tensors disappear from the
runtime graph. A ``linalg.fill`` alone is never folded (it would turn an init into a constant).

Before::

    %w = arith.constant dense_resource<w> : tensor<10x64xf32>
    %t = linalg.transpose ins(%w ...) outs(...) permutation = [1, 0]
    %y = linalg.matmul ins(%x, %t ...)

After::

    %t = arith.constant dense_resource<main_transpose> : tensor<64x10xf32>
    %y = linalg.matmul ins(%x, %t ...)
"""

from __future__ import annotations

from .._mlir import arith_d, func_d, ir
from ..ir.constants import elements_attr
from ..ir.module import OP_NAME_ATTR, Module
from .fuse_ops import clone_ops
from .op_kinds import FREE_OPS
from .pass_manager import Pass, register_pass


def _is_tensor_constant(op) -> bool:
    return op.name == "arith.constant" and isinstance(op.results[0].type, ir.RankedTensorType)


@register_pass
class FoldConstant(Pass):
    """Fold constant subgraphs by compiling and running them once (see module docstring)."""

    name = "mlc-fold-constants"

    def transform(self, mod: Module) -> Module:
        for f in mod.func_ops():
            if not f.is_external:
                self._fold_function(mod, f)
        return mod

    def _fold_function(self, mod: Module, f) -> None:
        block = f.regions[0].blocks[0]
        ops = [o.operation for o in block.operations]
        const = set()       # ops whose results are compile-time constants
        data = set()        # ... that depend on a tensor constant (worth folding)
        for op in ops:
            if op.name in FREE_OPS:
                const.add(op)
                if _is_tensor_constant(op):
                    data.add(op)
                continue
            if op.name in ("func.return", "func.call") or op.name.startswith("mlc.") or not op.results:
                continue
            producers = [v.owner.operation for v in op.operands if not isinstance(v.owner, ir.Block)]
            if len(producers) != len(op.operands) or not all(p in const for p in producers):
                continue
            if not op.regions or op.name.startswith(("linalg.", "tensor.")):
                const.add(op)
                if any(p in data for p in producers):
                    data.add(op)
        fold = [op for op in ops if op in data and op.name not in FREE_OPS and op.name != "linalg.fill"]
        if not fold:
            return
        fold_set = set(fold)
        # results needed outside the folded subgraph
        outputs = [r for op in fold for r in op.results
                   if any(u.owner.operation not in fold_set for u in r.uses)]
        if not outputs:
            return
        values = self._evaluate(mod, [op for op in ops if op in const and (op in fold_set or op.name in FREE_OPS)],
                                outputs)
        with mod.context, ir.Location.unknown():
            for r, arr in zip(outputs, values):
                owner = r.owner.operation
                name = ir.StringAttr(owner.attributes[OP_NAME_ATTR]).value if OP_NAME_ATTR in owner.attributes \
                    else owner.name.split(".")[-1]
                mod._keepalive.append(arr)
                with ir.InsertionPoint(owner):
                    cst = arith_d.ConstantOp(r.type, elements_attr(arr, f"{f.sym_name.value}_{name}_folded"))
                cst.operation.attributes[OP_NAME_ATTR] = ir.StringAttr.get(f"{name}.folded")
                r.replace_all_uses_with(cst.result)
            for op in reversed(fold):
                if not any(True for r in op.results for _ in r.uses):
                    op.erase()
            for op in reversed([o.operation for o in block.operations]):
                if op.name in FREE_OPS and not any(True for r in op.results for _ in r.uses):
                    op.erase()

    def _evaluate(self, mod: Module, ops, outputs):
        """Outline ``ops`` into ``@__fold`` in a fresh module (same context), compile, run."""
        from ..pipeline.compile import compile as compile_module

        with mod.context, ir.Location.unknown():
            m = ir.Module.create()
            with ir.InsertionPoint(m.body):
                fn = func_d.FuncOp("__fold", ir.FunctionType.get([], [r.type for r in outputs]))
            entry = fn.regions[0].blocks.append()
            mapping = {}
            with ir.InsertionPoint(entry):
                clone_ops(ops, mapping)
                func_d.ReturnOp([mapping[r] for r in outputs])
        tmp = Module(m, mod.context)
        tmp._keepalive = mod._keepalive
        res = compile_module(tmp.verify())["__fold"]()
        return list(res) if isinstance(res, tuple) else [res]
