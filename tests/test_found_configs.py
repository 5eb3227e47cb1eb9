"""The presets read on 2026-12-04 from vendored hub copies of their config.json (tests/fixtures/real_configs,
PROVENANCE.yaml): each one's parameters and KV bytes derived by hand from the published architecture, and each
hub id resolving offline to its preset, with the quantized re-publications read from their names."""

import pytest
from conftest import run_json

from kvcalc.cost.kvcache import bytes_per_token
from kvcalc.cost.params import param_counts
from kvcalc.model.presets import get_model


def test_phi2_parameters_by_hand():
    # microsoft/phi-2: 32 parallel blocks of hidden 2,560, MLP 10,240, every linear layer with a bias, one
    # LayerNorm (weight and bias) a block and a final one, an untied LM head with a bias, vocab 51,200
    h, ff, vocab, layers = 2560, 10240, 51200, 32
    attention = 4 * (h * h + h)  # q, k, v, dense
    mlp = (h * ff + ff) + (ff * h + h)
    block = attention + mlp + 2 * h
    total = vocab * h + layers * block + 2 * h + (h * vocab + vocab)
    assert total == 2_779_683_840  # the hub's "2.78B"
    assert param_counts(get_model("phi-2")).total == total


def test_gpt_neox_20b_parameters_by_hand():
    # EleutherAI/gpt-neox-20b: 44 layers of hidden 6,144 (64 heads of 96), a fused QKV, MLP 24,576, biases on
    # every linear layer, two LayerNorms a layer (parallel residual), untied embed_out without a bias
    h, ff, vocab, layers = 6144, 24576, 50432, 44
    block = (h * 3 * h + 3 * h) + (h * h + h) + (h * ff + ff) + (ff * h + h) + 2 * 2 * h
    total = vocab * h + layers * block + 2 * h + h * vocab
    assert total == 20_554_567_680
    assert param_counts(get_model("gpt-neox-20b")).total == total


@pytest.mark.parametrize(
    "preset, layers, kv_heads, head_dim",
    [
        ("phi-2", 32, 32, 80),  # MHA: 2,560 / 32 heads
        ("gpt-neox-20b", 44, 64, 96),
        ("qwen3-coder-30b-a3b", 48, 4, 128),
        ("qwen2.5-1.5b", 28, 2, 128),  # 1,536 / 12 heads
        ("llama-3.1-405b", 126, 8, 128),
        ("gemma-2-9b", 42, 8, 256),  # bytes per token while every window still grows
        ("yi-34b", 60, 8, 128),  # 7,168 / 56 heads
    ],
)
def test_kv_bytes_per_token(preset, layers, kv_heads, head_dim):
    assert bytes_per_token(get_model(preset), "bf16") == 2 * layers * kv_heads * head_dim * 2


def test_qwen3_coder_is_the_30b_a3b_shape_with_a_256k_context():
    coder, base = get_model("qwen3-coder-30b-a3b"), get_model("qwen3-30b-a3b")
    assert param_counts(coder).total == param_counts(base).total == 30_532_122_624  # Qwen/Qwen3-30B-A3B's
    assert (coder.max_position_embeddings, base.max_position_embeddings) == (262_144, 40_960)


@pytest.mark.parametrize(
    "name, preset, dtype",
    [
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3-coder-30b-a3b", "bf16"),
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8", "qwen3-coder-30b-a3b", "fp8"),
        ("Qwen/Qwen2.5-1.5B-Instruct", "qwen2.5-1.5b", "bf16"),
        ("Qwen/Qwen2.5-1.5B-Instruct-AWQ", "qwen2.5-1.5b", "int4"),
        ("microsoft/phi-2", "phi-2", "fp16"),
        ("EleutherAI/gpt-neox-20b", "gpt-neox-20b", "fp16"),
        ("meta-llama/Llama-3.1-405B-Instruct", "llama-3.1-405b", "bf16"),
        ("meta-llama/Meta-Llama-3.1-405B-Instruct-FP8", "llama-3.1-405b", "fp8"),
        ("google/gemma-2-9b-it", "gemma-2-9b", "bf16"),
        ("01-ai/Yi-34B", "yi-34b", "bf16"),
    ],
)
def test_hub_ids_resolve_offline(name, preset, dtype):
    out = run_json("show", name)
    assert out["location"] == f"model_presets/{preset}.yaml"
    assert out["spec"]["dtype"] == dtype
