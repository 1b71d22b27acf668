"""``fastpe info``: what this installation can do, from :func:`fastpe.info`."""

from __future__ import annotations

import click

from . import options


def format_info(result: dict) -> list[str]:
    """The lines ``fastpe info`` prints for a :func:`fastpe.info` result."""
    width = max(len(name) for name in result["backends"])
    lines = [f"fastpe {result['version']}", "backends:"]
    for name, status in result["backends"].items():
        state = "available" if status == "available" else f"unavailable: {status}"
        lines.append(f"  {name:<{width}}  {state}")
    if result.get("env_error"):
        lines.append(f"default backend: {result['default']} (fastest available; "
                     f"$FASTPE_BACKEND ignored: {result['env_error']})")
    else:
        source = "from $FASTPE_BACKEND" if result["env_backend"] else "fastest available"
        lines.append(f"default backend: {result['default']} ({source})")
    if result.get("cython_build"):
        build = result["cython_build"]
        lines.append(f"cython extension: built for {build.get('target')}, running "
                     f"{build.get('kernels')} kernels on up to {result['cython_threads']} threads "
                     "(Python threads, no OpenMP)")
    if result["threading_layer"] is not None:
        lines.append(f"numba threading layer: {result['threading_layer']} ({result['threading_note']})")
        lines.append(f"threads: {result['threads']}")
    else:
        lines.append("numba threading layer: none (numba backend unavailable)")
        lines.append(f"threads: {result['threads']} CPUs (numba backend unavailable)")
    return lines


@click.command(short_help="Show version, backends and threading.")
@click.option("--json", "as_json", is_flag=True, help="Print the fastpe.info() dictionary as JSON.")
def info(as_json: bool) -> None:
    """Show the version, which backends load here (and why not for the others), the one
    used by default, numba's threading layer and its thread count.

    Loading the backends imports numba, so this takes a moment.
    """
    import fastpe

    result = fastpe.info()
    if as_json:
        import json

        click.echo(json.dumps(result, indent=2))
    else:
        click.echo("\n".join(format_info(result)))
