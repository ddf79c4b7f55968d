"""``CompileOptions``: everything that decides what :func:`mlc_mlir.compile` produces, frozen.

Its hash is the cache key of a compiled artifact (Triton's backend options, JAX's compile
options): two compilations of the same module with equal options give the same code. ``dump_ir``
only says where to write the stages' IR, so it takes no part in equality or the hash.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from ..errors import PipelineError
from ..target import Target, get_target

#: The values of :attr:`CompileOptions.outline_nests`.
OUTLINE_CHOICES = ("auto", "always", "never")


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """Options of :func:`mlc_mlir.compile`.

    Attributes
    ----------
    target : Target
        The machine to compile for (``get_target("cpu")`` is the host).
    threads : int or None
        OpenMP threads for ``scf.forall`` loops (``convert-scf-to-openmp{num-threads}``); None
        leaves it to the OpenMP runtime (one per core, or ``OMP_NUM_THREADS``).
    flush_denormals : bool
        Run with x86 MXCSR FTZ|DAZ set (see :mod:`mlc_mlir.pipeline.denormals`).
    approximate_math : bool
        CPU: replace f32 ``math.exp`` / ``erf`` / ``tanh`` / ``log`` / ``log1p`` / ``expm1`` by
        vectorizable polynomials (:class:`mlc_mlir.pipeline.prepare_passes.math_approximation.ApproximateMath`:
        1-2 ulp, 4.5e-7 absolute for erf) instead of one libm call per vector lane. Default True.
    winograd : bool or None
        CPU: which stride-1 3x3 convolutions that
        :func:`~mlc_mlir.schedule.rules.conv_strategy.winograd_tile` picks become Winograd
        F(m x m, 3 x 3) ones (``layout_passes.ConvToWinograd``: 2.25x fewer multiply-adds for
        m = 2, 4x for m = 4). None (default): F(2x2, 3x3) only
        (:data:`~mlc_mlir.schedule.rules.conv_strategy.WINDOW_LOCAL_TILES`), whose outputs
        depend on their 3x3 windows only, as a direct convolution's (PyTorch's semantics): a NaN
        or a pixel of huge magnitude reaches only the outputs whose window reads it, with an
        error against float64 (3-5e-7 of the output's scale) below the direct loops' (about
        1e-6); an infinity gives a non-finite output where the direct convolution does, NaN
        where it may give +-inf (the transforms add it with both signs). True: F(4x4, 3x3)
        too, where it saves more: its error is about 5e-6, and each output mixes its whole
        6 x 6 input tile, so a NaN or infinity in the input becomes NaN in every output of the
        tiles that read it, and a pixel of huge magnitude (1e30) adds an error proportional
        to it to outputs that do not read it; use it for inputs known to be finite and of
        moderate range. False: no Winograd (direct or im2col convolutions). A tuning
        ``database`` whose record chose Winograd for a convolution (``mlc.tune``'s algorithm
        decision, checked against the direct loops within ``rtol = atol = 1e-3``) applies it
        even with False, with these semantics for that convolution; tune with
        ``winograd=False`` to keep every convolution direct.
    opt_level : int
        LLVM optimization level of the JIT and of ``llc``: 0, 1, 2 or 3. The default, 2 (the
        default of MLIR's ExecutionEngine), runs the scheduled code as fast as 3 (ResNet-18,
        ResNet-50, SqueezeNet, BERT: the code is vectorized and unrolled before LLVM) and LLVM
        takes 0.4-0.6x the time of 3 (ShuffleNet 1.8 vs 3.0 CPU s, DenseNet-121 99 vs 234;
        ``benchmarks/results/compile_time_2026-11-26_znver5_compile-dedupe.txt``).
    schedule : str
        ``"default"``: functions nobody scheduled get the target's default schedule (by op kind);
        ``"none"``: they lower as plain loops (see :mod:`mlc_mlir.pipeline.scheduling`).
    pipeline : str or None
        Overrides the target's lowering pipeline (a name in ``pipelines/``, a path, or
        ``builtin.module(...)`` text).
    database : object or None
        A tuning database (``query_best_trace(workload, target_key, names=, func_name=)``, e.g.
        from :func:`mlc_mlir.tune`): a record that beats the default schedule of a unit replaces
        it, in place (:mod:`mlc_mlir.pipeline.scheduling`); part of the key by identity.
    outline_nests : str
        CPU: whether the ``lower`` stage moves each top-level loop nest of a graph function
        into a ``noinline`` function of its own (:mod:`mlc_mlir.pipeline.outline_nests`), so that
        LLVM compiles one kernel per function. ``"auto"`` (default): only in functions of at
        least :data:`~mlc_mlir.pipeline.outline_nests.OUTLINE_MIN_OPS` operations, where LLVM's
        time grows faster than the function's size (Inception, DenseNet); smaller functions keep
        their nests inline, which runs 1-3% faster. ``"always"``: every function holding two
        nests or more; ``"never"``: none. The outputs are the same bits either way.
    dump_ir : str or None
        Folder that receives each stage's IR (``00-graph.mlir`` ...); not part of the key.

    Raises
    ------
    PipelineError
        On construction, for an opt level outside 0-3, threads that are not a positive int,
        a non-bool ``flush_denormals``, ``approximate_math`` or ``winograd``, an
        ``outline_nests`` other than ``"auto"``, ``"always"`` or ``"never"``, or an unknown target.
    """

    target: Target
    threads: Optional[int] = None
    flush_denormals: bool = False
    approximate_math: bool = True
    winograd: Optional[bool] = None
    opt_level: int = 2
    schedule: str = "default"
    pipeline: Optional[str] = None
    database: Optional[object] = None
    outline_nests: str = "auto"
    dump_ir: Optional[str] = dataclasses.field(default=None, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "target", get_target(self.target))
        if type(self.opt_level) is not int or not 0 <= self.opt_level <= 3:
            raise PipelineError(f"compile: opt_level={self.opt_level!r}; expected 0, 1, 2 or 3")
        if self.threads is not None and (type(self.threads) is not int or self.threads < 1):
            raise PipelineError(f"compile: threads={self.threads!r}; expected an int >= 1 or None")
        if not isinstance(self.flush_denormals, bool):
            raise PipelineError(f"compile: flush_denormals={self.flush_denormals!r}; expected a bool")
        if not isinstance(self.approximate_math, bool):
            raise PipelineError(f"compile: approximate_math={self.approximate_math!r}; expected a bool")
        if self.winograd is not None and not isinstance(self.winograd, bool):
            raise PipelineError(f"compile: winograd={self.winograd!r}; expected a bool or None")
        if self.schedule not in ("default", "none"):
            raise PipelineError(f"compile: schedule={self.schedule!r}; expected 'default' or 'none'")
        if self.outline_nests not in OUTLINE_CHOICES:
            raise PipelineError(f"compile: outline_nests={self.outline_nests!r}; expected one of "
                                + ", ".join(repr(c) for c in OUTLINE_CHOICES))
        if self.pipeline is not None and not isinstance(self.pipeline, str):
            raise PipelineError(f"compile: pipeline={self.pipeline!r}; expected a name, path or "
                                "pipeline text")
        if self.dump_ir is not None:
            if not isinstance(self.dump_ir, (str, os.PathLike)):
                raise PipelineError(f"compile: dump_ir={self.dump_ir!r}; expected a folder path")
            try:
                os.makedirs(self.dump_ir, exist_ok=True)
            except OSError as e:
                raise PipelineError(f"compile: cannot create dump_ir folder {self.dump_ir}: "
                                    f"{e.strerror}") from None
            if not os.access(self.dump_ir, os.W_OK):
                raise PipelineError(f"compile: dump_ir folder {self.dump_ir} is not writable")
