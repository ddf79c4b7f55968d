"""What the conv rewrites of the layout stage read from a convolution: its shapes and element
dtype (:func:`conv_signature`, the arguments of a :data:`ConvSelect` callback), its window and
name (:func:`conv_window`) and the algorithm a tuning record chose for it
(:func:`chosen_algorithm`); and :class:`ConvRewrite`, the pass that applies a rewrite to the
convolutions they select.
"""

from __future__ import annotations

from typing import Callable, List, NamedTuple, Optional, Tuple

from ..._mlir import ir
from ...graph.linalg_attrs import int_list, tensor_shape
from ...ir import dtypes
from ...graph.pass_manager import ScopedPass
from ...graph.use_def import named_ops
from ...ir.module import CONV_ALGORITHM_ATTR, OP_NAME_ATTR, Module


#: ``select(x_shape, w_shape, out_shape, dtype) -> bool``: which convolutions a conv rewrite
#: (:class:`~.conv_nhwc.ConvToNHWC`, :class:`~.conv_im2col.ConvToIm2col`) takes, from :func:`conv_signature`.
ConvSelect = Callable[[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...], str], bool]


def conv_signature(op) -> Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...], str]:
    """``(input shape, filter shape, output shape, element dtype name)`` of a
    ``linalg.conv_2d_*`` op (operands 0, 1 and its init): what the conv rewrites' ``select``
    callbacks are given."""
    dtype = dtypes.from_ir_type(ir.RankedTensorType(op.operands[0].type).element_type)
    return tensor_shape(op.operands[0]), tensor_shape(op.operands[1]), tensor_shape(op.operands[2]), dtype


class ConvWindow(NamedTuple):
    """The window of a ``linalg.conv_2d_*`` op and what its rewrite names its ops after:
    ``strides`` and ``dilations`` (``[sh, sw]``, ``[dh, dw]``: its ``strides`` and
    ``dilations`` attributes), the element ``dtype`` name of its input and its ``name`` (the
    ``mlc.name`` attribute, the prefix of the names of the ops a rewrite emits for it)."""

    strides: List[int]
    dilations: List[int]
    dtype: str
    name: str


def conv_window(op) -> ConvWindow:
    """The :class:`ConvWindow` of a named ``linalg.conv_2d_*`` op (one the graph builder or a
    conv rewrite made: with ``strides``, ``dilations`` and ``mlc.name`` attributes)."""
    dtype = dtypes.from_ir_type(ir.RankedTensorType(op.operands[0].type).element_type)
    return ConvWindow(int_list(op.attributes["strides"]), int_list(op.attributes["dilations"]), dtype,
                      ir.StringAttr(op.attributes[OP_NAME_ATTR]).value)


def chosen_algorithm(op) -> Optional[int]:
    """The :data:`~mlc_mlir.ir.module.CONV_ALGORITHM_ATTR` of a convolution op, or None."""
    if CONV_ALGORITHM_ATTR not in op.attributes:
        return None
    return ir.IntegerAttr(op.attributes[CONV_ALGORITHM_ATTR]).value


class ConvRewrite(ScopedPass):
    """A conv rewrite of the layout stage: each ``op_name`` op (a ``linalg.conv_2d_*`` named
    op) in the functions the pass is scoped to that :meth:`takes` is rewritten by
    :meth:`rewrite`. Subclasses set ``name``, ``op_name``, ``algorithm`` and :meth:`rewrite`.

    Parameters
    ----------
    select : ConvSelect, optional
        Which convolutions to rewrite, given :func:`conv_signature` (each subclass names its
        operands' layouts); default: every one. The default schedule passes a predicate of
        :mod:`mlc_mlir.schedule.rules.conv_strategy` for its target. Where ``algorithm`` is set, a
        convolution with an ``mlc.conv_algorithm`` attribute (a tuned choice,
        :func:`chosen_algorithm`) is rewritten when the attribute is ``algorithm``, whatever
        ``select`` says.
    functions : sequence of str, optional
        As :class:`~mlc_mlir.graph.pass_manager.ScopedPass`.
    """

    op_name = ""
    algorithm: Optional[int] = None
    select: Optional[ConvSelect]

    def transform(self, mod: Module) -> Module:
        for op in named_ops(mod, self.op_name, self.functions):
            if self.takes(op):
                self.rewrite(op)
        return mod

    def takes(self, op: ir.Operation) -> bool:
        """Whether ``op`` is rewritten (the class docstring)."""
        chosen = chosen_algorithm(op) if self.algorithm is not None else None
        if chosen is not None:
            return chosen == self.algorithm
        return self.select is None or bool(self.select(*conv_signature(op)))

    def rewrite(self, op: ir.Operation) -> None:
        """Replace ``op`` (and what belongs to it) with the rewritten IR, in place."""
        raise NotImplementedError(f"{type(self).__name__}.rewrite")
