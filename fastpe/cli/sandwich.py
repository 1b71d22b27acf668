"""``fastpe sandwich``: write a Sandwich bias ``(heads, q_len, k_len)`` (NeMo's
``SandwichRelativePositionEmbedding``) to a ``.npy``, ``.npz`` or ``.safetensors`` file.

The numbers come from :func:`fastpe.relative.sandwich_bias`; this module parses, names the
file and writes it (atomically, through :func:`fastpe.cli._write.write_arrays`), as
``fastpe alibi`` does.
"""

from __future__ import annotations

import click

from . import options
from ._write import check_size, default_path, dtype_opt, entry, output_opt, summary, write_arrays

__all__ = ["sandwich", "ENTRY"]

#: the name of the array in the file
ENTRY = "bias"


def _int(name: str, limit: str, low: int = 1):
    def check(value):
        from .. import _sandwich
        from .._validate import check_int

        return check_int(name, value, low=low, high=getattr(_sandwich, limit))

    return check


def _hidden(value):
    value = _int("hidden_size", "MAX_HIDDEN", 2)(value)
    if value % 2:
        raise ValueError(f"hidden_size must be even (NeMo's H/2 frequencies), got {value}")
    return value


@click.command(short_help="Write a Sandwich bias (heads, queries, keys) to .npy, .npz or .safetensors.")
@click.option("--heads", "n_heads", type=int, required=True,
              callback=options.library_check("n_heads", _int("n_heads", "MAX_HEADS")), metavar="N",
              help="Attention heads, 1 to 65536 (head h is divided by 8 (h+1) / N).")
@click.option("--q-len", "q_len", type=int, required=True,
              callback=options.library_check("q_len", _int("q_len", "MAX_LEN")), metavar="L", help="Queries (rows).")
@click.option("--k-len", "k_len", type=int, default=None,
              callback=options.library_check("k_len", _int("k_len", "MAX_LEN")), metavar="K",
              help="Keys (columns). Default: L.")
@click.option("--hidden-size", "hidden_size", type=int, required=True,
              callback=options.library_check("hidden_size", _hidden), metavar="H",
              help="Hidden size per head (NeMo's hidden_size), even, 2 to 65536: H/2 cosines per distance.")
@click.option("--causal", is_flag=True, default=False,
              help="Not bidirectional: keys after the query get 0 (NeMo's torch.tril of the distances).")
@dtype_opt
@options.backend_opt
@output_opt("fastpe sandwich", "sandwich_<N>x<L>x<K>.npy")
@click.pass_context
def sandwich(ctx: click.Context, n_heads: int, q_len: int, k_len, hidden_size: int, causal: bool, dtype: str,
             backend, output) -> None:
    """Write the Sandwich bias to add to attention logits, an (N, L, K) array.

    Exactly fastpe.relative.sandwich_bias(N, L, K, hidden_size=H, bidirectional=not
    --causal, dtype=DTYPE): (sum_k cos(d w_k) - H/2) / ((h+1) * 8 / N) with d = |i - j| of
    NeMo's bottom-right slice, each value within 1 ULP of the correctly rounded one.  Prints
    one summary line (-q: nothing).  The file records its spec and is written atomically,
    as fastpe alibi's.

    \b
    Examples:
      fastpe sandwich --heads 16 --q-len 2048 --hidden-size 64 -o sandwich.npy
      fastpe sandwich --heads 8 --q-len 512 --hidden-size 128 --causal --dtype bfloat16
    """
    from .. import _backends
    from .. import _sandwich as fs
    from .._io.writers import make_spec

    dtype = dtype.lower()
    k = q_len if k_len is None else k_len
    path = output or default_path(f"sandwich_{n_heads}x{q_len}x{k}.npy", "fastpe sandwich")
    with options.library_errors():
        name, _ = _backends.resolve(backend)  # to report which backend ran
    params = dict(n_heads=n_heads, q_len=q_len, k_len=k, hidden_size=hidden_size, bidirectional=not causal,
                  dtype=dtype)
    spec = make_spec("relative.sandwich_bias", params)
    entries = [entry(ENTRY, (n_heads, q_len, k), dtype)]
    check_size(path, entries, spec, advice="ask for fewer --heads or a shorter --q-len/--k-len",
               space=n_heads * q_len * k <= fs.MAX_ELEMENTS)
    arrays, compute_s, write_s = write_arrays(
        path, entries, lambda: {ENTRY: fs.sandwich_bias(**params, backend=name)}, spec)
    if (ctx.obj or {}).get("verbosity", 0) >= 0:
        what = f"Sandwich {'causal' if causal else 'bidirectional'}, hidden {hidden_size}"
        click.echo(summary(path, arrays[ENTRY], what, name, compute_s, write_s))
