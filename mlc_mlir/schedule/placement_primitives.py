"""Placement primitives (TVM ``compute_at``, ``reverse_compute_at``, ``decompose_reduction``,
``cache_read``, ``cache_write``, ``rfactor``): each validates its arguments, edits the loop-nest
model and records an instruction. Realization: :mod:`mlc_mlir.schedule.transform_script`."""

from __future__ import annotations

import dataclasses
from typing import Optional

from ..errors import ScheduleError
from .buffer_reads import buffer_reads, read_halo
from .loop_nest import Block, CacheRead, CacheWrite, Dim, Loop, OpInfo, RFactor
from .split_reduction import check_splittable
from .state import BlockRV, LoopRV, ScheduleState, as_int, as_str

CACHE_SCOPES = ("local", "global", "shared")


class PlacementPrimitives(ScheduleState):
    """Primitives that move computation between loop nests or stage it in buffers."""

    def _target_loop(self, prim: str, blk: Block, pos: int) -> int:
        """Check that ``loops[pos]`` can take an attached block; return the position of the
        innermost loop it stands for (the last loop of a fused group)."""
        lp = blk.loops[pos]
        if lp.kind == "vectorized":
            raise ScheduleError(f"{prim}: loop {blk.label(pos)} of '{blk.name}' is vectorized and "
                                "produces no loop op; expected a loop outside the vectorized tile")
        end = max(blk.group(pos))
        for p in range(end + 1):
            q = blk.loops[p]
            if q.fused_group is not None and q.kind == "serial":
                raise ScheduleError(f"{prim}: loop {blk.label(p)} of '{blk.name}' (at or above the "
                                    "target) is a serial fused loop, coalesced after tiling, which "
                                    "needs a perfect nest; expected parallel(fused) first, or no fuse")
        return end

    def compute_at(self, block: BlockRV, loop: LoopRV) -> None:
        """Compute producer ``block`` inside consumer ``loop`` (TVM ``compute_at``): the tile the
        consumer needs is computed there — ``structured.fuse_into_containing_op`` into each
        enclosing loop from the outermost down to ``loop``. For a cache block (``cache_read``),
        the packing is hoisted out of the loops inside ``loop`` (``structured.hoist_pad``); a
        ``shared`` cache of a GPU-bound block stages the union of the block's reads of the
        buffer there (the tile of its threads plus the halo of shifted reads: 130 elements of
        ``A`` for ``A[i] + A[i + 1] + A[i + 2]`` over 128 threads), copied by all threads.

        Raises
        ------
        ScheduleError
            If ``block`` is not a producer of the loop's block, already has loop transforms
            other than splits, ``rfactor`` and vectorization of its reduction dims or (with the
            consumer's dims, both written through identity maps) of the dims no loop at or above
            ``loop`` iterates, or ``loop`` is vectorized.
        """
        blk = self._block("compute_at", block)
        cblk, pos, lp = self._loop("compute_at", loop)
        pos = self._target_loop("compute_at", cblk, pos)
        lp = cblk.loops[pos]
        if blk.kind == "cache":
            if blk.parent != cblk.id:
                raise ScheduleError(f"compute_at: cache block '{blk.name}' can only be placed in "
                                    f"loops of '{self._model.block(blk.parent).name}', not of '{cblk.name}'")
            if blk.compute_at is not None:
                raise ScheduleError(f"compute_at: cache block '{blk.name}' is already placed")
            self._shape_cache_loops(blk, cblk, pos)
        else:
            if blk.kind != "compute":
                raise ScheduleError(f"compute_at: block '{blk.name}' is an init block; expected a compute block")
            self._attach_checks("compute_at", blk, cblk, producer=True, pos=pos)
        blk.compute_at = lp.id
        blk.attach_order = next(self._ids)
        self._record("compute_at", [block, loop], {}, [])

    def reverse_compute_at(self, block: BlockRV, loop: LoopRV) -> None:
        """Compute consumer ``block`` (an elementwise epilogue) inside producer ``loop`` (TVM
        ``reverse_compute_at``). Realized by tiling the consumer with the producer's loops up to
        ``loop`` and fusing the producer into those loops (``fuse_into_containing_op``), so the
        epilogue runs on each tile while it is hot.

        Raises
        ------
        ScheduleError
            If ``block`` does not consume the loop's block with an output of the same shape, a
            loop at or above ``loop`` iterates a reduction dim or is vectorized, or another
            consumer is attached to a different loop.
        """
        blk = self._block("reverse_compute_at", block)
        pblk, pos, lp = self._loop("reverse_compute_at", loop)
        pos = self._target_loop("reverse_compute_at", pblk, pos)
        lp = pblk.loops[pos]
        if blk.kind == "cache" and any(c.block_id == blk.id for c in pblk.cache_writes):
            # the write cache of the loop's own block: its copy-back runs at that loop (on a GPU,
            # the thread's output tile is allocated privately; see gpu_script)
            if blk.reverse_compute_at is not None:
                raise ScheduleError(f"reverse_compute_at: cache block '{blk.name}' is already placed")
            blk.reverse_compute_at = lp.id
            blk.attach_order = next(self._ids)
            self._record("reverse_compute_at", [block, loop], {}, [])
            return
        if blk.kind != "compute" or pblk.kind != "compute":
            raise ScheduleError("reverse_compute_at: expected compute blocks (not init or cache blocks)")
        self._attach_checks("reverse_compute_at", blk, pblk, producer=False)
        for p in range(pos + 1):
            # a reduction loop of one trip (K in one KC block) leaves every tile's sums final
            if pblk.dims[pblk.loops[p].dim].kind != "parallel" and pblk.loops[p].extent != 1:
                raise ScheduleError(f"reverse_compute_at: loop {pblk.label(p)} of "
                                    f"'{pblk.name}' (at or above the target) iterates a reduction dim")
        if pblk.compute_at is not None or pblk.reverse_compute_at is not None:
            raise ScheduleError(f"reverse_compute_at: '{pblk.name}' is itself attached to another "
                                "block's loop")
        p_shape = pblk.info.operand_shapes[pblk.info.num_inputs]
        shapes = blk.info.operand_shapes
        c_shape = shapes[blk.info.num_inputs] if len(shapes) > blk.info.num_inputs else None
        if c_shape != p_shape:
            raise ScheduleError(f"reverse_compute_at: '{blk.name}' writes shape {c_shape}; expected "
                                f"{p_shape} like '{pblk.name}' (only same-shape epilogues are supported)")
        others = {b.reverse_compute_at for b in self._model.epilogues(pblk)}
        if others and others != {lp.id}:
            raise ScheduleError(f"reverse_compute_at: other consumers of '{pblk.name}' are attached "
                                f"to another loop; expected loop {pblk.label(pos)} to be that loop")
        blk.reverse_compute_at = lp.id
        blk.attach_order = next(self._ids)
        self._record("reverse_compute_at", [block, loop], {}, [])

    def _attach_checks(self, prim: str, blk: Block, other: Block, producer: bool,
                       pos: Optional[int] = None) -> None:
        if blk is other:
            raise ScheduleError(f"{prim}: block '{blk.name}' cannot be attached to its own loop")
        if blk.func != other.func:
            raise ScheduleError(f"{prim}: blocks '{blk.name}' and '{other.name}' are in different functions")
        self._check_untouched(prim, blk)
        # a producer may have split, factorized (rfactor) and vectorized its reduction dims
        # first, and the dims no loop at or above the target iterates when it has the
        # consumer's loops (both write through identity maps): they stay inside the tile it
        # computes (a row's max, sum or exp(x - max) computed per row)
        whole = set()
        n = len(other.dims)
        if producer and pos is not None and len(blk.dims) == n and \
                tuple(blk.info.out_dims) == tuple(range(n)) == tuple(other.info.out_dims):
            whole = set(range(n)) - {other.loops[p].dim for p in range(pos + 1)}
        inner = [l_ for l_ in blk.loops if producer and
                 (blk.dims[l_.dim].kind == "reduction" or l_.dim in whole)]
        outer = [l_ for l_ in blk.loops if all(l_ is not q for q in inner)]
        if any(l_.kind != "serial" or l_.unroll is not None or l_.annotations or l_.fused_group is not None
               for l_ in outer) or len(outer) != len(blk.dims) - len({q.dim for q in inner}) or \
                any(l_.kind not in ("serial", "vectorized") or l_.unroll is not None or l_.annotations
                    or l_.fused_group is not None for l_ in inner) or blk.cache_reads or \
                blk.cache_writes or blk.decomposed_at is not None or \
                (blk.rfactor is not None and (not producer or blk.rfactor.split)):
            raise ScheduleError(f"{prim}: block '{blk.name}' already has loop transformations; "
                                "expected an untouched block")
        if self._model.attached(blk) or self._model.epilogues(blk):
            raise ScheduleError(f"{prim}: other blocks are attached to loops of '{blk.name}'")
        prod, cons = (blk, other) if producer else (other, blk)
        if not self._is_producer(prod, cons):
            raise ScheduleError(f"{prim}: block '{prod.name}' is not a producer of '{cons.name}'")

    def _is_producer(self, prod: Block, cons: Block) -> bool:
        names = cons.info.producers
        if prod.name in names:
            return True
        # a producer of a producer already computed at a loop of cons (a chain computed per tile)
        if any(prod.name in b.info.producers for b in self._model.attached(cons)):
            return True
        # an epilogue of an epilogue: cons reads a block already attached to prod's loops
        return any(b.name in names for b in self._model.epilogues(prod))

    def decompose_reduction(self, block: BlockRV, loop: LoopRV) -> BlockRV:
        """Separate the reduction's init from its update and place the init right above
        ``loop`` (TVM ``decompose_reduction``): the ``linalg.fill`` that initializes the output
        is fused (``structured.fuse`` with the loops outside ``loop``).

        Returns
        -------
        BlockRV
            The init block (``<name>.init``).

        Raises
        ------
        ScheduleError
            If the block has no reduction dim or no fill init, a loop outside ``loop`` iterates a
            reduction dim more than once (a reduction loop of one iteration, such as the single
            KC block of a short K, runs the init once), is bound or fused, or the block is
            already decomposed/factorized.
        """
        blk = self._block("decompose_reduction", block)
        cblk, pos, lp = self._loop("decompose_reduction", loop)
        if cblk is not blk:
            raise ScheduleError(f"decompose_reduction: loop {loop.rv.name} is a loop of "
                                f"'{cblk.name}'; expected a loop of '{blk.name}'")
        if not any(d.kind == "reduction" for d in blk.dims):
            raise ScheduleError(f"decompose_reduction: block '{blk.name}' has no reduction dim")
        if lp.fused_group is not None and pos != min(blk.group(pos)):
            raise ScheduleError(f"decompose_reduction: loop {blk.label(pos)} is inside a fused loop; "
                                "expected the fused loop itself or another loop")
        if pos > 0:
            self._target_loop("decompose_reduction", blk, pos - 1)
        if blk.decomposed_at is not None or blk.rfactor is not None:
            raise ScheduleError(f"decompose_reduction: '{blk.name}' is already decomposed or factorized")
        for p in range(pos):
            q = blk.loops[p]
            if blk.dims[q.dim].kind != "parallel" and q.extent != 1:
                raise ScheduleError(f"decompose_reduction: loop {blk.label(p)} outside "
                                    f"{blk.label(pos)} iterates a reduction dim; the init "
                                    "would run on every reduction step")
        init_name = blk.info.init
        if init_name is None:
            raise ScheduleError(f"decompose_reduction: the output of '{blk.name}' is not initialized "
                                "by a named linalg.fill")
        others = [p for p in blk.info.producers if p != init_name]
        # the init is fused alone (fuse_into_containing_op) into the scf.forall loops of an
        # unpadded block and into the loops an epilogue was attached in; other loops tile it
        # with transform.structured.fuse, which also fuses (recomputes per tile) the producers
        # of the inputs
        epilogues = self._model.epilogues(blk)
        attach = blk.loop_index(epilogues[0].reverse_compute_at) if epilogues else -1
        forall_alone = self._model.padding_of(blk) is None
        if others and any(p > attach and not (forall_alone and blk.loops[p].kind == "parallel")
                          for p in range(pos)):
            raise ScheduleError(f"decompose_reduction: inputs of '{blk.name}' are computed by {others}; "
                                "placing the init inside serial loops (transform.structured.fuse) "
                                "would recompute them per tile. Schedule the outlined primitive "
                                "function, attach an epilogue (reverse_compute_at) at the serial "
                                "loops first, or decompose at the first loop inside the parallel ones")
        iblk = self._block_model(blk.func, init_name)
        if iblk.kind != "compute" or any(l_.kind != "serial" or l_.unroll is not None
                                         or l_.fused_group is not None for l_ in iblk.loops) \
                or len(iblk.loops) != len(iblk.dims):
            raise ScheduleError(f"decompose_reduction: init block '{iblk.name}' already has loop "
                                "transformations")
        iblk.kind, iblk.parent = "init", blk.id
        blk.decomposed_at = lp.id
        out = self._block_rv(iblk)
        self._record("decompose_reduction", [block, loop], {}, [out.rv])
        return out

    def _shape_cache_loops(self, cache: Block, blk: Block, pos: int) -> None:
        """Give a shared cache block the loops of the tile it holds once computed at
        ``blk.loops[pos]`` (TVM: ``get_loops(cache)`` after ``compute_at``), one per dim of the
        cached operand: every loop of that dim not bound to blockIdx and not a serial loop at or
        above ``pos`` (a GPU-bound loop stages per thread block), widened by the halo of the
        other reads of the same buffer (the union of the block's reads: 128 + 2 elements of
        ``A`` for ``A[i] + A[i + 1] + A[i + 2]`` over 128 threads)."""
        read = next((c for c in blk.cache_reads if c.block_id == cache.id), None)
        if read is None or read.scope != "shared":
            return
        dims = list(blk.info.operand_dims[read.operand])
        halo = [0] * len(dims)
        if len(buffer_reads(blk.info, read.operand)) > 1:
            halo = read_halo(blk.info, read.operand)
            dims = [d for d, _ in blk.info.operand_offsets[read.operand]]
        extents = []
        for d, h in zip(dims, halo):
            e = 1
            for p, q in enumerate(blk.loops):
                outside = (q.kind == "bound" and q.thread.startswith("blockIdx")) or \
                    (q.kind != "bound" and p <= pos and blk.loops[pos].kind != "bound")
                if q.dim == d and not outside:
                    e *= q.extent
            extents.append(e + h)
        dims = tuple(Dim(i, e, "parallel") for i, e in enumerate(extents))
        cache.info = dataclasses.replace(cache.info, dims=dims)
        cache.loops = [Loop(next(self._ids), i, e) for i, e in enumerate(extents)]

    def _cache_block(self, blk: Block, name: str) -> Block:
        info = OpInfo(func=blk.func, name=name, op_name="tensor.pad", dims=(), operand_shapes=(),
                      num_inputs=0)
        return self._model.add(Block(next(self._ids), name, info, [], kind="cache", parent=blk.id))

    def cache_read(self, block: BlockRV, read_buffer_index: int, storage_scope: str = "local") -> BlockRV:
        """Stage input ``read_buffer_index`` of ``block`` in a packed local buffer (TVM
        ``cache_read``): ``structured.pad`` with ``nofold`` on that operand of the innermost tile
        (a contiguous copy); ``compute_at(cache_block, loop)`` then hoists the packing out of
        the loops inside ``loop`` (``structured.hoist_pad``), so each packed panel is reused.
        A ``shared`` cache of a GPU-bound block holds every read of the input's buffer at
        constant offsets from it (:func:`~.buffer_reads.buffer_reads`: ``A[i]``, ``A[i + 1]``,
        ``A[i + 2]``), staged once per thread block as the union of their tiles.

        Returns
        -------
        BlockRV
            The cache block.

        Raises
        ------
        ScheduleError
            For an index that is not an input, an unknown scope, or an input whose buffer
            (those reads) is already cached.
        """
        blk = self._block("cache_read", block)
        idx = as_int("cache_read", "read_buffer_index", read_buffer_index, 0)
        as_str("cache_read", "storage_scope", storage_scope, CACHE_SCOPES)
        if blk.kind != "compute" or not idx < blk.info.num_inputs:
            raise ScheduleError(f"cache_read: read_buffer_index {idx} is not an input "
                                f"of '{blk.name}' (it has {blk.info.num_inputs})")
        self._check_untouched("cache_read", blk)
        if any(c.operand in buffer_reads(blk.info, idx) for c in blk.cache_reads):
            raise ScheduleError(f"cache_read: input {idx} of '{blk.name}' is already cached "
                                "(a cache holds every read of its buffer)")
        cache = self._cache_block(blk, f"{blk.name}.read{idx}_{storage_scope}")
        blk.cache_reads.append(CacheRead(idx, storage_scope, cache.id))
        out = self._block_rv(cache)
        self._record("cache_read", [block, idx, storage_scope], {}, [out.rv])
        return out

    def cache_write(self, block: BlockRV, write_buffer_index: int = 0,
                    storage_scope: str = "local") -> BlockRV:
        """Accumulate output ``write_buffer_index`` of ``block`` in a local buffer and copy it
        back (TVM ``cache_write``): ``structured.pad`` with ``nofold`` on the output operand of
        the innermost parallel tile and ``copy_back_op = "linalg.copy"``.

        Returns
        -------
        BlockRV
            The cache block (the local accumulator).

        Raises
        ------
        ScheduleError
            For an index that is not an output, an unknown scope, or a second cache_write.
        """
        blk = self._block("cache_write", block)
        idx = as_int("cache_write", "write_buffer_index", write_buffer_index, 0)
        as_str("cache_write", "storage_scope", storage_scope, CACHE_SCOPES)
        n_out = len(blk.info.operand_shapes) - blk.info.num_inputs
        if blk.kind != "compute" or not idx < n_out:
            raise ScheduleError(f"cache_write: write_buffer_index {idx} is not an "
                                f"output of '{blk.name}' (it has {n_out})")
        self._check_untouched("cache_write", blk)
        if blk.cache_writes:
            raise ScheduleError(f"cache_write: '{blk.name}' already has a write cache")
        cache = self._cache_block(blk, f"{blk.name}.write{idx}_{storage_scope}")
        blk.cache_writes.append(CacheWrite(blk.info.num_inputs + idx, storage_scope, cache.id))
        out = self._block_rv(cache)
        self._record("cache_write", [block, idx, storage_scope], {}, [out.rv])
        return out

    def rfactor(self, loop: LoopRV, factor_axis: int = 0) -> BlockRV:
        """Factorize a reduction (TVM ``rfactor``): partial results are accumulated in a buffer
        indexed by ``loop``, which becomes data-parallel (it can be vectorized or run in
        parallel), then combined. ``loop`` is either

        * the inner loop ``k1`` of a reduction dim split into ``k0, k1``: the partials are
          accumulated over ``k0`` (``structured.tile_reduction_using_for`` at ``k0``; the rf dim
          is appended last by upstream), e.g. ``V`` lanes of a row sum; or
        * the outermost loop of a reduction dim split into two or more loops, of a constant
          extent ``T`` dividing the dim: ``structured.split_reduction`` (``insert_split_dimension
          = 0``) rewrites the op into ``T`` partial reductions over ``K / T`` each, their results
          laid out ``(T, ...)`` (each partial contiguous), and a combining op summing them, e.g.
          a GEMV whose threads each stream whole rows of the weight.

        ``factor_axis`` must be 0.

        Returns
        -------
        BlockRV
            The rf block (the partial reduction).

        Raises
        ------
        ScheduleError
            If the loop is neither of the two, or the dim's loops are not serial, unfused and
            not unrolled.
        """
        blk, pos, lp = self._loop("rfactor", loop)
        label = blk.label(pos)
        factor_axis = as_int("rfactor", "factor_axis", factor_axis)
        if factor_axis != 0:
            raise ScheduleError(f"rfactor: factor_axis={factor_axis} is not supported; expected 0")
        if blk.dims[lp.dim].kind != "reduction":
            raise ScheduleError(f"rfactor: loop {label} of '{blk.name}' iterates a parallel dim")
        same = [p for p, q in enumerate(blk.loops) if q.dim == lp.dim]
        extent = blk.dims[lp.dim].extent
        split = len(same) >= 2 and same[0] == pos
        if split and (lp.extent is None or extent is None or lp.extent < 2 or extent % lp.extent):
            raise ScheduleError(f"rfactor: the outer loop {label} of '{blk.name}' has extent "
                                f"{lp.extent}; expected a constant >= 2 dividing the dim's {extent}")
        reason = check_splittable(blk, lp.dim) if split else None
        if reason:
            raise ScheduleError(f"rfactor: the outer loop {label} of '{blk.name}' cannot be factored: {reason}")
        if not split and (len(same) != 2 or same[1] != pos):
            raise ScheduleError(f"rfactor: loop {label} must be the inner loop of a reduction dim "
                                f"split into exactly two loops, or the outer loop of one split into "
                                f"two or more (it has {len(same)})")
        if blk.rfactor is not None or blk.decomposed_at is not None:
            raise ScheduleError(f"rfactor: '{blk.name}' is already factorized or decomposed")
        self._check_untouched("rfactor", blk)
        outer, inner = blk.loops[same[0]], blk.loops[same[1]]
        if any(blk.loops[p].kind != "serial" or blk.loops[p].fused_group is not None or
               blk.loops[p].unroll is not None for p in same[:2]) or outer.extent == 1:
            raise ScheduleError(f"rfactor: the loops of the reduction dim of '{blk.name}' must be "
                                "serial, not fused or unrolled, the outer one of extent > 1")
        blk.rfactor = RFactor(outer.id, inner.id, split)
        out = self._block_rv(blk)
        self._record("rfactor", [loop], {"factor_axis": factor_axis} if factor_axis else {}, [out.rv])
        return out
