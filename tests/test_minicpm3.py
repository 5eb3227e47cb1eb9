"""MiniCPM3: MLA's low-rank K/V projections, but not every engine caches the latent.

SGLang runs it as MLA (models/minicpm3.py MiniCPM3AttentionMLA: one latent head of kv_lora_rank + qk_rope_head_dim),
which is what kvcalc's own cache counts. vLLM 0.19 (minicpm3.py) builds a plain Attention over every head with
head_size qk_nope + qk_rope and pads V to it; llama.cpp (models/minicpm3.cpp) decompresses each head's K (nope +
rope) and V and caches both, whatever its build. MiniCPM3-4B's published shape (openbmb/MiniCPM3-4B): 62 layers,
40 heads, kv_lora_rank 256, qk_nope_head_dim 64, qk_rope_head_dim 32, v_head_dim 64.
"""

import json

from conftest import GiB, run_json

from kvcalc.cost.kvcache import bytes_per_token
from kvcalc.engines.vllm.figures import vllm_figures
from kvcalc.model.hf.reader import spec_from_config

RAW = {
    "architectures": ["MiniCPM3ForCausalLM"], "model_type": "minicpm3", "hidden_size": 2560,
    "intermediate_size": 6400, "num_hidden_layers": 62, "num_attention_heads": 40, "num_key_value_heads": 40,
    "q_lora_rank": 768, "kv_lora_rank": 256, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64,
    "head_dim": 96, "vocab_size": 73448, "max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "scale_emb": 12,
    "dim_model_base": 256, "scale_depth": 1.4, "torch_dtype": "bfloat16", "hidden_act": "silu",
}  # fmt: skip


def _spec():
    return spec_from_config(RAW, "minicpm3-4b", "MiniCPM3-4B/config.json")


def test_the_latent_is_the_models_own_cache():
    assert bytes_per_token(_spec(), "bf16") == 62 * (256 + 32) * 2 == 35_712


def test_vllm_pages_every_heads_k_and_padded_v():
    # tp 2: 20 heads a rank, K 96 wide and V padded to 96: 2 x 20 x 96 x 2 B a token per layer, blocks of 16
    v = vllm_figures(_spec(), 40 * GiB, kv_dtype="bf16", tp=2, seq=8192)
    assert v.page_bytes_per_layer == 16 * 2 * 20 * 96 * 2
    assert v.num_blocks == 40 * GiB // (16 * 2 * 20 * 96 * 2 * 62)


def test_sglang_keeps_the_latent_and_llamacpp_every_head(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(RAW))
    out = run_json("fit", str(tmp_path), "--gpu", "h100", "--seq", "8k", "--engine", "sglang")
    pool = out["sglang"]
    assert pool["mla"] and pool["cell_bytes"] == 62 * (256 + 32) * 2
    out = run_json("cache", str(tmp_path), "--seq", "8192", "--gpu", "h100", "--engine", "llamacpp")
    (part,) = out["llamacpp"]["kv_parts"]
    assert (part["k_bytes"], part["v_bytes"]) == (62 * 8192 * 40 * 96 * 2, 62 * 8192 * 40 * 64 * 2)


def test_vllm_keeps_no_absorbed_copy_of_its_projections():
    # vLLM's MLA layer dequantizes a quantized kv_b_proj into 16-bit W_UK / W_UV and keeps both; MiniCPM3 runs plain
    # attention there, so an fp8 MiniCPM3 holds no such copy, where a DeepSeek-shaped MLA model of its size would.
    from kvcalc.engines.vllm.memory import Settings, predict
    from kvcalc.engines.weights import weight_bytes
    from kvcalc.model.formats import quantization_of
    from kvcalc.model.presets import get_gpu

    spec, gpu = _spec(), get_gpu("h100")
    assert predict(spec, gpu, Settings(), dtype="fp8").weights.mla_absorbed == 0
    copies = weight_bytes(spec, "bf16", quantization_of(spec, "fp8")).mla_absorbed
    assert copies == 62 * 40 * (64 + 64) * 256 * 2  # what the absorbed layout would add: 62 layers of W_UK and W_UV
