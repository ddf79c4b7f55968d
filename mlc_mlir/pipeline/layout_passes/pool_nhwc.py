"""``PoolToNHWC`` (``mlc-pool-to-nhwc``): rewrite chosen ``linalg.pooling_nchw_{max,sum}`` ops
into ``linalg.pooling_nhwc_{max,sum}`` between layout transposes.

Before (``%xp`` the padded NCHW input)::

    %y = linalg.pooling_nchw_max {mlc.name = "max_pool2d", strides = dense<2>}
           ins(%xp, %window) outs(%init : tensor<1x24x56x56xf32>)

After::

    %xt = <fill of the padded NHWC input, x transposed into its interior>   // max_pool2d.x_nhwc
    %yt = linalg.pooling_nhwc_max {mlc.name = "max_pool2d"} ins(%xt, %window) outs(%init2)
    %y = linalg.transpose {mlc.name = "max_pool2d.layout"} ins(%yt) permutation = [0, 3, 1, 2]

(the input pad as in :func:`~.conv_nhwc.padded_nhwc`: one pass instead of the pad's strided
copy, then the pooling rewrite of ``graph.PropagateTransposes``, :func:`~.transpose_propagation.sink_pooling`,
applied to a transpose pair inserted before the pooling). Why: the NCHW pooling rule vectorizes
along the output row, which a strided window turns into gathers, so it leaves strided pools as
scalar loops (ShuffleNet's 3x3 stride-2 max pool over 24 x 112 x 112: 1.1 ms); in NHWC the
channels are contiguous whatever the stride (:func:`~mlc_mlir.schedule.rules.pooling.schedule_pooling_nhwc`).
Source: TVM ``ConvertLayout`` for pooling; oneDNN's ``nhwc`` pooling kernels.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from ..._mlir import ir
from ...ir import dtypes
from ...ir.module import OP_NAME_ATTR, Module
from ...graph.emit_rewrites import emit_transpose, named_fill
from ...graph.linalg_attrs import tensor_shape
from ...graph.use_def import named_ops
from ...graph.pass_manager import ScopedPass, register_pass
from .conv_nhwc import padded_nhwc
from .transpose_propagation import sink_pooling

#: ``select(x_shape, window, out_shape, dtype) -> bool``: which poolings :class:`PoolToNHWC` takes.
PoolSelect = Callable[[Sequence[int], Sequence[int], Sequence[int], str], bool]


@register_pass
class PoolToNHWC(ScopedPass):
    """Rewrite ``linalg.pooling_nchw_{max,sum}`` ops whose init is a single-use ``linalg.fill``
    into NHWC poolings between transposes (see the module docstring).

    Parameters
    ----------
    select : PoolSelect, optional
        Which poolings to rewrite, given the padded input ``(N, C, H, W)``, the window
        ``(KH, KW)``, the output ``(N, C, OH, OW)`` and the element dtype; default: every one.
        The default schedule passes :func:`mlc_mlir.schedule.rules.pooling.prefers_pool_nhwc`.
    functions : sequence of str, optional
        As :class:`~.pass_manager.ScopedPass`.
    """

    name = "mlc-pool-to-nhwc"
    select: Optional[PoolSelect]

    def transform(self, mod: Module) -> Module:
        for kind in ("max", "sum"):
            for op in named_ops(mod, f"linalg.pooling_nchw_{kind}", self.functions):
                x, fill = op.operands[0], named_fill(op.operands[2])
                if fill is None:
                    continue
                dtype = dtypes.from_ir_type(ir.RankedTensorType(x.type).element_type)
                if self.select is not None and not self.select(tensor_shape(x), tensor_shape(op.operands[1]),
                                                               tensor_shape(op.results[0]), dtype):
                    continue
                with ir.InsertionPoint(op), op.location:
                    t, pad = padded_nhwc(x, _name(op), dtype)
                    back = emit_transpose(t, [0, 3, 1, 2], f"{_name(op)}.x_nchw")
                    op.operands[0] = back
                    sink_pooling(op)
                op.erase()
                back.owner.erase()
                fill.erase()
                if pad is not None:
                    pad.erase()
        return mod


def _name(op) -> str:
    return ir.StringAttr(op.attributes[OP_NAME_ATTR]).value if OP_NAME_ATTR in op.attributes else "pool"
