"""The real config.json files in ../shared/configs (skipped without it), and published parameter counts."""

import pytest
from conftest import run, run_json, shared_path

K = 2 * 2  # K and V, 2 bytes (bf16)

# file -> (bytes per layer per token, full layers, [(windowed layers, window)]), from the published architecture:
# KV heads x head dim x K,V x 2 B (MLA: (512 + 64) x 2 B); hybrids count only their attention layers.
EXPECTED = {
    "bloom-7b1": (32 * 128 * K, 30, []),
    "chatglm3-6b": (2 * 128 * K, 28, []),
    "command-r-v01": (64 * 128 * K, 40, []),
    "deepseek-v2-lite": (576 * 2, 27, []),
    "deepseek-v3": (576 * 2, 61, []),
    "falcon-40b": (8 * 64 * K, 60, []),
    "gemma-2-2b-it": (4 * 256 * K, 13, [(13, 4096)]),
    "gemma-2b-it": (1 * 256 * K, 18, []),
    "gemma-3-27b-it": (16 * 128 * K, 10, [(52, 1024)]),
    "glm-4.5": (8 * 128 * K, 92, []),
    "gpt-oss-20b": (8 * 64 * K, 12, [(12, 128)]),
    "llama-2-7b": (32 * 128 * K, 32, []),
    "llama-3.1-8b": (8 * 128 * K, 32, []),
    "llama-3.2-11b-vision": (8 * 128 * K, 32, []),  # + 8 cross-attention layers: FIXED below
    "llama-3.2-3b-instruct": (8 * 128 * K, 28, []),
    "llama-4-scout-17b-16e-instruct": (8 * 128 * K, 12, [(36, 8192)]),
    "mistral-small-24b-instruct-2501": (8 * 128 * K, 40, []),
    "mixtral-8x7b-v0.1": (8 * 128 * K, 32, []),
    "mpt-7b": (32 * 128 * K, 32, []),
    "nemotron-h-56b-base-8k": (8 * 128 * K, 10, []),  # 10 '*' layers of 118
    "granite-3.3-8b-instruct": (8 * 128 * K, 40, []),
    "phi-3-mini-4k-instruct": (32 * 96 * K, 0, [(32, 2047)]),
    "phi-4": (10 * 128 * K, 40, []),
    "qwen-7b-chat": (32 * 128 * K, 32, []),
    "qwen2.5-7b": (4 * 128 * K, 28, []),
    "qwen3-30b-a3b": (4 * 128 * K, 48, []),
    "qwen3-8b": (8 * 128 * K, 36, []),
    "qwen3-next-80b-a3b-thinking": (2 * 256 * K, 12, []),  # every 4th of 48 layers
    "starcoder2-7b": (4 * 128 * K, 0, [(32, 4096)]),
    "starcoderbase-7b": (1 * 128 * K, 42, []),
    # 4 decoder layers, 6 heads x 64 (d_model 384): self-attention grows with the sequence
    "whisper-tiny": (6 * 64 * K, 4, []),
}
# Bytes of layers that hold a fixed number of tokens whatever --seq: llama-3.2-11b-vision's 8 cross-attention
# layers hold one image (4 tiles x 1,601 patches = 6,404 tokens); whisper-tiny's 4 cross-attention layers hold
# the encoder's 1,500 audio positions.
FIXED = {
    "llama-3.2-11b-vision": 8 * (8 * 128 * K) * 6404,
    "whisper-tiny": 4 * (6 * 64 * K) * 1500,
}
REFUSED: dict[str, str] = {}


def test_every_shared_config_is_covered():
    names = {p.stem for p in shared_path("configs").glob("*.json")}
    assert names == set(EXPECTED) | set(REFUSED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_config_cache(name):
    path = shared_path("configs", f"{name}.json")
    per_layer, full, windowed = EXPECTED[name]
    for seq in (1000, 32768):
        expected = per_layer * (full * seq + sum(n * min(seq, w) for n, w in windowed)) + FIXED.get(name, 0)
        out = run_json("cache", path, "--seq", seq, "--kv-dtype", "bf16")
        assert out["total_bytes"] == expected, (name, seq)


@pytest.mark.skipif(not REFUSED, reason="every shared config is read")
@pytest.mark.parametrize(("name", "message"), sorted(REFUSED.items()))
def test_real_config_refused(name, message):
    result = run("cache", shared_path("configs", f"{name}.json"))
    assert result.exit_code != 0 and message in result.stderr and result.stderr.count("\n") == 1


def near(value: float, published: float, last_digit: float) -> bool:
    """Within 1% of a published figure, allowing for its own rounding (half its last digit)."""
    return abs(value - published) <= 0.01 * published + last_digit / 2


# (model, total, active, which active convention the publisher uses, last published digit)
PUBLISHED = [
    ("llama-3-8b", 8.03e9, None, None, 0.01e9),
    ("llama-2-7b", 6.74e9, None, None, 0.01e9),
    ("mixtral-8x7b", 46.7e9, 12.9e9, "active", 0.1e9),
    # Mistral's announcement of Mixtral 8x22B: 141B parameters, 39B active
    ("mixtral-8x22b", 141e9, 39e9, "active", 1e9),
    # EleutherAI's card for GPT-J 6B: 6,053,381,344 parameters
    ("gpt-j-6b", 6_053_381_344, None, None, 1),
    # TII's card for Falcon-180B: "a 180B parameters causal decoder-only model"
    ("falcon-180b", 180e9, None, None, 1e9),
    ("deepseek-v3", 671e9, 37e9, "active_excl_embedding", 1e9),
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, "active", 0.1e9),
    ("gpt-oss-120b", 117e9, 5.1e9, "active_excl_embedding", 0.1e9),
    ("gpt-oss-20b", 20.9e9, 3.6e9, "active_excl_embedding", 0.1e9),
    # NVIDIA's card: 31.6B total, 3.2B active (3.6B with embeddings)
    ("nemotron-3-nano-30b-a3b", 31.6e9, 3.2e9, "active_excl_embedding", 0.1e9),
    # NVIDIA's names: Nemotron 3 Super 120B-A12B and Ultra 550B-A55B (LatentMoE), active counted without the
    # embedding as Nano's card counts it (the MTP layer not counted)
    ("nemotron-3-super-120b-a12b", 120e9, 12e9, "active_excl_embedding", 1e9),
    ("nemotron-3-ultra-550b-a55b", 550e9, 55e9, "active_excl_embedding", 1e9),
    # MiniMax's card: 230B total, 10B activated (the MTP modules are not counted by kvcalc)
    ("minimax-m2.5", 230e9, 10e9, "active_excl_embedding", 1e9),
    # Tencent's card: 80B total, 13B active
    ("hunyuan-a13b", 80e9, 13e9, "active", 1e9),
    # Hugging Face's card: "a 3B parameter language model"
    ("smollm3-3b", 3e9, None, None, 1e9),
    # Hugging Face's card: SmolLM2 "135M"
    ("smollm2-135m", 135e6, None, None, 1e6),
    # Meta's cards: 17B active, 109B / 400B total, the vision tower included (107.8B / 400.7B without it)
    ("llama-4-scout", 109e9, 17e9, "active", 1e9),
    ("llama-4-maverick", 400e9, 17e9, "active", 1e9),
    # the hub's safetensors count for google/gemma-3-27b-it: 27.4B with the SigLIP tower (27.0B without)
    ("gemma-3-27b", 27.4e9, None, None, 0.1e9),
]


@pytest.mark.parametrize(("name", "total", "active", "convention", "digit"), PUBLISHED)
def test_published_parameter_counts(name, total, active, convention, digit):
    params = run_json("show", name)["params"]
    assert near(params["total"], total, digit), params["total"]
    if active:
        assert near(params[convention], active, digit), params[convention]


@pytest.mark.parametrize(
    ("config", "preset"),
    [
        ("llama-3.1-8b", "llama-3.1-8b"),
        ("mixtral-8x7b-v0.1", "mixtral-8x7b"),
        ("deepseek-v3", "deepseek-v3"),
        ("qwen3-30b-a3b", "qwen3-30b-a3b"),
        ("gpt-oss-20b", "gpt-oss-20b"),
        ("gemma-3-27b-it", "gemma-3-27b"),
        ("qwen2.5-7b", "qwen2.5-7b"),
        ("qwen3-8b", "qwen3-8b"),
        ("falcon-40b", "falcon-40b"),
        ("llama-2-7b", "llama-2-7b"),
        ("phi-3-mini-4k-instruct", "phi-3-mini"),
        ("deepseek-v2-lite", "deepseek-v2-lite"),
        ("gemma-2-2b-it", "gemma-2-2b"),
    ],
)
def test_presets_agree_with_real_configs(config, preset):
    from_file = run_json("show", shared_path("configs", f"{config}.json"))
    from_preset = run_json("show", preset)
    assert from_file["params"] == from_preset["params"]
    assert from_file["kv_bytes_per_token_bf16"] == from_preset["kv_bytes_per_token_bf16"]
    for seq in (512, 40000):
        assert (
            run_json("cache", shared_path("configs", f"{config}.json"), "--seq", seq)["total_bytes"]
            == run_json("cache", preset, "--seq", seq)["total_bytes"]
        )
