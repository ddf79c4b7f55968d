"""``FoldConstant`` (``mlc-fold-constants``): evaluate ops whose inputs are all constants at
compile time and replace them by ``dense_resource`` constants (TVM Relay ``FoldConstant``).

The constant subgraph of each function (ops fed only by tensor constants, ``tensor.empty`` and
other foldable ops) is evaluated once: with numpy when it only moves data (transposes,
reshapes, slices, pads: :mod:`~mlc_mlir.graph.constant_eval`), else outlined into one function,
compiled and run by an evaluator: the ``evaluate`` callable the pass is given, else the
default one, which :mod:`mlc_mlir.pipeline` registers when it is imported
(:func:`set_default_evaluator`: the graph layer never imports the compiler above it, so
``graph.FoldConstant()`` works as written); its results become constants. Typical use: layout
transforms of weights (``transpose(W)``) and arithmetic on constant tensors disappear from the
runtime graph. A ``linalg.fill`` alone is never folded (it would turn an init into a constant);
a reduction of a constant folds together with its init. An op's inputs are its operands and the
values its body captures from above (a scalar constant after ``canonicalize``/``cse``), so the
pass works on canonicalized input and inside primitive functions made by ``FuseOps``.

Before::

    %w = arith.constant dense_resource<w> : tensor<10x64xf32>
    %t = linalg.transpose ins(%w ...) outs(...) permutation = [1, 0]
    %y = linalg.matmul ins(%x, %t ...)

After::

    %t = arith.constant dense_resource<main_transpose> : tensor<64x10xf32>
    %y = linalg.matmul ins(%x, %t ...)
"""

from __future__ import annotations

from typing import Callable, Collection, List, Optional

from .._mlir import arith_d, func_d, ir
from ..errors import PipelineError
from ..ir.constants import line_aligned
from ..ir.module import OP_NAME_ATTR, Module
from .constant_eval import evaluate_with_numpy
from .use_def import clone_ops, has_uses, op_name, producer, used_values, users_in
from .op_kinds import FREE_OPS
from .pass_manager import Pass, register_pass


#: The evaluator of ``FoldConstant()`` without one: ``[evaluate]`` once the pipeline layer is
#: imported (it registers :func:`mlc_mlir.compile`), else empty.
_DEFAULT_EVALUATOR: List[Callable] = []


def set_default_evaluator(evaluate: Callable) -> None:
    """Make ``evaluate(module) -> executable`` the evaluator of every ``FoldConstant`` built
    without one. :mod:`mlc_mlir.pipeline` registers :func:`mlc_mlir.compile` when it is
    imported (a dependency injected upward, so the layers stay one-way).

    Raises
    ------
    PipelineError
        If ``evaluate`` is not callable.
    """
    if not callable(evaluate):
        raise PipelineError(f"set_default_evaluator: expected a callable, got {type(evaluate).__name__}")
    _DEFAULT_EVALUATOR[:] = [evaluate]


def _is_tensor_constant(op) -> bool:
    return op.name == "arith.constant" and isinstance(op.results[0].type, ir.RankedTensorType)


#: Reshapes: views of their operand once bufferized.
_RESHAPES = ("tensor.expand_shape", "tensor.collapse_shape")


def _without_boundary_reshapes(fold, block) -> set:
    """``fold`` minus the reshapes whose results leave it (repeatedly: a chain of them). A
    reshape is a view of its operand once bufferized; folding it would copy the constant into a
    new one of another shape, and a trailing unit dim (a packed ``(N1, K, NR, 1)`` weight) makes
    the LLVM translation build one constant array per element (ResNet-18's compile: 10 s ->
    40 s)."""
    keep = set(fold)
    changed = True
    while changed:
        changed = False
        for op in fold:
            if op in keep and op.name in _RESHAPES and \
                    not any(u in keep for r in op.results for u in users_in(r, block)):
                keep.discard(op)
                changed = True
    return keep


@register_pass
class FoldConstant(Pass):
    """Fold constant subgraphs by compiling and running them once (see module docstring).

    Parameters
    ----------
    evaluate : callable, optional
        ``evaluate(module) -> executable``, where ``executable["__fold"]()`` returns the numpy
        values of the outlined subgraph's results; default: the registered evaluator
        (:func:`set_default_evaluator`; :func:`mlc_mlir.compile` once ``mlc_mlir`` is imported).
    only : collection of str, optional
        Fold only ops of these names (e.g. :data:`~mlc_mlir.graph.constant_eval.NUMPY_OPS`, the
        data-movement ops numpy evaluates: ``mlc.compile`` folds weight layouts without ever
        compiling a constant subgraph such as an embedding gather with constant positions).

    Raises
    ------
    PipelineError
        When a subgraph needs compiling and there is no evaluator (neither given nor registered).
    """

    name = "mlc-fold-constants"

    def __init__(self, evaluate: Optional[Callable] = None, only: Optional[Collection[str]] = None):
        self.evaluate = evaluate
        self.only = None if only is None else frozenset(only)

    def transform(self, mod: Module) -> Module:
        for f in mod.defined_functions():
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
            if self.only is not None and op.name not in self.only:
                continue
            # operands and values the op's body captures (a scalar constant after canonicalize)
            producers = [producer(v) for v in used_values(op)]
            if any(p is None or p not in const for p in producers):
                continue
            if not op.regions or op.name.startswith(("linalg.", "tensor.")):
                const.add(op)
                if any(p in data for p in producers):
                    data.add(op)
        fold = [op for op in ops if op in data and op.name not in FREE_OPS and op.name != "linalg.fill"
                and all(isinstance(r.type, ir.RankedTensorType) for r in op.results)]
        fold_set = _without_boundary_reshapes(fold, block)
        fold = [op for op in fold if op in fold_set]
        if not fold:
            return
        # results needed outside the folded subgraph
        outputs = [r for op in fold for r in op.results
                   if any(u not in fold_set for u in users_in(r, block))]
        if not outputs:
            return
        # the folded ops and every constant op they read (inits, scalars, tensor.empty)
        needed = set(fold)
        stack = list(fold)
        while stack:
            for v in used_values(stack.pop()):
                p = producer(v)
                if p is not None and p not in needed:
                    needed.add(p)
                    stack.append(p)
        values = self._evaluate(mod, [op for op in ops if op in needed], outputs)
        with mod.context, ir.Location.unknown():
            for r, arr in zip(outputs, values):
                owner = r.owner.operation
                name = op_name(owner)
                attr = mod._keepalive.constant(line_aligned(arr), f"{f.sym_name.value}_{name}_folded")
                with ir.InsertionPoint(owner):
                    cst = arith_d.ConstantOp(r.type, attr)
                cst.operation.attributes[OP_NAME_ATTR] = ir.StringAttr.get(f"{name}.folded")
                r.replace_all_uses_with(cst.result)
            for op in reversed([o for o in ops if o in needed]):
                if not has_uses(op):
                    op.erase()

    def _evaluate(self, mod: Module, ops, outputs):
        """Values of ``outputs``: with numpy when ``ops`` are data movement only
        (:func:`~mlc_mlir.graph.constant_eval.evaluate_with_numpy`), else ``ops`` outlined into
        ``@__fold`` in a fresh module (same context), compiled and run."""
        with mod.context:
            values = evaluate_with_numpy(ops, outputs, mod._keepalive)
        if values is not None:
            return values
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
        evaluate = self.evaluate or next(iter(_DEFAULT_EVALUATOR), None)
        if evaluate is None:
            raise PipelineError("mlc-fold-constants: the constant subgraph of "
                                f"{[op_name(o) for o in ops if OP_NAME_ATTR in o.attributes]} needs "
                                "compiling and no evaluator is registered; import mlc_mlir or pass "
                                "graph.FoldConstant(mlc.compile)")
        res = evaluate(tmp.verify())["__fold"]()
        return list(res) if isinstance(res, tuple) else [res]
