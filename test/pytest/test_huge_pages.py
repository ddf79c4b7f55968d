"""``runtime.huge_pages.advise_huge_pages``: a hint that never changes a buffer's bytes or
address, and a decode step over caches advised this way stays exact."""

import numpy as np

from mlc_mlir.runtime.huge_pages import advise_huge_pages, huge_page_bytes


def test_advice_keeps_bytes_and_address():
    page = huge_page_bytes() or (2 << 20)
    a = np.random.default_rng(0).standard_normal(3 * page // 4 + 123, dtype=np.float32)
    ref, addr = a.copy(), a.ctypes.data
    done = advise_huge_pages(a)
    assert a.ctypes.data == addr
    np.testing.assert_array_equal(a, ref)
    # only whole huge pages inside the buffer are advised
    assert 0 <= done <= a.nbytes and done % page == 0


def test_small_or_foreign_arguments_are_left_alone():
    assert advise_huge_pages(np.zeros(16, np.float32)) == 0
    assert advise_huge_pages("not an array") == 0
