"""``mlc-opt``: an ``mlir-opt``-style driver that knows the project's dialect, pipelines, graph
passes and schedules.

    mlc-opt [INPUT|-] [-o OUT] [--pipeline NAME|FILE] [--pass-pipeline STR]
            [--schedule TRACE.json|SCRIPT.mlir] [--mlc-fuse-ops] [--mlc-fold-constants]
            [--mlc-dce] [--mlc-cse] [--mlc-dispatch-library=relu=env.relu,...]
            [--mlc-lower-call-library] [--mlc-pack-matmul-weights[=NR]] [--mlc-<pass> ...]
            [--print-ir-after-all] [--timing]

Stages run in command-line order, each on the previous one's output; the result is printed
(weights included, so the output parses again). Errors print one line (``mlc-opt: error: ...``)
and exit 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from typing import Callable, List, Optional, Tuple

from .._mlir import ir
from ..errors import MlcError
from ..graph import PASS_REGISTRY
from ..ir.module import Module
from ..pipeline import lower
from ..pipeline import layout_passes, prepare_passes  # noqa: F401  (they register their passes)
from ..pipeline.registry import available
from ..target import get_target
from ..schedule import Schedule, Trace
from ..schedule.cpu_recipes import packed_b_panel
from ..schedule.rules.attention import emit_flash_attention
from ..schedule.transform_script import TransformScript, apply_transform_script


class _Stage(argparse.Action):
    """Appends (kind, value) to ``namespace.stages`` so stages keep their command-line order."""

    def __call__(self, parser, namespace, values, option_string=None):
        stages = getattr(namespace, "stages", None) or []
        stages.append((self.dest, values))
        namespace.stages = stages


def _read_text(path: str, what: str) -> str:
    """The text of ``path`` (``-`` is stdin).

    Raises
    ------
    MlcError
        If the file cannot be read or is not UTF-8 text (a binary file).
    """
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise MlcError(f"cannot read {what} {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise MlcError(f"{what} {path} is not UTF-8 text (byte {e.start}): expected MLIR or JSON") from None


def _graph_pass(name: str, value) -> Callable[[Module], Module]:
    cls = PASS_REGISTRY[name]
    if name == "mlc-dispatch-library":
        mapping = {}
        for item in (value or "").split(","):
            if "=" not in item:
                raise MlcError(f"--mlc-dispatch-library: expected op=kernel[,op=kernel...], got {value!r}")
            k, v = item.split("=", 1)
            mapping[k.strip()] = v.strip()
        return cls(mapping)
    if name == "mlc-pack-matmul-weights":
        return cls(_panel_select(value))
    if name == "mlc-fuse-attention":
        # the fused kernel of the compiler's attention step for the host CPU, default knobs
        return cls(partial(emit_flash_attention, target=get_target("cpu")))
    return cls()


def _panel_select(value: Optional[str]) -> Callable[[int, int, int, str], int]:
    """The ``select`` of ``--mlc-pack-matmul-weights[=NR]``: a fixed panel width ``NR`` (kept
    where it divides N), or the host target's (:func:`~mlc_mlir.schedule.cpu_recipes.packed_b_panel`).

    Raises
    ------
    MlcError
        If ``NR`` is not a positive int.
    """
    if value is None:
        return partial(packed_b_panel, get_target("cpu"))
    try:
        nr = int(value)
    except ValueError:
        nr = 0
    if nr < 1:
        raise MlcError(f"--mlc-pack-matmul-weights: expected a positive panel width NR, got {value!r}")
    return lambda m, n, k, dtype: nr if n % nr == 0 else 0


def _schedule(path: str) -> Callable[[Module], Module]:
    def run(mod: Module) -> Module:
        text = _read_text(path, "--schedule file")
        if path.endswith(".json") or text.lstrip().startswith("{"):
            return Schedule.from_trace(mod, Trace.from_json(text)).mod
        with mod.context:
            try:
                script = ir.Module.parse(text)
            except ir.MLIRError as e:
                raise MlcError(f"--schedule: {path} is not a transform script: {e}") from None
        return apply_transform_script(mod, TransformScript(script, mod.context))
    return run


def build_stages(stages: List[Tuple[str, object]]) -> List[Tuple[str, Callable[[Module], Module]]]:
    """Turn parsed ``(kind, value)`` pairs into named callables Module -> Module."""
    out = []
    for kind, value in stages:
        if kind == "pipeline":
            out.append((f"pipeline {value}", lambda m, v=value: lower(m, v, stage=f"pipeline {v}")))
        elif kind == "pass_pipeline":
            out.append((f"pass-pipeline {value}", lambda m, v=value: lower(m, v, stage="pass-pipeline")))
        elif kind == "schedule":
            out.append((f"schedule {value}", _schedule(value)))
        else:
            name = kind.replace("_", "-")
            out.append((name, _graph_pass(name, value)))
    return out


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``mlc-opt``; returns the exit code."""
    p = argparse.ArgumentParser(prog="mlc-opt", description=__doc__.splitlines()[0])
    p.add_argument("input", nargs="?", default="-", help="MLIR file, or - for stdin")
    p.add_argument("-o", dest="output", default="-", help="output file (default stdout)")
    p.add_argument("--pipeline", action=_Stage, dest="pipeline", metavar="NAME|FILE",
                   help=f"a pipeline from pipelines/ ({', '.join(available())}) or a .pipeline file")
    p.add_argument("--pass-pipeline", action=_Stage, dest="pass_pipeline", metavar="STR",
                   help="an upstream pass pipeline, e.g. 'builtin.module(canonicalize)'")
    p.add_argument("--schedule", action=_Stage, dest="schedule", metavar="FILE",
                   help="apply a trace (JSON from Trace.as_json) or a transform script (.mlir)")
    for name, cls in sorted(PASS_REGISTRY.items()):
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        if name == "mlc-dispatch-library":
            p.add_argument(f"--{name}", action=_Stage, dest=name.replace("-", "_"), metavar="OP=KERNEL,...", help=doc)
        elif name == "mlc-pack-matmul-weights":
            p.add_argument(f"--{name}", action=_Stage, dest=name.replace("-", "_"), nargs="?", metavar="NR",
                           help=doc + " (NR: panel width; default: the host CPU's)")
        else:
            p.add_argument(f"--{name}", action=_Stage, dest=name.replace("-", "_"), nargs=0, help=doc)
    p.add_argument("--list-pipelines", action="store_true", help="print the pipeline names and exit")
    p.add_argument("--print-ir-after-all", action="store_true", help="print the IR after each stage (stderr)")
    p.add_argument("--timing", action="store_true", help="print each stage's wall time (stderr)")
    p.set_defaults(stages=[])
    args = p.parse_args(argv)
    if args.list_pipelines:
        print("\n".join(available()))
        return 0
    try:
        mod = Module.parse(_read_text(args.input, "input"))
        timings = []
        for name, stage in build_stages(args.stages):
            t0 = time.perf_counter()
            mod = stage(mod)
            timings.append((name, time.perf_counter() - t0))
            if args.print_ir_after_all:
                print(f"// -----// IR Dump After {name} //----- //\n{mod.to_text(elide_weights=True)}",
                      file=sys.stderr)
    except MlcError as e:
        print(f"mlc-opt: error: {e}", file=sys.stderr)
        return 1
    if args.timing:
        for name, t in timings:
            print(f"{t * 1e3:10.2f} ms  {name}", file=sys.stderr)
    out = mod.to_text()
    if args.output == "-":
        sys.stdout.write(out if out.endswith("\n") else out + "\n")
        return 0
    try:
        with open(args.output, "w") as f:
            f.write(out)
    except OSError as e:
        print(f"mlc-opt: error: cannot write {args.output}: {e.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
