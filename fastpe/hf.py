"""fastpe's exact RoPE inside a Hugging Face transformers model: :func:`patch` and :func:`unpatch`.

``fastpe.hf.patch(model)`` replaces every rotary embedding module of a loaded transformers
model (``<Arch>RotaryEmbedding``, found by walking ``model.modules()``) with a module that
returns what the original returns -- the same tuple, shapes, dtype and device -- computed
from fastpe's exact caches (:meth:`fastpe.rope.Rotary.cos_sin`, configured by
:meth:`fastpe.rope.Rotary.from_config` from the model's own config).  HF computes the angle
``p * inv_freq`` in float32, which is off by up to ``p * 2**-24`` radians (0.06 at position
10**6); fastpe's caches are within 1 float32 ULP of the exact values at every position
below ``2**32``, in the model's dtype (float16 and bfloat16 correctly rounded, float64
exact to float64).

``patch(model, fused=True)`` also replaces the function the architecture's attention calls
to rotate q and k (``apply_rotary_pos_emb`` of its modeling module, GPT-J's, Llama 4's
``apply_rotary_emb``) with one that recognises fastpe's caches and rotates q and k in place
through fastpe's kernel (:meth:`fastpe.rope.Rotary.apply_qk_`, ``float32(x1*C - x2*S)``
evaluated in double from the exact ``C, S``), and calls HF's own function -- HF's arithmetic
on fastpe's caches -- whenever the kernel cannot take the tensors (not float32 CPU tensors,
tensors that require grad, or memory that is not ``(tokens, heads, head_dim)`` rows, as
with slices of a fused qkv projection) and for every cache fastpe did not make, so other
models in the process are unaffected.

:func:`unpatch` puts every original module back (the same objects) and, once no patched
model needs them, the original functions; it returns the model.  Patching a patched model
again with the same ``fused`` is a no-op; with another ``fused`` it is a ``ValueError``.

What is not changed: weights, the attention arithmetic (unless ``fused``), masks, caches,
every module but the rotary ones.  Differences from HF's module, all deliberate:

* the values: exact instead of float32 angles (the point of the patch);
* positions beyond GPT-J's ``n_positions`` work (HF indexes a precomputed table);
* Llama 4 in float64 returns ``complex128`` ``freqs_cis`` (HF's is ``complex64`` in every
  dtype, so its ``.double()`` model rotates in float32);
* dynamic NTK: HF's module keeps the longest length it has seen (``max_seq_len_cached``) and
  resets below ``max_position_embeddings``; the patched module follows the same rule with a
  memory of its own, starting from the HF module's at patch time (lengths seen while patched
  are not written back to HF's module);
* Phi-3.5-MoE (``phimoe``) reproduces HF: its module always uses ``short_factor``
  frequencies (it recomputes them without the length) with ``long_mscale`` past
  ``original_max_position_embeddings``, ``short_mscale`` below.

torch and transformers are imported when :func:`patch` runs, never by ``import fastpe`` or
``import fastpe.hf``.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import importlib
import sys
import threading
import weakref

import numpy as np

__all__ = ["patch", "unpatch", "is_patched", "SUPPORTED"]


@dataclasses.dataclass(frozen=True)
class Family:
    """How one architecture's rotary module returns its caches and rotates q and k."""

    #: the modeling module under ``transformers.models`` (``modeling_<module>``)
    module: str
    #: the rotary module's class in it
    rotary: str
    #: what ``forward`` returns: ``"halves"`` -- ``(cos, sin)``, ``cat(freqs, freqs)`` at the
    #: rotary width; ``"frequencies"`` -- ``(cos, sin)``, one column per frequency (gpt-oss);
    #: ``"gptj"`` -- ``(sin, cos)``, one column per frequency; ``"complex"`` -- Llama 4's
    #: ``freqs_cis``
    returns: str
    #: whether ``forward`` takes a ``layer_type`` (one rope configuration per layer type)
    per_layer: bool = False
    #: the modeling module's functions ``fused=True`` replaces, and how each is called:
    #: ``"qk"`` -- ``(q, k, cos, sin, unsqueeze_dim=1)``; ``"one"`` -- ``(x, cos, sin,
    #: unsqueeze_dim=1)`` (Gemma 4); ``"gptj"`` -- ``(x, sin, cos)``; ``"complex"`` --
    #: ``(xq, xk, freqs_cis)``
    fused: tuple[tuple[str, str], ...] = (("apply_rotary_pos_emb", "qk"),)
    #: a note for the documentation
    note: str = ""


_QK = (("apply_rotary_pos_emb", "qk"),)

#: model_type -> its family: every architecture :func:`patch` takes
SUPPORTED: dict[str, Family] = {
    "llama": Family("llama", "LlamaRotaryEmbedding", "halves", note="Llama 2, 3, 3.1, 3.2"),
    "llama4_text": Family("llama4", "Llama4TextRotaryEmbedding", "complex", fused=(("apply_rotary_emb", "complex"),),
                          note="Llama 4 text model (Llama4ForCausalLM)"),
    "mistral": Family("mistral", "MistralRotaryEmbedding", "halves"),
    "qwen2": Family("qwen2", "Qwen2RotaryEmbedding", "halves", note="Qwen2, Qwen2.5"),
    "qwen3": Family("qwen3", "Qwen3RotaryEmbedding", "halves"),
    "phi3": Family("phi3", "Phi3RotaryEmbedding", "halves", note="Phi-3, Phi-3.5-mini, Phi-4-mini"),
    "phimoe": Family("phimoe", "PhimoeRotaryEmbedding", "halves", note="Phi-3.5-MoE"),
    "gemma2": Family("gemma2", "Gemma2RotaryEmbedding", "halves"),
    "gemma3_text": Family("gemma3", "Gemma3RotaryEmbedding", "halves", per_layer=True,
                          note="Gemma 3 text model (Gemma3ForCausalLM)"),
    "gemma3": Family("gemma3", "Gemma3RotaryEmbedding", "halves", per_layer=True,
                     note="Gemma 3 with its vision tower (Gemma3ForConditionalGeneration)"),
    "gemma4_text": Family("gemma4", "Gemma4TextRotaryEmbedding", "halves", per_layer=True,
                          fused=(("apply_rotary_pos_emb", "one"),), note="Gemma 4 text model"),
    "gpt_neox": Family("gpt_neox", "GPTNeoXRotaryEmbedding", "halves", note="GPT-NeoX, Pythia"),
    "gptj": Family("gptj", "GPTJRotaryEmbedding", "gptj", fused=(("apply_rotary_pos_emb", "gptj"),)),
    "stablelm": Family("stablelm", "StableLmRotaryEmbedding", "halves"),
    # DeepSeek's rope_interleave path (apply_rotary_pos_emb_interleave) returns the pairs
    # de-interleaved, which no in-place rotation gives: it is left as it is
    "deepseek_v3": Family("deepseek_v3", "DeepseekV3RotaryEmbedding", "halves"),
    "gpt_oss": Family("gpt_oss", "GptOssRotaryEmbedding", "frequencies"),
    "modernbert": Family("modernbert", "ModernBertRotaryEmbedding", "halves", per_layer=True),
}

#: the private attribute of a model that :func:`patch` patched (its :class:`_State`)
_STATE = "_fastpe_hf_patch"
#: the private attribute of a cache tensor made by a fused patched module (its :class:`_Caches`)
_MARK = "_fastpe_rope_caches"

#: how often the fused functions rotated through the kernel / fell back to HF's arithmetic
#: (keyed by (path, function's qualified name)); for the tests and for curiosity
FUSED_CALLS: collections.Counter = collections.Counter()

_LOCK = threading.RLock()
#: (modeling module name, function name) -> [HF's function, the replacement, the fused patched
#: models using it (weakly: a model dropped unpatched lets it go at the next patch or unpatch)]
_INSTALLED: dict[tuple[str, str], list] = {}


def supported_text() -> str:
    """The supported model types, one line, for messages."""
    return ", ".join(sorted(SUPPORTED))


# ==================================================================================== patch


def patch(model, *, fused: bool = False):
    """Make every rotary embedding module of ``model`` return fastpe's exact caches; return ``model``.

    ``model``: a loaded transformers model (``PreTrainedModel``) of a supported
    ``config.model_type`` (:data:`SUPPORTED`), in any dtype and on any device.  Each
    ``<Arch>RotaryEmbedding`` module is replaced by a :class:`PatchedRotaryEmbedding` that
    holds it (as its ``original`` submodule, so that ``.to()``, ``.half()`` and the like
    reach it as before) and returns, from the ``position_ids`` it is given, what it returns
    -- ``(cos, sin)`` at its width, GPT-J's ``(sin, cos)``, gpt-oss's one column per
    frequency, Llama 4's complex ``freqs_cis`` times its attention scaling, per layer type
    for Gemma 3/4 and ModernBERT -- in the dtype of ``x`` on its device, computed by fastpe
    in that dtype.  Dynamic NTK and LongRoPE see the lengths HF's module sees (see the
    module notes).

    ``fused=True`` also routes the architecture's q/k rotation through fastpe's kernel,
    in place, where the tensors allow it (see the module notes); results equal
    ``fused=False`` within float32 rounding of the rotation.

    Everything is checked before anything is modified: an unsupported model type, a rotary
    module of a class not listed for it, a model without one, a config fastpe reads
    differently from the model's own rotary module (its ``inv_freq`` compared), are each a
    ``TypeError`` / ``ValueError`` naming what and listing what is supported.
    """
    if not isinstance(fused, (bool, np.bool_)):
        raise TypeError(f"fused must be True or False, got {type(fused).__name__} {fused!r}")
    fused = bool(fused)
    torch = _import_torch()
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"patch takes a transformers model (a torch.nn.Module with a config), got "
                        f"{type(model).__name__}")
    with _LOCK:
        state = model.__dict__.get(_STATE)
        if state is not None:
            if state.fused == fused:
                return model  # patched already, the same way
            raise ValueError(f"this model is already patched with fused={state.fused}; call "
                             f"fastpe.hf.unpatch(model) before patching it with fused={fused}")
        plan = _plan(model)
        _apply(model, plan, fused)
    return model


def unpatch(model):
    """Undo :func:`patch`: every original rotary module back in its place (the same
    objects), and the original functions once no fused patched model uses them; return
    ``model``.  A model that is not patched is returned as it is."""
    with _LOCK:
        state = model.__dict__.get(_STATE)
        if state is None:
            return model
        for parent, name, original, _ in state.replaced:
            parent._modules[name] = original  # the same slot: the module order is kept
        for key in state.functions:
            entry = _INSTALLED.get(key)
            if entry is not None:
                entry[2].discard(model)
        del model.__dict__[_STATE]
        _release()
    return model


def _release() -> None:
    """Put back every original function no fused patched model uses any more."""
    for key, (original, replacement, users) in list(_INSTALLED.items()):
        if not users:
            module = sys.modules[key[0]]
            if module.__dict__.get(key[1]) is replacement:  # unless someone replaced it since
                setattr(module, key[1], original)
            del _INSTALLED[key]


def is_patched(model) -> bool:
    """Whether :func:`patch` patched ``model`` (and :func:`unpatch` has not undone it)."""
    return _STATE in getattr(model, "__dict__", {})


@dataclasses.dataclass
class _State:
    fused: bool
    #: (parent module, attribute name, original module, patched module)
    replaced: list
    #: the keys of _INSTALLED this model holds
    functions: list


@dataclasses.dataclass
class _Plan:
    family: Family
    model_type: str
    #: (parent, name, original) for every place a rotary module sits
    places: list
    #: id(original) -> the patched module that replaces it
    patched: dict


def _plan(model) -> _Plan:
    """Check the model and build the patched modules, modifying nothing."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if not isinstance(model_type, str):
        raise TypeError(f"patch takes a transformers model with a config; {type(model).__name__} has no "
                        f"config.model_type")
    family = SUPPORTED.get(model_type)
    if family is None:
        raise TypeError(f"fastpe.hf.patch does not support model type {model_type!r} ({type(model).__name__}); "
                        f"supported: {supported_text()}")
    patched_class = _patched_class()
    places, seen = [], {}
    for parent in model.modules():
        for name, child in parent._modules.items():
            if isinstance(child, patched_class):
                raise ValueError(f"part of this {type(model).__name__} is already patched (its "
                                 f"{_where(model, parent, name)}): unpatch the model it was patched through first")
            if child is None or not type(child).__name__.endswith("RotaryEmbedding"):
                continue
            cls = type(child)
            want = f"transformers.models.{family.module}.modeling_{family.module}"
            if cls.__name__ != family.rotary or cls.__module__ != want:
                raise TypeError(f"fastpe.hf.patch does not support the rotary module {cls.__module__}.{cls.__name__} "
                                f"(at {_where(model, parent, name)}) of this {model_type!r} model: it patches "
                                f"{want}.{family.rotary} there; supported model types: {supported_text()}")
            places.append((parent, name, child))
            seen.setdefault(id(child), child)
    if not places:
        raise ValueError(f"this {model_type!r} model ({type(model).__name__}) has no {family.rotary} module to patch")
    patched = {key: patched_class(original, family, _rotaries(model, original, family, model_type), model_type)
               for key, original in seen.items()}
    return _Plan(family, model_type, places, patched)


def _where(model, parent, name) -> str:
    for path, m in model.named_modules():
        if m is parent:
            return f"{path}.{name}" if path else name
    return name


def _apply(model, plan: _Plan, fused: bool) -> None:
    """Install what :func:`_plan` built (nothing here can fail half-way)."""
    _release()
    functions = []
    if fused:
        module_name = f"transformers.models.{plan.family.module}.modeling_{plan.family.module}"
        module = importlib.import_module(module_name)
        for func_name, kind in plan.family.fused:
            key = (module_name, func_name)
            entry = _INSTALLED.get(key)
            if entry is None:
                original = getattr(module, func_name)
                entry = _INSTALLED[key] = [original, _fused_function(original, kind), weakref.WeakSet()]
                setattr(module, func_name, entry[1])
            entry[2].add(model)
            functions.append(key)
    replaced = []
    for parent, name, original in plan.places:
        new = plan.patched[id(original)]
        new.fused = fused
        parent._modules[name] = new  # the same slot: the module order is kept
        replaced.append((parent, name, original, new))
    model.__dict__[_STATE] = _State(fused, replaced, functions)


# ================================================================== reading the configuration


@dataclasses.dataclass
class _Rope:
    """One rope configuration of a patched module (one per layer type)."""

    #: makes the caches (HF's ``cat(freqs, freqs)`` layout)
    cache: object
    #: rotates q and k (the architecture's pairing)
    kernel: object
    #: dynamic NTK: HF's ``[max_position_embeddings, max_seq_len_cached]``, else None
    dynamic: list | None
    #: the length-dependent rules' length is passed explicitly (longrope)
    longrope: bool


def _rotaries(model, original, family: Family, model_type: str) -> dict:
    """``{layer_type: _Rope}`` (``{None: ...}`` without layer types) for one HF rotary module,
    each checked against the module's own ``inv_freq``."""
    from .rope import Rotary

    config = getattr(original, "config", None)
    if config is None:  # GPT-J's module keeps no config
        config = model.config
    if family.per_layer:
        layer_types = list(getattr(original, "rope_type", {}) or {})
        if not layer_types:
            raise ValueError(f"the {type(original).__name__} of this {model_type!r} model has no layer types with "
                             "rope parameters")
    else:
        layer_types = [None]
    out = {}
    for layer_type in layer_types:
        where = f" for layer_type {layer_type!r}" if layer_type is not None else ""
        try:
            rotary = Rotary.from_config(config, layer_type=layer_type)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"fastpe cannot read the rope configuration of this {model_type!r} model{where}: "
                            f"{exc}") from None
        _check_against(original, rotary, layer_type, model_type, family)
        spec = rotary.spec
        if model_type == "phimoe" and spec.rope_type == "longrope":
            # HF's Phimoe module recomputes inv_freq without the length (short_factor always),
            # while its mscale follows the length: the same spec with the long factors short
            spec = dataclasses.replace(spec, long_factor=spec.short_factor)
            rotary = Rotary._from_spec(spec, rotary.layout)
        elif model_type == "phimoe" and spec.rope_type != "default":
            raise ValueError(f"this phimoe model's rope_type is {spec.rope_type!r}: HF's PhimoeRotaryEmbedding reads "
                             "short_mscale / long_mscale, which only 'longrope' (or 'default') defines here")
        cache = rotary if rotary.layout == "neox" else Rotary._from_spec(spec, "neox")
        dynamic = None
        if spec.rope_type == "dynamic":
            prefix = f"{layer_type}_" if layer_type is not None else ""
            mpe = int(getattr(original, "original_max_seq_len", spec.max_position_embeddings))
            dynamic = [mpe, int(getattr(original, f"{prefix}max_seq_len_cached",
                                        getattr(original, "max_seq_len_cached", mpe)))]
        out[layer_type] = _Rope(cache, rotary, dynamic, spec.rope_type == "longrope")
    return out


def _check_against(original, rotary, layer_type, model_type: str, family: Family) -> None:
    """Refuse a configuration fastpe reads differently from HF's module: its initial
    ``inv_freq`` (float32, or the model's dtype after ``.half()``) must be fastpe's within
    HF's float32 error, and its attention scaling fastpe's."""
    torch = _import_torch()
    name = type(original).__name__
    if family.returns == "gptj":
        table = getattr(original, "embed_positions", None)
        if table is None or table.ndim != 2 or table.shape[1] != rotary.rotary_dim:
            width = None if table is None else tuple(table.shape)
            raise ValueError(f"fastpe reads rotary_dim {rotary.rotary_dim} from this gptj model's config, but its "
                             f"{name} holds a table of shape {width}")
        if table.shape[0] < 2 or table.device.type == "meta":
            return
        hf = table[1, : rotary.rotary_dim // 2].detach().to("cpu", torch.float64).numpy()
        ours = np.sin(np.asarray(rotary.inv_freq))
        _compare(hf, ours, table.dtype, f"sin(inv_freq) (row 1 of {name}.embed_positions)", model_type, layer_type)
        return
    prefix = f"{layer_type}_" if layer_type is not None else ""
    buffer = getattr(original, f"{prefix}original_inv_freq", None)
    if buffer is None:
        buffer = getattr(original, f"{prefix}inv_freq", None)
    if buffer is None:
        raise ValueError(f"the {name} of this {model_type!r} model has no {prefix}inv_freq to check fastpe's "
                         "reading of its config against")
    if buffer.device.type != "meta":
        hf = buffer.detach().to("cpu", torch.float64).numpy()
        _compare(hf, np.asarray(rotary.inv_freq), buffer.dtype, "inv_freq", model_type, layer_type)
    if model_type == "phimoe" and rotary.rope_type == "longrope":
        # HF's Phimoe module multiplies by the config's short_mscale / long_mscale (by the
        # length), not by its attention scaling
        params = getattr(getattr(original, "config", None), "rope_parameters", None) or {}
        original_length = rotary.original_max_position_embeddings
        for key, length in (("short_mscale", original_length), ("long_mscale", original_length + 1)):
            theirs, ours = params.get(key), rotary.attention_factor_at(length)
            if theirs is not None and not abs(float(theirs) - ours) <= 1e-6 * abs(ours):
                raise ValueError(f"fastpe reads this 'phimoe' model's config differently from its {name}: {key} "
                                 f"{float(theirs)!r} there, attention factor {ours!r} in fastpe at length {length}; "
                                 "nothing was patched")
        return
    scaling = getattr(original, f"{prefix}attention_scaling", None)
    if scaling is not None:
        ours = rotary.attention_factor
        if not abs(float(scaling) - ours) <= 1e-6 * abs(ours):
            raise ValueError(f"fastpe reads this {model_type!r} model's config{_layer(layer_type)} differently from "
                             f"its {name}: attention scaling {float(scaling)!r} there, {ours!r} in fastpe; nothing "
                             "was patched")


def _layer(layer_type) -> str:
    return "" if layer_type is None else f" (layer_type {layer_type!r})"


def _compare(hf: np.ndarray, ours: np.ndarray, dtype, what: str, model_type: str, layer_type) -> None:
    torch = _import_torch()
    if hf.shape != ours.shape:
        raise ValueError(f"fastpe reads this {model_type!r} model's config{_layer(layer_type)} differently from its "
                         f"rotary module: {what} has {ours.shape[0]} values in fastpe, {hf.shape[0]} there; nothing "
                         "was patched")
    # HF's float32 arithmetic is within ~40 float32 ULP of the exact values (Llama 3's band at
    # head sizes that are not powers of two); a 16-bit buffer (a model's .half()) adds its own
    # rounding, subnormal steps included
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.finfo(torch.float32)
    tol = (256 * 2.0**-23 + info.eps) * np.abs(ours) + info.tiny * info.eps
    bad = ~(np.abs(hf - ours) <= tol)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"fastpe reads this {model_type!r} model's config{_layer(layer_type)} differently from its "
                         f"rotary module: {what}[{i}] is {hf[i]!r} there, {ours[i]!r} in fastpe; nothing was patched")


# ========================================================================= the patched module


@dataclasses.dataclass
class _Caches:
    """What a fused function needs to rotate with the kernel instead of the caches."""

    rotary: object
    positions: np.ndarray
    seq_len: int | None


@functools.cache
def _patched_class():
    torch = _import_torch()
    from . import torch as fastpe_torch

    exact = fastpe_torch.EXACT_DTYPES
    from_numpy = fastpe_torch._from_numpy

    class PatchedRotaryEmbedding(torch.nn.Module):
        """A transformers rotary embedding module that returns fastpe's exact caches.

        Made by :func:`fastpe.hf.patch`; holds the module it replaces as ``original`` (a
        submodule, so device and dtype moves reach it, and :func:`fastpe.hf.unpatch` puts it
        back as it is then) and one :class:`fastpe.rope.Rotary` per layer type.  ``forward(x,
        position_ids[, layer_type])`` returns what ``original`` returns, in ``x.dtype`` on
        ``x.device``.
        """

        def __init__(self, original, family: Family, ropes: dict, model_type: str):
            super().__init__()
            self.original = original
            self.family = family
            self.model_type = model_type
            self.ropes = ropes
            self.fused = False
            config = getattr(original, "config", None)
            if config is not None:
                self.__dict__["config"] = config  # HF code reads rotary_emb.config

        def extra_repr(self) -> str:
            parts = [f"{k}: {v.kernel!r}" if k is not None else repr(v.kernel) for k, v in self.ropes.items()]
            return f"model_type={self.model_type!r}, fused={self.fused}, " + "; ".join(parts)

        def forward(self, x, position_ids=None, layer_type=None):
            family = self.family
            if family.per_layer:
                rope = self.ropes.get(layer_type)
                if rope is None:
                    raise ValueError(f"layer_type must be one of {sorted(self.ropes)} (the layer types with rope "
                                     f"parameters), got {layer_type!r}")
            elif layer_type is not None:
                raise TypeError(f"{type(self.original).__name__}.forward takes no layer_type, got {layer_type!r}")
            else:
                rope = self.ropes[None]
            if position_ids is None:
                raise TypeError("position_ids is required (HF's models always pass it)")
            pos = position_ids.detach().cpu().numpy() if isinstance(position_ids, torch.Tensor) \
                else np.asarray(position_ids)
            seq_len = None
            if rope.dynamic is not None or rope.longrope:
                seq_len = int(pos.max()) + 1 if pos.size else 0  # HF: torch.max(position_ids) + 1
                if rope.dynamic is not None:
                    seq_len = _dynamic_length(rope.dynamic, seq_len)
            dtype = x.dtype
            if family.returns == "complex":
                work = torch.float64 if dtype == torch.float64 else torch.float32
            else:
                work = dtype if dtype in exact else torch.float32
            cos, sin = rope.cache.cos_sin(pos, dtype=exact[work], seq_len=seq_len)
            if work is torch.bfloat16:  # NumPy holds it as ml_dtypes' bfloat16: through its bits
                cos, sin = from_numpy(cos), from_numpy(sin)
            else:
                cos, sin = torch.from_numpy(cos), torch.from_numpy(sin)
            if family.returns != "halves":
                half = cos.shape[-1] // 2
                cos, sin = cos[..., :half], sin[..., :half]
            if family.returns == "complex":
                out = (torch.complex(cos, sin),)
            else:
                if work != dtype:
                    cos, sin = cos.to(dtype), sin.to(dtype)
                out = (sin, cos) if family.returns == "gptj" else (cos, sin)
            device = x.device
            if device.type != "cpu":
                out = tuple(t.to(device) for t in out)
            if self.fused:
                caches = _Caches(rope.kernel, pos, seq_len)
                for t in out:
                    setattr(t, _MARK, caches)
            return out[0] if family.returns == "complex" else out

    # found by pickle (and repr) as fastpe.hf.PatchedRotaryEmbedding, through __getattr__
    PatchedRotaryEmbedding.__module__ = __name__
    PatchedRotaryEmbedding.__qualname__ = "PatchedRotaryEmbedding"
    return PatchedRotaryEmbedding


def __getattr__(name: str):
    if name == "PatchedRotaryEmbedding":  # defined on first use: it needs torch
        return _patched_class()
    raise AttributeError(f"module 'fastpe.hf' has no attribute {name!r}")


def _dynamic_length(state: list, seq_len: int) -> int:
    """HF's ``dynamic_frequency_update``: grow to a longer length, reset below the original
    one once grown; the frequencies are those of the length kept.  ``state`` is
    ``[max_position_embeddings, max_seq_len_cached]``, updated."""
    original, cached = state
    if seq_len > cached:
        state[1] = seq_len
    elif seq_len < original and cached > original:
        state[1] = original
    return state[1]


# ====================================================================== the fused rotations


def _fused_function(original, kind: str):
    """A drop-in for HF's ``original`` rotation that rotates in place through fastpe's
    kernel when handed a fused patched module's caches and tensors the kernel takes, and
    calls ``original`` otherwise."""
    name = f"{original.__module__}.{original.__qualname__}"

    if kind == "qk":
        def fused(q, k, cos, sin, *args, **kwargs):
            caches = getattr(cos, _MARK, None)
            if caches is not None:
                unsqueeze = _unsqueeze(args, kwargs)
                if unsqueeze is not None and _rotate(caches, (q, k), 2 if unsqueeze == 1 else 1):
                    FUSED_CALLS["kernel", name] += 1
                    return q, k
                FUSED_CALLS["hf", name] += 1
            return original(q, k, cos, sin, *args, **kwargs)
    elif kind == "one":
        def fused(x, cos, sin, *args, **kwargs):
            caches = getattr(cos, _MARK, None)
            if caches is not None:
                unsqueeze = _unsqueeze(args, kwargs)
                if unsqueeze is not None and _rotate(caches, (x,), 2 if unsqueeze == 1 else 1):
                    FUSED_CALLS["kernel", name] += 1
                    return x
                FUSED_CALLS["hf", name] += 1
            return original(x, cos, sin, *args, **kwargs)
    elif kind == "gptj":
        def fused(tensor, sin, cos, *args, **kwargs):
            caches = getattr(sin, _MARK, None)
            if caches is not None:
                if not args and not kwargs and _rotate(caches, (tensor,), 1):
                    FUSED_CALLS["kernel", name] += 1
                    return tensor
                FUSED_CALLS["hf", name] += 1
            return original(tensor, sin, cos, *args, **kwargs)
    elif kind == "complex":
        def fused(xq, xk, freqs_cis, *args, **kwargs):
            caches = getattr(freqs_cis, _MARK, None)
            if caches is not None:
                if not args and not kwargs and _rotate(caches, (xq, xk), 1):
                    FUSED_CALLS["kernel", name] += 1
                    return xq, xk
                FUSED_CALLS["hf", name] += 1
            return original(xq, xk, freqs_cis, *args, **kwargs)
    else:  # pragma: no cover - the table above names only these
        raise AssertionError(kind)
    functools.update_wrapper(fused, original)
    fused.__fastpe_original__ = original
    return fused


def _unsqueeze(args, kwargs):
    """The ``unsqueeze_dim`` of a call, when it is the only extra argument (1 or 2), else None."""
    if len(args) > 1 or set(kwargs) - {"unsqueeze_dim"} or (args and kwargs):
        return None
    value = args[0] if args else kwargs.get("unsqueeze_dim", 1)
    return value if value in (1, 2) and not isinstance(value, bool) else None


def _rotate(caches: _Caches, tensors: tuple, seq_axis: int) -> bool:
    """Rotate ``tensors`` (one, or q and k) in place by fastpe's kernel and return True, or
    return False having touched nothing when the kernel cannot take them.

    Each tensor is 4-D with its sequence on ``seq_axis`` (``(batch, heads, seq, n)`` for 2,
    ``(batch, seq, heads, n)`` for 1) and must lie in memory as ``(batch, seq, heads,
    head_dim)`` rows, C-contiguous, of which it is the whole (``n = head_dim``) or the first
    ``n = rotary_dim`` values of each head (StableLM's and GPT-J's ``q[..., :rotary_dim]``):
    that memory is the kernel's ``(tokens, heads, head_dim)``, ``tokens = batch * seq``,
    whose columns past ``rotary_dim`` it leaves alone."""
    torch = _import_torch()
    rotary = caches.rotary
    arrays = []
    positions = None
    d = rotary.head_dim
    for t in tensors:
        # what fastpe.torch._refusal asks (a plain float32 CPU strided tensor, no grad, no
        # lazy negation or conjugation), in one expression: this runs once per layer per step
        if (type(t) is not torch.Tensor or t.dtype is not torch.float32 or t.requires_grad or not t.is_cpu
                or t.layout is not torch.strided or t.is_neg() or t.is_conj() or t.ndim != 4):
            return False
        if t.shape[-1] == d:  # whole heads: the tensor's own memory, read through NumPy's strides
            a = t.numpy()
            if seq_axis != 1:
                a = a.transpose(0, 2, 1, 3)
            b, s, h, _ = a.shape
            if not a.size or not a.flags.c_contiguous:
                return False
            view = a.reshape(b * s, h, d)
        else:
            tc = t if seq_axis == 1 else t.transpose(1, 2)
            b, s, h, n = tc.shape
            if n != rotary.rotary_dim or tc.numel() == 0:
                return False
            for size, got, want in zip(tc.shape, tc.stride(), (s * h * d, h * d, d, 1)):
                if size > 1 and got != want:
                    return False
            end = tc.storage_offset() + b * s * h * d
            if end * tc.element_size() > tc.untyped_storage().nbytes():
                return False
            view = tc.as_strided((b * s, h, d), (h * d, d, 1)).numpy()
        if positions is None:
            pos = caches.positions
            if pos.ndim == 1:
                pos = pos[None]
            if pos.ndim != 2 or pos.shape[1] != s or pos.shape[0] not in (1, b):
                return False
            # token order: (batch, seq); one row of positions serves every batch row
            positions = pos.reshape(-1) if pos.shape[0] == b else np.tile(pos[0], b)
        elif b * s != positions.shape[0]:
            return False
        arrays.append(view)
    if len(arrays) == 2:
        if np.may_share_memory(arrays[0], arrays[1]):
            return False
        rotary.apply_qk_(arrays[0], arrays[1], positions, seq_len=caches.seq_len)
    else:
        rotary.apply_(arrays[0], positions, seq_len=caches.seq_len)
    torch.autograd.graph.increment_version(tensors)
    return True


def _import_torch():
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised without torch
        raise ImportError("fastpe.hf needs PyTorch and transformers, optional peers of fastpe that are not "
                          "installed here; install them with `pip install torch transformers`") from exc
    return torch
