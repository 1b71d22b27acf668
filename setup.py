"""Declares fastpe's optional compiled extensions; the project metadata is in pyproject.toml.

``fastpe._backends.cython._ext`` and ``fastpe._backends.cython._ext_bias`` (together the ``cython`` backend, built from
``csrc/``) are optional: when they cannot be built -- no C compiler, no Cython -- the install
goes on without them, after a one-line warning, and fastpe uses its other backends.
Environment variables:

``FASTPE_REQUIRE_EXT=1``
    any failure to build an extension fails the install (CI sets this).
``FASTPE_NATIVE=1``
    compile for this machine's CPU (``-march=native``): faster here, not portable.
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

EXT_NAME = "fastpe._backends.cython._ext"
#: the attention-bias kernels (ALiBi, T5 buckets); the cython backend needs both
BIAS_EXT_NAME = "fastpe._backends.cython._ext_bias"


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip() == "1"


# Bit-identity with the numba backend needs IEEE semantics for every operation: no
# contraction into FMA and no -ffast-math.  -fno-trapping-math only lets the compiler
# evaluate both sides of a select (so the branch-free loop vectorises); values are unchanged.
UNIX_FLAGS = ["-O3", "-ffp-contract=off", "-fno-fast-math", "-fno-trapping-math", "-g0"]
MSVC_FLAGS = ["/O2", "/fp:precise"]


class optional_build_ext(build_ext):
    """``build_ext`` that warns and goes on when the extension cannot be built.

    Both :meth:`run` and :meth:`build_extension` are guarded: a regular install fails inside
    ``build_extension``; ``pip install -e .`` and ``build_ext --inplace`` then go on in
    ``run`` to copy the built file into the source tree, which fails when it is missing.
    ``Extension(optional=True)`` alone is not enough: ``cythonize()`` returns copies without
    the flag, and it would not make ``FASTPE_REQUIRE_EXT=1`` fatal.
    """

    _warned = False

    def run(self):
        try:
            self._cythonize()
            super().run()
        except Exception as exc:  # noqa: BLE001 - any failure: report, then skip or re-raise
            self._skip(exc)

    def build_extension(self, ext):
        try:
            flags = MSVC_FLAGS if self.compiler.compiler_type == "msvc" else list(UNIX_FLAGS)
            if _env_flag("FASTPE_NATIVE") and self.compiler.compiler_type != "msvc":
                flags.append("-march=native")
            ext.extra_compile_args = flags + [a for a in ext.extra_compile_args if a not in flags]
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            self._skip(exc, ext.name)
            # skipped: optional=True makes the in-place copy (``build_ext --inplace``,
            # editable installs) pass over the missing file instead of failing on it
            ext.optional = True

    def _cythonize(self):
        """Turn ``.pyx`` sources into ``.c`` (Cython is a build requirement).

        Only ``sources`` is taken from ``cythonize``'s copies: the Extension objects must stay
        the ones setuptools prepared (it stores attributes on them in finalize_options).
        """
        from Cython.Build import cythonize

        for ext in self.extensions:
            if any(src.endswith(".pyx") for src in ext.sources):
                (compiled,) = cythonize([ext], quiet=True, force=self.force)
                ext.sources = compiled.sources

    def _skip(self, exc: BaseException, name: str = EXT_NAME):
        """Re-raise ``exc`` if the extensions are required, else warn (once, naming the first
        extension that failed) and return."""
        if _env_flag("FASTPE_REQUIRE_EXT"):
            raise exc
        if self._warned:
            return
        self._warned = True
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        if len(reason) > 160:
            reason = reason[:157] + "..."
        print(
            f"WARNING: fastpe: optional extension {name} not built ({reason}); fastpe "
            "will use its numba/python backends. Set FASTPE_REQUIRE_EXT=1 to make this fatal.",
            file=sys.stderr,
            flush=True,
        )


setup(
    ext_modules=[
        Extension(
            EXT_NAME,
            sources=["csrc/_ext.pyx"],
            include_dirs=["csrc"],
            depends=["csrc/fastpe_kernels.h", "csrc/fastpe_pool.h", "csrc/fastpe_xpos.h",
                     "csrc/fastpe_axial.h", "csrc/fastpe_signed.h", "csrc/fastpe_sandwich.h",
                     "csrc/fastpe_time.h"],
        ),
        Extension(
            BIAS_EXT_NAME,
            sources=["csrc/_bias.pyx"],
            include_dirs=["csrc"],
            depends=["csrc/fastpe_bias.h", "csrc/fastpe_mrope.h", "csrc/fastpe_pool.h", "csrc/fastpe_calendar.h",
                     "csrc/fastpe_relative.h"],
        ),
    ],
    cmdclass={"build_ext": optional_build_ext},
)
