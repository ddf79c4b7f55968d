"""ONNX loss ops: ``NegativeLogLikelihoodLoss`` and ``SoftmaxCrossEntropyLoss`` (opsets 12+).

``input`` is (N, C, d1, ...) scores or log-probabilities, ``target`` (N, d1, ...) class indices,
``weight`` an optional (C,) class weight. Per element ``loss = -input[n, target, d...] *
weight[target]``; an element whose target equals ``ignore_index`` contributes 0 and is left out
of the ``mean``'s denominator (the sum of the gathered weights), as in PyTorch's ``nll_loss`` /
``cross_entropy``. ``SoftmaxCrossEntropyLoss`` applies ``log_softmax`` over axis 1 first and can
return it as a second output. Targets are read with ``gather_elements`` after ignored ones are
replaced by class 0, so an ``ignore_index`` outside [0, C) is never read.
Source: ONNX operator spec; ``onnx.reference.ops.op_negative_log_likelihood_loss``.
"""

from __future__ import annotations

from typing import List

import numpy as np

from .. import ops
from .onnx_registry import OPSETS, NodeInputs, dtype_of, register, shape_of

_REDUCTIONS = ("none", "sum", "mean")


def _nll(n: NodeInputs, logp, target, weight) -> object:
    shape, tshape = shape_of(logp), shape_of(target)
    if len(shape) < 2 or tshape != (shape[0],) + tuple(shape[2:]):
        raise n.fail(f"input shapes {shape} and target {tshape}; expected (N, C, d1, ...) and "
                     f"(N, d1, ...)")
    reduction = n.str_attr("reduction", "mean")
    if reduction not in _REDUCTIONS:
        raise n.fail(f"attribute 'reduction' is {reduction!r}; expected one of {list(_REDUCTIONS)}")
    dtype = dtype_of(logp)
    target = ops.cast(target, "int64")
    ignore = n.attr("ignore_index")
    keep = None
    if ignore is not None:
        keep = ops.where(ops.equal(target, np.int64(ignore)), np.asarray(0, np.int8),
                         np.asarray(1, np.int8))
        target = ops.where(keep, target, np.int64(0))
    picked = ops.squeeze(ops.gather_elements(logp, ops.unsqueeze(target, (1,)), axis=1), (1,))
    w = None
    if weight is not None:
        w = ops.take(ops.cast(weight, dtype) if dtype_of(weight) != dtype else weight, target)
    if keep is not None:
        w = ops.where(keep, np.ones((), dtype) if w is None else w, np.zeros((), dtype))
    loss = ops.negative(picked) if w is None else ops.multiply(ops.negative(picked), w)
    if reduction == "none":
        return loss
    total = ops.sum(loss)
    if reduction == "sum":
        return total
    return ops.divide(total, ops.sum(w)) if w is not None else \
        ops.divide(total, np.asarray(float(np.prod(tshape)), dtype))


@register("NegativeLogLikelihoodLoss", opsets=(12, OPSETS[1]))
def _nll_loss(n: NodeInputs) -> List[object]:
    return [_nll(n, n.t(0), n.t(1), n.t(2) if n.has(2) else None)]


@register("SoftmaxCrossEntropyLoss", opsets=(12, OPSETS[1]))
def _softmax_cross_entropy(n: NodeInputs) -> List[object]:
    logp = ops.log_softmax(n.t(0), axis=1)
    loss = _nll(n, logp, n.t(1), n.t(2) if n.has(2) else None)
    return [loss, logp] if len(n.node.output) > 1 and n.node.output[1] else [loss]
