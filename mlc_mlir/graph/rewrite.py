"""Python rewrite patterns over MLIR's ``RewritePatternSet`` (greedy driver), with helpers that
make graph-level rewrites short: match a ``linalg.generic`` by the scalar ops in its body, find
a value's producer and users, check single use, and emit a new elementwise generic whose body is
written with :data:`scalar` ops. Nothing here needs the MLIR bindings imported by the user:
the driver sets the insertion point (before the matched op) and the location (the matched op's).

A pattern is ``fn(op)`` returning the replacement value(s) of ``op``'s results, or ``None`` for
"no match" (build the replacement only once every check passed). Example (the MLC course's
``EwiseFMARewriter``: ``add(multiply(a, b), c)`` -> ``fma``)::

    @graph.pattern("linalg.generic")
    def ewise_fma(op):
        if graph.body_ops(op) != ["arith.addf"]:
            return None                                   # no match
        mul = graph.producer(op.operands[0])
        if mul is None or graph.body_ops(mul) != ["arith.mulf"] or not graph.has_one_use(mul):
            return None
        return graph.elementwise([mul.operands[0], mul.operands[1], op.operands[1]],
                                 op.results[0].type, graph.scalar.fma, name="ewise_fma")

    fused = graph.RewritePatterns([ewise_fma])(mod)

Source: MLIR ``RewritePattern`` / ``applyPatternsGreedily`` (Python bindings); TVM Relax
``PyExprMutator`` / ``DFPattern`` rewriting.
"""

from __future__ import annotations

import types
from typing import Callable, List, Optional, Sequence

from .._mlir import RewritePatternSet, apply_patterns_and_fold_greedily, arith_d, ir, math_d
from ..errors import PipelineError
from ..ir.emitters import empty, generic
from ..ir import dtypes
from ..ir.module import Module
from .fuse_ops import PRIMITIVE_ATTR
from .use_def import producer, top_level
from .pass_manager import Pass

__all__ = ["Pattern", "RewritePatterns", "body_ops", "elementwise", "graph_functions", "has_one_use",
           "pattern", "producer", "scalar", "top_level_ops", "users"]


class Pattern:
    """A rewrite pattern rooted at ops named ``root`` (e.g. ``"linalg.generic"``).

    Parameters
    ----------
    root : str
        Name of the ops the pattern is tried on (e.g. ``"linalg.generic"``).
    fn : callable
        ``fn(op) -> value | sequence of values | None``: the values replacing ``op``'s results
        (one per result), or ``None`` when the pattern does not match. Ops ``fn`` creates are
        inserted before ``op`` with ``op``'s location.
    benefit : int
        Priority among patterns on the same op (MLIR ``PatternBenefit``).

    Raises
    ------
    PipelineError
        While rewriting, if ``fn`` returns the wrong number of values.
    """

    def __init__(self, root: str, fn: Callable, benefit: int = 1):
        self.root, self.fn, self.benefit = root, fn, benefit
        self.__name__ = getattr(fn, "__name__", "pattern")

    def __call__(self, op):
        return self.fn(op)

    def _apply(self, op, rewriter):
        """The MLIR callback: a truthy return means failure (no match)."""
        with rewriter.ip, op.location:
            res = self.fn(op)
        if res is None:
            return True
        values = [res] if isinstance(res, ir.Value) else list(res)
        if len(values) != len(op.results):
            raise PipelineError(f"rewrite pattern '{self.__name__}': returned {len(values)} values for "
                                f"{op.operation.name} with {len(op.results)} results")
        rewriter.replace_op(op, values)
        return False

    def __repr__(self) -> str:
        return f"<Pattern {self.__name__} on {self.root}>"


def pattern(root: str, benefit: int = 1):
    """Decorator: turn ``fn(op)`` into a :class:`Pattern` rooted at op name ``root``.

    Parameters
    ----------
    root : str
        Op name, e.g. ``"linalg.generic"``.
    benefit : int
        Priority (MLIR ``PatternBenefit``).
    """
    def deco(fn):
        return Pattern(root, fn, benefit)
    return deco


class RewritePatterns(Pass):
    """Apply patterns greedily to every function until a fixpoint (``mlc-rewrite``); upstream
    folding and dead-op removal of the greedy driver run too.

    Parameters
    ----------
    patterns : sequence of Pattern
    name : str, optional
        Pass name shown in ``Sequential`` timings and dumps.

    Raises
    ------
    PipelineError
        If an element of ``patterns`` is not a :class:`Pattern`, or a pattern returns the wrong
        number of values.
    """

    name = "mlc-rewrite"

    def __init__(self, patterns: Sequence[Pattern], name: Optional[str] = None):
        self.patterns = list(patterns)
        for p in self.patterns:
            if not isinstance(p, Pattern):
                raise PipelineError(f"RewritePatterns: {p!r} is not a Pattern; decorate it with "
                                    "@graph.pattern(root_op_name)")
        if name:
            self.name = name

    def transform(self, mod: Module) -> Module:
        with mod.context, ir.Location.unknown():
            ps = RewritePatternSet()
            for p in self.patterns:
                ps.add(p.root, p._apply, p.benefit)
            apply_patterns_and_fold_greedily(mod.operation, ps.freeze())
        return mod


# ---------------------------------------------------------------------------- matching helpers
def body_ops(op) -> List[str]:
    """Names of the ops in a linalg op's body, without the terminator (``["arith.addf"]`` for an
    elementwise add); ``[]`` for an op without a region."""
    op = getattr(op, "operation", op)
    if not op.regions or not op.regions[0].blocks:
        return []
    return [o.operation.name for o in op.regions[0].blocks[0].operations][:-1]


def has_one_use(op) -> bool:
    """True if the op's single result has exactly one use."""
    op = getattr(op, "operation", op)
    return len(op.results) == 1 and len(list(op.results[0].uses)) == 1


def users(op_or_value) -> List[ir.Operation]:
    """The ops using a value (or any result of an op), each once, in use-list order; a use
    inside a region counts as its enclosing op at the same level as the value's producer."""
    values = list(getattr(op_or_value, "operation", op_or_value).results) \
        if not isinstance(op_or_value, ir.Value) else [op_or_value]
    out: List[ir.Operation] = []
    for v in values:
        owner = v.owner
        block = owner if isinstance(owner, ir.Block) else owner.operation.block
        for u in v.uses:
            t = top_level(u.owner, block) if block is not None else u.owner.operation
            if t is not None and all(t != x for x in out):
                out.append(t)
    return out


def graph_functions(mod: Module) -> List:
    """The graph functions of ``mod``: ``func.func`` ops with a body and without
    ``mlc.primitive`` (the ones custom fusion passes walk)."""
    return [f for f in mod.func_ops() if not f.is_external and PRIMITIVE_ATTR not in f.attributes]


def top_level_ops(func) -> List[ir.Operation]:
    """The ops of a function's body, in program order (a list: safe to erase while iterating)."""
    return [o.operation for o in func.regions[0].blocks[0].operations]


# ---------------------------------------------------------------------------- building helpers
def elementwise(inputs: Sequence[ir.Value], result_type, body: Callable, name: str) -> ir.Value:
    """Emit an identity-map ``linalg.generic`` over same-shaped ``inputs`` computing
    ``body(*scalars)`` into a new ``tensor.empty`` of ``result_type`` (at the current insertion
    point, e.g. in a pattern); the op is named ``name``.

    Parameters
    ----------
    inputs : sequence of ir.Value
        Tensors of one static shape ``S``.
    result_type : ir.RankedTensorType
        ``tensor<S x T>``; e.g. ``op.results[0].type`` of the matched op.
    body : callable
        ``body(*scalar_values) -> scalar value``, written with :data:`scalar` ops.
    name : str
        The new op's ``mlc.name`` (what schedules and ``DispatchLibrary`` find it by).

    Returns
    -------
    ir.Value
        The generic's result, of ``result_type``.
    """
    rank = result_type.rank
    init = empty(list(result_type.shape), dtypes.from_ir_type(result_type.element_type), name)
    idm = ir.AffineMap.get_identity(rank)
    return generic(name, list(inputs), [idm] * len(inputs), [init], [idm], ["parallel"] * rank,
                   lambda *args: [body(*args[:len(inputs)])])[0]


#: Floating-point scalar ops for :func:`elementwise` bodies: the ``arith``/``math`` op builders
#: on ``f16``/``bf16``/``f32``/``f64`` values, by numpy name. ``graph.scalar.fma(a, b, c)`` is
#: ``math.fma`` (``a * b + c`` with one rounding); ``maximum``/``minimum`` are the
#: NaN-propagating ``arith.maximumf``/``minimumf``.
scalar = types.SimpleNamespace(
    add=arith_d.addf, subtract=arith_d.subf, multiply=arith_d.mulf, divide=arith_d.divf,
    maximum=arith_d.maximumf, minimum=arith_d.minimumf, negative=arith_d.negf,
    fma=math_d.fma, exp=math_d.exp, tanh=math_d.tanh)
