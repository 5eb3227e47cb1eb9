"""Issue 20's layouts: expert parallelism, DP attention and node boundaries (cost/fabric.py, shard.py),
against hand-derived figures."""

import math

import pytest
from conftest import run, run_json

import kvcalc
from kvcalc.cost import fabric
from kvcalc.cost.shard import LINKS, _rank_params
from kvcalc.model.presets import get_model


def test_dp_attention_replicates_mla_attention_and_the_embedding():
    # DeepSeek-V3 MLA, per layer split by heads: q_b 1,536 x 128 x 192 + kv_b 512 x 128 x (128 + 128) +
    # o 128 x 128 x 7,168 = 171,966,464; under DP attention each of 8 ranks holds it whole: 7/8 more, 61 layers.
    spec = get_model("deepseek-v3")
    split = 1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168
    assert split == 171_966_464
    tp8 = _rank_params(spec, 8, 0, 1, None)
    dp8 = _rank_params(spec, 8, 0, 1, None, dp_attention=True)
    assert dp8.mixers - tp8.mixers == 61 * split * 7 / 8 == 9_178_710_016
    # SGLang's DP attention keeps the 129,280 x 7,168 input embedding whole; the LM head stays split
    assert dp8.ends - tp8.ends == 129280 * 7168 * 7 / 8
    assert dp8.experts == tp8.experts and dp8.dense == tp8.dense


def test_dp_attention_multiplies_mla_kv_capacity():
    # MLA's latent (512 + 64 per layer, 61 layers, bf16: 70,272 B per token) is whole on every TP rank, so
    # plain tp 8 holds one copy of each token per rank; DP attention gives each rank its own tokens.
    plain = run_json("fit", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--seq", "8k")
    dp = run_json("fit", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--ep", "8", "--dp-attention", "--seq", "8k")
    per_token = 61 * 576 * 2
    for out, ranks in ((plain, 1), (dp, 8)):
        p = out["per_gpu"]
        usable = p["budget_bytes"] - p["weight_bytes"] - p["reserve_bytes"]
        assert out["kv_capacity_tokens"] == ranks * (usable // (per_token * 16)) * 16
    assert dp["kv_capacity_tokens"] >= 4 * plain["kv_capacity_tokens"]
    assert dp["ep"] == 8 and dp["dp_attention"] is True and dp["max_batch"] % 8 == 0


def test_alltoall_hand_figures():
    # 64 tokens on a rank, hidden 7,168, bf16, top-8 of experts over 8 ranks: each other rank is needed with
    # probability 1 - (7/8)^8, so 7 x 0.656391 = 4.594738 remote ranks per token.
    r = fabric.remote_ranks(8, 8)
    assert r == pytest.approx(7 * (1 - (7 / 8) ** 8)) and r == pytest.approx(4.594738, rel=1e-6)
    sent = fabric.alltoall_bytes(64, 7168, 2, 8, 8)
    assert sent == pytest.approx(64 * r * 7168 * 2)
    link = LINKS["nvlink4"]
    assert fabric.alltoall_seconds(64, 7168, 2, 8, 8, link) == pytest.approx(2 * (3.7e-6 + sent / 450e9))
    assert fabric.alltoall_seconds(64, 7168, 2, 8, 1, link) == 0.0


@pytest.mark.parametrize("tokens", [1, 8, 64, 512, 4096])
def test_ep_imbalance_is_a_busiest_rank_factor(tokens):
    f = fabric.ep_imbalance(256, 8, tokens, 8)
    assert 1.0 <= f <= 8.0
    assert fabric.ep_imbalance(256, 8, tokens, 1) == 1.0
    # more tokens even the load out (law of large numbers)
    assert fabric.ep_imbalance(256, 8, tokens * 4, 8) < f
    # n = 512 x 8 pairs over 8 ranks: 1 + sqrt(n x 1/8 x 7/8) x 1.4236 / (n / 8), 1.4236 the expected
    # largest of 8 standard normals (Tippett's table), not the asymptotic sqrt(2 ln 8) = 2.04
    n = 512 * 8
    assert fabric.ep_imbalance(256, 8, 512, 8) == pytest.approx(
        1 + math.sqrt(n / 8 * 7 / 8) * 1.4236 / (n / 8), rel=1e-4
    )


def test_ep_reads_the_busiest_ranks_experts():
    spec_args = ("roofline", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--batch", "8", "--seq", "1k")
    tp = run_json(*spec_args)["rows"][0]
    ep = run_json(*spec_args, "--ep", "8")["rows"][0]
    assert ep["weight_bytes"] > tp["weight_bytes"]  # the same mean, but the step waits for the busiest rank
    assert ep["kv_bytes"] == tp["kv_bytes"]


def test_ep_ceiling_reads_the_kindest_routings_busiest_rank():
    # Mixtral 8x7B on 4 GPUs at batch 64: the ceiling routes every token to the same 2 experts. Under tp 4 each
    # rank reads a quarter of both; under ep 4 a rank holds 2 whole experts, and the 2 reached at best lie on two
    # ranks, so the busiest reads one whole expert a layer: 32 x (1 - 2/4) x 3 x 4,096 x 14,336 x 2 B more.
    args = ("roofline", "mixtral-8x7b", "--gpu", "h100", "--tp", "4", "--batch", "64", "--seq", "1k")
    tp, ep = run_json(*args)["rows"][0], run_json(*args, "--ep", "4")["rows"][0]
    assert ep["ceiling_weight_bytes"] - tp["ceiling_weight_bytes"] == 32 * 3 * 4096 * 14336 * 2 // 2
    assert ep["ceiling_weight_bytes"] < ep["weight_bytes"]


def test_tp_across_nodes_is_flagged_and_costed_on_the_scale_out_link():
    # Llama-3.1-405B at tp 16 on 8-GPU H100 boards: 126 layers x 2 all-reduces of 16,384 x 2 B per token;
    # ring wire bytes 2 x 15/16 x 32,768 = 61,440 B at batch 1, over InfiniBand's 50 GB/s instead of NVLink's 450.
    out = run_json("roofline", "llama-3.1-405b", "--gpu", "h100", "--tp", "16", "--batch", "1", "--seq", "1k")
    assert any("tensor parallelism 16 spans 2 nodes of 8" in w for w in out["warnings"])
    assert out["rows"][0]["comm_seconds"] == pytest.approx(252 * (3.7e-6 + 61440 / 50e9))
    one = run_json(
        "roofline",
        "llama-3.1-405b",
        "--gpu",
        "h100",
        "--tp",
        "16",
        "--batch",
        "1",
        "--seq",
        "1k",
        "--gpus-per-node",
        "16",
    )
    assert not one["warnings"] and one["rows"][0]["comm_seconds"] == pytest.approx(252 * (3.7e-6 + 61440 / 450e9))
    mi = run_json("roofline", "llama-3.1-405b", "--gpu", "mi300x", "--tp", "16", "--batch", "1", "--seq", "1k")
    assert any("spans 2 nodes of 8 mi300x" in w for w in mi["warnings"])


def test_pipeline_sends_across_nodes():
    assert fabric.pp_sends_across(8, 2, 8) == 1  # stage 1 is the second node
    assert fabric.pp_sends_across(4, 2, 8) == 0  # both stages on one node
    assert fabric.pp_sends_across(4, 4, 8) == 1  # stages 0-1 on node 0, 2-3 on node 1
    out = run_json("fit", "llama-3.1-405b", "--gpu", "h100", "--tp", "8", "--pp", "2", "--seq", "8k")
    assert out["nodes"] == 2 and any("1 of 1 pipeline sends cross nodes" in w for w in out["warnings"])


def test_layout_refusals():
    assert run("fit", "llama-3.1-8b", "--gpu", "h100", "--ep", "2", "--tp", "2").exit_code == 2  # no experts
    bad = run("fit", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--ep", "3")
    assert bad.exit_code == 2 and "does not divide" in bad.stderr
    nodes = run("fit", "llama-3.1-405b", "--gpu", "h100", "--tp", "8", "--nodes", "3")
    assert nodes.exit_code == 2 and "--nodes 3" in nodes.stderr
    vllm = run("fit", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--dp-attention", "--engine", "vllm")
    assert vllm.exit_code == 2 and "data-parallel-size" in vllm.stderr


def test_api_fit_takes_the_engine_and_the_layout():
    r = kvcalc.fit("llama-3.1-8b", "l4", seq="128k", engine="vllm")
    assert not r.ok and r.vllm.startup.estimated_max_model_len == r.vllm.num_blocks * 16
    dp = kvcalc.fit("deepseek-v3", "h200", tp=8, ep=8, dp_attention=True, seq="8k")
    assert (
        dp.kv_capacity_tokens
        == run_json("fit", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--ep", "8", "--dp-attention", "--seq", "8k")[
            "kv_capacity_tokens"
        ]
    )
    goal = kvcalc.fit("llama-3.1-8b", "h100", seq="8k", tpot_ms=20, efficiency=0.6)
    assert goal.slo is not None and goal.slo.basis.startswith("estimate (MBU 0.6")


def test_api_roofline_and_generate_take_the_layout():
    r = kvcalc.roofline("llama-3.1-405b", "h100", tp=16, batch=1, seq="1k")
    cli = run_json("roofline", "llama-3.1-405b", "--gpu", "h100", "--tp", "16", "--batch", "1", "--seq", "1k")
    assert r.warnings == cli["warnings"] and r.rows[0].comm_seconds == cli["rows"][0]["comm_seconds"]
    # At 32k each rank reads 8 of the 64 sequences' latents instead of all 64 (and the batch fits only
    # that way); at 1k the replicated attention weights (+10 GiB read per rank) cost more than that saves.
    g = kvcalc.generate("deepseek-v3", "h200", tp=8, ep=8, dp_attention=True, batch=64, prompt="32k")
    plain = kvcalc.generate("deepseek-v3", "h200", tp=8, batch=64, prompt="32k")
    assert g.fits and not plain.fits and g.tpot_s < plain.tpot_s / 1.5
    short = kvcalc.generate("deepseek-v3", "h200", tp=8, ep=8, dp_attention=True, batch=64, prompt="1k")
    assert short.tpot_s > kvcalc.generate("deepseek-v3", "h200", tp=8, batch=64, prompt="1k").tpot_s


def test_ep_busiest_rank_computes_more_than_the_mean():
    from kvcalc.cost.step import Deployment, ep_extra_flops, stages

    spec = get_model("deepseek-v3")
    (tp8,) = stages(spec, Deployment(tp=8), None)
    (ep8,) = stages(spec, Deployment(tp=8, ep=8), None)
    assert ep_extra_flops(tp8, 64) == 0
    # 58 MoE layers x top-8 x one expert's 3 x 7,168 x 2,048 parameters / 8 ranks x 2 FLOPs, per token,
    # times the imbalance beyond 1 for 64 tokens over 8 ranks
    experts, k, per_token = ep8.ep_moe
    assert (experts, k) == (256, 8) and per_token == 2 * 58 * 8 * 3 * 7168 * 2048 // 8
    assert ep_extra_flops(ep8, 64) == math.ceil(64 * per_token * (fabric.ep_imbalance(256, 8, 64, 8) - 1))
