"""MoE models under llama.cpp: the MXFP4_MOE mix (what ggml-org's gpt-oss GGUFs hold, and what a checkpoint shipped
with mxfp4 experts is priced as without a GGUF), experts kept in system memory (--cpu-moe, --n-cpu-moe N) against
llama.cpp's own logs, and --fit moving an MoE model's experts to system memory before it leaves layers to the CPU."""

import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import run, run_json

from kvcalc.engines.llamacpp.buffers import CPU_MOE_ALL, TensorRow, expert_on_cpu
from kvcalc.engines.llamacpp.eras import era
from kvcalc.engines.llamacpp.memory import llamacpp_memory
from kvcalc.model.gguf.mix import tensor_table
from kvcalc.model.presets import get_gpu, get_model
from kvcalc.plan.calibration import constants_for
from kvcalc.plan.llamacpp_speed import llamacpp_speed
from kvcalc.plan.quants import largest_fit

GiB, MiB = 1 << 30, 1 << 20


def table(model: str) -> list[TensorRow]:
    return [TensorRow(*t) for t in tensor_table(get_model(model), "mxfp4_moe")]


@pytest.mark.parametrize(
    ("model", "mxfp4", "q8_0", "file_gib"),
    [
        # ggml-org/llama.cpp#15253, gpt-oss-120b-mxfp4: "type f32: 433 tensors, type q8_0: 146 tensors, type mxfp4:
        # 108 tensors ... file type = MXFP4 MoE, file size = 59.02 GiB": 36 layers x 3 expert stacks; q, k, v, o of each
        # layer, token_embd and output in Q8_0
        ("gpt-oss-120b", 108, 146, 59.02),
        # ikawrakow/ik_llama.cpp#822 (mainline b6699 log), gpt-oss-20b-mxfp4.gguf: "file type = MXFP4 MoE, file size =
        # 11.27 GiB"
        ("gpt-oss-20b", 72, 98, 11.27),
    ],
)
def test_mxfp4_moe_mix_is_ggml_orgs_gpt_oss_files(model, mxfp4, q8_0, file_gib):
    rows = table(model)
    assert Counter(r.type for r in rows) == {"mxfp4": mxfp4, "q8_0": q8_0}
    # the table leaves out the f32 norms, biases, sinks and routers (433 tensors, 0.04-0.2 GiB)
    assert 0.99 * file_gib * GiB < sum(r.nbytes for r in rows) < file_gib * GiB


def test_a_checkpoint_with_mxfp4_experts_is_priced_as_its_gguf():
    # gpt-oss-20b without a GGUF was priced as a 16-bit conversion (39 GiB, 13 of 25 layers on a 4090); its GGUF is
    # 11.27 GiB and llama-server holds all of it and 131,072 tokens on a 24 GiB card
    args = ("fit", "gpt-oss-20b", "--engine", "llamacpp", "--gpu", "rtx-4090", "--seq", "131072")
    row = run_json(*args)["rows"][0]
    assert row["quant"].startswith("MXFP4_MOE") and row["fits_fully"]
    assert row["weights_bytes"] == sum(r.nbytes for r in table("gpt-oss-20b"))
    assert run_json(*args, "--dtype", "mxfp4")["rows"][0]["weights_bytes"] == row["weights_bytes"]


@pytest.mark.parametrize(
    ("ngl", "cpu_moe", "logged_mib"),
    [
        # ik_llama.cpp#822, mainline b6699 on an RTX 3070: `-ngl 99 --n-cpu-moe 99 -c 131072 -fa on`:
        # "CUDA0 model buffer size = 1242.03 MiB": attention, output and the f32 tensors; every expert in RAM
        (99, 99, 1242.03),
        # ggml-org/llama.cpp#16188, b6182 Vulkan (M2 Pro, Asahi): `-ngl 24 --n-cpu-moe 14`: "offloaded 24/25 layers",
        # "Vulkan0 model buffer size = 4699.90 MiB": the experts of layers 14-23 and every layer's attention
        (24, 14, 4699.90),
    ],
)
def test_n_cpu_moe_leaves_the_first_layers_experts_in_system_memory(ngl, cpu_moe, logged_mib):
    rows = table("gpt-oss-20b")
    r = llamacpp_memory(get_model("gpt-oss-20b"), rows, 4096, era(None), weights_exact=True, ngl=ngl, cpu_moe=cpu_moe)
    gpu = r.devices[0].model_bytes / MiB
    assert 0.985 * logged_mib < gpu < logged_mib  # f32 tensors (~10 MiB) not in the table
    kept = [t for t in rows if expert_on_cpu(t.name, cpu_moe)]
    assert len(kept) == 3 * min(cpu_moe, 24)
    # token_embd stays on the CPU, and the output layer where -ngl does not reach it (24 of 25)
    ends = ("token_embd.weight",) + (("output.weight",) if ngl <= 24 else ())
    assert r.cpu_mapped_bytes == sum(t.nbytes for t in rows if t.name in ends) + sum(t.nbytes for t in kept)


def test_an_output_left_on_the_cpu_is_copied_beside_the_logits():
    # llama.cpp#16188 (b6182, Vulkan): -ngl 24 leaves the output layer (24/25) on the CPU; its matmul is offloaded with a
    # copy of the Q8_0 output weight: "Vulkan0 compute buffer size = 985.20 MiB" = (201,088 + 2,880) x 512 x 4 B of
    # logits + 201,088 x 2,880 x 34/32 B of weight, a larger moment than the -fa off scores (4,096 x 64 heads x 512 x 4)
    rows = table("gpt-oss-20b")
    r = llamacpp_memory(get_model("gpt-oss-20b"), rows, 4096, era("2025-08"), weights_exact=True, ngl=24, cpu_moe=14,
                        flash_attn=False)  # fmt: skip
    assert round(r.devices[0].compute_bytes / MiB, 2) == 985.20
    whole = llamacpp_memory(get_model("gpt-oss-20b"), rows, 4096, era("2025-08"), weights_exact=True, ngl=25,
                            cpu_moe=14, flash_attn=False)  # fmt: skip
    assert whole.devices[0].compute_bytes < 600 * MiB  # the output on the GPU: nothing copied, the scores' moment


def test_only_expert_stacks_of_the_first_layers_match():
    # common.h LLM_FFN_EXPS_REGEX per layer: blk.1 must not take blk.11's experts, nor shared experts or dense FFNs
    assert expert_on_cpu("blk.1.ffn_up_exps.weight", 2) and expert_on_cpu("blk.0.ffn_gate_up_exps.bias", 1)
    assert not expert_on_cpu("blk.11.ffn_up_exps.weight", 2)
    assert not expert_on_cpu("blk.0.ffn_up_shexp.weight", 5) and not expert_on_cpu("blk.0.ffn_up.weight", 5)
    assert expert_on_cpu("blk.93.ffn_down_chexps.weight", CPU_MOE_ALL) and not expert_on_cpu("blk.0.attn_q.weight", 9)


def _fit(model: str, gpu: str, n_ctx: int, version: str | None):
    spec, g = get_model(model), get_gpu(gpu)
    rows = table(model)
    capacity = g.capacity_bytes - GiB
    return spec, rows, largest_fit(spec, rows, n_ctx, era(version), capacity, False, weights_exact=True), capacity


def test_fit_sends_experts_to_system_memory_before_layers():
    # gpt-oss-120b (59 GiB) on a 24 GiB card: llama.cpp's --fit (2026 builds) keeps every layer on the GPU with the
    # experts of as few layers as it must in system memory; the 2025-08 era's -ngl leaves whole layers to the CPU
    spec, rows, r, capacity = _fit("gpt-oss-120b", "rtx-4090", 32768, None)
    assert r.fits and r.gpu_layers == r.total_layers and 0 < r.cpu_moe < spec.num_layers
    fewer = llamacpp_memory(spec, rows, 32768, era(None), weights_exact=True, ngl=99, cpu_moe=r.cpu_moe - 1,
                            capacity_bytes=capacity)  # fmt: skip
    assert not fewer.fits
    _, _, old, _ = _fit("gpt-oss-120b", "rtx-4090", 32768, "2025-08")
    assert old.cpu_moe == 0 and old.gpu_layers < old.total_layers
    # and it decodes faster: a token reads 4 of the 128 experts from RAM, not whole layers
    g, cal = get_gpu("rtx-4090"), constants_for(get_gpu("rtx-4090"), "llamacpp")
    new_speed, _ = llamacpp_speed(spec, rows, r, g, 64e9, cal)
    old_speed, _ = llamacpp_speed(spec, rows, old, g, 64e9, cal)
    assert new_speed.tokens_per_s > 1.5 * old_speed.tokens_per_s


def test_more_experts_in_system_memory_decode_slower():
    spec, g = get_model("gpt-oss-20b"), get_gpu("rtx-4090")
    rows, cal = table("gpt-oss-20b"), constants_for(g, "llamacpp")
    speeds = []
    for k in (0, 6, 12, 24):
        r = llamacpp_memory(spec, rows, 8192, era(None), weights_exact=True, ngl=99, cpu_moe=k)
        decode, prompt = llamacpp_speed(spec, rows, r, g, 64e9, cal)
        assert decode.tokens_per_s <= decode.ceiling and prompt is not None
        speeds.append((decode.tokens_per_s, prompt.tokens_per_s))
    assert speeds == sorted(speeds, reverse=True) and len(set(speeds)) == 4


def test_cpu_moe_flags_are_llama_cpps():
    out = run("fit", "gpt-oss-20b", "--gpu", "h100", "--n-cpu-moe", "4")
    assert out.exit_code == 2 and "--n-cpu-moe needs --engine llamacpp" in out.stderr
    out = run("fit", "gpt-oss-20b", "--gpu", "h100", "--engine", "llamacpp", "--n-cpu-moe", "-1")
    assert out.exit_code == 2 and "--n-cpu-moe takes a number of layers" in out.stderr
    row = run_json("fit", "gpt-oss-20b", "--gpu", "rtx-3080", "--engine", "llamacpp", "--cpu-moe", "--seq", "8k")[
        "rows"
    ][0]
    assert row["llamacpp"]["cpu_moe"] == 24 and row["fits_fully"]  # asked for: whole on the GPU but for the experts


def test_the_cpu_efficiency_is_the_public_runs_median_and_band():
    # plan/llamacpp_speed.CPU_EFFICIENCY is what benchmarks/llamacpp_cpu_eff.py derives from the 16 public runs of
    # benchmarks/llamacpp_cpu/points.csv: their median, 10th and 90th percentiles, each run the CPU's bytes over the
    # measured time less the GPU part's estimate, against its RAM's bandwidth
    from kvcalc.plan.llamacpp_speed import CPU_EFFICIENCY

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import llamacpp_cpu_eff

    mid, lo, hi, runs = llamacpp_cpu_eff.efficiency()
    assert (mid, lo, hi) == CPU_EFFICIENCY and len(runs) == 16
    assert all(0.2 < fraction < 1.0 for _, fraction, _, _ in runs)  # below the RAM's bandwidth, every one
    # CPU-only runs reach more of it than a GPU's hand-overs leave the CPU (same EPYC 9355: 0.50 against 0.34)
    by_id = {row["id"]: fraction for row, fraction, _, _ in runs}
    assert by_id["ik357-aessedai-qwen3-235b-cpuonly"] > by_id["ik357-aessedai-qwen3-235b-1gpu"]
    # --cpu-bandwidth's help names the same figure (written out there: the CLI does not import the speed model)
    from kvcalc.cli.llamacpp import CpuBwOpt

    assert f"llama.cpp reaches about {mid:g} of it" in CpuBwOpt.__metadata__[0].help


def test_generate_names_llama_cpps_placement_where_the_model_does_not_fit():
    args = ("generate", "gpt-oss-120b", "--gpu", "rtx-4090", "--engine", "llamacpp", "--prompt", "512", "--new", "128")
    note = run_json(*args, status=3)["memory_note"]
    assert note.startswith("DOES NOT FIT") and "routed experts, then layers" in note
    assert "`kvcalc fit gpt-oss-120b --engine llamacpp --gpu rtx-4090 --seq 640`" in note
    fits = run_json("generate", "gpt-oss-20b", "--gpu", "rtx-4090", "--engine", "llamacpp")["memory_note"]
    assert "llama.cpp would" not in fits and not run_json(*args[:-6], "--engine", "vllm", status=3)[
        "memory_note"
    ].count("llama")


def test_cpu_moe_on_a_dense_model_moves_nothing_and_says_so():
    # llama.cpp's ffn_*_exps overrides match no tensor of a dense model: the same buffers, and a warning
    args = ("fit", "llama-3.1-8b", "--engine", "llamacpp", "--gpu", "rtx-4090", "--seq", "8k")
    plain, moved = run_json(*args)["rows"][0]["llamacpp"], run_json(*args, "--n-cpu-moe", "8")["rows"][0]["llamacpp"]
    assert moved["devices"] == plain["devices"] and moved["cpu_moe"] == 0 and not plain["warnings"]
    assert moved["warnings"] == ["--cpu-moe / --n-cpu-moe: llama-3.1-8b routes no experts, nothing moves"]


def test_a_measured_hybrid_run_sits_inside_both_intervals_and_under_both_ceilings():
    # carteakey/lllms bench-results (benchmarks/llamacpp_cpu/points.csv): gpt-oss-120b MXFP4 on an RTX 4070, the
    # experts of 31 layers on the CPU, 2 x DDR5-5867 (93.9 GB/s): tg128 23.36 tok/s, pp512 427.92 tok/s. The prompt
    # is faster than the PCIe copy of those experts would allow (240): the ceiling counts only their one read from RAM
    args = ("fit", "gpt-oss-120b", "--engine", "llamacpp", "--gpu", "rtx-4070", "--seq", "4k")
    row = run_json(*args, "--n-cpu-moe", "31", "--cpu-bandwidth", "93.9")["rows"][0]
    lo, hi = row["decode_interval"]
    assert lo <= 23.36 <= hi and 23.36 < row["decode_tokens_per_s_ceiling"]
    lo, hi = row["prompt_interval"]
    assert lo <= 427.92 <= hi and 427.92 < row["prompt_tokens_per_s_ceiling"]
