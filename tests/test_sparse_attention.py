"""DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): the indexer's own cache, its weights, the top-k read
and scoring, and how vLLM and SGLang size the pool for it, each figure derived by hand from the real
configs (tests/fixtures/real_configs/glm-5.json, deepseek-v3.2.json)."""

import pytest
from conftest import FIXTURES, run, run_json

from kvcalc.cost.flops import causal_pairs, decode_attention_flops, prefill_attention_flops
from kvcalc.cost.kvcache import cache_bytes
from kvcalc.cost.params import param_counts
from kvcalc.cost.step import SINGLE, kv_bytes, stage_decode_flops, stages
from kvcalc.engines.sglang.pool import SglangSettings, predict
from kvcalc.engines.vllm.figures import vllm_figures
from kvcalc.errors import SpecError, UsageError
from kvcalc.model.presets import get_gpu, get_model

GIB = 2**30
INDEX = 128 + 4  # one token's indexer key: 128 fp8 + one fp32 scale per 128 (vLLM and SGLang alike)


def test_glm5_cache_per_token_by_hand():
    # 78 MLA layers: (512 latent + 64 RoPE) elements each, plus 132 B of indexer keys in every KV dtype
    bf16 = run_json("cache", "zhipuai/GLM-5", "--seq", "1000", "--batch", "2")
    assert bf16["bytes_per_token"] == 78 * 576 * 2 + 78 * INDEX == 100_152
    assert bf16["total_bytes"] == 2 * 1000 * 100_152
    fp8 = run_json("cache", "glm-5", "--seq", "1000", "--kv-dtype", "fp8")
    assert fp8["bytes_per_token"] == 78 * 576 + 78 * INDEX == 55_224


def test_deepseek_v32_is_v3_plus_the_indexer():
    v3, v32 = get_model("deepseek-v3"), get_model("deepseek-v3.2")
    assert run_json("cache", "deepseek-ai/DeepSeek-V3.2-Exp", "--seq", "1")["bytes_per_token"] == 61 * (1152 + INDEX)
    # per layer: wq_b 1536 -> 64 x 128, wk 7168 -> 128, k_norm weight + bias, weights_proj 7168 -> 64
    indexer = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
    assert indexer == 13_959_424
    assert param_counts(v32).total - param_counts(v3).total == 61 * indexer
    assert param_counts(v32).active - param_counts(v3).active == 61 * indexer


def test_glm5_parameters_are_the_published_744b():
    counts = param_counts(get_model("glm-5"))
    indexer = 2048 * 32 * 128 + 6144 * 128 + 2 * 128 + 6144 * 32
    assert indexer == 9_371_904
    assert round(counts.total / 1e9) == 744  # Z.ai: 744B parameters, 40B active (MTP layer not counted)
    assert round(counts.active_excl_embedding / 1e9) == 41


def test_decode_reads_the_top_k_latent_and_every_indexer_key():
    spec = get_model("glm-5")
    (stage,) = stages(spec, SINGLE, None)
    # below top-k every held token is read; past it, 2,048 latent rows but all 10,000 indexer keys
    assert kv_bytes(stage, 3, 1500, "bf16") == 3 * 78 * 1500 * (1152 + INDEX)
    assert kv_bytes(stage, 3, 10_000, "bf16") == 3 * 78 * (2048 * 1152 + 10_000 * INDEX)
    # the cache itself holds every token
    assert cache_bytes(spec, 3, 10_000, "bf16") == 3 * 78 * 10_000 * (1152 + INDEX)


def test_attention_flops_count_top_k_keys_and_the_indexer_scoring():
    spec = get_model("glm-5")
    absorbed = 2 * 64 * ((512 + 64) + 512)  # MLA decode over the latent, per key
    scoring = 2 * 32 * 128  # the indexer: 32 heads x 128 per scored key
    assert decode_attention_flops(spec, 10_000) == 78 * (absorbed * 2048 + scoring * 10_000)
    (stage,) = stages(spec, SINGLE, None)
    assert stage_decode_flops(stage, 1, 10_000) - 2 * stage.compute_params == 78 * (absorbed * 2048 + scoring * 10_000)
    # prefill without absorption (qk 192 + 64, v 256): query i attends to min(i, 2048) keys
    per_pair = 2 * 64 * (256 + 256)
    expected = 78 * (per_pair * causal_pairs(5000, 2048) + scoring * causal_pairs(5000))
    assert prefill_attention_flops(spec, 5000) == expected
    assert causal_pairs(5000, 2048) == 2048 * 2049 // 2 + (5000 - 2048) * 2048


def test_vllm_pool_sums_latent_and_indexer_pages_in_blocks_of_64():
    spec = get_model("glm-5")
    available = round(30.5 * GIB)
    v = vllm_figures(spec, available, kv_dtype="bf16", tp=8, seq=8192)
    page = 64 * 78 * (1152 + INDEX)  # one block of every layer's latent and indexer keys
    assert v.block_size == 64
    assert v.num_blocks == available // page
    assert v.kv_cache_tokens == available // page * 64


@pytest.mark.parametrize(
    ("gpu", "kv_dtype", "per_layer"),
    [
        ("h200", None, 1152 + INDEX),  # Hopper: auto is the model's bf16
        ("b200", None, 576 + INDEX),  # Blackwell: auto is fp8, stored raw for the trtllm backend
        ("h200", "fp8", 656 + INDEX),  # fp8 on Hopper: flashmla_kv's 512 fp8 + 4 fp32 scales + 64 bf16 RoPE
    ],
)
def test_sglang_cell_and_page_for_dsa(gpu, kv_dtype, per_layer):
    spec = get_model("glm-5")
    pool = predict(
        spec, get_gpu(gpu), SglangSettings(release="0.5.23", tp=8, kv_dtype=kv_dtype), seq=8192, batch=1, dtype="fp8"
    )
    assert pool.cell_bytes == 78 * per_layer
    assert pool.page_size == 64 and pool.max_total_num_tokens % 64 == 0
    assert pool.max_total_num_tokens == int(pool.available_kv_bytes // pool.cell_bytes) // 64 * 64


def test_llamacpp_caches_the_indexer_keys_and_older_builds_refuse():
    # llama-kv-cache-dsa.cpp (2026-04 era): beside the K-only latent, one 128-wide indexer key a token for each layer
    # with an indexer of its own: DeepSeek-V3.2's 61; GLM-5.2's, whose other layers reuse an earlier top-k, only those
    from kvcalc.engines.llamacpp.eras import era
    from kvcalc.engines.llamacpp.kv import kv_parts

    parts, refusal = kv_parts(get_model("deepseek-v3.2"), 4096, era(None))
    lid = {p.cache: p for p in parts}["indexer"]
    assert refusal is None and (lid.layers, lid.k_bytes, lid.v_bytes) == (61, 61 * 4096 * 128 * 2, 0)
    glm = get_model("glm-5.2")
    own = [i for i, r in enumerate(glm.expanded_layers()) if not r.index_shared]
    assert 0 < len(own) < glm.num_layers
    lid = {p.cache: p for p in kv_parts(glm, 4096, era(None))[0]}["indexer"]
    assert lid.layer_ids == own and lid.k_bytes == len(own) * 4096 * (glm.index_head_dim or 0) * 2
    with pytest.raises(UsageError, match="no DeepSeek Sparse Attention cache"):
        kv_parts(get_model("deepseek-v3.2"), 4096, era("2026-01"))


def test_reader_takes_the_indexer_fields_and_refuses_what_it_cannot_read(tmp_path):
    import json

    shown = run_json("show", FIXTURES / "configs" / "deepseek-v32-indexer.json")["spec"]
    assert (shown["index_heads"], shown["index_head_dim"], shown["index_topk"]) == (64, 128, 2048)
    # 4 layers of (64 + 16) bf16 latent elements and 132 B of indexer keys
    out = run_json("cache", FIXTURES / "configs" / "deepseek-v32-indexer.json", "--seq", "10")
    assert out["bytes_per_token"] == 4 * (80 * 2 + INDEX)
    config = json.loads((FIXTURES / "configs" / "deepseek-v32-indexer.json").read_text())
    for extra, message in (
        (
            {"compress_ratios": [0, 4]},
            "compress_ratios (DeepSeek-V4's compressed attention) in a 'deepseek_v32' config",
        ),
        ({"index_topk_freq": 4}, "index_topk_freq / index_skip_topk_offset without indexer_types"),
        ({"indexer_types": ["full", "shared"]}, "indexer_types must list 'full' or 'shared' for each of the 4 layers"),
    ):
        path = tmp_path / "config.json"
        path.write_text(json.dumps(config | extra))
        result = run("cache", str(path))
        assert result.exit_code == 1 and message in result.stderr


def test_serving_under_sglang_uses_the_dsa_pool():
    out = run_json(
        "generate", "glm-5", "--gpu", "b200", "--tp", "8", "--engine", "sglang", "--dtype", "fp8",
        "--concurrency", "8", "--prompt", "1024", "--new", "64", "--format", "json",
    )  # fmt: skip
    est = out["estimate"]
    assert est["tpot_s"] >= out["tpot_s"] and est["ttft_s"] >= out["ttft_s"]  # never faster than the ceiling
    # with no --kv-dtype, generate caches as SGLang does when started without one: fp8 for DSA on Blackwell,
    # its latent stored raw: 78 x (576 + 132) B a token, in 64-token pages
    assert out["kv_dtype"] == "fp8"
    pool = predict(get_model("glm-5"), get_gpu("b200"), SglangSettings(tp=8), seq=1024 + 64, batch=8, dtype="fp8")
    assert pool.cell_bytes == 78 * (576 + INDEX) and pool.page_size == 64
    assert out["kv_capacity_tokens"] == pool.max_total_num_tokens
    # the Python API takes the same default
    from kvcalc import api

    served = api.generate("glm-5", "b200", tp=8, engine="sglang", dtype="fp8", concurrency=8, prompt=1024, new=64)
    assert served.kv_dtype == "fp8" and served.kv_capacity_tokens == pool.max_total_num_tokens


@pytest.mark.parametrize(
    ("gpu", "engine", "kv_given", "kv_used", "cell"),
    [
        ("b200", "sglang", "bf16", "bf16", 78 * (1152 + INDEX)),  # an explicit dtype wins
        ("h200", "sglang", None, "bf16", 78 * (1152 + INDEX)),  # SGLang's auto is fp8 on Blackwell only
    ],
)
def test_generate_kv_dtype_is_the_engines_default_unless_given(gpu, engine, kv_given, kv_used, cell):
    args = ["generate", "glm-5", "--gpu", gpu, "--tp", "8", "--engine", engine, "--dtype", "fp8"]
    args += ["--concurrency", "8", "--prompt", "1024", "--new", "64", "--format", "json"]
    out = run_json(*args, *(["--kv-dtype", kv_given] if kv_given else []))
    assert out["kv_dtype"] == kv_used
    pool = predict(
        get_model("glm-5"), get_gpu(gpu), SglangSettings(tp=8, kv_dtype=kv_given), seq=1088, batch=8, dtype="fp8"
    )
    assert pool.cell_bytes == cell and out["kv_capacity_tokens"] == pool.max_total_num_tokens


def test_each_engines_auto_kv_dtype():
    from kvcalc.plan.kv_auto import auto_kv_dtype

    glm5, v32, llama = get_model("glm-5"), get_model("deepseek-v3.2"), get_model("llama-3.1-8b")
    b200, h200, rtx = get_gpu("b200"), get_gpu("h200"), get_gpu("rtx-5090")
    # SGLang (server_args, DSA overrides): fp8 for a DSA model on SM 10-12, else the served 16-bit type
    assert [
        auto_kv_dtype(m, g, "sglang", None) for m, g in [(glm5, b200), (v32, rtx), (glm5, h200), (llama, b200)]
    ] == ["fp8", "fp8", "bf16", "bf16"]
    # vLLM 0.19: the served type whatever the GPU (GLM-5's fp8 default on SM100 arrived in 0.32)
    assert {auto_kv_dtype(m, g, "vllm", None) for m in (glm5, v32, llama) for g in (b200, h200)} == {"bf16"}
    assert auto_kv_dtype(glm5, b200, None, None) == auto_kv_dtype(glm5, b200, "trtllm", None) == "bf16"


def test_dsa_fields_come_together_and_only_with_mla():
    spec = get_model("glm-5")
    with pytest.raises(Exception, match="needs index_heads, index_head_dim and index_topk"):
        spec.with_changes(index_topk=None)
    with pytest.raises(Exception, match="need MLA"):
        get_model("llama-3-8b").with_changes(index_heads=8, index_head_dim=128, index_topk=64)


def test_explain_names_the_sparse_form():
    out = run("roofline", "glm-5", "--gpu", "h200", "--tp", "8", "--batch", "1", "--seq", "16k", "--explain")
    assert "over the indexer's top 2,048 tokens only, and the indexer's 2 × 32 heads × 128 FLOPs" in out.stdout
    # 1 sequence: 78 layers x (2,048 latent rows x 1,152 B + 16,384 indexer keys x 132 B)
    assert f"KV read {78 * (2048 * 1152 + 16384 * INDEX):,} B (1 sequence x 16,384 cached tokens)" in out.stdout


def test_head_variants_of_a_dsa_model_drop_the_indexer_with_the_latent():
    out = run_json("compare", "mha", "gqa", "-m", "glm-5", "--batch", "1", "--seq", "1000")
    rows = {r["name"]: r for r in out["rows"]}
    assert rows["mha"]["bytes_per_token"] == 2 * 78 * 64 * 64 * 2  # 64 KV heads x head_dim 64, no indexer keys


def test_glm52_layers_sharing_an_indexer_hold_no_keys_of_their_own():
    # indexer_types: 3 "full", then 3 "shared" + 1 "full" repeated: 21 layers with an indexer, 57 without
    spec = get_model("zai-org/GLM-5.3")  # GLM-5.2's config, field for field
    assert sum(n for run, n in spec.layer_groups() if run.index_shared) == 57
    assert run_json("cache", "glm-5.2", "--seq", "1")["bytes_per_token"] == 78 * 1152 + 21 * INDEX == 92_628
    per_layer = 2048 * 32 * 128 + 6144 * 128 + 2 * 128 + 6144 * 32
    assert param_counts(get_model("glm-5")).total - param_counts(spec).total == 57 * per_layer
    (stage,) = stages(spec, SINGLE, None)
    assert kv_bytes(stage, 1, 10_000, "bf16") == 78 * 2048 * 1152 + 21 * 10_000 * INDEX
    scoring, absorbed = 2 * 32 * 128, 2 * 64 * (576 + 512)
    assert decode_attention_flops(spec, 10_000) == 78 * absorbed * 2048 + 21 * scoring * 10_000
    # vLLM: one attention type whose pages differ is one group, a block being every layer's page summed
    v = vllm_figures(spec, 10 * GIB, kv_dtype="bf16", tp=8, seq=8192)
    assert v.num_blocks == 10 * GIB // (64 * 92_628) and v.kv_cache_tokens == v.num_blocks * 64
    # MLA rotates its 64 RoPE dims, not GLM-5.2's head_dim of 192
    assert spec.checkpoint is not None and spec.checkpoint.rotary_dim == 64
    # SGLang 0.5.23 (pool_configurator._compute_dsa_indexer_cell_size): only the layers that score their own
    # top-k count an indexer key in the cell; auto is fp8 on Blackwell, the model's bf16 on Hopper
    glm52 = get_model("glm-5.2")
    for gpu, latent in (("b200", 576), ("h200", 1152)):
        pool = predict(glm52, get_gpu(gpu), SglangSettings(tp=8), seq=1088, batch=8, dtype="fp8")
        assert pool.cell_bytes == 78 * latent + 21 * INDEX


def test_glm52_layer_types_as_transformers_5_11_saves_them():
    # nvidia/GLM-5.2-NVFP4's config (transformers 5.11) names all 78 layers deepseek_sparse_attention; which of them
    # score their own top-k is indexer_types' to say, as in the hub file
    import json

    from kvcalc.model.hf.reader import spec_from_config

    raw = json.loads((FIXTURES / "real_configs" / "glm-5.2.json").read_text())
    saved = spec_from_config({**raw, "layer_types": ["deepseek_sparse_attention"] * 78}, "glm-5.2", "GLM-5.2")
    assert sum(n for run, n in saved.layer_groups() if run.index_shared) == 57
    assert cache_bytes(saved, 1, 1, "bf16") == 78 * 1152 + 21 * INDEX == 92_628
    assert param_counts(saved).total == param_counts(spec_from_config(raw, "glm-5.2", "GLM-5.2")).total
    with pytest.raises(SpecError, match="layer_types mixing deepseek_sparse_attention, sliding_attention"):
        spec_from_config({**raw, "layer_types": ["deepseek_sparse_attention", "sliding_attention"] * 39}, "x", "x")
