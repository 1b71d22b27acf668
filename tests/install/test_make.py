"""The Makefile's targets install what each needs: ``make run`` fastpe alone (no torch,
transformers or diffusers: a fresh clone's first command stays quick), ``make test`` and
``make bench`` the test extras and the optional peers too (``make peers``), including in a
clone where ``make run`` already made the venv.

Judged from ``make -n`` (what make would run) against a venv directory of the test's own,
so nothing is installed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.any_backend

ROOT = Path(__file__).resolve().parents[2]
PEERS = ("torch", "transformers", "diffusers", "positional-encodings")

if not (ROOT / "Makefile").is_file() or shutil.which("make") is None:
    pytest.skip("needs the fastpe source tree and make", allow_module_level=True)


def planned(target: str, venv: Path, *extra: str) -> str:
    """The commands ``make TARGET`` would run with its venv at ``venv``."""
    done = subprocess.run(["make", "-n", "-C", str(ROOT), target, f"VENV={venv}", *extra],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def installs(commands: str) -> list[str]:
    return [line for line in commands.splitlines() if " -m pip install" in line]


def test_run_installs_fastpe_alone(tmp_path):
    commands = planned("run", tmp_path / "venv")
    pip = installs(commands)
    assert any(line.rstrip().endswith("install --quiet -e .") for line in pip), pip
    for line in pip:
        assert "[test]" not in line and not any(peer in line for peer in PEERS), line
    assert "fastpe table --d-model 512 --max-len 2048" in commands


@pytest.mark.parametrize("target", ["test", "bench", "peers", "setup"])
def test_test_and_bench_install_the_extras_and_peers_after_run(tmp_path, target):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed").touch()  # as `make run` leaves it, newer than the sources
    pip = installs(planned(target, venv))
    assert not any(line.rstrip().endswith("-e .") for line in pip), pip  # fastpe is not built again
    assert any("'fastpe[test]'" in line for line in pip), pip
    for peer in PEERS:
        assert any(peer in line for line in pip), (peer, pip)


def test_peers_0_leaves_out_the_peers(tmp_path):
    pip = installs(planned("test", tmp_path / "venv", "PEERS=0"))
    assert any("'fastpe[test]'" in line for line in pip), pip
    assert not any(peer in line for line in pip for peer in PEERS), pip


def test_an_installed_venv_installs_nothing_more(tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    for stamp in (".installed", ".extras", ".peers"):
        (venv / stamp).touch()
    assert installs(planned("test", venv)) == []
    assert installs(planned("run", venv)) == []
