"""The per-op loop-nest model of a Schedule.

Loops of a linalg op exist only after tiling, so a Schedule keeps, for every scheduled op
(block), its iteration dims (from the op's indexing maps and operand shapes) and an ordered list
of loops ``(dim, extent, marks)``. ``split`` and ``reorder`` edit this list; emission
(:mod:`mlc_mlir.schedule.emit`) turns it into one tiling op per loop.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional, Tuple

from .._mlir import PassManager, ir
from ..errors import ScheduleError
from ..ir.module import OP_NAME_ATTR, Module

#: Names given to the iteration dims of an op, in order (TVM prints i, j, k for matmul).
DIM_NAMES = "ijklmnopqrstuvwxyz"


@dataclasses.dataclass
class Dim:
    """One iteration dim of a linalg op: index, static extent, ``parallel``/``reduction``."""

    index: int
    extent: int
    kind: str

    @property
    def name(self) -> str:
        """Printable dim name: ``i, j, k, ...`` by position."""
        return DIM_NAMES[self.index] if self.index < len(DIM_NAMES) else f"d{self.index}"


@dataclasses.dataclass
class Loop:
    """A loop of the model: iterates ``extent`` times over part of ``dim``.

    Attributes
    ----------
    id : int
        Stable id (the LoopRV's key).
    dim : int
        Index of the iteration dim it belongs to.
    extent : int
        Trip count.
    kind : str
        ``"serial"``, ``"parallel"``, ``"vectorized"`` or ``"bound"`` (GPU ``bind``).
    thread : str or None
        The GPU axis for ``bind`` (``blockIdx.x``, ``threadIdx.y``...).
    unroll : int or None
        Unroll factor (``0`` means full unroll).
    annotations : dict
        ``annotate(loop, key, value)`` pairs.
    """

    id: int
    dim: int
    extent: int
    kind: str = "serial"
    thread: Optional[str] = None
    unroll: Optional[int] = None
    annotations: Dict[str, object] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Block:
    """A scheduled op: its ``mlc.name``, function, linalg op name, dims and loop nest."""

    id: int
    name: str
    func: str
    op_name: str
    dims: List[Dim]
    loops: List[Loop]
    operand_shapes: List[Tuple[int, ...]]
    num_inputs: int
    annotations: Dict[str, object] = dataclasses.field(default_factory=dict)
    compute_at: Optional[int] = None        # loop id of another block this block is fused into
    reverse_compute_at: Optional[int] = None
    decomposed_at: Optional[int] = None     # loop id where the init (fill) is computed
    cache_reads: List[Tuple[int, str, Optional[int]]] = dataclasses.field(default_factory=list)
    cache_writes: List[Tuple[int, str]] = dataclasses.field(default_factory=list)
    rfactor: Optional[Tuple[int, int]] = None  # (loop id, factor)
    kind: str = "compute"                    # "compute" | "init" | "cache"
    parent: Optional[int] = None             # for init/cache blocks: the block they belong to

    def loop_index(self, loop_id: int) -> int:
        """Position of loop ``loop_id`` in the nest (KeyError if it no longer exists)."""
        for i, lp in enumerate(self.loops):
            if lp.id == loop_id:
                return i
        raise KeyError(loop_id)

    def step(self, pos: int) -> int:
        """Tile size of ``loops[pos]``'s dim at that loop: product of inner same-dim extents."""
        d = self.loops[pos].dim
        return math.prod(lp.extent for lp in self.loops[pos + 1:] if lp.dim == d)

    def describe(self) -> str:
        """Loop nest as indented text (``for i0 in range(32):``), innermost the op name."""
        lines, depth = [], 0
        counts: Dict[int, int] = {}
        for lp in self.loops:
            if lp.id == self.decomposed_at:
                lines.append("  " * depth + f"linalg.fill \"{self.name}.init\" (decomposed init)")
            n = counts.get(lp.dim, 0)
            counts[lp.dim] = n + 1
            tag = {"serial": "for", "parallel": "for (parallel)", "vectorized": "for (vectorized)",
                   "bound": f"for (bind {lp.thread})"}[lp.kind]
            if lp.unroll is not None:
                tag += f" (unroll {lp.unroll or 'full'})"
            lines.append("  " * depth + f"{tag} {self.dims[lp.dim].name}{n} in range({lp.extent}):")
            depth += 1
        lines.append("  " * depth + f"{self.op_name} \"{self.name}\"")
        return "\n".join(lines)


def _affine_dim(expr) -> Optional[int]:
    if isinstance(expr, ir.AffineDimExpr):
        return expr.position
    return None


def _elem_dtype(t) -> str:
    from ..ir import dtypes
    return dtypes.from_ir_type(t.element_type if isinstance(t, ir.ShapedType) else t)


def _name_of_producer(v) -> Optional[str]:
    owner = v.owner
    if isinstance(owner, ir.Block) or not hasattr(owner, "attributes"):
        return None
    if OP_NAME_ATTR in owner.attributes:
        return ir.StringAttr(owner.attributes[OP_NAME_ATTR]).value
    return None


def _is_named_fill(v) -> bool:
    owner = v.owner
    return hasattr(owner, "name") and not isinstance(owner, ir.Block) and \
        owner.name == "linalg.fill" and OP_NAME_ATTR in owner.attributes


def analyze_module(module: Module) -> Dict[Tuple[str, str], dict]:
    """Iteration dims of every named linalg op: ``{(func, mlc.name): info}``.

    ``info`` has ``op_name``, ``dims`` (list of Dim), ``operand_shapes`` and ``num_inputs``.
    Named ops are generalized on a copy (``linalg-generalize-named-ops``) to read their indexing
    maps; linalg ops are matched by position, which generalization preserves.

    Raises
    ------
    ScheduleError
        If a named op has a dynamic shape or a dim that no operand dimension determines.
    """
    gen = module.clone()
    with gen.context:
        PassManager.parse("builtin.module(func.func(linalg-generalize-named-ops))").run(gen.operation)
    out = {}
    for f_orig, f_gen in zip(module.func_ops(), gen.func_ops()):
        if f_orig.is_external:
            continue
        fname = f_orig.sym_name.value
        # linalg ops only: generalization maps each to one linalg.generic, in order (the greedy
        # driver may move other ops, e.g. hoist constants)
        orig_ops = [o for o in f_orig.regions[0].blocks[0].operations
                    if o.operation.name.startswith("linalg.")]
        gen_ops = [o for o in f_gen.regions[0].blocks[0].operations
                   if o.operation.name.startswith("linalg.")]
        for o, g in zip(orig_ops, gen_ops):
            if OP_NAME_ATTR not in o.attributes or g.operation.name != "linalg.generic":
                continue
            name = ir.StringAttr(o.attributes[OP_NAME_ATTR]).value
            maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(g.attributes["indexing_maps"])]
            its = [str(a).split("<")[-1].rstrip(">") for a in ir.ArrayAttr(g.attributes["iterator_types"])]
            shapes = []
            for v in g.operands:
                t = v.type
                shapes.append(tuple(t.shape) if isinstance(t, ir.ShapedType) else ())
            extents: List[Optional[int]] = [None] * len(its)
            for m, shp in zip(maps, shapes):
                for r, e in enumerate(m.results):
                    d = _affine_dim(e)
                    if d is not None and extents[d] is None:
                        extents[d] = shp[r]
            if any(e is None or e < 0 for e in extents):
                raise ScheduleError(f"get_block: cannot determine the loop extents of '{name}' "
                                    f"({o.operation.name}) from its operand shapes")
            num_inputs = len(g.operands) - len(g.results)
            producers = [_name_of_producer(v) for v in o.operands]
            init = None
            outs = list(o.operands)[num_inputs:]
            if outs and _is_named_fill(outs[0]):
                init = _name_of_producer(outs[0])
            out[(fname, name)] = dict(op_name=o.operation.name,
                                      dims=[Dim(i, e, k) for i, (e, k) in enumerate(zip(extents, its))],
                                      operand_shapes=shapes, num_inputs=num_inputs,
                                      producers=[p for p in producers if p], init=init,
                                      out_dims=[_affine_dim(e) for e in maps[num_inputs].results],
                                      operand_dims=[[d for d in (_affine_dim(e) for e in m.results)
                                                     if d is not None] for m in maps],
                                      dtypes=[_elem_dtype(v.type) for v in g.operands])
    return out
