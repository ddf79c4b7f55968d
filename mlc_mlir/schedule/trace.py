"""``Trace``: the instructions a Schedule recorded, plus the decisions of sampling instructions.

The ground truth of a schedule (TVM's ``tir.schedule.Trace``): ``str(trace)`` is Python text that
re-creates the schedule, ``as_json``/``from_json`` round-trip, ``apply(mod, decisions=...)``
replays it (optionally with other decisions) and ``as_transform_script()`` gives the transform
module that upstream ``mlir-opt --transform-interpreter`` applies with the same result.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, List, Optional

from ..errors import ScheduleError


@dataclasses.dataclass(frozen=True)
class RV:
    """A random variable / handle of a trace: ``b0`` (block), ``l1`` (loop), ``v2`` (value)."""

    name: str

    def __repr__(self) -> str:
        return self.name


@dataclasses.dataclass
class Instruction:
    """One primitive call: ``kind`` (the Schedule method), positional ``inputs`` (RVs or
    literals, lists allowed), keyword ``attrs`` and the RVs it defines (``outputs``)."""

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


def _from_json(v):
    if isinstance(v, dict) and set(v) == {"rv"}:
        return RV(v["rv"])
    if isinstance(v, list):
        return [_from_json(x) for x in v]
    return v


#: Instructions whose outputs are sampled; their decision is stored in ``Trace.decisions``.
SAMPLING_KINDS = ("sample_perfect_tile", "sample_categorical")


class Trace:
    """Instructions and decisions of a schedule.

    Attributes
    ----------
    insts : list of Instruction
    decisions : dict
        Instruction index -> decision (list of factors for ``sample_perfect_tile``, the chosen
        index for ``sample_categorical``).
    """

    def __init__(self, insts: Optional[List[Instruction]] = None,
                 decisions: Optional[Dict[int, Any]] = None):
        self.insts: List[Instruction] = list(insts or [])
        self.decisions: Dict[int, Any] = dict(decisions or {})

    # ----------------------------------------------------------------- text and JSON
    def __str__(self) -> str:
        lines = ["# mlc-mlir schedule trace", "def apply_trace(sch):"]
        for i, inst in enumerate(self.insts):
            lines.append("    " + inst.python(self.decisions.get(i)))
        if not self.insts:
            lines.append("    pass")
        return "\n".join(lines)

    def as_json(self) -> str:
        """JSON text: ``{"insts": [{kind, inputs, attrs, outputs}], "decisions": {idx: d}}``."""
        return json.dumps({
            "format": "mlc-trace-v1",
            "insts": [{"kind": i.kind, "inputs": _to_json(i.inputs), "attrs": _to_json(i.attrs),
                       "outputs": [o.name for o in i.outputs]} for i in self.insts],
            "decisions": {str(k): v for k, v in sorted(self.decisions.items())},
        }, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Trace":
        """Parse :meth:`as_json` output.

        Raises
        ------
        ScheduleError
            If the text is not a trace.
        """
        try:
            d = json.loads(text) if isinstance(text, str) else text
            insts = [Instruction(i["kind"], _from_json(i["inputs"]),
                                 {k: _from_json(v) for k, v in i["attrs"].items()},
                                 [RV(o) for o in i["outputs"]]) for i in d["insts"]]
            decisions = {int(k): v for k, v in d.get("decisions", {}).items()}
        except (ValueError, KeyError, TypeError) as e:
            raise ScheduleError(f"Trace.from_json: not a trace ({type(e).__name__}: {e})") from None
        return cls(insts, decisions)

    def __eq__(self, other) -> bool:
        return isinstance(other, Trace) and self.as_json() == other.as_json()

    def __len__(self) -> int:
        return len(self.insts)

    # ----------------------------------------------------------------- replay
    def apply(self, mod, decisions: Optional[Dict[int, Any]] = None):
        """Replay on a fresh Schedule of ``mod`` and return the scheduled Module.

        ``decisions`` overrides the recorded decisions (instruction index -> decision).
        """
        return self.replay(mod, decisions).mod

    def replay(self, mod, decisions: Optional[Dict[int, Any]] = None):
        """Replay on a fresh ``Schedule(mod)`` and return that Schedule.

        Raises
        ------
        ScheduleError
            If an instruction does not apply to ``mod`` (names the instruction).
        """
        from .schedule import Schedule

        sch = Schedule(mod)
        dec = dict(self.decisions)
        dec.update(decisions or {})
        env: Dict[str, Any] = {}

        def sub(v):
            if isinstance(v, RV):
                if v.name not in env:
                    raise ScheduleError(f"trace: {v.name} is used before it is defined")
                return env[v.name]
            if isinstance(v, list):
                return [sub(x) for x in v]
            return v

        for idx, inst in enumerate(self.insts):
            method = getattr(sch, inst.kind, None)
            if method is None or inst.kind.startswith("_"):
                raise ScheduleError(f"trace: instruction {idx} has unknown kind '{inst.kind}'")
            kwargs = {k: sub(v) for k, v in inst.attrs.items()}
            if inst.kind in SAMPLING_KINDS and idx in dec:
                kwargs["decision"] = dec[idx]
            try:
                res = method(*[sub(a) for a in inst.inputs], **kwargs)
            except ScheduleError as e:
                raise ScheduleError(f"trace: instruction {idx} ({inst.python()}): {e}") from None
            outs = res if isinstance(res, (list, tuple)) else ([] if res is None else [res])
            if len(outs) != len(inst.outputs):
                raise ScheduleError(f"trace: instruction {idx} ({inst.kind}) gave {len(outs)} "
                                    f"outputs; the trace has {len(inst.outputs)}")
            for rv, val in zip(inst.outputs, outs):
                env[rv.name] = val
        return sch

    def as_transform_script(self, mod=None, design_space: bool = False):
        """The transform module (``transform.named_sequence @__transform_main``) of this trace.

        Sampling instructions become ``transform.tune.knob`` ops whose ``selected`` value is the
        decision; with ``design_space=True`` they have no ``selected`` (the design space).
        Needs the payload ``mod`` the trace was recorded on (for op extents), unless the trace
        came from a Schedule that remembers it.
        """
        if mod is None:
            mod = getattr(self, "_mod", None)
        if mod is None:
            raise ScheduleError("as_transform_script: pass the module the trace applies to")
        return self.replay(mod).transform_script(design_space)
