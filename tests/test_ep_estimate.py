"""Expert parallelism and DP attention in the estimate (cost/ep_comm.py, cost/estimate.py): the MoE
all-to-all by hand for DeepSeek-V3, its terms priced as the ceiling prices them, the estimate's laws on
ep / DP layouts, and the calibration import's layout mapping (scripts/import_calibration.py)."""

import csv
import importlib.util
import math
from pathlib import Path

import pytest

from kvcalc.cost.calibration import STARTING
from kvcalc.cost.ep_comm import layout_comm
from kvcalc.cost.estimate import ENGINES, features, step_time, time_of
from kvcalc.cost.fabric import alltoall_seconds, layout_comm_seconds
from kvcalc.cost.shard import allreduce_seconds, link_for
from kvcalc.cost.step import Deployment, kv_bytes, stages
from kvcalc.model.presets import get_gpu, get_model
from kvcalc.plan.calibration import constants_for

REPO = Path(__file__).resolve().parent.parent


def _dep(gpu, tp, ep=1, dp=False):
    return Deployment(tp=tp, link=link_for(get_gpu(gpu)), ep=ep, dp_attention=dp)


def test_deepseek_v3_all_to_all_by_hand():
    # DeepSeek-V3 (hidden 7168, 256 experts, top-8, 3 dense layers of 61) on 8 x H200, DP attention, ep 8,
    # a decode step of 64 sequences: each rank holds 8 of them. A token goes once to each other rank
    # holding one of its 8 experts: 7 x (1 - (7/8)^8) = 4.5947 ranks on average (uniform routing), so one
    # dispatch sends 8 x 4.595 x 7168 x 2 B (bf16) = 526,961 B; the combine returns as many. At most
    # tokens x hidden x top-k x (ep - 1) / ep = 8 x 7168 x 8 x 2 x 7/8 = 802,816 B without de-duplication.
    spec = get_model("deepseek-v3")
    comm = layout_comm(spec, _dep("h200", 8, 8, True), 64, 2)
    layers, sent, bw, alpha = comm.a2a
    assert layers == 58
    assert sent == pytest.approx(8 * 7 * (1 - (7 / 8) ** 8) * 7168 * 2)
    assert round(sent) == 526961
    assert sent < 8 * 7168 * 8 * 2 * 7 / 8 == 802816
    assert (bw, alpha) == (450e9, 3.7e-6)  # NVLink 4 behind NVSwitch, one direction
    # attention is each rank's own: the 3 dense MLPs all-reduce every token, nothing else does
    assert (comm.allreduces, comm.message_bytes, comm.sub_allreduce[0]) == (3, 64 * 7168 * 2, 0)
    # ep 4 of tp 8: each expert is split over 2 ranks, whose partial sums are reduced per MoE layer
    half = layout_comm(spec, _dep("h200", 8, 4, True), 64, 2)
    assert half.sub_allreduce == (58, 64 * 7168 * 2 // 4, 2, 450e9)
    # without DP attention every rank sees every token: tensor parallelism's 2 all-reduces per layer
    assert layout_comm(spec, _dep("h200", 8, 8), 64, 2)[:2] == (122, 64 * 7168 * 2)


@pytest.mark.parametrize(
    "model,gpu,tp,ep,dp",
    [
        ("deepseek-v3", "h200", 8, 8, True),
        ("deepseek-v3", "h200", 8, 4, True),
        ("deepseek-v3", "b200", 8, 8, False),
        ("deepseek-v3", "h200", 8, 1, True),
        ("qwen3-30b-a3b", "h100", 4, 2, True),
        ("gpt-oss-120b", "h100", 4, 4, True),
    ],
)
def test_layout_terms_at_line_rate_are_the_ceilings_communication(model, gpu, tp, ep, dp):
    spec = get_model(model)
    dep = _dep(gpu, tp, ep, dp)
    for tokens in (1, 7, 64, 4096):
        comm = layout_comm(spec, dep, tokens, 2)
        n, message, ranks, bw = comm.sub_allreduce
        layers, sent, _, _ = comm.a2a
        ideal = comm.allreduces * allreduce_seconds(comm.message_bytes, tp, dep.link)
        ideal += n * allreduce_seconds(message, ranks, dep.link) if n else 0.0
        mine = -(-tokens // tp)
        ideal += layers * alltoall_seconds(mine, spec.hidden_size, 2, spec.experts_per_token, ep, dep.link)
        assert ideal == pytest.approx(layout_comm_seconds(spec, dep, tokens, 2))
        if layers:
            assert sent > 0


def test_all_to_all_term_is_at_least_the_ceilings():
    # A fitted latency below the link's own cannot take the term under the ceiling's 2 x (alpha + bytes / bw)
    spec, gpu = get_model("deepseek-v3"), get_gpu("h200")
    dep = _dep("h200", 8, 8, True)
    f = features(spec, gpu, dep, decode_batch=64, decode_context=2048)
    c = dict(STARTING, a2a_alpha_s=1e-9, a2a_bw_eff=1.0, step_s=1.0)  # step_s keeps the sum above the ceiling
    term = time_of(f, c, "sglang") - time_of(f._replace(a2a=(0, 0.0, 0.0, 0.0)), c, "sglang")
    ceiling = 58 * alltoall_seconds(8, 7168, 2, 8, 8, dep.link)
    assert term == pytest.approx(ceiling)
    # the starting constants (DeepEP's 0.75 of NVLink, 15 us) charge more than line rate
    c = dict(STARTING, step_s=1.0)
    term = time_of(f, c, "sglang") - time_of(f._replace(a2a=(0, 0.0, 0.0, 0.0)), c, "sglang")
    assert term == pytest.approx(2 * 58 * (15e-6 + f.a2a[1] / (450e9 * 0.75)))
    assert term > ceiling


def test_dp_attention_reads_only_a_ranks_own_sequences():
    spec, gpu = get_model("deepseek-v3"), get_gpu("h200")
    dep = _dep("h200", 8, 8, True)
    st = stages(spec, dep, None)[0]
    f = features(spec, gpu, dep, decode_batch=60, decode_context=4096)
    assert f.stage_bytes[0][1] == kv_bytes(st, 60, 4096, "bf16")  # ceil(60 / 8) = 8 sequences' KV
    assert f.stage_bytes[0][1] == 8 * kv_bytes(st, 1, 4096, "bf16")
    assert f.seqs == 8  # each rank's engine schedules and samples its own


@pytest.mark.parametrize(
    "model,gpu,tp,ep,dp",
    [("deepseek-v3", "h200", 8, 8, True), ("deepseek-v3", "b200", 8, 4, True), ("gpt-oss-120b", "h100", 4, 4, False)],
)
@pytest.mark.parametrize("engine", ENGINES)
def test_ep_estimate_never_beats_the_ceiling_and_grows_with_batch_and_context(model, gpu, tp, ep, dp, engine):
    spec, g = get_model(model), get_gpu(gpu)
    dep = _dep(gpu, tp, ep, dp)
    cal = constants_for(g, engine)
    last = 0.0
    for batch in (1, 2, 8, 33, 128, 512):
        times = [
            step_time(spec, g, dep, engine=engine, decode_batch=batch, decode_context=ctx, calibration=cal)
            for ctx in (128, 1024, 8192, 32768)
        ]
        for t in times:
            assert t.estimate_s >= t.ceiling_s > 0
            assert t.lo_s <= t.estimate_s <= t.hi_s
        assert [t.estimate_s for t in times] == sorted(t.estimate_s for t in times)  # context
        assert times[0].estimate_s >= last  # batch
        last = times[0].estimate_s
    pre = [step_time(spec, g, dep, engine=engine, prefill_tokens=n, calibration=cal) for n in (16, 512, 4096, 16384)]
    assert all(p.estimate_s >= p.ceiling_s for p in pre)
    assert [p.estimate_s for p in pre] == sorted(p.estimate_s for p in pre)


def _importer():
    spec = importlib.util.spec_from_file_location("import_calibration", REPO / "scripts" / "import_calibration.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(tp, dp, mtp, mep, system="h200_sxm"):
    return dict(tp_size=tp, attention_dp_size=dp, moe_tp_size=mtp, moe_ep_size=mep, pp_size="1", system=system)


def test_aiconfigurator_layouts_map_to_deployments():
    layout = _importer().aic_layout
    v3 = "deepseek-v3"
    assert layout(_row("8", "1", "1", "8"), v3) == (8, 8, False)  # attention TP 8, MoE EP 8
    assert layout(_row("1", "8", "1", "8"), v3) == (8, 8, True)  # DEP8: attention DP, MoE EP
    assert layout(_row("1", "4", "4", "1"), "gpt-oss-120b") == (4, 1, True)  # attention DP, MoE TP
    assert layout(_row("2", "", "0", "0"), "qwen3-32b") == (2, 1, False)  # dense: MoE columns unused
    # what kvcalc cannot express, or the row does not say, is a reason
    assert "ambiguous" in layout(_row("64", "1", "8", "8"), v3)
    assert "attention TP > 1" in layout(_row("4", "4", "1", "16"), "minimax-m2.5")
    assert "attention DP not stated" in layout(_row("1", "", "2", "1"), "qwen3-235b-a22b")


def test_aiconfigurator_clients_spread_over_unstated_schedulers_are_left_out():
    unstated = _importer().unstated_schedulers
    # silicon_sample.csv: Qwen3-32B NVFP4 on B200, tp 2, 416 clients, batch_size 13 (32 schedulers)
    assert unstated({"batch_size": "13"}, 416, 2, False)
    assert not unstated({"batch_size": "416"}, 416, 2, False)  # one engine's scheduler holds them all
    assert not unstated({"batch_size": "128"}, 512, 4, True)  # MiniMax-M2.5 DEP4: a quarter per DP rank
    assert unstated({"batch_size": "56"}, 448, 8, False)  # DeepSeek-V3.1 at tp 8: DP attention not stated
    assert not unstated({"batch_size": ""}, 64, 1, False)


def test_calibration_points_carry_their_layout():
    rows = list(csv.DictReader(open(REPO / "benchmarks" / "calibration" / "points.csv", newline="")))
    layouts = {(r["ep"], r["dp_attention"]) for r in rows}
    assert {("1", "0"), ("8", "0"), ("8", "1"), ("4", "0")} <= layouts
    for r in rows:
        tp, ep = int(r["tp"]), int(r["ep"])
        assert tp % ep == 0 and (r["dp_attention"] == "0" or tp >= 2)
    ix = {r["id"]: r for r in rows}["ix-dsr1-h200-trt-fp8-tp8ep8-1024-1024-c8-tpot"]
    assert (ix["tp"], ix["ep"], ix["dp_attention"]) == ("8", "8", "0")  # InferenceX: decode_dp_attention false
    assert math.isclose(float(ix["value"]), 14.8229)
    blog = {r["id"]: r for r in rows}["trtllm-dsr1blog-h200-maxthr-thr"]  # "enable_attention_dp: true"
    assert (blog["tp"], blog["ep"], blog["dp_attention"], blog["concurrency"]) == ("8", "8", "1", "1024")


def test_calibration_points_carry_the_limits_their_runs_were_launched_with():
    # scripts/inferencex_launch.py: only closed-loop runs of InferenceX (aiconfigurator's dump, InferenceX's own
    # rows) carry launch flags, every one a Limits field the simulation takes; the TTFTs of runs that held their
    # prompts back (TensorRT-LLM's delay batching: Llama-3.1-70B at 1k / 1k below tp 8) are not fitted, their
    # TPOTs are.
    from kvcalc.plan.serve import Limits

    rows = list(csv.DictReader(open(REPO / "benchmarks" / "calibration" / "points.csv", newline="")))
    launched = [r for r in rows if r["launch"]]
    assert {r["engine"] for r in launched} == {"vllm", "sglang", "trtllm"}
    for r in launched:
        assert r["regime"] == "closed_loop_concurrency"
        assert r["source"] in ("github.com/ai-dynamo/aiconfigurator", "github.com/vngcloud/InferenceX-app")
        for item in r["launch"].split():
            name, _, value = item.partition("=")
            assert name in Limits._fields and int(value) > 0
    llama = [r for r in rows if r["model"] == "llama-3.1-70b" and r["engine"] == "trtllm" and r["prompt"] == "1024"]
    held = [r for r in llama if r["new"] == "1024" and int(r["tp"]) < 8]
    assert held and {r["metric"] for r in held} == {"tpot_ms"}
    assert {r["metric"] for r in llama if r["new"] == "8192"} == {"tpot_ms", "ttft_ms"}
    assert all(r["launch"] == "max_num_batched_tokens=16384" for r in llama)  # 70b_*_trt_slurm.sh


def test_runs_recorded_at_their_clients_cap_are_not_fitted():
    # InferenceX's gpt-oss H100 docker script sent 10 x CONC prompts under `--max-concurrency 512` from
    # 2025-11-21 to 2025-12-08: those runs read 512 clients whatever CONC was; the later runs name theirs.
    cap = _importer().client_cap_as_concurrency
    assert cap("gpt-oss-120b", "h100", "vllm", 512, "2025-12-05")
    assert not cap("gpt-oss-120b", "h100", "vllm", 512, "2026-03-27")  # after the fix (4e135fd3)
    assert not cap("gpt-oss-120b", "h100", "vllm", 64, "2025-12-05")
    assert not cap("gpt-oss-120b", "h200", "vllm", 512, "2025-12-05")  # another script
    rows = list(csv.DictReader(open(REPO / "benchmarks" / "calibration" / "points.csv", newline="")))
    oss = [r for r in rows if (r["model"], r["gpu"], r["engine"]) == ("gpt-oss-120b", "h100", "vllm")]
    aic = [r for r in oss if r["source"] == "github.com/ai-dynamo/aiconfigurator"]
    assert aic and "512" not in {r["concurrency"] for r in aic}
    assert {"4", "64"} <= {r["concurrency"] for r in aic}


def test_each_aiconfigurator_run_is_fitted_once():
    # A run in several of the sample's files is read once: Qwen3.5-397B under SGLang at 8k / 1k from 16 clients
    # (TTFT 765.4942 ms in InferenceX's database dump and dated CSVs, 765.49 in the gap-analysis CSV) is one
    # row, the dated copy: launched with InferenceX's flags, its clients' lengths drawn from [0.8 L, L].
    rows = list(csv.DictReader(open(REPO / "benchmarks" / "calibration" / "points.csv", newline="")))
    aic = [r for r in rows if r["source"] == "github.com/ai-dynamo/aiconfigurator"]
    figures: dict[str, dict[str, str]] = {}  # each run's TTFT and TPOT, to the hundredth of a millisecond
    for r in aic:
        figures.setdefault(r["id"].rpartition(":")[0], {})[r["metric"]] = f"{float(r['value']):.2f}"
    layout = {r["id"].rpartition(":")[0]: tuple(r[k] for k in _importer().RUN_COLUMNS) for r in aic}
    runs = [layout[i] + tuple(sorted(f.items())) for i, f in figures.items()]
    assert len(runs) == len(set(runs))
    qwen = [r for r in aic if r["metric"] == "ttft_ms" and round(float(r["value"]), 2) == 765.49]
    assert len(qwen) == 1 and qwen[0]["range_ratio"] == "0.8" and "recv_interval=30" in qwen[0]["launch"]


def test_inferencex_runs_in_aiconfigurators_dump_are_fitted_from_it_alone():
    # aiconfigurator's sample is a dump of InferenceX's database: a run both hold (same configuration, same figures)
    # is read from the dump; a figure only InferenceX's row has (the shared H200 rows' throughput) stays.
    from collections import Counter

    imp = _importer()
    config = dict(model="deepseek-v3", gpu="h200", tp=8, ep=1, dp_attention=0, engine="sglang", dtype="fp8")
    config |= dict(concurrency=4, prompt=1024, new=8192)
    aic = [dict(config, id="cfg81:ttft", metric="ttft_ms", value=259.41040181787685, source="aic")]
    aic += [dict(config, id="cfg81:tpot", metric="tpot_ms", value=10.264333007560356, source="aic")]
    ix = [dict(config, id=f"ix-c4-{m[:4]}", metric=m, value=v, source=imp.INFERENCEX_APP)
          for m, v in (("ttft_ms", 259.41), ("tpot_ms", 10.2643), ("output_tok_s_total", 382.4))]  # fmt: skip
    other = [dict(r, id=r["id"].replace("c4", "c4b"), value=r["value"] * 1.1) for r in ix]  # another run
    kept = imp.inferencex_not_in(aic, ix + other, Counter())
    assert [r["id"] for r in kept] == ["ix-c4-outp", "ix-c4b-ttft", "ix-c4b-tpot", "ix-c4b-outp"]
    rows = list(csv.DictReader(open(REPO / "benchmarks" / "calibration" / "points.csv", newline="")))

    def runs(source: str, base) -> dict[str, dict]:  # each run's configuration and figures, by id
        out: dict[str, dict] = {}
        for r in rows:
            if r["source"] == source:
                run = out.setdefault(base(r["id"]), {"config": tuple(r[k] for k in imp.RUN_COLUMNS), "figures": {}})
                run["figures"][r["metric"]] = float(r["value"])
        return out

    dump = list(runs("github.com/ai-dynamo/aiconfigurator", lambda i: i.rpartition(":")[0]).values())
    ixruns = runs(imp.INFERENCEX_APP, lambda i: i.rpartition("-")[0]).values()
    shared = [(ix, d) for ix in ixruns for d in dump if ix["config"] == d["config"]]
    assert ixruns and not [
        (ix, d)
        for ix, d in shared
        if (both := ix["figures"].keys() & d["figures"].keys())
        and all(math.isclose(ix["figures"][k], d["figures"][k], rel_tol=1e-4) for k in both)
    ]


def test_disaggregated_gb200_runs_recorded_as_aggregated_are_not_fitted():
    # InferenceX's GB200 runner launched only Dynamo's disaggregated multi-node jobs until 2025-12-05; its
    # database recorded those of 2025-11 as aggregated with tp the job's GPU count (DeepSeek-R1 "tp64" at 538
    # clients). The single-tray aggregated runs of 2026 stay.
    agg = _importer().disaggregated_as_agg
    assert agg("gb200", "2025-11-17") and not agg("gb200", "2026-03-23") and not agg("b200", "2025-11-17")
    assert not agg("gb200", "")  # the gap-analysis rows carry no date
    rows = list(csv.DictReader(open(REPO / "benchmarks" / "calibration" / "points.csv", newline="")))
    gb200 = [r for r in rows if r["gpu"] == "gb200"]
    assert gb200 and max(int(r["tp"]) for r in gb200) <= 8


def test_runs_of_a_speculative_decoding_sweep_are_not_fitted():
    # aiconfigurator's `measured=` stamp is the InferenceX commit whose sweep ran the row (bf3456727, "Add MTP
    # Benchmark Support for DeepSeek-R1 TRT", 2026-01-15 06:26:18 +0800, stamps 2026-01-14T22:26:21Z): that PR's
    # configurations were all `spec-decoding: mtp`, so its runs decoded several tokens a step.
    spec = _importer().speculative_sweep

    def row(stamp: str) -> dict:
        return {"silicon_data_source": f"source_file=2026-03-25.csv; model=DeepSeek-R1; measured={stamp}; wip=False"}

    assert spec(row("2026-01-14T22:26:21Z")) and spec(row("2026-03-20T22:08:23Z"))
    assert not spec(row("2026-03-25T16:34:14Z"))  # 12ba0ae07, an SGLang image update: plain decoding
    assert not spec({"silicon_data_source": "source_file=/gap-analysis/h200_sxm/vllm/0.12.0/x.csv"})
    rows = list(csv.DictReader(open(REPO / "benchmarks" / "calibration" / "points.csv", newline="")))
    aic = {r["id"].rpartition(":")[0] for r in rows if r["source"] == "github.com/ai-dynamo/aiconfigurator"}
    # two of that sweep's runs (DeepSeek-R1 fp8, 8 x H200, 1k / 8k at 64 and 128 clients) had read under the ceiling
    assert aic and not aic & {
        "2026_03_25_deepseek_r1_h200_sxm_trtllm_fp8_agg_1024x8192_c128_tp8_0_ep8_0_1250",
        "2026_03_25_deepseek_r1_h200_sxm_trtllm_fp8_agg_1024x8192_c64_tp8_0_ep8_0_1261",
    }


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_dp_attention_replica_has_each_ranks_scheduler_and_pool(engine):
    # Each of the 8 DP-attention ranks runs its own scheduler over its own KV pool: the replica's limits
    # are 8 times one rank's (the pool as the engine model prices one rank)
    from kvcalc.plan.serve_pool import kv_pool, serving_limits

    spec, gpu = get_model("deepseek-v3"), get_gpu("h200")
    dp = _dep("h200", 8, 8, True)
    one, _ = kv_pool(spec, gpu, dp, engine=engine, dtype="fp8", kv_dtype="fp8", context=2048)
    limits, pool = serving_limits(spec, gpu, dp, engine=engine, dtype="fp8", kv_dtype="fp8", prompt=1024, new=1024)
    assert limits.max_num_seqs == 8 * one.max_num_seqs
    assert limits.max_num_batched_tokens == 8 * one.max_num_batched_tokens
    assert limits.kv_blocks == 8 * one.kv_blocks and limits.block_size == one.block_size
    assert pool.endswith("x 8 DP-attention ranks")


@pytest.mark.parametrize("model", ["deepseek-v3", "qwen3-235b-a22b"])
def test_sglang_serves_from_the_pool_it_sizes_under_dp_attention(model):
    # Under --enable-dp-attention each SGLang rank holds its own requests' whole KV heads, the attention
    # weights whole, a default mem_fraction_static that keeps cuda_graph_max_bs x dp x 3 MiB more out, and
    # chunked_prefill_size // dp (server_args): the pool generate serves from is fit's, rank for rank
    from kvcalc.api import fit
    from kvcalc.plan.serve_pool import serving_limits

    spec, gpu = get_model(model), get_gpu("h200")
    limits, pool = serving_limits(spec, gpu, _dep("h200", 8, 8, True), engine="sglang", dtype=None,
                                  kv_dtype="bf16", prompt=1024, new=1024)  # fmt: skip
    own = fit(model, "h200", tp=8, ep=8, dp_attention=True, engine="sglang", seq=2048, kv_dtype="bf16").sglang
    assert own.dp_size == 8 and own.chunked_prefill_size == 8192 // 8
    assert limits.kv_blocks * limits.block_size == own.kv_capacity_tokens == 8 * own.max_total_num_tokens
    assert limits.max_num_batched_tokens == 8192  # the server's chunk again, as eight ranks' 1,024
    assert f"pool ({own.max_total_num_tokens:,} tokens)" in pool
    # a GQA model's rank holds its requests' 4 KV heads whole, not the 1 a tensor-parallel rank would
    assert model == "deepseek-v3" or own.cell_bytes == 94 * 4 * 128 * 2 * 2


def test_vllm_under_dp_attention_is_priced_by_kvcalcs_own_rank_arithmetic():
    # vLLM runs DP attention as --data-parallel-size engine cores of tp 1, each profiling its own pool, which
    # its memory model here does not cover (fit refuses it): the served pool is kvcalc's own per rank, each
    # rank holding its requests' 4 KV heads whole, not vLLM's tensor-parallel pool (1 head a rank) x 8
    from kvcalc.plan.serve_pool import serving_limits

    spec, gpu, dp = get_model("qwen3-235b-a22b"), get_gpu("h200"), _dep("h200", 8, 8, True)
    kw = dict(engine="vllm", dtype=None, kv_dtype="bf16", prompt=1024, new=1024)
    limits, pool = serving_limits(spec, gpu, dp, **kw)
    tp_limits, _ = serving_limits(spec, gpu, _dep("h200", 8, 8), **kw)
    assert "no vllm pool model under DP attention" in pool and pool.endswith("x 8 DP-attention ranks")
    st = stages(spec, dp, None)[0]
    cell = 94 * 4 * 128 * 2 * 2  # layers x KV heads x head dim x K and V x bf16
    free = int(gpu.capacity_bytes * dp.gpu_util) - dp.reserve_bytes - st.resident_bytes
    assert limits.kv_blocks == 8 * (free // (16 * cell))
    assert limits.kv_blocks < 8 * tp_limits.kv_blocks / 2


def test_inferencex_runs_take_the_layout_their_launch_script_chose():
    # Until 2025-11-03 InferenceX's results recorded neither ep nor DP attention, and its TensorRT-LLM scripts chose
    # them (dsr1_fp8_h200_trt_slurm.sh: EP_SIZE=$TP, DP attention above 64 clients at 1k / 1k, above 32 at 8k / 1k);
    # SGLang's DeepSeek fp4 B200 script passed --enable-ep-moe; vLLM's MiniMax fp8 scripts tested `-ge 1`.
    layout = _importer().script_layout
    assert layout("trtllm", "deepseek-v3", "h200", "fp8", 1024, 1024, 8, 64, "2025-11-02") == (8, False)
    assert layout("trtllm", "deepseek-v3", "h200", "fp8", 1024, 1024, 8, 128, "2025-11-02") == (8, True)
    assert layout("trtllm", "deepseek-v3", "h200", "fp8", 8192, 1024, 8, 64, "2025-11-02") == (8, True)
    assert layout("trtllm", "deepseek-v3", "h200", "fp8", 1024, 1024, 8, 64, "2025-11-03") is None  # recorded
    # dsr1_fp4_b200_trt_slurm.sh at tp 8, 1k / 8k: expert parallel above 16 clients, DP attention from 256
    assert layout("trtllm", "deepseek-v3", "b200", "nvfp4", 1024, 8192, 8, 16, "2025-11-02") is None
    assert layout("trtllm", "deepseek-v3", "b200", "nvfp4", 1024, 8192, 8, 32, "2025-11-02") == (8, False)
    assert layout("trtllm", "deepseek-v3", "b200", "nvfp4", 1024, 8192, 8, 256, "2025-11-02") == (8, True)
    assert layout("trtllm", "gpt-oss-120b", "h200", "", 1024, 1024, 4, 8, "2025-11-02") == (4, False)
    assert layout("sglang", "deepseek-v3", "b200", "nvfp4", 1024, 1024, 4, 8, "2025-11-10") == (4, False)
    assert layout("sglang", "deepseek-v3", "b200", "fp8", 1024, 1024, 8, 8, "2025-11-10") is None
    assert layout("vllm", "minimax-m2.5", "b200", "fp8", 1024, 1024, 2, 8, "2026-03-28") == (2, False)
    assert layout("vllm", "minimax-m2.5", "b200", "fp8", 1024, 1024, 2, 8, "2026-04-03") is None  # `-gt 1`
    assert layout("vllm", "minimax-m2.5", "h200", "fp8", 1024, 1024, 4, 8, "2026-03-01") is None  # no EP yet
    assert layout("vllm", "minimax-m2.5", "h100", "fp8", 1024, 1024, 4, 8, "2026-03-28") is None
    rows = {r["id"]: r for r in csv.DictReader(open(REPO / "benchmarks" / "calibration" / "points.csv", newline=""))}
    # aiconfigurator's rows of those runs (moe_tp 8, moe_ep 1 in the sample) and InferenceX's own copies alike
    run = rows["dsr1_h200_trtllm_fp8_agg_8192x1024_c64_cfg83:tpot"]
    assert (run["tp"], run["ep"], run["dp_attention"]) == ("8", "8", "1")
    # the shared InferenceX copy of a run of that day (its id says tp8ep1) is then read from the dump alone
    assert "ix-dsr1-h200-trt-fp8-tp8ep1-1024-8192-c4-tpot" not in rows


def test_sglang_runs_beyond_their_scripts_seat_cap_keep_the_engines_defaults():
    # dsr1_fp8_b200.sh caps the seats at 128 and its sweep stops at 64 clients: a run from 256 clients (TTFT 2.1 s
    # at 1k / 1k, no client waiting a whole request for a seat) was launched otherwise.
    launch = _importer().launch
    assert "max_num_seqs=128" in launch("sglang", "deepseek-v3", "b200", "fp8", 1024, 1024, 8, 64, "2026-03-25", False)
    assert launch("sglang", "deepseek-v3", "b200", "fp8", 1024, 1024, 8, 256, "2026-03-25", False) == ""
    assert launch("vllm", "minimax-m2.5", "h100", "fp8", 1024, 1024, 4, 512, "2026-03-25", False) == (
        "max_num_seqs=256"  # vLLM's MiniMax H100 script caps 512 clients at 256 seats on purpose
    )


def test_trtllm_bench_offline_runs_read_as_the_bursts_they_ran():
    burst = _importer().trtllm_bench_burst
    # TensorRT-LLM perf overview (03e27c7): "GPT-OSS 120B | B200 DEP2 (FP4) | 1000/1000 | 25,943"; its recipe sets
    # enable_attention_dp, and "Preparing a Dataset" (00f3768) gives 3,000 requests for 1000 / 1000
    dep = dict(model="openai/gpt-oss-120b", num_gpus=2, tensor_parallel=None, expert_parallel=2, input_len=1000,
               output_len=1000, quote="", notes="", regime="offline_max_throughput")  # fmt: skip
    q = burst(dep)
    assert (q["regime"], q["batch_size"], q["tensor_parallel"], q["expert_parallel"]) == (
        "burst_all_at_once",
        3000,
        2,
        2,
    )
    assert "enable_attention_dp: true" in q["notes"]
    dense = dict(dep, model="nvidia/Llama-3.1-8B-Instruct-FP8", num_gpus=1, tensor_parallel=1, expert_parallel=None,
                 input_len=128, output_len=128)  # fmt: skip
    q = burst(dense)
    assert (q["batch_size"], q["tensor_parallel"], q["expert_parallel"], q["notes"]) == (30000, 1, None, "")
    assert burst(dict(dense, input_len=300)) == dict(dense, input_len=300)  # no request count printed: unchanged


def test_held_out_bursts_carry_their_request_count_and_total_throughput():
    rows = {r["id"]: r for r in csv.DictReader(open(REPO / "benchmarks" / "holdout" / "points.csv", newline=""))}
    r = rows["trtllm12-gpt-oss120b-b200-dep2-fp4-1000-1000"]  # 25,943 tokens/s per GPU x 2 GPUs
    assert (r["regime"], r["batch"], r["tp"], r["ep"], r["dp_attention"]) == (
        "burst_all_at_once",
        "3000",
        "2",
        "2",
        "1",
    )
    assert (r["dtype"], r["kv_dtype"], float(r["value"])) == ("", "fp8", 51886.0)  # MXFP4, the recipe's fp8 cache
    h = rows["trtllm12-gpt-oss120b-h200-tp1-fp8-1000-1000"]  # "# Hopper: use auto": the model's bf16 cache
    assert (h["tp"], h["dp_attention"], h["kv_dtype"], float(h["value"])) == ("1", "0", "bf16", 6868.0)
    fitted = csv.DictReader(open(REPO / "benchmarks" / "calibration" / "points.csv", newline=""))
    assert not any(r["regime"] == "burst_all_at_once" for r in fitted)
