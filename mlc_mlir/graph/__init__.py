"""Graph-level passes on Modules: fusion by pattern kind, constant folding, DCE, CSE,
Python rewrite patterns and library dispatch. Each pass maps a Module to a new Module."""

from .dce import CommonSubexprElimination, DeadCodeElimination, RemoveUnusedFunctions  # noqa: F401
from .dispatch_library import DispatchLibrary, LowerCallLibrary  # noqa: F401
from .conv_layout import ConvToNHWC  # noqa: F401
from .conv_im2col import ConvToIm2col  # noqa: F401
from .conv_winograd import ConvToWinograd  # noqa: F401
from .pack_matmul import PackMatmulWeights  # noqa: F401
from .specialize_rows import SpecializeUnitRows  # noqa: F401
from .fuse_attention import FuseAttention  # noqa: F401
from .math_approximation import ApproximateMath  # noqa: F401
from .destination_style import (CopyIntoSlices, FillPadBorder, PadToInsertSlice,  # noqa: F401
                                ReadInsertedSlices, WriteReshapedIntoSlices)
from .transpose_propagation import PropagateTransposes  # noqa: F401
from .fold_constant import FoldConstant  # noqa: F401
from .fuse_ops import FuseOps, outline  # noqa: F401
from .zero_size import FoldZeroSizeOps  # noqa: F401
from .op_kinds import op_kind  # noqa: F401
from .pass_manager import PASS_REGISTRY, Pass, PassManager, Sequential, UpstreamPass  # noqa: F401
from .rewrite import (  # noqa: F401
    Pattern, RewritePatterns, body_ops, elementwise, graph_functions, has_one_use, pattern, producer,
    scalar, top_level_ops, users,
)
