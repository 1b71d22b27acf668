"""What the tests share, each thing once: :mod:`support.oracle` (true values by mpmath),
:mod:`support.inputs` (hard inputs, the ``out=`` contract), :mod:`support.strategies` (the
fuzz suite's hypothesis strategies and judges), :mod:`support.cli` (running the command line,
comparing bits).  Backends come from ``tests/conftest.py`` alone."""
