"""The registry's contract: every operation on every available backend, on the registry's
own cases, against the ``python`` backend.

Each operation says (``Operation.agreement``) how its written arguments compare: ``"bits"``,
identical bit patterns; ``"ulp"``, within one unit in the last place of the output's format
(the references are correctly rounded, the compiled kernels within 1 ULP; float64 outputs
within 2**-45), and then the compiled backends identical to each other.  A new operation in the registry without cases,
or a backend without the operation or with another signature, fails here.
"""

from __future__ import annotations

import functools
import inspect

import numpy as np
import pytest

from fastpe import _backends
from fastpe._backends.cases import CASES
from fastpe._backends.registry import OPERATIONS, Backend

from conftest import AVAILABLE, FAST
from support.oracle import ulp_distance

#: every backend it calls is named, or it calls none: the first run of make test decides it
#: (tests/conftest.py deselects it in the default-only runs)
pytestmark = pytest.mark.any_backend


def test_every_operation_has_cases_and_every_case_is_an_operation():
    assert set(CASES) == set(OPERATIONS)
    for name, make in CASES.items():
        cases = make()
        assert cases, name
        for case in cases:
            assert list(case.arguments) == list(OPERATIONS[name].parameters), (name, case.label)


@pytest.mark.parametrize("backend", AVAILABLE)
@pytest.mark.parametrize("op", list(OPERATIONS))
def test_backend_signature_is_the_contract(backend, op):
    fn = getattr(_backends.load(backend), op)
    want = list(inspect.signature(getattr(Backend, op)).parameters)[1:]
    assert list(inspect.signature(fn).parameters) == want


@functools.cache
def _reference(op: str) -> list:
    """The python backend's written arguments, case by case (computed once per operation)."""
    module = _backends.load("python")
    results = []
    for case in CASES[op]():
        getattr(module, op)(**case.arguments)
        results.append({w: case.arguments[w] for w in OPERATIONS[op].writes})
    return results


def _run(backend: str, op: str) -> list:
    module = _backends.load(backend)
    results = []
    for case in CASES[op]():
        getattr(module, op)(**case.arguments)
        results.append((case.label, {w: case.arguments[w] for w in OPERATIONS[op].writes}))
    return results


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" or a.dtype.itemsize == 2 and a.dtype.kind == "V" else a


def _agree(op: str, label: str, got, want) -> None:
    for name, g in got.items():
        w = want[name]
        if g is None:
            assert w is None, (op, label, name)
            continue
        if OPERATIONS[op].agreement == "bits" or g.dtype.kind != "f":
            assert np.array_equal(_bits(g), _bits(w)), f"{op} [{label}] {name}: bits differ"
        else:
            # the reference writes every value (the sentinel is NaN): NaN where it has NaN
            nan = np.isnan(w)
            assert np.array_equal(np.isnan(g), nan), f"{op} [{label}] {name}: NaN elsewhere"
            g, w = g[~nan], w[~nan]
            if g.dtype == np.float64:
                assert np.array_equal(np.isfinite(g), np.isfinite(w)), f"{op} [{label}] {name}"
                assert np.abs(g - w).max(initial=0) <= 2.0**-45, f"{op} [{label}] {name}: off by more than 2**-45"
            else:
                assert ulp_distance(g, w, g.dtype).max(initial=0) <= 1, f"{op} [{label}] {name}: more than 1 ULP off"


@pytest.mark.parametrize("backend", FAST or [pytest.param("none", marks=pytest.mark.skip("no compiled backend"))])
@pytest.mark.parametrize("op", list(OPERATIONS))
def test_operation_agrees_with_the_python_backend(backend, op):
    want = _reference(op)
    got = _run(backend, op)
    assert len(got) == len(want)
    for (label, g), w in zip(got, want):
        _agree(op, label, g, w)


@pytest.mark.skipif(len(FAST) < 2, reason="needs two compiled backends")
@pytest.mark.parametrize("op", [op for op, o in OPERATIONS.items() if o.agreement == "ulp"])
def test_compiled_backends_write_identical_bits(op):
    first, *others = (_run(b, op) for b in FAST)
    for other in others:
        for (label, a), (_, b) in zip(first, other):
            for name in a:
                assert np.array_equal(_bits(a[name]), _bits(b[name])), f"{op} [{label}] {name}"


def _positional_operation_calls(path) -> list[str]:
    """Calls of a contract operation with a positional argument: ``x.<op>(a, ...)`` where
    ``x`` is not a module the file imports (a backend, then), or a bare ``<op>(a, ...)``."""
    import ast

    tree = ast.parse(path.read_text(), filename=str(path))
    imported = {a.asname or a.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not (node.args or any(k.arg is None for k in node.keywords)):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in OPERATIONS:
            if not (isinstance(f.value, ast.Name) and f.value.id in imported):
                found.append(f"{path.name}:{node.lineno} {ast.unparse(f)}")
        elif isinstance(f, ast.Name) and f.id in OPERATIONS and f.id not in imported:
            found.append(f"{path.name}:{node.lineno} {f.id}")
    return found


def test_dispatch_calls_operations_by_keyword():
    """Outside the backends themselves, every call of an operation names its arguments, so
    a backend whose parameters were reordered cannot be handed swapped values."""
    from pathlib import Path

    import fastpe

    root = Path(fastpe.__file__).parent
    inside = [root / "_backends" / "numba", root / "_backends" / "cython", root / "_backends" / "python.py"]
    found = []
    for path in sorted(root.rglob("*.py")):
        if any(path == p or p in path.parents for p in inside):
            continue
        found += _positional_operation_calls(path)
    assert not found, found


def test_every_operation_has_a_benchmark():
    """Each registry operation is named by a benchmark workload (``bench/peers.py``), so an
    operation added without one shows here; and every name a workload gives is an operation."""
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "bench"
    if not (bench / "peers.py").exists():
        pytest.skip("bench/ is not in this checkout")
    sys.path.insert(0, str(bench))
    try:
        import peers
    finally:
        sys.path.remove(str(bench))
    named = {op for w in peers.WORKLOADS.values() for op in w.operations}
    assert named <= set(OPERATIONS), named - set(OPERATIONS)
    assert set(OPERATIONS) - named == set(), f"operations without a benchmark: {set(OPERATIONS) - named}"
