"""Rules that more than one place must follow, each kept in one home: the tests that tie the
other places (the compiled extension, the numba kernels) to it."""

from __future__ import annotations

import pytest

from fastpe._exact import rounding


def test_ziv_doubles_the_precision_until_decided():
    tried = []

    def attempt(precision):
        tried.append(precision)
        return "done" if precision >= 40 else None

    assert rounding.ziv(attempt, 10, 100, "x") == "done"
    assert tried == [10, 20, 40]


def test_ziv_reports_what_it_could_not_decide():
    tried = []
    with pytest.raises(RuntimeError, match="the thing: undecided at 80 digits"):
        rounding.ziv(lambda p: tried.append(p), 10, 80, "the thing", "digits")
    assert tried == [10, 20, 40, 80]


def test_ziv_keeps_a_falsy_answer():
    # 0.0 and -0.0 are answers, not "undecided"
    assert rounding.ziv(lambda p: -0.0, 1, 1, "zero") == 0.0
