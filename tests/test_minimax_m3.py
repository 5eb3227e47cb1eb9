"""MiniMax-M3 (MiniMaxM3ForCausalLM, model_type minimax_m3): GQA with block-sparse attention and an index cache.

The config is MiniMax-M3's as aiconfigurator-core 0.12.0 vendors it (the `minimax-m3` preset; PROVENANCE.yaml).
Figures by hand from SGLang 0.5.23's models/minimax_m3.py and its MiniMaxSparseKVPool: 60 layers of 64 query heads
over 4 KV heads of 128; layers 3-59 sparse, each caching one 128-wide bf16 index key a token and attending the top
16 blocks of 128 tokens that 4 index heads score; 3 dense MLPs of 12,288, then 128 experts (top 4) and a shared
expert of 3,072.
"""

import json

import pytest
from conftest import FIXTURES, run, run_json

from kvcalc.cost.flops import decode_attention_flops
from kvcalc.cost.kvcache import bytes_per_token
from kvcalc.cost.params import param_counts
from kvcalc.errors import SpecError
from kvcalc.model.hf.reader import spec_from_config
from kvcalc.model.presets import get_model

H = 6144
RAW = json.loads((FIXTURES / "real_configs" / "minimax-m3.json").read_text())


def test_parameters_by_hand():
    attention = H * (64 + 2 * 4) * 128 + 64 * 128 * H + 2 * 128  # qkv_proj, o_proj, q / k norms of head_dim
    indexer = H * (4 + 1) * 128 + 2 * 128  # index_qkv_proj: 4 index heads and one key; their norms
    expert = 3 * H * 3072
    moe = 128 * expert + expert + 128 * H + 128  # routed experts, the shared one, the router and its bias
    total = (
        3 * (attention + 3 * H * 12288 + 2 * H)  # the dense layers
        + 57 * (attention + indexer + moe + 2 * H)  # the sparse MoE layers
        + 2 * 200064 * H + H  # embedding and LM head (untied), the final norm
    )  # fmt: skip
    assert param_counts(get_model("minimax-m3")).total == total == 426_174_572_928


def test_cache_and_attention():
    spec = get_model("MiniMaxAI/MiniMax-M3")
    # K and V of 4 heads x 128 on all 60 layers, and a bf16 index key of 128 on the 57 sparse ones
    assert bytes_per_token(spec, "bf16") == 60 * 2 * 4 * 128 * 2 + 57 * 128 * 2 == 137_472
    # an fp8 cache halves K and V; the index keys stay in the model's 16 bits
    assert bytes_per_token(spec, "fp8") == 60 * 2 * 4 * 128 + 57 * 256
    # at tp 8 each rank holds one KV head (4 replicated over 8 ranks) and every index key
    assert run_json("cache", "minimax-m3", "--seq", "8192", "--tp", "8")["bytes_per_token"] == 60 * 512 + 57 * 256
    # one new token over 65,536 cached: the dense layers' 64 heads see every key, the sparse layers' the top 2,048,
    # and their indexers score all 65,536 with 4 heads of 128
    per_key = 2 * 64 * 256
    assert decode_attention_flops(spec, 65536) == (
        3 * per_key * 65536 + 57 * per_key * 2048 + 57 * 2 * 4 * 128 * 65536
    )  # fmt: skip
    assert "57 x full, sparse: each with an indexer choosing its top 2,048 tokens" in run("show", "minimax-m3").stdout


def test_no_engine_serves_the_published_config():
    for engine, words in (
        ("vllm", "['MiniMaxM3ForCausalLM'] are not supported"),
        ("sglang", "it registers this model as MiniMaxM3SparseForCausalLM"),
        ("trtllm", "Unknown architecture for AutoModelForCausalLM: MiniMaxM3ForCausalLM"),
    ):
        result = run("fit", "minimax-m3", "--gpu", "h200", "--tp", "8", "--engine", engine)
        assert result.exit_code != 0 and result.stderr.count("\n") == 1 and words in result.stderr, engine
    result = run("fit", "minimax-m3", "--gpu", "h200", "--gpus", "8", "--engine", "llamacpp")
    assert result.exit_code != 0 and "no architecture with sparse self-attention layers" in result.stderr


def _with(**sac):
    raw = json.loads(json.dumps(RAW))
    raw["sparse_attention_config"].update(sac)
    return spec_from_config(raw, "m3", "MiniMax-M3/config.json")


def test_what_is_not_read_is_refused():
    with pytest.raises(SpecError, match="sparse_disable_index_value 0"):
        _with(sparse_disable_index_value=[0] * 60)
    with pytest.raises(SpecError, match="sparse_attention_freq must give 0 or 1 for each of the 60 layers"):
        _with(sparse_attention_freq=[1] * 59)
    # without sparse attention every layer is plain GQA: no index keys
    assert bytes_per_token(_with(use_sparse_attention=False), "bf16") == 60 * 2 * 4 * 128 * 2


def test_nvidias_nvfp4_layout_and_its_vision_wrapper():
    # nvidia/MiniMax-M3-NVFP4 (aiconfigurator-core 0.12.0; its 3 MB config is not stored): minimax_m3_vl around a text
    # config that names no model_type, and ModelOpt MIXED_PRECISION with MXFP8 attention, dense MLPs and shared
    # experts, NVFP4 routed experts (these module names as its quantized_layers give them)
    from kvcalc.model.hf.quantization import read_quantization

    q = read_quantization(
        {
            "quant_method": "modelopt",
            "quant_algo": "MIXED_PRECISION",
            "quantized_layers": {
                "language_model.model.layers.3.self_attn.q_proj": {"quant_algo": "MXFP8"},
                "language_model.model.layers.3.self_attn.index_q_proj": {"quant_algo": "MXFP8"},
                "language_model.model.layers.0.mlp.gate_proj": {"quant_algo": "MXFP8"},
                "language_model.model.layers.3.block_sparse_moe.shared_experts.up_proj": {"quant_algo": "MXFP8"},
                "language_model.model.layers.3.block_sparse_moe.experts.0.w1": {
                    "quant_algo": "NVFP4",
                    "group_size": 16,
                },
            },
        }  # fmt: skip
    )
    assert (q.linear.name, q.linear.group_size, q.linear.scale_bytes, q.linear.compute) == ("fp8", 32, 1, "fp8")
    assert q.experts.name == "nvfp4" and q.attention is None and q.attention_quantized and not q.lm_head_quantized
    text = {k: v for k, v in RAW.items() if k not in ("model_type", "architectures")}
    wrapped = {"architectures": ["MiniMaxM3SparseForConditionalGeneration"], "model_type": "minimax_m3_vl"}
    spec = spec_from_config({**wrapped, "text_config": text}, "m3-vl", "MiniMax-M3-NVFP4/config.json")
    assert param_counts(spec).total == 426_174_572_928 and bytes_per_token(spec, "bf16") == 137_472
