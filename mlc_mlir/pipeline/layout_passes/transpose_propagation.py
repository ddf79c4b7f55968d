"""``PropagateTransposes`` (``mlc-propagate-transposes``): move layout transposes down the graph
until they meet their inverse and cancel, so a chain of NHWC convolutions stays in NHWC.

:class:`~.conv_nhwc.ConvToNHWC` rewrites one convolution at a time: ``to_nchw(conv_nhwc(x_nhwc(x)))``.
Between two convolutions of a ResNet block that leaves ``x_nhwc(to_nchw(y))`` -- a round trip
through NCHW -- and the residual adds, pads and poolings run in NCHW between transposes
(ResNet-18: 40 transposes of up to 800 KB each, and every conv re-laid its input). This pass
applies, in program order until nothing changes:

* **cancel** -- ``transpose(transpose(x, p), q)`` with ``q`` the inverse of ``p`` is ``x`` (also
  when the outer transpose writes into a slice of a padded buffer, ``ConvToNHWC``'s pad);
* **elementwise** -- an all-parallel ``linalg.generic`` whose full-rank inputs are all
  ``transpose(x_i, p)`` runs in the layout of the ``x_i`` (broadcast inputs such as a
  per-channel bias get renumbered maps) and is followed by one ``transpose(., p)``;
* **pad** -- ``tensor.pad(transpose(x, p))`` is ``transpose(tensor.pad(x), p)`` (low/high
  permuted);
* **pooling** -- ``linalg.pooling_nchw_{max,sum}(transpose(x, NHWC->NCHW))`` becomes
  ``transpose(linalg.pooling_nhwc_{max,sum}(x))`` (a pad between them is moved first);
* **reduction** -- a ``linalg.generic`` with reduction loops reads ``transpose(x, p)`` through
  its indexing map instead (``x`` with the map composed with ``p``): no copy;
* **concat** -- ``tensor.insert_slice(transpose(x, p) into D)`` with ``D`` an otherwise unused
  ``tensor.empty`` or ``transpose(d, p)`` is ``transpose(tensor.insert_slice(x into d'), p)``
  (offsets and sizes permuted): a concatenation (``tensor.empty`` + one ``insert_slice`` per
  input) of NHWC convolutions' results runs in NHWC, each input written into its channel slice,
  and the one transpose left after it cancels with the next convolution's.

Transposes left without users are erased. Source: TVM Relay ``ConvertLayout`` (layout
propagation through layout-agnostic ops, ``layout_transform`` pairs cancelled by
``SimplifyExpr``); MLIR's ``linalg`` data-layout propagation (``BubbleUpPackOpThroughGenericOp``)
does the same for ``linalg.pack``.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from ..._mlir import ir, linalg_d, tensor_d
from ...ir import dtypes, emitters
from ...ir.module import OP_NAME_ATTR, Module
from ...graph.dce import erase_dead_pure_ops
from ...graph.emit_rewrites import copy_attrs, emit_transpose, moved_elementwise
from ...graph.linalg_attrs import (indexing_maps, int_list, is_elementwise_generic, is_projected_map, iterator_types,
                                   rename_dims, tensor_shape)
from ...graph.use_def import producer
from ...graph.pass_manager import ScopedPass, register_pass
from ...graph.rewrite import top_level_ops

_NHWC_TO_NCHW = [0, 3, 1, 2]


def _dtype(v) -> str:
    return dtypes.from_ir_type(ir.RankedTensorType(v.type).element_type)


def _perm(op) -> List[int]:
    return int_list(op.attributes["permutation"])


def _name(op, default: str) -> str:
    return ir.StringAttr(op.attributes[OP_NAME_ATTR]).value if OP_NAME_ATTR in op.attributes else default


def _transposed(v) -> Optional[ir.Operation]:
    """The ``linalg.transpose`` producing ``v``, or None."""
    p = producer(v)
    return p if p is not None and p.name == "linalg.transpose" else None


def _inverse_pair(op: ir.Operation) -> Optional[ir.Operation]:
    """The inner transpose of ``transpose(transpose(x, p), q)`` (``op`` the outer one) when
    ``q . p`` is the identity; else None."""
    inner = _transposed(op.operands[0])
    if inner is None:
        return None
    p, q = _perm(inner), _perm(op)
    return inner if len(p) == len(q) and all(p[q[k]] == k for k in range(len(q))) else None


def has_inverse_pair(mod: Module, functions: Optional[Sequence[str]] = None) -> bool:
    """Whether a top-level ``linalg.transpose`` of ``mod``'s functions (``functions`` when
    given) reads a transpose it inverts (what :class:`PropagateTransposes` cancels), found
    without copying the module."""
    with mod.context:
        return any(_inverse_pair(op) is not None for f in mod.defined_functions(functions)
                   for op in top_level_ops(f) if op.name == "linalg.transpose")


def _cancel(op: ir.Operation) -> bool:
    """transpose(transpose(x, p), q) with q . p = identity -> x."""
    inner = _inverse_pair(op)
    if inner is None:
        return False
    op.results[0].replace_all_uses_with(inner.operands[0])
    return True


def _sink_elementwise(op: ir.Operation) -> bool:
    """An all-parallel generic whose full-rank inputs are ``transpose(x_i, p)``: run it in the
    layout of the ``x_i`` and transpose its result once."""
    if not is_elementwise_generic(op):
        return False
    maps = indexing_maps(op)
    n_in = len(op.operands) - 1
    rank = len(iterator_types(op))
    ident = ir.AffineMap.get_identity(rank)
    perm = None
    for v, m in zip(list(op.operands)[:n_in], maps[:n_in]):
        if not is_projected_map(m):
            return False
        if isinstance(v.type, ir.RankedTensorType) and ir.RankedTensorType(v.type).rank == rank:
            t = _transposed(v)
            if t is None or m != ident or (perm is not None and _perm(t) != perm):
                return False
            perm = _perm(t)
    if perm is None:
        return False
    # old iteration dim k (result layout) == new dim perm[k] (source layout)
    ins, in_maps = [], []
    for v, m in zip(list(op.operands)[:n_in], maps[:n_in]):
        t = _transposed(v) if ir.RankedTensorType(v.type).rank == rank else None
        if t is not None and m == ident:
            ins.append(t.operands[0])
            in_maps.append(ident)
        else:
            ins.append(v)
            in_maps.append(rename_dims(m, perm, rank))
    name = _name(op, "elementwise")
    src_shape = tensor_shape(ins[next(i for i, m in enumerate(in_maps) if m == ident and
                                 ir.RankedTensorType(ins[i].type).rank == rank)])
    moved = moved_elementwise(op, ins, in_maps, src_shape)
    op.results[0].replace_all_uses_with(emit_transpose(moved, perm, f"{name}.layout"))
    return True


def _sink_pad(op: ir.Operation) -> bool:
    """tensor.pad(transpose(x, p)) -> transpose(tensor.pad(x), p)."""
    t = _transposed(op.operands[0])
    if t is None or len(op.operands) != 1:
        return False
    p = _perm(t)
    low, high = int_list(op.attributes["static_low"]), int_list(op.attributes["static_high"])
    if min(low + high) < 0 or ir.ShapedType.get_dynamic_size() in low + high:
        return False
    n = len(p)
    new_low, new_high = [0] * n, [0] * n
    for k in range(n):
        new_low[p[k]], new_high[p[k]] = low[k], high[k]
    x = t.operands[0]
    shape = [s + lo + hi for s, lo, hi in zip(tensor_shape(x), new_low, new_high)]
    rtype = ir.RankedTensorType.get(shape, ir.RankedTensorType(x.type).element_type)
    pad = tensor_d.PadOp(rtype, x, [], [], new_low, new_high)
    copy_attrs(op, pad.operation, ("static_low", "static_high", "operandSegmentSizes"))
    op.regions[0].blocks[0].append_to(pad.regions[0])
    op.results[0].replace_all_uses_with(emit_transpose(pad.result, p, f"{_name(op, 'pad')}.layout"))
    return True


def sink_pooling(op: ir.Operation) -> bool:
    """pooling_nchw_{max,sum}(transpose(x, NHWC->NCHW)) -> transpose(pooling_nhwc_*(x)), at the
    insertion point; returns whether ``op`` (then unused, erased by the caller's dead-code
    sweep) had that form and was rewritten."""
    kind = op.name[len("linalg.pooling_nchw_"):]
    t = _transposed(op.operands[0])
    init = op.operands[2]
    fill = init.owner
    if t is None or _perm(t) != _NHWC_TO_NCHW or isinstance(fill, ir.Block) \
            or fill.operation.name != "linalg.fill" or len(list(init.uses)) != 1:
        return False
    fill = fill.operation
    x, window = t.operands[0], op.operands[1]
    n, c, oh, ow = tensor_shape(op.results[0])
    name = _name(op, "pool")
    e = emitters.empty([n, oh, ow, c], _dtype(x), name)
    it = linalg_d.fill(fill.operands[0], outs=[e])
    emitters.set_name(it.owner, _name(fill, f"{name}.init"))
    strides, dilations = int_list(op.attributes["strides"]), int_list(op.attributes["dilations"])
    build = {"max": linalg_d.pooling_nhwc_max, "sum": linalg_d.pooling_nhwc_sum}[kind]
    pool = build(x, window, outs=[it], strides=strides, dilations=dilations)
    emitters.set_name(pool.owner, name)
    op.results[0].replace_all_uses_with(emit_transpose(pool, _NHWC_TO_NCHW, f"{name}.layout"))
    return True


def _absorb_into_reduction(op: ir.Operation) -> bool:
    """A generic with reduction loops reads ``transpose(x, p)`` as ``x`` through a composed map."""
    if "reduction" not in iterator_types(op):
        return False
    maps = indexing_maps(op)
    n_in = len(op.operands) - len(op.results)
    changed = False
    for i in range(n_in):
        t = _transposed(op.operands[i])
        if t is None:
            continue
        p, m = _perm(t), maps[i]
        # transpose(x, p)[r] = x[s] with s[p[k]] = r[k]: x is read at results reordered by p^-1
        inv = [0] * len(p)
        for k in range(len(p)):
            inv[p[k]] = k
        maps[i] = ir.AffineMap.get(m.n_dims, m.n_symbols, [m.results[inv[j]] for j in range(len(p))])
        op.operands[i] = t.operands[0]
        changed = True
    if changed:
        op.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps])
    return changed


def _permuted(values: Sequence[int], p: Sequence[int]) -> List[int]:
    """``values`` of a transpose's result dims in its source's order: ``out[p[k]] = values[k]``."""
    out = [0] * len(p)
    for k, v in enumerate(values):
        out[p[k]] = v
    return out


def _sink_insert_slice(op: ir.Operation) -> bool:
    """insert_slice(transpose(x, p) into D) -> transpose(insert_slice(x into d), p), with ``D``
    ``transpose(d, p)`` or a ``tensor.empty`` (then ``d`` a new one), either used only here."""
    if len(op.operands) != 2:          # dynamic offsets, sizes or strides
        return False
    t = _transposed(op.operands[0])
    dest = op.operands[1]
    d_op = producer(dest)
    if t is None or d_op is None or len(list(dest.uses)) != 1:
        return False
    p = _perm(t)
    if ir.RankedTensorType(dest.type).rank != len(p):      # rank-reducing insert
        return False
    if d_op.name == "tensor.empty":
        if len(d_op.operands):
            return False
        d = emitters.empty(_permuted(tensor_shape(dest), p), _dtype(dest), "tensor.empty")
    elif d_op.name == "linalg.transpose" and _perm(d_op) == p:
        d = d_op.operands[0]
    else:
        return False
    offsets, sizes, strides = (_permuted(int_list(op.attributes[a]), p)
                               for a in ("static_offsets", "static_sizes", "static_strides"))
    ins = tensor_d.InsertSliceOp(t.operands[0], d, [], [], [], offsets, sizes, strides)
    copy_attrs(op, ins.operation, ("static_offsets", "static_sizes", "static_strides",
                                    "operandSegmentSizes"))
    op.results[0].replace_all_uses_with(emit_transpose(ins.result, p, f"{_name(op, 'concat')}.layout"))
    return True


@register_pass
class PropagateTransposes(ScopedPass):
    """Sink ``linalg.transpose`` ops through elementwise ops, pads, poolings and concatenations
    until inverse pairs cancel (see the module docstring).

    Parameters
    ----------
    functions : sequence of str, optional
        As :class:`~.pass_manager.ScopedPass`.
    sink : bool
        Apply every rule (default); False: only **cancel** inverse pairs, leaving every other
        op where it is (an attention's head split and merge imported as ``transpose(transpose(x,
        [2, 0, 1, 3]), [1, 2, 0, 3])``, two copies of a tensor that end where it started).
    """

    name = "mlc-propagate-transposes"

    def __init__(self, functions: Optional[Sequence[str]] = None, sink: bool = True):
        super().__init__(None, functions)
        self.sink = sink

    def transform(self, mod: Module) -> Module:
        for f in self.scoped_functions(mod):
            for _ in range(1000):          # each round rewrites at least one op
                if not self._round(f):
                    break
            erase_dead_pure_ops(f.regions[0].blocks[0])
        return mod

    def _round(self, f) -> bool:
        changed = False
        for op in top_level_ops(f):
            if all(not any(True for _ in r.uses) for r in op.results) and op.results:
                continue                   # dead: erased at the end
            with ir.InsertionPoint(op), op.location:
                if op.name == "linalg.transpose":
                    done = _cancel(op)
                elif not self.sink:
                    done = False
                elif op.name == "linalg.generic":
                    done = _sink_elementwise(op) or _absorb_into_reduction(op)
                elif op.name == "tensor.pad":
                    done = _sink_pad(op)
                elif op.name == "tensor.insert_slice":
                    done = _sink_insert_slice(op)
                elif op.name in ("linalg.pooling_nchw_max", "linalg.pooling_nchw_sum"):
                    done = sink_pooling(op)
                else:
                    done = False
            changed = changed or done
        if changed:
            erase_dead_pure_ops(f.regions[0].blocks[0])
        return changed
