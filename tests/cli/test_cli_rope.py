"""``fastpe rope``: caches from a model config.json or a rope dict, through CliRunner and a process.

Files are compared bit for bit with ``fastpe.rope.cos_sin`` / ``inv_freq`` of the same
arguments on the same backend.  Sizes stay small: the suite may run on the python backend.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from fastpe import rope
from fastpe.cli._write import check_output
from fastpe.cli.rope import read_scaling, rule_dict
from fastpe.rope import RopeConfigWarning, Rotary
from conftest import DEFAULT, fastpe_env
from support.cli import assert_one_line_error, listing, run, run_process, same_bits
from support.hf_rope import CONFIGS

SUMMARY = re.compile(
    r"wrote (?P<path>\S+): cos, sin float32 \((?P<rows>\d+), (?P<cols>\d+)\) (?P<layout>neox|gptj), "
    r"rope_type (?P<type>\w+), base (?P<base>\S+), attention_factor (?P<af>\S+), [\d.]+ (B|KiB|MiB|GiB), "
    r"backend (?P<backend>\w+), [\d.]+ ms compute \+ [\d.]+ ms write"
)

LLAMA3_SCALING = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192, "rope_type": "llama3"}

#: a Llama-3.1-style config.json, scaled down (head_dim 64 = 256 / 4)
LLAMA3_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": LLAMA3_SCALING,
    "torch_dtype": "bfloat16",
}


@pytest.fixture
def llama3_config(in_tmp):
    path = in_tmp / "config.json"
    path.write_text(json.dumps(LLAMA3_CONFIG, indent=2))
    return path


def load(path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def expected(max_len, head_dim, **kwargs):
    layout = kwargs.pop("layout", "neox")
    seq_len = kwargs.pop("seq_len", max_len)
    dtype = kwargs.pop("dtype", "float32")
    with warnings.catch_warnings():  # the command's own warnings are asserted where they are expected
        warnings.simplefilter("ignore", RopeConfigWarning)
        inv, attention = rope.inv_freq(head_dim, seq_len=seq_len, **kwargs)
        cos, sin = rope.cos_sin(np.arange(max_len), head_dim, seq_len=seq_len, layout=layout, dtype=dtype,
                                backend=DEFAULT, **kwargs)
    return {"cos": cos, "sin": sin, "inv_freq": inv, "attention_factor": np.float64(attention)}


def of_rotary(rotary, max_len, dtype="float32"):
    """What the file of a Rotary holds, at seq_len MAX_LEN."""
    cos, sin = rotary.cos_sin(np.arange(max_len), dtype=dtype, seq_len=max_len, backend=DEFAULT)
    return {"cos": cos, "sin": sin, "inv_freq": rotary.inv_freq_at(max_len),
            "attention_factor": np.float64(rotary.attention_factor_at(max_len))}


def assert_file_is(path, want):
    got = load(path)
    assert sorted(got) == ["attention_factor", "cos", "inv_freq", "sin", "spec"]
    assert got["attention_factor"].shape == () and got["attention_factor"].dtype == np.float64
    for name in want:
        assert same_bits(got[name], np.asarray(want[name])), name


# ============================================================================ writing files


def test_writes_the_default_file_and_one_summary_line(in_tmp):
    result = run("rope", "--head-dim", 8, "--max-len", 5)
    assert result.exit_code == 0, result.output
    assert listing() == ["rope_5x8.npz"] and result.stderr == ""
    assert_file_is("rope_5x8.npz", expected(5, 8))
    match = SUMMARY.fullmatch(result.stdout.rstrip("\n"))
    assert match, result.stdout
    assert (match["path"], match["rows"], match["cols"], match["layout"]) == ("rope_5x8.npz", "5", "8", "neox")
    assert (match["type"], match["base"], match["af"], match["backend"]) == ("default", "10000", "1", DEFAULT)


def test_llama3_config_json(llama3_config):
    result = run("rope", "--scaling", llama3_config, "--max-len", 16, "-o", "llama.npz")
    assert result.exit_code == 0, result.output
    assert listing() == ["config.json", "llama.npz"]
    assert_file_is("llama.npz", expected(16, 64, base=500000.0, scaling=LLAMA3_SCALING,
                                         max_position_embeddings=131072))
    match = SUMMARY.fullmatch(result.stdout.rstrip("\n"))
    assert match["type"] == "llama3" and match["base"] == "500000" and match["cols"] == "64"


def test_command_line_options_override_the_config(llama3_config):
    result = run("rope", "--scaling", llama3_config, "--max-len", 6, "--head-dim", 32, "--base", 1e4,
                 "--rotary-dim", 16, "--layout", "GPTJ", "-o", "o.npz")
    assert result.exit_code == 0, result.output
    want = expected(6, 32, base=1e4, rotary_dim=16, scaling=LLAMA3_SCALING, max_position_embeddings=131072,
                    layout="gptj")
    assert_file_is("o.npz", want)
    assert load("o.npz")["cos"].shape == (6, 16)


def test_head_dim_key_partial_rotary_factor_and_default_max_len(in_tmp):
    config = {"hidden_size": 512, "num_attention_heads": 4, "head_dim": 32, "partial_rotary_factor": 0.5,
              "rope_theta": 1e6, "max_position_embeddings": 12}
    (in_tmp / "c.json").write_text(json.dumps(config))
    result = run("rope", "--scaling", "c.json")
    assert result.exit_code == 0, result.output
    assert listing() == ["c.json", "rope_12x16.npz"]
    assert_file_is("rope_12x16.npz", expected(12, 32, base=1e6, rotary_dim=16))


def test_rope_parameters_style_config(in_tmp):
    """transformers 5 writes ``rope_parameters``, with rope_theta inside."""
    params = {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 32,
              "beta_fast": 32, "beta_slow": 1}
    config = {"model_type": "qwen3", "hidden_size": 128, "num_attention_heads": 2, "max_position_embeddings": 128,
              "rope_parameters": params}
    (in_tmp / "config.json").write_text(json.dumps(config))
    result = run("rope", "--scaling", "config.json", "--max-len", 7, "-o", "y.npz")
    assert result.exit_code == 0, result.output
    # Qwen3Config's head_dim defaults to 128, and HF's rotary module reads that, not
    # hidden_size // num_attention_heads = 64 (the command's own reader used to)
    want = expected(7, 128, scaling=params, max_position_embeddings=128)
    assert_file_is("y.npz", want)
    assert float(want["attention_factor"]) > 1 and SUMMARY.fullmatch(result.stdout.strip())["type"] == "yarn"


def test_phi3_style_longrope_config_switches_on_max_len(in_tmp):
    """Phi-3 keeps original_max_position_embeddings at the top level; HF prefers it."""
    n = 8
    scaling = {"type": "longrope", "short_factor": [1.0 + i / 10 for i in range(n)],
               "long_factor": [2.0 + i for i in range(n)], "original_max_position_embeddings": 999}
    config = {"hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 64,
              "original_max_position_embeddings": 8, "rope_theta": 1e4, "rope_scaling": scaling}
    (in_tmp / "phi.json").write_text(json.dumps(config))
    fixed = {**scaling, "original_max_position_embeddings": 8}
    for max_len, name in ((8, "short.npz"), (9, "long.npz")):
        result = run("rope", "--scaling", "phi.json", "--max-len", max_len, "-o", name)
        assert result.exit_code == 0, result.output
        # HF's validator advises a factor: the warning is one stderr line, the file is written
        assert result.stderr.startswith("Warning: config['rope_scaling'] has no 'factor'"), result.stderr
        assert len(result.stderr.splitlines()) == 1
        assert_file_is(name, expected(max_len, 16, scaling=fixed, max_position_embeddings=64))
    short, long = load("short.npz")["inv_freq"], load("long.npz")["inv_freq"]
    np.testing.assert_allclose(short * scaling["short_factor"], long * scaling["long_factor"], rtol=1e-15)


def test_scaling_as_json_text_and_as_a_dict_file(in_tmp):
    text = '{"rope_type": "linear", "factor": 2}'
    result = run("rope", "--head-dim", 16, "--max-len", 4, "--scaling", text, "-o", "a.npz")
    assert result.exit_code == 0, result.output
    (in_tmp / "s.json").write_text(text)
    result = run("rope", "--head-dim", 16, "--max-len", 4, "--scaling", "s.json", "-o", "b.npz")
    assert result.exit_code == 0, result.output
    want = expected(4, 16, scaling={"rope_type": "linear", "factor": 2})
    assert_file_is("a.npz", want)
    assert_file_is("b.npz", want)


def test_dynamic_uses_max_len_or_seq_len(in_tmp):
    text = '{"rope_type": "dynamic", "factor": 2.0}'
    common = ("rope", "--head-dim", 16, "--scaling", text, "--max-position-embeddings", 4)
    assert run(*common, "--max-len", 9, "-o", "a.npz").exit_code == 0
    assert run(*common, "--max-len", 9, "--seq-len", 100, "-o", "b.npz").exit_code == 0
    s = {"rope_type": "dynamic", "factor": 2.0}
    assert_file_is("a.npz", expected(9, 16, scaling=s, max_position_embeddings=4))
    assert_file_is("b.npz", expected(9, 16, scaling=s, max_position_embeddings=4, seq_len=100))
    assert not np.array_equal(load("a.npz")["inv_freq"], load("b.npz")["inv_freq"])


def test_quiet_prints_nothing_and_replaces_an_existing_file(in_tmp):
    (in_tmp / "r.npz").write_bytes(b"old")
    result = run("-q", "rope", "--head-dim", 4, "--max-len", 3, "-o", "r.npz")
    assert result.exit_code == 0 and result.output == ""
    assert listing() == ["r.npz"]
    assert_file_is("r.npz", expected(3, 4))


# ============================================================================ bad input


BAD = [
    pytest.param([], "Missing option '--head-dim'", id="no-head-dim"),
    pytest.param(["--head-dim", "8"], "Missing option '--max-len'", id="no-max-len"),
    pytest.param(["--head-dim", "0", "--max-len", "4"], "--head-dim", id="head-dim-0"),
    pytest.param(["--head-dim", "x", "--max-len", "4"], "not a valid integer", id="head-dim-text"),
    pytest.param(["--head-dim", "8", "--max-len", "0"], "--max-len", id="max-len-0"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--base", "1"], "greater than 1", id="base-1"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--base", "nan"], "finite", id="base-nan"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--rotary-dim", "5"], "rotary_dim must be even",
                 id="rotary-odd"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--rotary-dim", "16"], "rotary_dim must be <= head_dim",
                 id="rotary-too-big"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--layout", "llama"], "--layout", id="layout"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--scaling", "{bad json"], "not valid JSON", id="bad-json"),
    # JSON text that is not an object is told so, not that no file has its name
    pytest.param(["--head-dim", "8", "--max-len", "4", "--scaling", "[1,2]"],
                 "Error: Invalid value for '--scaling': '[1,2]' is JSON but not an object (a dict of rope parameters): "
                 "it is an array", id="json-list"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--scaling", " [1, 2] "],
                 "' [1, 2] ' is JSON but not an object (a dict of rope parameters): it is an array", id="json-list-spaced"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--scaling", '"linear"'],
                 """'"linear"' is JSON but not an object (a dict of rope parameters): it is a string""", id="json-string"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--scaling", "2"],
                 "'2' is JSON but not an object (a dict of rope parameters): it is a number", id="json-number"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--scaling", "true"],
                 "'true' is JSON but not an object (a dict of rope parameters): it is a boolean", id="json-true"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--scaling", "nope.json"], "neither JSON text nor an existing",
                 id="no-such-file"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--scaling", "[1, 2"],
                 "'[1, 2' is neither JSON text nor an existing file", id="broken-json-list"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--scaling", "list.json"],
                 "'list.json' holds JSON but not an object (a dict of rope parameters, or a model config.json): "
                 "it holds an array", id="file-list"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--scaling", '{"rope_type": "ntk"}'], "'ntk' is not supported",
                 id="unknown-type"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--scaling", '{"rope_type": "linear"}'],
                 "scaling['factor'] is required", id="missing-factor"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--scaling", '{"rope_type": "linear", "factor": 0}'],
                 "scaling['factor'] must be > 0", id="factor-0"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--scaling", '{"rope_type": "dynamic", "factor": 2}'],
                 "max_position_embeddings is required", id="dynamic-no-mpe"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--scaling",
                  '{"rope_type": "longrope", "short_factor": [1, 1], "long_factor": [1, 1, 1, 1], "factor": 2,'
                  ' "original_max_position_embeddings": 4}'], "must have rotary_dim/2 = 4 entries, got 2",
                 id="longrope-length"),
    pytest.param(["--scaling", "badcfg.json", "--max-len", "4"], "config['head_dim'] must be an integer, got str",
                 id="config-head-dim"),
    pytest.param(["--scaling", "nohead.json", "--max-len", "4"], "the config gives no head size", id="config-without-head-dim"),
    pytest.param(["--scaling", "gemma3.json", "--max-len", "4"], "pass --layer-type one of them",
                 id="config-needs-layer-type"),
    pytest.param(["--scaling", "gemma3.json", "--max-len", "4", "--layer-type", "nope"],
                 "layer_type 'nope' is not one of", id="config-bad-layer-type"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--layer-type", "full_attention"],
                 "--layer-type needs a model config.json", id="layer-type-without-config"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--dtype", "float8"], "--dtype", id="dtype"),

    pytest.param(["--head-dim", "8", "--max-len", "4", "--seq-len", "0"], "--seq-len", id="seq-len-0"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "-o", "out.txt"], "does not end in .npy, .npz or .safetensors",
                 id="out-txt"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "-o", "missing/out.npz"], "does not exist", id="out-no-dir"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "-o", "adir"], "names a directory", id="out-dir"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "-o", ""], "empty", id="out-empty"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--backend", "gpu"], "--backend", id="backend"),
    # values that reached decimal errors (exit 1, "Error: DivisionByZero: [<class ...>]")
    pytest.param(["--head-dim", "8", "--max-len", "4", "--scaling",
                  '{"rope_type": "longrope", "short_factor": [1, 1, 1, 1], "long_factor": [1, 1, 1, 1], "factor": 2,'
                  ' "original_max_position_embeddings": 1}'],
                 "Error: scaling['original_max_position_embeddings'] must be >= 2 for LongRoPE's attention factor",
                 id="longrope-original-1"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--scaling",
                  '{"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": 4, "beta_fast": -3}'],
                 "Error: scaling['beta_fast'] must be > 0", id="yarn-negative-beta"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--scaling", '{"rope_type": "linear", "factor": 1' + "0" * 400 + "}"],
                 "Error: scaling['factor'] must be finite, got int beyond the float64 range", id="huge-int-factor"),
    pytest.param(["--head-dim", "8", "--max-len", "4", "--scaling",
                  '{"rope_type": "longrope", "short_factor": [1e-9, 1, 1, 1], "long_factor": [1, 1, 1, 1], "factor": 2,'
                  ' "original_max_position_embeddings": 4}'], "Error: scaling['short_factor'][0] = 1e-09 is too small",
                 id="longrope-tiny-factor"),
    pytest.param(["--scaling", "bigcfg.json"],
                 "Error: the default --max-len, config 'max_position_embeddings', must be <= 4294967296", id="config-mpe-huge"),
]


@pytest.mark.any_backend
@pytest.mark.parametrize("args, message", BAD)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(in_tmp, args, message):
    (in_tmp / "adir").mkdir()
    (in_tmp / "list.json").write_text("[1, 2]")
    (in_tmp / "badcfg.json").write_text(json.dumps({"hidden_size": 64, "head_dim": "64"}))
    (in_tmp / "nohead.json").write_text(json.dumps({"model_type": "x", "rope_theta": 1e4}))
    (in_tmp / "bigcfg.json").write_text(json.dumps({"model_type": "x", "head_dim": 8, "max_position_embeddings": 2**40}))
    (in_tmp / "gemma3.json").write_text((CONFIGS / "gemma-3-4b-it.json").read_text())
    before = listing()
    result = run("rope", *args)
    assert result.exit_code == 2, result.output
    assert message in assert_one_line_error(result)
    assert result.stdout == "" and listing() == before and listing("adir") == []


def test_the_default_output_path_must_be_usable(in_tmp):
    (in_tmp / "rope_4x8.npz").mkdir()
    result = run("rope", "--head-dim", 8, "--max-len", 4)
    assert result.exit_code == 2
    assert "default output path" in assert_one_line_error(result)


# ============================================================================ the helpers


@pytest.mark.any_backend
def test_read_scaling_tells_configs_from_rope_dicts(tmp_path):
    assert read_scaling('{"rope_type": "linear", "factor": 2}') == ("scaling", {"rope_type": "linear", "factor": 2})
    assert read_scaling(' {"rope_theta": 5e5}') == ("scaling", {"rope_theta": 5e5})
    assert read_scaling("null") == ("scaling", {})  # a config's "rope_scaling": null, as a file holding it
    (tmp_path / "null.json").write_text("null")
    assert read_scaling(str(tmp_path / "null.json")) == ("scaling", {})
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA3_CONFIG))
    assert read_scaling(str(path)) == ("config", LLAMA3_CONFIG)


def test_configs_are_read_as_rotary_from_config_reads_them(in_tmp):
    """The command reads a config.json through Rotary.from_config (HF's precedence: rope_scaling
    wins over rope_parameters, the top-level theta fills in), and records what it resolved to:
    the spec's parameters re-create the same bits through rope.cos_sin."""
    config = {**LLAMA3_CONFIG, "rope_parameters": {"rope_type": "linear", "factor": 3.0}}
    (in_tmp / "c.json").write_text(json.dumps(config))
    assert run("rope", "--scaling", "c.json", "--max-len", 9, "-o", "c.npz").exit_code == 0
    rotary = Rotary.from_config(config)
    assert rotary.rope_type == "llama3" and rotary.base == 5e5
    assert_file_is("c.npz", of_rotary(rotary, 9))
    spec = json.loads(str(load("c.npz")["spec"]))
    params = spec["params"]
    assert params["scaling"] == rule_dict(rotary.spec) and params["head_dim"] == 64 and params["base"] == 5e5
    again = rope.cos_sin(np.arange(9), **{k: v for k, v in params.items() if k != "positions"}, backend=DEFAULT)
    assert same_bits(again[0], load("c.npz")["cos"])


@pytest.mark.parametrize("name, layer, args", [
    pytest.param("phi-3.5-mini-instruct", None, [], id="phi-3.5"),
    pytest.param("phi-3-mini-128k-instruct", None, [], id="phi-3-su"),
    pytest.param("gpt-j-6b", None, [], id="gpt-j"),
    pytest.param("gpt-neox-20b", None, [], id="gpt-neox"),
    pytest.param("deepseek-v3", None, [], id="deepseek-v3"),
    pytest.param("llama-4-scout-17b-16e-instruct", None, [], id="llama-4"),
    pytest.param("gemma-3-12b-it", "sliding_attention", [], id="gemma-3-sliding"),
    pytest.param("gemma-4-31b-it", "full_attention", [], id="gemma-4-full"),
    pytest.param("modernbert-base", "full_attention", ["--dtype", "float64"], id="modernbert-float64"),
    pytest.param("llama-3.1-8b", None, ["--dtype", "float16"], id="llama-3.1-float16"),
])
def test_real_configs(in_tmp, name, layer, args):
    source = CONFIGS / f"{name}.json"
    cli = ["rope", "--scaling", source, "--max-len", 33, "-o", "r.npz", *args]
    if layer is not None:
        cli += ["--layer-type", layer]
    result = run(*cli)
    assert result.exit_code == 0, result.output
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        rotary = Rotary.from_config(source, layer_type=layer)
    # the library's warnings, each one line on stderr (no other output there)
    assert result.stderr.splitlines() == [f"Warning: {w.message}" for w in record]
    dtype = args[1] if args else "float32"
    assert_file_is("r.npz", of_rotary(rotary, 33, dtype))
    match = SUMMARY.fullmatch(result.stdout.rstrip("\n").replace(f"cos, sin {dtype}", "cos, sin float32"))
    assert match and match["layout"] == rotary.layout and match["type"] == rotary.rope_type
    assert float(match["af"]) == pytest.approx(rotary.attention_factor_at(33), rel=1e-7)


def test_options_override_a_real_config(in_tmp):
    source = CONFIGS / "gpt-neox-20b.json"
    result = run("rope", "--scaling", source, "--max-len", 5, "--head-dim", 64, "-o", "a.npz")
    assert result.exit_code == 0, result.output
    assert load("a.npz")["cos"].shape == (5, 16)  # rotary_pct 0.25 of the given head
    result = run("rope", "--scaling", source, "--max-len", 5, "--layout", "gptj", "--base", 5e5,
                 "--rotary-dim", 8, "-o", "b.npz")
    assert result.exit_code == 0, result.output
    assert_file_is("b.npz", expected(5, 96, base=5e5, rotary_dim=8, layout="gptj"))


def test_bfloat16_and_the_npy_stack(in_tmp):
    pytest.importorskip("ml_dtypes")
    import ml_dtypes

    result = run("rope", "--head-dim", 16, "--max-len", 7, "--dtype", "bfloat16", "-o", "b.npy")
    assert result.exit_code == 0, result.output
    stacked = np.load("b.npy").view(ml_dtypes.bfloat16)
    want = expected(7, 16, dtype="bfloat16")
    assert same_bits(stacked[0], want["cos"]) and same_bits(stacked[1], want["sin"])


@pytest.mark.any_backend
def test_check_output(tmp_path):
    assert check_output(str(tmp_path / "x.npz"), "fastpe rope") == str(tmp_path / "x.npz")
    for bad in ("", str(tmp_path), str(tmp_path / ".npz"), str(tmp_path / "x.txt"), str(tmp_path / "no" / "x.npz")):
        with pytest.raises(Exception) as info:
            check_output(bad, "fastpe rope")
        assert type(info.value).__name__ == "BadParameter"


@pytest.mark.any_backend
def test_help_lists_rope():
    result = run("--help")
    assert result.exit_code == 0 and "rope" in result.stdout
    result = run("rope", "--help")
    assert result.exit_code == 0 and "--scaling" in result.stdout and "config.json" in result.stdout


# ============================================================================ real processes


@pytest.mark.any_backend
def test_rope_help_imports_no_kernels(tmp_path):
    code = textwrap.dedent(
        """
        import sys
        from fastpe.cli import main
        try:
            main(["rope", "--help"], prog_name="fastpe")
        except SystemExit as exc:
            assert exc.code == 0, exc.code
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "llvmlite", "torch"))
        assert not heavy, heavy
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=fastpe_env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_process_writes_caches_from_a_config_json(llama3_config):
    proc = run_process("rope", "--scaling", "config.json", "--max-len", "32", "--backend", DEFAULT, "-o", "caches.npz",
                       cwd=llama3_config.parent)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and SUMMARY.fullmatch(proc.stdout.rstrip("\n"))
    assert listing() == ["caches.npz", "config.json"]
    assert_file_is("caches.npz", expected(32, 64, base=500000.0, scaling=LLAMA3_SCALING,
                                          max_position_embeddings=131072))
    bad = run_process("rope", "--scaling", '{"rope_type": "llama3"}', "--head-dim", "64", "--max-len", "8",
                      "-o", "bad.npz", cwd=llama3_config.parent)
    assert bad.returncode == 2 and bad.stdout == ""
    assert "scaling['factor'] is required" in assert_one_line_error(bad)
    assert listing() == ["caches.npz", "config.json"]


def test_caches_larger_than_memory_are_refused_before_any_work(tmp_path, monkeypatch):
    from fastpe._io import save as _save

    monkeypatch.setattr(_save, "physical_memory", lambda: 1 << 20)
    monkeypatch.setattr(rope, "cos_sin", lambda *a, **k: pytest.fail("the library was called"))
    out = tmp_path / "big.npz"
    result = run("rope", "--head-dim", 128, "--max-len", 8192, "-o", out)
    assert result.exit_code == 2, result.output
    assert "the 2 x 8192 x 128 float32 array needs" in result.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.any_backend
def test_scaling_from_a_pipe_is_refused_not_read(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    result = run("rope", "--head-dim", 64, "--max-len", 4, "--scaling", fifo)
    assert result.exit_code == 2 and "is not a regular file" in result.stderr, result.output


@pytest.mark.any_backend
@pytest.mark.parametrize("text", ['{"a": ' * 3000 + "1" + "}" * 3000, "[" * 5000])
def test_scaling_nested_too_deeply_is_exit_2(tmp_path, text):
    path = tmp_path / "deep.json"
    path.write_text(text)
    for value in (str(path), text):
        result = run("rope", "--head-dim", 8, "--max-len", 4, "--scaling", value)
        assert result.exit_code == 2 and "nested too deeply" in result.stderr, result.output


# ---------------------------------------------------------------------------- M-RoPE

QWEN2_VL_CONFIG = {"model_type": "qwen2_vl", "hidden_size": 256, "num_attention_heads": 2, "rope_theta": 1e6,
                   "max_position_embeddings": 32768,
                   "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}
MROPE_IDS = np.array([[0, 1, 2, 3, 3, 3, 4], [0, 1, 2, 3, 3, 4, 5], [0, 1, 2, 3, 4, 3, 6]])


@pytest.fixture
def qwen2_vl(in_tmp):
    (in_tmp / "qwen.json").write_text(json.dumps(QWEN2_VL_CONFIG))
    np.save(in_tmp / "ids.npy", MROPE_IDS)
    return in_tmp


@pytest.mark.parametrize("out", ["m.npz", "m.npy"])
def test_mrope_positions_write_the_mrope_caches(qwen2_vl, out):
    result = run("rope", "--scaling", "qwen.json", "--positions", "ids.npy", "-o", out)
    assert result.exit_code == 0, result.stderr
    match = SUMMARY.match(result.stdout)
    assert match and (match["rows"], match["cols"]) == ("7", "128")
    rotary = Rotary.from_config(QWEN2_VL_CONFIG)
    cos, sin = rotary.cos_sin(MROPE_IDS, backend=DEFAULT)
    if out.endswith(".npy"):
        assert same_bits(np.load(out), np.stack((cos, sin)))
        spec = json.loads((qwen2_vl / (out + ".json")).read_text())
    else:
        got = load(out)
        assert same_bits(got["cos"], cos) and same_bits(got["sin"], sin)
        spec = json.loads(str(got["spec"]))
    params = spec["params"]
    assert params["positions"] == MROPE_IDS.tolist()
    assert params["scaling"]["mrope_section"] == [16, 24, 24]
    again = rope.cos_sin(np.array(params["positions"]), **{k: v for k, v in params.items() if k != "positions"},
                         backend=DEFAULT)
    assert same_bits(again[0], cos)


def test_mrope_dict_and_large_positions_recorded_by_digest(in_tmp, monkeypatch):
    import hashlib

    from fastpe.cli import rope as cli_rope

    monkeypatch.setattr(cli_rope, "SPEC_POSITIONS", 6)
    np.save("ids.npy", MROPE_IDS.astype(np.int32))
    result = run("rope", "--head-dim", 16, "--scaling", '{"type": "mrope", "mrope_section": [2, 3, 3]}',
                 "--positions", "ids.npy", "-o", "d.npz")
    assert result.exit_code == 0, result.stderr
    spec = json.loads(str(load("d.npz")["spec"]))
    assert spec["params"]["positions"] == {
        "shape": [3, 7], "sha256": hashlib.sha256(MROPE_IDS.astype("<i8").tobytes()).hexdigest()}
    cos, _ = Rotary(16, scaling={"type": "mrope", "mrope_section": [2, 3, 3]}).cos_sin(MROPE_IDS, backend=DEFAULT)
    assert same_bits(load("d.npz")["cos"], cos)


@pytest.mark.parametrize("args, word", [
    (["--scaling", "qwen.json"], "--positions"),  # an M-RoPE config needs its positions
    (["--head-dim", 64, "--positions", "ids.npy"], "M-RoPE"),  # not an M-RoPE rope
    (["--scaling", "qwen.json", "--positions", "ids.npy", "--max-len", 7], "not both"),
    (["--scaling", "qwen.json", "--positions", "bad.npy"], "(3, seq)"),
    (["--scaling", "qwen.json", "--positions", "neg.npy"], "--positions"),
    (["--scaling", "qwen.json", "--positions", "floats.npy"], "(3, seq)"),
])
def test_mrope_positions_refused_with_one_error_nothing_written(qwen2_vl, args, word):
    np.save("bad.npy", np.zeros((2, 4), int))
    np.save("neg.npy", -MROPE_IDS)
    np.save("floats.npy", MROPE_IDS.astype(float))
    before = sorted(os.listdir("."))
    line = assert_one_line_error(run("rope", *args, "-o", "z.npz"))
    assert word in line
    assert sorted(os.listdir(".")) == before


# ================================================================================== xPos


@pytest.mark.parametrize("center", [None, "flash_attn", "7"])
def test_xpos_writes_the_four_caches(in_tmp, center):
    extra = () if center is None else ("--xpos-center", center)
    result = run("rope", "--head-dim", 8, "--max-len", 9, "--xpos-scale-base", 64, *extra, "-o", "x.npz")
    assert result.exit_code == 0, result.output
    assert "cos_q, sin_q, cos_k, sin_k" in result.stdout and "xpos_scale_base 64" in result.stdout
    want = rope.cos_sin(np.arange(9), 8, xpos_scale_base=64,
                        xpos_center=int(center) if center == "7" else (center or "torchscale"), seq_len=9)
    with np.load("x.npz") as got:
        for name, value in zip(("cos_q", "sin_q", "cos_k", "sin_k"), want):
            assert np.array_equal(got[name], value), name
        assert "cos" not in got.files
        assert "xpos_scale_base" in str(got["spec"])  # the spec replays through rope.cos_sin
    stacked = run("rope", "--head-dim", 8, "--max-len", 9, "--xpos-scale-base", 64, *extra, "-o", "x.npy")
    assert stacked.exit_code == 0, stacked.output
    assert np.array_equal(np.load("x.npy"), np.stack(want))


def test_xpos_refusals(in_tmp):
    assert "needs --xpos-scale-base" in assert_one_line_error(run("rope", "--head-dim", 8, "--max-len", 4,
                                                                  "--xpos-center", "flash_attn"))
    for bad in ("0", "-1", "nan", "inf"):
        line = assert_one_line_error(run("rope", "--head-dim", 8, "--max-len", 4, "--xpos-scale-base", bad))
        assert "xpos_scale_base" in line
    line = assert_one_line_error(run("rope", "--head-dim", 8, "--max-len", 4, "--xpos-scale-base", 512,
                                     "--xpos-center", "middle"))
    assert "xpos_center" in line
    line = assert_one_line_error(run("rope", "--head-dim", 8, "--max-len", 4, "--xpos-scale-base", 512,
                                     "--dtype", "float16"))
    assert "float32 or float64" in line
    assert listing() == []
