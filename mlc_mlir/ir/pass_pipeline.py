"""Running an upstream MLIR pass pipeline (``mlir-opt --pass-pipeline=...``) on a Module.

This is the one place that drives MLIR's ``PassManager`` on pipeline text; the graph passes
(``UpstreamPass``) and the lowering stages of :func:`mlc_mlir.compile` both call it. It knows
nothing of the named pipeline files (``pipelines/``), which belong to the pipeline layer.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from typing import Optional

from .._mlir import PassManager, ir
from ..errors import PipelineError
from .module import Module, diagnostics


def run_pass_pipeline(module: Module, text: str, stage: str, *, source: Optional[str] = None,
                      verify_each: bool = True) -> Module:
    """Run the pass pipeline ``text`` (``builtin.module(...)``) on a copy of ``module``.

    Parameters
    ----------
    module : Module
        The input; never modified.
    text : str
        A full pipeline in ``mlir-opt --pass-pipeline`` syntax.
    stage : str
        The stage name used in error messages (``lower``, ``mlc-cse``, ...).
    source : str, optional
        The ``.pipeline`` file the text came from, so the repro command can ``$(cat FILE)`` it.
    verify_each : bool
        Verify the IR after each pass (MLIR's default, ``mlir-opt``'s too). False verifies the
        input and the output once instead: on a large module each verification walks every op,
        and a long pipeline of upstream passes spent a third of its time verifying (the
        ``lower`` pipeline of Inception v1, 25 passes); a failure is still reported, with the
        same repro command (``mlir-opt`` verifies after each pass and names the culprit).

    Returns
    -------
    Module
        The transformed copy.

    Raises
    ------
    PipelineError
        If the text does not parse (names the stage), or a pass fails: MLIR's diagnostics and an
        ``mlir-opt`` command that reproduces the failure on a saved copy of the input.
    """
    out = module.clone()
    with out.context:
        try:
            pm = PassManager.parse(text)
        except (ValueError, ir.MLIRError) as e:
            raise PipelineError(f"{stage}: cannot parse pipeline {text!r}: {e}") from None
        if not verify_each:
            pm.enable_verifier(False)
        try:
            if not verify_each:
                out.operation.verify()
            pm.run(out.operation)
            if not verify_each:
                out.operation.verify()
        except ir.MLIRError as e:
            fd, path = tempfile.mkstemp(prefix=f"mlc-{stage.replace(' ', '_').replace('/', '_')}-",
                                        suffix=".mlir")
            with os.fdopen(fd, "w") as f:
                f.write(str(module))
            ptext = f'"$(cat {source})"' if source else shlex.quote(text)
            raise PipelineError(f"{stage}: pipeline failed:\n{diagnostics(e)}\nreproduce with:\n"
                                f"  mlir-opt --pass-pipeline={ptext} {path}") from None
    return out
