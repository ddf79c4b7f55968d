"""Creation of MLIR contexts with the project's dialects loaded.

Each :class:`~mlc_mlir.ir.module.Module` owns one context (no global context). The ``mlc``
dialect (``dialects/mlc.irdl.mlir``, IRDL) is loaded into every new context so that modules with
``mlc.call_library`` parse and verify.
"""

from __future__ import annotations

import functools
import os

from .._mlir import ir, irdl_d

#: Folder of the project's IRDL dialect definitions.
DIALECTS_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "dialects")


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


def new_context() -> ir.Context:
    """A new ``ir.Context`` with all upstream dialects and the project's IRDL dialects loaded."""
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = False
    with ctx, ir.Location.unknown():
        for text in _irdl_texts():
            m = ir.Module.parse(text)
            irdl_d.load_dialects(m)
            # The dialect definitions must outlive the context's use of them.
            ctx._mlc_irdl_modules = getattr(ctx, "_mlc_irdl_modules", []) + [m]
    return ctx
