"""The ONNX converter registry: ``{(domain, op_type) -> [(first opset, last opset, converter)]}``
and the per-node view of its inputs (:class:`NodeInputs`) a converter reads.

A converter is ``fn(node: NodeInputs) -> list of (Tensor | numpy.ndarray)`` (one entry per
node output); it composes :mod:`mlc_mlir.ops` only. Source: TVM Relax ``from_onnx``
(``_get_convert_map``, ``OnnxOpConverter._impl_vN``), ONNX operator spec (opset versions).
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from .. import ops
from ..builder import Tensor
from ..errors import BuildError

Converter = Callable[["NodeInputs"], List[object]]

#: (domain, op_type) -> [(first opset, last opset, converter)], "" is the default ONNX domain.
CONVERTERS: Dict[Tuple[str, str], List[Tuple[int, int, Converter]]] = {}

#: The default-domain opsets this frontend accepts: 9..21 is the target; 22..25 are accepted
#: too because the shipped onnx backend tests are stamped with them and their changes to the
#: ops converted here only add element types (float8, int4, ...), which converters reject;
#: 6..8 because the ``pytorch-operator`` / ``pytorch-converted`` suites are stamped opset 6:
#: the converters handle what differs there (legacy ``broadcast``/``axis`` of binary ops,
#: attributes that later became inputs); 26..28 because in them the converted ops changed
#: only their type sets (Celu, Cast, ReduceLogSum[Exp]) or added Range's ``stash_type``
#: (checked against ``onnx.defs`` schemas of onnx 1.23).
OPSETS = (6, 28)


def register(*op_types: str, opsets: Tuple[int, int] = OPSETS, domain: str = "") -> Callable:
    """Decorator: register ``fn`` for each of ``op_types`` on ``opsets`` (inclusive)."""
    def deco(fn: Converter) -> Converter:
        for op in op_types:
            CONVERTERS.setdefault((domain, op), []).append((opsets[0], opsets[1], fn))
        return fn
    return deco


def lookup(domain: str, op_type: str, opset: int) -> Optional[Converter]:
    """The converter of ``op_type`` at ``opset``, or None."""
    for lo, hi, fn in CONVERTERS.get((domain, op_type), []):
        if lo <= opset <= hi:
            return fn
    return None


class NodeInputs:
    """One node as its converter sees it: inputs (Tensors or static numpy arrays), attributes,
    the opset, and a way to turn an initializer into a named param.

    Parameters
    ----------
    node : onnx.NodeProto
    values : list of (Tensor | numpy.ndarray | None)
        One per node input; None for an omitted optional input.
    attrs : dict
        Attribute name -> Python value (``onnx.helper.get_attribute_value``).
    opset : int
    as_param : callable
        ``as_param(input_index) -> Tensor | None``: an initializer input as a param named like
        it (None for other inputs).
    run_graph : callable, optional
        ``run_graph(graph, feeds) -> list``: convert a subgraph (an attribute of the node) with
        ``feeds`` (name -> value) bound to its inputs, outer-scope names visible; its output
        values in order (see :meth:`run_graph`).
    """

    def __init__(self, node, values, attrs, opset: int, as_param: Callable[[int], Tensor],
                 run_graph: Optional[Callable] = None):
        self.node, self.values, self.attrs, self.opset = node, values, attrs, opset
        self._as_param = as_param
        self._run_graph = run_graph

    def run_graph(self, graph, feeds: Dict[str, object]) -> List[object]:
        """Convert ``graph`` (an If branch, a Loop/Scan body) inline with ``feeds`` bound to
        its inputs (by name); returns its outputs (Tensors or import-time numpy values)."""
        if self._run_graph is None:
            raise self.fail("has a subgraph but no importer to convert it")
        return self._run_graph(graph, feeds)

    def where(self) -> str:
        return f"onnx node {self.node.name or '<unnamed>'!r} ({self.node.op_type})"

    def __len__(self) -> int:
        return len(self.values)

    def has(self, i: int) -> bool:
        return i < len(self.values) and self.values[i] is not None

    def t(self, i: int):
        """Input ``i`` as a Tensor operand (an initializer becomes a param); a value computed
        at import time (Shape, Constant) stays a numpy array, which every op accepts; sizes
        that are symbolic (an object array from Shape) become a tensor of their run-time values
        (:func:`ops.size_array`, int64)."""
        if not self.has(i):
            raise BuildError(f"{self.where()}: input {i} is missing; expected a tensor")
        v = self.values[i]
        if isinstance(v, np.ndarray) and v.dtype == object:
            return ops.size_array(v)
        if isinstance(v, np.ndarray):
            p = self._as_param(i)
            return v if p is None else p
        return v

    def np(self, i: int, arg: str) -> np.ndarray:
        """Input ``i`` as a static numpy array (shapes, axes, pads).

        Raises
        ------
        BuildError
            If the input is computed at run time.
        """
        if not self.has(i):
            raise BuildError(f"{self.where()}: input {i} ('{arg}') is missing")
        v = self.values[i]
        if isinstance(v, Tensor):
            raise BuildError(f"{self.where()}: input {i} ('{arg}') is computed at run time; "
                             f"expected a constant (an initializer or a Constant/Shape result)")
        return v

    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)

    def str_attr(self, name: str, default: str) -> str:
        """A string attribute as ``str`` (ONNX stores them as bytes)."""
        v = self.attrs.get(name, default)
        return v.decode() if isinstance(v, bytes) else v

    def fail(self, what: str) -> BuildError:
        return BuildError(f"{self.where()}: {what}")


# ------------------------------------------------------------------ helpers shared by converters
#: ONNX TensorProto element type (int) -> our dtype; BOOL (9) is carried as int8 0/1.
ONNX_DTYPES = {1: "float32", 11: "float64", 10: "float16", 16: "bfloat16", 3: "int8", 5: "int16",
               6: "int32", 7: "int64", 9: "int8"}
ONNX_BOOL = 9


def shape_of(v) -> tuple:
    """The shape of a converter operand (Tensor or numpy array)."""
    return tuple(v.shape)


def dtype_of(v) -> str:
    """Our dtype of a converter operand (numpy bool reads as int8, the mask dtype)."""
    return v.dtype if isinstance(v, Tensor) else str(np.asarray(v).dtype).replace("bool", "int8")


def np_dtype(v):
    """The numpy dtype to build constants matching ``v`` (bfloat16 constants are float32)."""
    return np.float32 if dtype_of(v) == "bfloat16" else np.dtype(dtype_of(v))


def same_dtype(n: NodeInputs, a, b):
    """Bring a numpy operand to the Tensor operand's dtype (ONNX requires equal dtypes)."""
    if isinstance(a, Tensor) and not isinstance(b, Tensor):  # copy=False keeps a splat view a view
        b = np.asarray(b).astype(a.dtype if a.dtype != "bfloat16" else np.float32, copy=False)
    elif isinstance(b, Tensor) and not isinstance(a, Tensor):
        a = np.asarray(a).astype(b.dtype if b.dtype != "bfloat16" else np.float32, copy=False)
    return a, b


def axes_input(n: NodeInputs, since: int, index: int = 1):
    """The ``axes`` of a node: input ``index`` from opset ``since`` on, else the attribute
    (None when absent)."""
    if n.opset >= since:
        return [int(a) for a in n.np(index, "axes")] if n.has(index) else None
    return n.attr("axes")
