"""SGLang's KV pool predicted before a run: the rule against five public start-up logs, the default
--mem-fraction-static of each release read from its code, hand-derived MLA, DP-attention and SWA pools,
and `fit --engine sglang` (its lines, JSON, refusal, exit 3)."""

from __future__ import annotations

import json

import pytest
from conftest import run, shared_path

from kvcalc.engines.sglang import graphs, swa
from kvcalc.engines.sglang import release as rel
from kvcalc.engines.sglang.pool import SglangSettings, cell_bytes, gpu_mem_mib, predict
from kvcalc.errors import UsageError
from kvcalc.model.presets import get_gpu, get_model
from kvcalc.model.spec import ModelSpec

GiB = 2**30


def _dense(name: str, layers: int, kv_heads: int, head_dim: int) -> ModelSpec:
    # Only the cell matters when the log gives the free memory and the weights.
    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=kv_heads * head_dim * 4,
        num_heads=kv_heads * 4,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=1024,
        vocab_size=32000,
    )


def _logs() -> dict[str, dict]:
    return {e["id"]: e for e in json.loads(shared_path("reference", "sglang_logs.json").read_text())}


# id -> (model, gpu, tp, release or None for an explicit fraction, fraction, context_len)
LOGS = {
    # 8 x H100 80GB, --quantization fp8, default fraction of v0.5.2rc2 (0.831)
    "sgl-blog-grok2-8xh100-tp8": (_dense("grok-2", 64, 8, 128), "h100", 8, "0.5.2", None, 131072),
    # a 24 GB card, default fraction of the July 2025 image (0.4.9: the reserved-memory rule, 0.879)
    "sgl-maxuhl98-thesis-llama8b-24gb": ("llama-3.1-8b", "rtx-4090", 1, "0.4.9", None, 131072),
    "sgl-qwen3-14b-tp4-mfs080": ("qwen3-14b", "rtx-4090", 4, None, 0.8, 40960),
    "sgl-pd-prefill-qwen25-05b-mfs015": (_dense("qwen2.5-0.5b", 24, 2, 64), "rtx-5080", 1, None, 0.15, 2048),
    # 8 x H200, main of 2025-10-16 (0.5.3's rule, 0.897)
    "sgl-pr11716-tp8-h200-80layer": ("llama-3.1-70b", "h200", 8, "0.5.3", None, 131072),
}


def _model(m):  # noqa: ANN001, ANN202
    return get_model(m) if isinstance(m, str) else m


def _within(predicted: int, logged: int, cell: int) -> bool:
    # the acceptance bound: 1 % of #tokens, or 0.15 GiB of pool where that is larger
    return abs(predicted - logged) <= max(0.01 * logged, 0.15 * GiB / cell)


@pytest.mark.parametrize("log_id", sorted(LOGS))
def test_rule_reproduces_logged_tokens_from_logged_free_memory(log_id):
    e = _logs()[log_id]
    model, gpu, tp, release, fraction, ctx = LOGS[log_id]
    p = e["parsed"]
    pre = (
        p.get("avail_before_load_gb_min") or p.get("avail_before_load_gb") or p["avail_after_load_gb"] + p["weights_gb"]
    )
    weights = round(p["weights_gb"] * GiB) if "weights_gb" in p else None
    settings = SglangSettings(
        release=release or rel.DEFAULT_RELEASE, tp=tp, mem_fraction_static=fraction, context_len=ctx
    )
    pool = predict(
        _model(model), get_gpu(gpu), settings, seq=ctx, pre_load_free_bytes=round(pre * GiB), weights_bytes=weights
    )
    assert _within(pool.max_total_num_tokens, p["tokens"], pool.cell_bytes), (pool.max_total_num_tokens, p["tokens"])


@pytest.mark.parametrize("log_id", sorted(LOGS))
def test_k_size_line_is_tokens_plus_one_page_in_gib(log_id):
    # "K size" of the logged #tokens: (tokens + page_size) slots x one rank's K bytes per token, / 2^30
    e = _logs()[log_id]
    model, _, tp, *_ = LOGS[log_id]
    _, k_cell, _ = cell_bytes(_model(model), "bf16", tp)
    assert f"{(e['parsed']['tokens'] + 1) * k_cell / GiB:.2f}" == f"{e['parsed']['k_size_gb']:.2f}"


def test_max_running_requests_of_the_logs():
    # 903439 / 131072 x 512 -> 3529 and 298447 / 40960 x 512 -> 3730, as logged
    assert rel.max_running_requests(rel.parse_release("0.5.2"), 903439, 131072, None, 1) == 3529
    assert rel.max_running_requests(rel.parse_release("0.5.5"), 298447, 40960, None, 1) == 3730
    # a small pool: tokens // 2 caps it; a given value is taken whole (0.5.5) or capped by tokens // 2 (0.5.23)
    assert rel.max_running_requests(rel.parse_release("0.5.5"), 3000, 131072, None, 1) == 1500
    assert rel.max_running_requests(rel.parse_release("0.5.5"), 3000, 131072, 4000, 1) == 4000
    assert rel.max_running_requests(rel.parse_release("0.5.23"), 3000, 131072, 4000, 1) == 1500


@pytest.mark.parametrize(
    ("model", "gpu", "tp", "release", "fraction", "logged"),
    [
        ("qwen3-14b", "rtx-4090", 4, "0.5.5", 0.8, 298447),
        ("llama-3.1-70b", "h200", 8, "0.5.3", None, 2795207),
        # sgl-project/sglang#13023 (2025-11-11, one L40S, the default fraction): a LlamaForCausalLM of 15.09 GB,
        # Llama-3(.1)-8B's shape, "avail mem=44.00 GB" before load, "#tokens: 183133" (kvcalc: 43.90, 182,928)
        ("llama-3.1-8b", "l40s", 1, "0.5.5", None, 183133),
    ],
)
def test_whole_prediction_from_presets(model, gpu, tp, release, fraction, logged):
    # free memory from the CUDA total, the CUDA context and NCCL; weights as SGLang loads them
    pool = predict(
        get_model(model), get_gpu(gpu), SglangSettings(release=release, tp=tp, mem_fraction_static=fraction), seq=8192
    )
    assert _within(pool.max_total_num_tokens, logged, pool.cell_bytes)


# (gpu MiB, tp) -> fraction per release, computed from each release's server_args.py / memory_hook.py
@pytest.mark.parametrize(
    ("mib", "tp", "expected"),
    [
        (40960, 1, {"0.3.0": 0.88, "0.4.0": 0.88, "0.4.9": 0.75, "0.5.3": 0.833, "0.5.5": 0.833, "0.5.23": 0.823}),
        (40960, 8, {"0.3.0": 0.83, "0.4.3": 0.81, "0.5.2": 0.662, "0.5.5": 0.805, "0.5.23": 0.795}),
        (46068, 1, {"0.4.6": 0.88, "0.5.1": 0.778, "0.5.5": 0.851, "0.5.23": 0.843}),
        (81559, 1, {"0.4.7": 0.88, "0.4.8": 0.874, "0.5.5": 0.835, "0.5.9": 0.835, "0.5.10": 0.83, "0.5.23": 0.83}),
        # 20-35 GiB (4090): (2,048, 24 / 80) until 0.5.20, then (4,096, 48 / 160); from 0.5.10 8 MiB per prefill
        # graph bucket (42 to 2,048 tokens, 50 to 4,096): 512 + 2,048 x 1.5 + 24 x 2 + 128 (+ 336) MiB at tp 1
        (
            24564,
            1,
            {"0.5.5": 0.847, "0.5.9": 0.847, "0.5.10": 0.833, "0.5.19": 0.833, "0.5.20": 0.704, "0.5.23": 0.704},
        ),
        (24564, 4, {"0.5.5": 0.827, "0.5.10": 0.813, "0.5.20": 0.679}),
        (81559, 8, {"0.4.6": 0.81, "0.5.2": 0.831, "0.5.5": 0.818, "0.5.23": 0.812}),
        (143771, 8, {"0.4.0": 0.81, "0.5.2": 0.886, "0.5.5": 0.897, "0.5.23": 0.893}),
        (183359, 1, {"0.4.7": 0.79, "0.5.2": 0.821, "0.5.5": 0.857, "0.5.23": 0.854}),
    ],
)
def test_default_fraction_per_release(mib, tp, expected):
    # a text model without MLA, served plainly on an NVIDIA GPU
    for release, fraction in expected.items():
        v = rel.parse_release(release)
        chunk, bs = rel.graph_defaults(v, mib, tp)
        on = graphs.prefill_graph_on(
            v, architecture="LlamaForCausalLM", mla=False, sparse=False, pp=1, dp_attention=False, amd=False,
            multimodal=False,
        )  # fmt: skip
        graph = graphs.prefill_graph_reserve_mib(on, mla=False, chunk=chunk, llama2=False)
        got = rel.default_mem_fraction(
            v, mib, tp=tp, pp=1, chunked_prefill_size=chunk, cuda_graph_max_bs=bs, dp_attention=False,
            prefill_graph_mib=graph,
        )  # fmt: skip
        assert round(got, 3) == fraction, (release, got)


def test_max_running_requests_caps_the_default_graph_batch_from_0_5_22():
    # memory_hook.handle_gpu_memory_settings: a given --max-running-requests below the default cuda_graph_max_bs
    # (256 on one H100) takes its place, and the fraction's 2 MiB a graph batch with it: 512 + 12,288 + 64 x 2 + 128
    # + 464 MiB of the card's 81,559
    assert rel.graph_defaults((0, 5, 21), 81559, 1, 64) == (8192, 256)
    assert rel.graph_defaults((0, 5, 22), 81559, 1, 64) == (8192, 64)
    pool = predict(get_model("llama-3.1-8b"), get_gpu("h100"), SglangSettings(max_running_requests=64), seq=4096)
    assert pool.cuda_graph_max_bs == 64 and pool.mem_fraction_static == round((81559 - 13520) / 81559, 3)


def _graph(release: str, architecture: str = "LlamaForCausalLM", **case) -> bool:
    args = {"mla": False, "sparse": False, "pp": 1, "dp_attention": False, "amd": False, "multimodal": False} | case
    return graphs.prefill_graph_on(rel.parse_release(release), architecture=architecture, **args)


def test_prefill_graph_by_release_as_the_wheels_decide_it():
    # opt-in before 0.5.10; never on ROCm
    assert (_graph("0.5.9"), _graph("0.5.10"), _graph("0.5.23", amd=True)) == (False, True, False)
    # pipeline parallelism: the piecewise graph's rule to 0.5.14, no breakable rule 0.5.15-0.5.18, opt-in from 0.5.19
    assert [_graph(v, pp=2) for v in ("0.5.14", "0.5.15", "0.5.18", "0.5.19")] == [False, True, True, False]
    # DP attention: off to 0.5.16
    assert [_graph(v, dp_attention=True) for v in ("0.5.16", "0.5.17")] == [False, True]
    # MLA: reserved to 0.5.14, off 0.5.15-0.5.16, in 0.5.17 only with DSA, reserved again from 0.5.18
    mla = [_graph(v, "DeepseekV3ForCausalLM", mla=True) for v in ("0.5.14", "0.5.16", "0.5.17", "0.5.18")]
    assert mla == [True, False, False, True]
    assert _graph("0.5.17", "GlmMoeDsaForCausalLM", mla=True, sparse=True)
    # the piecewise graph's disabled architectures stop mattering under the breakable graph
    assert (_graph("0.5.14", "Qwen3NextForCausalLM"), _graph("0.5.15", "Qwen3NextForCausalLM")) == (False, True)
    # multimodal models: off but an allowlist from 0.5.16, none in 0.5.15
    qwen35 = [_graph(v, "Qwen3_5MoeForConditionalGeneration", multimodal=True) for v in ("0.5.15", "0.5.16")]
    assert qwen35 == [False, True]
    assert not _graph("0.5.23", "Qwen2_5_VLForConditionalGeneration", multimodal=True)
    # what the reserve is: 58 buckets to 8,192 tokens, 4,096 tokens for a Llama-2 path, 1.5 GiB with MLA
    assert graphs.prefill_graph_reserve_mib(True, mla=False, chunk=8192, llama2=False) == 464
    assert graphs.prefill_graph_reserve_mib(True, mla=False, chunk=8192, llama2=True) == 400
    assert graphs.prefill_graph_reserve_mib(True, mla=True, chunk=8192, llama2=False) == 1536
    assert graphs.prefill_graph_reserve_mib(False, mla=True, chunk=8192, llama2=False) == 0


def test_gemma_3_and_llama_4_are_served_text_only_by_default():
    # configs/model_config.py mm_disabled_models (0.4.6 on): no VLM fraction and the prefill graph is kept
    h100 = get_gpu("h100")
    for name in ("gemma-3-27b", "llama-4-scout"):
        spec = get_model(name)
        assert not graphs.multimodal((0, 5, 23), spec.architecture, True)
        assert graphs.multimodal((0, 4, 5), spec.architecture, True)
        pool = predict(spec, h100, SglangSettings(tp=8), seq=4096)
        assert not pool.vlm_scaled and pool.mem_fraction_static == rel.default_mem_fraction(
            (0, 5, 23), gpu_mem_mib(h100), tp=8, pp=1, chunked_prefill_size=8192, cuda_graph_max_bs=512,
            dp_attention=False, prefill_graph_mib=464,
        )  # fmt: skip
    assert predict(get_model("qwen2.5-vl-7b"), h100, SglangSettings(), seq=4096).vlm_scaled


def test_default_fraction_large_cards_before_0_4_8():
    # 0.4.6 / 0.4.7 on an H200: min(0.88 + 48 GiB x 0.12 / gpu_mem, (gpu_mem - 18 GiB) / gpu_mem), unrounded
    got = rel.default_mem_fraction(
        rel.parse_release("0.4.6.post5"), 143771, tp=1, pp=1, chunked_prefill_size=8192, cuda_graph_max_bs=160,
        dp_attention=False,
    )  # fmt: skip
    assert got == (143771 - 18 * 1024) / 143771


def test_mla_pool_is_the_latent_replicated_on_every_rank():
    spec = get_model("deepseek-v2-lite")  # kv_lora_rank 512, qk_rope_head_dim 64, 27 layers
    assert cell_bytes(spec, "bf16", 1) == cell_bytes(spec, "bf16", 8) == ((512 + 64) * 27 * 2, 0, True)
    pre, weights = 70 * GiB, 10 * GiB
    pool = predict(
        spec, get_gpu("h100"), SglangSettings(tp=2, mem_fraction_static=0.8), seq=4096,
        pre_load_free_bytes=pre, weights_bytes=weights,
    )  # fmt: skip
    rest = pre - weights - pre * 0.2  # 46 GiB
    assert pool.max_total_num_tokens == int(rest // 31104) == 1587966
    assert pool.kv_bytes == (1587966 + 1) * 31104 and pool.k_bytes is None
    assert "KV size: 46.00 GB" in pool.log_lines[2]


def test_mla_keeps_16_bit_copies_of_kv_b_proj_over_the_attention_tp_group():
    # SGLang's post_load_weights (deepseek_weight_loader.py, 0.5.23) makes w_kc / w_vc contiguous copies of kv_b_proj
    # whatever its format and keeps kv_b_proj for the prompt path; vLLM takes a 16-bit one as views (copies only of a
    # quantized one). DeepSeek-V2-Lite, bf16: 27 layers x 16 heads x (128 + 128) x 512 x 2 B
    from kvcalc.engines.weights import weight_bytes
    from kvcalc.model.formats import quantization_of

    lite = get_model("deepseek-v2-lite")
    assert weight_bytes(lite, "bf16", None).mla_absorbed == 0
    assert (
        weight_bytes(lite, "bf16", None, copies_16bit_mla=True).mla_absorbed == 27 * 16 * 256 * 512 * 2 == 113_246_208
    )
    # DeepSeek-R1 (fp8 kv_b_proj, bf16 copies either way) on 8 x H200: under DP attention a rank holds all 128 heads'
    # copies (kv_b_proj splits over the attention-TP group, 1 here), not 16: 61 x 112 x 256 x 512 x 2 B more
    r1, h200 = get_model("deepseek-r1"), get_gpu("h200")
    quant = quantization_of(r1, None)
    tp8 = predict(r1, h200, SglangSettings(tp=8), seq=8192)
    dp8 = predict(r1, h200, SglangSettings(tp=8, dp_attention=True), seq=8192)
    attention = weight_bytes(r1, "bf16", quant, tp=1).attention - weight_bytes(r1, "bf16", quant, tp=8).attention
    assert dp8.weights_bytes - tp8.weights_bytes == attention + 61 * 112 * 256 * 512 * 2
    assert 61 * 112 * 256 * 512 * 2 == 1_790_967_808  # 1.67 GiB a rank


def test_dp_attention_keeps_whole_heads_and_one_pool_per_rank():
    spec = get_model("llama-3.1-70b")  # 80 layers, 8 KV heads of 128
    common = dict(seq=8192, pre_load_free_bytes=77 * GiB, weights_bytes=20 * GiB)
    tp8 = predict(spec, get_gpu("h100"), SglangSettings(tp=8, mem_fraction_static=0.85), **common)
    dp8 = predict(spec, get_gpu("h100"), SglangSettings(tp=8, mem_fraction_static=0.85, dp_attention=True), **common)
    assert tp8.cell_bytes == 1 * 128 * 2 * 80 * 2 == 40960
    assert dp8.cell_bytes == 8 * 128 * 2 * 80 * 2 == 327680  # attention TP size 1
    rest = 77 * GiB * 0.85 - 20 * GiB  # 45.45 GiB
    assert dp8.max_total_num_tokens == int(rest // 327680) == 148930
    assert dp8.kv_capacity_tokens == 8 * 148930 and tp8.kv_capacity_tokens == tp8.max_total_num_tokens
    # the default fraction adds cuda_graph_max_bs x dp x 3 (and x 1.5 above 300) MiB; chunked prefill is divided by dp
    auto = predict(spec, get_gpu("h100"), SglangSettings(release="0.5.5", tp=8, dp_attention=True), seq=8192)
    assert auto.mem_fraction_static == round((81559 - (512 + 8192 * 1.5 + 512 * 2 + 1024 + 512 * 8 * 4.5)) / 81559, 3)
    assert auto.chunked_prefill_size == 1024


def test_sliding_window_split():
    spec = get_model("gpt-oss-20b")  # 24 layers alternating sliding (128) and full, 8 KV heads of 64
    common = dict(seq=8192, pre_load_free_bytes=78 * GiB, weights_bytes=13 * GiB)
    uniform = int((78 * GiB * 0.8 - 13 * GiB) // (24 * 8 * 64 * 2 * 2))  # 49.4 GiB over the uniform cell
    # 0.5.10: the bytes of the uniform pool re-divided, the sliding layers at 0.8 x the full layers' tokens
    pool = predict(spec, get_gpu("h100"), SglangSettings(release="0.5.10", mem_fraction_static=0.8), **common)
    full = int(uniform * 24 / (12 + 0.8 * 12))
    assert (pool.max_total_num_tokens, pool.swa_tokens) == (full, int(full * 0.8))
    assert "Use Sliding window memory pool. full_layer_tokens=" in pool.log_lines[2]
    assert pool.k_bytes == ((full + 1) * 12 + (int(full * 0.8) + 1) * 12) * 8 * 64 * 2
    # 0.5.5 sets disable_hybrid_swa_memory for gpt-oss: every layer holds the uniform count
    flat = predict(spec, get_gpu("h100"), SglangSettings(release="0.5.5", mem_fraction_static=0.8), **common)
    assert (flat.max_total_num_tokens, flat.swa_tokens) == (uniform, None)
    # 0.5.8 / 0.5.9 on an SM100 card: the default trtllm_mha backend disables it too
    assert (
        predict(spec, get_gpu("b200"), SglangSettings(release="0.5.9", mem_fraction_static=0.8), **common).swa_tokens
        is None
    )
    assert predict(
        spec, get_gpu("b200"), SglangSettings(release="0.5.10", mem_fraction_static=0.8), **common
    ).swa_tokens


# Which releases give the sliding layers a pool of their own, read from each wheel (engines/sglang/swa.py):
# the Gemma 2 / 3 classes from 0.4.10 until 0.5.1 disables them for good; the allow-list from 0.5.8
@pytest.mark.parametrize(
    ("architecture", "split_in"),
    [
        ("Gemma3ForConditionalGeneration", {"0.4.9": False, "0.4.10": True, "0.5.1": False, "0.5.23": False}),
        ("Gemma2ForCausalLM", {"0.4.4": False, "0.4.10": True, "0.5.5": False, "0.5.23": False}),
        ("GptOssForCausalLM", {"0.4.10": False, "0.5.5": False, "0.5.8": True, "0.5.23": True}),
        ("Llama4ForConditionalGeneration", {"0.5.5": False, "0.5.7": False, "0.5.8": True}),
        ("Gemma4ForConditionalGeneration", {"0.5.11": True, "0.5.23": True}),
        ("Olmo2ForCausalLM", {"0.5.5": False, "0.5.23": False}),
        (None, {"0.4.10": False, "0.5.23": False}),
    ],
)
def test_which_releases_split_the_pool(architecture, split_in):
    for release, split in split_in.items():
        assert swa.splits(rel.parse_release(release), architecture, blackwell=False) is split, release


def test_llama4_chunked_layers_are_the_sliding_side_from_0_5_8():
    spec = get_model("llama-4-scout")  # 48 layers: 36 chunked (8,192-token chunks), every 4th global
    common = dict(seq=8192, pre_load_free_bytes=70 * GiB, weights_bytes=30 * GiB)
    before = predict(spec, get_gpu("h100"), SglangSettings(release="0.5.7", tp=4, mem_fraction_static=0.9), **common)
    after = predict(spec, get_gpu("h100"), SglangSettings(release="0.5.8", tp=4, mem_fraction_static=0.9), **common)
    assert before.swa_tokens is None
    assert after.max_total_num_tokens == int(before.max_total_num_tokens * 48 / (12 + 0.8 * 36))
    assert after.swa_tokens == int(after.max_total_num_tokens * 0.8)


def test_models_sglang_did_not_serve_yet_are_refused_by_release():
    with pytest.raises(
        UsageError, match=r"SGLang 0\.5\.5 has no model class for Gemma4ForConditionalGeneration \(first in 0\.5\.11\)"
    ):
        predict(get_model("gemma-4-26b-a4b"), get_gpu("h100"), SglangSettings(release="0.5.5"), seq=8192)
    # from 0.5.11 its sliding and full layers (different head widths) split the pool by bytes
    pool = predict(get_model("gemma-4-26b-a4b"), get_gpu("h100"), SglangSettings(release="0.5.11"), seq=8192)
    assert pool.swa_tokens == int(pool.max_total_num_tokens * 0.8)


def test_vlm_fraction_by_release():
    # adjust_mem_fraction_for_vlm (0.4.10 on, default fraction only): 0.95 x (1 - 0.1 x (L x H^2 / (24 x 1024^2) - 1))
    # clipped to [0.8, 1.05]; Gemma 3's SigLIP has 27 layers of 1,152
    gemma = 0.95 * (1 - 0.1 * (27 * 1152**2 / (24 * 1024**2) - 1))
    assert rel.vlm_fraction((0, 5, 5), 0.835, True, (27, 1152)) == pytest.approx(0.835 * gemma)
    assert rel.vlm_fraction((0, 5, 5), 0.7, False, (27, 1152)) == 0.7  # a given fraction is kept
    assert rel.vlm_fraction((0, 5, 5), 0.835, True, (24, 3584)) == pytest.approx(0.835 * 0.95 * 0.8)  # the floor
    # 0.4.4 and before: 5% off any fraction; 0.4.5 - 0.4.9: none
    assert rel.vlm_fraction((0, 4, 4), 0.7, False, (27, 1152)) == pytest.approx(0.665)
    assert rel.vlm_fraction((0, 4, 9), 0.88, True, (27, 1152)) == 0.88
    # Qwen2.5-VL's vision tower as SGLang reads it: width 1,280, layers 24 (num_hidden_layers' default: its config
    # says depth). Gemma 3 is served text-only by default, so not scaled.
    qwen = 0.95 * (1 - 0.1 * (24 * 1280**2 / (24 * 1024**2) - 1))
    pool = predict(get_model("qwen2.5-vl-7b"), get_gpu("h100"), SglangSettings(release="0.5.5"), seq=8192)
    assert pool.vlm_scaled and pool.mem_fraction_static == pytest.approx(0.835 * qwen)
    pool = predict(get_model("gemma-3-27b"), get_gpu("h100"), SglangSettings(release="0.5.5"), seq=8192)
    assert not pool.vlm_scaled and pool.mem_fraction_static == 0.835


# More public start-up logs (not in ../shared): model, gpu, tp, release, --mem-fraction-static (None: the
# release's default), context_len, logged "avail mem" before the weights, logged weights ("mem usage", or the
# drop in avail mem), logged #tokens (or max_total_num_tokens)
PUBLIC_LOGS = {
    # github.com/didier-durand/llms-in-clouds docs/sglang.md: QwQ-32B on 4 x L4 (g6.12xlarge), SGLang 0.4.3.post4
    "didier-qwq32b-4xl4": ("qwq-32b", "l4", 4, "0.4.3", None, 131072, 21.63, 15.54, 46611),
    # docs.sglang.ai send_request notebook output (2025-01-23): Llama-3.1-8B-Instruct, one 80 GB GPU
    "docs-llama31-8b": ("llama-3.1-8b", "h100", 1, "0.4.1", 0.88, 131072, 78.81, 78.81 - 63.72, 444500),
    # github.com/jerryzsj/my-deepseek-r1 README (2025-02-04): DeepSeek-R1-Distill-Qwen-7B on an RTX 3090
    "jerryzsj-r1-qwen7b-3090": ("qwen2.5-7b", "rtx-3090", 1, "0.4.2", 0.88, 131072, 22.76, 22.76 - 8.37, 105531),
    # sgl-project/sglang#4760 (2025-03-25, FA3 backend test): Llama-3.1-8B-Instruct, default fraction
    "pr4760-llama31-8b": ("llama-3.1-8b", "h100", 1, "0.4.4", None, 131072, 63.48 + 15.11, 15.11, 442750),
    # sgl-project/sglang#4826 (2025-03-27): gemma-3-4b-it, one pool for every layer and 0.88 x 0.95 (multimodal)
    "pr4826-gemma3-4b": ("gemma-3-4b", "h200", 1, "0.4.4", None, 131072, 131.08 + 8.13, 8.13, 834615),
}


@pytest.mark.parametrize("log_id", sorted(PUBLIC_LOGS))
def test_rule_reproduces_more_public_logs(log_id):
    model, gpu, tp, release, fraction, ctx, pre, weights, logged = PUBLIC_LOGS[log_id]
    settings = SglangSettings(release=release, tp=tp, mem_fraction_static=fraction, context_len=ctx)
    pool = predict(
        get_model(model), get_gpu(gpu), settings, seq=ctx,
        pre_load_free_bytes=round(pre * GiB), weights_bytes=round(weights * GiB),
    )  # fmt: skip
    assert _within(pool.max_total_num_tokens, logged, pool.cell_bytes), (pool.max_total_num_tokens, logged)


def test_fit_engine_sglang_lines_and_json():
    args = (
        "fit",
        "qwen3-0.6b",
        "--gpu",
        "rtx-5080",
        "--engine",
        "sglang",
        "--mem-fraction-static",
        "0.15",
        "--seq",
        "2048",
    )
    r = run(*args, "--engine-version", "0.5.5")
    assert r.exit_code == 0, r.output
    assert "SGLang 0.5.5 accounting" in r.stdout and "KV Cache is allocated. #tokens: " in r.stdout
    # without --engine-version: the newest release kvcalc has read, in its own words (0.5.23 names the dtype first)
    assert rel.DEFAULT_RELEASE == rel.release_text(rel.RULE_RELEASES[-1])
    r = run(*args)
    assert f"SGLang {rel.DEFAULT_RELEASE} accounting" in r.stdout
    assert "KV Cache is allocated. dtype: torch.bfloat16, #tokens: " in r.stdout
    r = run("fit", "qwen3-14b", "--gpu", "rtx-4090", "--tp", "4", "--engine", "sglang", "--mem-fraction-static", "0.8",
            "--seq", "40960", "--format", "json", "--engine-version", "0.5.5")  # fmt: skip
    s = json.loads(r.stdout)["sglang"]
    for key in ("max_total_num_tokens", "mem_fraction_static", "k_bytes", "v_bytes", "available_kv_bytes",
                "weights_bytes", "max_running_requests", "chunked_prefill_size", "release", "kv_capacity_tokens", "fits"):  # fmt: skip
        assert key in s
    assert s["mem_fraction_static"] == 0.8 and s["chunked_prefill_size"] == 2048 and s["context_len"] == 40960


def test_fit_exits_3_with_json_when_one_request_does_not_fit():
    r = run("fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "sglang", "--seq", "131072", "--format", "json")
    assert r.exit_code == 3
    d = json.loads(r.stdout)
    assert d["sglang"]["fits"] is False and d["sglang"]["max_total_num_tokens"] < 131072 and not d["ok"]


def test_fit_predicts_sglang_refusal():
    r = run(
        "fit", "llama-3.1-70b", "--gpu", "h100", "--engine", "sglang", "--format", "json", "--engine-version", "0.5.5"
    )
    assert r.exit_code == 3
    d = json.loads(r.stdout)
    assert d["sglang"]["refusal"].startswith(
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static"
    )
    r = run("fit", "llama-3.1-70b", "--gpu", "h100", "--engine", "sglang", "--engine-version", "0.5.23")
    assert (
        r.exit_code == 3
        and "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.83" in r.stdout
    )


def test_refused_fit_shows_sglangs_division_not_a_vllm_budget():
    # Where SGLang would not start, the table is still its own division of the GPU: the weights as loaded and the
    # share mem_fraction_static holds back exceed the memory free before load, by their sum less that memory. It
    # was kvcalc's generic table, with a "budget ... x 0.9" row SGLang never reads.
    from kvcalc.units import fmt_bytes

    args = ("fit", "llama-3.1-70b", "--gpu", "h100", "--tp", "2", "--seq", "8k", "--engine", "sglang")
    p = json.loads(run(*args, "--format", "json").stdout)["sglang"]
    held = int(p["pre_load_free_bytes"] * (1 - p["mem_fraction_static"]))
    over = p["weights_bytes"] + held - p["pre_load_free_bytes"]
    assert p["refusal"] and over > 0
    out = run(*args)
    assert out.exit_code == 3
    (pool,) = [x for x in out.stdout.splitlines() if x.strip().startswith("KV pool")]
    assert f"exceed the memory free before load by {fmt_bytes(over)}" in pool
    assert "x 0.9" not in out.stdout and "SGLang would not start" in out.stdout


def test_sglang_options_need_the_engine():
    r = run("fit", "llama-3.1-8b", "--gpu", "h100", "--mem-fraction-static", "0.8")
    assert r.exit_code == 2 and "--mem-fraction-static needs --engine sglang" in r.stderr
    r = run("fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", "--engine-version", "0.2.9")
    assert r.exit_code == 2 and "older than the releases kvcalc models" in r.stderr
    r = run("fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", "--mem-fraction-static", "1.5")
    assert r.exit_code == 2


def test_python_api_fit_engine_sglang():
    import kvcalc

    r = kvcalc.fit("qwen3-14b", "rtx-4090", tp=4, seq=40960, engine="sglang", mem_fraction_static=0.8)
    assert r.sglang is not None and r.sglang.mem_fraction_static == 0.8 and r.ok
    assert r.sglang.max_total_num_tokens == r.sglang.kv_capacity_tokens > 40960
    bad = kvcalc.fit("llama-3.1-70b", "h100", seq=8192, engine="sglang")
    assert bad.sglang.refusal and not bad.ok


def test_fp8_kv_is_auto_when_the_checkpoint_says_so():
    # minimax-m2.7-nvfp4's quantization_config has kv_cache_scheme {num_bits: 8, type: float}
    spec = get_model("minimax-m2.7-nvfp4")
    assert spec.checkpoint.quantization.kv_cache_fp8
    pool = predict(spec, get_gpu("b200"), SglangSettings(tp=4), seq=8192)
    assert pool.kv_dtype == "fp8"
    assert pool.cell_bytes == cell_bytes(spec, "fp8", 4)[0] == cell_bytes(spec, "bf16", 4)[0] // 2
    assert predict(get_model("llama-3.1-8b"), get_gpu("h100"), SglangSettings(), seq=8192).kv_dtype == "bf16"


def test_kv_dtype_sglang_does_not_take():
    r = run("fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", "--kv-dtype", "int4")
    assert r.exit_code == 2 and "SGLang does not take --kv-dtype int4" in r.stderr
    d = json.loads(
        run("fit", "llama-3.1-8b", "-g", "h100", "--engine", "sglang", "--kv-dtype", "fp8", "--format", "json").stdout
    )
    assert d["sglang"]["kv_dtype"] == "fp8" and d["sglang"]["cell_bytes"] == 8 * 128 * 2 * 32


def test_mamba_state_is_carved_out_first():
    spec = get_model("qwen3-next-80b-a3b")  # GDN layers with a constant state, every fourth layer full attention
    rest = 77 * GiB * 0.85 - 40 * GiB
    # a GDN layer: 32 value heads of a 128 x 128 state in float32 and 3 conv steps of 2 x 16 x 128 + 32 x 128
    # channels in bf16, whatever the model dtype (SGLang's Mamba2CacheParams; vLLM keeps both in bf16, 1,097,728 B)
    layer = 32 * 128 * 128 * 4 + 3 * (2 * 16 * 128 + 32 * 128) * 2
    assert layer == 2_146_304
    state = 36 * layer // 4  # 36 GDN layers, the heads split over tp 4
    budget = rest * 0.9 / 1.9  # r / (1 + r) of rest
    # 0.5.5: whole states of the budget; the radix cache keeps 3 a running request
    # 0.5.23: the pool's padding slot charged too; extra_buffer's ping-pong adds 2 a request with the overlap scheduler
    k_old, k_new = int(budget // state), int((budget - state) // state)
    for release, mamba, cap in (("0.5.5", k_old * state, k_old // 3), ("0.5.23", (k_new + 1) * state, k_new // 5)):
        pool = predict(
            spec, get_gpu("h100"), SglangSettings(release=release, tp=4, mem_fraction_static=0.85), seq=8192,
            pre_load_free_bytes=77 * GiB, weights_bytes=40 * GiB,
        )  # fmt: skip
        assert pool.mamba_bytes == mamba
        assert pool.max_total_num_tokens == int((rest - mamba) // pool.cell_bytes)
        assert pool.cell_bytes == 12 * 1 * 256 * 2 * 2  # 12 full-attention layers, 2 KV heads / tp 4 -> 1
        assert pool.max_running_requests == cap


def test_max_mamba_cache_size_is_taken_from_0_5_7_and_caps_the_running_requests():
    # --max-mamba-cache-size K: the states take K slots (0.5.23: K + 1, the padding slot charged) and the KV pool
    # the rest; a request holds 5 slots under extra_buffer, so K // 5 run at once (kv_cache_configurator.py 0.5.23
    # _handle_max_mamba_cache and the max_num_reqs cap; model_runner_kv_cache_mixin.py from 0.5.7). 0.5.5 takes K
    # only with the radix cache off: Qwen3-Next's states are sized by the memory ratio there
    spec = get_model("qwen3-next-80b-a3b")
    rest = 77 * GiB * 0.85 - 40 * GiB
    state = 36 * (32 * 128 * 128 * 4 + 3 * (2 * 16 * 128 + 32 * 128) * 2) // 4  # as above: tp 4
    assert state == 19_316_736

    def pool(release: str, size: int | None, dp: bool = False):  # noqa: ANN202
        settings = SglangSettings(
            release=release, tp=4, mem_fraction_static=0.85, dp_attention=dp, max_mamba_cache_size=size
        )
        return predict(spec, get_gpu("h100"), settings, seq=8192, pre_load_free_bytes=77 * GiB, weights_bytes=40 * GiB)

    given = pool("0.5.23", 64)
    assert given.mamba_bytes == 65 * state
    assert given.max_total_num_tokens == int((rest - 65 * state) // 12_288)
    assert given.max_running_requests == 64 // 5 == 12 and given.refusal is None
    assert pool("0.5.16", 64).mamba_bytes == 64 * state  # before 0.5.17 the padding slot is not charged
    assert pool("0.5.5", 64).mamba_bytes == pool("0.5.5", None).mamba_bytes > 64 * state  # not taken
    # DP attention: K // dp slots a rank, 64 // 4 = 16, 3 running requests each
    assert pool("0.5.23", 64, dp=True).mamba_bytes == 17 * state * 4  # every rank keeps all heads: 4x the state
    # too few slots for one request: SGLang 0.5.23 refuses to start, in its words
    small = pool("0.5.23", 4)
    assert small.max_running_requests == 0 and not small.fits
    assert small.refusal.startswith("RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve")
    assert "max_mamba_cache_size=4, mamba_ratio=5, resulting max_num_reqs=0." in small.refusal
    r = run("fit", "qwen3-next-80b-a3b", "--gpu", "h200", "--tp", "2", "--engine", "sglang", "--seq", "8k",
            "--batch", "16", "--max-mamba-cache-size", "64")  # fmt: skip
    assert r.exit_code == 3 and "max_running_requests 12); the largest batch it holds is 12" in r.stdout
    bad = run("fit", "qwen3-next-80b-a3b", "--gpu", "h200", "--max-mamba-cache-size", "64")
    assert bad.exit_code == 2 and "--max-mamba-cache-size needs --engine sglang" in bad.stderr
    zero = run("fit", "qwen3-next-80b-a3b", "--gpu", "h200", "--engine", "sglang", "--max-mamba-cache-size", "0")
    assert zero.exit_code == 2 and "--max-mamba-cache-size must be at least 1, got 0" in zero.stderr
    # where SGLang does not read it, the answer says so rather than drop it silently
    import kvcalc

    old = kvcalc.fit("qwen3-next-80b-a3b", "h200", tp=2, seq=8192, engine="sglang", engine_version="0.5.5",
                     max_mamba_cache_size=64)  # fmt: skip
    assert any("SGLang 0.5.5 takes it only with the radix cache off" in w for w in old.warnings)
    dense = kvcalc.fit("llama-3.1-8b", "h100", seq=8192, engine="sglang", max_mamba_cache_size=64)
    assert any("llama-3.1-8b keeps no recurrent state" in w for w in dense.warnings)
    assert not kvcalc.fit(
        "qwen3-next-80b-a3b", "h200", tp=2, seq=8192, engine="sglang", max_mamba_cache_size=64
    ).warnings
    # generate's serving simulation runs the same pool: 12 requests at once, so 20 of 32 clients queue
    served = kvcalc.generate("qwen3-next-80b-a3b", "h200", tp=2, engine="sglang", concurrency=32, prompt=1024,
                             new=1024, max_mamba_cache_size=64)  # fmt: skip
    assert any(
        "holds 12 requests of 2,048 tokens at once" in w and "max_mamba_cache_size 64" in w for w in served.warnings
    )
    wrong = ["generate", "qwen3-next-80b-a3b", "--gpu", "h200", "--tp", "2", "--max-mamba-cache-size", "64"]
    r = run(*wrong, "--concurrency", "32")
    assert r.exit_code == 2 and "--max-mamba-cache-size needs --engine sglang" in r.stderr
    dense = kvcalc.generate("llama-3.1-8b", "h100", engine="sglang", concurrency=4, max_mamba_cache_size=64)
    assert any("llama-3.1-8b keeps no recurrent state" in w for w in dense.warnings)
    r = run(*wrong, "--engine", "sglang", "--batch", "4")
    assert r.exit_code == 2 and "--max-mamba-cache-size is a serving engine's launch flag" in r.stderr


def test_mamba_ssm_dtype_sets_the_ssm_states_width():
    # --mamba-ssm-dtype (server_args.py: float32 by default, bfloat16 or float16): the SSM / linear-attention state in
    # 2 bytes, the conv windows still bf16. Qwen3-Next's GDN layer: 32 x 128 x 128 x 2 + 3 x 8,192 x 2 = 1,097,728 B,
    # vLLM's width (2,146,304 B in float32)
    import kvcalc
    from kvcalc.engines.sglang.mamba import state_bytes_per_request

    spec = get_model("qwen3-next-80b-a3b")
    assert state_bytes_per_request(spec, "bfloat16") == state_bytes_per_request(spec, "float16") == 36 * 1_097_728
    assert state_bytes_per_request(spec, "float32") == state_bytes_per_request(spec) == 36 * 2_146_304
    half = kvcalc.fit("qwen3-next-80b-a3b", "h200", tp=2, seq=8192, engine="sglang", max_mamba_cache_size=64,
                      mamba_ssm_dtype="bfloat16")  # fmt: skip
    assert half.sglang.mamba_bytes == 65 * 36 * 1_097_728 // 2 and not half.warnings
    served = kvcalc.generate("qwen3-next-80b-a3b", "h200", tp=2, engine="sglang", concurrency=8,
                             mamba_ssm_dtype="bfloat16")  # fmt: skip
    assert "mamba_ssm_dtype bfloat16" in served.kv_pool
    bad = run("fit", "qwen3-next-80b-a3b", "--gpu", "h200", "--engine", "sglang", "--mamba-ssm-dtype", "int8")
    assert (
        bad.exit_code == 2 and "--mamba-ssm-dtype must be one of float32, bfloat16, float16, got 'int8'" in bad.stderr
    )
    r = run("generate", "llama-3.1-8b", "--gpu", "h100", "--concurrency", "4", "--mamba-ssm-dtype", "bfloat16")
    assert r.exit_code == 2 and "--mamba-ssm-dtype needs --engine sglang" in r.stderr
    dense = kvcalc.generate("llama-3.1-8b", "h100", engine="sglang", concurrency=4, mamba_ssm_dtype="bfloat16")
    assert any("--mamba-ssm-dtype changes nothing: llama-3.1-8b keeps no recurrent state" in w for w in dense.warnings)


def test_a_pipeline_stage_sizes_its_states_by_its_share_from_0_5_17():
    # kv_cache_configurator.py (0.5.17-0.5.23): per_req x the busiest stage's share of the stateful layers, the same
    # on every stage; before, each stage priced a request at the whole model's state. Qwen3-Next: 36 GDN layers of 48
    # (every fourth is full attention), 18 on each of 2 stages; at tp 2 a request's whole state is 38,633,472 B
    from kvcalc.engines.sglang.mamba import stage_state

    spec = get_model("qwen3-next-80b-a3b")
    whole = 36 * (32 * 128 * 128 * 4 + 3 * (2 * 16 * 128 + 32 * 128) * 2) // 2
    assert whole == 38_633_472
    two, three = [range(0, 24), range(24, 48)], [range(0, 16), range(16, 32), range(32, 48)]
    assert stage_state((0, 5, 23), spec, whole, two) == whole // 2
    assert stage_state((0, 5, 23), spec, whole, three) == int(whole * (12 / 36)) == 12_877_824
    assert stage_state((0, 5, 16), spec, whole, two) == stage_state((0, 5, 23), spec, whole, [range(48)]) == whole
    new = predict(spec, get_gpu("h100"), SglangSettings(tp=2, pp=2), seq=8192)
    slots = new.mamba_bytes // (whole // 2) - 1  # the padding slot charged
    assert new.mamba_bytes == (slots + 1) * (whole // 2) and new.max_running_requests == slots // 5
    old = predict(spec, get_gpu("h100"), SglangSettings(release="0.5.16", tp=2, pp=2), seq=8192)
    assert old.mamba_bytes % whole == 0 and new.max_running_requests > 1.9 * old.max_running_requests


def test_prefix_cache_strategy_by_release_and_model():
    # server_args / arg_groups/overrides.py in the wheels: Nemotron-H ran without a radix cache for its states up to
    # 0.5.6 (512 slots, one a request); 0.5.7 charged the tracking buffer to every radix-cached model; extra_buffer
    # is the default from 0.5.14 where supported, for Kimi Linear from 0.5.16
    from kvcalc.engines.sglang.mamba import slots_per_request, state_pool, strategy

    assert strategy((0, 5, 5), "NemotronHForCausalLM") == "off"
    assert state_pool((0, 5, 5), "NemotronHForCausalLM", 10 * GiB, 1 << 20, None)[:2] == (512 << 20, 512)
    assert state_pool((0, 5, 9), "BailingMoeV2_5ForCausalLM", 19 * GiB, 1 << 20, 64)[:2] == (64 << 20, 64)
    assert state_pool((0, 5, 9), "BailingMoeV2_5ForCausalLM", 19 * GiB, 1 << 20, None)[:2] == (9 << 30, 9 << 10)
    assert [slots_per_request(r, strategy(r, "Qwen3NextForCausalLM")) for r in ((0, 5, 6), (0, 5, 7), (0, 5, 13))] == [
        3,
        5,
        3,
    ]
    assert [strategy(r, "KimiLinearForCausalLM") for r in ((0, 5, 13), (0, 5, 14), (0, 5, 16))] == [
        "off",
        "no_buffer",
        "extra_buffer",
    ]
    assert strategy((0, 5, 14), "Lfm2ForCausalLM") == "no_buffer"  # not among the architectures extra_buffer takes


def test_fit_grid_shows_sglang_columns():
    r = run("fit", "llama-3.1-8b", "-g", "h100", "--engine", "sglang", "--seq", "8k,128k", "--batch", "1,64")
    assert r.exit_code == 3 and "SGLang" in r.stdout and "#tokens" in r.stdout


def test_a_latency_goal_under_sglangs_pool_is_searched_and_worded_within_the_pool():
    # Llama-3.1-70B on 4 x H100 at 8k: kvcalc's own arithmetic holds 54 requests, SGLang 0.5.5's pool 49.38;
    # TPOT 40 ms holds past both, so the goal is met up to the 49 the pool holds, not 54, and the verdict says so;
    # the largest batch the answer quotes is the pool's 49 too (one memory answer per sheet)
    import math

    import kvcalc

    r = kvcalc.fit("llama-3.1-70b", "h100", tp=4, seq=8192, engine="sglang", tpot_ms=40, engine_version="0.5.5")
    assert r.sglang is not None and math.floor(r.sglang.max_concurrency) == 49 and r.max_batch == 49
    assert r.ok and "under SGLang 0.5.5 (49.38x concurrency" in r.verdict
    assert "meets TPOT 40 ms (estimate, sglang) up to batch 49; the ceiling would allow 49" in r.verdict
    assert r.slo is not None and (r.slo.batch, r.slo.ceiling_batch) == (49, 49)  # the search stops at the pool
    # one capacity per answer: the KV capacity and concurrency quoted are SGLang's pool's, as vLLM's are vLLM's
    assert r.capacity_basis == "SGLang 0.5.5" and r.max_concurrency == r.sglang.max_concurrency
    assert r.kv_capacity_tokens == r.sglang.kv_capacity_tokens == 404_556


def test_gpt_oss_experts_in_sglangs_kernel_layouts():
    # SGLang 0.5.5 on Hopper (triton_kernel, sgl-kernel's triton_kernels): gpt-oss-20b at tp 2, 24 layers of 32
    # experts, hidden 2,880, intermediate 1,440 a rank (already a multiple of 32). Values swizzled with rows to 16
    # and byte columns to 32 ([E, 2,880, 1,440] and [E, 2,880, 720 -> 736]); the checkpoint's scales ([E, 2,880,
    # 90], [E, 2,880, 45]) kept beside swizzled copies (rows to 256, columns to 2: [E, 3,072, 90], [E, 3,072, 46]);
    # fp32 biases. Unlike vLLM 0.19's copy, no 64-padding of the values.
    from kvcalc.engines.weights import weight_bytes
    from kvcalc.model.formats import quantization_of

    per_layer = (
        32 * 2880 * 1440
        + 32 * 2880 * 736
        + 32 * 2880 * 90
        + 32 * 2880 * 45
        + 32 * 3072 * 90
        + 32 * 3072 * 46
        + 2 * 32 * 2880 * 4
    )
    spec = get_model("gpt-oss-20b")
    sglang = weight_bytes(spec, "bf16", quantization_of(spec, None), tp=2, mxfp4_layout="sglang-triton")
    assert sglang.experts == 24 * per_layer == 24 * 227_088_384
    vllm = weight_bytes(spec, "bf16", quantization_of(spec, None), tp=2, mxfp4_layout="vllm-triton")
    assert vllm.experts - sglang.experts == 24 * (236_810_240 - 227_088_384)
    # the pool reads each GPU's layout: H100's swizzled one against A100's strided view (same load overhead)
    strided = weight_bytes(spec, "bf16", quantization_of(spec, None), tp=2, mxfp4_layout="sglang-strided")
    h100, a100 = (
        predict(spec, get_gpu(g), SglangSettings(release="0.5.5", tp=2), seq=8192).weights_bytes
        for g in ("h100", "a100")
    )
    assert h100 - a100 == sglang.total - strided.total > 0


def test_the_largest_batch_and_context_under_sglang_are_its_pools():
    # Llama-3.1-70B on 4 x H100, 60 requests of 8k: SGLang 0.5.5's pool holds 404,556 tokens (page 1), so 49 whole
    # requests (404,556 // 8,192) and, at batch 60, contexts of 404,556 // 60 = 6,742 tokens; kvcalc's own bytes
    # would say 54 and 7,504. The sheet, the verdict and the JSON all give the pool's figures.
    out = run("fit", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--seq", "8k", "--batch", "60", "--engine", "sglang",
              "--engine-version", "0.5.5")  # fmt: skip
    assert out.exit_code == 3
    assert "Largest batch at 8,192 tokens (SGLang 0.5.5's pool): 49." in out.stdout
    assert "Largest context at batch 60 (SGLang 0.5.5's pool): 6,742 tokens." in out.stdout
    assert "the largest batch it holds is 49" in out.stdout
    r = json.loads(run("fit", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--seq", "8k", "--batch", "49",
                       "--engine", "sglang", "--engine-version", "0.5.5", "--format", "json").stdout)  # fmt: skip
    row = r[0] if isinstance(r, list) else r
    assert row["fits"] and row["max_batch"] == 49 and row["max_seq"] == 404_556 // 49


def test_fit_under_sglang_divides_the_gpu_as_sglang_does():
    # The per-GPU table under --engine sglang is SGLang's own division of one rank, summing to the CUDA total:
    # in use before load + weights as loaded + (1 - mem_fraction_static) of the memory free before load + the
    # pools (+ what whole pages leave). Llama-3.1-70B on 4 x H100, 60 x 8k: 491,520 tokens asked of 404,556.
    from kvcalc.units import fmt_bytes

    args = ("fit", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--seq", "8k", "--batch", "60", "--engine", "sglang",
            "--engine-version", "0.5.5")  # fmt: skip
    p = json.loads(run(*args, "--format", "json").stdout)
    p = (p[0] if isinstance(p, list) else p)["sglang"]
    before = p["cuda_total_bytes"] - p["pre_load_free_bytes"]
    held = int(p["pre_load_free_bytes"] * (1 - p["mem_fraction_static"]))
    pool = p["k_bytes"] + p["v_bytes"]
    assert pool == (404_556 + 1) * p["cell_bytes"]  # SGLang's buffers hold a padding slot beyond #tokens
    left = p["cuda_total_bytes"] - before - p["weights_bytes"] - held - pool
    assert abs(left) < p["cell_bytes"]  # whole tokens of the pool, and nothing else, are left (the padding slot: over)
    out = run(*args).stdout
    for word, n in (("before load", before), ("weights", p["weights_bytes"]), ("held back", held), ("KV pool", pool)):
        (line,) = [x for x in out.splitlines() if x.strip().startswith(f"{word}  ")]
        assert fmt_bytes(n) in line
    assert "491,520 of the pool's 404,556, DOES NOT FIT" in out
    assert "Accounting: SGLang 0.5.5: weights as it loads them" in out and "vLLM" not in out.split("Verdict")[0]


def test_a_context_beyond_the_configs_is_refused_from_0_5_1():
    # ModelConfig._derive_context_length: Llama-3-8B's config derives 8,192; --context-length 16,384 is a ValueError
    # from 0.5.1 (SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN defaults to false), a warning in 0.4.6 - 0.5.0
    out = run("fit", "llama-3-8b", "--gpu", "h100", "--engine", "sglang", "--seq", "16k", "--format", "json")
    assert out.exit_code == 3
    d = json.loads(out.stdout)
    p = d["sglang"]
    assert p["context_limit"] == 8192 and not p["fits"]
    assert p["refusal"].startswith(
        "ValueError: Warning: User-specified context_length (16384) is greater than the derived context_length (8192)."
    )
    assert p["refusal"].endswith("set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1")
    assert p["log_lines"] == [p["refusal"]]  # refused before the weights load
    assert p["max_total_num_tokens"] > 400_000  # the pool it would have had at its own length
    assert d["max_seq"] == 8192  # SGLang starts at the config's length, and the pool holds it
    older = run("fit", "llama-3-8b", "--gpu", "h100", "--engine", "sglang", "--seq", "16k", "--engine-version", "0.4.9")
    assert older.exit_code == 0 and "fits on one h100 under SGLang 0.4.9" in older.stdout
    assert rel.context_refusal((0, 5, 5), 8192, 8192) is None and rel.context_refusal((0, 5, 0), 9000, 8192) is None


@pytest.mark.parametrize(
    "fixture, length",
    [
        ("qwen-72b.json", 8192),  # seq_length comes before max_position_embeddings (32,768) in SGLang's keys
        ("gemma-3-4b.json", 1048576),  # linear factor 8 x 131,072: no original_max_position_embeddings
        ("llama-3.1-70b.json", 131072),  # llama3 rope: factor 1
        ("gpt-oss-120b.json", 131072),  # YaRN with original_max_position_embeddings: factor 1
    ],
)
def test_sglangs_context_length_is_read_as_sglang_reads_the_config(fixture, length):
    from conftest import FIXTURES

    from kvcalc.engines.lengths import config_context_len
    from kvcalc.model.hf.reader import spec_from_config

    raw = json.loads((FIXTURES / "real_configs" / fixture).read_text())
    assert config_context_len(spec_from_config(raw, "x", "test")) == length


def test_without_seq_sglangs_context_len_is_the_configs_as_a_default_launch_has_it():
    # A server launched without --context-length logs context_len=131072 for Llama-3.1-8B, and its
    # max_running_requests follows from it: max(min(tokens / context_len x 512, 4096), 2048) = 2048 on a 24 GB card
    # (../shared/reference/sglang_logs.json, sgl-maxuhl98-thesis-llama8b-24gb); with --seq 8k it is SGLang's
    # --context-length 8192, and tokens / 8192 x 512 requests
    args = (
        "fit",
        "llama-3.1-8b",
        "--gpu",
        "rtx-4090",
        "--engine",
        "sglang",
        "--format",
        "json",
        "--engine-version",
        "0.5.5",
    )
    default = json.loads(run(*args).stdout)
    p = default["sglang"]
    assert p["context_len"] == 131072 and p["max_running_requests"] == 2048 and default["seq"] == 8192
    given = json.loads(run(*args, "--seq", "8k").stdout)["sglang"]
    assert given["context_len"] == 8192
    assert given["max_running_requests"] == int(given["max_total_num_tokens"] / 8192 * 512) > 2048


def test_sglang_pools_every_layer_even_where_it_reads_an_earlier_layers_kv():
    # SGLang 0.5.5 profile_max_num_token: cell = KV heads x head_dim x num_effective_layers x 2 x element, every
    # layer of the model, so Hunyuan-Large's 32 CLA layers (reading the layer before's K and V) take slots too:
    # 8 KV heads / tp 8 x 80 x (K + V) x 2 B x 64 layers, where the cache they use holds 32 of them
    from kvcalc.cost.kvcache import bytes_per_token

    spec = get_model("hunyuan-large")
    assert cell_bytes(spec, "bf16", 8)[0] == 1 * 80 * 2 * 2 * 64
    assert bytes_per_token(spec, "bf16") == 8 * 80 * 2 * 2 * 32


def test_max_running_requests_and_the_refusal_by_release():
    # 6,000 tokens at context 8,192: the estimate max(min(6,000 / 8,192 x 512, 4,096), 2,048) = 2,048; half the pool
    # 3,000. A given 5,000: 0.5.5-0.5.9 keep it (their request pool is that size), 0.5.10-0.5.13 cap it at the
    # estimate, 0.5.14 on at half the pool; 0.5.23 keeps one a rank where the given count is below the DP size.
    got = [rel.max_running_requests(rel.parse_release(v), 6000, 8192, 5000, 1) for v in ("0.5.9", "0.5.10", "0.5.14")]
    assert got == [5000, 2048, 3000]
    assert [rel.max_running_requests((0, 5, v), 6000, 8192, 1, 2) for v in (22, 23)] == [0, 1]
    assert rel.max_running_requests((0, 5, 12), 6000, 8192, None, 1) == 2048
    words = {v: rel.refusal((0, 5, v), 0.88, 1.0, 10.0) for v in (9, 10, 12, 14)}
    assert words[9].endswith("Current value: self.server_args.mem_fraction_static=0.88")
    assert words[10].endswith("--mem-fraction-static. Current value: mem_fraction_static=0.88")
    assert words[12] == "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    assert words[14].startswith("ValueError: Loaded weights leave no GPU memory") and "above 0.900" in words[14]


def test_trtllm_mha_pages_64_tokens_on_sm100_from_0_5_7():
    # server_args.py: trtllm_mha is an MHA model's default backend on SM100 from 0.5.7, and any page size but 16, 32
    # or 64 becomes 64; MLA models, Hopper and RTX-class Blackwell (SM120) keep the page asked
    b200, h100, llama, r1 = get_gpu("b200"), get_gpu("h100"), get_model("llama-3.1-8b"), get_model("deepseek-v3")
    assert [rel.page_size((0, 5, v), 1, llama, b200, False) for v in (6, 7, 23)] == [1, 64, 64]
    assert (
        rel.page_size((0, 5, 23), 32, llama, b200, False) == 32
        and rel.page_size((0, 5, 23), 128, llama, b200, False) == 64
    )
    assert rel.page_size((0, 5, 23), 1, llama, h100, False) == 1
    assert rel.page_size((0, 5, 23), 1, llama, get_gpu("rtx-5090"), False) == 1
    assert rel.page_size((0, 5, 23), 1, r1, b200, True) == 1
    pool = predict(llama, b200, SglangSettings(), seq=4096)
    assert pool.page_size == 64 and pool.max_total_num_tokens % 64 == 0


def test_gpt_oss_mxfp4_layout_follows_the_release_and_the_card():
    # quantization/mxfp4.py and server_args.py's gpt-oss defaults, wheel by wheel
    names = {
        g: [rel.mxfp4_layout(get_gpu(g), (0, 5, v)) for v in (5, 10, 14, 17, 23)]
        for g in ("b200", "h100", "a100", "rtx-pro-6000", "mi300x")
    }
    assert names == {
        "b200": ["sglang-flashinfer"] * 3 + ["sglang-flashinfer-128"] * 2,
        "h100": ["sglang-triton"] + ["sglang-triton-64"] * 4,
        "a100": ["sglang-strided"] + ["sglang-strided-64"] * 4,
        "rtx-pro-6000": [
            "sglang-flashinfer-sm120",
            "sglang-strided-64",
            "vllm-marlin",
            "sglang-cutlass-sm120",
            "sglang-cutlass-sm120",
        ],
        "mi300x": [None] * 5,
    }
    # gpt-oss-120b on one SM120 card under 0.5.23: 128 experts, intermediate 2,880 -> 2,944 (128), hidden 2,880 ->
    # 3,072 (256): values 2 x 2,944 x 3,072 / 2 + 3,072 x 2,944 / 2, scales 5,888 x 96 + 3,072 x 92 a expert, biases in
    # bf16 (5,888 + 3,072) x 2, four fp32 [128] tensors; each tensor booked as PyTorch's allocator does (the w13
    # scales' 72,351,744 B keep their whole 2 MiB-rounded segment)
    from kvcalc.engines.weights import allocated, weight_bytes
    from kvcalc.model.formats import quantization_of

    spec = get_model("gpt-oss-120b")
    per_expert = (2944 * 3072, 3072 * 2944 // 2, 5888 * 96, 3072 * 92, 5888 * 2, 3072 * 2)
    layout = rel.mxfp4_layout(get_gpu("rtx-pro-6000"), (0, 5, 23))
    w = weight_bytes(spec, "bf16", quantization_of(spec, None), mxfp4_layout=layout)
    assert w.experts == 36 * (sum(allocated(128 * t) for t in per_expert) + 4 * 512) == 36 * 1_848_313_856


def test_multimodal_cache_kept_out_of_the_pool_by_release():
    # kv_cache_configurator.mm_runtime_reservation_gb from 0.5.18: SGLANG_VLM_CACHE_SIZE_MB (100); from 0.5.20 Qwen3-VL
    # on a Hopper card of 60 GiB or more has no embedding cache but cuda_ipc's 1 GiB feature pool (3 GiB at 400 or more
    # running requests); a model served text-only keeps nothing
    def reserve(release, arch, large=True, running=None, mm=True):
        return graphs.multimodal_reserve_mib(release, arch, multimodal=mm, large_hopper=large, max_running=running)

    qwen3, qwen25 = "Qwen3VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration"
    assert [reserve((0, 5, v), qwen3) for v in (17, 18, 19, 20, 23)] == [0, 100, 100, 1024, 1024]
    assert (reserve((0, 5, 23), qwen3, running=400), reserve((0, 5, 23), qwen3, large=False)) == (3072, 100)
    assert (reserve((0, 5, 23), qwen25), reserve((0, 5, 23), qwen25, mm=False)) == (100, 0)
    spec, h100 = get_model("qwen3-vl-32b"), get_gpu("h100")
    before, after = (predict(spec, h100, SglangSettings(release=v, tp=2), seq=4096) for v in ("0.5.19", "0.5.20"))
    assert before.available_kv_bytes - after.available_kv_bytes == (1024 - 100) * 2**20


def test_a_qwen35_state_as_sglang_holds_it():
    # Qwen3.5-9B's 24 GDN layers (16 key and 32 value heads of 128, 4 conv taps): a float32 128 x 128 state a value
    # head and 3 bf16 conv steps of 2 x 16 x 128 + 32 x 128 channels, 51.5 MB a request; sgl-project/sglang PR #39851
    # puts "a full SSM snapshot" at "~51 MB for Qwen3.5-4B", whose linear-attention layers have these shapes
    from kvcalc.engines.sglang.mamba import state_bytes_per_request

    layer = 32 * 128 * 128 * 4 + 3 * (2 * 16 * 128 + 32 * 128) * 2
    assert state_bytes_per_request(get_model("qwen3.5-9b")) == 24 * layer == 51_511_296
