"""Installing fastpe with and without a C compiler: the compiled extension is optional.

Each scenario copies the source tree and installs the copy into its own throwaway virtual
environment, then imports fastpe in a subprocess started outside any source tree.  The
venvs see this interpreter's packages (pip, numpy, numba, ...) through a ``.pth`` file and
pip builds without isolation, so nothing is downloaded -- except the build requirements of
``pyproject.toml`` when this interpreter lacks them (e.g. too old a setuptools): those are
fetched once into a directory put ahead on the venvs' path.  "No compiler" is
``CC=/bin/false``: the compile command then fails, which each test confirms from pip's log
before trusting the result.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.name != "posix", reason="simulates a missing compiler with /bin/false"),
]

ROOT = Path(__file__).resolve().parents[2]
#: what an install needs from the source tree (the optional ones are copied if present)
SOURCES = ("pyproject.toml", "setup.py", "fastpe", "csrc", "README.md", "LICENSE", "MANIFEST.in")
NO_COMPILER = {"CC": "/bin/false"}
SKIP_WARNING = "WARNING: fastpe: optional extension fastpe._backends.cython._ext not built"

if not (ROOT / "setup.py").is_file():
    pytest.skip("needs the fastpe source tree", allow_module_level=True)


def _have_compiler() -> bool:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(os.environ.get("CC", cc).split()[0]) is not None


def _clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without anything that would pick a fastpe or steer its build."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FASTPE_", "PIP_", "PYTHON", "VIRTUAL_ENV"))
    }
    env.update(extra or {})
    return env


def _build_requirements() -> list[str]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        from pip._vendor import tomli as tomllib
    with open(ROOT / "pyproject.toml", "rb") as f:
        return list(tomllib.load(f)["build-system"]["requires"])


def _unsatisfied(requirements: list[str]) -> list[str]:
    """The requirements this interpreter's installed packages do not meet."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    missing = []
    for text in requirements:
        req = Requirement(text)
        try:
            if req.specifier.contains(version(req.name), prereleases=True):
                continue
        except PackageNotFoundError:
            pass
        missing.append(text)
    return missing


@pytest.fixture(scope="module")
def shared_packages(tmp_path_factory) -> list[Path]:
    """Directories for the test venvs' path: the build requirements this interpreter lacks
    (downloaded), then links to this interpreter's installed packages, minus any fastpe --
    so the venvs have the build tools and fastpe's dependencies, while a fastpe installed
    here cannot shadow the one under test.
    """
    dirs = []
    missing = _unsatisfied(_build_requirements())
    if missing:
        tools = tmp_path_factory.mktemp("build-requirements")
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--target",
                str(tools),
                *missing,
            ],
            check=False,
            capture_output=True,
            text=True,
            env=_clean_env(),
            timeout=300,
        )
        if proc.returncode != 0:
            pytest.skip(f"cannot install the build requirements {missing}: {proc.stderr[-500:]}")
        dirs.append(tools)
    target = tmp_path_factory.mktemp("shared-packages")
    dirs.append(target)
    seen = set()
    for site_dir in dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")]):
        if not site_dir or not os.path.isdir(site_dir):
            continue
        for entry in os.scandir(site_dir):
            name = entry.name.lower()
            if name in seen or name.endswith(".pth") or "fastpe" in name:
                continue
            seen.add(name)
            (target / entry.name).symlink_to(entry.path)
    return dirs


def _venv(path: Path, shared: list[Path]) -> Path:
    """A pip-less venv that sees the ``shared`` directories; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
        env=_clean_env(),
    ).stdout.strip()
    Path(purelib, "_fastpe_test_shared.pth").write_text("".join(f"{d}\n" for d in shared))
    return python


def _source_copy(dest: Path) -> Path:
    dest.mkdir()
    ignore = shutil.ignore_patterns(
        "__pycache__", "*.so", "*.pyd", "*.c", "*.nbi", "*.nbc", "*.egg-info"
    )
    for name in SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        elif src.is_file():
            shutil.copy2(src, dest / name)
    return dest


def _pip_install(python: Path, src: Path, editable: bool, env: dict[str, str]):
    cmd = [
        str(python),
        "-m",
        "pip",
        "install",
        "-v",
        "--no-build-isolation",
        "--no-deps",
        "--no-index",
        "--no-cache-dir",
        "--disable-pip-version-check",
    ]
    cmd += ["-e", str(src)] if editable else [str(src)]
    return subprocess.run(
        cmd,
        check=False,
        capture_output=True,
        text=True,
        env=_clean_env(env),
        cwd=src.parent,
        timeout=600,
    )


def _installed(python: Path, cwd: Path) -> dict:
    code = (
        "import json, fastpe; "
        "print(json.dumps({'file': fastpe.__file__, 'backends': fastpe.available_backends()}))"
    )
    proc = subprocess.run(
        [str(python), "-c", code],
        check=False,
        capture_output=True,
        text=True,
        env=_clean_env(),
        cwd=cwd,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class Scenario:
    compiler: bool
    editable: bool
    required: bool = False


#: compiling ones first: they take longest, and the pool runs the rest beside them
SCENARIOS = {
    "regular-compiler": Scenario(compiler=True, editable=False),
    "editable-compiler": Scenario(compiler=True, editable=True),
    "regular-no-compiler": Scenario(compiler=False, editable=False),
    "editable-no-compiler": Scenario(compiler=False, editable=True),
    "regular-required-no-compiler": Scenario(compiler=False, editable=False, required=True),
    "editable-required-no-compiler": Scenario(compiler=False, editable=True, required=True),
}


def _run_scenario(root: Path, shared: list[Path], scenario: Scenario) -> dict:
    python = _venv(root / "venv", shared)
    src = _source_copy(root / "src")
    env = {} if scenario.compiler else dict(NO_COMPILER)
    if scenario.required:
        env["FASTPE_REQUIRE_EXT"] = "1"
    proc = _pip_install(python, src, scenario.editable, env)
    result = {
        "root": root,
        "src": src,
        "returncode": proc.returncode,
        "log": proc.stdout + proc.stderr,
        "found": None,
    }
    if proc.returncode == 0:
        outside = root / "elsewhere"
        outside.mkdir()
        result["found"] = _installed(python, outside)
    return result


@pytest.fixture(scope="module")
def installs(request, tmp_path_factory, shared_packages):
    """Runs the selected scenarios in parallel (2+ at a time); maps name -> Future."""
    selected = {
        item.callspec.params.get("scenario")
        for item in request.session.items
        if item.path == request.path and hasattr(item, "callspec")
    }
    wanted = [name for name in SCENARIOS if name in selected]
    if not _have_compiler():
        wanted = [name for name in wanted if not SCENARIOS[name].compiler]
    pool = ThreadPoolExecutor(max_workers=min(4, max(2, os.cpu_count() or 2)))
    futures = {
        name: pool.submit(
            _run_scenario, tmp_path_factory.mktemp(name), shared_packages, SCENARIOS[name]
        )
        for name in wanted
    }
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("scenario", [n for n, s in SCENARIOS.items() if not s.required])
def test_install(installs, scenario):
    spec = SCENARIOS[scenario]
    if scenario not in installs:
        pytest.skip("no C compiler here")
    result = installs[scenario].result()
    log = result["log"]
    assert result["returncode"] == 0, log[-4000:]
    # the metadata is in a current form: setuptools warns of no deprecated table (the license's was)
    deprecated = [line for line in log.splitlines() if "deprecated" in line.lower() and "Warning" in line]
    assert deprecated == [], deprecated
    if spec.compiler:
        assert SKIP_WARNING not in log, log[-4000:]
    else:
        # the build really ran the compiler and failed, and said so in one line
        assert "/bin/false" in log and "CompileError" in log, log[-4000:]
        assert sum(SKIP_WARNING in line for line in log.splitlines()) == 1, log[-4000:]
    found = result["found"]
    home = result["src"] if spec.editable else result["root"] / "venv"
    assert Path(found["file"]).resolve().is_relative_to(home.resolve()), found
    assert ("cython" in found["backends"]) == spec.compiler, found
    assert "python" in found["backends"]


@pytest.mark.parametrize("scenario", [n for n, s in SCENARIOS.items() if s.required])
def test_required_extension_without_compiler_fails_the_install(installs, scenario):
    result = installs[scenario].result()
    log = result["log"]
    assert result["returncode"] != 0, log[-4000:]
    assert "/bin/false" in log and SKIP_WARNING not in log, log[-4000:]
