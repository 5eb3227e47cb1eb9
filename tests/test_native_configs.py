"""Configs as transformers 5 saves them, where a family's hub config uses its remote code's names (model/hf/native.py),
and per-layer fields that shape nothing kvcalc counts: each reads as its hub form does, figures derived by hand."""

import json

import pytest
from conftest import FIXTURES

from kvcalc.cost.kvcache import cache_bytes, cache_report
from kvcalc.cost.params import param_counts
from kvcalc.errors import SpecError
from kvcalc.model.hf.reader import spec_from_config
from kvcalc.model.spec import LayerKind


def _hub(name: str) -> dict:
    return json.loads((FIXTURES / "real_configs" / f"{name}.json").read_text())


def test_mimo_v2_flash_as_transformers_saves_it_reads_as_its_hub_config():
    # MiMoV2FlashConfig: layer_types for hybrid_layer_pattern, sliding_window = sliding_window_size + 1, the sliding
    # layers' KV heads twice num_key_value_heads (MiMoV2FlashAttention) with a sink each, mlp_layer_types
    hub = _hub("mimo-v2-flash")
    pattern = hub["hybrid_layer_pattern"]
    native = {k: v for k, v in hub.items() if not k.startswith("swa_") and k not in ("hybrid_layer_pattern",)}
    for gone in (
        "sliding_window_size",
        "add_swa_attention_sink_bias",
        "add_full_attention_sink_bias",
        "moe_layer_freq",
    ):
        native.pop(gone, None)
    native["layer_types"] = ["sliding_attention" if p else "full_attention" for p in pattern]
    native["mlp_layer_types"] = ["dense" if f == 0 else "sparse" for f in hub["moe_layer_freq"]]
    native["sliding_window"] = hub["sliding_window_size"] + 1
    a, b = spec_from_config(hub, "mimo", "hub"), spec_from_config(native, "mimo", "native")
    assert [r.model_copy(update={"count": 1}) for r in a.expanded_layers()] == [
        r.model_copy(update={"count": 1}) for r in b.expanded_layers()
    ]
    assert cache_bytes(a, 1, 32_768, "bf16") == cache_bytes(b, 1, 32_768, "bf16")
    assert param_counts(a).total == param_counts(b).total
    # 9 full layers x 4 KV heads and 39 sliding x 8 over 128 tokens, K 192 and V 128 wide, bf16
    full = sum(1 for p in pattern if p == 0)
    assert cache_bytes(b, 1, 32_768, "bf16") == (full * 4 * 32_768 + (48 - full) * 8 * 128) * (192 + 128) * 2


def test_kimi_linear_as_transformers_saves_it():
    # KimiLinearConfig: layer_types and linear_num_heads / linear_head_dim / linear_conv_kernel_dim for the
    # checkpoint's linear_attn_config (1-based kda_layers and full_attn_layers)
    base = {
        "model_type": "kimi_linear", "architectures": ["KimiLinearForCausalLM"], "vocab_size": 163840,
        "hidden_size": 2304, "num_hidden_layers": 8, "num_attention_heads": 32, "num_key_value_heads": 32,
        "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "q_lora_rank": None,
        "intermediate_size": 9216, "moe_intermediate_size": 1024, "num_experts": 256, "num_experts_per_token": 8,
        "num_shared_experts": 1, "first_k_dense_replace": 1, "tie_word_embeddings": False,
    }  # fmt: skip
    kinds = ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"]
    native = {**base, "layer_types": kinds, "linear_num_heads": 32, "linear_head_dim": 128, "linear_conv_kernel_dim": 4}
    hub = {
        **base,
        "linear_attn_config": {
            "kda_layers": [1, 2, 3, 5, 6, 7], "full_attn_layers": [4, 8], "num_heads": 32, "head_dim": 128,
            "short_conv_kernel_size": 4,
        },
    }  # fmt: skip
    a, b = spec_from_config(hub, "kl", "hub"), spec_from_config(native, "kl", "native")
    assert a.expanded_layers() == b.expanded_layers()
    assert [r.kind for r in b.expanded_layers()].count(LayerKind.MLA) == 2
    # two MLA layers cache 512 + 64 elements a token
    assert cache_bytes(b, 1, 1_000, "bf16") == 2 * 576 * 1_000 * 2
    assert param_counts(a).total == param_counts(b).total


GPT_NEO_13B = {
    # EleutherAI/gpt-neo-1.3B's config.json (its shape fields)
    "architectures": ["GPTNeoForCausalLM"], "model_type": "gpt_neo", "hidden_size": 2048, "num_layers": 24,
    "num_heads": 16, "attention_types": [[["global", "local"], 12]], "window_size": 256, "intermediate_size": None,
    "max_position_embeddings": 2048, "vocab_size": 50257, "activation_function": "gelu_new",
}  # fmt: skip


def test_gpt_neo_local_layers_hold_their_window():
    spec = spec_from_config(GPT_NEO_13B, "gpt-neo-1.3b", "gpt-neo")
    kinds = [r.kind for r in spec.expanded_layers()]
    assert kinds[:2] == [LayerKind.FULL, LayerKind.SLIDING] and kinds.count(LayerKind.SLIDING) == 12
    # 16 heads x 128 = 2,048 K and V elements a token and layer, bf16: 8,192 B; 12 global layers hold 2,048 tokens,
    # 12 local ones 256
    assert cache_bytes(spec, 1, 2048, "bf16") == (12 * 2048 + 12 * 256) * 8192 == 226_492_416
    assert cache_report(spec, 1, 2048, "bf16").bytes_per_token_past_windows == 12 * 8192
    listed = {**GPT_NEO_13B, "attention_layers": ["global", "local"] * 12}
    assert spec_from_config(listed, "gpt-neo", "x").expanded_layers() == spec.expanded_layers()
    assert param_counts(spec).total == 1_315_575_808  # transformers' count of the checkpoint


def test_per_layer_fields_that_shape_nothing_do_not_block_the_count():
    # transformers' Mistral Large 4 writes kv_source_layers as the identity (each layer its own K and V); Granite SWA a
    # rope theta a layer: neither changes the cache or the parameters
    hub = _hub("mimo-v2-flash")
    layers = hub["num_hidden_layers"]
    with_lists = {**hub, "kv_source_layers": list(range(layers)), "layer_rope_theta": [10_000.0] * layers}
    spec = spec_from_config(with_lists, "x", "x")
    assert spec.params_unknown is None
    assert param_counts(spec).total == param_counts(spec_from_config(hub, "x", "x")).total
    shared = {**hub, "kv_source_layers": [0] + list(range(layers - 1))}
    with pytest.raises(SpecError, match=r"kv_source_layers \(one value per layer\) is not read"):
        spec_from_config(shared, "x", "x.json")


def test_families_not_read_say_what_stops_them():
    # transformers 5 names Zamba's Mamba layers linear_attention: refused as Zamba, not as a gated DeltaNet missing
    # its linear_num_key_heads; an indexer beside non-MLA attention is not DeepSeek Sparse Attention
    zamba = {
        "model_type": "zamba2", "architectures": ["Zamba2ForCausalLM"], "hidden_size": 2560, "num_hidden_layers": 4,
        "num_attention_heads": 32, "vocab_size": 32000,
        "layer_types": ["linear_attention", "hybrid", "linear_attention", "linear_attention"],
    }  # fmt: skip
    with pytest.raises(SpecError, match="Mamba layers beside a shared attention block"):
        spec_from_config(zamba, "z", "z.json")
    indexed = {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 4,
        "num_attention_heads": 16, "vocab_size": 32000, "intermediate_size": 8192, "index_topk": 2048,
    }  # fmt: skip
    with pytest.raises(SpecError, match="index_topk without MLA's kv_lora_rank"):
        spec_from_config(indexed, "i", "i.json")


def test_minimax_m3_shared_expert_without_n_shared_experts():
    # transformers' MiniMaxM3VLSparseMoeBlock builds shared_experts of shared_intermediate_size whatever the config
    # says of n_shared_experts, which its own config class does not define: 57 MoE layers (the first 3 are dense)
    # x 3 x 6,144 x 3,072
    hub = _hub("minimax-m3")
    native = {k: v for k, v in hub.items() if k != "n_shared_experts"}
    a, b = spec_from_config(hub, "m3", "hub"), spec_from_config(native, "m3", "native")
    assert b.shared_expert_intermediate_size == a.shared_expert_intermediate_size == 3072
    assert param_counts(b).shared_experts == 57 * 3 * 6144 * 3072
