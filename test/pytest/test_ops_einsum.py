"""``ops.einsum`` vs ``numpy.einsum``: explicit and implicit outputs, ellipsis broadcasting,
diagonals, size-1 broadcasting, dtypes, random equations (hypothesis); the one
``linalg.generic`` it emits; every build-time error."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir._mlir import ir
from opcheck import build_only, run

RNG = np.random.default_rng(0)

CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),              # matmul
    ("ij,jk", [(3, 4), (4, 5)]),                  # implicit output 'ik'
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),     # batch matmul
    ("bij, bjk -> bik", [(2, 3, 4), (2, 4, 5)]),  # whitespace is ignored (ONNX's test)
    ("ij->ji", [(3, 4)]),                         # transpose: no reduction
    ("ij->i", [(3, 4)]),                          # row sum
    ("i,i", [(5,), (5,)]),                        # inner product, 0-d result
    ("i,j->ij", [(3,), (4,)]),                    # outer product
    ("ii->i", [(4, 4)]),                          # diagonal
    ("ii", [(4, 4)]),                             # trace
    ("iij->ij", [(2, 2, 3)]),
    ("...ii->...i", [(3, 5, 5)]),                 # batch diagonal (ONNX's test)
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),  # ellipsis dims broadcast
    ("i...->...", [(2, 3)]),
    ("...,...->...", [(2, 3), (3,)]),
    ("->", [()]),                                 # 0-d
    (",i->i", [(), (3,)]),
    ("bA", [(2, 3)]),                             # implicit: upper case sorts first
    ("ij,ij->ij", [(1, 3), (2, 3)]),              # a size-1 letter broadcasts (numpy)
    ("ij,jk", [(2, 3), (1, 4)]),
    ("abc,cd,de->ae", [(2, 3, 4), (4, 5), (5, 2)]),
    ("ab,ab,ab->", [(3, 4), (3, 4), (3, 4)]),
]


@pytest.mark.parametrize("equation, shapes", CASES, ids=[c[0] for c in CASES])
def test_einsum_matches_numpy(equation, shapes):
    xs = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    got = run(lambda *a: ops.einsum(equation, *a), *xs)
    want = np.einsum(equation, *xs)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float64", "int32", "int64", "int8"])
def test_einsum_dtypes(dtype):
    a = RNG.integers(-3, 4, (2, 3, 4)).astype(dtype)
    b = RNG.integers(-3, 4, (2, 4, 5)).astype(dtype)
    got = run(lambda x, y: ops.einsum("bij,bjk->bik", x, y), a, b)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, np.einsum("bij,bjk->bik", a, b))


def test_einsum_half_precision_and_numpy_operands():
    npd = mlc.ir.dtypes.to_numpy_dtype("bfloat16")
    a = RNG.standard_normal((3, 4)).astype(npd)
    w = RNG.standard_normal((4, 2)).astype(np.float32)  # a constant, converted to a's dtype
    got = run(lambda x: ops.einsum("ij,jk->ki", x, w), a)
    assert got.dtype == npd
    want = np.einsum("ij,jk->ki", a.astype(np.float32), w.astype(npd).astype(np.float32))
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=3e-2, atol=3e-2)


@st.composite
def equations(draw):
    """A random equation over letters a..e (repeats within a term allowed) with operand shapes:
    each letter has one size, a few occurrences are 1 (broadcast); explicit or implicit output."""
    letters = "abcde"
    sizes = {c: draw(st.integers(1, 4)) for c in letters}
    terms = draw(st.lists(st.text(letters, min_size=0, max_size=3), min_size=1, max_size=3))
    shapes = []
    for t in terms:
        shape = [1 if t.count(c) == 1 and draw(st.integers(0, 4)) == 0 else sizes[c] for c in t]
        shapes.append(tuple(shape))
    if draw(st.booleans()):
        return ",".join(terms), shapes
    used = sorted(set("".join(terms)))
    out = draw(st.permutations(used))[:draw(st.integers(0, len(used)))]
    return ",".join(terms) + "->" + "".join(out), shapes


def _compile_run(equation, xs, **options):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.einsum(equation, *[f.arg(f"a{i}", x.shape, str(x.dtype)) for i, x in enumerate(xs)]))
    return mlc.compile(bb.finish(), **options)(*xs)


def _diagonal_and_reduced(equation):
    """A term repeats a letter and some letter is summed (a superset of the cases the default
    reduction rule cannot vectorize yet, see test_diagonal_that_is_also_reduced_default_schedule)."""
    lhs, _, rhs = equation.partition("->")
    terms = lhs.split(",")
    letters = "".join(terms)
    out = rhs if "->" in equation else [c for c in letters if letters.count(c) == 1]
    return any(len(set(t)) < len(t) for t in terms) and bool(set(letters) - set(out))


@settings(max_examples=25, deadline=None)
@given(case=equations())
def test_random_equations_match_numpy(case):
    equation, shapes = case
    xs = [RNG.standard_normal(s).astype(np.float64) for s in shapes]
    options = {"schedule": "none"} if _diagonal_and_reduced(equation) else {}
    got = _compile_run(equation, xs, **options)
    np.testing.assert_allclose(got, np.einsum(equation, *xs), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("equation, shapes", [("jij->j", [(4, 3, 4)]), ("dbc,dbb->c", [(3, 3, 3), (3, 3, 3)])])
def test_diagonal_that_is_also_reduced_with_plain_loops(equation, shapes):
    xs = [RNG.standard_normal(s) for s in shapes]
    np.testing.assert_allclose(_compile_run(equation, xs, schedule="none"), np.einsum(equation, *xs), rtol=1e-12)


def test_diagonal_that_is_also_reduced_default_schedule():
    # the reduction rule does not vectorize an op whose map repeats a dim (OpFacts.simple_maps)
    x = RNG.standard_normal((4, 3, 4))  # summed over i, the kept j is x's innermost dim
    np.testing.assert_allclose(_compile_run("jij->j", [x]), np.einsum("jij->j", x), rtol=1e-12)


def _generic(mod):
    """(indexing maps, iterator types, op names) of the one ``linalg.generic`` of ``main``, read
    through the bindings."""
    block = mod.get_function("main").regions[0].blocks[0]
    names = [o.operation.name for o in block.operations]
    assert names.count("linalg.generic") == 1, names
    g = next(o.operation for o in block.operations if o.operation.name == "linalg.generic")
    maps = [str(ir.AffineMapAttr(a).value) for a in ir.ArrayAttr(g.attributes["indexing_maps"])]
    its = [str(a).split("<")[-1].rstrip(">") for a in ir.ArrayAttr(g.attributes["iterator_types"])]
    return maps, its, names


def test_einsum_emits_one_generic_with_subscript_maps():
    mod = build_only(lambda a, b: ops.einsum("bij,bjk->bik", a, b, name="bmm"),
                     ((2, 3, 4), "float32"), ((2, 4, 5), "float32"))
    maps, its, names = _generic(mod)
    assert maps == ["(d0, d1, d2, d3) -> (d0, d1, d3)", "(d0, d1, d2, d3) -> (d0, d3, d2)",
                    "(d0, d1, d2, d3) -> (d0, d1, d2)"]
    assert its == ["parallel", "parallel", "parallel", "reduction"]
    assert "linalg.fill" in names and 'mlc.name = "bmm.init"' in str(mod) and 'mlc.name = "bmm"' in str(mod)


def test_einsum_without_reduction_has_no_fill_and_reads_a_diagonal():
    maps, its, names = _generic(build_only(lambda a: ops.einsum("ii->i", a), ((4, 4), "float32")))
    assert maps == ["(d0) -> (d0, d0)", "(d0) -> (d0)"] and its == ["parallel"]
    assert "linalg.fill" not in names


def test_einsum_size_one_dims_read_index_zero():
    maps, its, _ = _generic(build_only(lambda a, b: ops.einsum("...i,...i->...", a, b),
                                       ((2, 1, 3), "float32"), ((4, 3), "float32")))
    assert maps == ["(d0, d1, d2) -> (d0, 0, d2)", "(d0, d1, d2) -> (d1, d2)", "(d0, d1, d2) -> (d0, d1)"]
    assert its == ["parallel", "parallel", "reduction"]


@pytest.mark.parametrize("equation, specs, match", [
    ("ij,jk->ik->", [((2, 3), "float32"), ((3, 4), "float32")],
     "einsum: argument 'equation' is 'ij,jk->ik->'; expected at most one '->'"),
    ("ij,jk", [((2, 3), "float32")], "einsum: argument 'equation' is 'ij,jk'; it has 2 input term.s. for 1 operand"),
    ("i1", [((2, 3), "float32")], "einsum: argument 'equation' is 'i1'; input term 0 'i1' has the character '1'; "
                                  "expected letters a-z, A-Z and '...'"),
    ("i.j", [((2, 3), "float32")], "input term 0 'i.j' has a '.' that is not part of '...'"),
    ("...i...", [((2, 3), "float32")], r"input term 0 '...i...' has more than one '...'"),
    ("ij->ii", [((2, 2), "float32")], "the output has the subscript 'i' more than once"),
    ("ij->k", [((2, 2), "float32")], "the output subscript 'k' occurs in no input term"),
    ("...ij->ij", [((5, 2, 3), "float32")], r"'...' stands for 1 dim.s. \(5,\) but the output has no '...'"),
    ("ij,jk->ik", [((2, 3), "float32"), ((3, 4, 5), "float32")],
     r"argument 'operands\[1\]' has shape \(3, 4, 5\); expected rank 2 for the subscripts 'jk' of 'ij,jk->ik'"),
    ("...ijk", [((2, 3), "float32")], r"argument 'operands\[0\]' has shape \(2, 3\); expected rank >= 3"),
    ("ii->i", [((2, 3), "float32")], r"argument 'operands\[0\]' has shape \(2, 3\); expected equal sizes for the "
                                     r"repeated subscript 'i' of 'ii' \(2 vs 3\)"),
    ("ij,jk", [((2, 3), "float32"), ((4, 5), "float32")],
     r"subscript 'j' of 'ij,jk' has size 3 in operands\[0\] \(2, 3\) and 4 in operands\[1\] \(4, 5\); expected "
     r"equal sizes or 1"),
    ("...i,...i", [((2, 3), "float32"), ((4, 3), "float32")], r"einsum: shapes \(2,\) and \(4,\) are not broadcastable"),
    ("ij,jk", [((2, 3), "float32"), ((3, 4), "int32")], r"argument 'operands\[1\]' has dtype int32; expected float32"),
    ("i", [((2,), "bool")], "einsum: dtype bool is not supported"),
])
def test_einsum_errors(equation, specs, match):
    with pytest.raises(mlc.BuildError, match=match):
        build_only(lambda *a: ops.einsum(equation, *a), *specs)


def test_einsum_argument_errors():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", (2, 3))
        with pytest.raises(mlc.BuildError, match="einsum: argument 'operands' is empty"):
            ops.einsum("ij")
        with pytest.raises(mlc.BuildError, match="einsum: argument 'equation' is bytes; expected a str"):
            ops.einsum(b"ij", x)
        with pytest.raises(mlc.BuildError, match=r"einsum: argument 'operands\[0\]' is list"):
            ops.einsum("i,ij", [1.0, 2.0], x)
        f.output(x)
