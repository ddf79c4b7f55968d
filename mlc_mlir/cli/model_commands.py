"""``mlc compile MODEL.onnx -o model.so`` and ``mlc run model.so --input x.npy [--bench]``.

``compile`` imports the model (:func:`mlc_mlir.frontends.onnx.from_onnx`), binds its params,
compiles it for the target and exports a shared library; ``run`` loads such a library
(:func:`mlc_mlir.runtime.load_library`), runs it on ``.npy`` inputs and prints the output shapes
and the latency.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..errors import ExecutionError
from ..pipeline import compile as compile_module
from ..runtime import load_library

try:  # the optional extra (pip install 'mlc-mlir[onnx]'); checked when `mlc compile` runs
    from ..frontends.onnx import from_onnx
except ImportError:  # pragma: no cover - depends on the environment
    from_onnx = None


def shape_spec(spec: str) -> Tuple[str, List[int]]:
    """``--input-shape`` value ``name=1,3,224,224`` -> ``("name", [1, 3, 224, 224])`` (an
    argparse ``type``: a malformed spec is a usage error)."""
    name, sep, dims = spec.partition("=")
    try:
        shape = [int(d) for d in dims.split(",")]
    except ValueError:
        shape = []
    if not name or not sep or not shape or any(d < 0 for d in shape):
        raise argparse.ArgumentTypeError(f"{spec!r} is not NAME=D0,D1,... with integer dims >= 0 "
                                         "(e.g. x=1,3,224,224)")
    return name, shape


def _load_npy(path: str) -> np.ndarray:
    """An input array from a ``.npy`` file, refusing pickled objects."""
    try:
        return np.load(path, allow_pickle=False)
    except OSError as e:
        raise ExecutionError(f"mlc run: cannot read input {path}: {e.strerror or e}; expected a .npy "
                             "file written by numpy.save") from e
    except ValueError as e:
        raise ExecutionError(f"mlc run: input {path} is not a plain .npy array ({e}); expected a "
                             "numeric array written by numpy.save (pickled objects are refused)") from e


def compile_model(model: str, output: str, target: str = "cpu",
                  input_shapes: Optional[Sequence[Tuple[str, List[int]]]] = None,
                  winograd: Optional[bool] = None) -> int:
    """``mlc compile``: ONNX file -> shared library at ``output`` (plus ``output.json``);
    ``winograd`` is ``CompileOptions.winograd``: None (default) F(2x2, 3x3) where it pays,
    True (``--winograd``) F(4x4, 3x3) too (faster, but non-finite and huge inputs spread to
    neighbors), False (``--no-winograd``) direct convolutions only."""
    if not model.endswith(".onnx"):
        print(f"error: mlc compile: {model!r} is not a .onnx file; expected MODEL.onnx", file=sys.stderr)
        return 2
    if from_onnx is None:
        print("error: mlc compile imports ONNX models with the onnx package, which is not installed: "
              "pip install 'mlc-mlir[onnx]'", file=sys.stderr)
        return 2
    mod = from_onnx(model, input_shapes=dict(input_shapes or []))
    exe = compile_module(mod, target=target, winograd=winograd)
    path = exe.export_library(output)
    print(f"wrote {path}")
    return 0


def run_model(library: str, inputs: Sequence[str], bench: bool = False, repeat: int = 20) -> int:
    """``mlc run``: load ``library``, run it on the ``.npy`` ``inputs`` (in argument order),
    print each output's shape and dtype and the latency (median of ``repeat`` runs with
    ``--bench``, else the one run)."""
    exe = load_library(library)
    arrays = [_load_npy(p) for p in inputs]
    t0 = time.perf_counter()
    outs = exe(*arrays)
    times = [time.perf_counter() - t0]
    if bench:
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            exe(*arrays)
            times.append(time.perf_counter() - t0)
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    for i, o in enumerate(outs):
        o = np.asarray(o)
        print(f"output {i}: shape {tuple(o.shape)} dtype {o.dtype}")
    label = f"median of {len(times)}" if bench else "one run"
    print(f"latency: {statistics.median(times) * 1e3:.3f} ms ({label})")
    return 0


def add_model_commands(sub) -> None:
    """Add the ``compile`` and ``run`` subparsers to ``mlc``'s subparsers ``sub``."""
    c = sub.add_parser("compile", help="compile an ONNX model to a shared library")
    c.add_argument("model", help="MODEL.onnx")
    c.add_argument("--target", default="cpu", help="compile target (default: cpu)")
    c.add_argument("-o", dest="output", required=True, help="output library, e.g. model.so")
    c.add_argument("--input-shape", action="append", metavar="NAME=D0,D1,...", type=shape_spec,
                   help="static shape for an input with dynamic dims (repeatable)")
    c.add_argument("--winograd", dest="winograd", action="store_const", const=True, default=None,
                   help="Winograd F(4x4, 3x3) too: fewer multiply-adds, but a NaN/inf input "
                        "pixel makes its whole output tile NaN and a huge one perturbs outputs "
                        "that do not read it (default: F(2x2, 3x3), window-local, where it pays)")
    c.add_argument("--no-winograd", dest="winograd", action="store_const", const=False,
                   help="no Winograd: direct (or im2col) 3x3 convolutions")
    c.set_defaults(fn=lambda a: compile_model(a.model, a.output, a.target, a.input_shape, a.winograd))
    r = sub.add_parser("run", help="run a compiled library on .npy inputs")
    r.add_argument("library", help="a library written by mlc compile")
    r.add_argument("--input", action="append", default=[], metavar="X.npy",
                   help="an input array, in argument order (repeatable)")
    r.add_argument("--bench", action="store_true", help="time 20 runs and print the median")
    r.set_defaults(fn=lambda a: run_model(a.library, a.input, a.bench))

