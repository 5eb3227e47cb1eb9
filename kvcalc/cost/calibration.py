"""The estimate's constants before any fit (the starting point of scripts/calibrate.py), and the shape in which
the cost layer takes a fit: (constants, basis). The shipped fit is the data file calibration.json beside this
module, and the same numbers as the module calibration_data.py (scripts/calibration_module.py writes it from
the json); plan/calibration.py loads that and reads a user's own, so nothing here reads a file."""

from __future__ import annotations

# NOTE: the starting point of a fit and the fallback if the shipped file is missing; values from
# speed_facts.md (AIC kernel tables, BLIS's vLLM overheads, nccl-tests), not a fit.
STARTING: dict[str, float] = {
    "bw_eff": 0.8,
    "kv_eff": 0.7,
    # Weight-only quantized weights (cost/step.dequant_share) stream at this fraction of what 16-bit ones do:
    # llama.cpp's Q4_K_M GEMVs reach 64% of a 4090's bandwidth, F16 87% (speed_facts 2.8). llama.cpp keeps
    # 1: its quantized kernels are its own efficiency (bw_eff.<family>.llamacpp); fitted apart (0.81) it put
    # F16 at bw_eff's cap and the per-token cost at nothing (docs/speed.md, "Weight-only quantized weights").
    "dequant_eff": 0.74,
    "dequant_eff.llamacpp": 1.0,
    "mfu": 0.6,
    "gemv_layer_bytes": 4e6,
    "mfu_tokens": 64.0,
    "decode_layer_s": 15e-6,
    "prefill_layer_s": 60e-6,
    "attn_layer_s": 8e-6,
    "moe_layer_s": 40e-6,
    "moe_prefill_expert_s": 2e-6,  # a prompt step's MoE layer, per expert one GPU runs (eager, one GEMM problem each)
    # A DeepSeek Sparse Attention layer's lightning indexer, per step: a dozen small kernels beside the layer's
    # own (SGLang's Indexer.forward_cuda: weights_proj, wq_b and wk GEMMs, LayerNorm, RoPE, two Hadamard
    # transforms, two fp8 quantizations, the key store, paged MQA logits, top-k), run for every token
    # even where top-k keeps them all. About 3 us each, launch-bound, and 11 us for logits + top-k at
    # batch 1 over 1k tokens (flashinfer-ai/flashinfer#2814's DeepGEMM baseline): 12 x 3 + 11 ~ 50 us a layer.
    # The start; fitted on GLM-5's SGLang runs (aiconfigurator), the calibration's DSA points.
    "index_layer_s": 50e-6,
    "ar_alpha_s": 6e-6,
    "ar_alpha_s.pcie": 7.5e-6,  # NCCL, 16 KB, 2 x L40S; x (1 + 0.8 (tp - 2)): 42 us at 8 (AIC nccl_perf)
    "ar_alpha_s.if": 12e-6,
    "ar_alpha_tp": 0.1,
    "ar_alpha_tp.pcie": 0.8,
    "ar_bw_eff": 0.75,
    "ar_bw_eff.pcie": 0.5,
    "ar_bw_eff_large": 0.75,  # NCCL's large messages (nccl-tests, 8 x H200, 32 MB: 298 of 450 GB/s bus bandwidth)
    # MoE dispatch / combine under expert parallelism (cost/ep_comm.py). Bandwidth: DeepEP's intranode
    # normal kernels reach 153 GB/s (dispatch) and 158 GB/s (combine) of H800's 200 GB/s NVLink each way
    # at EP 8 (github.com/deepseek-ai/DeepEP README): 0.77. Latency: no sourced small-message NVLink
    # figure; 3x the 4.5-5.2 us custom all-reduce (speed_facts 2.4) for the count-then-payload exchange.
    "a2a_alpha_s": 15e-6,
    "a2a_bw_eff": 0.75,
    # Bytes moved per attention score a prompt materializes (StepFeatures.scores): none where flash
    # attention keeps them on chip; llama.cpp without it writes KQ in f32, softmaxes it in place and
    # reads it into KQV: 4 passes of 4 B.
    "score_bytes": 0.0,
    "score_bytes.llamacpp": 16.0,
    "step_s": 300e-6,
    "seq_s": 5e-6,
    "ttft_queue": 30.0,
    "server_s": 30e-3,  # a served request's API-server time (HTTP, tokenize, detokenize), on its TTFT
    # SGLang's is not fitted (scripts/calibrate.names_for): public single-client TTFTs of SGLang servers on small
    # models are a prompt's compute plus ~15 ms (sgl-cookbook: DeepSeek-OCR-2 on one H200, 197-token prompts,
    # 18.08 ms; Glyph 9B at tp 2, 22.35 ms at 610 tokens and 53.48 ms at 4,194, an intercept of ~17 ms; GPUStack's
    # Qwen3-8B on one H100 at 4 clients, 233-token prompts, 27.70 ms), less the first decode step's few ms.
    "server_s.sglang": 15e-3,
    # A MoE model's one-client excess outside the steps, per expert its prompt reaches in each MoE layer: SGLang's
    # large MoE deployments measure ~100-170 ms more at one client than their prompt pass (the same runs at many
    # clients and 8k-token prompts do not: it is not GPU time that queues), gpt-oss-120b at tp 8 (36 x 128) 34 ms in
    # all. Fitted for SGLang only (scripts/calibrate.names_for); no shared value: the others' server_s hold theirs.
    "moe_server_s": 0.0,
    "moe_server_s.sglang": 5e-6,
    "interval.decode.lo": 0.8,
    "interval.decode.hi": 1.25,
    "interval.prefill.lo": 0.75,
    "interval.prefill.hi": 1.35,
}

# (constants by flat name, a one-line basis that says what calibrated them)
Calibration = tuple[dict[str, float], str]
UNCALIBRATED = "estimate (uncalibrated starting constants)"
