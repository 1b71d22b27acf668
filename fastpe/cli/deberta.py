"""``fastpe deberta`` and ``fastpe shaw``: write DeBERTa's bucketed relative positions or Shaw's
clipped ones ``(q_len, k_len)`` to a ``.npy``, ``.npz`` or ``.safetensors`` file.

The numbers come from :func:`fastpe.relative.deberta_bucket_matrix` (equal to HF deberta_v2's
``build_relative_position``, without its leading 1) and :func:`fastpe.relative.shaw_positions`
(equal to tensor2tensor's ``_generate_relative_positions_matrix``); this module parses, names
the file and writes it atomically.
"""

from __future__ import annotations

import click

from . import options
from ._write import check_size, default_path, entry, output_opt, summary, write_arrays

__all__ = ["deberta", "shaw", "ENTRY"]

#: the name of the array in the file
ENTRY = "positions"


def _length(name: str):
    def check(value):
        from .._validate import check_int
        from ..relative import MAX_LEN

        return check_int(name, value, low=1, high=MAX_LEN)

    return check


def _any_int(name: str):
    def check(value):
        from .._validate import check_int

        return check_int(name, value)

    return check


def _max_relative(value):
    from .._validate import check_int
    from ..relative import MAX_OFFSET

    return check_int("max_relative_position", value, low=0, high=MAX_OFFSET)


def _write(ctx, path, function: str, params: dict, shape: tuple[int, int], dtype: str, compute, what: str,
           backend) -> None:
    from .. import _backends
    from .. import relative
    from .._io.writers import make_spec

    with options.library_errors():
        name, _ = _backends.resolve(backend)  # to report which backend ran
    spec = make_spec(function, params)
    entries = [entry(ENTRY, shape, dtype)]
    check_size(path, entries, spec, advice="ask for a shorter --q-len/--k-len",
               space=shape[0] * shape[1] <= relative.MAX_ELEMENTS)
    arrays, compute_s, write_s = write_arrays(path, entries, lambda: {ENTRY: compute(name)}, spec)
    if (ctx.obj or {}).get("verbosity", 0) >= 0:
        click.echo(summary(path, arrays[ENTRY], what, name, compute_s, write_s))


@click.command("deberta",
               short_help="Write DeBERTa's bucketed relative positions (queries, keys) to .npy, .npz or .safetensors.")
@click.option("--q-len", "q_len", type=int, required=True, callback=options.library_check("q_len", _length("q_len")),
              metavar="L", help="Queries (rows).")
@click.option("--k-len", "k_len", type=int, default=None, callback=options.library_check("k_len", _length("k_len")),
              metavar="K", help="Keys (columns). Default: L.")
@click.option("--bucket-size", "bucket_size", type=int, default=256, show_default=True,
              callback=options.library_check("bucket_size", _any_int("bucket_size")), metavar="B",
              help="HF's position_buckets (<= 0: no buckets, the raw i - j).")
@click.option("--max-position", "max_position", type=int, default=512, show_default=True,
              callback=options.library_check("max_position", _any_int("max_position")), metavar="P",
              help="HF's max_relative_positions (<= 0: no buckets).")
@options.backend_opt
@output_opt("fastpe deberta", "deberta_<L>x<K>.npy")
@click.pass_context
def deberta(ctx: click.Context, q_len: int, k_len, bucket_size: int, max_position: int, backend, output) -> None:
    """Write DeBERTa's relative position of every (query i, key j): an (L, K) int64 array.

    Exactly fastpe.relative.deberta_bucket_matrix(L, K, bucket_size=B, max_position=P),
    i.e. HF deberta_v2's build_relative_position (log buckets of i - j; DeBERTa-v3's
    256 and 512 by default) without its leading 1.  Prints one summary line (-q: nothing).
    The file records its spec (PATH.json beside a .npy, inside a .npz or .safetensors).  It
    is written atomically; on any error (or Ctrl-C) no file is left and an existing one is
    kept.

    \b
    Examples:
      fastpe deberta --q-len 512 -o deberta.npy
      fastpe deberta --q-len 128 --k-len 512 --bucket-size 0
    """
    from .. import relative

    k = q_len if k_len is None else k_len
    path = output or default_path(f"deberta_{q_len}x{k}.npy", "fastpe deberta")
    params = dict(q_len=q_len, k_len=k, bucket_size=bucket_size, max_position=max_position, dtype="int64")
    if bucket_size > 0 and max_position > 0:
        what = f"DeBERTa buckets, bucket_size {bucket_size}, max_position {max_position}"
    else:
        what = "DeBERTa relative positions, unbucketed"
    _write(ctx, path, "relative.deberta_bucket_matrix", params, (q_len, k), "int64",
           lambda name: relative.deberta_bucket_matrix(**params, backend=name), what, backend)


@click.command("shaw",
               short_help="Write Shaw's clipped relative positions (queries, keys) to .npy, .npz or .safetensors.")
@click.option("--q-len", "q_len", type=int, required=True, callback=options.library_check("q_len", _length("q_len")),
              metavar="L", help="Queries (rows): the last L of the keys.")
@click.option("--k-len", "k_len", type=int, default=None, callback=options.library_check("k_len", _length("k_len")),
              metavar="K", help="Keys (columns). Default: L.")
@click.option("--max-relative-position", "max_relative_position", type=int, required=True,
              callback=options.library_check("max_relative_position", _max_relative), metavar="M",
              help="Distances are clipped to [-M, M] (then shifted by M).")
@click.option("--cache", is_flag=True, help="tensor2tensor's decoding row only: shape (1, K).")
@options.backend_opt
@output_opt("fastpe shaw", "shaw_<L>x<K>.npy")
@click.pass_context
def shaw(ctx: click.Context, q_len: int, k_len, max_relative_position: int, cache: bool, backend, output) -> None:
    """Write Shaw et al.'s clipped relative position of every (query i, key j): int32.

    Exactly fastpe.relative.shaw_positions(L, K, max_relative_position=M, cache=--cache),
    i.e. tensor2tensor's _generate_relative_positions_matrix: clip(j - i', -M, M) + M with
    query i at key position i' = i + K - L.  Prints one summary line (-q: nothing).  The
    file records its spec; it is written atomically.

    \b
    Examples:
      fastpe shaw --q-len 512 --max-relative-position 16 -o shaw.npy
      fastpe shaw --q-len 1 --k-len 513 --max-relative-position 16 --cache
    """
    from .. import relative

    k = q_len if k_len is None else k_len
    path = output or default_path(f"shaw_{q_len}x{k}.npy", "fastpe shaw")
    params = dict(q_len=q_len, k_len=k, max_relative_position=max_relative_position, cache=cache, dtype="int32")
    what = f"Shaw clipped positions, max_relative_position {max_relative_position}{', cache row' if cache else ''}"
    _write(ctx, path, "relative.shaw_positions", params, (1 if cache else q_len, k), "int32",
           lambda name: relative.shaw_positions(**params, backend=name), what, backend)
