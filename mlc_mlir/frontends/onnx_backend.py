"""An ``onnx.backend.base.Backend`` over :func:`~.onnx.from_onnx` so that the official
``onnx.backend.test.BackendTest`` runner drives the ONNX node/model conformance cases.

The compile step lives above this layer (``mlc_mlir.pipeline``): :func:`make_backend` receives
it as a callable (``make_backend(mlc.compile)``) instead of importing it.

Source: ONNX ``onnx/backend/base.py``, ``onnx/backend/test/runner``; TVM's and
onnxruntime's backend adapters.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from .onnx import check_model, from_onnx


#: op_type -> input indices whose value the converters need at import time (shapes, axes,
#: pads, repeats); every ``Reduce*`` op's input 1 (axes) too.
_STATIC_OPERANDS = {"Reshape": (1,), "Expand": (1,), "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,),
                    "Pad": (1, 2, 3), "Clip": (1, 2), "Slice": (1, 2, 3, 4), "Tile": (1,),
                    "CumSum": (1,), "Trilu": (1,), "Range": (0, 1, 2), "ConstantOfShape": (0,), "Dropout": (1, 2),
                    "CastLike": (1,), "Resize": (1, 2, 3),
                    "TopK": (1,), "OneHot": (1,), "CenterCropPad": (1,), "CumProd": (1,), "Col2Im": (1, 2),
                    "AffineGrid": (1,), "Compress": (1,), "Upsample": (1,),
                    "DFT": (1, 2), "STFT": (1, 3), "HannWindow": (0,), "HammingWindow": (0,), "BlackmanWindow": (0,),
                    "Loop": (0, 1)}


def _is_static(op_type: str, index: int) -> bool:
    return index in _STATIC_OPERANDS.get(op_type, ()) or (op_type.startswith("Reduce") and index == 1)


def _reads(node) -> List[str]:
    """The names ``node`` reads: its inputs and, for If/Loop/Scan, every name its subgraphs'
    nodes read (outer-scope values included)."""
    names = list(node.input)
    for a in node.attribute:
        for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            for inner in g.node:
                names.extend(_reads(inner))
    return names


def static_inputs(model: onnx.ModelProto) -> List[str]:
    """Graph inputs whose value the converters need at import time, directly (an operand in
    ``_STATIC_OPERANDS``) or through shape arithmetic (any input of a node whose output is
    needed, except the data input of ``Shape``/``Size``, of which only the shape is read): the
    backend specializes the model on their values at ``run`` (``from_onnx(input_values=...)``).
    Inputs no node reads (a ``like`` of an expanded CastLike) are bound the same way."""
    needed = {name for node in model.graph.node for i, name in enumerate(node.input)
              if name and _is_static(node.op_type, i)}
    for node in reversed(model.graph.node):
        if node.op_type not in ("Shape", "Size") and any(o in needed for o in node.output):
            needed.update(name for name in _reads(node) if name)
    used = {name for node in model.graph.node for name in _reads(node)} | {vo.name for vo in model.graph.output}
    inits = {t.name for t in model.graph.initializer}  # inputs with a default: never fed
    return [vi.name for vi in model.graph.input
            if vi.name not in inits and (vi.name in needed or vi.name not in used)]


class MlcBackendRep(BackendRep):
    """A compiled model: ``run(inputs)`` returns its outputs in graph order (BOOL outputs,
    carried as int8, are returned as numpy bool). Inputs in :func:`static_inputs` are bound
    at ``run``: one executable per distinct set of their values."""

    def __init__(self, model: onnx.ModelProto, compile_fn: Callable):
        inits = {t.name for t in model.graph.initializer}
        self.model, self.compile_fn = model, compile_fn
        self.input_names = [vi.name for vi in model.graph.input if vi.name not in inits]
        self.static = static_inputs(model)
        self.bool_outputs = [vo.type.tensor_type.elem_type == onnx.TensorProto.BOOL
                             for vo in model.graph.output]
        self.cache: Dict[tuple, Any] = {}
        check_model(model)  # unsupported ops fail at prepare even when the import waits for run
        if not self.static:
            self.cache[()] = compile_fn(from_onnx(model))

    def _executable(self, feeds: Dict[str, np.ndarray]):
        key = tuple((n, feeds[n].tobytes()) for n in self.static)
        if key not in self.cache:
            values = {n: feeds[n] for n in self.static}
            self.cache[key] = self.compile_fn(from_onnx(self.model, input_values=values))
        return self.cache[key]

    def run(self, inputs: Any, **kwargs: Any) -> Tuple[np.ndarray, ...]:
        if isinstance(inputs, dict):
            inputs = [inputs[n] for n in self.input_names]
        elif isinstance(inputs, np.ndarray):
            inputs = [inputs]
        feeds = {n: np.asarray(a) for n, a in zip(self.input_names, inputs)}
        exe = self._executable(feeds)
        arrays = [a.astype(np.int8) if a.dtype == np.bool_ else a
                  for n, a in feeds.items() if n not in self.static]
        outs = exe(*arrays)
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        return tuple(np.asarray(o).astype(np.bool_) if b else np.asarray(o)
                     for o, b in zip(outs, self.bool_outputs))


def make_backend(compile_fn: Callable) -> type:
    """A Backend class that imports with :func:`from_onnx`, binds params and compiles with
    ``compile_fn(module) -> Executable`` (``mlc_mlir.compile``).

    Raises (at ``prepare``) ``BuildError`` from the import, ``PipelineError`` from the compile.
    """

    class MlcBackend(Backend):
        @classmethod
        def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> MlcBackendRep:
            return MlcBackendRep(model, compile_fn)

        @classmethod
        def run_model(cls, model, inputs, device: str = "CPU", **kwargs: Any):
            return cls.prepare(model, device).run(inputs)

        @classmethod
        def supports_device(cls, device: str) -> bool:
            return device == "CPU"

    return MlcBackend
