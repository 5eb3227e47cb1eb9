"""llama.cpp's buffers: KV bytes equal llama.cpp's own log lines (public logs cited in
../shared/reference/llamacpp_rules.md) and hand derivations from its code; model buffers from a
tensor table; the which-quant-fits listing."""

import json

import pytest
from conftest import run, run_json
from gguf_writer import gguf_bytes, llama_like

from kvcalc.engines.llamacpp.buffers import TensorRow, compute_buffer, cuda_alloc, layer_devices, model_buffers
from kvcalc.engines.llamacpp.eras import era
from kvcalc.engines.llamacpp.kv import FA_REFUSAL, kv_parts
from kvcalc.errors import UsageError
from kvcalc.model.presets import get_model
from kvcalc.model.spec import LayerRun, ModelSpec

MiB = 1 << 20


def kv(spec, n_ctx, version=None, **kw):
    parts, refusal = kv_parts(spec, n_ctx, era(version), **kw)
    return {p.cache: p for p in parts}, refusal


def gemma3_270m() -> ModelSpec:
    # 18 layers, 5 sliding (window 512) then 1 global, 1 KV head x 256 (rules §2.1.4)
    return ModelSpec(
        name="gemma-3-270m", num_layers=18, hidden_size=640, num_heads=4, num_kv_heads=1, head_dim=256,
        vocab_size=262144, layer_pattern=[LayerRun(kind="sliding", count=5, window_tokens=512), LayerRun(kind="full")],
    )  # fmt: skip


def test_gemma3_270m_iswa_at_parallel_1_by_hand():
    # 3 global layers hold the padded context, 15 SWA layers PAD(min(ctx, 512 + ubatch 512), 256) = 1024 cells;
    # K + V f16 = 2 x 256 x 2 B = 1 KiB per cell per layer: 12 + 15 = 27 MiB at 4096, 24 + 15 = 39 MiB at 8192
    # (the 27 and 39 MiB of unslothai/unsloth#5225's table against llama.cpp b10107)
    for n_ctx, total in ((4096, 27), (8192, 39)):
        parts, _ = kv(gemma3_270m(), n_ctx)
        assert parts["SWA"].cells == 1024 and parts["non-SWA"].cells == n_ctx
        assert parts["SWA"].bytes + parts["non-SWA"].bytes == total * MiB
    # --swa-full (the C API's default): every layer holds the context: 18 MiB at 1024 cells... x4
    parts, _ = kv(gemma3_270m(), 4096, swa_full=True)
    assert parts["SWA"].cells == 4096 and parts["SWA"].bytes + parts["non-SWA"].bytes == 72 * MiB
    # before PR #13194 there was no window cache at all: the same 72 MiB, one cache
    parts, _ = kv(gemma3_270m(), 4096, "2025-03")
    assert list(parts) == ["non-SWA"] and parts["non-SWA"].bytes == 72 * MiB


def test_gemma3_27b_swa_cache_624_mib_as_pr_18720_measured():
    # 52 SWA layers x 16 KV heads x 128 x K,V x f16 at n_swa 1024 + ubatch 512 = 1536 cells: 624 MiB
    parts, _ = kv(get_model("gemma-3-27b"), 32768)
    assert parts["SWA"].cells == 1536 and parts["SWA"].layers == 52 and parts["SWA"].bytes == 624 * MiB
    # since PR #21277 (2026-04) the SWA part stays f16 under -ctk/-ctv q8_0; before, it was quantized
    q8, _ = kv(get_model("gemma-3-27b"), 32768, type_k="q8_0", type_v="q8_0")
    assert q8["SWA"].bytes == 624 * MiB and q8["SWA"].k_type == "f16"
    assert q8["non-SWA"].bytes == 10 * 32768 * 2 * 16 * 128 * 34 // 32
    old, _ = kv(get_model("gemma-3-27b"), 32768, "2026-01", type_k="q8_0", type_v="q8_0")
    assert old["SWA"].bytes == 624 * MiB * 34 // 64


def test_q8_0_and_q4_0_caches_by_block_size():
    # ratios to f16 of exactly 34/64 = 0.53125 and 18/64 = 0.28125 (runs 21551)
    spec = get_model("llama-3-8b")
    f16 = kv(spec, 8192)[0]["non-SWA"].bytes
    assert f16 == 1024 * MiB  # 32 layers x 8 x 128 x 2 x 2 B x 8192
    for t, ratio in (("q8_0", 0.53125), ("q4_0", 0.28125), ("q4_1", 20 / 64), ("q5_0", 22 / 64), ("iq4_nl", 18 / 64)):
        assert kv(spec, 8192, type_k=t, type_v=t)[0]["non-SWA"].bytes == f16 * ratio


def test_mla_latent_by_era_and_the_iklamacpp_log():
    ds = get_model("deepseek-v3")
    # K-only latent since PR #19067: 32768 cells x 61 layers x 576 x 34/32 B = 1166.62 MiB, the
    # `c^KV (q8_0): 1166.62 MiB` of ik_llama.cpp run 259 (which stored the latent K-only first)
    parts, refusal = kv(ds, 32768, type_k="q8_0", type_v="q8_0")
    p = parts["non-SWA"]
    assert p.v_bytes == 0 and p.v_type is None and refusal is None
    assert round(p.k_bytes / MiB, 2) == 1166.62 and p.k_bytes == 32768 * 61 * 612
    # PR #12801 to #19067: K 576 + V 512 per token per layer
    p = kv(ds, 32768, "2025-12")[0]["non-SWA"]
    assert (p.k_bytes, p.v_bytes) == (32768 * 61 * 576 * 2, 32768 * 61 * 512 * 2)
    # before: per-head K (128 x 192) and V (128 x 128); q4_0 K + f16 V = 728 MiB per layer at 16384 (run 9390)
    p = kv(ds, 16384, "2025-03", type_k="q4_0")[0]["non-SWA"]
    assert p.bytes // p.layers == 728 * MiB


def test_context_padding_streams_and_unified_by_era():
    spec = get_model("llama-3-8b")
    per_cell = 32 * 2 * 8 * 128 * 2
    # >= b7108: always PAD(n_ctx, 256); older: 256 with FA, 32 without
    assert kv(spec, 13000)[0]["non-SWA"].cells == 13056
    assert kv(spec, 13000, "2025-08", flash_attn=False)[0]["non-SWA"].cells == 13024
    assert kv(spec, 13000, "2025-08", flash_attn=True)[0]["non-SWA"].cells == 13056
    # -np 4 without --kv-unified: 4 streams of PAD(10240 / 4, 256) = 2560 cells
    p = kv(spec, 10000, parallel=4)[0]["non-SWA"]
    assert (p.cells, p.streams, p.bytes) == (2560, 4, 4 * 2560 * per_cell)
    p = kv(spec, 10000, parallel=4, unified=True)[0]["non-SWA"]
    assert (p.cells, p.streams) == (10240, 1)
    # a unified cache's window part holds n_swa for each sequence: PAD(512 x 4 + 512, 256) = 2560
    assert kv(gemma3_270m(), 16384, parallel=4, unified=True)[0]["SWA"].cells == 2560
    assert kv(gemma3_270m(), 16384, parallel=4)[0]["SWA"].cells == 1024


def test_quantized_v_without_flash_attention_is_refused_in_llamacpps_words():
    _, refusal = kv(get_model("llama-3-8b"), 4096, type_v="q8_0", flash_attn=False)
    assert refusal == FA_REFUSAL == "quantized V cache was requested, but this requires Flash Attention"
    r = run(
        "cache", "llama-3-8b", "--engine", "llamacpp", "--kv-dtype", "q8_0", "--flash-attn", "off", "--gpu", "rtx-4090"
    )
    assert r.exit_code == 0 and "would not start: quantized V cache was requested" in r.stdout


def test_recurrent_state_is_f32_per_sequence():
    spec = ModelSpec(name="hy", num_layers=4, hidden_size=256, num_heads=8, num_kv_heads=2, vocab_size=1000,
                     layer_pattern=[LayerRun(kind="stateless", state_bytes=4 * 1000), LayerRun(kind="full")])  # fmt: skip
    parts, _ = kv(spec, 4096, parallel=3)
    assert parts["recurrent"].bytes == 2 * 3 * 4000 and parts["non-SWA"].layers == 2


def test_layers_on_devices_as_llamacpp_assigns_them():
    # -ngl counts the output layer: 33 of a 32-layer model offloads all and the output
    assert layer_devices(32, 33, 1) == [0] * 33
    assert layer_devices(32, 32, 1) == [0] * 32 + [None]  # every layer, output on the CPU
    assert layer_devices(32, 10, 1) == [None] * 22 + [0] * 10 + [None]  # the LAST 10 layers
    # two GPUs split by cumulative fractions of act_gpu_layers = 33
    devs = layer_devices(32, 99, 2)
    assert devs.count(0) == 17 and devs.count(1) == 16 and devs[-1] == 1


def test_model_buffer_exact_from_the_tensor_table():
    md, t = llama_like(layers=4, hidden=2304, heads=8, kv_heads=2, ff=2304 * 2, vocab=3000, tied=True)
    tensors = [TensorRow(n, s[0], ty, 0) for n, s, ty in t]
    from kvcalc.model.gguf.reader import Tensor

    rows = [TensorRow(n, s[0], ty, Tensor(n, s, ty, 0).nbytes) for n, s, ty in t]
    assert tensors and rows
    embd = next(r for r in rows if r.name == "token_embd.weight")
    # CUDA pads a q4_K tensor whose row (2304) is not a multiple of 512 by row_size(q4_K, 256) = 144 B, then to 128 B
    assert cuda_alloc(embd) == -(-(embd.nbytes + 3000 * 0 + 144) // 128) * 128
    gpu, cpu_mapped, _ = model_buffers(rows, 4, layer_devices(4, 99, 1))
    layers = sum(cuda_alloc(r) for r in rows if r.name.startswith(("blk.", "output_norm")))
    # token_embd stays CPU_Mapped; the tied output duplicates it on the GPU
    assert cpu_mapped == embd.nbytes and gpu == {0: layers + cuda_alloc(embd)}
    gpu, cpu_mapped, _ = model_buffers(rows, 4, layer_devices(4, 2, 1))  # last 2 layers, output on the CPU
    assert gpu == {0: sum(cuda_alloc(r) for r in rows if r.name.startswith(("blk.2.", "blk.3.")))}
    assert cpu_mapped == sum(r.nbytes for r in rows) - sum(
        r.nbytes for r in rows if r.name.startswith(("blk.2.", "blk.3."))
    )


def test_cache_engine_llamacpp_json_fields(tmp_path):
    md, t = llama_like(layers=4, hidden=256, heads=8, kv_heads=2, ff=1024, vocab=1000)
    path = tmp_path / "tiny-Q4_K_M.gguf"
    path.write_bytes(gguf_bytes(md, t)[0])
    out = run_json("cache", path, "--engine", "llamacpp", "--seq", "1000", "--gpu", "rtx-4090")
    lc = out["llamacpp"]
    assert out["quant"] == "Q4_K_M" and lc["kv_cells"] == 1024 and lc["kv_bytes"] == 1024 * 4 * 2 * 2 * 32 * 2
    assert lc["cpu_mapped_bytes"] == 1000 * 144 and lc["gpu_layers"] == lc["total_layers"] == 5 and lc["fits"]
    assert [d["name"] for d in lc["devices"]] == ["GPU0", "CPU"] and lc["weights_exact"]
    # FA on: the FFN moment, 3 n_ff + 4 n_embd f32 columns of 512 tokens, beside the f16 mask (1,024 cells x 512);
    # llama.cpp's own reservation of this file on the CPU: 9,451,520 B (14,336 B of CPU-side inputs more)
    assert lc["compute_buffer_bytes"] == (3 * 1024 + 4 * 256) * 512 * 4 + 1024 * 512 * 2 == 9_437_184
    assert lc["kv_capacity_tokens"] == 1024


# Public llama.cpp logs (../shared/reference/llamacpp_rules.md 2.3; llama.cpp#12369, #13661, #13545), one GPU's
# "compute buffer size" in MiB: (hidden, heads, head_dim, n_ff, vocab), n_kv, n_ubatch, FA, logged
COMPUTE_LOGS = [
    ((4096, 32, 128, 14336, 32000), 2048, 512, False, 164.0),  # Mistral-7B, K*Q + f32 mask + 2 n_embd + 2 q
    ((4096, 32, 128, 14336, 32000), 32768, 512, False, 2144.0),
    ((5120, 40, 128, 27648, 152064), 32768, 512, False, 2664.0),  # Qwen2.5-32B on 5 x MI50 (each GPU)
    ((2048, 32, 128, 6144, 151936), 30016, 512, False, 1958.625),  # Qwen3-30B-A3B: q is 4,096 wide, not 2,048
    ((5120, 40, 128, 27648, 152064), 4096, 512, True, 307.0),  # R1-Distill-Qwen-32B: logits beside the final norm
    ((2048, 16, 128, 11008, 151936), 4096, 512, True, 300.75),  # Qwen2.5-3B-shaped
    ((2048, 16, 128, 8192, 50304), 2048, 512, True, 102.25),  # Pythia-1.4B
    ((2048, 16, 128, 8192, 50304), 2048, 128, True, 25.5625),
]


@pytest.mark.parametrize(("shape", "n_kv", "ubatch", "fa", "logged_mib"), COMPUTE_LOGS)
def test_compute_buffer_of_public_logs(shape, n_kv, ubatch, fa, logged_mib):
    hidden, heads, head_dim, ff, vocab = shape
    spec = ModelSpec(
        name="x", num_layers=2, hidden_size=hidden, num_heads=heads, num_kv_heads=8, head_dim=head_dim,
        intermediate_size=ff, vocab_size=vocab,
    )  # fmt: skip
    assert compute_buffer(spec, n_kv, ubatch, n_kv, fa) == logged_mib * MiB


def test_logits_only_on_the_output_layers_gpu():
    # llama.cpp#13545 (b5384, 2 x MI50, Qwen3-30B-A3B, -c 32768 -fa): "ROCm0 compute buffer size = 120.00 MiB",
    # "ROCm1 compute buffer size = 300.75 MiB": the logits moment, (151,936 + 2,048) x 512 x 4 B, on the GPU holding
    # the output layer alone; the first GPU's peak is an FFN's (MoE routing, not modelled, makes up the rest)
    from kvcalc.engines.llamacpp.buffers import spec_tensors
    from kvcalc.engines.llamacpp.memory import llamacpp_memory

    spec = get_model("qwen3-30b-a3b")
    r = llamacpp_memory(spec, spec_tensors(spec, "q8_0"), 32768, era("2025-08"), weights_exact=False, n_gpus=2)
    first, second = r.devices[0], r.devices[1]
    assert (first.kv_bytes, second.kv_bytes) == (1600 * MiB, 1472 * MiB)  # "ROCm0 KV buffer size = 1600.00 MiB"
    assert second.compute_bytes == r.compute_buffer_bytes == 300.75 * MiB
    assert 120 * MiB - r.compute_margin_bytes < first.compute_bytes < 120 * MiB


def test_partial_offload_copies_the_output_weight_into_the_first_gpus_compute_buffer():
    # An Ollama server log (2026-08-30, llama.cpp of that date) of QwQ-32B Q4_K_M at 29/65 layers, -c 8192, q8_0 cache,
    # flash attention: "CUDA0 model buffer size = 8128.64 MiB", "CPU KV buffer size = 595.00 MiB", "CUDA0 KV buffer
    # size = 493.00 MiB", "CUDA0 compute buffer size = 916.08 MiB": the logits, (152,064 + 5,120) x 512 x 4 B =
    # 307.00 MiB, beside the copy of the Q6_K output weight its offloaded matmul takes, 5,120 x 152,064 x 210/256 B =
    # 609.08 MiB
    from kvcalc.engines.llamacpp.memory import llamacpp_memory
    from kvcalc.model.gguf.mix import tensor_table

    spec = get_model("qwq-32b")
    rows = [TensorRow(*t) for t in tensor_table(spec, "q4_k_m")]
    r = llamacpp_memory(spec, rows, 8192, era("2026-01"), weights_exact=False, ngl=29, type_k="q8_0", type_v="q8_0")
    gpu, cpu = r.devices
    assert (gpu.kv_bytes, cpu.kv_bytes) == (493 * MiB, 595 * MiB)
    assert gpu.compute_bytes == (152064 + 5120) * 512 * 4 + 5120 * 152064 * 210 // 256
    assert round(gpu.compute_bytes / MiB, 2) == 916.08
    assert (
        0.999 * 8128.64 * MiB < gpu.model_bytes < 8128.64 * MiB
    )  # the table's matrices; f32 norms and biases left out
    # with the output layer on the GPU (-ngl 65) nothing is copied: the logits alone
    assert llamacpp_memory(spec, rows, 8192, era("2026-01"), weights_exact=False, ngl=65).compute_buffer_bytes == (
        (152064 + 5120) * 512 * 4
    )


def test_fit_lists_layers_that_fit_and_a_labelled_ceiling():
    # a preset without a GGUF: weights estimated at f16 from its parameters, labelled so
    r = run("fit", "llama-3.1-70b", "--engine", "llamacpp", "--gpu", "rtx-4090", "--seq", "8k", "-f", "json")
    assert r.exit_code == 3  # nothing fits fully
    out = json.loads(r.stdout)
    row = out["rows"][0]
    assert not row["fits_fully"] and 0 < row["gpu_layers"] < row["total_layers"] == 81
    assert "ceiling" in out["speed_label"] and not row["llamacpp"]["weights_exact"]
    # 1 GiB kept free, as llama.cpp's --fit does; one more layer would not fit
    assert out["capacity_bytes"] == 25_393_994_138 - (1 << 30)
    gpu = row["llamacpp"]["devices"][0]
    assert gpu["total_bytes"] <= out["capacity_bytes"] < gpu["total_bytes"] + gpu["model_bytes"] // gpu["layers"]
    r = run("fit", "llama-3.1-70b", "--engine", "llamacpp", "--gpu", "rtx-4090", "--seq", "8k")
    assert r.exit_code == 3 and "estimated from parameters" in r.stdout


def test_engine_version_and_kv_dtype_errors_are_one_line():
    with pytest.raises(UsageError):
        era("2024-01")
    assert era("b7108").key == "2025-12" and era("b6900").key == "2025-08"
    r = run("cache", "llama-3-8b", "--engine", "llamacpp", "--kv-dtype", "fp8")
    assert r.exit_code == 2 and "not a llama.cpp cache type" in r.stderr


def test_gpus_split_layers_and_each_gpu_holds_a_compute_buffer():
    one = run("fit", "llama-3.1-70b", "--engine", "llamacpp", "--gpu", "rtx-3090", "--seq", "16k", "-f", "json")
    four = run(
        "fit", "llama-3.1-70b", "--engine", "llamacpp", "--gpu", "rtx-3090", "--gpus", "4", "--seq", "16k", "-f", "json"
    )
    a, b = json.loads(one.stdout)["rows"][0], json.loads(four.stdout)["rows"][0]
    assert a["gpu_layers"] * 3 < b["gpu_layers"] < b["total_layers"]
    gpus = [d for d in b["llamacpp"]["devices"] if d["name"] != "CPU"]
    # each GPU's compute buffer is its part of the graph's peak: the logits (128,256 + 8,192 f32 columns of 512 tokens)
    # only where the output layer runs, on the first GPU here (-ngl leaves the output on the CPU, its matmul offloaded
    # there with a copy of the f16 output weight, 128,256 x 8,192 x 2 B)
    logits, copied = (128256 + 8192) * 512 * 4, 128256 * 8192 * 2
    assert len(gpus) == 4 and gpus[0]["compute_bytes"] == b["compute_bytes"] == logits + copied
    assert all(d["compute_bytes"] < b["compute_bytes"] for d in gpus[1:])
    assert all(d["total_bytes"] <= json.loads(four.stdout)["capacity_bytes"] for d in gpus)
    r = run("fit", "llama-3.1-70b", "--engine", "llamacpp", "--gpu", "rtx-3090", "--tp", "2")
    assert r.exit_code == 2 and "give --gpus N, not --tp" in r.stderr


def test_cpu_mapped_is_token_embd_as_llamacpp_logs_it():
    # Qwen2.5-32B Q4_K_M on a full offload: `CPU_Mapped model buffer size = 417.66 MiB` is token_embd,
    # 5120 x 152064 in q4_K (144 B per 256) = 437,944,320 B (llamacpp_rules.md §2.2)
    from kvcalc.model.gguf.reader import Tensor

    embd = Tensor("token_embd.weight", (5120, 152064), "q4_K", 0)
    rows = [
        TensorRow(embd.name, 5120, "q4_K", embd.nbytes),
        TensorRow("blk.0.attn_q.weight", 5120, "q4_K", 5120 * 20 * 144),
    ]
    rows.append(TensorRow("output.weight", 5120, "q6_K", 152064 * 20 * 210))
    _, cpu_mapped, _ = model_buffers(rows, 1, layer_devices(1, 99, 1))
    assert cpu_mapped == 437_944_320 and round(cpu_mapped / MiB, 2) == 417.66


def test_decode_ceiling_is_above_every_llama_bench_measurement():
    # llama-bench tg 512 on consumer NVIDIA and Apple (../shared speed_calibration.json): a ceiling,
    # so every measurement sits under it (17 points, measured/ceiling 0.42-0.85 when this was written)
    import importlib.util

    from conftest import REPO, shared_path

    shared_path("reference", "speed_calibration.json")
    spec = importlib.util.spec_from_file_location("llamacpp_ceiling", REPO / "benchmarks" / "llamacpp_ceiling.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    points = [
        p for p in json.loads(bench.SHARED.read_text())
        if p["metric"] == "output_tok_s_per_user" and p["id"].endswith("tg512") and p["gpu"] in bench.GPUS
    ]  # fmt: skip
    checked = 0
    for p in points:
        model = "llama-3-8b" if p["model"].endswith("8B") else "llama-3-70b"
        recipe = "F16" if p["weight_dtype"].startswith("f16") else "Q4_K_M"
        gpu = get_gpu_preset(bench.GPUS[p["gpu"]])
        from kvcalc.plan.calibration import constants_for
        from kvcalc.plan.quants import quant_row

        row = quant_row(recipe, 0, get_model(model), bench.table(model, recipe), 512, era(None), gpu.capacity_bytes,
                        int(64e9), gpu.unified_memory, gpu, constants_for(gpu, "llamacpp"), weights_exact=True)  # fmt: skip
        if row.fits_fully:
            checked += 1
            assert 0.4 < p["value"] / row.decode_tokens_per_s_ceiling < 1, p["id"]
    assert checked >= 15


def get_gpu_preset(name):
    from kvcalc.model.presets import get_gpu

    return get_gpu(name)


def test_fit_and_cache_price_a_presets_dtype_as_the_quant_file_would_be():
    # --dtype under --engine llamacpp was dropped: every preset read as f16. It is the tensor table llama-quantize
    # writes for that ftype (model/gguf/mix.py): Llama-3-8B Q4_K_M is 4.58 GiB as the published file's matrices
    # (193 q4_K + 33 q6_K tensors; norms left out), about 30% of its f16 bytes, not the 25% of 4 bits a weight.
    from kvcalc.model.gguf.mix import tensor_table

    args = ("fit", "llama-3-8b", "--engine", "llamacpp", "--gpu", "rtx-4090", "--seq", "8k", "-f", "json")
    q4 = json.loads(run(*args, "--dtype", "q4_k_m").stdout)["rows"][0]
    f16 = json.loads(run(*args).stdout)["rows"][0]
    spec = get_model("llama-3-8b")
    assert q4["quant"] == "Q4_K_M (estimated)" and f16["quant"] == "f16 (estimated)"
    assert q4["weights_bytes"] == sum(b for *_, b in tensor_table(spec, "q4_k_m"))
    assert round(q4["weights_bytes"] / 2**30, 2) == 4.57 and 0.29 < q4["weights_bytes"] / f16["weights_bytes"] < 0.31
    assert q4["decode_tokens_per_s"] > 2 * f16["decode_tokens_per_s"]  # a third of the bytes read per token
    # a 16-bit --dtype is the converter's f16 file; cache takes the dtype too and names it
    assert json.loads(run(*args, "--dtype", "bf16").stdout)["rows"][0]["weights_bytes"] == f16["weights_bytes"]
    out = run("cache", "llama-3-8b", "--engine", "llamacpp", "--seq", "8k", "--dtype", "q8_0")
    assert out.exit_code == 0 and "llama-3-8b Q8_0 (estimated) with llama.cpp at -c 8,192" in out.stdout


def test_a_dtype_llamacpp_cannot_hold_is_one_line(tmp_path):
    r = run("fit", "llama-3-8b", "--engine", "llamacpp", "--gpu", "rtx-4090", "--dtype", "fp8")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert "--dtype fp8 is not a llama.cpp weight type" in r.stderr and "q4_k_m" in r.stderr
    md, t = llama_like(layers=4, hidden=256, heads=8, kv_heads=2, ff=512, vocab=1000)
    path = tmp_path / "tiny-Q4_K_M.gguf"
    path.write_bytes(gguf_bytes(md, t)[0])
    r = run("cache", path, "--engine", "llamacpp", "--seq", "1000", "--dtype", "q8_0")
    assert r.exit_code == 2 and "--dtype does not apply to a GGUF" in r.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        # a goal, a memory share and a what-if were dropped under llama.cpp: the f16 table printed, exit 0
        (
            ("fit", "llama-3-8b", "--engine", "llamacpp", "--gpu", "rtx-4090", "--tpot-ms", "5"),
            "does not read --tpot-ms",
        ),
        (("fit", "llama-3-8b", "--engine", "llamacpp", "--gpu", "rtx-4090", "--gpu-util", "0.5"), "--gpu-util"),
        (("cache", "llama-3-8b", "--engine", "llamacpp", "--kv-heads", "2"), "cache --engine llamacpp does not read"),
        # and llama.cpp's own flags without it: --ngl 10 on an H100 under vLLM's accounting, a --quant unread
        (("fit", "llama-3-8b", "--gpu", "h100", "--ngl", "10"), "--ngl needs --engine llamacpp"),
        (("cache", "llama-3-8b", "--quant", "Q4_K_M", "--parallel", "2"), "--quant, --parallel need --engine llamacpp"),
        (("cache", "llama-3-8b", "--engine-version", "2025-08"), "--engine-version needs --engine llamacpp"),
    ],
)
def test_a_flag_the_branch_would_drop_is_one_line(args, said):
    r = run(*args)
    assert r.exit_code == 2 and said in r.stderr and r.stderr.count("\n") == 1 and r.stdout == ""


def test_the_refusal_names_what_llamacpp_reads_and_each_is_read():
    # the hint lists fit's llama.cpp flags; each of them changes the answer (none is listed and dropped)
    r = run("fit", "llama-3-8b", "--engine", "llamacpp", "--gpu", "rtx-4090", "--mbu", "0.5")
    hint = r.stderr.split("it reads ")[1]
    for flag in ("--gpus", "--ngl", "--parallel", "--ubatch", "--flash-attn", "--kv-dtype", "--dtype", "--reserve"):
        assert flag in hint
    base = ("fit", "llama-3-8b", "--engine", "llamacpp", "--gpu", "rtx-4090", "--seq", "32k", "-f", "json")
    row = json.loads(run(*base).stdout)["rows"][0]
    for extra in (("--ngl", "10"), ("--parallel", "2"), ("--ubatch", "2048"), ("--flash-attn", "off"),
                  ("--kv-dtype", "q8_0"), ("--reserve", "4GiB"), ("--gpus", "2")):  # fmt: skip
        assert json.loads(run(*base, *extra).stdout)["rows"][0] != row, extra


def test_the_python_apis_fit_points_to_the_command_for_llamacpp():
    # it said "unknown engine 'llamacpp'" with a hint that listed llamacpp as supported
    import kvcalc

    with pytest.raises(UsageError, match="is the command line's") as err:
        kvcalc.fit("llama-3-8b", "rtx-4090", engine="llama.cpp")
    assert "--engine llamacpp" in err.value.hint and "unknown" not in str(err.value)


def test_llamacpp_has_no_backend_for_tpus_gaudi_or_trainium():
    # ggml's backends are CUDA, HIP, Metal, Vulkan, SYCL, ... and the CPU: none runs on a TPU, Gaudi or Trainium.
    # fit --engine llamacpp refuses there (exit 3, the buffers still printed), plan rejects the GPU, and roofline /
    # generate keep their figures under a "not a real deployment" warning; an AMD or Apple GPU is a real build
    from kvcalc.engines.kernels import gpu_refusal

    for gpu in ("tpu-v5e", "gaudi3", "trainium2"):
        assert gpu_refusal("llamacpp", gpu).startswith(f"llama.cpp has no backend for {gpu}")
    assert not any(gpu_refusal("llamacpp", g) for g in ("rtx-4090", "mi300x", "m4-max", "rx-7900-xtx", "h100"))
    r = run("fit", "llama-3-8b", "--gpu", "tpu-v5e", "--engine", "llamacpp", "--seq", "4k", "-f", "json")
    row = json.loads(r.stdout)["rows"][0]
    assert r.exit_code == 3 and not row["fits_fully"] and row["llamacpp"]["refusal"].startswith("llama.cpp has no")
    plan = run("plan", "llama-3-8b", "--seq", "4k", "--users", "1", "--engine", "llamacpp", "--gpu", "tpu-v5e,rtx-4090")
    assert "rejected: tpu-v5e x1: llama.cpp has no backend for tpu-v5e" in " ".join(plan.stdout.split())
    gen = run_json("generate", "llama-3-8b", "--gpu", "gaudi3", "--engine", "llamacpp", "--batch", "1")
    assert any(w.startswith("not a real deployment: llama.cpp has no backend for gaudi3") for w in gen["warnings"])
