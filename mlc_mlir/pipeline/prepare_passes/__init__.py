"""Passes that prepare a scheduled module for lowering, run only by compile stages: the
``math`` stage's polynomial approximations (:class:`ApproximateMath`) and the ``prepare``
stage's destination-passing rewrites of pads and slices (:mod:`.destination_style`), so that
One-Shot Bufferize writes producers into padded buffers in place, and its alignment of the
reduction loops that stream arguments (:mod:`.align_streams`) and the prefetches a schedule
asks of the rows a loop reads ahead (:mod:`.prefetch_rows`)."""

from .align_streams import AlignStreamedReductions  # noqa: F401
from .destination_style import (CopyIntoSlices, FillPadBorder, PadToInsertSlice, ReadInsertedSlices,  # noqa: F401
                                WriteReshapedIntoSlices)
from .edge_copies import CopyEdgeTiles  # noqa: F401
from .fuse_row_loops import FuseRowLoops  # noqa: F401
from .identity_slices import FoldIdentitySlices  # noqa: F401
from .math_approximation import ApproximateMath  # noqa: F401
from .prefetch_rows import PrefetchRows  # noqa: F401
from .returned_reshapes import SinkReturnedReshapes  # noqa: F401
