"""``Trace``: the instructions a Schedule recorded, plus the decisions of sampling instructions.

The ground truth of a schedule (TVM's ``tir.schedule.Trace``), and data only: ``str(trace)`` is
Python text that re-creates the schedule, ``as_json``/``from_json`` round-trip (``from_json``
checks every instruction against :data:`INSTRUCTION_KINDS`), and
``Schedule.from_trace(mod, trace)`` replays it (optionally with other decisions). A trace recorded
by a Schedule also gives that schedule's transform module (``as_transform_script``).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Dict, FrozenSet, List, NamedTuple, Optional

from .._mlir import ir
from ..errors import ScheduleError


@dataclasses.dataclass(frozen=True)
class RV:
    """A random variable / handle of a trace: ``b0`` (block), ``l1`` (loop), ``v2`` (value)."""

    name: str

    def __repr__(self) -> str:
        return self.name


class InstructionKind(NamedTuple):
    """Signature of one instruction kind: positional input count range and keyword attrs."""

    min_inputs: int
    max_inputs: Optional[int]
    attrs: FrozenSet[str] = frozenset()


#: Every instruction a trace may hold (the Schedule primitive of the same name).
INSTRUCTION_KINDS: Dict[str, InstructionKind] = {
    "get_block": InstructionKind(1, 1, frozenset({"func_name"})),
    "get_loops": InstructionKind(1, 1),
    "split": InstructionKind(1, 1, frozenset({"factors"})),
    "reorder": InstructionKind(2, None),
    "fuse": InstructionKind(2, None),
    "parallel": InstructionKind(1, 1),
    "vectorize": InstructionKind(1, 1),
    "unroll": InstructionKind(1, 1, frozenset({"factor"})),
    "bind": InstructionKind(2, 2),
    "annotate": InstructionKind(3, 3),
    "compute_at": InstructionKind(2, 2),
    "reverse_compute_at": InstructionKind(2, 2),
    "decompose_reduction": InstructionKind(2, 2),
    "cache_read": InstructionKind(2, 3),
    "cache_write": InstructionKind(1, 3),
    "rfactor": InstructionKind(1, 1, frozenset({"factor_axis"})),
    "pad_einsum": InstructionKind(2, 2),
    "sample_perfect_tile": InstructionKind(1, 1, frozenset({"n", "max_innermost_factor"})),
    "sample_categorical": InstructionKind(0, 0, frozenset({"candidates", "probs"})),
}

#: Instructions whose outputs are sampled; their decision is stored in ``Trace.decisions``.
SAMPLING_KINDS = ("sample_perfect_tile", "sample_categorical")


@dataclasses.dataclass
class Instruction:
    """One primitive call.

    Attributes
    ----------
    kind : str
        The Schedule method (a key of :data:`INSTRUCTION_KINDS`).
    inputs : list
        Positional arguments: RVs or literals (lists allowed).
    attrs : dict
        Keyword arguments.
    outputs : list of RV
        The RVs it defines.
    """

    kind: str
    inputs: List[Any]
    attrs: Dict[str, Any]
    outputs: List[RV]

    def python(self, decision=None) -> str:
        """This instruction as one line of Python (``l4, l5 = sch.split(l2, factors=[None, 4])``)."""
        args = [_py(a) for a in self.inputs]
        args += [f"{k}={_py(v)}" for k, v in self.attrs.items()]
        if decision is not None:
            args.append(f"decision={_py(decision)}")
        call = f"sch.{self.kind}({', '.join(args)})"
        if not self.outputs:
            return call
        lhs = ", ".join(o.name for o in self.outputs)
        if self.kind in ("get_loops", "split", "sample_perfect_tile") and len(self.outputs) == 1:
            lhs += ","
        return f"{lhs} = {call}"


def _py(v) -> str:
    if isinstance(v, RV):
        return v.name
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_py(x) for x in v) + "]"
    return repr(v)


def _to_json(v):
    if isinstance(v, RV):
        return {"rv": v.name}
    if isinstance(v, dict):
        return {k: _to_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_to_json(x) for x in v]
    return v


def _from_json(v, where: str):
    if isinstance(v, dict):
        if set(v) == {"rv"} and isinstance(v["rv"], str):
            return RV(v["rv"])
        raise ScheduleError(f"Trace.from_json: {where}: expected an RV {{\"rv\": name}}, got {v!r}")
    if isinstance(v, list):
        return [_from_json(x, where) for x in v]
    return v


def _check_instruction(idx: int, kind: str, n_inputs: int, attrs) -> None:
    sig = INSTRUCTION_KINDS.get(kind)
    if sig is None:
        raise ScheduleError(f"Trace.from_json: instruction {idx} has kind {kind!r}; expected one of "
                            f"{sorted(INSTRUCTION_KINDS)}")
    hi = "any" if sig.max_inputs is None else sig.max_inputs
    if n_inputs < sig.min_inputs or (sig.max_inputs is not None and n_inputs > sig.max_inputs):
        raise ScheduleError(f"Trace.from_json: instruction {idx} ({kind}) has {n_inputs} inputs; "
                            f"expected {sig.min_inputs}..{hi}")
    extra = set(attrs) - sig.attrs
    if extra:
        raise ScheduleError(f"Trace.from_json: instruction {idx} ({kind}) has attrs {sorted(extra)}; "
                            f"expected a subset of {sorted(sig.attrs)}")


def _expect(cond: bool, what: str, got) -> None:
    if not cond:
        raise ScheduleError(f"Trace.from_json: {what}, got {got!r}")


class Trace:
    """Instructions and decisions of a schedule (data; TVM ``tir.schedule.Trace``).

    Parameters
    ----------
    insts : list of Instruction, optional
    decisions : dict of int to decision, optional
        Instruction index -> decision (list of factors for ``sample_perfect_tile``, the chosen
        index for ``sample_categorical``).
    script : callable, optional
        ``script(design_space) -> ir.Module``: the transform module of the schedule that records
        this trace (set by ``Schedule``; not part of the data).

    Attributes
    ----------
    insts : list of Instruction
    decisions : dict of int to (list of int or int)
    """

    def __init__(self, insts: Optional[List[Instruction]] = None,
                 decisions: Optional[Dict[int, Any]] = None,
                 script: Optional[Callable[[bool], ir.Module]] = None):
        self.insts: List[Instruction] = list(insts or [])
        self.decisions: Dict[int, Any] = dict(decisions or {})
        self._script = script

    # ----------------------------------------------------------------- text and JSON
    def __str__(self) -> str:
        lines = ["# mlc-mlir schedule trace", "def apply_trace(sch):"]
        for i, inst in enumerate(self.insts):
            lines.append("    " + inst.python(self.decisions.get(i)))
        if not self.insts:
            lines.append("    pass")
        return "\n".join(lines)

    def as_json(self, indent: Optional[int] = 1) -> str:
        """JSON text: ``{"format", "insts": [{kind, inputs, attrs, outputs}], "decisions"}``;
        ``indent=None`` writes it on one line, with the json module's C encoder (an indented
        dump takes its pure-Python path: 2 CPU s for DenseNet-121's default schedule)."""
        return json.dumps({
            "format": "mlc-trace-v1",
            "insts": [{"kind": i.kind, "inputs": _to_json(i.inputs), "attrs": _to_json(i.attrs),
                       "outputs": [o.name for o in i.outputs]} for i in self.insts],
            "decisions": {str(k): v for k, v in sorted(self.decisions.items())},
        }, indent=indent)

    @classmethod
    def from_json(cls, text) -> "Trace":
        """Parse :meth:`as_json` output (a str, or the already-decoded dict).

        Raises
        ------
        ScheduleError
            If the text is not a trace: bad JSON, a missing field, an unknown instruction kind,
            a wrong number of inputs, an unknown attribute or a malformed decision.
        """
        if isinstance(text, str):
            try:
                d = json.loads(text)
            except ValueError as e:
                raise ScheduleError(f"Trace.from_json: not a trace (invalid JSON: {e})") from None
        else:
            d = text
        _expect(isinstance(d, dict) and isinstance(d.get("insts"), list),
                "not a trace: expected an object with an 'insts' list", d)
        insts = []
        for idx, i in enumerate(d["insts"]):
            _expect(isinstance(i, dict) and set(i) == {"kind", "inputs", "attrs", "outputs"},
                    f"not a trace: instruction {idx} must have kind, inputs, attrs, outputs", i)
            _expect(isinstance(i["inputs"], list), f"instruction {idx}: inputs must be a list", i["inputs"])
            _expect(isinstance(i["attrs"], dict), f"instruction {idx}: attrs must be an object", i["attrs"])
            _expect(isinstance(i["outputs"], list) and all(isinstance(o, str) for o in i["outputs"]),
                    f"instruction {idx}: outputs must be a list of names", i["outputs"])
            _check_instruction(idx, i["kind"], len(i["inputs"]), i["attrs"])
            where = f"instruction {idx} ({i['kind']})"
            insts.append(Instruction(i["kind"], _from_json(i["inputs"], where),
                                     {k: _from_json(v, where) for k, v in i["attrs"].items()},
                                     [RV(o) for o in i["outputs"]]))
        raw = d.get("decisions", {})
        _expect(isinstance(raw, dict), "decisions must be an object", raw)
        decisions = {}
        for k, v in raw.items():
            _expect(isinstance(k, str) and k.isdigit() and int(k) < len(insts)
                    and insts[int(k)].kind in SAMPLING_KINDS,
                    "a decision key must be the index of a sampling instruction", k)
            ok = isinstance(v, int) if insts[int(k)].kind == "sample_categorical" else \
                isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
            _expect(ok and not isinstance(v, bool), f"decision {k} ({insts[int(k)].kind}) is malformed", v)
            decisions[int(k)] = v
        return cls(insts, decisions)

    def __eq__(self, other) -> bool:
        return isinstance(other, Trace) and self.as_json() == other.as_json()

    def __len__(self) -> int:
        return len(self.insts)

    def as_transform_script(self, design_space: bool = False) -> ir.Module:
        """The transform module (``transform.named_sequence @__transform_main``) of the schedule
        that recorded this trace; ``str()`` of it is the MLIR text.

        Sampling instructions become ``transform.tune.knob`` ops whose ``selected`` value is the
        decision; with ``design_space=True`` they have no ``selected`` (the design space).

        Raises
        ------
        ScheduleError
            For a trace no Schedule recorded (e.g. from ``from_json``): replay it first,
            ``Schedule.from_trace(mod, trace).as_transform_script()``.
        """
        if self._script is None:
            raise ScheduleError("as_transform_script: this trace was not recorded by a Schedule; "
                                "use Schedule.from_trace(mod, trace).as_transform_script()")
        return self._script(design_space)
