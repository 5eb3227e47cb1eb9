"""DeepSeek-V4's compressed attention, read from its hub configs (tests/fixtures/real_configs, vendored by
aiconfigurator-core 0.12.0) and checked against figures derived by hand from transformers 5.25's DeepseekV4 modules
(docs/deepseek_v4.md): the cache of the window, compressed and index entries, the parameters, the reads and FLOPs
a step takes, and the engines' refusals."""

import json
from fractions import Fraction

import pytest
from conftest import FIXTURES, run, run_json

from kvcalc.cost.flops import _compressed_sum, compressed_pairs, decode_attention_flops, prefill_attention_flops
from kvcalc.cost.kvcache import attended_tokens, cache_bytes, cache_report, index_tokens_held, tokens_held
from kvcalc.cost.params import param_counts
from kvcalc.errors import SpecError
from kvcalc.model.hf.reader import spec_from_config
from kvcalc.model.presets import get_model
from kvcalc.model.spec import LayerKind, LayerRun

CONFIGS = FIXTURES / "real_configs"


def _config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def _spec(name: str):
    return spec_from_config(_config(name), name, name)


def _groups(spec) -> dict[tuple[int | None, bool], int]:
    return {(run.compress_ratio, run.compress_topk): n for run, n in spec.layer_groups()}


def test_flash_layers_window_csa_and_hca():
    # compress_ratios: 0, 0, then 4 / 128 alternating to layer 42 (a 4); the 44th entry is the MTP layer's
    spec = _spec("deepseek-v4-flash")
    assert spec.num_layers == 43 and spec.compressed_attention
    assert _groups(spec) == {(None, False): 2, (4, True): 21, (128, False): 20}
    assert {run.window_tokens for run, _ in spec.layer_groups()} == {128}
    assert (spec.kv_lora_rank, spec.qk_rope_head_dim, spec.head_dim_effective) == (448, 64, 512)
    assert spec.expert_dtype == "mxfp4" and spec.dtype == "fp8"  # expert_dtype "fp4" beside the fp8 blocks
    assert spec.checkpoint is not None and spec.checkpoint.rotary_dim == 64


def test_flash_cache_at_a_million_tokens_by_hand():
    spec = _spec("deepseek-v4-flash")
    seq = 1_048_576
    # entries: 2 window layers x 128; 21 CSA x (128 + seq // 4); 20 HCA x (128 + seq // 128), each 512 elements
    entries = 2 * 128 + 21 * (128 + 262_144) + 20 * (128 + 8_192)
    index = 21 * 262_144 * (128 + 4)  # one fp8 key and an fp32 scale per compressed entry of a CSA layer
    assert cache_bytes(spec, 1, seq, "bf16") == entries * 512 * 2 + index == 6_537_216_000
    assert cache_bytes(spec, 1, seq, "fp8") == entries * 512 + index


def test_flash_bytes_per_token_while_the_windows_grow_and_after():
    spec = _spec("deepseek-v4-flash")
    report = cache_report(spec, 1, 8192, "bf16")
    # growing: every layer's window entry (43 x 512) + 21 x 512 / 4 + 20 x 512 / 128, and 21 x 132 / 4 index bytes
    assert report.bytes_per_token == (43 * 512 + 21 * 128 + 20 * 4) * 2 + 21 * 33 == 50_261
    # past the 128-token windows: 21 x (1,024 / 4 + 33) + 20 x 1,024 / 128 (the doc's formula, bf16 entries)
    assert report.bytes_per_token_past_windows == 21 * (256 + 33) + 20 * 8 == 6_229
    fp8 = cache_report(spec, 1, 8192, "fp8")
    assert fp8.bytes_per_token_past_windows == 21 * (128 + 33) + 20 * 4


def test_a_partial_group_stays_in_the_compressor():
    csa = LayerRun(kind=LayerKind.MLA, window_tokens=128, compress_ratio=4, compress_topk=True)
    hca = LayerRun(kind=LayerKind.MLA, window_tokens=128, compress_ratio=128)
    assert tokens_held(csa, 1_003) == 128 + 250 and index_tokens_held(csa, 1_003) == 250
    assert tokens_held(hca, 1_003) == 128 + 7 and index_tokens_held(hca, 1_003) == 7
    assert tokens_held(hca, 100) == 100  # inside the window, no whole group of 128 yet


def test_attention_reads_the_window_and_the_top_k():
    csa = LayerRun(kind=LayerKind.MLA, window_tokens=128, compress_ratio=4, compress_topk=True)
    hca = LayerRun(kind=LayerKind.MLA, window_tokens=128, compress_ratio=128)
    assert attended_tokens(csa, 32_768, 512) == 128 + 512  # 8,192 compressed entries, the indexer's top 512 read
    assert attended_tokens(csa, 1_000, 512) == 128 + 250
    assert attended_tokens(hca, 32_768, 512) == 128 + 256  # an HCA layer reads every compressed entry


def test_decode_flops_by_hand():
    spec = _spec("deepseek-v4-flash")
    seq = 32_768
    per_entry = 2 * 64 * (512 + 512)  # 64 heads score and read the one 512-wide entry (K = V)
    attended = 2 * 128 + 21 * (128 + 512) + 20 * (128 + 256)
    scored = 21 * (seq // 4) * 2 * 64 * 128  # the CSA indexer: 64 heads x 128 over every compressed entry
    assert decode_attention_flops(spec, seq) == per_entry * attended + scored


@pytest.mark.parametrize("ratio,cap", [(4, None), (4, 100), (128, None), (4, 1), (128, 3)])
def test_compressed_prefill_pairs_match_counting(ratio, cap):
    for prompt in (1, 3, 4, 5, 127, 128, 129, 1_000, 1_003):
        counted = sum(i // ratio if cap is None else min(cap, i // ratio) for i in range(1, prompt + 1))
        assert _compressed_sum(prompt, ratio, cap) == counted, (prompt, ratio, cap)


def test_prefill_flops_by_hand():
    spec = _spec("deepseek-v4-flash")
    p = 1_000
    window = 128 * 129 // 2 + (p - 128) * 128  # query i sees min(i, 128) raw tokens
    csa = LayerRun(kind=LayerKind.MLA, window_tokens=128, compress_ratio=4, compress_topk=True)
    assert compressed_pairs(csa, p, 512) == (window + sum(i // 4 for i in range(1, p + 1)), 124_750)
    pairs = 2 * window + 21 * (window + 124_750) + 20 * (window + sum(i // 128 for i in range(1, p + 1)))
    assert prefill_attention_flops(spec, p) == 2 * 64 * 1024 * pairs + 21 * 124_750 * 2 * 64 * 128


def test_parameters_from_the_modules():
    # transformers 5.25 DeepseekV4 per layer: q_a (H x 1,024) + its norm + q_b (1,024 x 64 x 512) + kv_proj (H x 512)
    # + its norm + o_a (8 x 1,024 x 4,096) + o_b (8,192 x H) + 64 sinks; compressors (CSA: kv and gate H x 1,024,
    # bias 4 x 1,024, norm, and the indexer's H x 256 twice, 4 x 256, 128, q_b 1,024 x 64 x 128, weights H x 64; HCA:
    # H x 512 twice, 128 x 512, norm); 256 experts of 3 x 2,048 x H, a shared one, a router (with a correction bias
    # past the 3 hash layers); two norms; two hyper-connections of 24 x 4H + 24 + 3; the head's 4 x 4H + 4 + 1
    cfg = _config("deepseek-v4-flash")
    h = cfg["hidden_size"]
    attention = h * 1024 + 1024 + 1024 * 64 * 512 + h * 512 + 512 + 8 * 1024 * 4096 + 8 * 1024 * h + 64
    csa = 2 * h * 1024 + 4 * 1024 + 512 + 2 * h * 256 + 4 * 256 + 128 + 1024 * 64 * 128 + h * 64
    hca = 2 * h * 512 + 128 * 512 + 512
    moe = 256 * h + 3 * 256 * 2048 * h + 3 * 2048 * h
    hc = 2 * (24 * 4 * h + 24 + 3)
    layer = attention + moe + 2 * h + hc
    total = 43 * layer + 21 * csa + 20 * hca + 40 * 256 + 2 * 129_280 * h + h + 16 * h + 5
    counts = param_counts(_spec("deepseek-v4-flash"))
    assert counts.total == total == 284_332_240_471  # the hub's "284B"
    assert round(counts.active_excl_embedding / 1e9, 2) == 13.27
    assert param_counts(_spec("deepseek-v4-pro")).total == 1_572_997_201_763  # the hub's "1.6T"


def test_transformers_layer_types_read_alike():
    cfg = _config("deepseek-v4-flash")
    names = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
    modern = {k: v for k, v in cfg.items() if k not in ("compress_ratios", "num_hash_layers")}
    modern["layer_types"] = [names[r] for r in cfg["compress_ratios"][:43]]
    modern["mlp_layer_types"] = ["hash_moe"] * 3 + ["moe"] * 40
    a, b = _spec("deepseek-v4-flash"), spec_from_config(modern, "deepseek-v4-flash", "deepseek-v4-flash")
    assert a.expanded_layers() == b.expanded_layers() and a.hash_layers == b.hash_layers == 3


def test_a_bad_ratio_is_one_line():
    cfg = _config("deepseek-v4-flash")
    cfg["compress_ratios"] = [0, 0, 8] + cfg["compress_ratios"][3:]
    with pytest.raises(SpecError, match="compress_ratios holds 8"):
        spec_from_config(cfg, "v4", "v4.json")
    other = {**_config("deepseek-r1-distill-qwen-32b"), "compress_ratios": [4] * 64}
    with pytest.raises(SpecError, match="compress_ratios .* is not read"):
        spec_from_config(other, "x", "x.json")


def test_presets_and_cli():
    assert get_model("deepseek-ai/DeepSeek-V4-Flash").name == "deepseek-v4-flash"
    out = run_json("cache", "deepseek-v4-flash", "--batch", "2", "--seq", "1m")
    assert out["total_bytes"] == 2 * 6_537_216_000 and out["bytes_per_token_past_windows"] == 6_229
    fit = run_json("fit", "deepseek-v4-flash", "--gpu", "h200", "--tp", "4", "--seq", "128k")
    assert fit["fits"] is True


@pytest.mark.parametrize(
    "engine,words",
    [
        ("vllm", "vLLM 0.19 does not serve deepseek-v4-flash"),
        ("trtllm", "TensorRT-LLM's DeepSeek-V4 caches"),
    ],
)
def test_engines_without_its_pools_refuse_in_one_line(engine, words):
    result = run("fit", "deepseek-v4-flash", "--gpu", "h200", "--tp", "4", "--engine", engine)
    assert result.exit_code != 0 and result.stderr.count("\n") == 1 and words in result.stderr


def test_the_ceiling_reads_fewer_kv_bytes_than_v32_at_long_context():
    # same cache dtype, 128k tokens: V4-Flash's step reads windows, 512 top-k entries and index keys where
    # DeepSeek-V3.2 reads 2,048 top-k latents and every index key of 61 layers
    v4 = run_json("roofline", "deepseek-v4-flash", "--gpu", "h200", "--tp", "8", "--batch", "1", "--seq", "128k")
    v32 = run_json("roofline", "deepseek-v3.2", "--gpu", "h200", "--tp", "8", "--batch", "1", "--seq", "128k")
    read = [r["rows"][0]["kv_bytes"] for r in (v4, v32)]
    # one sequence, whole on every rank: V4 reads its attended entries (bf16) and every CSA index key
    attended = 2 * 128 + 21 * (128 + 512) + 20 * (128 + 1024)
    assert read[0] == attended * 512 * 2 + 21 * 32_768 * 132
    assert read[0] < read[1]
    assert Fraction(read[0], read[1]) < Fraction(1, 2)


def test_sglang_pools_by_hand():
    # SGLang 0.5.23 DSV4PoolConfigurator at default flags: fp8 rows of 448 + 128 + 8 = 584 B, pages padded to 576 B
    # (256 window slots: 149,760 B, 585 a token; 64 CSA slots: 37,440 B, 585 a slot; 2 HCA slots: 1,728 B, 864 a slot)
    from kvcalc.engines.sglang.dsv4 import page_bytes, pools

    assert (page_bytes(256), page_bytes(64), page_bytes(2)) == (149_760, 37_440, 1_728)
    flash = get_model("deepseek-v4-flash")
    sized = pools(flash, range(43), 100 * 2**30, 256)
    # a window token: 43 x 585 + 21 CSA layers' two fp32 compressor states (8,192 + 2,048 B a row, 8 rows a page)
    per_swa = 43 * 585 + 21 * 8 / 256 * (8_192 + 2_048)
    assert per_swa == 31_875
    # a full token: a tenth of a window token, 21 x (585 + 132) / 4 and 20 x 864 / 128
    assert sized.bytes_per_full_token == 0.1 * per_swa + 21 * (585 + 132) / 4 + 20 * 864 / 128 == 7_086.75
    # the HCA states of 257 requests, 128 ring slots each, rows to a multiple of 128, 4,096 B a row, 20 layers
    rows = -(-(257 * 128 + 129) // 128) * 128
    assert sized.fixed_bytes == rows * 4_096 * 20 == 2_715_811_840
    full = int((100 * 2**30 - sized.fixed_bytes) / 7_086.75) // 256 * 256
    assert sized.full_tokens == full == 14_768_128
    assert sized.swa_tokens == int(full * 0.1) // 256 * 256 == 1_476_608
    # the pools allocate one logical page more each, unbudgeted: 10.4 MB over the 100 GiB
    assert sized.allocated_bytes == 107_384_613_376
    assert pools(flash, range(43), 100 * 2**30, 32).full_tokens == 15_099_392  # DP attention 8: 32 requests a rank
    pro = pools(get_model("deepseek-v4-pro"), range(61), 100 * 2**30, 256)
    assert (pro.bytes_per_full_token, pro.fixed_bytes) == (10_115.25, 4_209_508_352)


def test_sglang_fit_uses_its_pool():
    from kvcalc.engines.sglang.dsv4 import pools
    from kvcalc.engines.sglang.pool import SglangSettings, predict
    from kvcalc.model.presets import get_gpu

    spec = get_model("deepseek-v4-flash")
    pool = predict(spec, get_gpu("h200"), SglangSettings(tp=8), seq=131_072)
    assert pool.kv_dtype == "fp8" and pool.page_size == 256 and pool.max_running_requests == 256
    assert round(pool.mem_fraction_static, 3) == 0.897  # 1 - 14,848 MiB / 143,771 MiB (no prefill graph for V4)
    rest = pool.pre_load_free_bytes - pool.weights_bytes - pool.pre_load_free_bytes * (1 - pool.mem_fraction_static)
    assert pool.max_total_num_tokens == pools(spec, range(43), rest, 256).full_tokens
    fit = run_json("fit", "deepseek-v4-flash", "--gpu", "h200", "--tp", "8", "--engine", "sglang", "--seq", "128k")
    assert fit["kv_capacity_tokens"] == pool.max_total_num_tokens and fit["kv_dtype"] == "fp8"


@pytest.mark.parametrize(
    "flags,words",
    [
        (["--engine-version", "0.5.20"], "SGLang 0.5.20's DeepSeek-V4 pools are not modelled"),
        (["--kv-dtype", "bf16"], "DeepSeek-V4's bf16 cache layout under SGLang is not modelled"),
        (["--engine-version", "0.5.11"], "no model class for DeepseekV4ForCausalLM (first in 0.5.12)"),
    ],
)
def test_sglang_refuses_what_is_not_read(flags, words):
    result = run("fit", "deepseek-v4-flash", "--gpu", "h200", "--tp", "8", "--engine", "sglang", *flags)
    assert result.exit_code != 0 and result.stderr.count("\n") == 1 and words in result.stderr


@pytest.mark.parametrize("gpu,words", [("a100", "not ampere"), ("mi355x", "pools on ROCm (its unified cache)")])
def test_sglang_refuses_gpus_without_its_v4_kernels(gpu, words):
    result = run("fit", "deepseek-v4-flash", "--gpu", gpu, "--tp", "8", "--engine", "sglang")
    assert result.exit_code != 0 and result.stderr.count("\n") == 1 and words in result.stderr


def test_plan_names_the_engine_that_serves_it():
    # vLLM 0.19 has no DeepSeek-V4 class, so every option is refused under plan's default engine; SGLang 0.5.23 serves
    # it (and kvcalc models its pools), TensorRT-LLM's V4 caches are not modelled
    out = run_json("plan", "deepseek-v4-flash", "--users", "16", "--seq", "8k", "--gpu", "h200", status=3)
    assert out["options"] == []
    assert any(
        "--engine vllm does not serve DeepseekV4ForCausalLM" in n and "pass --engine sglang" in n for n in out["notes"]
    )
    served = run_json(
        "plan", "deepseek-v4-flash", "--users", "16", "--seq", "8k", "--gpu", "h200", "--engine", "sglang"
    )
    assert served["engine"] == "sglang" and served["options"][0]["kv_dtype"] == "fp8"
    assert served["options"][0]["command"].startswith(
        "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4"
    )


def _v4_gguf_metadata(ratios: list[int] | None = None) -> dict:
    # V4-Flash's attention as llama.cpp's converter writes it (conversion/deepseek.py; keys src/llama-arch.cpp)
    ratios = ratios or _config("deepseek-v4-flash")["compress_ratios"][:43]
    md = {
        "block_count": 43, "embedding_length": 4096, "attention.head_count": 64, "attention.head_count_kv": 1,
        "attention.key_length": 512, "attention.value_length": 512, "rope.dimension_count": 64,
        "attention.sliding_window": 128, "attention.compress_ratios": ratios, "attention.q_lora_rank": 1024,
        "attention.output_group_count": 8, "attention.output_lora_rank": 1024, "attention.indexer.head_count": 64,
        "attention.indexer.key_length": 128, "attention.indexer.top_k": 512, "expert_count": 256,
        "expert_used_count": 6, "expert_feed_forward_length": 2048, "expert_shared_count": 1,
        "hyper_connection.count": 4, "hash_layer_count": 3, "vocab_size": 129280, "context_length": 1048576,
    }  # fmt: skip
    return {"general.architecture": "deepseek4", **{f"deepseek4.{k}": v for k, v in md.items()}}


def _v4_gguf(tmp_path, md: dict | None = None):
    from gguf_writer import gguf_bytes

    path = tmp_path / "DeepSeek-V4-Flash-Q4_K_M.gguf"
    path.write_bytes(gguf_bytes(md or _v4_gguf_metadata(), [("token_embd.weight", (4096, 129280), "q4_K")])[0])
    return path


def test_gguf_reads_as_the_config_does(tmp_path):
    from kvcalc.model.gguf.arch import spec_from_gguf
    from kvcalc.model.gguf.reader import read_header

    data = _v4_gguf(tmp_path).read_bytes()
    spec = spec_from_gguf(read_header(lambda s, n: data[s : s + n], "v4.gguf", 4096), "v4.gguf")
    hub = _spec("deepseek-v4-flash")
    assert spec.expanded_layers() == hub.expanded_layers() and spec.architecture == "DeepseekV4ForCausalLM"
    assert cache_bytes(spec, 1, 1_048_576, "bf16") == cache_bytes(hub, 1, 1_048_576, "bf16") == 6_537_216_000
    assert (spec.index_topk, spec.o_groups, spec.hc_mult, spec.hash_layers) == (512, 8, 4, 3)
    short = _v4_gguf_metadata([0, 4])
    with pytest.raises(SpecError, match="compress_ratios is shorter than block_count"):
        data = _v4_gguf(tmp_path, short).read_bytes()
        spec_from_gguf(read_header(lambda s, n: data[s : s + n], "v4.gguf", 4096), "v4.gguf")


def test_llamacpp_dsv4_buffers_by_hand():
    # llama_kv_cache_dsv4 (0c1e57098) at -c 8192 -np 1 -ub 512, f16: a raw cache of all 43 layers over
    # PAD(min(8192, 128 + 512), 256) = 768 cells, K only, 512 wide; the 21 CSA layers' compressed cache and index keys
    # over PAD(8192 / 4, 256) = 2,048 cells, the 20 HCA layers' over PAD(64, 256) = 256; f32 compressor states
    from kvcalc.engines.llamacpp.eras import era
    from kvcalc.engines.llamacpp.kv import kv_parts

    spec = get_model("deepseek-v4-flash")
    parts, refusal = kv_parts(spec, 8192, era(None), parallel=1, ubatch=512, type_k="f16", type_v="f16")
    got = {(p.cache, p.cells): p.bytes for p in parts}
    assert refusal is None
    assert got[("non-SWA", 8192)] == 0  # llama.cpp logs the iSWA's full half; it holds no layer
    assert got[("SWA", 768)] == 43 * 768 * 512 * 2 == 33_816_576  # 32.25 MiB
    assert got[("CSA", 2048)] == 21 * 2048 * 512 * 2 == 44_040_192
    assert got[("HCA", 256)] == 20 * 256 * 512 * 2 == 5_242_880
    assert got[("CSA indexer", 2048)] == 21 * 2048 * 128 * 2 == 11_010_048
    states = sorted(p.bytes for p in parts if p.cache == "compressor state")
    # CSA: 2 planes x 1,024 x 8 slots; HCA: 2 x 512 x 128; the indexer's: 2 x 256 x 8; f32, 21 / 20 / 21 layers
    assert states == sorted([21 * 2 * 1024 * 8 * 4, 20 * 2 * 512 * 128 * 4, 21 * 2 * 256 * 8 * 4])
    assert sum(p.bytes for p in parts) == 106_315_776  # 101.39 MiB
    # ggml-org/llama.cpp#27680's start-up log: -c 64000 (one sequence), -ub 4096, bf16: "4352 cells, 43 layers",
    # 182.75 MiB of raw cache, states 1.31 / 10.00 / 0.33 MiB
    logged, _ = kv_parts(spec, 64_000, era(None), parallel=1, ubatch=4096, type_k="bf16", type_v="bf16")
    (raw,) = [p for p in logged if p.cache == "SWA"]
    assert (raw.cells, raw.layers, round(raw.bytes / 2**20, 2)) == (4352, 43, 182.75)
    mib = sorted(round(p.bytes / 2**20, 2) for p in logged if p.cache == "compressor state")
    assert mib == [0.33, 1.31, 10.0]
    # llama.cpp's refusals: K and V cache types that differ (MLA and deepseek4), a build without the cache
    assert kv_parts(spec, 8192, era(None), type_k="q8_0", type_v="f16")[1] == (
        "model does not support different K (q8_0) and V (f16) cache types"
    )
    old = run("fit", "deepseek-v4-flash", "--gpu", "h200", "--gpus", "4", "--engine", "llamacpp", "--engine-version",
              "2026-01")  # fmt: skip
    assert old.exit_code != 0 and "no deepseek4 architecture" in old.stderr
