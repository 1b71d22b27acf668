"""``fastpe rope``: write a model's RoPE cos/sin caches to one ``.npz``, ``.safetensors`` or
``.npy`` file (the last holds cos and sin stacked along a new first axis).

``--scaling`` takes an HF ``rope_scaling`` / ``rope_parameters`` dict as JSON text, or the
path of a JSON file holding either such a dict or a whole model ``config.json``.  From a
model config the command reads what HF's rotary embedding reads -- ``rope_theta``,
``rope_scaling`` (or ``rope_parameters``), ``partial_rotary_factor``, ``head_dim`` (else
``hidden_size // num_attention_heads``), ``max_position_embeddings`` and a top-level
``original_max_position_embeddings`` (Phi-3 keeps it there) -- with HF's precedence;
options given on the command line override the file.  The numbers come from
:mod:`fastpe.rope`; this module only gathers arguments and writes the file.
"""

from __future__ import annotations

import json
import os

import click

from . import options
from ._write import check_size, default_path, entry, output_opt, write_arrays

__all__ = ["rope", "read_scaling", "from_model_config", "ENTRIES", "STACKED"]

#: the arrays a file holds, in order; a .npy holds one array, STACKED (cos, sin on axis 0)
ENTRIES = ("cos", "sin", "inv_freq", "attention_factor")
STACKED = ("cos", "sin")

#: keys that mark a JSON object as a model config rather than a rope dict
_CONFIG_KEYS = frozenset({
    "rope_scaling", "rope_parameters", "hidden_size", "num_attention_heads", "head_dim",
    "max_position_embeddings", "model_type", "architectures",
})


def read_scaling(value: str) -> tuple[str, dict]:
    """``--scaling``: ``("config", dict)`` for a model config, ``("scaling", dict)`` for a rope
    dict.  JSON text starts with ``{``; anything else is a path to a JSON file."""
    text = value.strip()
    if text.startswith("{"):
        where = "the --scaling JSON"
    else:
        where = repr(value)
        if os.path.exists(value):
            try:  # a pipe or a device would block the read, or never end
                options.check_regular_file(value)
            except ValueError as exc:
                raise click.BadParameter(str(exc)) from None
        try:
            with open(value, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            raise click.BadParameter(f"{value!r} is neither JSON text nor an existing file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise click.BadParameter(f"cannot read {value!r}: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"{where} is not valid JSON: {exc}") from None
    except RecursionError:  # json's parser recurses once per nesting level
        raise click.BadParameter(f"{where} is nested too deeply to be a rope config") from None
    if data is None:
        return "scaling", {}
    if not isinstance(data, dict):
        raise click.BadParameter(f"{where} must be a JSON object, got {type(data).__name__}")
    kind = "config" if _CONFIG_KEYS & data.keys() else "scaling"
    return kind, data


def _scaling_handler(ctx, param, value):
    return None if value is None else read_scaling(value)


def _positive_int(config: dict, key: str):
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise options.InputError(f"config {key!r} must be a positive integer, got {value!r}")
    return value


def from_model_config(config: dict) -> dict:
    """What HF's rotary embedding reads from a model config, as ``fastpe.rope`` arguments:
    ``scaling`` (a new dict), ``head_dim`` and ``max_position_embeddings`` (None if absent)."""
    scaling = config.get("rope_scaling") or config.get("rope_parameters") or {}  # HF's order
    if not isinstance(scaling, dict):
        raise options.InputError(f"config 'rope_scaling' must be a JSON object, got {type(scaling).__name__}")
    scaling = dict(scaling)
    # top-level values fill in what the dict lacks (HF's setdefault) ...
    for key in ("rope_theta", "partial_rotary_factor"):
        if config.get(key) is not None:
            scaling.setdefault(key, config[key])
    # ... except Phi-3's top-level original length, which HF prefers to the dict's
    from ..rope._scaling import ORIGINAL_LENGTH_TYPES

    rope_type = scaling.get("rope_type", scaling.get("type"))
    if config.get("original_max_position_embeddings") is not None and rope_type in ORIGINAL_LENGTH_TYPES:
        scaling["original_max_position_embeddings"] = config["original_max_position_embeddings"]

    head_dim = _positive_int(config, "head_dim")
    if head_dim is None:
        hidden, heads = _positive_int(config, "hidden_size"), _positive_int(config, "num_attention_heads")
        if hidden is not None and heads is not None:
            head_dim = hidden // heads
    return {
        "scaling": scaling,
        "head_dim": head_dim,
        "max_position_embeddings": _positive_int(config, "max_position_embeddings"),
    }


def _positive(ctx, param, value):
    if value is not None and value < 1:
        raise click.BadParameter(f"must be >= 1, got {value}")
    return value


@click.command(short_help="Write RoPE cos/sin caches (any HF rope scaling) to .npz, .safetensors or .npy.")
@click.option("--head-dim", type=int, default=None, callback=_positive, metavar="N",
              help="Size of one attention head. Default: from the --scaling model config.")
@click.option("--max-len", "max_len", type=int, default=None, callback=options.max_len_handler, metavar="N",
              help="Rows: positions 0 to N-1. Default: the config's max_position_embeddings.")
@click.option("--base", type=float, default=None, callback=options.base_handler, metavar="B",
              help="RoPE theta, finite and > 1. Default: rope_theta from --scaling, else 10000.")
@click.option("--rotary-dim", type=int, default=None, metavar="N",
              help="Rotated dimensions per head (even). Default: head_dim * partial_rotary_factor.")
@click.option("--layout", type=click.Choice(["neox", "gptj"], case_sensitive=False), default="neox",
              show_default=True, help="Column order: halves (HF/NeoX) or interleaved pairs (GPT-J).")
@click.option("--scaling", default=None, callback=_scaling_handler, metavar="JSON|PATH",
              help="An HF rope_scaling/rope_parameters dict as JSON text, or a JSON file holding "
              "one or a whole model config.json.")
@click.option("--max-position-embeddings", type=int, default=None, callback=_positive, metavar="N",
              help="The model's max_position_embeddings (dynamic, yarn, llama3, longrope). "
              "Default: from the config.")
@click.option("--seq-len", type=int, default=None, callback=_positive, metavar="N",
              help="Sequence length for dynamic/longrope. Default: MAX_LEN, as HF's forward pass.")
@options.backend_opt
@output_opt("fastpe rope", "rope_<MAX_LEN>x<ROTARY_DIM>.npz",
            holds="A .npz or .safetensors holds cos, sin, inv_freq and attention_factor; a .npy holds one "
            "array, cos and sin stacked: shape (2, MAX_LEN, ROTARY_DIM), axis 0 = (cos, sin).")
@click.pass_context
def rope(ctx: click.Context, head_dim, max_len, base, rotary_dim, layout, scaling, max_position_embeddings,
         seq_len, backend, output) -> None:
    """Write RoPE caches for positions 0 .. MAX_LEN-1 to a .npz, .safetensors or .npy file.

    A .npz or .safetensors file holds cos and sin (float32, MAX_LEN x ROTARY_DIM, already
    multiplied by the attention factor, as HF's rotary embedding returns them), inv_freq
    (float64) and attention_factor (a float64 scalar): exactly fastpe.rope.cos_sin and
    fastpe.rope.inv_freq of the same arguments.  A .npy file holds cos and sin stacked, an
    array of shape (2, MAX_LEN, ROTARY_DIM) whose axis 0 is (cos, sin).  Every file records
    its spec (PATH.json beside a .npy, inside the others; a .npy's spec lists the stacked
    arrays).  Prints one summary line (-q: nothing).

    The file is written atomically; on any error nothing is written.

    \b
    Examples:
      fastpe rope --head-dim 128 --max-len 8192 --base 500000
      fastpe rope --scaling path/to/config.json --max-len 8192 -o llama3.npz
      fastpe rope --head-dim 64 --max-len 4096 --scaling '{"rope_type": "linear", "factor": 2}'
    """
    import numpy as np

    from .. import _backends
    from .. import rope as fr
    from .._io.writers import make_spec, writer_for

    kind, data = scaling if scaling is not None else ("scaling", {})
    if kind == "config":
        found = from_model_config(data)
        data = found["scaling"]
        head_dim = head_dim if head_dim is not None else found["head_dim"]
        if max_position_embeddings is None:
            max_position_embeddings = found["max_position_embeddings"]
        if max_len is None and found["max_position_embeddings"] is not None:
            try:
                max_len = options.max_len_handler(ctx, None, found["max_position_embeddings"])
            except click.BadParameter as exc:  # say where the value came from: no option was given
                raise options.InputError(
                    f"the default --max-len, config 'max_position_embeddings', {exc.message}; pass --max-len"
                ) from None
    else:
        data = dict(data)
    # options on the command line win over the file
    if base is not None:
        data.pop("rope_theta", None)
    if rotary_dim is not None:
        data.pop("partial_rotary_factor", None)
    if head_dim is None:
        raise click.UsageError("Missing option '--head-dim' (and no head_dim in a --scaling model config)")
    if max_len is None:
        raise click.UsageError("Missing option '--max-len' (and no max_position_embeddings in a --scaling config)")

    if seq_len is None:
        seq_len = max_len  # what HF's forward pass sees for positions 0 .. max_len-1
    with options.library_errors():
        spec = fr.resolve(head_dim, base=base, rotary_dim=rotary_dim, scaling=data,
                          max_position_embeddings=max_position_embeddings)
        inv, attention = fr.inv_freq(head_dim, base=base, rotary_dim=rotary_dim, scaling=data, seq_len=seq_len,
                                     max_position_embeddings=max_position_embeddings)
        name, _ = _backends.resolve(backend)
    path = output or default_path(f"rope_{max_len}x{spec.rotary_dim}.npz", "fastpe rope")

    layout = layout.lower()
    params = dict(positions={"arange": max_len}, head_dim=head_dim, base=base, rotary_dim=rotary_dim, scaling=data,
                  seq_len=seq_len, max_position_embeddings=max_position_embeddings, layout=layout, dtype="float32")
    recorded = make_spec("rope.cos_sin", params)
    names = STACKED if writer_for(path).one_array else ENTRIES
    shape = (max_len, spec.rotary_dim)
    entries = [entry("cos", shape, "float32"), entry("sin", shape, "float32"),
               entry("inv_freq", inv.shape, inv.dtype), entry("attention_factor", (), "float64")]
    entries = [e for e in entries if e.name in names]
    # cos and sin, float32 (max_len, rotary_dim) each: refused before anything is allocated
    # when they cannot be held in memory or written (exit status 2, or 1 for the disk)
    check_size(path, entries, recorded, held=((2, *shape), "float32"))

    def compute():
        cos, sin = fr.cos_sin(**{**params, "positions": np.arange(max_len, dtype=np.uint32)}, backend=name)
        return {"cos": cos, "sin": sin, "inv_freq": inv, "attention_factor": np.float64(attention)}

    arrays, compute_s, write_s = write_arrays(path, entries, compute, recorded)
    cos = arrays["cos"]

    if (ctx.obj or {}).get("verbosity", 0) >= 0:
        click.echo(
            f"wrote {path}: cos, sin {cos.dtype} {cos.shape} {layout}, rope_type {spec.rope_type}, "
            f"base {spec.base:g}, attention_factor {attention:.8g}, {options.human_size(2 * cos.nbytes)}, "
            f"backend {name}, {options.milliseconds(compute_s)} compute + {options.milliseconds(write_s)} write"
        )
