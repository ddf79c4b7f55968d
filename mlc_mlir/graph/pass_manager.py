"""Graph passes: a ``Pass`` maps a Module to a new Module; ``Sequential`` runs passes in order
(Python passes and upstream MLIR passes given by pipeline text) with per-pass timing and
``print_ir_after`` dumps (the counterpart of ``mlir-opt --mlir-print-ir-after``).

Source: TVM ``transform.Sequential`` / ``ModulePass``; MLIR's PassManager instrumentation.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Dict, Iterable, List, Optional, Sequence, TextIO, Type, Union

from .._mlir import ir
from ..errors import PipelineError
from ..ir.module import Module
from ..ir.pass_pipeline import run_pass_pipeline

#: kebab-case name -> pass class, for ``mlc-opt --<name>`` (filled by ``register_pass``).
PASS_REGISTRY: Dict[str, Type["Pass"]] = {}


def register_pass(cls: Type["Pass"]) -> Type["Pass"]:
    """Class decorator: make a pass available to ``mlc-opt`` under ``cls.name``."""
    PASS_REGISTRY[cls.name] = cls
    return cls


class Pass:
    """A module-to-module transformation.

    Subclasses set ``name`` (kebab-case, e.g. ``mlc-fuse-ops``) and implement
    :meth:`transform`, which may mutate the copy it is given. Calling a pass copies the input,
    transforms the copy and verifies it, so the input Module is never modified.

    Raises
    ------
    IRError
        If the result does not verify (a bug in the pass: the message has the diagnostics).
    """

    name = "pass"

    def transform(self, mod: Module) -> Module:
        """Transform ``mod`` (a copy the pass may mutate) and return the result. Runs with
        ``mod``'s context and an unknown location active, so IR can be built directly."""
        raise NotImplementedError(f"{type(self).__name__}.transform")

    def __call__(self, mod: Module) -> Module:
        copy = mod.clone()
        with copy.context, ir.Location.unknown():
            out = self.transform(copy)
        return out.verify()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class ScopedPass(Pass):
    """A pass that rewrites the ops ``select`` accepts, in the functions named ``functions``.

    Parameters
    ----------
    select : callable, optional
        Which ops to rewrite: each subclass documents its arguments and result; None: the
        subclass's default (passes that rewrite every op they match take none).
    functions : sequence of str, optional
        Only rewrite in these functions (default: all); kept as a set in ``self.functions``.
    """

    def __init__(self, select: Optional[Callable] = None, functions: Optional[Sequence[str]] = None):
        self.select = select
        self.functions = None if functions is None else set(functions)

    def scoped_functions(self, mod: Module) -> list:
        """The ``func.func`` ops of ``mod`` this pass rewrites: those with a body, named in
        ``functions`` when given."""
        return mod.defined_functions(self.functions)


class UpstreamPass(Pass):
    """Upstream MLIR passes given as pipeline text, e.g. ``UpstreamPass("func.func(cse)")`` or a
    full ``builtin.module(...)`` pipeline.

    Raises
    ------
    PipelineError
        If the text does not parse or a pass fails (with an ``mlir-opt`` repro command).
    """

    def __init__(self, pipeline: str, name: Optional[str] = None):
        self.pipeline = pipeline if pipeline.startswith("builtin.module") else f"builtin.module({pipeline})"
        self.name = name or pipeline

    def transform(self, mod: Module) -> Module:
        return run_pass_pipeline(mod, self.pipeline, stage=self.name)


class Sequential(Pass):
    """Run ``passes`` in order (TVM ``transform.Sequential``).

    Parameters
    ----------
    passes : sequence of Pass or str
        Passes; a str is upstream pipeline text (:class:`UpstreamPass`).
    print_ir_after : "all", sequence of pass names, or None
        Print the module after these passes to ``file`` (``// -----// IR Dump After <name>``).
    file : text stream
        Where dumps go (default stderr).

    After a run, ``timings`` holds ``(pass name, seconds)`` per pass.
    """

    name = "sequential"

    def __init__(self, passes: Sequence[Union[Pass, str]],
                 print_ir_after: Union[str, Iterable[str], None] = None, file: Optional[TextIO] = None):
        self.passes: List[Pass] = []
        for p in passes:
            if isinstance(p, str):
                p = UpstreamPass(p)
            if not isinstance(p, Pass):
                raise PipelineError(f"Sequential: {p!r} is not a Pass or pipeline text")
            self.passes.append(p)
        self.print_ir_after = print_ir_after
        self.file = file
        self.timings: List[tuple] = []

    def _should_print(self, p: Pass) -> bool:
        if self.print_ir_after is None:
            return False
        if self.print_ir_after == "all":
            return True
        return p.name in set(self.print_ir_after)

    def transform(self, mod: Module) -> Module:
        self.timings = []
        out = mod
        for p in self.passes:
            t0 = time.perf_counter()
            out = p(out)
            self.timings.append((p.name, time.perf_counter() - t0))
            if self._should_print(p):
                print(f"// -----// IR Dump After {p.name} //----- //\n{out.to_text(elide_weights=True)}",
                      file=self.file or sys.stderr)
        return out

    def timing_report(self) -> str:
        """Per-pass wall time (ms) of the last run, like ``mlir-opt --mlir-timing``."""
        total = sum(t for _, t in self.timings) or 1e-12
        lines = [f"{'pass':<32}{'ms':>10}{'%':>7}"]
        lines += [f"{n:<32}{t * 1e3:>10.2f}{100 * t / total:>6.1f}%" for n, t in self.timings]
        return "\n".join(lines)


#: TVM/MLIR name for the same thing.
PassManager = Sequential
