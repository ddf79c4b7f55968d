"""Converters of the size arithmetic ``torch.export`` leaves in a graph with dynamic shapes:
``aten.sym_size.int`` (a dim of a tensor) and Python ``operator`` arithmetic on sizes
(``mul``, ``add``, ``sub``, ``floordiv``), and ``aten.arange`` over a symbolic length. Sizes are :class:`~mlc_mlir.ir.symbolic.SymDim`
values (or ints), consumed by shape arguments of other converters (``aten.view``'s sizes), so
``x.view(b * s, 16)`` reshapes to ``(b*s, 16)`` symbolically, and ``arange(0, seq)`` (the
positions of a prompt) is a tensor of length ``seq``. Source: torch.export's SymInt nodes; TVM
Relax's ``PrimValue`` shape arithmetic.
"""

from __future__ import annotations

import operator

from .. import ops
from ..builder import Tensor
from ..errors import BuildError
from ..ir.symbolic import SymDim
from .torch_converters import out_dtype, register_converter


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


@register_converter("aten.arange.start_step", "aten.arange.start", "aten.arange.default", dtypes="int")
def _arange(ctx, node, args):
    """``arange([start,] end[, step])`` whose bounds may be sizes (:func:`~mlc_mlir.ops.arange`);
    an arange of constants is folded at import instead (see ``from_exported_program``)."""
    op = str(node.target)
    bounds = [_size(op, v) for v in args[:3]]
    start, end, step = ([0] + bounds + [1])[:3] if op == "aten.arange.default" else (bounds + [1])[:3]
    return ops.arange(start, end, step, dtype=out_dtype(node) or "int64")
