"""Python rewrite patterns over MLIR's ``RewritePatternSet`` (greedy driver), with helpers that
make graph-level rewrites short: match a ``linalg.generic`` by the scalar ops in its body, find
a value's producer, check single use, and emit a new elementwise generic.

Example (the MLC course's ``EwiseFMARewriter``: ``add(multiply(a, b), c)`` -> ``fma``)::

    @graph.pattern("linalg.generic")
    def ewise_fma(op, rewriter):
        if graph.body_ops(op) != ["arith.addf"]:
            return True                                   # no match
        mul = graph.producer(op.operands[0])
        if mul is None or graph.body_ops(mul) != ["arith.mulf"] or not graph.has_one_use(mul):
            return True
        with rewriter.ip:
            fma = graph.elementwise([mul.operands[0], mul.operands[1], op.operands[1]],
                                    op.results[0].type, lambda a, b, c: math_d.fma(a, b, c),
                                    name="ewise_fma")
        rewriter.replace_op(op, [fma])

    fused = graph.RewritePatterns([ewise_fma])(mod)

Source: MLIR ``RewritePattern`` / ``applyPatternsGreedily`` (Python bindings); TVM Relax
``PyExprMutator``.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence

from .._mlir import RewritePatternSet, apply_patterns_and_fold_greedily, ir, tensor_d
from ..builder import emit
from ..ir.module import Module
from .pass_manager import Pass


class Pattern:
    """A rewrite pattern: ``fn(op, rewriter)`` on ops named ``root``; returning a truthy value
    means "no match" (MLIR's Python convention)."""

    def __init__(self, root: str, fn: Callable, benefit: int = 1):
        self.root, self.fn, self.benefit = root, fn, benefit
        self.__name__ = getattr(fn, "__name__", "pattern")

    def __call__(self, op, rewriter):
        return self.fn(op, rewriter)


def pattern(root: str, benefit: int = 1):
    """Decorator: turn ``fn(op, rewriter)`` into a :class:`Pattern` rooted at op name ``root``."""
    def deco(fn):
        return Pattern(root, fn, benefit)
    return deco


class RewritePatterns(Pass):
    """Apply patterns greedily to every function until a fixpoint (``mlc-rewrite``)."""

    name = "mlc-rewrite"

    def __init__(self, patterns: Sequence[Pattern], name: Optional[str] = None):
        self.patterns = list(patterns)
        if name:
            self.name = name

    def transform(self, mod: Module) -> Module:
        with mod.context, ir.Location.unknown():
            ps = RewritePatternSet()
            for p in self.patterns:
                ps.add(p.root, p.fn, p.benefit)
            apply_patterns_and_fold_greedily(mod.operation, ps.freeze())
        return mod


def body_ops(op) -> List[str]:
    """Names of the ops in a linalg op's body, without the terminator."""
    op = getattr(op, "operation", op)
    if not op.regions or not op.regions[0].blocks:
        return []
    return [o.operation.name for o in op.regions[0].blocks[0].operations][:-1]


def producer(value) -> Optional[ir.Operation]:
    """The op defining ``value`` (None for block arguments)."""
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def has_one_use(op) -> bool:
    """True if the op's single result has exactly one use."""
    op = getattr(op, "operation", op)
    return len(op.results) == 1 and len(list(op.results[0].uses)) == 1


def elementwise(inputs: Sequence[ir.Value], result_type, body: Callable, name: str) -> ir.Value:
    """Emit an identity-map ``linalg.generic`` over same-shaped ``inputs`` computing
    ``body(*scalars)`` into a new ``tensor.empty`` of ``result_type`` (at the current insertion
    point); the op is named ``name``."""
    rank = result_type.rank
    init = tensor_d.EmptyOp(list(result_type.shape), result_type.element_type).result
    idm = ir.AffineMap.get_identity(rank)
    return emit.generic(name, list(inputs), [idm] * len(inputs), [init], [idm], ["parallel"] * rank,
                        lambda *args: [body(*args[:len(inputs)])])[0]
