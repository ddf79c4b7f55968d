"""The rewrites of the ``layout`` stage (:mod:`mlc_mlir.pipeline.layout`): graph passes that
change data layouts and algorithms where the schedule rules ask for them (NHWC convolutions,
transposes propagated until they cancel, projections of one input merged, Winograd and im2col convolutions, packed matmul
weights, attention fused into one function, unit-row versions of dynamic matmuls). Each is
registered with ``mlc-opt``; its ``select`` callable is where a rule's decision comes in."""

from .conv_grouped import GroupedConvToBatchMatmul  # noqa: F401
from .conv_depthwise import DepthwiseToNHWC  # noqa: F401
from .conv_im2col import ConvToIm2col  # noqa: F401
from .conv_nhwc import ConvToNHWC  # noqa: F401
from .conv_winograd import ConvToWinograd  # noqa: F401
from .fuse_attention import FuseAttention  # noqa: F401
from .merge_projections import MergeProjections  # noqa: F401
from .pack_matmul import PackMatmulWeights  # noqa: F401
from .pool_nhwc import PoolToNHWC  # noqa: F401
from .reshape_propagation import PropagateReshapes  # noqa: F401
from .specialize_rows import SpecializeUnitRows  # noqa: F401
from .transpose_propagation import PropagateTransposes  # noqa: F401
