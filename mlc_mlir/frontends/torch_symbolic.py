"""Converters of the size arithmetic ``torch.export`` leaves in a graph with dynamic shapes:
``aten.sym_size.int`` (a dim of a tensor), ``sym_numel`` / ``sym_stride`` /
``sym_storage_offset`` (of contiguous tensors) and Python ``operator`` arithmetic on sizes
(``mul``, ``add``, ``sub``, ``floordiv``). Sizes are :class:`~mlc_mlir.ir.symbolic.SymDim`
values (or ints), consumed by shape arguments of other converters (``aten.view``'s sizes), so
``x.view(b * s, 16)`` reshapes to ``(b*s, 16)`` symbolically. Source: torch.export's SymInt
nodes; TVM Relax's ``PrimValue`` shape arithmetic.
"""

from __future__ import annotations

import operator

from ..builder import Tensor
from ..builder.linalg_emit import prod
from ..errors import BuildError
from ..ir.symbolic import SymDim
from .torch_converters import register_converter


def _size(op: str, v):
    if isinstance(v, (int, SymDim)) and not isinstance(v, bool):
        return v
    raise BuildError(f"{op}: operand is {type(v).__name__}; expected a size (int or symbolic)")


@register_converter("aten.sym_size.int")
def _sym_size(ctx, node, args):
    x, dim = args[0], args[1]
    if not isinstance(x, Tensor):
        raise BuildError(f"aten.sym_size.int: argument 'self' is {type(x).__name__}; expected a tensor")
    return x.shape[dim]


@register_converter("aten.sym_numel.default")
def _sym_numel(ctx, node, args):
    """The product of the sizes (an int or a symbolic size)."""
    x = args[0]
    if not isinstance(x, Tensor):
        raise BuildError(f"aten.sym_numel: argument 'self' is {type(x).__name__}; expected a tensor")
    return prod(x.shape)


@register_converter("aten.sym_stride.int")
def _sym_stride(ctx, node, args):
    """The contiguous stride of ``dim``: the product of the later sizes (every tensor of the
    graph is contiguous)."""
    x, dim = args[0], int(args[1])
    if not isinstance(x, Tensor):
        raise BuildError(f"aten.sym_stride.int: argument 'self' is {type(x).__name__}; expected a tensor")
    return prod(x.shape[dim % x.ndim + 1:]) if x.ndim else 1


@register_converter("aten.sym_is_contiguous.default")
def _sym_is_contiguous(ctx, node, args):
    """True: every tensor of the graph is contiguous."""
    return True


@register_converter("aten.sym_storage_offset.default")
def _sym_storage_offset(ctx, node, args):
    """0: every tensor of the graph starts at its buffer's first element."""
    return 0


_ARITH = {"mul": operator.mul, "add": operator.add, "sub": operator.sub, "floordiv": operator.floordiv}


def _arith(name):
    fn = _ARITH[name]

    def convert(ctx, node, args):
        a, b = (_size(name, v) for v in args[:2])
        if name == "floordiv" and not isinstance(b, int):
            raise BuildError(f"floordiv: the divisor {b} is symbolic; expected an int")
        return fn(a, b)
    return convert


for _name in _ARITH:
    register_converter(str(_ARITH[_name]))(_arith(_name))
