"""Transparent huge pages for large buffers that kernels stream (weights, KV caches).

A decode step reads every weight once; with 4 KiB pages that is one TLB miss and one page walk
per 4 KiB of weights (500 MB of GPT-2 124M: ~120k walks per token) on top of DRAM latency.
numpy asks the kernel for huge pages on its own allocations of 4 MiB and more
(``madvise(MADV_HUGEPAGE)``), but a weight that is a view of a torch tensor (GPT-2's
``Conv1D`` weights, used without a transpose) lives in torch's allocation, which asks for none
(unless ``THP_MEM_ALLOC_ENABLE`` is set). :func:`advise_huge_pages` marks such a buffer
``MADV_HUGEPAGE`` and collapses its already faulted pages into huge pages in place
(``MADV_COLLAPSE``, Linux 6.1+): no copy of the buffer, no change of its bytes or address.

The huge page size is the kernel's (``/sys/kernel/mm/transparent_hugepage/hpage_pmd_size``).
Anything that fails (another OS, an older kernel, THP disabled, file-backed memory) leaves the
buffer as it was: the advice only changes how fast it is read.

Source: Linux ``madvise(2)`` (``MADV_HUGEPAGE``, ``MADV_COLLAPSE``); numpy's
``_madvise_hugepage`` for its own large allocations; llama.cpp maps model files with huge-page
hints for the same reason.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from typing import Optional

import numpy as np

_MADV_HUGEPAGE = 14
_MADV_COLLAPSE = 25
_PMD_SIZE = "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size"


@functools.lru_cache(maxsize=None)
def huge_page_bytes() -> int:
    """The transparent huge page size in bytes, or 0 where there is none (not Linux, THP
    disabled or unknown)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            if "[never]" in f.read():
                return 0
        with open(_PMD_SIZE) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 0


@functools.lru_cache(maxsize=None)
def _madvise() -> Optional[object]:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    fn = ctypes.CDLL(name, use_errno=True).madvise
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def advise_huge_pages(array: np.ndarray) -> int:
    """Back the huge-page-aligned interior of ``array``'s buffer with transparent huge pages
    (``MADV_HUGEPAGE``, then ``MADV_COLLAPSE`` of the pages already there); the bytes and the
    address stay the same.

    Parameters
    ----------
    array : numpy.ndarray
        Any array; only the whole huge pages inside its buffer are advised (neighbouring
        allocations sharing a huge page are left alone).

    Returns
    -------
    int
        Bytes collapsed into huge pages (0 when the array spans no whole huge page, or the
        system has no transparent huge pages or refused; never raises for that).
    """
    page = huge_page_bytes()
    fn = _madvise() if page else None
    if fn is None or not isinstance(array, np.ndarray) or array.nbytes < page:
        return 0
    start = array.ctypes.data
    lo = -(-start // page) * page
    hi = (start + array.nbytes) // page * page
    if hi <= lo:
        return 0
    if fn(lo, hi - lo, _MADV_HUGEPAGE) != 0:
        return 0
    return hi - lo if fn(lo, hi - lo, _MADV_COLLAPSE) == 0 else 0
