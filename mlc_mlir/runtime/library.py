"""Loading an AOT-compiled shared library (``.so``) and its metadata, without MLIR.

An exported library is three files: ``path`` (the ``.so``, ``_mlir_ciface_<name>`` entry points),
``path + ".json"`` (format ``mlc-library-v2``: the target CPU and instruction-set features the
code was generated for, each function's argument and result specs, the ``.so``'s size and
SHA-256) and, when the module has parameters, ``path + ".params.npz``.
:func:`mlc_mlir.pipeline.aot.export_library` writes them (it compiles; the runtime never does);
:func:`load_library` checks them and calls the entry points through ctypes (TVM's
``runtime.load_module``).
"""

from __future__ import annotations

import _ctypes
import atexit
import ctypes
import hashlib
import json
import os
import shutil
import tempfile
from typing import Dict, Mapping, NamedTuple, Optional, Tuple

import numpy as np

from ..errors import ExecutionError, MlcError
from ..ir import dtypes
from ..ir.module import FunctionSignature, TensorSpec
from ..ir.symbolic import parse
from ..target import Target, host_mismatch
from .cuda import DEVICE_SUFFIX, require_cuda
from .executable import Executable, Function
from .memref import PackedArgs

#: The metadata format written beside each ``.so``.
LIBRARY_FORMAT = "mlc-library-v2"


#: The symbol of the ``.so`` that holds the same metadata (a NUL-terminated JSON string), so a
#: ``.json`` that was edited or belongs to another build is detected at load time.
METADATA_SYMBOL = "mlc_library_metadata"


#: Devices a library can run on besides the host CPU (``"device"`` in the metadata), with the
#: runtime libraries its host code calls (loaded from beside the ``.so`` when found there).
DEVICE_RUNTIMES = {"cuda": ("libmlir_cuda_runtime.so",)}


def _shape(spec) -> list:
    """A spec's shape for the metadata: a symbolic size as its text ("seq", "2*seq")."""
    return [d if isinstance(d, int) else str(d) for d in spec.shape]


def _metadata(signatures: Mapping[str, FunctionSignature], target: Target,
              device: Optional[str]) -> dict:
    meta = {"format": LIBRARY_FORMAT,
            "target": {"cpu": target.cpu, "features": list(target.features)},
            "functions": {
                name: {"args": [vars(a) | {"shape": _shape(a)} for a in sig.args],
                       "results": [vars(r) | {"shape": _shape(r)} for r in sig.results]}
                | ({"dims": {k: list(v) for k, v in sig.dims.items()}} if sig.dims else {})
                for name, sig in signatures.items()}}
    if device is not None:
        meta["device"] = device
    return meta


def library_metadata(signatures: Mapping[str, FunctionSignature], target: Target,
                     device: Optional[str] = None) -> str:
    """The ``mlc-library-v2`` metadata of ``signatures`` as JSON text (what the ``.so`` embeds
    as :data:`METADATA_SYMBOL`; the ``.json`` adds the file record): ``target``'s CPU and
    features (the instruction set of the code, :attr:`Target.features`) and, for libraries
    whose kernels run on a GPU, ``device`` (a key of :data:`DEVICE_RUNTIMES`)."""
    return json.dumps(_metadata(signatures, target, device), indent=1)


def _file_digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_library_metadata(path: str, signatures: Mapping[str, FunctionSignature],
                           params: Mapping[str, np.ndarray], target: Target,
                           device: Optional[str] = None) -> None:
    """Write ``path + ".json"`` (:func:`library_metadata` plus ``"file"``: the size in bytes
    and SHA-256 of the ``.so`` at ``path``, checked before it is loaded) and, if any,
    ``path + ".params.npz"`` (parameters).

    Raises
    ------
    ExecutionError
        If the files cannot be written or the ``.so`` read (names the path and the OS error).
    """
    try:
        meta = _metadata(signatures, target, device)
        meta["file"] = {"bytes": os.path.getsize(path), "sha256": _file_digest(path)}
        with open(path + ".json", "w") as f:
            f.write(json.dumps(meta, indent=1))
        if params:
            np.savez(path + ".params.npz", **params)
        elif os.path.exists(path + ".params.npz"):
            os.remove(path + ".params.npz")
    except OSError as e:
        raise ExecutionError(f"export_library: cannot write {path}.json: {e.strerror}") from None


def _spec(path: str, fname: str, d, kind: str) -> TensorSpec:
    where = f"load_library: {path}.json: function '{fname}' {kind}"
    if not isinstance(d, dict):
        raise ExecutionError(f"{where}: expected an object, got {type(d).__name__}")
    missing = [k for k in ("name", "shape", "dtype") if k not in d]
    if missing:
        raise ExecutionError(f"{where} lacks {missing}")
    shape = d["shape"]
    if not isinstance(shape, list) or not all(isinstance(s, str) or isinstance(s, int) and not isinstance(s, bool)
                                              and s >= 0 for s in shape):
        raise ExecutionError(f"{where} '{d['name']}' has shape {shape!r}; expected a list of ints >= 0 "
                             "and symbolic sizes (str)")
    try:
        shape = [parse(s) if isinstance(s, str) else s for s in shape]
    except MlcError as e:
        raise ExecutionError(f"{where} '{d['name']}': {e}") from None
    if d["dtype"] not in dtypes.ALL_DTYPES:
        raise ExecutionError(f"{where} '{d['name']}' has dtype {d['dtype']!r}; expected one of "
                             f"{sorted(dtypes.ALL_DTYPES)}")
    check = d.get("check")
    return TensorSpec(str(d["name"]), tuple(shape), d["dtype"], bool(d.get("is_param", False)),
                      None if check is None else str(check))


class LibraryMetadata(NamedTuple):
    """The parsed metadata of a library: what the ``.so`` embeds (``signatures``, ``device``,
    ``target``: ``(cpu, features)``) and, from the ``.json`` only, ``file``: ``(bytes,
    sha256)`` of the ``.so``."""

    signatures: Dict[str, FunctionSignature]
    device: Optional[str]
    target: Tuple[str, Tuple[str, ...]]
    file: Optional[Tuple[int, str]]

    def embedded(self):
        """The fields the ``.so``'s :data:`METADATA_SYMBOL` holds too."""
        return self.signatures, self.device, self.target


def _parse_metadata(path: str, text: str) -> LibraryMetadata:
    """The :class:`LibraryMetadata` of an ``mlc-library-v2`` text."""
    try:
        meta = json.loads(text)
    except ValueError as e:
        raise ExecutionError(f"load_library: {path}.json is not JSON: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != LIBRARY_FORMAT \
            or not isinstance(meta.get("functions"), dict):
        found = meta.get("format") if isinstance(meta, dict) else None
        raise ExecutionError(f"load_library: {path}.json is not an {LIBRARY_FORMAT} file "
                             f"(format {found!r})" + ("; it was written by an older mlc-mlir "
                                                      "that recorded no target: export it again"
                                                      if found == "mlc-library-v1" else ""))
    device = meta.get("device")
    if device is not None and device not in DEVICE_RUNTIMES:
        raise ExecutionError(f"load_library: {path}.json has device {device!r}; expected one of "
                             f"{sorted(DEVICE_RUNTIMES)} or none")
    target = meta.get("target")
    if not isinstance(target, dict) or not isinstance(target.get("cpu"), str) \
            or not isinstance(target.get("features"), list) \
            or not all(isinstance(f, str) for f in target["features"]):
        raise ExecutionError(f"load_library: {path}.json: 'target' must be an object with 'cpu' "
                             f"(a string) and 'features' (a list of strings); got {target!r}")
    file = meta.get("file")
    if file is not None:
        if not isinstance(file, dict) or not isinstance(file.get("bytes"), int) \
                or not isinstance(file.get("sha256"), str):
            raise ExecutionError(f"load_library: {path}.json: 'file' must be an object with "
                                 f"'bytes' (an int) and 'sha256' (a string); got {file!r}")
        file = (file["bytes"], file["sha256"])
    sigs = {}
    for name, d in meta["functions"].items():
        if not isinstance(d, dict) or not isinstance(d.get("args"), list) \
                or not isinstance(d.get("results"), list):
            raise ExecutionError(f"load_library: {path}.json: function '{name}' needs 'args' and "
                                 "'results' lists")
        dims = d.get("dims", {})
        if not isinstance(dims, dict) or not all(isinstance(v, list) and len(v) == 2 for v in dims.values()):
            raise ExecutionError(f"load_library: {path}.json: function '{name}' has dims {dims!r}; "
                                 "expected {name: [min, max or null]}")
        sigs[name] = FunctionSignature(
            name, tuple(_spec(path, name, a, "argument") for a in d["args"]),
            tuple(_spec(path, name, r, "result") for r in d["results"]),
            {k: (v[0], v[1]) for k, v in dims.items()})
    return LibraryMetadata(sigs, device, (target["cpu"], tuple(target["features"])), file)


def _check_file(path: str, private: str, file: Optional[Tuple[int, str]]) -> None:
    """Compare the copy ``private`` of the library at ``path`` with the size and SHA-256 its
    ``.json`` recorded: ``dlopen`` of a truncated ``.so`` maps segments past the end of the
    file and the process dies with SIGBUS on the first access."""
    if file is None:
        raise ExecutionError(f"load_library: {path}.json records no 'file' (size and sha256 of "
                             "the .so); export the library again")
    size, digest = file
    actual = os.path.getsize(private)
    if actual != size:
        raise ExecutionError(f"load_library: {path} is {actual} bytes; export_library wrote "
                             f"{size} (truncated or replaced?); export the library again")
    if _file_digest(private) != digest:
        raise ExecutionError(f"load_library: {path} has {size} bytes as exported but another "
                             "SHA-256 than its .json records (damaged or replaced); export the "
                             "library again")


def _load_device_runtime(path: str, device: str) -> list:
    """Probe the device's driver, then load its runtime libraries found beside ``path``
    (``RTLD_GLOBAL``: the ``.so``'s own dependency then resolves to them; elsewhere its rpath
    finds the MLIR wheel's copy)."""
    require_cuda(f"load_library({os.path.basename(path)})")
    out = []
    for name in DEVICE_RUNTIMES[device]:
        beside = os.path.join(os.path.dirname(path), name)
        if os.path.isfile(beside):
            try:
                out.append(ctypes.CDLL(beside, mode=ctypes.RTLD_GLOBAL))
            except OSError as e:
                raise ExecutionError(f"load_library: cannot load {beside}: {e}") from None
    return out


def load_library(path: str) -> Executable:
    """Load a library written by :meth:`Executable.export_library` (no MLIR, no recompiling).

    The ``.so`` is loaded from a private copy, so that a library exported again to the same path
    is really reloaded (``dlopen`` caches by path and would return the first one).

    Parameters
    ----------
    path : str
        The ``.so`` path given to ``export_library``.

    Returns
    -------
    Executable

    Raises
    ------
    ExecutionError
        If the library or its ``.json`` metadata is missing, unreadable, not in the
        ``mlc-library-v2`` format (incomplete entries, bad shapes or dtypes) or different from the
        metadata compiled into the ``.so`` (a tampered ``.json``); if the ``.so`` has another
        size or SHA-256 than the ``.json`` records (truncated, damaged: checked before it is
        mapped); if its code needs CPU features this machine lacks (names them; checked
        before it is loaded); if a parameter is
        missing from ``.params.npz`` or disagrees with its spec, or if an entry point is absent;
        for a CUDA library (``"device": "cuda"``), if no CUDA driver or GPU is present (probed
        before the ``.so`` is loaded: its host code would abort the process).

    A device library is unloaded at interpreter exit (:func:`_close_at_exit`); its functions
    raise ``ExecutionError`` after that.
    """
    path = os.path.abspath(path)
    try:
        with open(path + ".json") as f:
            text = f.read()
    except OSError as e:
        raise ExecutionError(f"load_library: cannot load {path}: cannot read {path}.json: "
                             f"{e.strerror}") from None
    meta = _parse_metadata(path, text)
    sigs, device = meta.signatures, meta.device
    if not os.path.isfile(path):
        raise ExecutionError(f"load_library: {path} does not exist")
    foreign = host_mismatch(*meta.target)
    if foreign:
        raise ExecutionError(f"load_library: {path}: {foreign}")
    # a CUDA library needs the driver: without it, its kernels would abort the process
    runtimes = _load_device_runtime(path, device) if device is not None else []
    tmp = tempfile.mkdtemp(prefix="mlc-lib-")
    private = os.path.join(tmp, os.path.basename(path))
    try:
        shutil.copy(path, private)
        _check_file(path, private, meta.file)   # the copy is what is loaded
        lib = ctypes.CDLL(private)
    except OSError as e:
        raise ExecutionError(f"load_library: cannot load {path}: {e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the mapping stays valid after unlink
    try:
        embedded = ctypes.c_char_p.in_dll(lib, METADATA_SYMBOL).value.decode()
    except ValueError:
        raise ExecutionError(f"load_library: {path} has no {METADATA_SYMBOL}; it was not written "
                             "by export_library") from None
    if _parse_metadata(path, embedded).embedded() != meta.embedded():
        raise ExecutionError(f"load_library: {path}.json does not match the target and "
                             f"signatures compiled into {os.path.basename(path)} (edited, or from "
                             "another export); export the library again")
    closed: list = []   # non-empty once a device library was closed at exit
    if device is not None:
        atexit.register(_close_at_exit, lib, closed)
    params: Dict[str, np.ndarray] = {}
    if os.path.exists(path + ".params.npz"):
        with np.load(path + ".params.npz") as z:
            params = {k: z[k] for k in z.files}
    functions = {}
    for name, sig in sigs.items():
        for a in sig.args:
            if a.is_param and a.name in params:
                p = params[a.name]
                if p.shape != a.shape or p.dtype != dtypes.to_numpy_dtype(a.dtype):
                    raise ExecutionError(f"load_library: parameter '{a.name}' in {path}.params.npz is "
                                         f"{p.dtype}{p.shape}; the metadata says {a.dtype}{a.shape}")
        try:
            cfunc = getattr(lib, f"_mlir_ciface_{name}")
        except AttributeError:
            raise ExecutionError(f"load_library: {path} has no symbol _mlir_ciface_{name}") from None
        invokers = [_invoker(cfunc, sig, closed)]
        if device == "cuda":   # the same kernels on device buffers (Function.on_device)
            try:
                invokers.append(_invoker(getattr(lib, f"_mlir_ciface_{name}{DEVICE_SUFFIX}"), sig,
                                         closed))
            except AttributeError:
                raise ExecutionError(f"load_library: {path} has no symbol _mlir_ciface_{name}"
                                     f"{DEVICE_SUFFIX}; export it again") from None
        functions[name] = Function(sig, invokers[0], params,
                                   device_invoke=invokers[1] if len(invokers) > 1 else None)
    return Executable(functions, keepalive=(lib, runtimes))


def _close_at_exit(lib: ctypes.CDLL, closed: list) -> None:
    """Unload a device library's ``.so`` (``dlclose``) from Python's ``atexit``, so that its
    destructors (``mgpuModuleUnload`` of each embedded cubin, from ``gpu-module-to-binary``)
    run while the CUDA driver still lives. Left to the process's exit they ran after the
    driver's own exit handler had torn the context down, each printing ``'cuModuleUnload(module)'
    failed``. Marks ``closed``: a later call raises instead of jumping into unmapped code."""
    closed.append(True)
    _ctypes.dlclose(lib._handle)


def _invoker(cfunc, sig: FunctionSignature, closed: list):
    """Call ``cfunc`` (a ``_mlir_ciface_`` entry) with one descriptor pointer per argument;
    raises ``ExecutionError`` once ``closed`` (:func:`_close_at_exit`) is non-empty."""
    cfunc.restype = None
    cfunc.argtypes = [ctypes.c_void_p] * (len(sig.args) + len(sig.results))

    def invoke(packed: PackedArgs) -> None:
        if closed:
            raise ExecutionError(f"{sig.name}: its library was unloaded at interpreter exit")
        cfunc(*packed.pointers)

    return invoke
