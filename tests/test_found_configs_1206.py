"""The presets added on 2026-12-06 (tests/fixtures/real_configs, PROVENANCE.yaml): each one's parameters derived by
hand from the published architecture (for two, against the weight memory vLLM 0.19 logged loading them in
llm-d-planner's sweep) or read against its model card, its KV bytes per token, and the 2507 Qwen3 releases read
with their own 262,144-token context."""

import pytest

from kvcalc.cost.kvcache import bytes_per_token
from kvcalc.cost.params import param_counts
from kvcalc.model.presets import get_model

GIB = 2**30


def vllm_weights(model: str) -> int:
    """kvcalc's bytes for vLLM 0.19's "Model loading took X GiB" on one H100 (bf16, --max-model-len 8192)."""
    import kvcalc

    return kvcalc.fit(model, "h100", seq=8192, engine="vllm", gpu_util=0.95).vllm.weights_bytes


def test_qwen15_moe_parameters_by_hand():
    # Qwen/Qwen1.5-MoE-A2.7B: 24 layers of hidden 2,048 (16 heads of 128, biased q/k/v), 60 routed experts of
    # 1,408 (gated MLPs) with a router, a shared expert of 5,632 behind a one-output sigmoid gate, two RMSNorms a
    # layer, an untied LM head, vocab 151,936
    h, vocab, layers, experts, expert, shared = 2048, 151936, 24, 60, 1408, 5632
    attention = 3 * (h * h + h) + h * h
    moe = experts * 3 * h * expert + h * experts + 3 * h * shared + h
    total = 2 * vocab * h + layers * (attention + moe + 2 * h) + h
    assert total == 14_315_784_192  # the model card's "14.3B in total"
    counts = param_counts(get_model("Qwen/Qwen1.5-MoE-A2.7B"))
    assert counts.total == total
    # vLLM 0.19 on one H100, bf16: "Model loading took 26.67 GiB memory" (llm-d-planner @ d3121e0,
    # accuracy/results/v0.19.0/logs/, benchmarks/vllm_logs/points.csv)
    assert round(vllm_weights("Qwen/Qwen1.5-MoE-A2.7B") / GIB, 2) == 26.67
    # 4 of 60 routed experts and the shared one a token: the card's "2.7B activated"
    assert round(counts.active / 1e9, 1) == 2.7


def test_gemma_7b_parameters_by_hand():
    # google/gemma-7b: 28 layers of hidden 3,072, 16 heads of 256 (MHA: q/k/v/o 4,096 wide), a GeGLU MLP of 24,576,
    # two RMSNorms a layer and a final one, the LM head tied to the 256,000-token embedding
    h, width, ff, vocab, layers = 3072, 16 * 256, 24576, 256000, 28
    block = 4 * h * width + 3 * h * ff + 2 * h
    total = vocab * h + layers * block + h
    assert total == 8_537_680_896  # the "7B" counts no embedding: 7.75B of layers
    assert param_counts(get_model("google/gemma-7b")).total == total
    # vLLM 0.19 on one H100, bf16: "Model loading took 15.91 GiB memory": the bf16 weights (15.90 GiB) and the
    # rotary cos/sin cache, 8,192 positions x 256 dims in bf16
    assert vllm_weights("google/gemma-7b") == 2 * total + 8192 * 256 * 2
    assert round(vllm_weights("google/gemma-7b") / GIB, 2) == 15.91


def test_mistral_small_31_text_model_is_mistral_small_3s():
    # Mistral-Small-3.1-24B-Instruct-2503's text_config is Mistral Small 3's decoder (40 layers, 32 heads over 8 KV
    # heads of 128, MLP 32,768, vocab 131,072) with a 128k context; the Pixtral tower beside it adds no KV
    s31, s3 = get_model("mistralai/Mistral-Small-3.1-24B-Instruct-2503"), get_model("mistral-small-24b")
    for field in (
        "num_layers",
        "hidden_size",
        "num_heads",
        "num_kv_heads",
        "head_dim",
        "intermediate_size",
        "vocab_size",
    ):
        assert getattr(s31, field) == getattr(s3, field), field
    assert s31.max_position_embeddings == 131072 and s3.max_position_embeddings == 32768
    assert bytes_per_token(s31, "bf16") == 2 * 40 * 8 * 128 * 2 == 163_840


@pytest.mark.parametrize(
    "preset, layers, kv_heads, head_dim",
    [("qwen1.5-moe-a2.7b", 24, 16, 128), ("gemma-7b", 28, 16, 256)],
)
def test_kv_bytes_per_token(preset, layers, kv_heads, head_dim):
    assert bytes_per_token(get_model(preset), "bf16") == 2 * layers * kv_heads * head_dim * 2


def test_falcon_7b_parameters_by_hand():
    # tiiuae/falcon-7b: 32 parallel blocks of hidden 4,544, 71 query heads of 64 over ONE key/value head (a fused
    # QKV of 4,544 + 2 x 64 rows, no biases), dense 4,544, MLP 4 x 4,544, one LayerNorm (weight and bias) a block,
    # a final one, the LM head tied to the 65,024-token embedding
    h, ff, vocab, layers = 4544, 4 * 4544, 65024, 32
    block = h * (h + 2 * 64) + h * h + 2 * h * ff + 2 * h
    total = vocab * h + layers * block + 2 * h
    assert total == 6_921_720_704
    spec = get_model("tiiuae/falcon-7b")
    assert param_counts(spec).total == total
    assert bytes_per_token(spec, "bf16") == 2 * 32 * 1 * 64 * 2 == 8_192  # multi-query: one KV head


def test_phi35_moe_matches_its_card():
    # microsoft/Phi-3.5-MoE-instruct's card: "42B total parameters", "6.6B active parameters" (16 experts, top 2)
    counts = param_counts(get_model("microsoft/Phi-3.5-MoE-instruct"))
    assert round(counts.total / 1e9) == 42 and round(counts.active / 1e9, 1) == 6.6


def test_nemotron_h_8b_caches_only_its_four_attention_layers():
    # nvidia/Nemotron-H-8B-Base-8K: hybrid_override_pattern has 24 Mamba-2 (M), 24 MLP (-) and 4 attention (*) layers;
    # only the attention layers hold KV: 4 x 8 KV heads x 128 x (K and V) x 2 B a token
    spec = get_model("nvidia/Nemotron-H-8B-Base-8K")
    assert bytes_per_token(spec, "bf16") == 4 * 8 * 128 * 2 * 2 == 16_384


@pytest.mark.parametrize(
    "release, base",
    [
        ("Qwen/Qwen3-30B-A3B-Instruct-2507", "Qwen/Qwen3-30B-A3B"),
        ("Qwen/Qwen3-30B-A3B-Thinking-2507", "Qwen/Qwen3-30B-A3B"),
        ("Qwen/Qwen3-235B-A22B-Instruct-2507", "Qwen/Qwen3-235B-A22B"),
    ],
)
def test_qwen3_2507_releases_have_their_own_context(release, base):
    # The 2507 releases keep their base model's shape but say max_position_embeddings 262,144 (the base: 40,960);
    # they had read as the base preset, so a request past 40,960 tokens was warned of as past the model's context
    new, old = get_model(release), get_model(base)
    for field in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "experts", "experts_per_token"):
        assert getattr(new, field) == getattr(old, field), field
    assert (new.max_position_embeddings, old.max_position_embeddings) == (262144, 40960)
    assert bytes_per_token(new, "bf16") == bytes_per_token(old, "bf16")


def test_olmoe_parameters_by_hand():
    # allenai/OLMoE-1B-7B-0924: 16 layers of hidden 2,048 (16 heads of 128, MHA), QK norms over the whole q and k
    # (2 x 2,048), 64 experts of 1,024 (top 8) behind a 64-way router, two RMSNorms a layer and a final one, an
    # untied LM head, vocab 50,304: the paper's "6.9B total, 1.3B active"
    h, vocab, layers, experts, expert = 2048, 50304, 16, 64, 1024
    block = 4 * h * h + 2 * h + experts * 3 * h * expert + h * experts + 2 * h
    total = 2 * vocab * h + layers * block + h
    assert total == 6_919_161_856
    counts = param_counts(get_model("allenai/OLMoE-1B-7B-0924"))
    assert counts.total == total and round(counts.active / 1e9, 1) == 1.3


def test_minimax_m2_reads_as_m25():
    # MiniMax-M2's hub config (rebuilt, sha256-matched to its pin) reads to M2.5's spec field for field: one preset
    assert get_model("MiniMaxAI/MiniMax-M2").name == get_model("MiniMaxAI/MiniMax-M2.1").name == "minimax-m2.5"
