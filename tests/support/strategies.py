"""What the fuzz suite (``tests/fuzz/``) draws and how it judges a call.

* :func:`fuzz` -- the settings every property runs under: a fixed seed, no deadline, no
  example database, ``$FASTPE_FUZZ_EXAMPLES`` examples per property when set (long runs).
* :func:`judge` -- one call of a public function under the house rules: a bad input raises
  :class:`TypeError` / :class:`ValueError` whose message names the argument, and modifies
  nothing; any other exception is a failure.
* comparisons with the ``python`` reference backend, within the accuracy the README claims
  (float32 1 ULP, float16/bfloat16 exact, float64 ``2**-45``); the comparisons with mpmath
  are :mod:`support.oracle`'s, the hard values :mod:`support.inputs`'.
* strategies: values (signs, zeros, tiny and huge, quarter turns of the frequencies), the
  array forms an equivalent argument may take (dtypes, byte order, views, negative strides,
  read-only), RoPE scaling dicts, and pools of values each argument must refuse.
"""

from __future__ import annotations

import contextlib

import copy
import math
import os
import re
from fractions import Fraction

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from support.inputs import POSITION_LIMIT, edge_positions
from support.oracle import ulp_distance

# --------------------------------------------------------------------------- settings

#: ``FASTPE_FUZZ_EXAMPLES=N`` runs every property on N examples (a long run); unset, each
#: takes its own small default so that the whole file stays near a minute
_ENV_EXAMPLES = os.environ.get("FASTPE_FUZZ_EXAMPLES", "").strip()
EXAMPLES = int(_ENV_EXAMPLES) if _ENV_EXAMPLES else None


def fuzz(default_examples: int):
    """Hypothesis settings of one property: reproducible (``derandomize``), nothing written
    to the repository (``database=None``), no deadline (numba compiles on first use)."""
    return settings(
        max_examples=EXAMPLES or default_examples,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.filter_too_much],
    )


# --------------------------------------------------------------------------- snapshots


def snapshot(value):
    """A deep copy of every array, list and dict in ``value`` (arrays keep dtype, shape and
    bits), to compare with after a call."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype, value.shape, value.tobytes(), value.flags.writeable)
    if isinstance(value, dict):
        return ("dict", [(k, snapshot(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [snapshot(v) for v in value])
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is optional
        torch = None
    if torch is not None and isinstance(value, torch.Tensor):
        return ("tensor", value.dtype, tuple(value.shape), value.detach().clone())
    if isinstance(value, (float, np.floating)) and np.isnan(value):
        return ("nan", type(value).__name__)
    try:
        return ("value", copy.deepcopy(value))
    except Exception:  # noqa: BLE001 - an object that cannot be copied is compared by identity
        return ("id", id(value))


def _same_snapshot(a, b) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "tensor":
        import torch

        return a[1] == b[1] and a[2] == b[2] and torch.equal(a[3].view(-1).view(torch.uint8)
                                                              if a[3].numel() else a[3],
                                                              b[3].view(-1).view(torch.uint8)
                                                              if b[3].numel() else b[3])
    if a[0] in ("dict",):
        return len(a[1]) == len(b[1]) and all(
            ka == kb and _same_snapshot(va, vb) for (ka, va), (kb, vb) in zip(a[1], b[1]))
    if a[0] in ("list", "tuple"):
        return len(a[1]) == len(b[1]) and all(_same_snapshot(x, y) for x, y in zip(a[1], b[1]))
    if a[0] == "value":
        try:
            return bool(a[1] == b[1]) and type(a[1]) is type(b[1])
        except Exception:  # noqa: BLE001 - e.g. arrays inside objects
            return True
    return a == b


def unchanged(before: dict, kwargs: dict, skip=()) -> list[str]:
    """Names of the arguments whose snapshot differs from ``before`` (``skip`` aside)."""
    return [name for name, snap in before.items()
            if name not in skip and not _same_snapshot(snap, snapshot(kwargs[name]))]


# --------------------------------------------------------------------------- judging a call

#: must raise TypeError/ValueError naming one of the blamed arguments
REJECT = "reject"
#: may be refused (naming a blamed argument); if accepted, must equal the canonical result
SAME = "same"
#: may be refused (naming a blamed argument) or accepted (then checked by the caller)
ANY = "any"


def names_one_of(message: str, names) -> bool:
    """Whether ``message`` mentions one of ``names`` as a whole word (``scaling['factor']``
    mentions ``factor`` and ``scaling``; ``--max-len`` mentions ``max-len``)."""
    for name in names:
        if re.search(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"(?![A-Za-z0-9_])", message):
            return True
    return False


def compact(value) -> str:
    """``repr`` with huge integers written as powers of ten (``10**400`` stays readable)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        digits = len(str(abs(value))) - 1
        sign = "-" if value < 0 else ""
        return f"{sign}10**{digits}" if abs(value) == 10**digits else f"{sign}<{digits + 1}-digit int>"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{compact(k)}: {compact(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(compact(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(compact(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


def short(value, limit: int = 160) -> str:
    text = compact(value)
    return text if len(text) <= limit else text[: limit - 20] + " ... " + text[-15:]


def call_text(fn, kwargs: dict) -> str:
    args = ", ".join(f"{k}={short(v, 400 if isinstance(v, dict) else 120)}" for k, v in kwargs.items())
    return f"{getattr(fn, '__qualname__', fn)}({args})"


class Refused(Exception):
    """Carries the TypeError/ValueError a judged call raised."""


def judge(fn, kwargs: dict, *, blame, expect: str, inplace=()):
    """Call ``fn(**kwargs)`` under the house rules; return ``(accepted, result_or_exc)``.

    ``blame``: the argument names an error message may name (at least one must appear).
    ``expect``: :data:`REJECT`, :data:`SAME` or :data:`ANY`.  ``inplace``: arguments the
    function writes on success (they must still be untouched after a refusal).
    """
    before = {name: snapshot(value) for name, value in kwargs.items()}
    text = call_text(fn, kwargs)
    try:
        result = fn(**kwargs)
    except (TypeError, ValueError) as exc:
        message = str(exc)
        assert names_one_of(message, blame), (
            f"{text} raised {type(exc).__name__}({message!r}), which names none of {sorted(blame)}")
        changed = unchanged(before, kwargs)
        assert not changed, f"{text} raised {type(exc).__name__}({message!r}) but modified {changed}"
        return False, exc
    except Exception as exc:  # noqa: BLE001 - the property: nothing but TypeError/ValueError
        raise AssertionError(
            f"{text} raised {type(exc).__name__}: {exc} (bad input must raise TypeError or "
            f"ValueError naming {sorted(blame)})") from exc
    assert expect != REJECT, f"{text} accepted a bad {sorted(blame)} and returned {short(result)}"
    changed = unchanged(before, kwargs, skip=inplace)
    assert not changed, f"{text} modified its inputs {changed}"
    return True, result


# --------------------------------------------------------------------------- comparing arrays


def bits(a) -> tuple:
    a = np.asarray(a)
    return (a.dtype.str, a.shape, a.tobytes())


def assert_same_bits(results: dict, what: str) -> None:
    """Every backend's array of ``results`` ``{backend: array}`` has the same bits."""
    items = list(results.items())
    name0, a0 = items[0]
    for name, a in items[1:]:
        if bits(a) != bits(a0):
            a0v, av = np.asarray(a0), np.asarray(a)
            if a0v.shape != av.shape or a0v.dtype != av.dtype:
                raise AssertionError(f"{what}: {name} gives {av.dtype} {av.shape}, {name0} {a0v.dtype} {a0v.shape}")
            diff = _differing(a0v, av)
            i = int(diff[0])
            idx = np.unravel_index(i, a0v.shape)
            raise AssertionError(
                f"{what}: {name} and {name0} differ at {len(diff)} of {a0v.size} elements; first "
                f"{tuple(int(v) for v in idx)}: {name} {av.reshape(-1)[i]!r} vs {name0} {a0v.reshape(-1)[i]!r}")


def _differing(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.size == 0:
        return np.empty(0, dtype=np.intp)
    ua = np.ascontiguousarray(a).reshape(-1).view(np.uint8).reshape(a.size, -1)
    ub = np.ascontiguousarray(b).reshape(-1).view(np.uint8).reshape(b.size, -1)
    return np.flatnonzero((ua != ub).any(axis=1))


def assert_near(fast, ref, what: str, *, scale=1.0, slack=None) -> None:
    """``fast`` (a compiled backend's array) against ``ref`` (the reference's): float32
    within 1 ULP, float16/bfloat16 bit for bit, float64 within ``2**-45 * scale``; integer
    arrays equal.  ``slack`` (an array like ``ref``, float64) widens the float32 test by an
    absolute bound where the design allows one (RoPE rotation's cancellation)."""
    fast, ref = np.asarray(fast), np.asarray(ref)
    assert fast.shape == ref.shape and fast.dtype == ref.dtype, (
        f"{what}: {fast.dtype} {fast.shape} vs reference {ref.dtype} {ref.shape}")
    name = fast.dtype.name
    if fast.dtype.kind in "iu":
        bad = np.flatnonzero(fast.reshape(-1) != ref.reshape(-1))
    elif name == "float32":
        ulps = ulp_distance(fast, ref, nan="apart").reshape(-1)
        ok = ulps <= 1
        if slack is not None:
            with np.errstate(invalid="ignore", over="ignore"):
                gap = np.abs(fast.astype(np.float64) - ref.astype(np.float64)).reshape(-1)
                ok |= gap <= np.asarray(slack, dtype=np.float64).reshape(-1)
        bad = np.flatnonzero(~ok)
    elif name == "float64":
        f, r = fast.reshape(-1), ref.reshape(-1)
        with np.errstate(invalid="ignore"):
            gap = np.abs(f - r)
            ok = (gap <= 2.0**-45 * abs(scale)) | (np.isnan(f) & np.isnan(r)) | (f == r)
        bad = np.flatnonzero(~ok)
    else:  # float16, bfloat16: correctly rounded, so the same bits
        bad = _differing(fast, ref)
    if bad.size:
        i = int(bad[0])
        idx = tuple(int(v) for v in np.unravel_index(i, fast.shape))
        raise AssertionError(
            f"{what}: {bad.size} of {fast.size} {name} values off the reference beyond the "
            f"design's bound; first at {idx}: {fast.reshape(-1)[i]!r} vs reference {ref.reshape(-1)[i]!r}")


# --------------------------------------------------------------------------- value strategies

EDGE_POSITIONS = tuple(edge_positions())

#: every (positive) integer argument must refuse these, whatever its range
HUGE = 10**400
BAD_INTS = (HUGE, -HUGE, 1.5, 2.0, math.nan, math.inf, True, False, "8", b"8", 4 + 0j, [4],
            np.float64(3.0), np.array([4]), np.array(4.0), Fraction(7, 2))
#: every real argument must refuse these
BAD_REALS = (math.nan, math.inf, -math.inf, HUGE, -HUGE, "1e4", True, 1j, [1.0],
             np.array([1.0, 2.0]), np.float32("nan"), np.float64("-inf"), b"1")
BAD_CHOICES = ("", "nope", 1, b"halves", ["mae"], None, 0.0)
BAD_BOOLS = (1, 0, "yes", "", None, np.array([True, False]), 1.0)
#: (names are case-insensitive and stripped, so "NUMBA" and " python" are fine)
BAD_BACKENDS = ("", "torch", "numba-cuda", 3, ["numba"], b"numba", True, "py thon")
#: dtypes no fastpe float output accepts (byte-swapped ones are in SWAPPED_DTYPES)
BAD_DTYPES = ("float8", "int32", np.int32, "complex64", np.complex64, object, 3, "f16",
              np.longdouble, np.dtype("V2"), "bf16", np.bool_, "float32 float64", [np.float32])


def swapped(dtype) -> np.dtype:
    return np.dtype(dtype).newbyteorder("S")


def native_names():
    return ("float32", "float64", "float16", "bfloat16")


#: (byte-swapped dtype, the native name it stands for): refused, or the same values
SWAPPED_DTYPES = tuple((swapped(n), n) for n in ("float32", "float64", "float16"))


def st_position(hard=()):
    """One u32 position: small, random, an edge of the formats, or a hard one."""
    options = [st.integers(0, 300), st.integers(0, POSITION_LIMIT - 1), st.sampled_from(EDGE_POSITIONS)]
    if hard:
        options.append(st.sampled_from(sorted(hard)))
    return st.one_of(*options)


#: reals a timestep may be: signs, zeros, the tiniest and the largest, fractions
REAL_EDGES = (0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 999.0, 1e-20, -1e-20, 5e-324, -5e-324, 2.0**-1022,
              1e-300, -1e-300, 2.0**32 - 1, -(2.0**32 - 1), 2.0**32 - 0.5, -(2.0**32 - 2.0**-21),
              1e9 + 0.375, 1712515.142194659, 0.1, -999.9, 2.0**31, 2.0**24 + 1, 1e-7)


def st_real_t(max_abs: float = 2.0**32):
    return st.one_of(
        st.sampled_from(REAL_EDGES),
        st.integers(-1000, 1000).map(float),
        st.floats(-max_abs, max_abs, allow_nan=False, allow_infinity=False, exclude_max=True,
                  exclude_min=True),
        st.floats(-1e-6, 1e-6, allow_nan=False),
        st.integers(-(2**32 - 1), 2**32 - 1).map(lambda v: v + 0.5 if abs(v) < 2**31 else float(v)),
    ).filter(lambda v: abs(v) < max_abs)


@st.composite
def int_array_form(draw, values, *, allow_float: bool = True, max_value_for_dtype=None):
    """``values`` (Python ints, 1-D) in one of the forms that must mean the same positions:
    a list or tuple, any integer dtype that holds them (either byte order), whole floats,
    Python ints in an object array, a reversed (negative-stride) or strided view, read-only.
    Returns ``(obj, form)``."""
    values = [int(v) for v in values]
    lo = min(values, default=0)
    hi = max(values, default=0)
    dtypes = [d for d in (np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32,
                          np.uint64, np.int64)
              if np.iinfo(d).min <= lo and hi <= np.iinfo(d).max]
    floats = []
    if allow_float:
        floats = [d for d in (np.float64, np.float32)
                  if all(float(d(v)) == v for v in values)]
    form = draw(st.sampled_from(("list", "tuple", "array", "swapped", "object", "float",
                                 "reversed", "strided", "readonly")))
    if form == "float" and not floats:
        form = "array"
    if form == "list":
        return list(values), form
    if form == "tuple":
        return tuple(values), form
    if form == "object":
        return np.array(values + [0], dtype=object)[:-1] if values else np.array([], dtype=object), form
    if form == "float":
        return np.array(values, dtype=draw(st.sampled_from(floats))), form
    dt = np.dtype(draw(st.sampled_from(dtypes)))
    arr = np.array(values, dtype=dt)
    if form == "swapped":
        return arr.astype(dt.newbyteorder("S")), form
    if form == "reversed":
        return arr[::-1].copy()[::-1], form
    if form == "strided":
        big = np.zeros(2 * len(values), dtype=dt)
        big[::2] = arr
        return big[::2], form
    if form == "readonly":
        arr.setflags(write=False)
        return arr, form
    return arr, form


@st.composite
def real_array_form(draw, values, scalar: bool = True):
    """``values`` (floats) in a form that must mean the same reals: list, float64 (either
    byte order), float32 or integers when exact, a view with a negative or a double stride,
    read-only, or a scalar for one value.  Returns ``(obj, form)``."""
    values = [float(v) for v in values]
    form = draw(st.sampled_from(("list", "array", "swapped", "float32", "int", "reversed",
                                 "strided", "readonly", "scalar")))
    arr = np.array(values, dtype=np.float64)
    if form == "list":
        return list(values), form
    if form == "swapped":
        return arr.astype(">f8" if np.little_endian else "<f8"), form
    if form == "float32" and all(float(np.float32(v)) == v for v in values):
        return arr.astype(np.float32), form
    if form == "int" and all(v == int(v) and abs(v) < 2**62 and not (v == 0 and math.copysign(1, v) < 0)
                             for v in values):
        return np.array([int(v) for v in values], dtype=np.int64), form
    if form == "reversed":
        return arr[::-1].copy()[::-1], form
    if form == "strided":
        big = np.zeros(2 * len(values))
        big[::2] = arr
        return big[::2], form
    if form == "readonly":
        arr.setflags(write=False)
        return arr, form
    if form == "scalar" and len(values) == 1 and scalar:
        return values[0], form
    return arr, "array"


BAD_POSITIONS = (5, np.array(5), np.int64(3), [-1], [POSITION_LIMIT], [1.5], [math.nan], [math.inf], [[0, 1]], "01",
                 [True, False], np.array([1 + 1j]), np.array([HUGE], dtype=object),
                 np.array([2.5], dtype=object), [[1], [1, 2]], [None], np.array(["1"]),
                 np.array([-1], dtype=np.int8), np.array([2**64 - 1], dtype=np.uint64),
                 np.array([2.0**32]), np.array([-0.5]))
#: the same for ``forward``, which takes signed positions in ``(-2**32, 2**32)``
BAD_SIGNED_POSITIONS = tuple(p for p in BAD_POSITIONS
                             if not (isinstance(p, list) and p == [-1])
                             and not (isinstance(p, np.ndarray) and p.shape == (1,) and p.dtype == np.int8))
BAD_SIGNED_POSITIONS += ([-POSITION_LIMIT], np.array([-(2**32)], dtype=np.int64), np.array([-(2.0**32)]))


@st.composite
def st_dtype_arg(draw):
    """A ``dtype`` argument and what it must do: ``(value, native name or None)``; ``None``
    means the value must be refused."""
    kind = draw(st.sampled_from(("name", "type", "bad", "swapped")))
    if kind == "name":
        name = draw(st.sampled_from(native_names()))
        return draw(st.sampled_from((name, name.upper(), f" {name} "))), name
    if kind == "type":
        name = draw(st.sampled_from(("float32", "float64", "float16")))
        return draw(st.sampled_from((np.dtype(name), np.dtype(name).type))), name
    if kind == "swapped":
        return draw(st.sampled_from(SWAPPED_DTYPES))
    return draw(st.sampled_from(BAD_DTYPES)), None


# --------------------------------------------------------------------------- RoPE scaling

ROPE_BASES = (10000.0, 500000.0, 1e6, 2.0, 10.5, 1.0 + 2.0**-20, 10000)


@st.composite
def rope_config(draw, max_head_dim: int = 64, types=(None, "default", "linear", "dynamic", "yarn",
                                                    "llama3", "longrope", "su")):
    """A valid RoPE configuration ``{head_dim, base, rotary_dim, scaling,
    max_position_embeddings}`` (keywords of :func:`fastpe.rope.inv_freq`), every rope type
    with its own keys, given as HF writes them."""
    rope_type = draw(st.sampled_from(types))
    low_dim = 4 if rope_type == "dynamic" else 2
    head_dim = draw(st.integers(low_dim, max_head_dim))
    rotary_dim = None
    prf = None
    # proportional pairs across the whole head (any head_dim): its partial_rotary_factor
    # counts the pairs that turn, drawn below
    choice = "none" if rope_type == "proportional" else draw(st.sampled_from(("none", "arg", "prf")))
    if choice == "arg":
        rotary_dim = 2 * draw(st.integers(low_dim // 2, head_dim // 2))
    elif choice == "prf":
        target = 2 * draw(st.integers(low_dim // 2, head_dim // 2))
        prf = target / head_dim
        if int(head_dim * prf) % 2 or int(head_dim * prf) < low_dim:
            prf = None
    if rotary_dim is None and prf is None and head_dim % 2 and rope_type != "proportional":
        rotary_dim = head_dim - 1  # an odd head needs an even rotary part
        if rotary_dim < low_dim:
            head_dim, rotary_dim = head_dim + 1, None
    dim = rotary_dim if rotary_dim is not None else (int(head_dim * prf) if prf is not None else head_dim)
    n = dim // 2
    base = draw(st.sampled_from(ROPE_BASES))
    mpe = draw(st.one_of(st.none(), st.integers(2, 1 << 20)))
    scaling = {}
    if rope_type is not None:
        key = draw(st.sampled_from(("rope_type", "type")))
        scaling[key] = rope_type
    if prf is not None:
        scaling["partial_rotary_factor"] = prf
    factor = st.one_of(st.sampled_from((1.0, 2.0, 8.0, 1, 4, 32.0, 1.5)), st.floats(1.0, 64.0))
    original = st.integers(2, 1 << 17)
    if rope_type == "linear":
        scaling["factor"] = draw(factor)
    elif rope_type == "dynamic":
        scaling["factor"] = draw(factor)
        if mpe is None:
            mpe = draw(st.integers(2, 1 << 17))
    elif rope_type == "yarn":
        scaling["factor"] = draw(factor)
        if mpe is None or draw(st.booleans()):
            scaling["original_max_position_embeddings"] = draw(original)
        beta_slow = draw(st.sampled_from((1.0, 0.5, 2.0, None)))
        beta_fast = draw(st.sampled_from((32.0, 8.0, 64.0, None)))
        if beta_slow is not None:
            scaling["beta_slow"] = beta_slow
        if beta_fast is not None:
            scaling["beta_fast"] = beta_fast
        for key, pool in (("attention_factor", (None, 1.0, 0.5, 1.25)),
                          ("mscale", (None, 1.0, 0.707, 0.0)),
                          ("mscale_all_dim", (None, 1.0, 0.707, 0.0)),
                          ("truncate", (None, True, False))):
            value = draw(st.sampled_from(pool))
            if value is not None:
                scaling[key] = value
    elif rope_type == "llama3":
        scaling["factor"] = draw(factor)
        if mpe is None or draw(st.booleans()):
            scaling["original_max_position_embeddings"] = draw(original)
        low = draw(st.sampled_from((1.0, 0.5, 2.0)))
        scaling["low_freq_factor"] = low
        scaling["high_freq_factor"] = low + draw(st.sampled_from((3.0, 0.25, 1.0)))
    elif rope_type in ("longrope", "su"):
        entries = st.one_of(st.sampled_from((1.0, 1.5, 4.0)), st.floats(0.5, 64.0))
        scaling["short_factor"] = draw(st.lists(entries, min_size=n, max_size=n))
        scaling["long_factor"] = draw(st.lists(entries, min_size=n, max_size=n))
        if mpe is None or draw(st.booleans()):
            scaling["original_max_position_embeddings"] = draw(original)
        if draw(st.booleans()) or mpe is None:
            scaling["factor"] = draw(factor)
        if draw(st.booleans()):
            scaling["attention_factor"] = draw(st.sampled_from((1.0, 1.2, 0.75)))
        if draw(st.integers(0, 3)) == 0:  # Phi-3.5-MoE's attention factors
            scaling["short_mscale"] = draw(st.sampled_from((1.243163121016122, 1.0, 0.5)))
            scaling["long_mscale"] = draw(st.sampled_from((1.243163121016122, 2.0)))
    elif rope_type == "proportional":
        scaling["partial_rotary_factor"] = draw(st.one_of(st.sampled_from((0.25, 0.5, 1.0, 0.0)), st.floats(0.0, 1.0)))
        if draw(st.booleans()):
            scaling["factor"] = draw(factor)
    if draw(st.booleans()):
        kwargs = {"head_dim": head_dim, "base": base}
    else:
        scaling["rope_theta"] = base
        kwargs = {"head_dim": head_dim}
    if rotary_dim is not None:
        kwargs["rotary_dim"] = rotary_dim
    if scaling or draw(st.booleans()):
        kwargs["scaling"] = scaling
    if mpe is not None:
        kwargs["max_position_embeddings"] = mpe
    return kwargs


#: what a scaling key may be set to: values to refuse, and edge values (valid or not:
#: either way the answer must be a clean one)
SCALING_BAD = (math.nan, math.inf, -math.inf, HUGE, -HUGE, "2.0", True, None, [2.0], {"a": 1}, 1j)
SCALING_EDGE = (0, 0.0, -1.0, -2.0, 1, 1.0, 0.5, 1e-300, 1e300, 2**62, 2**63, 5e-324, -5e-324,
                2.0, 3, 1e-5, 65536, 1 << 40)
#: the keys each rope type reads (besides rope_theta, partial_rotary_factor and the type);
#: HF ignores the others, and so does fastpe
SCALING_READS = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("factor", "original_max_position_embeddings", "attention_factor", "beta_fast",
             "beta_slow", "mscale", "mscale_all_dim", "truncate"),
    "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
    "longrope": ("short_factor", "long_factor", "original_max_position_embeddings", "factor",
                 "attention_factor", "short_mscale", "long_mscale"),
    "proportional": ("factor",),
}
SCALING_KEYS = ("factor", "original_max_position_embeddings", "attention_factor", "beta_fast",
                "beta_slow", "mscale", "mscale_all_dim", "truncate", "low_freq_factor",
                "high_freq_factor", "short_factor", "long_factor", "rope_theta",
                "partial_rotary_factor", "rope_type", "type", "short_mscale", "long_mscale")


@contextlib.contextmanager
def rope_warnings_named(what: str):
    """Record the block's RopeConfigWarnings (what HF's validators warn of: a warning, never
    an error, whatever the filters say) and check each names what it is about -- a key, as
    ``scaling['factor']`` or ``config['rope_scaling']['factor']``, or a config field."""
    import warnings

    from fastpe.rope import RopeConfigWarning

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always", RopeConfigWarning)
        yield record
    for w in record:
        assert issubclass(w.category, RopeConfigWarning), f"{what}: warned {w.category.__name__}: {w.message}"
        assert str(w.message).startswith(ROPE_WARNING_NAMES), f"{what}: the warning {w.message} names no key"


#: how a RopeConfigWarning begins: with the key or field it is about
ROPE_WARNING_NAMES = ("scaling", "config", "original_max_position_embeddings")

#: the architectures a drawn model config may claim, with what their configs are named by
MODEL_TYPES = (None, "llama", "unknown_model", "phi3", "phimoe", "gpt_neox", "gptj", "deepseek_v3", "qwen3",
               "gemma3_text", "gemma4_text", "modernbert", "llama4_text", "stablelm")
#: values a config field may be set to that no field takes (each must be refused by name)
CONFIG_BAD = (None, "64", 64.5, -1, 0, True, [64], {"a": 1}, math.nan, math.inf, HUGE)


@st.composite
def model_config(draw):
    """A model config dict of an architecture, with its RoPE fields -- valid, or with one or
    two fields (top level or in the rope dict) set to a bad or an edge value, or a key
    misspelt.  Returns ``(config, layer_type, mutated)``: ``mutated`` lists what was changed."""
    model_type = draw(st.sampled_from(MODEL_TYPES))
    heads = draw(st.sampled_from((1, 2, 4, 8)))
    head = 2 * draw(st.integers(1, 32))
    cfg = {"hidden_size": heads * head, "num_attention_heads": heads,
           "max_position_embeddings": draw(st.sampled_from((64, 2048, 131072)))}
    if model_type is not None:
        cfg["model_type"] = model_type
    if draw(st.booleans()):
        cfg["head_dim"] = head
    if draw(st.booleans()):
        cfg["rope_theta"] = draw(st.sampled_from(ROPE_BASES))
    rope = draw(rope_config(max_head_dim=max(head, 4), types=("default", "linear", "dynamic", "yarn", "llama3",
                                                               "longrope", "su", "proportional")))
    scaling = dict(rope.get("scaling") or {})
    if rope["head_dim"] != head or "rotary_dim" in rope:  # the rope dict was drawn for another head
        scaling = {k: v for k, v in scaling.items() if k not in ("short_factor", "long_factor", "partial_rotary_factor")}
        if scaling.get("rope_type", scaling.get("type")) in ("longrope", "su"):
            n = head // 2
            scaling.update(short_factor=[1.0] * n, long_factor=[2.0] * n)
    if scaling and draw(st.booleans()):
        cfg["rope_scaling" if draw(st.booleans()) else "rope_parameters"] = scaling
    layer_type = None
    if model_type == "gptj":
        cfg = {"model_type": "gptj", "n_embd": heads * head, "n_head": heads, "n_positions": 2048,
               "rotary_dim": 2 * draw(st.integers(1, head // 2))}
    elif model_type == "gpt_neox":
        cfg["rotary_pct"] = draw(st.sampled_from((0.25, 0.5, 1.0)))
        cfg["rotary_emb_base"] = draw(st.sampled_from((10000, 5e5)))
    elif model_type == "deepseek_v3":
        cfg["qk_rope_head_dim"] = head
        cfg["rope_interleave"] = draw(st.booleans())
    elif model_type in ("phi3", "phimoe") and draw(st.booleans()):
        cfg["original_max_position_embeddings"] = draw(st.sampled_from((16, 4096)))
    if model_type in ("gemma3_text", "gemma4_text", "modernbert"):
        layer_type = draw(st.sampled_from(("full_attention", "sliding_attention")))
        cfg["layer_types"] = ["sliding_attention", "full_attention"]
        if model_type == "gemma4_text":
            cfg.pop("rope_scaling", None)
            cfg["global_head_dim"] = 2 * head
    mutated = []
    for _ in range(draw(st.sampled_from((0, 0, 1, 1, 2)))):
        inner = cfg.get("rope_scaling")
        where = inner if isinstance(inner, dict) and draw(st.booleans()) else cfg
        if where is cfg:
            key = draw(st.sampled_from(sorted(set(cfg) | {"head_dim", "rope_theta", "partial_rotary_factor",
                                                           "original_max_position_embeddings", "layer_types",
                                                           "rotary_dim", "qk_rope_head_dim"})))
        else:
            key = draw(st.sampled_from(sorted(set(where) | set(SCALING_KEYS) | {"beta_fsat"})))
        value = draw(st.sampled_from(CONFIG_BAD + SCALING_BAD + SCALING_EDGE))
        where[key] = value
        mutated.append(key)
    return cfg, layer_type, mutated
