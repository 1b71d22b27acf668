"""The package's metadata: the MIT license it declares is an SPDX expression, and the LICENSE
file it names is in the tree (the wheel carries it; tests/install/test_build.py checks that
the build warns of nothing deprecated)."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

pytestmark = pytest.mark.any_backend

ROOT = Path(__file__).resolve().parents[2]

if not (ROOT / "pyproject.toml").is_file():
    pytest.skip("needs the fastpe source tree", allow_module_level=True)


def test_license_is_spdx_and_its_file_is_there():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n") and "WITHOUT WARRANTY OF ANY KIND" in text
