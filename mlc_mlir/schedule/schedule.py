"""``Schedule``: TVM-TensorIR-style schedule primitives on the linalg ops of a Module.

Each primitive (:mod:`.loop_primitives`, :mod:`.placement_primitives`,
:mod:`.padding_primitives`, :mod:`.sampling`) checks
its arguments and preconditions against the loop-nest model (:mod:`.loop_nest`), edits the model
and records an instruction in ``sch.trace``. ``sch.mod`` materializes the current state: the
model's transform script (:mod:`.transform_script`) applied by the transform interpreter to a
copy of the original module. Source: TVM ``tir.Schedule`` (primitives, traces, sampling), MLIR
transform dialect (the realization of each primitive; see the mapping table in DESIGN.md).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from .._mlir import ir
from ..errors import ScheduleError
from ..ir.module import Module
from .loop_primitives import THREAD_AXES, LoopPrimitives  # noqa: F401
from .padding_primitives import PaddingPrimitives
from .placement_primitives import CACHE_SCOPES, PlacementPrimitives  # noqa: F401
from .sampling import SamplingPrimitives, perfect_tilings  # noqa: F401
from .show import describe
from .state import BlockRV, ExprRV, LoopRV  # noqa: F401
from .trace import INSTRUCTION_KINDS, RV, SAMPLING_KINDS, Trace
from .transform_script import TransformScript, apply_transform_script, emit_transform_script


class Schedule(LoopPrimitives, PlacementPrimitives, PaddingPrimitives, SamplingPrimitives):
    """A schedule of a Module's linalg ops (TVM ``tir.Schedule``).

    Parameters
    ----------
    mod : Module
        The payload (from the builder, ``Module.parse`` or a graph pass). It is not modified.
    seed : int, optional
        Seed of the sampling primitives' random generator.
    defaults : bool
        Whether sampling primitives given a ``default`` and no ``decision`` take the default
        (True: schedule rules then apply their target-derived decisions, the default schedule)
        or draw from the generator (False: a random point of the rules' design space).

    Raises
    ------
    ScheduleError
        If ``mod`` is not a Module, or a named op has dynamic extents.

    Examples
    --------
    >>> sch = Schedule(mod)
    >>> blk = sch.get_block("matmul")
    >>> i, j, k = sch.get_loops(blk)
    >>> j0, j1 = sch.split(j, factors=[None, 4])
    >>> sch.reorder(i, j0, k, j1)
    >>> print(sch.trace)
    """

    def __init__(self, mod: Module, seed: Optional[int] = None, defaults: bool = True,
                 ops: Optional[Dict] = None):
        super().__init__(mod, seed, defaults, ops)
        self.trace = Trace(script=self.as_transform_script)
        self._cache = None

    @classmethod
    def from_trace(cls, mod: Module, trace: Trace, decisions: Optional[Dict[int, Any]] = None,
                   seed: Optional[int] = None, ops: Optional[Dict] = None) -> "Schedule":
        """Replay ``trace`` on a fresh schedule of ``mod`` (TVM ``Trace.apply_to_schedule``).

        Parameters
        ----------
        mod : Module
        trace : Trace
        decisions : dict of int to decision, optional
            Overrides the recorded decisions (instruction index -> decision); each is checked
            against its instruction's sampling constraints.
        seed : int, optional
            Seed of the sampling primitives.
        ops : dict, optional
            The analysis of ``mod``, as for :class:`~.state.ScheduleState`.

        Raises
        ------
        ScheduleError
            If an instruction is malformed or does not apply to ``mod`` (names the instruction),
            or a decision violates its constraint.
        """
        if not isinstance(trace, Trace):
            raise ScheduleError(f"Schedule.from_trace: argument 'trace' is {type(trace).__name__}; "
                                "expected a Trace")
        return cls(mod, seed, ops=ops).apply_trace(trace, decisions)

    def apply_trace(self, trace: Trace, decisions: Optional[Dict[int, Any]] = None) -> "Schedule":
        """Replay the instructions of ``trace`` on this schedule, after what it holds already
        (TVM ``Trace.apply_to_schedule``): a schedule of a whole module takes the trace of one of
        its units (``mlc.compile`` with a tuning database).

        Parameters
        ----------
        trace : Trace
        decisions : dict of int to decision, optional
            Overrides the recorded decisions (instruction index -> decision).

        Returns
        -------
        Schedule
            ``self``.

        Raises
        ------
        ScheduleError
            If ``trace`` is not a Trace, an instruction is malformed or does not apply (names
            the instruction), or a decision violates its constraint.
        """
        if not isinstance(trace, Trace):
            raise ScheduleError(f"Schedule.apply_trace: argument 'trace' is {type(trace).__name__}; "
                                "expected a Trace")
        sch = self
        dec = dict(trace.decisions)
        dec.update(decisions or {})
        env: Dict[str, Any] = {}

        def sub(v, idx):
            if isinstance(v, RV):
                if v.name not in env:
                    raise ScheduleError(f"trace: instruction {idx} uses {v.name} before it is defined")
                return env[v.name]
            if isinstance(v, list):
                return [sub(x, idx) for x in v]
            return v

        for idx, inst in enumerate(trace.insts):
            sig = INSTRUCTION_KINDS.get(inst.kind)
            if sig is None:
                raise ScheduleError(f"trace: instruction {idx} has kind {inst.kind!r}; expected one "
                                    f"of {sorted(INSTRUCTION_KINDS)}")
            n = len(inst.inputs)
            if n < sig.min_inputs or (sig.max_inputs is not None and n > sig.max_inputs) or \
                    set(inst.attrs) - sig.attrs:
                raise ScheduleError(f"trace: instruction {idx} ({inst.kind}) has {n} inputs and attrs "
                                    f"{sorted(inst.attrs)}; expected {sig.min_inputs}.."
                                    f"{sig.max_inputs} inputs and attrs within {sorted(sig.attrs)}")
            kwargs = {k: sub(v, idx) for k, v in inst.attrs.items()}
            if inst.kind in SAMPLING_KINDS and idx in dec:
                kwargs["decision"] = dec[idx]
            try:
                res = getattr(sch, inst.kind)(*[sub(a, idx) for a in inst.inputs], **kwargs)
            except ScheduleError as e:
                raise ScheduleError(f"trace: instruction {idx} ({inst.python()}): {e}") from None
            outs = res if isinstance(res, (list, tuple)) else ([] if res is None else [res])
            if len(outs) != len(inst.outputs):
                raise ScheduleError(f"trace: instruction {idx} ({inst.kind}) gives {len(outs)} "
                                    f"outputs; the trace names {len(inst.outputs)}")
            for rv, val in zip(inst.outputs, outs):
                env[rv.name] = val
        return sch

    # ------------------------------------------------------------------ results
    def show(self, file=None) -> str:
        """Print (and return) the loop nests of the scheduled functions as ``sch.mod`` has them:
        one line per ``scf.for``/``scf.forall`` (``for``/``forall``, with loop names and trip
        counts) and per op, attached blocks (``compute_at``, ``reverse_compute_at``, the init of
        ``decompose_reduction``, caches) where they are computed. Loops left in an op (vectorized
        or trailing) are listed after it."""
        text = describe(self._model)
        print(text, file=file)
        return text

    def transform_script(self, design_space: bool = False) -> TransformScript:
        """The transform script realizing the current schedule (``.save(path)``, ``str()``,
        ``.module``); with ``design_space`` the knobs of sampled tile sizes carry no decision.

        Raises
        ------
        ScheduleError
            If the emitted script does not verify.
        """
        return emit_transform_script(self._model, self._orig.context, design_space)

    def as_transform_script(self, design_space: bool = False) -> ir.Module:
        """The transform module (``transform.named_sequence @__transform_main``) of the current
        schedule; ``str()`` of it is the MLIR text for ``mlir-opt --transform-interpreter``.

        Raises
        ------
        ScheduleError
            If the emitted script does not verify.
        """
        return self.transform_script(design_space).module

    @property
    def mod(self) -> Module:
        """The payload after applying the schedule so far (emitted + interpreted, cached).

        Raises
        ------
        ScheduleError
            With the interpreter's diagnostics if applying the script fails.
        """
        key = self.trace.as_json(indent=None)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, apply_transform_script(self._orig, self.transform_script()))
        return self._cache[1]
