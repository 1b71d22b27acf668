"""The package's imports run one way: the command line over the public families, over the
backends, over the kernel constants and the exact engine -- read from the source with
``ast``, every import counted, the ones inside functions too."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

import fastpe

#: every backend it calls is named, or it calls none: the first run of make test decides it
#: (tests/conftest.py deselects it in the default-only runs)
pytestmark = pytest.mark.any_backend

ROOT = Path(fastpe.__file__).parent

#: the bottom layer: kernel constants, the exact engine, the output formats
BOTTOM = ("fastpe._plans", "fastpe._exact", "fastpe._dtypes")
BACKENDS = ("fastpe._backends",)
CLI = ("fastpe.cli", "fastpe.__main__")


def _module_name(path: Path) -> tuple[str, bool]:
    parts = ("fastpe",) + path.relative_to(ROOT).with_suffix("").parts
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def _modules() -> dict[str, tuple[Path, bool]]:
    return {name: (path, pkg) for path in ROOT.rglob("*.py") for name, pkg in [_module_name(path)]}


MODULES = _modules()


def _imports(name: str) -> set[str]:
    """The fastpe modules ``name`` imports (a ``from m import x`` of a submodule ``x`` counts
    as an import of ``m.x``)."""
    path, is_package = MODULES[name]
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "fastpe")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            if base.split(".")[0] != "fastpe":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return {m for m in found if m in MODULES and m != name}


def _layer(name: str) -> int:
    if name.startswith(BOTTOM):
        return 0
    if name.startswith(BACKENDS):
        return 1
    if name.startswith(CLI):
        return 3
    return 2  # the public families, their validation and files


def test_the_modules_are_found():
    assert {"fastpe.sinusoid", "fastpe._backends.registry", "fastpe._plans.words", "fastpe._exact.rope",
            "fastpe.cli.table", "fastpe._io.save"} <= MODULES.keys()


def test_no_module_imports_a_layer_above_its_own():
    """cli -> public families -> backends -> kernel constants and exact engine; never back."""
    wrong = [f"{m} (layer {_layer(m)}) imports {i} (layer {_layer(i)})"
             for m in sorted(MODULES) for i in sorted(_imports(m)) if _layer(i) > _layer(m)]
    assert not wrong, "\n".join(wrong)


def test_no_import_circle():
    graph = {m: _imports(m) for m in MODULES}
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    circles = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                circles.append(" -> ".join(path[path.index(n):] + [n]))
            elif n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    # a package importing its own submodules is no circle when they do not import it back
    assert not circles, "\n".join(circles)


def test_the_walk_sees_real_imports():
    """The reader is not vacuous: known edges are there."""
    assert "fastpe._plans.words" in _imports("fastpe._plans.frequencies")
    assert "fastpe._backends.numba.kernels" in _imports("fastpe._backends.numba.backend")
    assert "fastpe._exact.constants" in _imports("fastpe._plans.words")
    assert any(i.startswith("fastpe._backends") for i in _imports("fastpe.sinusoid"))
    assert os.sep not in "".join(MODULES)
