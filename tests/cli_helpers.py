"""What the tests of the array-writing commands share: invoking the CLI, checking its one
summary line or its one error line, comparing arrays bit for bit."""

from __future__ import annotations

import re

import numpy as np
from click.testing import CliRunner

from fastpe.cli import main


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def ok(result, summary: re.Pattern) -> re.Match:
    """A successful run printed exactly one line, matching ``summary``."""
    assert result.exit_code == 0, (result.output, result.stderr)
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    match = summary.fullmatch(lines[0])
    assert match, lines[0]
    return match


def assert_one_line_error(result, code: int = 2) -> str:
    assert result.exit_code == code, (result.exit_code, result.output, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ") and "Traceback" not in result.stderr, result.stderr
    assert result.stdout == ""
    return lines[0]
