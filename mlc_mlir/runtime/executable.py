"""``Executable``: compiled functions called with numpy arrays (the TVM ``runtime.Module`` idea).

Outputs are allocated here with numpy and passed as out-params (``buffer-results-to-out-params``),
so the JIT code allocates no result buffers and nothing leaks; inputs are passed by pointer, never
copied. Arguments are validated (count, dtype, shape, C-contiguity) with ``ExecutionError``; so
are the run-time checks the code reports (results with ``TensorSpec.check``: an index out of
range), which are not returned.
A CUDA function also runs on arrays kept in GPU memory (:meth:`Function.on_device`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import statistics
import threading
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from .._mlir import NativeExecutionEngine
from ..errors import ExecutionError, format_shape
from ..ir import dtypes
from ..ir.module import CHECK_PASSED, FunctionSignature
from .cuda import DEVICE_ALIGNMENT
from .device_array import DeviceArray, as_device_array, synchronize
from .jit_engine import create_engine, initialize_engine
from .memref import PackedArgs, contiguous_strides, data_address, empty_result, out_array_problem
from .size_binder import SizeBinder


@dataclasses.dataclass(frozen=True)
class BenchmarkResult:
    """Timings of repeated calls, in milliseconds per call (TVM's ``time_evaluator`` result).

    ``min_ms``/``median_ms``/``mean_ms`` summarize ``per_repeat_ms``, each the mean of ``number``
    consecutive calls.
    """

    min_ms: float
    median_ms: float
    mean_ms: float
    per_repeat_ms: tuple
    number: int

    def __str__(self) -> str:
        return (f"min {self.min_ms:.4f} ms, median {self.median_ms:.4f} ms "
                f"({len(self.per_repeat_ms)} repeats x {self.number} calls)")


class Function:
    """One compiled function: validates numpy inputs, allocates outputs, calls the native code.

    Parameters
    ----------
    signature : FunctionSignature
        Arguments (inputs and parameters) and results.
    invoke : callable
        ``invoke(packed: PackedArgs)`` runs the native function on the bound descriptors.
    params : mapping
        Values for parameter arguments, used when the caller omits them.
    device_invoke : callable, optional
        ``device_invoke(packed)`` runs the kernels on device buffers (a CUDA function's
        ``<name>__device`` entry); enables :meth:`on_device`.
    """

    def __init__(self, signature: FunctionSignature, invoke: Callable[[PackedArgs], None],
                 params: Optional[Mapping[str, np.ndarray]] = None,
                 device_invoke: Optional[Callable[[PackedArgs], None]] = None):
        self.signature = signature
        self._invoke = invoke
        self._device_invoke = device_invoke
        self._device_params: Dict[str, DeviceArray] = {}
        self._params = dict(params or {})
        self._np_dtypes = [dtypes.to_numpy_dtype(a.dtype) for a in signature.args]
        self._out_dtypes = [dtypes.to_numpy_dtype(r.dtype) for r in signature.results]
        shapes = [a.shape for a in signature.args] + [r.shape for r in signature.results]
        self._local = threading.local()
        self._shapes = shapes
        self._results = tuple(r for r in signature.results if r.check is None)
        self._checks = tuple(r.check for r in signature.results if r.check is not None)
        self._dynamic = signature.is_dynamic
        self._binder = SizeBinder(signature) if self._dynamic else None
        self._direct = self._direct_call_specs()

    @property
    def name(self) -> str:
        """The function's symbol name."""
        return self.signature.name

    def _packed(self) -> PackedArgs:
        p = getattr(self._local, "packed", None)
        if p is None:
            p = self._local.packed = PackedArgs(self._shapes, self._dynamic)
        return p

    def _direct_call_specs(self):
        """What a call passing every argument positionally, without ``out``, must match to
        skip the general checks of :meth:`validate` (static shapes only): per argument its
        shape, C-contiguous byte strides and dtype, and per result (then run-time check)
        its shape and dtype; None for a function with symbolic sizes."""
        if self._dynamic:
            return None
        args = []
        for spec, npd in zip(self.signature.args, self._np_dtypes):
            shape, npd = tuple(spec.shape), np.dtype(npd)
            args.append((shape, contiguous_strides(shape, npd.itemsize), npd))
        outs = [(tuple(r.shape), np.dtype(d)) for r, d in zip(self._results, self._out_dtypes)]
        outs += [(tuple(r.shape), np.dtype(np.int64)) for r in self.signature.results[len(self._results):]]
        return tuple(args), tuple(outs)

    def _call_direct(self, args: tuple):
        """Run on ``args`` with new result arrays when each is an ndarray of its argument's
        exact shape, dtype object and C-contiguous strides (:meth:`_direct_call_specs`), else
        None (the call takes the general checks). Only the arrays' data pointers go into this
        thread's descriptors, whose sizes and strides were written once (``StridedMemRefType``)."""
        specs, out_specs = self._direct
        packed = self._packed()
        descriptors = packed.descriptors
        for (shape, strides, dtype), a, d in zip(specs, args, descriptors):
            # exact type and dtype object: a subclass or an equal dtype takes the general checks
            if not (a.__class__ is np.ndarray and a.dtype is dtype and a.shape == shape
                    and a.strides == strides):
                return None
            d.allocated = d.aligned = data_address(a)
        outs = [empty_result(shape, dtype) for shape, dtype in out_specs]
        for o, d in zip(outs, descriptors[len(specs):]):
            d.allocated = d.aligned = data_address(o)
        self._invoke(packed)
        n = len(self._results)
        if n < len(outs):
            self._raise_failed_checks(outs[n:])
        return outs[0] if n == 1 else tuple(outs[:n])

    def _complete(self, args: Sequence, kwargs: Optional[Mapping[str, np.ndarray]] = None) -> List:
        """Bind positional and keyword arguments to the signature's arguments (in order).

        Positional arguments are all arguments in order, or the non-parameter inputs in order;
        keyword arguments name any argument (TVM ``set_input(name, value)``); parameters left out
        take their bound values."""
        sig = self.signature
        if not kwargs and len(args) == len(sig.args):
            return list(args)
        kwargs = dict(kwargs or {})
        names = [a.name for a in sig.args]
        inputs = [i for i, a in enumerate(sig.args) if not a.is_param]
        unknown = [k for k in kwargs if k not in names]
        if unknown:
            raise ExecutionError(f"{sig.name}: unknown argument name(s) {unknown}; expected names: "
                                 f"{names}")
        if len(args) == len(sig.args):
            slots = list(range(len(sig.args)))
        elif len(args) <= len(inputs):
            slots = inputs[:len(args)]
        else:
            expected = f"{len(inputs)}" + (f" (or {len(sig.args)} with parameters)"
                                           if len(inputs) != len(sig.args) else "")
            raise ExecutionError(f"{sig.name}: got {len(args)} arguments; expected {expected}: "
                                 f"{', '.join(str(a) for a in sig.args)}")
        full: List = [None] * len(sig.args)
        given = [False] * len(sig.args)
        for slot, a in zip(slots, args):
            full[slot], given[slot] = a, True
        for k, v in kwargs.items():
            slot = names.index(k)
            if given[slot]:
                raise ExecutionError(f"{sig.name}: argument '{k}' given both by position and by name")
            full[slot], given[slot] = v, True
        missing = [sig.args[i].name for i in inputs if not given[i]]
        if missing:
            raise ExecutionError(f"{sig.name}: got {len(args)} positional arguments and "
                                 f"{sorted(kwargs)} by name; missing {missing} (arguments: "
                                 f"{', '.join(str(a) for a in sig.args)})")
        for i, a in enumerate(sig.args):
            if not given[i]:
                if a.name not in self._params:
                    raise ExecutionError(f"{sig.name}: parameter '{a.name}' has no value; pass it "
                                         "or build the module with it")
                full[i] = self._params[a.name]
        return full

    def validate(self, args: Sequence, kwargs: Optional[Mapping[str, np.ndarray]] = None) -> List[np.ndarray]:
        """Check count, type, dtype, shape and C-contiguity of the arguments; returns them complete.

        Parameters
        ----------
        args : sequence of numpy.ndarray
            All arguments in order, or the non-parameter inputs in order (parameters then take
            their bound values).
        kwargs : mapping str -> numpy.ndarray, optional
            Arguments by name (``x=...``, ``w0=...``).

        Returns
        -------
        list of numpy.ndarray
            One array per argument of the signature, in order.

        Raises
        ------
        ExecutionError
            ``main: argument 'x' has shape (2, 64); expected (1, 64)``, an unknown or missing
            argument name, and the like.
        """
        full = self._complete(args, kwargs)
        dynamic = self._dynamic
        for spec, npd, a in zip(self.signature.args, self._np_dtypes, full):
            # the message is built only for a bad argument (this loop runs on every call)
            if not (isinstance(a, np.ndarray) and (a.dtype is npd or a.dtype == npd)
                    and a.flags.c_contiguous
                    and (a.shape == spec.shape or (dynamic and a.ndim == len(spec.shape)))):
                raise self._argument_error(spec, a)
        if self._dynamic:
            self._local.sizes = self._binder(full)
        return full

    def _argument_error(self, spec, a) -> ExecutionError:
        """The ``ExecutionError`` naming what is wrong with argument ``a`` for ``spec``: its
        type, dtype, shape or C-contiguity."""
        where = f"{self.signature.name}: argument '{spec.name}'"
        if not isinstance(a, np.ndarray):
            return ExecutionError(f"{where} is {type(a).__name__}; expected numpy.ndarray "
                                  f"{spec.dtype}{format_shape(spec.shape)}")
        if a.dtype != dtypes.to_numpy_dtype(spec.dtype):
            return ExecutionError(f"{where} has dtype {a.dtype}; expected {spec.dtype}")
        if a.shape != spec.shape and not (self._dynamic and a.ndim == len(spec.shape)):
            return ExecutionError(f"{where} has shape {format_shape(a.shape)}; expected "
                                  f"{format_shape(spec.shape)}")
        return ExecutionError(f"{where} is not C-contiguous; pass numpy.ascontiguousarray(...)"
                              " (inputs are never copied)")

    def _result_shapes(self) -> List[tuple]:
        """The results' shapes for the sizes bound by the last :meth:`validate` on this thread."""
        if not self._dynamic:
            return [r.shape for r in self.signature.results]
        return self._binder.result_shapes(self._local.sizes)

    def _raise_failed_checks(self, statuses) -> None:
        """``ExecutionError`` for the first run-time check with an element not CHECK_PASSED."""
        for msg, s in zip(self._checks, statuses):
            bad = s[s != CHECK_PASSED]
            if bad.size:
                raise ExecutionError(f"{self.name}: {msg.replace('{value}', str(int(bad[0])))}")

    def _outputs(self, out, shapes: List[tuple]) -> List[np.ndarray]:
        """The result arrays (``out``'s, validated, or new ones) for the results' ``shapes``."""
        results = self._results
        if out is None:
            return [empty_result(s, np.dtype(d)) for s, d in zip(shapes, self._out_dtypes)]
        outs = [out] if isinstance(out, np.ndarray) else list(out)
        if len(outs) != len(results):
            raise ExecutionError(f"{self.name}: out has {len(outs)} arrays; expected {len(results)}")
        for r, s, d, o in zip(results, shapes, self._out_dtypes, outs):
            problem = out_array_problem(o, d, s)
            if problem:
                raise ExecutionError(f"{self.name}: out array for {r.name} {problem}")
        for i, a in enumerate(outs):
            for b in outs[i + 1:]:
                if np.shares_memory(a, b):
                    raise ExecutionError(f"{self.name}: out arrays overlap in memory; each result "
                                         "needs its own array")
        return outs

    def __call__(self, *args, out=None, **kwargs):
        """Run on numpy arrays; returns one array, or a tuple for several results.

        Parameters
        ----------
        *args : numpy.ndarray
            Inputs in order (parameters may be left out: their bound values are used).
        out : numpy.ndarray or sequence of numpy.ndarray, optional
            Preallocated result arrays (one array for a single result), validated like inputs.
            An ``out`` array that shares memory with an input is written through a temporary,
            so ``f(a, b, out=a)`` is correct.
        **kwargs : numpy.ndarray
            Arguments by name (TVM ``set_input``), e.g. ``exe(x=arr)``.
            For a CUDA function whose parameters were left out (bound values), the call runs on
            the GPU like :meth:`on_device`: the bound parameters are uploaded once and kept
            there, the inputs copied to the GPU and the results back.

        Returns
        -------
        numpy.ndarray or tuple of numpy.ndarray
            The ``out`` arrays when given.

        Raises
        ------
        ExecutionError
            On invalid, unknown or missing arguments, invalid or mutually overlapping ``out``
            arrays, or an exception raised by a Python kernel.
        """
        direct = self._direct
        if direct is not None and out is None and not kwargs and len(args) == len(direct[0]):
            res = self._call_direct(args)
            if res is not None:
                return res
        full = self.validate(args, kwargs)
        if self._device_invoke is not None and out is None and any(
                spec.is_param and a is self._params.get(spec.name)
                for spec, a in zip(self.signature.args, full)):
            # bound parameters stay on the GPU (uploaded on the first call): the inputs go there
            res = self.on_device(*[a if spec.is_param and a is self._params.get(spec.name)
                                   else DeviceArray.from_numpy(a)
                                   for spec, a in zip(self.signature.args, full)])
            return tuple(r.numpy() for r in res) if isinstance(res, tuple) else res.numpy()
        shapes = self._result_shapes()   # the results', then the run-time checks'
        outs = self._outputs(out, shapes[:len(self._results)])
        # an out array aliasing an input would be overwritten while the input is still read
        run = outs if out is None else [
            np.empty_like(o) if any(np.may_share_memory(o, a) and np.shares_memory(o, a) for a in full)
            else o for o in outs]
        statuses = [np.empty(s, np.int64) for s in shapes[len(self._results):]]
        packed = self._packed()
        packed.bind(full + run + statuses)
        self._invoke(packed)
        if statuses:
            self._raise_failed_checks(statuses)
        if run is not outs:
            for o, r in zip(outs, run):
                if r is not o:
                    np.copyto(o, r)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _device_args(self, args, kwargs, out) -> List[DeviceArray]:
        """Arguments then outputs of :meth:`on_device` as validated device arrays."""
        if self._device_invoke is None:
            raise ExecutionError(f"{self.name}: on_device needs a function compiled for "
                                 "target='cuda'")
        full = self._complete(args, kwargs)
        sig = self.signature
        arrays = []
        for spec, npd, a in zip(sig.args, self._np_dtypes, full):
            if spec.is_param and isinstance(a, np.ndarray) and a is self._params.get(spec.name):
                if spec.name not in self._device_params:   # bound parameters: uploaded once
                    self._device_params[spec.name] = DeviceArray.from_numpy(a)
                a = self._device_params[spec.name]
            arrays.append((f"argument '{spec.name}'", spec, npd, as_device_array(a)))
        if out is None:
            outs = [DeviceArray.empty(r.shape, d) for r, d in zip(self._results, self._out_dtypes)]
        else:
            outs = [as_device_array(o) for o in ([out] if not isinstance(out, (list, tuple)) else out)]
            if len(outs) != len(self._results):
                raise ExecutionError(f"{self.name}: out has {len(outs)} arrays; expected "
                                     f"{len(self._results)}")
        outs += [DeviceArray.empty(r.shape, np.int64) for r in sig.results[len(self._results):]]
        arrays += [(f"out array for {r.name}", r, d, o)
                   for r, d, o in zip(sig.results, self._out_dtypes, outs)]
        for where, spec, npd, d in arrays:
            if d.dtype != npd or d.shape != tuple(spec.shape):
                raise ExecutionError(f"{self.name}: {where} is {d.dtype}{format_shape(d.shape)} on "
                                     f"the device; expected {spec.dtype}{format_shape(spec.shape)}")
            if d.ptr % DEVICE_ALIGNMENT:   # a DeviceArray made at an offset into another
                raise ExecutionError(f"{self.name}: {where} starts at 0x{d.ptr:x}, not a multiple "
                                     f"of {DEVICE_ALIGNMENT} bytes as the kernels assume; expected "
                                     "an aligned buffer (a view at an offset: .clone() it)")
        return [d for *_, d in arrays]

    def on_device(self, *args, out=None, **kwargs):
        """Run the kernels on arrays in GPU memory: no host copies (CUDA functions only).

        Parameters
        ----------
        *args : DeviceArray or CUDA tensor
            Inputs in order, in GPU memory: :class:`~mlc_mlir.runtime.device_array.DeviceArray`
            (``DeviceArray.from_numpy(x)``) or anything with ``__cuda_array_interface__`` (a
            contiguous CUDA ``torch.Tensor``, a CuPy array; viewed, not copied). Parameters left
            out take their bound values, uploaded on the first call and kept on the GPU.
        out : DeviceArray, CUDA tensor or sequence of them, optional
            Where to write the results (default: new DeviceArrays).
        **kwargs
            Arguments by name.

        Returns
        -------
        DeviceArray or tuple of DeviceArray
            The results (the ``out`` arrays, viewed, when given); ``torch.as_tensor(r,
            device="cuda")`` shares their memory, ``r.numpy()`` copies to the host.

        Raises
        ------
        ExecutionError
            If the function was not compiled for CUDA, there is no GPU, or an argument is in
            host memory, of the wrong dtype/shape, not contiguous, or not aligned to
            :data:`~mlc_mlir.runtime.cuda.DEVICE_ALIGNMENT` bytes.
        """
        arrays = self._device_args(args, kwargs, out)
        if any(d._owner is not None for d in arrays):
            synchronize()   # a foreign library may still be writing on its own stream
        packed = self._packed()
        packed.bind_pointers([d.ptr for d in arrays])
        self._device_invoke(packed)
        res = arrays[len(self.signature.args):]
        self._raise_failed_checks([d.numpy() for d in res[len(self._results):]])
        res = res[:len(self._results)]
        return res[0] if len(res) == 1 else tuple(res)

    def benchmark(self, *args, number: int = 100, repeat: int = 5, warmup: int = 1,
                  device: bool = False, **kwargs) -> BenchmarkResult:
        """Time the function: ``repeat`` rounds of ``number`` calls each (ms per call).

        Outputs are allocated once; the validated arguments are reused so the timing is the native
        call plus the ctypes dispatch. With ``device=True`` (CUDA functions) the arguments are
        copied to the GPU once and the kernels timed on them (:meth:`on_device`), without the
        host copies of a numpy call. Source: TVM ``time_evaluator``.

        Raises
        ------
        ExecutionError
            On invalid arguments, or ``number``/``repeat`` < 1.
        """
        if number < 1 or repeat < 1:
            raise ExecutionError(f"benchmark: number={number} and repeat={repeat} must be >= 1")
        full = self.validate(args, kwargs)
        packed = PackedArgs(self._shapes, self._dynamic)
        if device:
            if self._device_invoke is None:
                raise ExecutionError(f"{self.name}: benchmark(device=True) needs a function "
                                     "compiled for target='cuda'")
            keep = self._device_args([DeviceArray.from_numpy(a) for a in full], {}, None)
            packed.bind_pointers([d.ptr for d in keep])
            invoke = self._device_invoke
        else:
            outs = [np.empty(s, d) for s, d in zip(self._result_shapes(), self._out_dtypes)]
            packed.bind(full + outs)
            invoke = self._invoke
        for _ in range(warmup):
            invoke(packed)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(number):
                invoke(packed)
            times.append((time.perf_counter() - t0) * 1e3 / number)
        return BenchmarkResult(min(times), statistics.median(times), statistics.fmean(times),
                               tuple(times), number)


class Executable:
    """A compiled module: ``exe(*arrays)`` runs ``main`` (or the only public function),
    ``exe["name"](*arrays)`` any public function.

    Created by :func:`mlc_mlir.compile` (JIT) or :func:`mlc_mlir.runtime.load_library` (AOT).
    """

    def __init__(self, functions: Dict[str, Function], keepalive=(), export=None):
        self._functions = functions
        self._keepalive = keepalive  # engine / CDLL / lowered module
        self._export = export
        # the function a plain call runs: 'main', else the only one (None: a call raises)
        self._main = functions.get("main") or (next(iter(functions.values()))
                                               if len(functions) == 1 else None)

    @property
    def function_names(self) -> List[str]:
        """Names of the callable functions."""
        return list(self._functions)

    def __getitem__(self, name: str) -> Function:
        try:
            return self._functions[name]
        except KeyError:
            raise ExecutionError(f"executable: no function '{name}'; functions: {self.function_names}") from None

    def _default(self) -> Function:
        if self._main is not None:
            return self._main
        raise ExecutionError(f"executable: no 'main' among {self.function_names}; use exe[name](...)")

    def __call__(self, *args, **kwargs):
        return (self._main or self._default())(*args, **kwargs)

    def on_device(self, *args, **kwargs):
        """``main`` (or the only function) on arrays in GPU memory; see :meth:`Function.on_device`."""
        return self._default().on_device(*args, **kwargs)

    def benchmark(self, *args, number: int = 100, repeat: int = 5, func: Optional[str] = None,
                  warmup: int = 1, device: bool = False, **kwargs) -> BenchmarkResult:
        """Time ``main`` (or ``func``); see :meth:`Function.benchmark` (ms per call)."""
        f = self[func] if func else self._default()
        return f.benchmark(*args, number=number, repeat=repeat, warmup=warmup, device=device,
                           **kwargs)

    def export_library(self, path: str) -> str:
        """Write a shared library (``.so``) plus ``<path>.json`` metadata; load it back with
        :func:`mlc_mlir.runtime.load_library` without recompiling.

        Raises
        ------
        ExecutionError
            If this executable was itself loaded from a library, or a tool fails (the message has
            the command to reproduce).
        """
        if self._export is None:
            raise ExecutionError("export_library: this executable has no LLVM module to export "
                                 "(it was loaded from a library)")
        return self._export(path)

    def __repr__(self) -> str:
        return f"<mlc.Executable functions={self.function_names}>"


def load_engine(lowered, opt_level: int, shared_libs: Sequence[str],
                runtime_symbols: Sequence = (), native_symbols: Sequence = ()) -> NativeExecutionEngine:
    """JIT-compile ``lowered`` (an :class:`~mlc_mlir.ir.module.Module` in the LLVM dialect) into an
    MLIR ``ExecutionEngine`` that loads ``shared_libs``, binds ``runtime_symbols`` (``(name,
    ctypes callback)`` pairs: Python kernels called as ``_mlir_ciface_<name>``,
    ``ExecutionEngine.register_runtime``'s binding) and ``native_symbols`` (``(symbol, ctypes function)``
    pairs bound under the symbol itself, ahead of ``shared_libs``) and then runs
    the module's global constructors (``ExecutionEngine.initialize``). LLVM runs with the GIL
    released (:func:`~.jit_engine.create_engine`). Those constructors load
    the GPU kernels of a CUDA module (``mgpuModuleLoad`` of each embedded cubin, added by
    ``mlc_mlir.pipeline.cuda_modules``); without them every launch fails with
    ``CUDA_ERROR_INVALID_HANDLE`` and the outputs stay unwritten.

    Raises
    ------
    PipelineError
        ``jit: ExecutionEngine failed: ...`` if LLVM cannot compile or link the module.
    """
    with lowered.context:
        engine = create_engine(lowered.ir_module, opt_level, shared_libs)
        for sym, callback in runtime_symbols:   # what ExecutionEngine.register_runtime does
            engine.raw_register_runtime("_mlir_ciface_" + sym, ctypes.cast(callback, ctypes.c_void_p))
        for sym, fn in native_symbols:
            engine.raw_register_runtime(sym, ctypes.cast(fn, ctypes.c_void_p))
        initialize_engine(engine)
    return engine


def engine_invoker(engine, name: str, errors: Optional[list] = None) -> Callable[[PackedArgs], None]:
    """Invoker for function ``name`` of an ``ExecutionEngine`` (its packed C-interface wrapper).

    ``errors`` collects exceptions raised by Python kernels called back from the native code;
    they are raised here as ``ExecutionError`` once the call returns."""
    addr = engine.raw_lookup("_mlir_ciface_" + name)
    if not addr:
        raise ExecutionError(f"executable: symbol _mlir_ciface_{name} not found in the JIT")
    cfunc = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(addr)

    def invoke(packed: PackedArgs) -> None:
        cfunc(packed.packed)
        if errors:
            kernel, exc = errors.pop(0)
            errors.clear()
            raise ExecutionError(f"{name}: kernel '{kernel}' raised {type(exc).__name__}: {exc}") from exc

    # the native code lives as long as the engine: a Function taken from a temporary
    # Executable (compile(mod)["f"]) must keep it alive
    invoke._cfunc = cfunc
    invoke._engine = engine
    return invoke


def refusing_invoker(name: str, reason: str) -> Callable[[PackedArgs], None]:
    """Invoker of function ``name`` whose code must not run on this machine (compiled for
    another CPU, :func:`mlc_mlir.target.host_mismatch`): each call raises
    ``ExecutionError("<name>: <reason>")`` instead of running into ``SIGILL``."""

    def invoke(packed: PackedArgs) -> None:
        raise ExecutionError(f"{name}: {reason}")

    return invoke
