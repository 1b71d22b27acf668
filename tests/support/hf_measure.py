"""Measure fastpe.hf (a script, not a test): accuracy per architecture, and the patched rotary
module's time per forward call against HF's.

    python tests/support/hf_measure.py accuracy [NAME ...]   # the table in docs/hf.md
    python tests/support/hf_measure.py overhead [THREADS]    # seq 1, 128, 4096, Llama-3.1-8B's rope

accuracy -- for each tiny model of ``hf_models.MODELS`` (2 layers, q/k projections x30, the
rope settings of the published config): the largest |logit| difference from HF's unpatched
model at positions 0..11 (fused=False / fused=True); at every position moved by 10**6, the
largest distance to the float64 truth (the ``.double()`` model patched by fastpe: fastpe's
float64 caches, HF's arithmetic in float64) of the patched float32 model, HF's float32 model
and HF's ``model.double()``, and the share of tokens whose argmax agrees with the truth's
(batch 2 x 12 tokens); greedy ``generate`` of 8 tokens unmoved and moved by 10**6: whether
the patched model gives the same tokens, and where HF's first differ.

overhead -- the rotary module alone (``model.model.rotary_emb(x, position_ids)``), HF's and
patched, float32, position_ids ``(1, seq)`` from 0 and from 10**6: the median over 7 rounds
of each round's median time per call; then HF's ``apply_rotary_pos_emb`` against the fused
in-place rotation for q ``(1, 32, seq, 128)`` and k ``(1, 8, seq, 128)`` as the attention
holds them.
"""

from __future__ import annotations

import copy
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import transformers  # noqa: E402

from fastpe import hf  # noqa: E402
from support.hf_models import MODELS, shifted, tiny_model  # noqa: E402

SHIFT = 10**6
LONG = {"phi-3.5-mini", "phi-4-mini", "phimoe"}


def accuracy(names) -> None:
    print("| model | small: caches / fused | 1e6: fastpe / fused / HF fp32 / HF double | argmax agreement "
          "HF fp32 / HF double / fastpe | generate +1e6: fastpe same / HF first differs at |")
    print("|---|---|---|---|---|")
    for name in names:
        m = tiny_model(name, qk_scale=30.0)
        ids = torch.randint(4, 128, (2, 12), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            small = m(ids).logits
            with shifted(m, SHIFT):
                hf32 = m(ids).logits
            d = copy.deepcopy(m).double()
            with shifted(d, SHIFT):
                hf64 = d(ids).logits
            try:
                hf.patch(d)
            except ValueError as exc:  # a configuration fastpe.rope does not read (yet)
                print(f"| {name} | refused: {exc} | | | |", flush=True)
                continue
            with shifted(d, SHIFT):
                truth = d(ids).logits
        del d
        row = {}
        gen_hf = generate(m, name) if name != "modernbert" else None
        for fused in (False, True):
            hf.patch(m, fused=fused)
            with torch.no_grad():
                row["small", fused] = float((m(ids).logits - small).abs().max())
                with shifted(m, SHIFT):
                    got = m(ids).logits
            row["large", fused] = float((got.double() - truth).abs().max())
            row["agree", fused] = agree(got, truth)
            row["gen", fused] = generate(m, name) if name != "modernbert" else None
            hf.unpatch(m)
        e = lambda x: float((x.double() - truth).abs().max())  # noqa: E731
        if name == "modernbert":
            gen = "encoder"
        else:
            same = all(a == b for a, b in (row["gen", False], row["gen", True]))
            first = next((i + 1 for i, (a, b) in enumerate(zip(*gen_hf)) if a != b), None)
            gen = f"{'yes' if same else 'NO'} / {'-' if first is None else f'token {first}'}"
        print(f"| {name} | {row['small', False]:.1e} / {row['small', True]:.1e} | {row['large', False]:.1e} / "
              f"{row['large', True]:.1e} / {e(hf32):.1e} / {e(hf64):.1e} | {agree(hf32, truth):.0%} / "
              f"{agree(hf64, truth):.0%} / {row['agree', False]:.0%} | {gen} |", flush=True)


def agree(x, truth) -> float:
    return float((x.argmax(-1) == truth.argmax(-1)).double().mean())


def generate(m, name):
    prompt = torch.randint(4, 128, (1, 8), generator=torch.Generator().manual_seed(2))
    base = 8192 if name in LONG else 0
    out = []
    for shift in (base, base + SHIFT):
        with torch.no_grad(), shifted(m, shift):
            seq = m.generate(prompt, max_new_tokens=8, do_sample=False)
        out.append(seq[0, prompt.shape[1]:].tolist())
    return out


def timed(fn, reps: int, rounds: int = 7) -> float:
    """The median over ``rounds`` of each round's median seconds per call."""
    medians = []
    for _ in range(rounds):
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        medians.append(statistics.median(times))
    return statistics.median(medians)


def overhead() -> None:
    values = {"hidden_size": 256, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 128,
              "intermediate_size": 64, "num_hidden_layers": 1, "vocab_size": 128, "max_position_embeddings": 131072,
              "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                        "high_freq_factor": 4.0,
                                                        "original_max_position_embeddings": 8192}}
    config = transformers.LlamaConfig(**values)
    model = transformers.LlamaForCausalLM(config).eval()
    from transformers.models.llama import modeling_llama

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; rotary module of Llama-3.1-8B's rope "
          "(head_dim 128, llama3), float32, position_ids (1, seq); median of 7 rounds' medians")
    print("| seq | from | HF module | patched module | patched / HF | HF apply_rotary_pos_emb | fused in place |")
    print("|---|---|---|---|---|---|---|")
    apply = modeling_llama.apply_rotary_pos_emb
    for seq in (1, 128, 4096):
        reps = {1: 400, 128: 200, 4096: 20}[seq]
        for start in (0, SHIFT):
            x = torch.zeros(1, seq, 256)
            position_ids = torch.arange(start, start + seq)[None]
            theirs = model.model.rotary_emb
            with torch.no_grad():
                t_hf = timed(lambda: theirs(x, position_ids), reps)
                hf.patch(model)
                ours = model.model.rotary_emb
                t_ours = timed(lambda: ours(x, position_ids), reps)
                hf.unpatch(model)
                q0 = torch.randn(1, seq, 32 * 128)
                k0 = torch.randn(1, seq, 8 * 128)
                cos, sin = theirs(x, position_ids)
                t_apply = timed(lambda: apply(q0.view(1, seq, 32, 128).transpose(1, 2),
                                              k0.view(1, seq, 8, 128).transpose(1, 2), cos, sin), reps)
                hf.patch(model, fused=True)
                cos, sin = model.model.rotary_emb(x, position_ids)
                fused = modeling_llama.apply_rotary_pos_emb
                # rotating the same memory again and again: the time is the same
                t_fused = timed(lambda: fused(q0.view(1, seq, 32, 128).transpose(1, 2),
                                              k0.view(1, seq, 8, 128).transpose(1, 2), cos, sin), reps)
                hf.unpatch(model)
            print(f"| {seq} | {start} | {t_hf * 1e6:.0f} us | {t_ours * 1e6:.0f} us | {t_ours / t_hf:.2f} | "
                  f"{t_apply * 1e6:.0f} us | {t_fused * 1e6:.0f} us |", flush=True)


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    transformers.logging.set_verbosity_error()
    what = sys.argv[1] if len(sys.argv) > 1 else "accuracy"
    if what == "overhead":
        if len(sys.argv) > 2:  # overhead THREADS: torch's intra-op threads (fastpe's cython kernels use one)
            torch.set_num_threads(int(sys.argv[2]))
        overhead()
    else:
        accuracy(sys.argv[2:] or list(MODELS))
