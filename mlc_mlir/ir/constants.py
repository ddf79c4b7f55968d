"""Weights as MLIR attributes: numpy arrays become ``dense_resource`` blobs (never IR text).

The blob keeps a reference to the numpy buffer for the lifetime of the context, so building a
module with 100 MB of weights neither copies them through text nor prints them.
"""

from __future__ import annotations

import re
from typing import Callable, Dict, Sequence, Tuple

import numpy as np

from .._mlir import ir
from . import dtypes


def is_splat_view(array: np.ndarray) -> bool:
    """Whether ``array`` is a zero-stride view of one value (``np.broadcast_to(scalar, shape)``,
    e.g. ONNX ``ConstantOfShape``) with more than one element: it becomes a splat attribute
    and is never materialized."""
    return array.size > 1 and all(s == 0 for s in array.strides)


#: Bytes every ``dense_resource`` buffer starts at a multiple of (:func:`line_aligned`): a cache
#: line of the x86-64 and AArch64 cores, the alignment the blobs are declared with.
CACHE_LINE_ALIGN = 64


def line_aligned(value: np.ndarray) -> np.ndarray:
    """``value`` itself when it is C-contiguous and starts at a multiple of
    :data:`CACHE_LINE_ALIGN` bytes (or is a splat view, :func:`is_splat_view`, or holds at most
    one element), else a C-contiguous copy that does (same dtype, shape and values). numpy's large arrays come from
    ``malloc``'s ``mmap`` blocks, 16 bytes past a page: a weight used in place there (the JIT
    links the buffers, :mod:`mlc_mlir.pipeline.jit_weights`) splits every 64-byte row of a
    packed panel over two cache lines (light ResNet-50, one thread: 92.96 ms wall as it was,
    86.86 ms aligned, 87.56 ms for its exported library;
    ``benchmarks/results/models_cpu_2026-11-27_znver3_session24_jit_aot.txt``). The weights the
    compiler computes (folded constants, Winograd filters, :func:`derived_array`) are aligned
    with it; a user's arrays are used as they are (torch's allocator aligns to 64 bytes)."""
    if value.size <= 1 or is_splat_view(value) or \
            (value.flags.c_contiguous and value.ctypes.data % CACHE_LINE_ALIGN == 0):
        return value
    raw = np.empty(value.nbytes + CACHE_LINE_ALIGN, np.uint8)
    start = -raw.ctypes.data % CACHE_LINE_ALIGN
    out = raw[start:start + value.nbytes].view(value.dtype).reshape(value.shape)
    out[...] = value
    return out


def _elements_attr(array: np.ndarray, blob_name: str) -> Tuple[ir.Attribute, np.ndarray]:
    """``(attribute, buffer)``: an elements attribute holding ``array``, and the array that must
    outlive it. ``DenseElementsAttr`` for scalars, bools and splat views (:func:`is_splat_view`,
    a splat ``dense<v>`` that stores one element); ``DenseResourceElementsAttr`` (named
    ``blob_name``, uniqued by MLIR on collision) otherwise, on a C-contiguous buffer of ``array``
    (``array`` itself where it is one: a caller that wants the weight on cache lines passes a
    :func:`line_aligned` array).

    Needs an active context. Raises ``BuildError`` for unsupported dtypes.
    """
    dtype = dtypes.canonical_dtype(array.dtype)
    if is_splat_view(array) and dtype != "bool":
        t = ir.RankedTensorType.get(list(array.shape), dtypes.to_ir_type(dtype))
        v, et = array[(0,) * array.ndim], dtypes.to_ir_type(dtype)
        elt = ir.IntegerAttr.get(et, int(v)) if isinstance(et, ir.IntegerType) else ir.FloatAttr.get(et, float(v))
        return ir.DenseElementsAttr.get_splat(t, elt), array
    # ascontiguousarray makes a 0-d array 1-d: keep the shape
    arr = np.ascontiguousarray(array, dtype=dtypes.to_numpy_dtype(dtype)).reshape(np.shape(array))
    t = ir.RankedTensorType.get(list(arr.shape), dtypes.to_ir_type(dtype))
    if dtype == "bool":
        return ir.DenseElementsAttr.get(np.packbits(arr.reshape(-1), bitorder="little"), type=t), arr
    if arr.size <= 1:
        return ir.DenseElementsAttr.get(arr, type=t), arr
    return ir.DenseResourceElementsAttr.get_from_buffer(
        memoryview(arr.reshape(-1).view(np.uint8)), blob_name, t, alignment=CACHE_LINE_ALIGN), arr


def resource_name(attr: ir.Attribute) -> str:
    """The blob key of a ``dense_resource<key>`` attribute (MLIR may have uniqued the name asked
    for: ``w`` -> ``w_1``), or ``""`` for any other attribute."""
    text = str(attr)
    if not text.startswith("dense_resource<"):
        return ""
    return text[len("dense_resource<"):text.index(">")]


#: The start of one blob of a ``dialect_resources`` section: its key as attributes print it
#: (bare or quoted) up to the opening ``"0x`` of its hex bytes (a 4-byte alignment, then the data).
_RESOURCE_KEY = re.compile(r'\s*("(?:[^"\\\n]|\\.)*"|[^\s:"]+)\s*:\s*"0x')
#: The opening of the ``builtin`` dialect's blobs, and the separator between two blobs.
_BUILTIN_BLOCK = re.compile(r'dialect_resources\s*:\s*\{(?:.|\n)*?\bbuiltin\s*:\s*\{')
_NEXT_ENTRY = re.compile(r'\s*,')


def parsed_resource_blobs(text: str) -> Dict[str, np.ndarray]:
    """The ``builtin`` dialect's resource blobs of MLIR text (the ``dense_resource`` data of
    its ``{-# dialect_resources: {builtin: {...}} #-}`` section), by key as a
    ``dense_resource<...>`` attribute prints it (:func:`resource_name`): each a C-contiguous
    ``uint8`` array of the blob's bytes (the 4-byte alignment header dropped),
    :func:`line_aligned`. Text without such a section gives ``{}``. MLIR's parser keeps its own
    copy of each blob and its Python API cannot read one back, so a module parsed from text
    (a tuning worker's task, ``mlir-opt`` output) indexes these to read its weights at compile
    time, as the builders' modules do. Source: MLIR's resource section syntax
    (``AsmResourceBlob``: alignment as a little-endian uint32, then the bytes, in hex)."""
    start = text.rfind("{-#")
    block = _BUILTIN_BLOCK.search(text, start) if start >= 0 else None
    out = {}
    m = _RESOURCE_KEY.match(text, block.end()) if block else None
    while m:
        end = text.find('"', m.end())   # the hex is skipped, not scanned by the pattern
        if end < 0:
            break
        out[m.group(1)] = line_aligned(np.frombuffer(bytes.fromhex(text[m.end() + 8:end]), np.uint8))
        sep = _NEXT_ENTRY.match(text, end + 1)   # a comma, else the block's closing brace
        m = _RESOURCE_KEY.match(text, sep.end()) if sep else None
    return out


class Blobs(list):
    """The objects that must outlive a context's IR (numpy buffers behind ``dense_resource``
    blobs, parsed IRDL modules), plus an index of the buffers by blob key, so compile-time
    passes can read a weight back (MLIR's Python API has no accessor for a resource's bytes).

    ``add(array, attr)`` keeps ``array`` alive and indexes it under ``attr``'s key;
    :func:`constant_array` reads any tensor constant. ``derived`` is the store of
    :func:`derived_array` for this IR's weights: its own dict, or one shared with the modules
    of other steps of one model (an importer's ``derived_weights``), so that they compute and
    hold one array per derived weight.
    """

    def __init__(self, items=()):
        super().__init__(items)
        self.by_key: dict = {}
        self.derived: dict = {}

    def add(self, array: np.ndarray, attr: ir.Attribute) -> None:
        """Keep ``array`` (the buffer behind ``attr``) alive; index it when ``attr`` is a
        ``dense_resource``."""
        self.append(array)
        key = resource_name(attr)
        if key:
            self.by_key[key] = array

    def add_parsed(self, text: str) -> None:
        """Keep and index the resource blobs of ``text``, the MLIR text a fresh context's
        module was parsed from (:func:`parsed_resource_blobs`: raw bytes that
        :func:`constant_array` views as each attribute's element type). Only for a fresh
        context: parsing into one that holds blobs may rename the text's keys (``w`` ->
        ``w_1``), which this index would not follow."""
        for key, raw in parsed_resource_blobs(text).items():
            self.append(raw)
            self.by_key[key] = raw

    def constant(self, array: np.ndarray, blob_name: str) -> ir.Attribute:
        """An elements attribute holding ``array`` (a ``dense_resource`` named ``blob_name``, or
        a dense/splat attribute: see :func:`_elements_attr`), its buffer kept alive and indexed
        here. Needs an active context; raises ``BuildError`` for unsupported dtypes."""
        attr, buffer = _elements_attr(array, blob_name)
        self.add(buffer, attr)
        return attr


def derived_array(store: dict, name: str, sources: Sequence[np.ndarray],
                  make: Callable[..., np.ndarray]) -> np.ndarray:
    """``make(*sources)`` (a contiguous result :func:`line_aligned`), computed once per ``name``
    and source buffers (address, shape, strides and dtype of each) in ``store``: the callers that share ``store`` (the imports and
    compiles of several steps of one model) share the array, one copy in memory. ``store``
    keeps the sources alive with the result, so no other buffer can take their addresses
    while the key stands. Source: TVM Relax's ``LiftTransformParams`` (a weight transform
    computed once for every function that reads it)."""
    key = (name,) + tuple((s.__array_interface__["data"][0], s.shape, s.strides, str(s.dtype)) for s in sources)
    if key not in store:
        # cache-line aligned here, once: the modules that share it then use it in place
        result = make(*sources)
        if isinstance(result, np.ndarray) and result.flags.c_contiguous:
            result = line_aligned(result)
        store[key] = (result, tuple(sources))
    return store[key][0]


def constant_array(attr: ir.Attribute, blobs: Blobs):
    """The numpy value of a tensor constant's attribute: ``DenseElementsAttr`` (splat or not,
    bools unpacked) or a ``dense_resource`` indexed in ``blobs`` (a buffer of the builders, or
    the raw bytes of a blob parsed from text, :meth:`Blobs.add_parsed`, viewed as the element
    type); ``None`` when the value is not known here (a resource of text parsed without its
    blobs, bytes that do not match the type, or an unsupported element type)."""
    t = ir.RankedTensorType(attr.type)
    try:
        dtype = dtypes.to_numpy_dtype(dtypes.from_ir_type(t.element_type))
    except Exception:  # an element type with no numpy dtype
        return None
    shape = tuple(t.shape)
    key = resource_name(attr)
    if key:
        arr = blobs.by_key.get(key)
        if arr is None:
            return None
        arr = np.asarray(arr)
        if arr.dtype == np.uint8 and arr.dtype != dtype and arr.nbytes % np.dtype(dtype).itemsize == 0:
            arr = arr.view(dtype)   # the raw bytes of a blob parsed from text
        return arr.reshape(shape) if arr.size == int(np.prod(shape)) else None
    dense = ir.DenseElementsAttr(attr)
    if dense.is_splat:
        v = dense.get_splat_value()
        return np.full(shape, getattr(v, "value", v), dtype=dtype)
    if dtype == np.bool_:
        return None
    return np.array(dense, copy=True).astype(dtype).reshape(shape)
