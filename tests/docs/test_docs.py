"""Every code block of README.md and docs/*.md runs as written.

Each document's blocks run in the order they appear, in one temporary directory per document
(so a command can write the file the next block reads), with ``tests/data/configs`` reachable
at the same relative path as from a checkout:

* ``python`` blocks are executed, each in a fresh namespace (a block pasted alone works);
  one that imports an optional package that is not installed skips, naming it;
* ``console`` blocks hold ``$ fastpe ...`` commands, each run as a child process that must
  exit 0; the lines after a command are what it prints, compared with the real output with
  only the timings, the backend's name (and a picture's size in bytes) left out;
* ``text`` blocks are synopses (``usage: ...``), never run; ``json`` blocks are parsed.

Any other kind of block fails, so nothing in the documentation escapes this test. No block
may import a private module (``fastpe._...``), and no document's files may grow past
:data:`MAX_BYTES`.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import warnings
from dataclasses import dataclass

import pytest

from conftest import fastpe_env

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
KINDS = ("python", "console", "text", "json")
#: packages a block may need that ``pip install fastpe`` does not bring
OPTIONAL = ("torch", "transformers", "diffusers", "dask", "zarr", "ml_dtypes", "safetensors",
            "matplotlib", "mpmath")
#: what one document's blocks may leave on disk in all
MAX_BYTES = 256 << 20

pytestmark = pytest.mark.any_backend


@dataclass(frozen=True)
class Block:
    document: pathlib.Path
    line: int  #: 1-based line of the opening fence
    kind: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def blocks_of(path: pathlib.Path) -> list[Block]:
    out, lines = [], path.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(\S*)", lines[i])
        if m:
            start, kind, body = i, m.group(2), []
            i += 1
            while i < len(lines) and not lines[i].lstrip().startswith("```"):
                body.append(lines[i])
                i += 1
            if i == len(lines):
                raise AssertionError(f"{path.name}:{start + 1}: unclosed code block")
            out.append(Block(path, start + 1, kind, "\n".join(body) + "\n"))
        i += 1
    return out


BLOCKS = [b for doc in DOCUMENTS for b in blocks_of(doc)]
RUNNABLE = [b for b in BLOCKS if b.kind in ("python", "console", "json")]


def test_the_documents_exist():
    names = {p.name for p in DOCUMENTS}
    assert {"README.md", "cli.md", "rope.md", "benchmarks.md", "design.md"} <= names
    assert len([b for b in BLOCKS if b.kind == "python"]) >= 15


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.id)
def test_every_block_is_of_a_known_kind(block):
    assert block.kind in KINDS, (
        f"{block.id}: a ```{block.kind} block; use python (run), console ($ commands, run), "
        f"text (a synopsis, not run) or json")
    if block.kind == "text":
        assert "$ " not in block.text, f"{block.id}: a synopsis holds no $ commands"


@pytest.fixture(scope="module")
def workdirs(tmp_path_factory):
    made: dict[pathlib.Path, pathlib.Path] = {}

    def get(document: pathlib.Path) -> pathlib.Path:
        if document not in made:
            d = tmp_path_factory.mktemp(document.stem.replace(".", "_"))
            (d / "tests" / "data").mkdir(parents=True)
            (d / "tests" / "data" / "configs").symlink_to(ROOT / "tests" / "data" / "configs")
            made[document] = d
        return made[document]

    return get


def _size_of(directory: pathlib.Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(directory):  # does not follow the configs link
        for f in files:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return total


def _imports(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _skip_unless_installed(block: Block, modules) -> None:
    missing = sorted({m for m in modules if importlib.util.find_spec(m) is None})
    if missing:
        pytest.skip(f"{block.id} needs {', '.join(missing)} (not installed)")


def _run_python(block: Block, cwd: pathlib.Path) -> None:
    imported = _imports(block.text)
    private = sorted(m for m in imported if m.startswith("fastpe._"))
    assert not private, f"{block.id} imports private modules {private}"
    assert not re.search(r"\bfastpe\._", block.text), f"{block.id} reaches a private name"
    _skip_unless_installed(block, {m.split(".")[0] for m in imported} & set(OPTIONAL))
    code = compile(block.text, block.id, "exec")
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a block may show a warning the library gives
            exec(code, {"__name__": "__docs__"})
    finally:
        os.chdir(old)


#: what varies between runs of the same command: timings and the backend (and how many bytes
#: a picture compresses to)
_TIME = re.compile(r"\b\d+(?:\.\d+)? (?:ms|s|µs|us)\b")
_BACKEND = re.compile(r"\bbackend \w+")
_SIZE = re.compile(r"\b\d+(?:\.\d+)? (?:B|KiB|MiB|GiB)\b")


def _comparable(line: str, picture: bool) -> str:
    line = _BACKEND.sub("backend *", _TIME.sub("* ms", line.strip()))
    return _SIZE.sub("* B", line) if picture else line


def _commands(block: Block) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif line.strip():
            assert out, f"{block.id}: output before any $ command: {line!r}"
            out[-1][1].append(line)
    assert out, f"{block.id}: a console block without a $ command"
    return out


def _run_console(block: Block, cwd: pathlib.Path) -> None:
    for command, expected in _commands(block):
        argv = shlex.split(command)
        assert argv[0] == "fastpe", f"{block.id}: only fastpe commands belong here: {command}"
        needs = {"matplotlib"} if argv[1:2] == ["plot"] else set()
        if "bfloat16" in argv:
            needs.add("ml_dtypes")
        _skip_unless_installed(block, needs)
        done = subprocess.run(
            [sys.executable, "-m", "fastpe", *argv[1:]], cwd=cwd, env=fastpe_env(keep_backend=True),
            capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (
            f"{block.id}: `{command}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        if expected:
            picture = argv[1:2] == ["plot"]
            got = [_comparable(s, picture) for s in done.stdout.splitlines() if s.strip()]
            want = [_comparable(s, picture) for s in expected]
            assert got == want, f"{block.id}: `{command}` printed\n{done.stdout}"


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.id)
def test_block_runs_as_written(block, workdirs):
    cwd = workdirs(block.document)
    if block.kind == "json":
        json.loads(block.text)
    elif block.kind == "python":
        _run_python(block, cwd)
    else:
        _run_console(block, cwd)
    assert _size_of(cwd) <= MAX_BYTES, f"{block.id}: the document's files pass {MAX_BYTES} bytes"


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: pathlib.Path) -> set[str]:
    inside, found = False, set()
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line.lstrip().startswith("```"):
            inside = not inside
        elif not inside and (m := re.match(r"^#{1,6} (.+)$", line)):
            found.add(_slug(m.group(1)))
    return found


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_leads_somewhere(document):
    """Relative links name an existing file, and an anchor one of its headings."""
    text = re.sub(r"```.*?```", "", document.read_text(encoding="utf-8"), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        path = (document.parent / file).resolve() if file else document
        assert path.exists(), f"{document.name}: link to missing {target}"
        if anchor:
            assert anchor in _anchors(path), f"{document.name}: no heading #{anchor} in {path.name}"
