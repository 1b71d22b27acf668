"""``fastpe rope``: write a model's RoPE cos/sin caches to one ``.npz``, ``.safetensors`` or
``.npy`` file (the last holds cos and sin stacked along a new first axis).

``--scaling`` takes an HF ``rope_scaling`` / ``rope_parameters`` dict as JSON text, or the
path of a JSON file holding either such a dict or a whole model ``config.json``.  A model
config is read by :meth:`fastpe.rope.Rotary.from_config` -- every field HF's rotary
embedding reads, where HF reads it, for that architecture (``--layer-type`` picks the
layers of a config with per-layer rope parameters); options given on the command line
override what it found.  The numbers come from :mod:`fastpe.rope`; this module only
gathers arguments and writes the file.  The library's warnings (``RopeConfigWarning``:
what HF's validators warn of) are printed as ``Warning:`` lines on stderr.

M-RoPE (a Qwen-VL config, or a rope dict with ``mrope_section``) takes its 3-D positions
from ``--positions``, a ``.npy`` of ``(3, seq)`` integers (time, height, width, as
:func:`fastpe.rope.mrope_positions` gives them), instead of ``--max-len``'s ``0 .. N-1``;
the spec records them as their nested list, or past :data:`SPEC_POSITIONS` values as
``{"shape": [3, seq], "sha256": HEX}``, the SHA-256 of their little-endian int64 bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings

import click

from . import options
from ._write import check_size, default_path, dtype_opt, dtype_text, entry, output_opt, write_arrays

__all__ = ["rope", "read_scaling", "ENTRIES", "STACKED"]

#: the arrays a file holds, in order; a .npy holds one array, STACKED (cos, sin on axis 0)
ENTRIES = ("cos", "sin", "inv_freq", "attention_factor")
STACKED = ("cos", "sin")
#: with --xpos-scale-base: the queries' and the keys' caches (a .npy holds the four stacked)
XPOS_ENTRIES = ("cos_q", "sin_q", "cos_k", "sin_k", "inv_freq", "attention_factor")
XPOS_STACKED = ("cos_q", "sin_q", "cos_k", "sin_k")
#: positions a spec lists at most; more are recorded by their shape and digest
SPEC_POSITIONS = 1 << 16


#: what a JSON value that is not an object is, in JSON's own words
_JSON_KINDS = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}


def read_scaling(value: str) -> tuple[str, dict]:
    """``--scaling``: ``("config", dict)`` for a model config, ``("scaling", dict)`` for a rope
    dict (``null`` is no rope dict: ``("scaling", {})``).

    JSON text starting with ``{`` is read as JSON; anything else is the path of a JSON file,
    or, when no file has that name, JSON text again -- so ``[1,2]`` is told it is JSON but not
    an object, not that no such file exists."""
    text = value.strip()
    is_text = text.startswith("{")
    if not is_text and not os.path.exists(value):
        try:
            json.loads(text)
        except json.JSONDecodeError:
            raise click.BadParameter(f"{value!r} is neither JSON text nor an existing file") from None
        except RecursionError:  # JSON, nested too deeply: said below
            pass
        is_text = True
    if is_text:
        where = "the --scaling JSON" if text.startswith("{") else repr(value)
    else:
        where = repr(value)
        try:  # a pipe or a device would block the read, or never end
            options.check_regular_file(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
        try:
            with open(value, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:  # removed since it was looked at
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
        kind = _JSON_KINDS.get(type(data), type(data).__name__)
        if is_text:
            raise click.BadParameter(f"{where} is JSON but not an object (a dict of rope parameters): it is {kind}")
        raise click.BadParameter(f"{where} holds JSON but not an object (a dict of rope parameters, or a model "
                                 f"config.json): it holds {kind}")
    from ..rope._config import is_model_config

    return ("config" if is_model_config(data) else "scaling"), data


def _scaling_handler(ctx, param, value):
    return None if value is None else read_scaling(value)


def _positions_handler(ctx, param, value):
    """``--positions``: a ``.npy`` of ``(3, seq)`` integers, memory-mapped (values checked
    once the config is known)."""
    if value is None:
        return None
    try:
        arr = options.open_npy(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if arr.ndim != 2 or arr.shape[0] != 3 or arr.dtype.kind not in "iu":
        raise click.BadParameter(f"{value!r} holds {arr.dtype} of shape {arr.shape}; give a (3, seq) integer "
                                 "array (M-RoPE's time, height and width positions)")
    if arr.shape[1] == 0:
        raise click.BadParameter(f"{value!r} holds no positions")
    return arr


def positions_spec(pos) -> object:
    """M-RoPE positions as a spec records them (see the module's docstring)."""
    import numpy as np

    if pos.size <= SPEC_POSITIONS:
        return np.asarray(pos, dtype=np.int64).tolist()
    return {"shape": list(pos.shape), "sha256": hashlib.sha256(np.asarray(pos, dtype="<i8").tobytes()).hexdigest()}


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
              help="RoPE theta, finite and > 1. Default: the model config's (wherever it keeps it), "
              "else rope_theta in the --scaling dict, else 10000.")
@click.option("--rotary-dim", type=int, default=None, metavar="N",
              help="Rotated dimensions per head (even). Default: the config's, head_dim * partial_rotary_factor.")
@click.option("--layout", type=click.Choice(["neox", "gptj"], case_sensitive=False), default=None,
              help="Column order: halves (HF/NeoX) or interleaved pairs (GPT-J). Default: the model "
              "config's architecture (gptj for GPT-J, Llama 4, DeepSeek-V3, ...), else neox.")
@click.option("--scaling", default=None, callback=_scaling_handler, metavar="JSON|PATH",
              help="An HF rope_scaling/rope_parameters dict as JSON text, or a JSON file holding "
              "one or a whole model config.json (read as Rotary.from_config reads it).")
@click.option("--layer-type", "layer_type", default=None, metavar="T",
              help="The layers to write, for a config with per-layer rope parameters (Gemma 3, Gemma 4, "
              "ModernBERT: full_attention, sliding_attention).")
@click.option("--max-position-embeddings", type=int, default=None, callback=_positive, metavar="N",
              help="The model's max_position_embeddings (dynamic, yarn, llama3, longrope). "
              "Default: from the config.")
@click.option("--seq-len", type=int, default=None, callback=_positive, metavar="N",
              help="Sequence length for dynamic/longrope. Default: MAX_LEN (with --positions, the largest "
              "position plus one), as HF's forward pass.")
@click.option("--positions", "positions", default=None, callback=_positions_handler, metavar="NPY",
              help="M-RoPE only (a Qwen-VL config or a dict with mrope_section): a .npy of (3, seq) integer "
              "positions (time, height, width); the caches are (seq, ROTARY_DIM), in place of --max-len.")
@click.option("--xpos-scale-base", "xpos_scale_base", type=float, default=None, metavar="SB",
              help="xPos: queries scaled by zeta ** (n / SB), keys by its inverse; the file holds cos_q, sin_q, "
              "cos_k, sin_k (a .npy: the four stacked on axis 0) in place of cos and sin.")
@click.option("--xpos-center", "xpos_center", default=None, metavar="C",
              help="xPos's centre: torchscale (default, n = p - ceil(T/2)), flash_attn (p - floor(T/2), also "
              "rotary-embedding-torch's) or an integer; T is --seq-len (default MAX_LEN).")
@dtype_opt
@options.backend_opt
@output_opt("fastpe rope", "rope_<MAX_LEN>x<ROTARY_DIM>.npz",
            holds="A .npz or .safetensors holds cos, sin, inv_freq and attention_factor; a .npy holds one "
            "array, cos and sin stacked: shape (2, MAX_LEN, ROTARY_DIM), axis 0 = (cos, sin).")
@click.pass_context
def rope(ctx: click.Context, head_dim, max_len, base, rotary_dim, layout, scaling, layer_type,
         max_position_embeddings, seq_len, positions, xpos_scale_base, xpos_center, dtype, backend,
         output) -> None:
    """Write RoPE caches for positions 0 .. MAX_LEN-1 to a .npz, .safetensors or .npy file.

    A .npz or .safetensors file holds cos and sin (MAX_LEN x ROTARY_DIM, --dtype, already
    multiplied by the attention factor, as HF's rotary embedding returns them), inv_freq
    (float64) and attention_factor (a float64 scalar): exactly fastpe.rope.cos_sin and
    fastpe.rope.inv_freq of the parameters the file's spec records.  A .npy file holds cos
    and sin stacked, an array of shape (2, MAX_LEN, ROTARY_DIM) whose axis 0 is (cos, sin).
    Every file records its spec (PATH.json beside a .npy, inside the others; a .npy's spec
    lists the stacked arrays).  Prints one summary line (-q: nothing); what HF's validators
    warn of is printed as a Warning: line on stderr.

    The file is written atomically; on any error nothing is written.

    \b
    Examples:
      fastpe rope --head-dim 128 --max-len 8192 --base 500000
      fastpe rope --scaling path/to/config.json --max-len 8192 -o llama3.npz
      fastpe rope --scaling gemma-3/config.json --layer-type sliding_attention --max-len 4096
      fastpe rope --head-dim 64 --max-len 4096 --scaling '{"rope_type": "linear", "factor": 2}'
      fastpe rope --scaling qwen2-vl/config.json --positions position_ids.npy
      fastpe rope --head-dim 64 --max-len 2048 --xpos-scale-base 512
    """
    import numpy as np

    from .. import _backends
    from .. import rope as fr
    from .._io.writers import make_spec, writer_for

    kind, data = scaling if scaling is not None else ("scaling", {})
    dtype = dtype.lower()
    if positions is not None and max_len is not None:
        raise options.InputError("give --max-len or --positions, not both (--positions sets the rows)")
    rows = None
    found = []  # the library's warnings, printed once each
    with _warnings_to(found):
        if kind == "config":
            rotary, config_mpe = _from_config(data, layer_type, head_dim, base, rotary_dim,
                                              max_position_embeddings, layout)
            if max_len is None and config_mpe is not None and positions is None:
                try:
                    max_len = options.max_len_handler(ctx, None, config_mpe)
                except click.BadParameter as exc:  # say where the value came from: no option was given
                    raise options.InputError(
                        f"the default --max-len, config 'max_position_embeddings', {exc.message}; pass --max-len"
                    ) from None
        else:
            if layer_type is not None:
                raise click.UsageError("--layer-type needs a model config.json in --scaling (a rope dict has "
                                       "one set of parameters)")
            data = dict(data)
            if base is not None:  # options on the command line win over the dict
                data.pop("rope_theta", None)
            if rotary_dim is not None:
                data.pop("partial_rotary_factor", None)
            if head_dim is None:
                raise click.UsageError("Missing option '--head-dim' (and no head_dim in a --scaling model config)")
            with options.library_errors():
                rotary = fr.Rotary(head_dim, base=base, rotary_dim=rotary_dim, scaling=data,
                                   max_position_embeddings=max_position_embeddings,
                                   layout=(layout or "neox").lower())
        if xpos_center is not None and xpos_scale_base is None:
            raise click.UsageError("--xpos-center needs --xpos-scale-base")
        if xpos_scale_base is not None:
            from ..rope._rotary import _xpos_key

            center = xpos_center or "torchscale"
            if center.strip().lstrip("-").isdigit():
                center = int(center)
            with options.library_errors():
                rotary = fr.Rotary._from_spec(rotary.spec, rotary.layout,
                                              _xpos_key(rotary.spec, xpos_scale_base, center))
        mrope = rotary.spec.mrope_section is not None
        if mrope and positions is None:
            raise options.InputError(
                f"this RoPE is M-RoPE (mrope_section {list(rotary.spec.mrope_section)}): give its (3, seq) "
                "positions with --positions (a .npy; fastpe.rope.mrope_positions computes them)")
        if positions is not None:
            if not mrope:
                raise options.InputError("--positions is for M-RoPE (a Qwen-VL config, or mrope_section in the "
                                         "rope dict); this RoPE takes positions 0 .. MAX_LEN-1 from --max-len")
            from .._validate import check_position_grid

            with options.library_errors():
                rows = check_position_grid(np.asarray(positions), (positions.shape,), name="--positions")
            if seq_len is None:
                seq_len = int(rows.max()) + 1  # HF's forward pass: the largest position plus one
        elif max_len is None:
            raise click.UsageError("Missing option '--max-len' (and no max_position_embeddings in a --scaling config)")
        if seq_len is None:
            seq_len = max_len  # what HF's forward pass sees for positions 0 .. max_len-1
        with options.library_errors():
            inv, attention = rotary.inv_freq_at(seq_len), rotary.attention_factor_at(seq_len)
            name, _ = _backends.resolve(backend)
    _echo_warnings(found)
    spec = rotary.spec
    n_rows = max_len if rows is None else rows.shape[1]
    stem = f"rope_{max_len}" if rows is None else f"rope_mrope_{n_rows}"
    path = output or default_path(f"{stem}x{spec.rotary_dim}.npz", "fastpe rope")
    recorded_positions = {"arange": max_len} if rows is None else positions_spec(rows)

    # the spec records the parameters: rope.cos_sin of them gives these bits -- the options
    # and the rope dict as given, or what the model config resolved to
    if kind == "config":
        params = dict(positions=recorded_positions, head_dim=spec.head_dim, base=spec.base,
                      rotary_dim=None if spec.rope_type == "proportional" else spec.rotary_dim,
                      scaling=rule_dict(spec), seq_len=seq_len, max_position_embeddings=spec.max_position_embeddings,
                      layout=rotary.layout, dtype=dtype)
    else:
        params = dict(positions=recorded_positions, head_dim=head_dim, base=base, rotary_dim=rotary_dim,
                      scaling=data, seq_len=seq_len, max_position_embeddings=max_position_embeddings,
                      layout=rotary.layout, dtype=dtype)
    xpos = rotary.xpos_scale_base is not None
    if xpos:  # what cos_sin took: its four caches replay from these
        params.update(xpos_scale_base=rotary.xpos_scale_base, xpos_center=rotary.xpos_center)
    recorded = make_spec("rope.cos_sin", params)
    one = writer_for(path).one_array
    names = (XPOS_STACKED if one else XPOS_ENTRIES) if xpos else (STACKED if one else ENTRIES)
    shape = (n_rows, spec.rotary_dim)
    caches = XPOS_STACKED if xpos else STACKED
    entries = [*(entry(c, shape, dtype) for c in caches),
               entry("inv_freq", inv.shape, inv.dtype), entry("attention_factor", (), "float64")]
    entries = [e for e in entries if e.name in names]
    # cos and sin (max_len, rotary_dim) each: refused before anything is allocated when they
    # cannot be held in memory or written (exit status 2, or 1 for the disk)
    check_size(path, entries, recorded, held=((len(caches), *shape), dtype),
               advice="ask for a shorter --max-len, a smaller --rotary-dim or a 16-bit --dtype")

    def compute():
        with warnings.catch_warnings():  # said once above
            warnings.simplefilter("ignore", fr.RopeConfigWarning)
            pos = np.arange(max_len, dtype=np.uint32) if rows is None else rows
            values = rotary.cos_sin(pos, dtype=dtype, seq_len=seq_len, backend=name)
        return {**dict(zip(caches, values)), "inv_freq": np.array(inv), "attention_factor": np.float64(attention)}

    arrays, compute_s, write_s = write_arrays(path, entries, compute, recorded)
    cos = arrays[caches[0]]

    if (ctx.obj or {}).get("verbosity", 0) >= 0:
        click.echo(
            f"wrote {path}: {', '.join(caches)} {dtype_text(cos.dtype, path)} {cos.shape} {rotary.layout}, "
            f"rope_type {spec.rope_type}, "
            f"base {spec.base:g}, attention_factor {attention:.8g}, {options.human_size(len(caches) * cos.nbytes)}, "
            f"{f'xpos_scale_base {rotary.xpos_scale_base:g} ({rotary.xpos_center}), ' if xpos else ''}"
            f"backend {name}, {options.milliseconds(compute_s)} compute + {options.milliseconds(write_s)} write"
        )


def _from_config(data: dict, layer_type, head_dim, base, rotary_dim, max_position_embeddings, layout):
    """``(Rotary, the config's max_position_embeddings)`` of a model config, read by
    ``Rotary.from_config``; the options given replace what it found."""
    from .. import rope as fr
    from ..rope import _config

    try:
        spec, found_layout = _config.read_config(data, layer_type, head_dim=head_dim)
    except (TypeError, ValueError) as exc:
        if str(exc).startswith("the config gives no head size"):
            raise options.InputError(f"{exc}; or pass --head-dim") from exc
        if str(exc).startswith("the config has per-layer rope parameters"):
            raise options.InputError(str(exc).replace("pass layer_type=", "pass --layer-type")) from exc
        raise options.InputError(str(exc)) from exc
    config_mpe = spec.max_position_embeddings
    with options.library_errors():
        if base is None and rotary_dim is None and max_position_embeddings is None:
            rotary = fr.Rotary._from_spec(spec, (layout or found_layout).lower())
        else:
            with warnings.catch_warnings():  # the config's own warnings were given once, above
                warnings.simplefilter("ignore", fr.RopeConfigWarning)
                if rotary_dim is None and spec.rope_type != "proportional":
                    rotary_dim = spec.rotary_dim
                rotary = fr.Rotary(spec.head_dim, base=spec.base if base is None else base, rotary_dim=rotary_dim,
                                   scaling=rule_dict(spec),
                                   max_position_embeddings=max_position_embeddings or spec.max_position_embeddings,
                                   layout=(layout or found_layout).lower())
    return rotary, config_mpe


def rule_dict(spec) -> dict:
    """A rope dict of a resolved spec's rule (JSON-ready), which ``fastpe.rope`` resolves back
    to the same spec given the same head_dim, base, rotary_dim and max_position_embeddings."""
    out = {"rope_type": spec.rope_type}
    for key in ("factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow",
                "mscale", "mscale_all_dim", "truncate", "low_freq_factor", "high_freq_factor", "short_factor",
                "long_factor", "short_mscale", "long_mscale", "partial_rotary_factor", "mrope_section",
                "mrope_interleaved"):
        value = getattr(spec, key, None)
        if value is not None:
            out[key] = list(value) if isinstance(value, tuple) else value
    return out


class _warnings_to:
    """Collect the library's RopeConfigWarnings (whatever the process's warning filters say)."""

    def __init__(self, found: list):
        self.found = found
        self.catcher = warnings.catch_warnings(record=True)

    def __enter__(self):
        self.record = self.catcher.__enter__()
        warnings.simplefilter("always", _warning_class())
        return self

    def __exit__(self, *exc):
        for w in self.record:
            if issubclass(w.category, _warning_class()):
                text = str(w.message)
                if text not in self.found:
                    self.found.append(text)
            else:  # not ours: as it would have been shown
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)
        self.catcher.__exit__(*exc)
        return False  # on an error, its one line is all that is said


def _warning_class():
    from ..rope import RopeConfigWarning

    return RopeConfigWarning


def _echo_warnings(found: list) -> None:
    for text in found:
        click.echo(f"Warning: {text}", err=True)
    found.clear()
