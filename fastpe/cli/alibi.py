"""``fastpe alibi``: write an ALiBi bias ``(heads, q_len, k_len)`` to a ``.npy``, ``.npz`` or
``.safetensors`` file.

The numbers come from :func:`fastpe.alibi.bias`; this module parses, names the file and
writes it (atomically, through :func:`fastpe.cli._write.write_arrays`).
"""

from __future__ import annotations

import click

from . import options
from ._write import check_size, default_path, dtype_opt, entry, output_opt, summary, write_arrays

__all__ = ["alibi", "FORMS", "ENTRY"]

#: the name of the array in the file
ENTRY = "bias"

#: the forms of fastpe.alibi (listed here so that --help does not import the library)
FORMS = ("symmetric", "causal", "bloom", "mpt")


def _heads(value):
    from ..alibi import MAX_HEADS
    from .._validate import check_int

    return check_int("n_heads", value, low=1, high=MAX_HEADS)


def _length(name: str):
    def check(value):
        from ..alibi import MAX_LEN
        from .._validate import check_int

        return check_int(name, value, low=1, high=MAX_LEN)

    return check


def _max_bias(value):
    from ..alibi import check_max_bias

    return check_max_bias(value)


@click.command(short_help="Write an ALiBi bias (heads, queries, keys) to .npy, .npz or .safetensors.")
@click.option("--heads", "n_heads", type=int, required=True, callback=options.library_check("n_heads", _heads), metavar="N",
              help="Attention heads, 1 to 65536 (the slopes depend on the count).")
@click.option("--q-len", "q_len", type=int, required=True, callback=options.library_check("q_len", _length("q_len")),
              metavar="L", help="Queries (rows).")
@click.option("--k-len", "k_len", type=int, default=None, callback=options.library_check("k_len", _length("k_len")),
              metavar="K", help="Keys (columns). Default: L. symmetric and causal need K >= L.")
@click.option("--form", type=click.Choice(FORMS, case_sensitive=False), default="symmetric", show_default=True,
              help="symmetric -slope*|p-j|; causal the same with -inf for j > p; bloom slope*j; "
              "mpt slope*(j-K+1) (query i at key position p = i + K - L).")
@click.option("--max-bias", "max_bias", type=float, default=8.0, show_default=True,
              callback=options.library_check("max_bias", _max_bias), metavar="B",
              help="The slope schedule's maximum bias, in [2**-16, 64].")
@dtype_opt
@options.backend_opt
@output_opt("fastpe alibi", "alibi_<FORM>_<N>x<L>x<K>.npy")
@click.pass_context
def alibi(ctx: click.Context, n_heads: int, q_len: int, k_len, form: str, max_bias: float, dtype: str,
          backend, output) -> None:
    """Write the ALiBi bias to add to attention logits, an (N, L, K) array.

    Exactly fastpe.alibi.bias(N, L, K, form=FORM, max_bias=B, dtype=DTYPE): every finite
    value is the correctly rounded exact product of the head's slope and the distance.
    Prints one summary line (-q: nothing).

    The file records its spec (PATH.json beside a .npy, inside a .npz or .safetensors).  It
    is written atomically; on any error (or Ctrl-C) no file is left and an existing one is
    kept.  In .npy and .npz bfloat16 is stored as its raw bits, dtype uint16: read it back
    with numpy.load(PATH).view(ml_dtypes.bfloat16).

    \b
    Examples:
      fastpe alibi --heads 12 --q-len 2048 --form causal -o alibi.npy
      fastpe alibi --heads 32 --q-len 1 --k-len 4096 --form mpt --dtype bfloat16
    """
    from .. import _backends
    from .. import alibi as fa
    from .._io.writers import make_spec

    form, dtype = form.lower(), dtype.lower()
    k = q_len if k_len is None else k_len
    path = output or default_path(f"alibi_{form}_{n_heads}x{q_len}x{k}.npy", "fastpe alibi")
    with options.library_errors():
        name, _ = _backends.resolve(backend)  # to report which backend ran
    params = dict(n_heads=n_heads, q_len=q_len, k_len=k, form=form, max_bias=max_bias, dtype=dtype)
    spec = make_spec("alibi.bias", params)
    entries = [entry(ENTRY, (n_heads, q_len, k), dtype)]
    # past MAX_ELEMENTS the library refuses the bias itself, before allocating anything (and
    # before the free space is of interest)
    check_size(path, entries, spec, advice="ask for fewer --heads or a shorter --q-len/--k-len",
               space=n_heads * q_len * k <= fa.MAX_ELEMENTS)
    arrays, compute_s, write_s = write_arrays(path, entries, lambda: {ENTRY: fa.bias(**params, backend=name)},
                                              spec)
    array = arrays[ENTRY]
    if (ctx.obj or {}).get("verbosity", 0) >= 0:
        click.echo(summary(path, array, f"ALiBi {form}, max_bias {max_bias:g}", name, compute_s, write_s))
