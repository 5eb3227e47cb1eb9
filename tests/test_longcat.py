"""LongCat-Flash: each decoder layer holds two MLA attention blocks, each with a latent cache of its own.

vLLM 0.19's longcat_flash.py builds every one of FlashConfig's num_layers layers with self_attn a ModuleList of
two DeepseekV2MLAAttention blocks (and two MLPs beside a shortcut MoE with zero-computation experts), so the
cache holds 2 x num_layers latents. LongCat-Flash-Chat's published shape (meituan-longcat/LongCat-Flash-Chat):
28 layers, kv_lora_rank 512, qk_rope_head_dim 64; its parameters are reported unknown (the pairs are not counted).
"""

import json

from conftest import run_json

from kvcalc.cost.kvcache import bytes_per_token
from kvcalc.model.hf.reader import spec_from_config

RAW = {
    "architectures": ["LongcatFlashForCausalLM"], "model_type": "longcat_flash", "hidden_size": 6144,
    "num_layers": 28, "num_attention_heads": 64, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128, "v_head_dim": 128, "n_routed_experts": 512, "zero_expert_num": 256, "moe_topk": 12,
    "ffn_hidden_size": 12288, "expert_ffn_hidden_size": 2048, "vocab_size": 131072, "max_position_embeddings": 131072,
}  # fmt: skip


def test_two_latents_a_layer():
    spec = spec_from_config(RAW, "longcat-flash", "LongCat-Flash-Chat/config.json")
    assert spec.num_layers == 56 and spec.is_mla
    assert bytes_per_token(spec, "bf16") == 2 * 28 * (512 + 64) * 2 == 64_512
    assert spec.params_unknown and "layer pairs" in spec.params_unknown


def test_cache_with_tensor_parallelism_keeps_the_whole_latent(tmp_path):
    # one latent "head": every rank holds all of it (MLA is replicated, not split, over tp)
    (tmp_path / "config.json").write_text(json.dumps(RAW))
    out = run_json("cache", str(tmp_path), "--seq", "8192", "--tp", "8")
    assert out["bytes_per_token"] == 64_512
