"""Facts about a schedule's payload ops that the loop-nest model does not carry: how many
results an op has and how often they are used, and whether its body reads iteration indices
(``linalg.index``). Default rules read them to decide what is safe (fusing an epilogue needs a
single use; vectorizing an index-reading body such as ``argmax`` is not supported by the
vectorizer's reduction detection)."""

from __future__ import annotations

import dataclasses
from typing import Dict, Tuple

from ..._mlir import ir
from ...ir.module import OP_NAME_ATTR, Module


@dataclasses.dataclass(frozen=True)
class OpFacts:
    """What the payload says about one named linalg op.

    Attributes
    ----------
    num_results : int
        Results of the op (``argmax`` has two).
    uses : int
        Uses of all its results (a function's ``return`` included).
    reads_index : bool
        Its body has a ``linalg.index``.
    simple_maps : bool
        Every indexing map is a projected permutation, constant-0 results allowed (broadcasts):
        what the linalg vectorizer accepts; ``x[5 - i]`` or ``x[2 * i]`` (from ``te.compute``)
        are not, nor is a body that gathers with ``tensor.extract`` (``ops.take``).
    strides, dilations : tuple of int
        A convolution's or pooling's window attributes (``()`` for other ops).
    gathers : bool
        Its body reads another tensor with ``tensor.extract`` (``ops.take``) and its indexing
        maps are simple: the linalg vectorizer takes it with ``vectorize_nd_extract`` (a read
        whose innermost index is the innermost loop's ``linalg.index`` and whose other indices
        are invariant along it becomes a contiguous ``vector.transfer_read``, any other a
        ``vector.gather``).
    transcendental : bool
        Its body computes a ``math`` function that costs a polynomial or a library call
        (``exp``, ``tanh``, ``log1p``, ``sqrt``...; not ``absf``, ``fma``, rounding): the op is
        bound by arithmetic rather than memory at a vector width that streams.
    """

    num_results: int
    uses: int
    reads_index: bool
    simple_maps: bool = True
    strides: Tuple[int, ...] = ()
    dilations: Tuple[int, ...] = ()
    transcendental: bool = False
    gathers: bool = False


#: ``math`` ops that are one or two instructions (not what :attr:`OpFacts.transcendental` means).
_CHEAP_MATH = frozenset(f"math.{n}" for n in ("absf", "absi", "copysign", "fma", "floor", "ceil",
                                              "round", "roundeven", "trunc"))


def _transcendental(op: ir.Operation) -> bool:
    return any((o.operation.name.startswith("math.") and o.operation.name not in _CHEAP_MATH)
               or _transcendental(o.operation)
               for r in op.regions for b in r.blocks for o in b.operations)


def _reads_index(op: ir.Operation) -> bool:
    for region in op.regions:
        for block in region.blocks:
            for o in block.operations:
                if o.operation.name == "linalg.index" or _reads_index(o.operation):
                    return True
    return False


def _body_extracts(op: ir.Operation) -> bool:
    return any(o.operation.name == "tensor.extract" for r in op.regions for b in r.blocks
               for o in b.operations)


def _simple_maps(op: ir.Operation, gathers_too: bool = False) -> bool:
    if _body_extracts(op) and not gathers_too:
        return False  # a gather (tensor.extract in the body): the vectorizer needs nd-extract
    if "indexing_maps" not in op.attributes:
        return True  # named ops without the attribute: the vectorizer knows their maps
    for attr in ir.ArrayAttr(op.attributes["indexing_maps"]):
        seen = set()
        for e in ir.AffineMapAttr(attr).value.results:
            if isinstance(e, ir.AffineDimExpr):
                pos = e.position
                if pos in seen:
                    return False
                seen.add(pos)
            elif not (isinstance(e, ir.AffineConstantExpr) and e.value == 0):
                return False
    return True


def payload_facts(mod: Module) -> Dict[Tuple[str, str], OpFacts]:
    """``{(func, mlc.name): OpFacts}`` for every named linalg op at the top level of a function.

    Parameters
    ----------
    mod : Module
        The payload (not modified).
    """
    out: Dict[Tuple[str, str], OpFacts] = {}
    for f in mod.defined_functions():
        fname = f.sym_name.value
        for o in f.regions[0].blocks[0].operations:
            op = o.operation
            if not op.name.startswith("linalg.") or OP_NAME_ATTR not in op.attributes:
                continue
            name = ir.StringAttr(op.attributes[OP_NAME_ATTR]).value
            uses = sum(len(list(r.uses)) for r in op.results)
            window = [tuple(int(x) for x in ir.DenseIntElementsAttr(op.attributes[a]))
                      if a in op.attributes else () for a in ("strides", "dilations")]
            out[(fname, name)] = OpFacts(len(op.results), uses, _reads_index(op), _simple_maps(op),
                                         *window, transcendental=_transcendental(op),
                                         gathers=_body_extracts(op) and _simple_maps(op, True))
    return out
