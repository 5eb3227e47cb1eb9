"""MiniMax-01 (MiniMax-Text-01, MiniMax-M1): seven lightning (linear) attention layers to one softmax layer.

The shape is MiniMax-Text-01's as published (80 layers, hidden 6144, 64 heads of 128, 8 KV heads, 32 experts of
9,216, top 2, vocabulary 200,064; softmax attention on every 8th layer); figures by hand from vLLM 0.19's
minimax_text_01.py and MiniMaxText01LinearAttention (layers/mamba/linear_attn.py).
"""

from conftest import GiB, run

from kvcalc.cost.params import param_counts
from kvcalc.engines.vllm.figures import vllm_figures
from kvcalc.model.hf.reader import spec_from_config

RAW = {
    "architectures": ["MiniMaxText01ForCausalLM"], "model_type": "minimax_text_01", "hidden_size": 6144,
    "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
    "intermediate_size": 9216, "num_local_experts": 32, "num_experts_per_tok": 2, "vocab_size": 200064,
    "attn_type_list": [1 if (i + 1) % 8 == 0 else 0 for i in range(80)], "tie_word_embeddings": False,
    "rotary_dim": 64, "max_position_embeddings": 10240000, "shared_intermediate_size": 0, "torch_dtype": "bfloat16",
}  # fmt: skip


def _spec():
    return spec_from_config(RAW, "minimax-text-01", "MiniMax-Text-01/config.json")


def test_parameters_cache_and_state_by_hand():
    inner = 64 * 128
    lightning = 6144 * 3 * inner + 6144 * inner + inner + inner * 6144  # qkv, output gate, norm, out_proj
    softmax = 6144 * inner + 2 * 6144 * 8 * 128 + inner * 6144
    moe = 32 * 3 * 6144 * 9216 + 6144 * 32
    total = 70 * lightning + 10 * softmax + 80 * moe + 2 * 200064 * 6144 + (2 * 80 + 1) * 6144
    counts = param_counts(_spec())
    assert counts.total == total == 456_089_655_296  # "456B"
    # "45.9B activated": 2 of 32 experts, less the embedding and the LM head
    assert round((counts.active - 2 * 200064 * 6144) / 1e9, 1) == 45.9
    run_ = next(r for r, _ in _spec().layer_groups() if r.state_bytes)
    assert run_.state_bytes == 64 * 128 * 128 * 2  # one 128 x 128 matrix per head, bf16


def test_vllm_pages_hold_a_lightning_layers_state():
    # tp 8: 8 heads' state per rank (262,144 B) and one KV head (512 B a token): blocks of 16 x 32 = 512 tokens;
    # 10 softmax layers one group, 70 lightning layers seven more
    v = vllm_figures(_spec(), 80 * GiB, kv_dtype="bf16", tp=8, seq=32768)
    assert (v.block_size, v.page_bytes_per_layer, v.group_size, v.kv_cache_groups) == (512, 262_144, 10, 8)
    blocks = 80 * GiB // (262_144 * 10)
    assert v.num_blocks == blocks and v.blocks_per_request == 64 + 7


def test_sglang_serves_no_minimax_01(tmp_path):
    import json

    path = tmp_path / "MiniMax-Text-01" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(RAW))
    out = run("fit", path, "--gpu", "h200", "--tp", "8", "--seq", "32k", "--engine", "sglang")
    assert out.exit_code != 0 and out.stderr.count("\n") == 1
    assert "SGLang has no model class for MiniMaxText01ForCausalLM" in out.stderr
