"""Creation of MLIR contexts with the project's dialects loaded.

Each :class:`~mlc_mlir.ir.module.Module` owns one context (no global context). The ``mlc``
dialect (``dialects/mlc.irdl.mlir``, IRDL) is loaded into every new context so that modules with
``mlc.call_library`` parse and verify.
"""

from __future__ import annotations

import functools
import os
from typing import List, Optional

from .._mlir import ir, irdl_d

from .._data import DIALECTS_DIR


@functools.lru_cache(maxsize=None)
def _irdl_texts():
    if not os.path.isdir(DIALECTS_DIR):
        return ()
    return tuple(open(os.path.join(DIALECTS_DIR, f)).read()
                 for f in sorted(os.listdir(DIALECTS_DIR)) if f.endswith(".irdl.mlir"))


def dialect_files():
    """Paths of the project's IRDL dialect files (for ``mlir-opt --irdl-file``)."""
    if not os.path.isdir(DIALECTS_DIR):
        return []
    return [os.path.join(DIALECTS_DIR, f) for f in sorted(os.listdir(DIALECTS_DIR))
            if f.endswith(".irdl.mlir")]


def new_context(keepalive: Optional[List[object]] = None) -> ir.Context:
    """A new ``ir.Context`` with all upstream dialects and the project's IRDL dialects loaded.

    Parameters
    ----------
    keepalive : list, optional
        The caller's list of objects that live as long as it uses the context (``Module`` and
        ``GraphBuilder`` own one); the parsed IRDL modules are appended to it.

    Notes
    -----
    The IRDL modules are never stored on the context itself: a context -> module -> context
    reference cycle through nanobind objects is invisible to Python's garbage collector and
    leaked every context (~2.3 MiB each). The loaded dialects' verifiers are built from
    context-owned attributes and do not read the IRDL ops after ``load_dialects`` (checked with
    ``MALLOC_PERTURB_`` and a failing verification after the module is freed), so the owner's
    list is a precaution, not a requirement.
    """
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = False
    with ctx, ir.Location.unknown():
        for text in _irdl_texts():
            m = ir.Module.parse(text)
            irdl_d.load_dialects(m)
            if keepalive is not None:
                keepalive.append(m)
    return ctx
