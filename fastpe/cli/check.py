"""``fastpe check``: the fast backends against the exact reference, on this machine."""

from __future__ import annotations

import click

from .._backends.registry import BACKENDS
from . import options

#: ``fastpe._diagnostics.run_check``'s defaults, repeated here so that ``--help`` imports
#: nothing of the library
DEFAULT_D_MODELS = (8, 63, 512)
DEFAULT_PER_OCTAVE = 2
#: bytes held per checked value, one width at a time: the reference's values as Python
#: floats in lists, then the float32 arrays and the ULP distances (~50 measured with
#: tracemalloc for widths 8 to 2048, rounded up)
BYTES_PER_VALUE = 64


def _percent(part: int, whole: int) -> str:
    if part == whole:
        return "100%"
    # never round a shortfall up to "100.000%"
    return f"{min(100.0 * part / whole, 99.999):.3f}%"


def format_results(results) -> list[str]:
    """A table with one row per (backend, d_model): worst ULP and correctly rounded share."""
    header = ("backend", "d_model", "values", "worst ULP", "correctly rounded")
    rows = [
        (
            r.backend,
            str(r.d_model),
            str(r.n_values),
            str(r.worst_ulp),
            f"{_percent(r.n_correctly_rounded, r.n_values)} ({r.n_correctly_rounded})",
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(["{:<%d}" % widths[0]] + ["{:>%d}" % w for w in widths[1:]])
    return [fmt.format(*row).rstrip() for row in [header, *rows]]


@click.command(short_help="Compare the fast backends with the exact reference.")
@click.option(
    "--d-model",
    "d_models",
    type=int,
    multiple=True,
    callback=options.d_model_handler,
    metavar="N",
    help=f"Table width to check (repeatable). Default: {', '.join(map(str, DEFAULT_D_MODELS))}.",
)
@click.option(
    "--per-octave",
    type=click.IntRange(min=1, max=1_000_000),
    default=DEFAULT_PER_OCTAVE,
    show_default=True,
    metavar="N",
    help="Random positions drawn from each [2**k, 2**(k+1)), k = 0..31 (plus 0, 1, 2**32-1).",
)
@click.option(
    "--seed", type=click.IntRange(min=0), default=0, show_default=True, metavar="S", help="Seed for the positions."
)
@options.base_opt
@click.option(
    "--backend",
    "backends",
    type=click.Choice(BACKENDS, case_sensitive=False),
    multiple=True,
    callback=options.backend_handler,
    help="Backend to check (repeatable). Default: every available one but python (the reference).",
)
@click.pass_context
def check(ctx: click.Context, d_models, per_octave: int, seed: int, base: float, backends) -> None:
    """Compare every available fast backend with the exact reference and print the worst
    error in float32 ULPs and the share of correctly rounded values, per backend and width.

    Positions span the whole uint32 range.  Exit status 1 if any value is off by more
    than 1 ULP.  The reference is slow: keep --per-octave small.
    """
    from .. import _diagnostics as _check
    from .._io import save as _save

    # the positions drawn: per_octave in each of the 32 octaves, plus 0, 1 and 2**32 - 1
    n_positions = 32 * per_octave + 3
    widest = max(d_models or DEFAULT_D_MODELS)
    with options.library_errors():
        _save.check_memory(f"checking {n_positions} positions at d_model {widest}",
                           n_positions * widest * BYTES_PER_VALUE)
        results = _check.run_check(
            d_models=tuple(d_models) or DEFAULT_D_MODELS,
            n_per_octave=per_octave,
            base=base,
            seed=seed,
            backends=list(backends) or None,  # None: every available backend
        )
    quiet = (ctx.obj or {}).get("verbosity", 0) < 0
    if not results:
        if not quiet:
            click.echo(
                "nothing to check: no fast backend selected or available "
                "(python is the reference itself)"
            )
        return
    bad = [r for r in results if not r.ok]
    if not quiet:
        click.echo("\n".join(format_results(results)))
    elif bad:
        click.echo("\n".join(format_results(bad)))
    if bad:
        worst = max(bad, key=lambda r: r.worst_ulp)
        click.echo(
            f"FAIL: {len(bad)} of {len(results)} checks exceed 1 ULP "
            f"(worst: {worst.backend}, d_model {worst.d_model}, {worst.worst_ulp} ULP)"
        )
        ctx.exit(1)
    if not quiet:
        total = sum(r.n_values for r in results)
        click.echo(f"ok: all {total} values within 1 ULP of the exact reference (seed {seed})")
