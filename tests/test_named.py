"""Quantized re-publications resolved from their name when their config.json is out of reach
(kvcalc/model/named.py): the base preset, in the format the suffix names, said so in the source line."""

import json
import os
import subprocess
import sys

import hubserver
import pytest
from conftest import HANG_GUARD_S

from kvcalc.cost.params import weight_bytes_resident
from kvcalc.errors import NotFoundError
from kvcalc.model import hub as hubmod
from kvcalc.model.named import split
from kvcalc.model.presets import by_name, get_model
from kvcalc.model.resolve import resolve_model


@pytest.fixture
def unreachable(monkeypatch):
    """The hub is out of reach and the cache holds nothing: what fetch_config raises then."""

    def fetch(repo, revision):
        raise hubmod.HubUnreachable(f"{repo}: the hub could not be reached and config.json is not in the cache")

    monkeypatch.setattr(hubmod, "fetch_config", fetch)


@pytest.mark.parametrize(
    ("name", "base", "dtype"),
    [
        ("nvidia/Llama-3.1-8B-Instruct-FP8", "llama-3.1-8b", "fp8"),  # org differs: nvidia re-publishes Meta's
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic", "llama-3.1-8b", "fp8"),
        ("nvidia/DeepSeek-R1-NVFP4", "deepseek-v3", "nvfp4"),
        ("nvidia/DeepSeek-R1-0528-FP4", "deepseek-v3", "nvfp4"),  # NVIDIA's own spelling of NVFP4
        ("nvidia/DeepSeek-R1-0528-FP4-v2", "deepseek-v3", "nvfp4"),
        ("amd/Llama-3.3-70B-Instruct-FP8-KV", "llama-3.3-70b", "fp8"),  # AMD Quark, as InferenceMAX serves it
        ("amd/Llama-3.1-70B-Instruct-FP8-KV", "llama-3.1-70b", "fp8"),
        ("amd/DeepSeek-R1-0528-MXFP4-Preview", "deepseek-v3", "mxfp4"),
        ("nvidia/DeepSeek-V3.1-NVFP4", "deepseek-v3", "nvfp4"),
        ("nvidia/Qwen3-32B-NVFP4", "qwen3-32b", "nvfp4"),
        ("Qwen/Qwen3-32B-AWQ", "qwen3-32b", "int4"),
        ("hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "llama-3.1-70b", "int4"),
        ("Qwen/Qwen3-8B-GPTQ-Int4", "qwen3-8b", "int4"),
        ("RedHatAI/Qwen3-8B-quantized.w4a16", "qwen3-8b", "int4"),
        ("nvidia/Qwen3-235B-A22B-NVFP4", "qwen3-235b-a22b", "nvfp4"),
    ],
)
def test_each_naming_pattern_resolves_to_its_base_offline(unreachable, name, base, dtype):
    resolved = resolve_model(name)
    spec = resolved.spec
    assert resolved.source == (
        f"base preset {base} with {dtype} weights, from the name {name}; its config.json was not read"
    )
    assert resolved.location == f"model_presets/{base}.yaml"
    assert spec.name == name and spec.dtype == dtype
    assert spec.checkpoint.quantization.linear.name == dtype
    # the weights are the base's with every linear layer in the named format, as `--dtype` models it
    base_spec = get_model(base)
    if not name.endswith(("-AWQ", "-AWQ-INT4")):
        assert weight_bytes_resident(spec) == weight_bytes_resident(base_spec, dtype)


def test_awq_keeps_a_zero_point_per_group(unreachable):
    """AWQ is asymmetric: 4-bit zero points beside the 16-bit scales of each 128-wide group, so per
    [out, in] linear it holds out*in/2 + out*(in/128)*2 + out*(in/128)/2 bytes; GPTQ-Int4 (symmetric)
    lacks the last term. Qwen3-32B's q_proj (8192 x 5120) alone: 40 groups, 655,360 bytes of zeros."""
    awq = resolve_model("Qwen/Qwen3-32B-AWQ").spec
    gptq = resolve_model("Qwen/Qwen3-32B-GPTQ-Int4").spec
    fmt = awq.checkpoint.quantization.linear
    assert fmt.zero_points and not gptq.checkpoint.quantization.linear.zero_points
    hugging_quants = resolve_model("hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4").spec
    assert hugging_quants.checkpoint.quantization.linear.zero_points
    assert fmt.tensor_bytes(8192, 5120) == [8192 * 5120 // 2, 8192 * 40 * 2, 8192 * 40 // 2]
    assert weight_bytes_resident(awq) > weight_bytes_resident(gptq)


def test_native_fp8_base_takes_the_named_format():
    """DeepSeek-R1's preset is native fp8 (128x128 blocks); NVIDIA's NVFP4 copy is nvfp4, not fp8 blocks.
    The calibration import looks models up with get_model, which answers with the base's name."""
    spec = get_model("nvidia/DeepSeek-R1-NVFP4")
    assert spec.name == "deepseek-v3" and spec.dtype == "nvfp4"
    linear = spec.checkpoint.quantization.linear
    assert (linear.name, linear.weight_bits, linear.group_size, linear.compute) == ("nvfp4", 4, 16, "fp4")
    assert get_model("deepseek-ai/DeepSeek-R1").checkpoint.quantization.linear.scale == "block"


def test_real_fp8_preset_wins_over_the_name():
    """Qwen/Qwen3-235B-A22B-FP8 has a preset from its own config.json: 128x128 fp8 blocks, 94 layers x
    4 KV heads x 128 x K and V x 2 bytes = 192,512 bytes of bf16 cache per token."""
    from kvcalc.cost.kvcache import bytes_per_token

    resolved = resolve_model("Qwen/Qwen3-235B-A22B-FP8")
    assert resolved.source == "preset" and resolved.spec.name == "qwen3-235b-a22b-fp8"
    assert resolved.spec.checkpoint.quantization.linear.scale == "block"
    assert bytes_per_token(resolved.spec, "bf16") == 94 * 4 * 128 * 2 * 2 == 192_512


@pytest.mark.parametrize(
    "name",
    [
        "Qwen/Qwen3-33B-FP8",  # no such size: never the 32B
        "acme/DeepSeek-R1-FP4",  # "-FP4" is NVIDIA's spelling only; elsewhere it may be MXFP4
        "acme/DeepSeek-R1-0528-FP4-v2",  # likewise its second release
        "nvidia/DeepSeek-R1",  # no format suffix
        "nvidia/FP8",  # a suffix and nothing before it
        "Qwen/Qwen3-32B-Instruct-Reasoning-FP8",  # the base must match exactly
    ],
)
def test_non_matches_are_not_resolved_by_name(name):
    assert by_name(name) is None


def test_split_reads_the_longest_suffix():
    assert split("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic") == (
        "RedHatAI",
        "Meta-Llama-3.1-8B-Instruct",
        "fp8",
    )
    assert split("Qwen3-32B-AWQ") == ("", "Qwen3-32B", "int4")


def test_unknown_name_without_org_stays_unknown_with_close_names():
    with pytest.raises(NotFoundError) as err:
        resolve_model("Qwen3-33B-FP8")
    assert err.value.message == "unknown model 'Qwen3-33B-FP8'"
    assert "qwen3-32b" in err.value.hint


def test_a_name_without_org_resolves_by_name():
    resolved = resolve_model("Qwen3-32B-FP8")
    assert resolved.source.startswith("base preset qwen3-32b with fp8 weights") and resolved.spec.dtype == "fp8"


def test_other_revisions_are_not_guessed(unreachable):
    """The base preset is the base at main: another revision of the copy is not answered by name."""
    with pytest.raises(hubmod.HubUnreachable):
        resolve_model("Qwen/Qwen3-32B-AWQ@v2")
    assert resolve_model("Qwen/Qwen3-32B-AWQ@main").spec.dtype == "int4"


def test_what_ifs_apply_to_the_named_spec(unreachable):
    spec = resolve_model("nvidia/Qwen3-32B-NVFP4", {"layers": 8}).spec
    assert spec.num_layers == 8 and spec.dtype == "nvfp4"


# --- through the CLI: the offline path for real, and the hub winning when it answers -------------


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_TELEMETRY="1", **extra)
    return env


def kvcalc(env, *args):
    return subprocess.run(
        [sys.executable, "-m", "kvcalc", *args], env=env, capture_output=True, text=True, timeout=HANG_GUARD_S
    )


def test_offline_cli_says_the_config_was_not_read(tmp_path):
    out = kvcalc(_env(tmp_path, HF_HUB_OFFLINE="1"), "show", "nvidia/Qwen3-32B-NVFP4", "-f", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["source"] == (
        "base preset qwen3-32b with nvfp4 weights, from the name nvidia/Qwen3-32B-NVFP4; its config.json was not read"
    )
    assert data["spec"]["dtype"] == "nvfp4"


def test_offline_cli_non_match_is_one_line(tmp_path):
    out = kvcalc(_env(tmp_path, HF_HUB_OFFLINE="1"), "cache", "Qwen/Qwen3-33B-FP8")
    assert out.returncode != 0 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "config.json is not in the local Hugging Face cache" in out.stderr


def test_reachable_hub_config_wins(tmp_path):
    """When the hub answers, its config.json is read (here the loopback hub's 4-layer model), not the name."""
    server, url = hubserver.start()
    try:
        out = kvcalc(
            _env(tmp_path, HF_ENDPOINT=url, HF_HUB_ETAG_TIMEOUT="5"), "show", "Qwen/Qwen3-32B-AWQ", "-f", "json"
        )
    finally:
        server.shutdown()
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["source"] == "hub" and data["spec"]["num_layers"] == 4
    assert any("/Qwen/Qwen3-32B-AWQ/resolve/main/config.json" in p for _, p, _ in hubserver.HubHandler.requests)


@pytest.mark.parametrize(
    ("name", "preset"),
    [
        ("Llama-3.3-70B-Instruct", "llama-3.3-70b"),  # meta-llama/Llama-3.3-70B-Instruct without its org
        ("meta-llama-3-70b-instruct", "llama-3-70b"),  # case-insensitive
        ("Mistral-7B-Instruct-v0.3", "mistral-7b-v0.3"),
        ("Llama-2-70b-chat-hf", "llama-2-70b"),
    ],
)
def test_a_hub_name_without_its_org_is_the_preset_with_that_alias(unreachable, name, preset):
    resolved = resolve_model(name)
    assert resolved.spec == get_model(preset) == get_model(name)
    assert resolved.location == f"model_presets/{preset}.yaml (as {name})"


@pytest.mark.parametrize(
    "name", ["llama-2-7b-chat", "Llama-3.3-70B-Chat", "Instruct", "meta-llama/Llama-3.3-70B-Instruct-X"]
)
def test_a_name_no_alias_ends_with_is_not_guessed(unreachable, name):
    from kvcalc.model.presets import by_hub_name

    assert by_hub_name(name) is None
    with pytest.raises(NotFoundError):
        get_model(name)


def test_amd_mxfp4_preview_reads_as_its_quark_config_does(unreachable, tmp_path):
    """AMD's -MXFP4-Preview checkpoints are Quark OCP MXFP4 with fp4 activations (w4a4): read from the name, their
    weights and the rate their matmuls run at are what their config.json gives (tests/test_quark.py), not
    `--dtype mxfp4`'s weight-only 16-bit multiply."""
    from kvcalc.model.formats import matmul_dtype

    named = resolve_model("amd/Llama-3.3-70B-Instruct-MXFP4-Preview").spec
    assert named.checkpoint.quantization.linear.compute == "fp4" and matmul_dtype(named, None) == "fp4"
    assert matmul_dtype(get_model("llama-3.3-70b"), "mxfp4") == "bf16"
    from conftest import FIXTURES

    mx = {"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0", "is_dynamic": False}
    config = json.loads((FIXTURES / "real_configs" / "llama-3.3-70b.json").read_text())
    config["quantization_config"] = {
        "quant_method": "quark",
        "exclude": ["lm_head"],
        "export": {"kv_cache_group": [], "pack_method": "reorder"},
        "global_quant_config": {"weight": mx, "input_tensors": {**mx, "is_dynamic": True}},
        "layer_quant_config": {},
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    quark = resolve_model(str(path)).spec
    assert weight_bytes_resident(named) == weight_bytes_resident(quark)
    assert matmul_dtype(quark, None) == "fp4"
