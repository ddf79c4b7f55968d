"""Destination-passing style for slices, so producers and copies write into the padded buffers
that read them instead of going through a strided ``memref.copy``: One-Shot Bufferize lowers
such a copy to the runtime's element-by-element ``memrefCopy``.

``PadToInsertSlice`` (``mlc-pad-to-insert-slice``): a ``tensor.pad`` with a constant pad value
becomes a ``linalg.fill`` of the padded shape and a ``tensor.insert_slice`` of the source into
its interior.

Before::

    %p = tensor.pad %y low[0, 1, 1, 0] high[0, 1, 1, 0] {
    ^bb0(%i: index, %j: index, %k: index, %l: index):
      tensor.yield %ninf : f32
    } : tensor<1x112x112x64xf32> to tensor<1x114x114x64xf32>

After::

    %e = tensor.empty() : tensor<1x114x114x64xf32>
    %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<1x114x114x64xf32>) -> tensor<1x114x114x64xf32>
    %p = tensor.insert_slice %y into %f[0, 1, 1, 0] [1, 112, 112, 64] [1, 1, 1, 1]

One-Shot Bufferize turns a ``tensor.pad`` into a new buffer, a fill and a ``memref.copy`` of the
source into a strided subview (``memrefCopy``: 5.7 ms of the 15 ms ResNet-18 stem task for its
1x112x112x64 max-pool pad, on a 2-core AVX2 EPYC, one thread). In destination-passing form,
``eliminate-empty-tensors`` lets the producer of ``%y`` (the conv tile loop with its fused batch
norm and relu) write straight into the interior of the padded buffer. Only pads at the top
level of a function body are rewritten (after scheduling, the pads inside tile loops belong to
their schedules); pads whose body computes the value from the indices are left alone.

``CopyIntoSlices`` (``mlc-copy-into-slices``): a top-level ``tensor.insert_slice`` of a function
argument (no producer can write in place: the padded input of a fused conv task) becomes an
identity ``linalg.generic`` whose destination is the ``tensor.extract_slice`` of the same
region, inserted back: the insert bufferizes to nothing and the generic to plain loops, whose
contiguous inner loop LLVM vectorizes. It runs in the prepare stage, after scheduling (in the
layout rewrites, the conv rules' transform scripts lost track of the conv's rewritten input). ResNet-18's im2col task of a 1x14x14x256 input (padded,
then 49 x 2304 patches) took 0.24 ms with the strided copy and 0.04 ms with it (same EPYC,
one thread).

``FillPadBorder`` (``mlc-fill-pad-border``): a ``tensor.insert_slice`` into a ``linalg.fill``
of a ``tensor.empty`` (the padded buffers of the two rewrites above and of ``layout_passes.ConvToNHWC``)
fills only the border around the inserted region: one ``linalg.fill`` per side and padded dim,
on ``extract_slice``/``insert_slice`` slabs, instead of a memset of the whole buffer whose
interior is overwritten at once. ResNet-18 zeroed about 12 MB of padded activations per
inference that way, serially, outside the threaded loops (perf on a 2-core AMD EPYC Zen 4:
``memset`` 3.6% of the samples with 2 threads). The border fills go right before the op that
computes the inserted value, so no write to the padded buffer follows the interior's.

``ReadInsertedSlices`` (``mlc-read-inserted-slices``): when a value inserted into a slice is
also read after the insert (a residual block's output: the next convolution's padded input and
the skip connection or downsampling convolution), the later readers read the slice of the
inserted tensor instead, so the insert is the value's last use and One-Shot Bufferize lets its
producer write straight into the padded buffer (with the later reader of the value itself, the
in-place insert counted as a write before that read, and the interior was copied in and out).
It runs in the prepare stage, after the last canonicalization before bufferization (which
folds ``extract_slice(insert_slice)`` back to the value).

Before::

    %y = scf.forall ... -> tensor<1x28x28x128xf32>      // a residual block's output
    %p = tensor.insert_slice %y into %b[0, 1, 1, 0] [1, 28, 28, 128] [1, 1, 1, 1]
    ... reads of %p (the next convolution) ...
    ... reads of %y (the downsampling convolution) ...

After::

    %p = tensor.insert_slice %y into %b[0, 1, 1, 0] [1, 28, 28, 128] [1, 1, 1, 1]
    %y2 = tensor.extract_slice %p[0, 1, 1, 0] [1, 28, 28, 128] [1, 1, 1, 1]
    ... reads of %p ...
    ... reads of %y2 ...

Source: IREE ``TensorPadToInsertSlice`` (``linalg.fill`` + ``tensor.insert_slice``); MLIR
``transform.structured.rewrite_in_destination_passing_style`` and ``eliminate-empty-tensors``.
"""

from __future__ import annotations

from typing import Callable, List, Optional

from ..._mlir import arith_d, ir, linalg_d, tensor_d
from ...ir import emitters
from ...ir.module import OP_NAME_ATTR, Module
from ...graph.emit_rewrites import constant_pad_value, has_constant_pad_value
from ...graph.linalg_attrs import int_list, static_slice
from ...graph.use_def import producer
from ...graph.pass_manager import Pass, register_pass
from ...graph.rewrite import top_level_ops


class _TopLevelRewrite(Pass):
    """A pass that calls ``rewrite(op)`` for each op of ``find(func)`` in every function with a
    body; subclasses set ``name``, ``find`` and ``rewrite``. Shapes and dtypes are unchanged.

    Raises
    ------
    IRError
        If the result does not verify (a bug of the pass).
    """

    find: Callable[..., List[ir.Operation]]
    rewrite: Callable[[ir.Operation], None]

    def transform(self, mod: Module) -> Module:
        for f in mod.defined_functions():
            for op in self.find(f):
                self.rewrite(op)
        return mod


def _static_pads(func) -> List[ir.Operation]:
    """The top-level ``tensor.pad`` ops of ``func`` with static low/high amounts, a static
    result type and a constant pad value."""
    return [op for op in top_level_ops(func)
            if op.name == "tensor.pad" and len(op.operands) == 1   # dynamic amounts are operands
            and ir.RankedTensorType(op.results[0].type).has_static_shape and has_constant_pad_value(op)]


def _rewrite(pad: ir.Operation) -> None:
    """Replace ``pad`` by fill + insert_slice right before it (see the module docstring)."""
    src = pad.operands[0]
    low = int_list(pad.attributes["static_low"])
    t = ir.RankedTensorType(pad.results[0].type)
    src_shape = list(ir.RankedTensorType(src.type).shape)
    name = ir.StringAttr(pad.attributes[OP_NAME_ATTR]).value if OP_NAME_ATTR in pad.attributes else "pad"
    with ir.InsertionPoint(pad), pad.location:
        value = constant_pad_value(pad)
        empty = tensor_d.EmptyOp(list(t.shape), t.element_type).result
        full = linalg_d.fill(value, outs=[empty])
        emitters.set_name(full.owner, f"{name}.fill")
        new = tensor_d.InsertSliceOp(src, full, [], [], [], low, src_shape, [1] * t.rank).result
    pad.results[0].replace_all_uses_with(new)
    pad.erase()


@register_pass
class PadToInsertSlice(_TopLevelRewrite):
    """Rewrite top-level constant ``tensor.pad`` ops as ``linalg.fill`` + ``tensor.insert_slice``
    (see the module docstring). Shapes and dtypes are unchanged; pads with dynamic amounts or an
    index-dependent value are kept.
    """

    name = "mlc-pad-to-insert-slice"
    find = staticmethod(_static_pads)
    rewrite = staticmethod(_rewrite)


def _argument_inserts(func) -> List[ir.Operation]:
    """Top-level ``tensor.insert_slice`` ops of ``func`` with static offsets, sizes and strides
    (dynamic ones have more operands), not rank-reducing, whose source is an argument of
    ``func``."""
    def from_argument(op) -> bool:
        owner = op.operands[0].owner
        return isinstance(owner, ir.Block) and owner.owner.operation == func.operation

    def whole_source(op) -> bool:
        return list(ir.RankedTensorType(op.operands[0].type).shape) == int_list(op.attributes["static_sizes"])

    return [op for op in top_level_ops(func)
            if op.name == "tensor.insert_slice" and len(op.operands) == 2 and from_argument(op)
            and whole_source(op)]


def _copy_into(ins: ir.Operation) -> None:
    """``insert_slice %arg into %d[o][s][t]`` -> ``extract_slice %d[o][s][t]``, an identity
    generic from ``%arg`` into it, and ``insert_slice`` of the copy back."""
    src, dest = ins.operands[0], ins.operands[1]
    offsets, sizes, strides = static_slice(ins)
    src_t = ir.RankedTensorType(src.type)
    rank = src_t.rank
    with ir.InsertionPoint(ins), ins.location:
        part = tensor_d.ExtractSliceOp(src_t, dest, [], [], [], offsets, sizes, strides).result
        ident = ir.AffineMap.get_identity(rank)
        (copy,) = emitters.generic("insert_slice.copy", [src], [ident], [part], [ident],
                                   ["parallel"] * rank, lambda a, _out: [a])
        new = tensor_d.InsertSliceOp(copy, dest, [], [], [], offsets, sizes, strides).result
    ins.results[0].replace_all_uses_with(new)
    ins.erase()


def _filled_empty(value) -> bool:
    """Whether ``value`` is the result of a ``linalg.fill`` of a ``tensor.empty``, used once."""
    op = producer(value)
    if op is None or op.name != "linalg.fill" or len(list(value.uses)) != 1:
        return False
    init = producer(op.operands[1])
    return init is not None and init.name == "tensor.empty"


def _padded_inserts(func) -> List[ir.Operation]:
    """Top-level static, unit-stride, not rank-reducing ``tensor.insert_slice`` ops whose
    destination is a filled ``tensor.empty`` that nothing else reads."""
    out = []
    for op in top_level_ops(func):
        if op.name != "tensor.insert_slice" or len(op.operands) != 2:
            continue
        src_t, dest_t = (ir.RankedTensorType(v.type) for v in op.operands)
        if (src_t.rank == dest_t.rank and dest_t.has_static_shape
                and set(int_list(op.attributes["static_strides"])) <= {1}
                and _filled_empty(op.operands[1])):
            out.append(op)
    return out


def _before_source(ins: ir.Operation, movable, default: ir.Operation) -> ir.Operation:
    """The top-level op before which to fill the border of ``ins``'s destination: the op that
    computes ``ins``'s source (through reshapes), with the operand-free ops defining ``movable`` (the
    ``tensor.empty`` and the constant pad value) moved before it; ``default`` when the source is
    an argument or a value in ``movable`` is not defined by such an op. Ops only move up.

    Filling the border before the source is computed keeps every write to the padded buffer
    ahead of the writes into its interior: One-Shot Bufferize then lets the source's producer
    write the interior in place even when the source is read again later (a border fill after
    it made the padded interior a copy, in and out through the strided ``memrefCopy``)."""
    src = producer(ins.operands[0])
    while src is not None and src.name in ("tensor.collapse_shape", "tensor.expand_shape"):
        src = producer(src.operands[0])   # the op computing the reshaped value
    if src is None:
        return default
    func_op = ins.parent   # ins is a top-level op (_padded_inserts)
    first = _top_level(src, func_op)
    defs = [producer(v) for v in movable]
    if any(d is None or len(d.operands) or d.parent != func_op for d in defs):
        return default
    position = {op: i for i, op in enumerate(top_level_ops(func_op))}
    for d in defs:
        if position[d] > position[first]:   # only ever earlier: the constant may have other users
            d.move_before(first)
    return first


def _fill_border(ins: ir.Operation) -> None:
    """Fill only the slabs of the destination around the inserted region (see the module
    docstring, :func:`fill_slabs`)."""
    dest = ins.operands[1]
    fill = producer(dest)
    value, empty = fill.operands[0], fill.operands[1]
    offsets, sizes, _ = static_slice(ins)
    name = ir.StringAttr(fill.attributes[OP_NAME_ATTR]).value if OP_NAME_ATTR in fill.attributes else "pad"
    with ir.InsertionPoint(_before_source(ins, [empty, value], fill)), fill.location:
        acc = fill_slabs(empty, value, offsets, sizes, f"{name}.border")
    dest.replace_all_uses_with(acc)
    fill.erase()


def fill_slabs(dest: ir.Value, value: ir.Value, offsets: list, sizes: list, name: str) -> ir.Value:
    """``dest`` (a static-shape tensor) with ``value`` filled around the region at ``offsets``
    of ``sizes`` (ints or index values) and nothing written inside it: for each dim ``d``, the
    slabs before and after the region along ``d``, over the region's extent in the dims before
    ``d`` and the whole extent in the dims after it (``linalg.fill`` of a
    ``tensor.extract_slice``, inserted back; a slab empty by its static extent is left out).
    Inserts at the current insertion point. Source: the border fill of IREE's
    ``TensorPadToInsertSlice`` lowering (a padded buffer zeroed once, not filled and
    overwritten)."""
    dest_t = ir.RankedTensorType(dest.type)
    shape, rank = list(dest_t.shape), dest_t.rank
    acc = dest
    for d in range(rank):
        for lo, hi in ((0, offsets[d]), (_add(offsets[d], sizes[d]), shape[d])):
            if isinstance(lo, int) and isinstance(hi, int) and hi <= lo:
                continue
            off = [offsets[e] if e < d else 0 for e in range(rank)]
            size = [sizes[e] if e < d else shape[e] for e in range(rank)]
            off[d], size[d] = lo, _sub(hi, lo)
            part = emitters.extract_slice(acc, off, size)
            filled = linalg_d.fill(value, outs=[part])
            emitters.set_name(filled.owner, name)
            acc = emitters.insert_slice(filled, acc, off, size)
    return acc


def _add(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return a if b == 0 else b if a == 0 else arith_d.AddIOp(_index(a), _index(b)).result


def _sub(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    return a if b == 0 else arith_d.SubIOp(_index(a), _index(b)).result


def _index(v) -> ir.Value:
    return v if isinstance(v, ir.Value) else emitters.index_constant(v)


@register_pass
class FillPadBorder(_TopLevelRewrite):
    """Fill only the border of a padded buffer that a ``tensor.insert_slice`` writes the interior
    of (see the module docstring).
    """

    name = "mlc-fill-pad-border"
    find = staticmethod(_padded_inserts)
    rewrite = staticmethod(_fill_border)


def _top_level(op: ir.Operation, func_op: ir.Operation) -> ir.Operation:
    """The op of ``func_op``'s body that is or encloses ``op``."""
    op, func_op = op.operation, func_op.operation
    while op.parent is not None and op.parent.operation != func_op:
        op = op.parent.operation
    return op


def _groups(reshape: ir.Operation) -> List[List[int]]:
    """The reassociation groups of a ``tensor.collapse_shape``/``expand_shape``."""
    return [[int(i) for i in ir.ArrayAttr(g)] for g in ir.ArrayAttr(reshape.attributes["reassociation"])]


def _sources(ins: ir.Operation) -> list:
    """``ins``'s source and, when it is a ``tensor.collapse_shape`` of an op result, that
    result too (its readers are readers of the inserted data in another shape)."""
    src = ins.operands[0]
    col = producer(src)
    if col is not None and col.name == "tensor.collapse_shape" and producer(col.operands[0]) is not None:
        return [src, col.operands[0]]
    return [src]


def _positions(func) -> dict:
    """Top-level op of ``func`` -> its index in the body."""
    return {op: i for i, op in enumerate(top_level_ops(func))}


def _later_uses(ins: ir.Operation, func, value, position: dict) -> list:
    """The uses of ``value`` in (or nested in) the top-level ops after ``ins`` (``position``:
    :func:`_positions` of ``func``)."""
    here = position[ins]
    return [u for u in value.uses if position.get(_top_level(u.owner, func), -1) > here]


def _inserts_read_later(func) -> List[ir.Operation]:
    """Top-level static ``tensor.insert_slice`` ops whose source, the result of an op (or a
    collapse of one), is also read after the insert."""
    position = _positions(func)
    return [op for op in position
            if op.name == "tensor.insert_slice" and len(op.operands) == 2
            and producer(op.operands[0]) is not None
            and any(_later_uses(op, func, v, position) for v in _sources(op))]


def _read_inserted(ins: ir.Operation) -> None:
    """Make the uses of ``ins``'s source after ``ins`` read the slice of its result (expanded
    back for the readers of a collapsed source's operand)."""
    func = ins.parent
    position = _positions(func)
    src, *pre = _sources(ins)
    uses = [(u.owner.operation, u.operand_number) for u in _later_uses(ins, func, src, position)]
    pre_uses = [(u.owner.operation, u.operand_number)
                for u in _later_uses(ins, func, pre[0], position)] if pre else []
    offsets, sizes, strides = static_slice(ins)
    with ir.InsertionPoint.after(ins), ins.location:
        part = tensor_d.ExtractSliceOp(src.type, ins.results[0], [], [], [], offsets,
                                       sizes, strides).result
        if pre_uses:
            full = tensor_d.ExpandShapeOp(pre[0].type, part, _groups(producer(src)), [],
                                          list(ir.RankedTensorType(pre[0].type).shape)).result
    for owner, i in uses:
        owner.operands[i] = part
    for owner, i in pre_uses:
        owner.operands[i] = full


@register_pass
class ReadInsertedSlices(_TopLevelRewrite):
    """Uses of a value inserted into a slice that come after the top-level
    ``tensor.insert_slice`` read the slice of the inserted tensor instead (see the module
    docstring).
    """

    name = "mlc-read-inserted-slices"
    find = staticmethod(_inserts_read_later)
    rewrite = staticmethod(_read_inserted)


@register_pass
class CopyIntoSlices(_TopLevelRewrite):
    """Rewrite top-level ``tensor.insert_slice`` ops of function arguments as an identity
    ``linalg.generic`` into the extracted destination slice (see the module docstring).
    """

    name = "mlc-copy-into-slices"
    find = staticmethod(_argument_inserts)
    rewrite = staticmethod(_copy_into)


def _empty_init(op: ir.Operation, result: ir.Value):
    """The operand of ``op`` that is a ``tensor.empty`` of ``result``'s type (the destination a
    ``linalg.generic`` or a tile loop's ``shared_outs``/``iter_args`` writes ``result`` into;
    CSE may have merged it with other ops' equal ``tensor.empty``), or None when there is not
    exactly one."""
    found = [i for i, v in enumerate(op.operands)
             if v.type == result.type and not isinstance(v.owner, ir.Block)
             and v.owner.name == "tensor.empty"]
    return found[0] if len(found) == 1 else None


def _reshaped_inserts(func) -> List[ir.Operation]:
    """Top-level static ``tensor.insert_slice`` ops whose source is a ``tensor.collapse_shape``
    of an op result written into a ``tensor.empty`` (:func:`_empty_init`), the destination
    defined before that op. A destination built after that op from a ``tensor.empty`` and
    inserts of values computed before it (a concatenation's earlier inputs: a fire module's 1x1
    and Winograd 3x3 expands) is moved right before the op (:func:`_hoistable`; here, as the
    candidates are found)."""
    position = _positions(func)
    found = []
    for op in list(position):
        if op.name != "tensor.insert_slice" or len(op.operands) != 2:
            continue
        col = producer(op.operands[0])
        if col is None or col.name != "tensor.collapse_shape" or len(list(col.results[0].uses)) != 1:
            continue
        src = producer(col.operands[0])
        dest = producer(op.operands[1])
        if src is None or src not in position or _empty_init(src, col.operands[0]) is None:
            continue
        if dest is not None and position.get(dest, len(position)) > position[src]:
            chain = _hoistable(dest, position[src], position)
            if chain is None:
                continue
            for d in chain:
                d.move_before(src)
            position = _positions(func)   # the moved ops' indices changed
        found.append(op)
    return found


def _hoistable(op: ir.Operation, before: int, position: dict) -> Optional[List[ir.Operation]]:
    """The top-level ops to move, in order, so that ``op`` (a ``tensor.empty`` or a
    ``tensor.insert_slice`` into one, a concatenation built after the top-level op at index
    ``before``) is defined before that op: ``op`` and its operands' producers that are after
    it; None when one of them is another kind of op (its value is computed there)."""
    if op not in position or op.name not in ("tensor.empty", "tensor.insert_slice"):
        return None
    chain: List[ir.Operation] = []
    for v in op.operands:
        p = producer(v)
        if p is not None and position.get(p, len(position)) > before:
            sub = _hoistable(p, before, position)
            if sub is None:
                return None
            chain += [d for d in sub if d not in chain]
    return chain + [op]


def _write_reshaped_into(ins: ir.Operation) -> None:
    """Make the producer of ``ins``'s collapsed source write into the expanded slice of the
    destination instead of its ``tensor.empty``."""
    col = producer(ins.operands[0])
    src = producer(col.operands[0])
    k = _empty_init(src, col.operands[0])
    empty = src.operands[k].owner
    offsets, sizes, strides = static_slice(ins)
    with ir.InsertionPoint(src), ins.location:
        part = tensor_d.ExtractSliceOp(ins.operands[0].type, ins.operands[1], [], [], [], offsets,
                                       sizes, strides).result
        expanded = tensor_d.ExpandShapeOp(col.operands[0].type, part, _groups(col), [],
                                          list(ir.RankedTensorType(col.operands[0].type).shape)).result
    src.operands[k] = expanded
    if not list(empty.results[0].uses):
        empty.erase()


@register_pass
class WriteReshapedIntoSlices(_TopLevelRewrite):
    """A value collapsed (``tensor.collapse_shape``) and inserted into a slice is computed
    straight into the expanded slice of the destination: its producer's ``tensor.empty`` init
    becomes ``tensor.expand_shape(tensor.extract_slice(dest))``, so One-Shot Bufferize writes in
    place (``eliminate-empty-tensors`` does not look through reshapes; otherwise the insert
    is an element-by-element ``memrefCopy``: 0.6 ms of a 0.07 ms Winograd output transform of
    ResNet-18, whose ``(N, tH, m, tW, m, F)`` result is the next convolution's padded input).
    Source: MLIR ``eliminate-empty-tensors`` (the same rewrite without the reshape).
    """

    name = "mlc-write-reshaped-into-slices"
    find = staticmethod(_reshaped_inserts)
    rewrite = staticmethod(_write_reshaped_into)
