"""Handles (``BlockRV``, ``LoopRV``, ``ExprRV``) and the state every schedule primitive works on:
the loop-nest model, the trace, argument validation, block/loop retrieval and read access
(TVM ``tir.Schedule.get``/``get_block``/``get_loops``/``get_producers``/``get_consumers``)."""

from __future__ import annotations

import itertools
import numbers
import random
from typing import Any, Dict, List, Optional, Tuple, Union

from ..errors import ScheduleError
from ..ir.module import Module
from .loop_nest import Block, Loop, LoopNestModel, analyze_module
from .trace import RV, Instruction, Trace


class BlockRV:
    """Handle to a block (a named linalg op) of one Schedule (TVM ``BlockRV``)."""

    def __init__(self, owner: object, block_id: int, rv: RV):
        self.owner = owner
        self.block_id = block_id
        self.rv = rv

    def __repr__(self) -> str:
        return f"BlockRV({self.rv.name})"


class LoopRV:
    """Handle to a loop of one Schedule's loop-nest model (TVM ``LoopRV``)."""

    def __init__(self, owner: object, block_id: int, loop_id: int, rv: RV):
        self.owner = owner
        self.block_id = block_id
        self.loop_id = loop_id
        self.rv = rv

    def __repr__(self) -> str:
        return f"LoopRV({self.rv.name})"


class ExprRV(int):
    """A sampled integer (TVM ``ExprRV``): behaves as its value, remembers its trace variable
    and the values it could have taken (``options``)."""

    def __new__(cls, value: int, rv: RV, options: Tuple[int, ...] = ()):
        obj = super().__new__(cls, value)
        obj.rv = rv
        obj.options = tuple(options)
        return obj

    def __repr__(self) -> str:
        return f"ExprRV({self.rv.name}={int(self)})"


def as_int(prim: str, arg: str, v, lo: Optional[int] = None) -> int:
    """``v`` as a Python int (numpy integers included, bools refused), at least ``lo``.

    Raises
    ------
    ScheduleError
        Naming ``prim`` and ``arg``, with the expected and the actual value.
    """
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise ScheduleError(f"{prim}: argument '{arg}' is {v!r} ({type(v).__name__}); expected an int")
    if lo is not None and int(v) < lo:
        raise ScheduleError(f"{prim}: argument '{arg}' is {int(v)}; expected an int >= {lo}")
    return int(v)


def as_str(prim: str, arg: str, v, choices=None) -> str:
    """``v`` checked to be a str (one of ``choices`` if given).

    Raises
    ------
    ScheduleError
        Naming ``prim`` and ``arg``, with the expected and the actual value.
    """
    if not isinstance(v, str) or (choices is not None and v not in choices):
        exp = f"one of {list(choices)}" if choices is not None else "a str"
        raise ScheduleError(f"{prim}: argument '{arg}' is {v!r}; expected {exp}")
    return v


def _rvof(x):
    if type(x) in (int, str, float, bool) or x is None:   # most values (the ABC check is slow)
        return x
    if isinstance(x, (BlockRV, LoopRV, ExprRV)):
        return x.rv
    if isinstance(x, (list, tuple)):
        return [_rvof(v) for v in x]
    if isinstance(x, numbers.Integral) and not isinstance(x, bool):
        return int(x)
    return x


class ScheduleState:
    """The state of a Schedule: payload, loop-nest model, trace; retrieval and read access.

    Parameters
    ----------
    mod : Module
        The payload. It is not modified.
    seed : int, optional
        Seed of the sampling primitives' random generator.
    defaults : bool
        Whether a sampling primitive called with a ``default`` (a schedule rule's
        target-derived choice) and no ``decision`` takes that default (the default schedule)
        rather than drawing one (the tuner's random candidates).
    ops : dict, optional
        :func:`~.loop_nest.analyze_module` of ``mod`` when the caller has it: the schedules of
        one payload (a tuner's candidates) share it; it is only read.

    Raises
    ------
    ScheduleError
        If ``mod`` is not a Module, or a named op has dynamic extents.
    """

    def __init__(self, mod: Module, seed: Optional[int] = None, defaults: bool = True,
                 ops: Optional[Dict] = None):
        if not isinstance(mod, Module):
            raise ScheduleError(f"Schedule: argument 'mod' is {type(mod).__name__}; expected mlc.Module")
        self._orig = mod
        self._model = LoopNestModel(analyze_module(mod) if ops is None else ops)
        self._ids = itertools.count()
        self._rv_count = itertools.count()
        self._rng = random.Random(seed)
        self._defaults = bool(defaults)
        self._token = object()    # identifies this schedule's handles

    # ------------------------------------------------------------------ public read access
    @property
    def payload(self) -> Module:
        """The module being scheduled (unmodified)."""
        return self._orig

    @property
    def model(self) -> LoopNestModel:
        """The loop-nest model (read it; only primitives edit it)."""
        return self._model

    def get(self, rv: Union[BlockRV, LoopRV, ExprRV]) -> Union[Block, Loop, int]:
        """The model object of a handle (TVM ``Schedule.get``): a :class:`Loop` (``extent``,
        ``kind``, ``dim``, ``thread``, ``unroll``, ``annotations``), a :class:`Block` (``name``,
        ``dims``, ``loops``, ``info``...) or a sampled value. Read only.

        Raises
        ------
        ScheduleError
            For a handle of another schedule, or a loop that no longer exists.
        """
        if isinstance(rv, ExprRV):
            return int(rv)
        if isinstance(rv, BlockRV):
            return self._block("get", rv)
        return self._loop("get", rv)[2]

    def get_producers(self, block: BlockRV) -> List[BlockRV]:
        """Blocks whose results ``block`` reads, inits included (TVM ``get_producers``)."""
        blk = self._block("get_producers", block)
        return [self._handle(blk.func, n) for n in self._model.producers(blk)]

    def get_consumers(self, block: BlockRV) -> List[BlockRV]:
        """Blocks that read ``block``'s result (TVM ``get_consumers``)."""
        blk = self._block("get_consumers", block)
        return [self._handle(blk.func, n) for n in self._model.index.consumers(blk.func, blk.name)]

    def _handle(self, func: str, name: str) -> BlockRV:
        return self.get_block(name, func_name=func)

    # ------------------------------------------------------------------ plumbing
    def _new_rv(self, prefix: str) -> RV:
        return RV(f"{prefix}{next(self._rv_count)}")

    def _record(self, kind: str, inputs: List[Any], attrs: Dict[str, Any], outputs: List[RV],
                decision=None) -> None:
        self.trace.insts.append(Instruction(kind, [_rvof(x) for x in inputs],
                                            {k: _rvof(v) for k, v in attrs.items()}, outputs))
        if decision is not None:
            self.trace.decisions[len(self.trace.insts) - 1] = decision

    def _block(self, prim: str, b, arg: str = "block") -> Block:
        if not isinstance(b, BlockRV):
            raise ScheduleError(f"{prim}: argument '{arg}' is {b!r}; expected a BlockRV")
        if b.owner is not self._token:
            raise ScheduleError(f"{prim}: argument '{arg}' {b!r} is a handle of another Schedule")
        return self._model.block(b.block_id)

    def _loop(self, prim: str, lp, arg: str = "loop") -> Tuple[Block, int, Loop]:
        if not isinstance(lp, LoopRV):
            raise ScheduleError(f"{prim}: argument '{arg}' is {lp!r}; expected a LoopRV")
        if lp.owner is not self._token:
            raise ScheduleError(f"{prim}: argument '{arg}' {lp!r} is a handle of another Schedule")
        blk = self._model.block(lp.block_id)
        pos = blk.loop_index(lp.loop_id)
        if pos is None:
            raise ScheduleError(f"{prim}: loop {lp.rv.name} no longer exists (it was split, fused "
                                "or replaced)")
        return blk, pos, blk.loops[pos]

    def _loop_rv(self, blk: Block, lp: Loop) -> LoopRV:
        return LoopRV(self._token, blk.id, lp.id, self._new_rv("l"))

    def _block_rv(self, blk: Block) -> BlockRV:
        return BlockRV(self._token, blk.id, self._new_rv("b"))

    @staticmethod
    def _check_untouched(prim: str, blk: Block) -> None:
        if blk.kind != "cache" and (blk.compute_at is not None or blk.reverse_compute_at is not None):
            raise ScheduleError(f"{prim}: block '{blk.name}' is already attached to another block's loop")

    def _block_model(self, func: str, name: str) -> Block:
        blk = self._model.find(func, name)
        if blk is None:
            info = self._model.ops[(func, name)]
            loops = [Loop(next(self._ids), d.index, d.extent) for d in info.dims]
            blk = self._model.add(Block(next(self._ids), name, info, loops))
        return blk

    # ------------------------------------------------------------------ blocks and loops
    def get_block(self, name: str, func_name: Optional[str] = None) -> BlockRV:
        """The block (linalg op) whose ``mlc.name`` is ``name`` (TVM ``get_block``).

        Emits ``transform.structured.match attributes {mlc.name = name}``.

        Raises
        ------
        ScheduleError
            If no op has that name, or several functions do and ``func_name`` is not given.
        """
        as_str("get_block", "name", name)
        if func_name is not None:
            as_str("get_block", "func_name", func_name)
        ops = self._model.ops
        hits = [k for k in self._model.index.named(name) if func_name is None or k[0] == func_name]
        if not hits:
            names = sorted({k[1] for k in ops if func_name is None or k[0] == func_name})
            raise ScheduleError(f"get_block: no block named '{name}'"
                                + (f" in function '{func_name}'" if func_name else "")
                                + f"; blocks: {names}")
        if len(hits) > 1:
            raise ScheduleError(f"get_block: '{name}' exists in functions {sorted(k[0] for k in hits)}; "
                                "pass func_name=")
        blk = self._block_model(*hits[0])
        out = self._block_rv(blk)
        self._record("get_block", [name], {"func_name": func_name} if func_name is not None else {},
                     [out.rv])
        return out

    def get_loops(self, block: BlockRV) -> List[LoopRV]:
        """The loops of ``block``, outermost first (TVM ``get_loops``). Before any split these
        are the op's iteration dims (``i, j, k`` for matmul).

        Raises
        ------
        ScheduleError
            For a handle that is not a BlockRV of this schedule.
        """
        blk = self._block("get_loops", block)
        out = [self._loop_rv(blk, lp) for lp in blk.loops]
        self._record("get_loops", [block], {}, [o.rv for o in out])
        return out
