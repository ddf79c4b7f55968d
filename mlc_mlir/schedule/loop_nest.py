"""The loop-nest model of a Schedule: the interface between primitives and emission.

Loops of a linalg op exist only after tiling, so a Schedule keeps, for every scheduled op
(block), its iteration dims (from the op's indexing maps and operand shapes) and an ordered list
of :class:`Loop` s. Primitives (:mod:`mlc_mlir.schedule.schedule`) edit the model; emission
(:mod:`mlc_mlir.schedule.transform_script`) and ``Schedule.show`` read it only through the
public attributes and queries of :class:`LoopNestModel` (TVM: ``sch.get(loop)``, ``StmtSRef``).
The model also decides which loops *materialize* as ``scf.for``/``scf.forall`` (a tiling op
each) and which stay inside the op (vectorized loops, trailing unit-step loops in dim order,
extent-1 loops): :meth:`LoopNestModel.materialized`, read by emission and ``show`` alike."""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, Iterator, List, Optional, Tuple

from .._mlir import PassManager, ir
from ..errors import ScheduleError
from ..ir import dtypes
from ..ir.module import OP_NAME_ATTR, Module
from .buffer_reads import offsets, sources
from .op_index import OpIndex
from .operand_tiles import affine_dim, map_terms
from .tileability import is_identity_copy, tiling_blocker

#: Names given to the iteration dims of an op, in order (TVM prints i, j, k for matmul).
DIM_NAMES = "ijklmnopqrstuvwxyz"

#: Loop kinds. ``serial`` -> ``scf.for``; ``parallel`` -> ``scf.forall``; ``bound`` -> a GPU-mapped
#: ``scf.forall``; ``vectorized`` -> stays in the op, turned into vector ops.
LOOP_KINDS = ("serial", "parallel", "vectorized", "bound")

#: Block kinds: a named linalg op, the init (``linalg.fill``) of a decomposed reduction, a cache
#: (the ``tensor.pad`` of ``cache_read``/``cache_write``).
BLOCK_KINDS = ("compute", "init", "cache")


@dataclasses.dataclass(frozen=True)
class Dim:
    """One iteration dim of a linalg op.

    Attributes
    ----------
    index : int
        Position in the op's iteration space.
    extent : int or None
        Static trip count; None for a dynamic one (a symbolic size, ``tensor<?x...>``).
    kind : str
        ``"parallel"`` or ``"reduction"`` (the op's iterator type).
    """

    index: int
    extent: Optional[int]
    kind: str

    @property
    def name(self) -> str:
        """Printable dim name: ``i, j, k, ...`` by position."""
        return DIM_NAMES[self.index] if self.index < len(DIM_NAMES) else f"d{self.index}"


@dataclasses.dataclass(frozen=True)
class OpInfo:
    """What the payload says about a named linalg op (read once, by :func:`analyze_module`).

    Attributes
    ----------
    func, name : str
        Enclosing function and ``mlc.name``.
    op_name : str
        The linalg op (``linalg.matmul``, ``linalg.generic``...).
    dims : tuple of Dim
        Iteration dims, in the op's order.
    operand_shapes : tuple of tuple of int
        Static shapes of the inputs then the outputs (``()`` for scalars).
    num_inputs : int
        Number of input operands.
    producers : tuple of str
        ``mlc.name`` of the named ops whose results it reads (inputs and inits).
    init : str or None
        ``mlc.name`` of the named ``linalg.fill`` initializing its output, if any.
    out_dims : tuple of int or None
        For each dim of the first output, the iteration dim indexing it.
    operand_dims : tuple of tuple of int
        For each operand, the iteration dims that index it.
    operand_terms : tuple of tuple of Terms
        For each operand and axis, its index's linear terms (:func:`.operand_tiles.map_terms`).
    dtypes : tuple of str
        Element dtype of each operand.
    tiling_blocker : str or None
        Why linalg tiling cannot slice the op (:func:`tiling_blocker`), or None.
    identity : bool
        An identity copy (:func:`~.tileability.is_identity_copy`): a cleanup erases it.
    operand_sources, operand_offsets : tuple
        Per operand, the first operand reading the same buffer and its map's results as
        ``(dim, constant)``: see :mod:`.buffer_reads`.
    gathers : bool
        Its body reads a tensor (``tensor.extract``: a gather such as ``ops.take``).
    """

    func: str
    name: str
    op_name: str
    dims: Tuple[Dim, ...]
    operand_shapes: Tuple[Tuple[int, ...], ...]
    num_inputs: int
    producers: Tuple[str, ...] = ()
    init: Optional[str] = None
    out_dims: Tuple[Optional[int], ...] = ()
    operand_dims: Tuple[Tuple[int, ...], ...] = ()
    operand_terms: Tuple[tuple, ...] = ()
    dtypes: Tuple[str, ...] = ()
    tiling_blocker: Optional[str] = None
    identity: bool = False
    operand_sources: Tuple[int, ...] = ()
    operand_offsets: Tuple[tuple, ...] = ()
    gathers: bool = False


@dataclasses.dataclass
class Loop:
    """A loop of the model: iterates ``extent`` times over part of dim ``dim``.

    Attributes
    ----------
    id : int
        Stable id within its schedule.
    dim : int
        Index of the iteration dim it belongs to.
    extent : int or None
        Trip count; None when dynamic (the outer loop of a dynamic dim). A loop of a split
        whose factors do not divide the extent has ``ceil(extent / step)`` iterations, the
        last one a partial tile.
    kind : str
        One of :data:`LOOP_KINDS`.
    thread : str or None
        The GPU axis of a ``bound`` loop (``blockIdx.x``, ``threadIdx.y``...).
    unroll : int or None
        Unroll factor (``0``: full unroll; ``None``: not unrolled).
    annotations : dict of str to (bool, int, float, str)
        ``annotate(loop, key, value)`` pairs; each becomes an attribute of the loop op.
    fused_group : int or None
        Loops fused by one ``fuse`` share this id.
    options : tuple of int or None
        The extents a sampled factor allows (its tile sizes become ``transform.tune.knob`` s);
        None for a fixed extent.
    """

    id: int
    dim: int
    extent: Optional[int]
    kind: str = "serial"
    thread: Optional[str] = None
    unroll: Optional[int] = None
    annotations: Dict[str, object] = dataclasses.field(default_factory=dict)
    fused_group: Optional[int] = None
    options: Optional[Tuple[int, ...]] = None

    @property
    def sampled(self) -> bool:
        """Whether the extent comes from a sampled factor."""
        return self.options is not None


def materializes(lp: Loop) -> bool:
    """Whether a loop becomes a loop op: extent > 1 or dynamic (a one-trip tile is folded)."""
    return lp.extent is None or lp.extent > 1


@dataclasses.dataclass(frozen=True)
class CacheRead:
    """A ``cache_read`` of input ``operand`` of a block, staged in cache block ``block_id``."""

    operand: int
    scope: str
    block_id: int


@dataclasses.dataclass(frozen=True)
class CacheWrite:
    """A ``cache_write`` of operand ``operand`` (an output) of a block, in cache block ``block_id``."""

    operand: int
    scope: str
    block_id: int


@dataclasses.dataclass(frozen=True)
class RFactor:
    """An ``rfactor``: the reduction dim split into ``outer`` and ``inner`` loops. Without
    ``split``, ``inner`` is factored (partial results indexed by it, accumulated over ``outer``:
    ``tile_reduction_using_for``); with ``split``, ``outer`` (the dim's outermost loop, a
    constant extent ``T`` dividing the dim) is factored: MLIR's ``split_reduction`` rewrites the
    op into ``T`` partial reductions over ``(T, extent / T)`` whose results are laid out
    factored index first (each partial result contiguous), and a combining op sums them."""

    outer: int
    inner: int
    split: bool = False

    @property
    def factored(self) -> int:
        """Id of the factored loop (data-parallel: it may run in parallel or be vectorized)."""
        return self.outer if self.split else self.inner


@dataclasses.dataclass
class Block:
    """A scheduled op and its loop nest.

    Attributes
    ----------
    id : int
        Stable id within its schedule.
    name : str
        ``mlc.name`` of the op (cache blocks: ``<block>.read<i>_<scope>``).
    info : OpInfo
        The payload op (a cache block has a ``tensor.pad`` info without dims).
    loops : list of Loop
        Outermost first.
    kind : str
        One of :data:`BLOCK_KINDS`.
    parent : int or None
        For init and cache blocks: the block they belong to.
    annotations : dict
        ``annotate(block, key, value)`` pairs (attributes of the op).
    compute_at, reverse_compute_at : int or None
        Id of the loop (of another block) this block is computed in.
    attach_order : int
        Order of ``reverse_compute_at`` calls (the last attached consumer is tiled).
    decomposed_at : int or None
        Id of the loop right above which the init is computed.
    cache_reads, cache_writes : list
        Caches of this block's operands.
    rfactor : RFactor or None
    padding : tuple of int or None
        ``pad_einsum`` multiples per dim (``info`` then holds the padded dims and shapes).
    """

    id: int
    name: str
    info: OpInfo
    loops: List[Loop]
    kind: str = "compute"
    parent: Optional[int] = None
    annotations: Dict[str, object] = dataclasses.field(default_factory=dict)
    compute_at: Optional[int] = None
    reverse_compute_at: Optional[int] = None
    attach_order: int = 0
    decomposed_at: Optional[int] = None
    cache_reads: List[CacheRead] = dataclasses.field(default_factory=list)
    cache_writes: List[CacheWrite] = dataclasses.field(default_factory=list)
    rfactor: Optional[RFactor] = None
    padding: Optional[Tuple[int, ...]] = None

    @property
    def func(self) -> str:
        """Enclosing function."""
        return self.info.func

    @property
    def op_name(self) -> str:
        """The payload op name."""
        return self.info.op_name

    @property
    def dims(self) -> Tuple[Dim, ...]:
        """Iteration dims."""
        return self.info.dims

    def loop_index(self, loop_id: int) -> Optional[int]:
        """Position of loop ``loop_id`` in the nest, or None if it is not (any longer) there."""
        for i, lp in enumerate(self.loops):
            if lp.id == loop_id:
                return i
        return None

    def step(self, pos: int) -> int:
        """Tile size of ``loops[pos]``'s dim at that loop: product of inner same-dim extents."""
        d = self.loops[pos].dim
        return math.prod(lp.extent for lp in self.loops[pos + 1:] if lp.dim == d)

    def partial_dims(self) -> List[int]:
        """Dims whose tiles are not all full: a dynamic extent, or loops whose extents'
        product exceeds the dim's extent (an imperfect ``split``); tiled ops there have
        dynamic shapes (``affine.min`` sizes)."""
        out = []
        for d in self.dims:
            extents = [lp.extent for lp in self.loops if lp.dim == d.index]
            static = [e for e in extents if e is not None]
            if d.extent is None:
                if math.prod(static) != 1:   # tiles of 1 along a dynamic dim are full
                    out.append(d.index)
            elif None in extents or math.prod(extents) != d.extent:
                out.append(d.index)
        return out

    def vector_sizes(self, pos: int) -> List[int]:
        """Static size of each dim of the tile inside ``loops[pos:]`` (the product of their
        extents over that dim; 1 for a dim with no loop there): the vector sizes of a masked
        vectorization.

        Raises
        ------
        ScheduleError
            If a loop inside is dynamic.
        """
        sizes = []
        for d in self.dims:
            inner = [lp.extent for lp in self.loops[pos:] if lp.dim == d.index]
            if None in inner:
                raise ScheduleError(f"vectorize: loop {d.name} of '{self.name}' has a dynamic extent "
                                    "inside the vectorized tile; split it first")
            sizes.append(math.prod(inner))
        return sizes

    def label(self, pos: int) -> str:
        """Printable loop name: the dim name, numbered when the dim was split (``j0``, ``j1``)."""
        lp = self.loops[pos]
        same = [q for q in self.loops if q.dim == lp.dim]
        if len(same) == 1:
            return self.dims[lp.dim].name
        return f"{self.dims[lp.dim].name}{same.index(lp)}"

    def group(self, pos: int) -> List[int]:
        """Positions of the loops fused with ``loops[pos]`` (itself alone if not fused)."""
        g = self.loops[pos].fused_group
        if g is None:
            return [pos]
        return [i for i, q in enumerate(self.loops) if q.fused_group == g]


@dataclasses.dataclass(frozen=True)
class Tiling:
    """One tiling op of a block's emission: the loops ``positions`` (a fused group or one loop),
    realized as one materialized loop (``kind``: ``for`` or ``forall``) of ``trip_count``."""

    positions: Tuple[int, ...]
    kind: str
    trip_counts: Tuple[int, ...]


def _elem_dtype(t) -> str:
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


def analyze_module(module: Module) -> Dict[Tuple[str, str], OpInfo]:
    """Iteration dims of every named linalg op: ``{(func, mlc.name): OpInfo}``.

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
    out: Dict[Tuple[str, str], OpInfo] = {}
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
            shapes = tuple(tuple(v.type.shape) if isinstance(v.type, ir.ShapedType) else ()
                           for v in g.operands)
            extents: List[Optional[int]] = [None] * len(its)
            found = [False] * len(its)
            for m, shp in zip(maps, shapes):
                for r, e in enumerate(m.results):
                    d = affine_dim(e)
                    if d is None:
                        continue
                    if shp[r] >= 0 and extents[d] is None:   # a dynamic size leaves it None
                        extents[d] = shp[r]
                    found[d] = found[d] or shp[r] >= 0 or shp[r] == ir.ShapedType.get_dynamic_size()
            if not all(found):
                raise ScheduleError(f"get_block: cannot determine the loop extents of '{name}' "
                                    f"({o.operation.name}) from its operand shapes")
            num_inputs = len(g.operands) - len(g.results)
            outs = list(o.operands)[num_inputs:]
            init = _name_of_producer(outs[0]) if outs and _is_named_fill(outs[0]) else None
            out[(fname, name)] = OpInfo(
                func=fname, name=name, op_name=o.operation.name,
                dims=tuple(Dim(i, e, k) for i, (e, k) in enumerate(zip(extents, its))),
                operand_shapes=shapes, num_inputs=num_inputs,
                producers=tuple(p for p in map(_name_of_producer, o.operands) if p), init=init,
                out_dims=tuple(affine_dim(e) for e in maps[num_inputs].results),
                operand_dims=tuple(tuple(d for d in map(affine_dim, m.results) if d is not None)
                                   for m in maps),
                operand_terms=tuple(map(map_terms, maps)),
                dtypes=tuple(_elem_dtype(v.type) for v in g.operands),
                tiling_blocker=tiling_blocker(maps), identity=is_identity_copy(g),
                operand_sources=sources(g.operands), operand_offsets=offsets(maps, g.operands),
                gathers=any(x.operation.name == "tensor.extract" for x in g.regions[0].blocks[0].operations))
    return out


class LoopNestModel:
    """The blocks of a schedule and the payload's named ops; read-only queries for emission.

    Attributes
    ----------
    ops : dict of (func, name) to OpInfo
        Every named linalg op of the payload.
    """

    def __init__(self, ops: Dict[Tuple[str, str], OpInfo]):
        self.ops = ops
        self._blocks: Dict[int, Block] = {}
        self.index = OpIndex(ops)   # ops by name, function and consumer

    # ------------------------------------------------------------------ blocks
    @property
    def blocks(self) -> List[Block]:
        """Blocks retrieved so far, in retrieval order."""
        return list(self._blocks.values())

    def add(self, blk: Block) -> Block:
        """Register ``blk`` (primitives only)."""
        self._blocks[blk.id] = blk
        return blk

    def block(self, block_id: int) -> Optional[Block]:
        """The block with id ``block_id``, or None."""
        return self._blocks.get(block_id)

    def find(self, func: str, name: str) -> Optional[Block]:
        """The compute or init block of op ``name`` in ``func``, or None if not retrieved."""
        for b in self._blocks.values():
            if b.kind != "cache" and b.func == func and b.name == name:
                return b
        return None

    def owner_of_loop(self, loop_id: int) -> Block:
        """The block whose nest has loop ``loop_id``.

        Raises
        ------
        ScheduleError
            If no block has it.
        """
        for b in self._blocks.values():
            if b.loop_index(loop_id) is not None:
                return b
        raise ScheduleError(f"loop-nest model: loop {loop_id} belongs to no block")

    def producers(self, blk: Block) -> List[str]:
        """Names of the named linalg ops ``blk`` reads (its init included)."""
        return [n for n in blk.info.producers if (blk.func, n) in self.ops]

    def epilogues(self, blk: Block) -> List[Block]:
        """Blocks attached to a loop of ``blk`` by ``reverse_compute_at``, in attach order."""
        return sorted((b for b in self._blocks.values() if b.reverse_compute_at is not None
                       and b.kind != "cache" and blk.loop_index(b.reverse_compute_at) is not None),
                      key=lambda b: b.attach_order)

    def attached(self, blk: Block) -> List[Block]:
        """Compute blocks attached to a loop of ``blk`` by ``compute_at``."""
        return [b for b in self._blocks.values() if b.kind == "compute" and b.compute_at is not None
                and blk.loop_index(b.compute_at) is not None]

    def init_of(self, blk: Block) -> Optional[Block]:
        """The init block of a decomposed ``blk``, or None."""
        if blk.decomposed_at is None:
            return None
        return next((b for b in self._blocks.values() if b.kind == "init" and b.parent == blk.id), None)

    def padding_of(self, blk: Block) -> Optional[Tuple[int, ...]]:
        """The ``pad_einsum`` multiples of ``blk`` when they grow at least one dim, else None
        (a padding that changes nothing emits nothing)."""
        orig = self.ops.get((blk.func, blk.name))
        if blk.padding is None or orig is None or \
                all(a.extent == b.extent for a, b in zip(orig.dims, blk.dims)):
            return None
        return blk.padding

    def cache_block(self, block_id: int) -> Block:
        """The cache block with id ``block_id``."""
        return self._blocks[block_id]

    def pinned_loops(self) -> set:
        """Ids of loops other blocks are attached to (they must materialize)."""
        out = set()
        for b in self._blocks.values():
            out.update(x for x in (b.compute_at, b.reverse_compute_at) if x is not None)
        return out

    def primary_blocks(self) -> List[Block]:
        """Compute blocks that own their loop nest (not computed at another block's loop)."""
        return [b for b in self._blocks.values() if b.kind == "compute" and b.compute_at is None
                and b.reverse_compute_at is None]

    # ------------------------------------------------------------------ materialization
    def inner_start(self, blk: Block, start: int = 0) -> int:
        """Index where the loops left inside the op begin: the first vectorized loop, else the
        trailing unit-step serial loops that are already in dim order (``convert-linalg-to-loops``
        emits them later)."""
        n = len(blk.loops)
        for p in range(start, n):
            if blk.loops[p].kind == "vectorized":
                return p
        pinned = self.pinned_loops()
        s, last_dim = n, None
        for p in range(n - 1, start - 1, -1):
            lp = blk.loops[p]
            plain = (lp.kind == "serial" and lp.unroll is None and not lp.annotations
                     and lp.fused_group is None and lp.id not in pinned and blk.step(p) == 1
                     and not (blk.rfactor and lp.id in (blk.rfactor.outer, blk.rfactor.inner)))
            if not plain or (last_dim is not None and lp.dim >= last_dim):
                break
            s, last_dim = p, lp.dim
        return s

    def bound_group(self, blk: Block, p: int, stop: int) -> List[int]:
        """Consecutive loops bound to the same kind of GPU axis (blocks or threads) over distinct
        dims: one multi-dim ``scf.forall`` (the grid or the thread block)."""
        kind = blk.loops[p].thread.split(".")[0]
        group, dims = [p], {blk.loops[p].dim}
        q = p + 1
        while q < stop and blk.loops[q].kind == "bound" and blk.loops[q].thread.split(".")[0] == kind \
                and blk.loops[q].dim not in dims:
            group.append(q)
            dims.add(blk.loops[q].dim)
            q += 1
        return group

    def tilings(self, blk: Block, start: int = 0, stop: Optional[int] = None) -> Iterator[Tiling]:
        """The tiling ops of ``blk``'s loops ``[start, stop)`` (default: up to :meth:`inner_start`):
        one per materialized loop. Extent-1 loops produce no loop (upstream folds a one-trip
        tile), and are dropped from fused groups."""
        stop = self.inner_start(blk, start) if stop is None else stop
        p = start
        while p < stop:
            lp = blk.loops[p]
            group = self.bound_group(blk, p, stop) if lp.kind == "bound" else blk.group(p)
            real = tuple(q for q in group if materializes(blk.loops[q]))
            if real:
                kind = "forall" if lp.kind in ("parallel", "bound") else "for"
                yield Tiling(real, kind, tuple(blk.loops[q].extent for q in real))
            p = group[-1] + 1

    def materialized_loop_ids(self, blk: Block) -> set:
        """Ids of the loops of ``blk`` that become ``scf.for``/``scf.forall`` ops."""
        out = set()
        consumers = self.epilogues(blk)
        if consumers:
            pos = blk.loop_index(consumers[0].reverse_compute_at)
            for t in self.tilings(blk, 0, pos + 1):
                out.update(blk.loops[q].id for q in t.positions)
            start = pos + 1
        else:
            start = 0
        for t in self.tilings(blk, start):
            out.update(blk.loops[q].id for q in t.positions)
        return out

    def cache_position(self, blk: Block, operand: int) -> int:
        """Where a cache of ``operand`` packs: right inside the innermost materialized loop
        over a parallel dim that indexes the operand (its innermost tile, e.g. a 32-wide panel of
        B in a matmul); -1 when no such loop is materialized (the whole op's operand)."""
        dims = set(blk.info.operand_dims[operand])
        best = -1
        for p in range(self.inner_start(blk, 0)):
            lp = blk.loops[p]
            if lp.dim in dims and blk.dims[lp.dim].kind == "parallel" and materializes(lp):
                best = p
        return best
