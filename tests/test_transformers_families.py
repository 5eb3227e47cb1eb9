"""Families whose transformers modeling code says more than their config fields: read as the code builds them.

Found by a sweep of transformers 5.25's causal-LM classes (each default config instantiated on the meta device, its
parameters counted, against kvcalc's count of the same config): Qwen3.5's and MiniCPM5-MoE's attention always
gates its output (q_proj twice as wide) whatever the config says, Jais2's, NanoChat's and Apertus 1.5's MLPs are
ungated, Gemma 4 Unified's text layers are Gemma 4's, and Doge's num_experts counts only under is_moe. The small
configs below are written by hand; each count is derived from the modeling code's modules.
"""

import pytest

from kvcalc.cost.kvcache import cache_elements
from kvcalc.cost.params import attention_params, param_counts
from kvcalc.errors import SpecError
from kvcalc.model.hf.reader import spec_from_config

SMALL = dict(vocab_size=1000, hidden_size=256, intermediate_size=1024, num_hidden_layers=3, num_attention_heads=8,
             num_key_value_heads=2, head_dim=32, tie_word_embeddings=False, max_position_embeddings=4096)  # fmt: skip

# DeepSeek-V3.2's kind of MLA with an indexer, small
MLA = dict(
    vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8,
    num_key_value_heads=8, q_lora_rank=64, kv_lora_rank=32, qk_nope_head_dim=48, qk_rope_head_dim=16,
    v_head_dim=40, index_topk=64, index_head_dim=32, index_n_heads=4, max_position_embeddings=4096,
)  # fmt: skip


def read(model_type: str, **fields):  # noqa: ANN003, ANN201
    return spec_from_config({"model_type": model_type, **SMALL, **fields}, model_type, f"{model_type}/config.json")


def test_jais2_is_counted_as_its_modules_build_it():
    # Jais2Attention: q, k, v and o_proj with biases (attention_bias, default True); Jais2MLP: up_proj, relu^2,
    # down_proj with biases (mlp_bias); two nn.LayerNorms (weight and bias) a layer and a final one
    spec = read("jais2", attention_bias=True, mlp_bias=True, hidden_act="relu2", layer_norm_eps=1e-5)
    v, h, i, layers, heads, kv, d = 1000, 256, 1024, 3, 8, 2, 32
    attn = (h * heads * d + heads * d) + 2 * (h * kv * d + kv * d) + (heads * d * h + h)
    mlp = h * i + i + i * h + h
    per_layer = attn + mlp + 2 * 2 * h
    assert not spec.mlp_gated
    assert param_counts(spec).total == v * h + layers * per_layer + 2 * h + h * v  # 2,585,728, as torch counts it


@pytest.mark.parametrize("model_type", ["nanochat", "apertus1p5", "apertus1p5_text"])
def test_ungated_mlps(model_type):
    # NanoChatMLP: fc1, relu^2, fc2; Apertus1p5TextMLP: up_proj, xIELU, down_proj
    assert not read(model_type).mlp_gated and read("llama").mlp_gated


@pytest.mark.parametrize("model_type", ["qwen3_5_text", "qwen3_5_moe_text", "minicpm5_moe"])
def test_output_gates_the_code_always_builds(model_type):
    # Qwen3_5Attention's q_proj is heads x head_dim x 2 wide, MiniCPM5MoeAttention's q_gate_proj the same, with or
    # without attn_output_gate in the config: the gate is counted either way
    fields = {"layer_types": ["full_attention"] * 3} if model_type.startswith("qwen3_5") else {}
    if model_type != "qwen3_5_text":
        fields.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128, n_routed_experts=4)
    implied = read(model_type, **fields)
    stated = read(model_type, attn_output_gate=True, **fields)
    assert implied.attn_output_gate is True
    assert param_counts(implied).total == param_counts(stated).total


def test_gemma4_unified_is_read_as_gemma4():
    # Gemma4UnifiedTextConfig: Gemma 4's attention and MLP without per-layer input embeddings; its full-attention
    # layers take global_head_dim (512) beside 256 on the sliding ones, 5 sliding then 1 full by default
    fields = dict(
        vocab_size=1000, hidden_size=256, intermediate_size=1024, num_hidden_layers=12, num_attention_heads=8,
        num_key_value_heads=2, head_dim=256, global_head_dim=512, sliding_window=1024,
    )  # fmt: skip
    unified = spec_from_config({"model_type": "gemma4_unified_text", **fields}, "u", "u/config.json")
    gemma4 = spec_from_config(
        {"model_type": "gemma4_text", "hidden_size_per_layer_input": 0, **fields}, "g", "g/config.json"
    )
    # 10 sliding layers of 2 x 2 x 256 and 2 full ones of 2 x 2 x 512 elements a token, below the window
    assert cache_elements(unified, 1, 512) == 512 * (10 * 2 * 2 * 256 + 2 * 2 * 2 * 512)
    assert param_counts(unified).total == param_counts(gemma4).total and unified.per_layer_input in (None, 0)


def test_doge_counts_experts_only_under_is_moe():
    # DogeConfig: num_experts 16,384 by default, used by DogeCDMoE only when is_moe is set
    dense = read("doge", num_experts=16384, num_experts_per_tok=64, is_moe=False)
    assert dense.experts == 0
    with pytest.raises(SpecError, match="is_moe"):
        read("doge", num_experts=16384, num_experts_per_tok=64, is_moe=True)


def test_hy4_attention_gates_its_output_and_keeps_sinks():
    # HYV4Attention (tencent/Hy4-preview): DeepSeek-V3.2's MLA and indexer, plus gate_proj (hidden -> heads x
    # v_head_dim) and one sink a head in every layer; the first layer's indexer is its own ("full")
    mla = {**MLA, "num_hidden_layers": 2}
    hy4 = spec_from_config({"model_type": "hy_v4", "indexer_types": ["full", "shared"], **mla}, "h", "h/config.json")
    v32 = spec_from_config({"model_type": "deepseek_v32", **mla}, "d", "d/config.json")
    assert hy4.attn_output_gate is True and hy4.attention_sinks == "all"
    first = hy4.expanded_layers()[0]
    assert attention_params(hy4, first) - attention_params(v32, v32.expanded_layers()[0]) == 256 * 8 * 40 + 8


def test_mla_models_mixing_layer_kinds_are_refused_not_misread():
    # transformers writes DeepSeek-V3.2's layers as indexed_attention: one kind, read as before; an MLA model's
    # linear-attention layers and dots3's sliding MLA layers with their own heads and rank (per_layer_config) had
    # been read as uniform MLA: 6 x and 0.6 x their cache
    mla = MLA
    plain = spec_from_config({"model_type": "deepseek_v32", **mla}, "d", "d/config.json")
    resaved = spec_from_config(
        {"model_type": "deepseek_v32", "layer_types": ["indexed_attention"] * 4, **mla}, "d", "d/config.json"
    )
    assert cache_elements(resaved, 1, 100) == cache_elements(plain, 1, 100) == 100 * 4 * (32 + 16)
    hybrid = ["full_attention", "linear_attention", "linear_attention", "full_attention"]
    with pytest.raises(SpecError, match="layer_types mixing full_attention, linear_attention"):
        spec_from_config({"model_type": "deepseek_v3", "layer_types": hybrid, **mla}, "b", "b/config.json")
    # transformers' bailing_hybrid (Ling 3) is read with its KDA fields (tests/test_bailing_hybrid.py), not without
    with pytest.raises(SpecError, match=r"layer_types in a Ling 2.5 config \(no KDA fields"):
        spec_from_config({"model_type": "bailing_hybrid", "layer_types": hybrid, **mla}, "b", "b/config.json")
    # Ring-linear 2.0's configs (bailing_moe_linear, BailingMoeLinearV2ForCausalLM: GQA and lightning layers, in neither
    # engine's registry) say it with layer_group_size alone; Ling 2.5's are read (tests/test_bailing_hybrid.py)
    with pytest.raises(SpecError, match="layer_group_size 4"):
        spec_from_config({"model_type": "bailing_moe_linear", "layer_group_size": 4, **mla}, "r", "r/config.json")
    with pytest.raises(SpecError, match="per_layer_config"):
        spec_from_config(
            {"model_type": "dots3_note_text", "per_layer_config": {"01": {"kv_lora_rank": 64}}, **mla}, "n", "n/c.json"
        )
    with pytest.raises(SpecError, match="xLSTM"):
        spec_from_config({"model_type": "xlstm", **SMALL}, "x", "x/config.json")
