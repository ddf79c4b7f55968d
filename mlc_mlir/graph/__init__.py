"""Graph-level passes on Modules: fusion by pattern kind, constant folding, DCE, CSE,
Python rewrite patterns and library dispatch. Each pass maps a Module to a new Module. The
layout stage's rewrites are in :mod:`mlc_mlir.pipeline.layout_passes`, the lowering
preparation of the compile stages in :mod:`mlc_mlir.pipeline.prepare_passes`."""

from .cse import CommonSubexprElimination  # noqa: F401
from .dce import DeadCodeElimination, RemoveUnusedFunctions  # noqa: F401
from .dispatch_library import DispatchLibrary, LowerCallLibrary  # noqa: F401
from .fold_constant import FoldConstant  # noqa: F401
from .fuse_ops import FuseOps, outline  # noqa: F401
from .zero_size import FoldZeroSizeOps  # noqa: F401
from .op_kinds import op_kind  # noqa: F401
from .pass_manager import PASS_REGISTRY, Pass, PassManager, Sequential, UpstreamPass  # noqa: F401
from .rewrite import (  # noqa: F401
    Pattern, RewritePatterns, body_ops, elementwise, graph_functions, has_one_use, pattern, producer,
    scalar, top_level_ops, users,
)
