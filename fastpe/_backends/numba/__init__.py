"""The ``numba`` backend: kernels compiled on first use (:mod:`.kernels`, :mod:`.bias`), the
njit policy (:mod:`._jit`), the threading layer (:mod:`._threads`) and the operations the
registry dispatches to (:mod:`.backend`).  Importing this package imports nothing heavy."""
