"""FLOPs as engines run them, against hand sums: absorbed MLA decode, chunked attention, one-logit prefill."""

from conftest import FIXTURES, run, run_json
from hypothesis import given
from hypothesis import strategies as st

from kvcalc.cost.flops import (
    chunked_pairs,
    decode_attention_flops,
    prefill_attention_flops,
    prefill_flops,
)
from kvcalc.cost.params import compute_params
from kvcalc.model.resolve import resolve_model
from kvcalc.model.spec import LayerKind, LayerRun, ModelSpec


def spec(name: str) -> ModelSpec:
    return resolve_model(name).spec


def test_mla_decode_is_absorbed():
    # DeepSeek-V3: 61 MLA layers, 128 heads; absorbed decode attends over the 512 + 64 latent for QK and the
    # 512 latent for V: 2 x 128 x (576 + 512) FLOPs per cached token per layer.
    v3 = spec("deepseek-v3")
    assert decode_attention_flops(v3, 1000) == 2 * 128 * (576 + 512) * 61 * 1000
    # 3.4x the non-absorbed (128 + 64, 128) widths: 1,088 / 320
    assert 2 * 128 * (576 + 512) == 3.4 * 2 * 128 * (192 + 128)


def test_mla_prefill_is_not_absorbed():
    # Prefill keeps the decompressed widths, 192 for QK and 128 for V, over the causal triangle.
    v3 = spec("deepseek-v3")
    assert prefill_attention_flops(v3, 100) == 61 * 2 * 128 * (192 + 128) * (100 * 101 // 2)


def test_explain_names_the_mla_form():
    out = run("roofline", "deepseek-v3", "--gpu", "h100", "--batch", "1", "--seq", "1000", "--explain")
    assert out.exit_code == 0, out.stderr
    assert "MLA decode with weight absorption" in out.stdout and "(576 latent + rope + 512 latent)" in out.stdout


def test_chunked_pairs_by_hand():
    # C = 4, P = 10: queries see 1, 2, 3, 4, 1, 2, 3, 4, 1, 2 keys = 23
    assert chunked_pairs(10, 4) == 23
    # Llama 4 Scout at 128k: 16 whole chunks of 8,192 -> 16 x 8,192 x 8,193 / 2 pairs per chunked layer
    assert chunked_pairs(131072, 8192) == 16 * 8192 * 8193 // 2 == 536_936_448


@given(st.integers(1, 3000), st.integers(1, 600))
def test_chunked_pairs_sum_each_query(prompt, chunk):
    assert chunked_pairs(prompt, chunk) == sum((i - 1) % chunk + 1 for i in range(1, prompt + 1))


def test_scout_chunked_prefill_and_decode():
    scout = spec("llama-4-scout")
    h, d = scout.num_heads, scout.head_dim_effective
    assert (h, d) == (40, 128)
    groups = {run.kind: n for run, n in scout.layer_groups()}
    assert groups == {LayerKind.CHUNKED: 36, LayerKind.FULL: 12}
    per_pair = 2 * h * (d + d)
    p = 131072
    chunked = 36 * per_pair * 536_936_448  # ~396 TFLOP, not the 767 a sliding window of 8,192 would give
    assert round(chunked / 1e12) == 396
    assert prefill_attention_flops(scout, p) == chunked + 12 * per_pair * (p * (p + 1) // 2)
    # decode inside the first chunk: every token so far; past it, (C + 1) / 2 keys on average
    assert decode_attention_flops(scout, 100) == per_pair * 48 * 100
    assert decode_attention_flops(scout, 20000) == per_pair * 12 * 20000 + 36 * h * (d + d) * 8193


def test_prefill_charges_the_lm_head_once():
    # Llama-3.1-8B: the LM head (128,256 x 4,096) runs for the last position only; the rest for all P.
    m = spec("llama-3.1-8b")
    head = 128256 * 4096
    p = 8192
    expected = 2 * (compute_params(m) - head) * p + 2 * head + prefill_attention_flops(m, p)
    assert prefill_flops(m, p) == expected
    # Gemma-2-2B: charging its 256,000 x 2,304 tied head for every prompt token counted 25% too much at 8k
    g = spec("gemma-2-2b")
    all_logits = 2 * compute_params(g) * p + prefill_attention_flops(g, p)
    assert round(all_logits / prefill_flops(g, p), 2) == 1.25


def test_textbook_params_stay_two_n_per_token():
    # An explicit N (THEORY.md's 7b) is taken whole: 2N per prompt token.
    m = spec("7b")
    assert prefill_flops(m, 1024) == 2 * 7 * 10**9 * 1024 + prefill_attention_flops(m, 1024)


def test_cross_attention_flops_count_the_image_tokens():
    # mllama fixture: 3 self-attention layers and 2 cross layers holding one 6,404-token image; 8 heads x 32
    m = resolve_model(str(FIXTURES / "configs" / "mllama-cross.json")).spec
    per_key = 2 * 8 * (32 + 32)
    assert decode_attention_flops(m, 100) == per_key * (3 * 100 + 2 * 6404)
    assert prefill_attention_flops(m, 100) == per_key * (3 * 100 * 101 // 2 + 2 * 100 * 6404)


def test_cross_run_pairs_for_encoder_decoder():
    # an encoder-decoder cross layer as long as the prompt: P x P pairs (no causal mask over the encoder)
    m = ModelSpec(
        name="x",
        num_layers=2,
        hidden_size=64,
        num_heads=4,
        vocab_size=10,
        layer_pattern=[LayerRun(kind=LayerKind.FULL), LayerRun(kind=LayerKind.CROSS, cross_tokens=None)],
    )
    assert prefill_attention_flops(m, 10) == 2 * 4 * 32 * (10 * 11 // 2 + 10 * 10)


def test_generate_counts_one_logit_per_prefill():
    # --new 1: the cached run is the prompt pass alone, the LM head for its last position only
    out = run_json("generate", "llama-3.1-8b", "--gpu", "h100", "--prompt", "1000", "--new", "1")
    assert out["flops_cached"] == prefill_flops(spec("llama-3.1-8b"), 1000)
