"""Whether SGLang splits its pool between full and sliding-window layers, and how (pure).

Read from the released wheels, 0.4.9 to 0.5.23:
- before 0.4.10 there is no split (Llama-4's chunked layers only with --hybrid-kvcache-ratio, not a default):
  every layer holds max_total_num_tokens slots;
- 0.4.10 to 0.5.0 split every model whose class defines get_attention_sliding_window_size (gemma2.py,
  gemma3_causal.py / gemma3_mm.py, gemma3n_*.py; model_runner.py `is_hybrid`);
- 0.5.1 to 0.5.7 set disable_hybrid_swa_memory for every such class (Gemma 2 / 3 / 3n "not yet supported",
  gpt-oss, Olmo-2), so nothing is split;
- from 0.5.8 model_config.is_hybrid_swa_model's allow-list decides (HYBRID_SWA_FROM: each architecture from the
  release that lists it; Gemma 2 / 3 stay disabled to 0.5.23); gpt-oss on an SM100 card keeps no split in 0.5.8
  and 0.5.9, whose default trtllm_mha backend disables it.

The split (set_num_token_hybrid in 0.5.5; model_runner_kv_cache_mixin from 0.5.10, pool_configurator from
0.5.11): the uniform budget, tokens x (F + S) with F and S one token's K and V over the full and the sliding
layers, is re-divided so that the sliding layers hold swa_full_tokens_ratio (0.8) x the full layers' tokens:
full = tokens x (F + S) / (F + 0.8 x S). Before 0.5.10 the division is by layer counts, which is the same
when every layer has one shape and is refused where the shapes differ (kvcalc does not model that case).
"""

from __future__ import annotations

SWA_FULL_TOKENS_RATIO = 0.8  # server_args.py swa_full_tokens_ratio

# 0.4.10 - 0.5.0: the model classes with get_attention_sliding_window_size
SPLIT_CLASSES_0_4_10 = frozenset({
    "Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration", "Gemma3nForCausalLM",
    "Gemma3nForConditionalGeneration",
})  # fmt: skip

# is_hybrid_swa_model's allow-list (configs/model_config.py), each architecture from the first release listing it
HYBRID_SWA_FROM = {
    "Llama4ForConditionalGeneration": (0, 5, 8), "GptOssForCausalLM": (0, 5, 8), "MiMoV2FlashForCausalLM": (0, 5, 8),
    "Step3p5ForCausalLM": (0, 5, 9), "MiMoV2ForCausalLM": (0, 5, 11), "Gemma4ForCausalLM": (0, 5, 11),
    "Gemma4ForConditionalGeneration": (0, 5, 11), "DeepseekV4ForCausalLM": (0, 5, 12), "LagunaForCausalLM": (0, 5, 12),
    "Gemma4UnifiedForConditionalGeneration": (0, 5, 13), "Step3p7ForConditionalGeneration": (0, 5, 13),
    "UnlimitedOCRForCausalLM": (0, 5, 15), "MellumForCausalLM": (0, 5, 16),
    "InklingForConditionalGeneration": (0, 5, 16), "MuseGlimmerForCausalLM": (0, 5, 18),
    "MuseGlimmerForConditionalGeneration": (0, 5, 18), "GraniteSWAForCausalLM": (0, 5, 19),
    "GraniteMoeSWAForCausalLM": (0, 5, 19), "DiffusionGemmaForBlockDiffusion": (0, 5, 21),
    "EmbeddingGemma2Model": (0, 5, 22), "BeamForCausalLM": (0, 5, 23),
}  # fmt: skip
SPLIT_FROM = (0, 4, 10)
SPLIT_OFF = ((0, 5, 1), (0, 5, 8))  # every class with a window disabled
MEMORY_BASED_FROM = (0, 5, 10)  # the split divides bytes, so full and sliding layers may differ in shape
GPT_OSS_SM100_FROM = (0, 5, 10)  # before, SM100's default trtllm_mha backend disables gpt-oss's split


def splits(release: tuple[int, int, int], architecture: str | None, *, blackwell: bool) -> bool:
    """True where SGLang `release` gives `architecture`'s sliding-window layers a pool of their own (a model
    without the architecture in its config, a hand-written one, keeps the uniform pool)."""
    if architecture is None or release < SPLIT_FROM:
        return False
    if release < SPLIT_OFF[0]:
        return architecture in SPLIT_CLASSES_0_4_10
    if release < SPLIT_OFF[1]:
        return False
    since = HYBRID_SWA_FROM.get(architecture)
    if since is None or release < since:
        return False
    return not (architecture == "GptOssForCausalLM" and blackwell and release < GPT_OSS_SM100_FROM)


def full_tokens(tokens: int, full_cell: int, swa_cell: int, page: int) -> tuple[int, int]:
    """(full layers' tokens, sliding layers' tokens) from the uniform count `tokens` over both: the bytes
    tokens x (F + S) re-divided so the sliding layers hold SWA_FULL_TOKENS_RATIO x the full layers' tokens,
    each floored to whole pages."""
    denominator = full_cell + SWA_FULL_TOKENS_RATIO * swa_cell
    full = int(tokens * (full_cell + swa_cell) / denominator) // page * page
    return full, int(full * SWA_FULL_TOKENS_RATIO) // page * page
