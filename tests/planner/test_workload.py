"""Domain and implicit workloads: shapes, answers against dense matrices, algebra, and input checks."""

from __future__ import annotations

import numpy as np
import pytest

from planner import AllRange, Domain, Explicit, Factor, Identity, Predicate, Prefix, Product, Total, Workload

DOMAIN = Domain({"a": 2, "b": 3, "c": 4}, ordered={"c"})
DATA = np.arange(24).reshape(2, 3, 4) % 5


def test_domain_basics() -> None:
    assert DOMAIN.size == 24 and len(DOMAIN) == 3
    assert DOMAIN.canonical(["c", "a", "c"]) == ("a", "c")
    assert DOMAIN.shape(("c", "a")) == (4, 2)
    assert DOMAIN.project(["c", "a"]) == Domain({"a": 2, "c": 4}, ordered={"c"})
    with pytest.raises(ValueError, match="unknown attribute"):
        DOMAIN.index("z")
    with pytest.raises(ValueError, match="positive integer size"):
        Domain({"a": 0})
    with pytest.raises(ValueError, match="not in the domain"):
        Domain({"a": 2}, ordered={"b"})


def test_implicit_answers_equal_dense_matrix_products() -> None:
    workload = (
        Workload.marginals(DOMAIN, [("a",), ("b", "c"), ()])
        + Workload.all_range(DOMAIN, "c")
        + 2.0 * Workload.prefix(DOMAIN, "c")
        + Workload(DOMAIN, (Product(DOMAIN, (Factor(("a",), Explicit([[1, -1]])), Factor(("c",), Predicate([1, 0, 1, 1])))),))
    )
    implicit = np.concatenate([p.weight * a for p, a in zip(workload.products, workload.answer({DOMAIN.attributes: DATA}))])
    np.testing.assert_allclose(implicit, workload.dense() @ DATA.ravel())
    assert workload.query_count == 2 + 12 + 1 + 10 + 4 + 1
    assert workload.marginal_attributes() == (("a",), ("b", "c"), (), ("c",), ("a", "c"))


def test_block_grams_equal_dense_grams() -> None:
    for block in (Identity(5), Total(5), Prefix(5), AllRange(5), Predicate([0, 1, 1, 0, 1]), Explicit(np.eye(5)[:2])):
        dense = block.matrix()
        np.testing.assert_allclose(block.gram(), dense.T @ dense)
        tensor = np.arange(15.0).reshape(3, 5)
        np.testing.assert_allclose(block.apply(tensor, 1), tensor @ dense.T)


def test_products_drop_totals_and_sort_factors() -> None:
    product = Product(DOMAIN, (Factor(("c",), Prefix(4)), Factor(("b",), Total(3)), Factor(("a",), Identity(2))))
    assert product.attributes == ("a", "c") and product.row_shape == (2, 4)
    assert product.scaled(3.0).weight == 3.0


def test_answers_sum_down_from_larger_marginals() -> None:
    workload = Workload.marginals(DOMAIN, [("a",)])
    (answer,) = workload.answer({("a", "b"): DATA.sum(axis=2)})
    np.testing.assert_array_equal(answer, DATA.sum(axis=(1, 2)))
    with pytest.raises(KeyError, match="covers"):
        workload.answer({("b",): DATA.sum(axis=(0, 2))})


def test_workload_input_errors() -> None:
    with pytest.raises(ValueError, match="not ordered"):
        Workload.prefix(DOMAIN, "a")
    with pytest.raises(ValueError, match="size 3"):
        Product(DOMAIN, (Factor(("a",), Identity(3)),))
    with pytest.raises(ValueError, match="two factors"):
        Product(DOMAIN, (Factor(("a",), Identity(2)), Factor(("a",), Total(2))))
    with pytest.raises(ValueError, match="weight"):
        Workload.marginals(DOMAIN, [("a",)], weight=0.0)
    with pytest.raises(ValueError, match="different domains"):
        Workload.total(DOMAIN) + Workload.total(Domain({"a": 2}))
    with pytest.raises(ValueError, match="k must be"):
        Workload.all_kway(DOMAIN, 4)
