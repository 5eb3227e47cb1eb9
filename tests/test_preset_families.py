"""Presets of the families issue 11 added, by hand: the cache at two context lengths, from the real configs."""

import pytest
from conftest import run_json

B = 2  # bf16 bytes per element


@pytest.mark.parametrize(
    ("name", "short", "short_bytes", "long", "long_bytes"),
    [
        # MiniMax-M2.5: 62 full-attention layers, 8 KV heads x head_dim 128 -> 2 x 8 x 128 x 2 B = 4,096 B per
        # layer per token, 253,952 B per token; no sliding layers, so it grows with every token.
        ("minimax-m2.5", 1000, 62 * 4096 * 1000, 131072, 62 * 4096 * 131072),
        # Nemotron 3 Nano: 6 '*' (attention) blocks of 52, 2 KV heads x 128 -> 1,024 B per layer per token; the
        # 23 Mamba-2 blocks hold a fixed state (counted apart, as state_bytes).
        ("nemotron-3-nano-30b-a3b", 1000, 6 * 1024 * 1000, 262144, 6 * 1024 * 262144),
        # Hunyuan-A13B: 32 layers, 8 KV heads x attention_head_dim 128 -> 4,096 B per layer per token, no
        # cross-layer sharing (use_cla false): 131,072 B per token.
        ("hunyuan-a13b", 1000, 32 * 4096 * 1000, 32768, 32 * 4096 * 32768),
        # SmolLM3 3B: 36 layers, 4 KV heads x 128 (2048 / 16) -> 2,048 B per layer per token; NoPE layers hold
        # the same cache as RoPE ones, and no layer slides.
        ("smollm3-3b", 1000, 36 * 2048 * 1000, 65536, 36 * 2048 * 65536),
        # SmolLM2 135M: 30 layers, 3 KV heads x 64 -> 768 B per layer per token (23,040 B per token).
        ("smollm2-135m", 1000, 30 * 768 * 1000, 8192, 30 * 768 * 8192),
    ],
)
def test_preset_cache_by_hand(name, short, short_bytes, long, long_bytes):
    assert run_json("cache", name, "--seq", short, "--kv-dtype", "bf16")["total_bytes"] == short_bytes
    assert run_json("cache", name, "--seq", long, "--kv-dtype", "bf16")["total_bytes"] == long_bytes
