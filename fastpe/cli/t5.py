"""``fastpe t5-buckets``: write T5's relative-position buckets ``(q_len, k_len)`` to a ``.npy``,
``.npz`` or ``.safetensors`` file.

The numbers come from :func:`fastpe.relative.t5_bucket_matrix` (equal to HF's
``T5Attention._relative_position_bucket`` of ``compute_bias``'s relative positions); this
module parses, names the file and writes it atomically.
"""

from __future__ import annotations

import click

from . import options
from ._write import check_size, default_path, entry, output_opt, summary, write_arrays

__all__ = ["t5_buckets", "ENTRY"]

#: the name of the array in the file
ENTRY = "buckets"


def _length(name: str):
    def check(value):
        from .._validate import check_int
        from ..relative import MAX_LEN

        return check_int(name, value, low=1, high=MAX_LEN)

    return check


def _count(name: str, low: int, high_name: str):
    def check(value):
        from .. import relative
        from .._validate import check_int

        return check_int(name, value, low=low, high=getattr(relative, high_name))

    return check


def _offset(value):
    from .._validate import check_int
    from ..relative import MAX_OFFSET

    return check_int("offset", value, low=0, high=MAX_OFFSET)


@click.command("t5-buckets",
               short_help="Write T5 relative-position buckets (queries, keys) to .npy, .npz or .safetensors.")
@click.option("--q-len", "q_len", type=int, required=True, callback=options.library_check("q_len", _length("q_len")),
              metavar="L", help="Queries (rows).")
@click.option("--k-len", "k_len", type=int, default=None, callback=options.library_check("k_len", _length("k_len")),
              metavar="K", help="Keys (columns). Default: L.")
@click.option("--num-buckets", "num_buckets", type=int, default=32, show_default=True,
              callback=options.library_check("num_buckets", _count("num_buckets", 2, "MAX_BUCKETS")), metavar="N",
              help="Buckets in all (halved per direction unless --unidirectional).")
@click.option("--max-distance", "max_distance", type=int, default=128, show_default=True,
              callback=options.library_check("max_distance", _count("max_distance", 1, "MAX_DISTANCE")), metavar="D",
              help="Distances from D on share the last bucket.")
@click.option("--unidirectional", is_flag=True,
              help="T5's decoder (causal) buckets: future positions share bucket 0.")
@click.option("--offset", "offset", type=int, default=0, show_default=True,
              callback=options.library_check("offset", _offset), metavar="P",
              help="Position of the first query (tokens already in the cache when decoding).")
@options.backend_opt
@output_opt("fastpe t5-buckets", "t5_buckets_<L>x<K>.npy")
@click.pass_context
def t5_buckets(ctx: click.Context, q_len: int, k_len, num_buckets: int, max_distance: int, unidirectional: bool,
               offset: int, backend, output) -> None:
    """Write the T5 bucket of every (query i, key j): an (L, K) int64 array.

    Exactly fastpe.relative.t5_bucket_matrix(L, K, bidirectional=not --unidirectional,
    num_buckets=N, max_distance=D, offset=P), i.e. HF's
    T5Attention._relative_position_bucket of j - (i + P).  Prints one summary line
    (-q: nothing).  The file records its spec (PATH.json beside a .npy, inside a .npz or
    .safetensors).  It is written atomically; on any error (or Ctrl-C) no file is left and
    an existing one is kept.

    \b
    Examples:
      fastpe t5-buckets --q-len 512 -o t5_buckets.npy
      fastpe t5-buckets --q-len 1 --k-len 513 --offset 512 --unidirectional
    """
    from .. import _backends
    from .. import relative
    from .._io.writers import make_spec

    k = q_len if k_len is None else k_len
    path = output or default_path(f"t5_buckets_{q_len}x{k}.npy", "fastpe t5-buckets")
    with options.library_errors():
        name, _ = _backends.resolve(backend)  # to report which backend ran
    params = dict(q_len=q_len, k_len=k, bidirectional=not unidirectional, num_buckets=num_buckets,
                  max_distance=max_distance, offset=offset, dtype="int64")
    spec = make_spec("relative.t5_bucket_matrix", params)
    entries = [entry(ENTRY, (q_len, k), "int64")]
    # past MAX_ELEMENTS the library refuses the matrix itself, before allocating anything (and
    # before the free space is of interest)
    check_size(path, entries, spec, advice="ask for a shorter --q-len/--k-len",
               space=q_len * k <= relative.MAX_ELEMENTS)
    arrays, compute_s, write_s = write_arrays(
        path, entries, lambda: {ENTRY: relative.t5_bucket_matrix(**params, backend=name)}, spec)
    array = arrays[ENTRY]
    if (ctx.obj or {}).get("verbosity", 0) >= 0:
        what = (f"T5 buckets {'unidirectional' if unidirectional else 'bidirectional'}, num_buckets {num_buckets}, "
                f"max_distance {max_distance}, offset {offset}")
        click.echo(summary(path, array, what, name, compute_s, write_s))
