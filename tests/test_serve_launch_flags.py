"""The serving scheduler's limits as a deployment launches them (`generate --max-num-seqs / --max-batched-tokens`,
plan/serve_launch.launch_limits): vLLM's --max-num-seqs / --max-num-batched-tokens, SGLang's
--max-running-requests / --chunked-prefill-size, TensorRT-LLM's max_batch_size / max_num_tokens. The calibration
reads its runs with the limits they were launched with (benchmarks/calibration/README.md, column launch)."""

import re

import pytest
from conftest import run, run_json

from kvcalc.api import generate
from kvcalc.errors import UsageError
from kvcalc.plan.serve_report import serve_report


def _serve(**kw):
    base = dict(model="llama-3.1-8b", gpu="h100", prompt=1024, new=128)
    return generate(**{**base, **kw})


def test_one_seat_serves_the_clients_one_after_another():
    alone = _serve(concurrency=1)
    queued = _serve(concurrency=4, max_num_seqs=1)
    assert (queued.max_num_seqs, alone.max_num_seqs) == (1, 1024)
    # one request runs at a time: each decodes at batch 1, as a lone client does
    assert queued.estimate.tpot_s == pytest.approx(alone.estimate.tpot_s, rel=0.01)
    # and the others wait their turn: the k-th of 4 waits out k - 1 whole requests, 1.5 on average
    wait = 1.5 * (alone.estimate.total_s - alone.estimate.server_s)
    assert queued.estimate.ttft_s > alone.estimate.ttft_s + 0.9 * wait
    assert queued.estimate.tokens_per_s == pytest.approx(alone.estimate.tokens_per_s, rel=0.1)


def test_seats_beyond_the_clients_change_nothing():
    default = _serve(concurrency=8)
    launched = _serve(concurrency=8, max_num_seqs=64)
    assert launched.estimate.model_dump() == default.estimate.model_dump()
    assert launched.max_num_seqs == 64 and "launched with max_num_seqs 64" in launched.kv_pool


def test_a_smaller_token_budget_chunks_the_prompt():
    default = _serve(concurrency=1, prompt=4096)
    chunked = _serve(concurrency=1, prompt=4096, max_batched_tokens=512)
    assert chunked.max_num_batched_tokens == 512
    # 8 steps of 512 prompt tokens, each with its fixed costs, against one of 4,096
    assert chunked.estimate.ttft_s > default.estimate.ttft_s
    assert chunked.ttft_s >= default.ttft_s  # the ceiling too: each chunk re-reads the weights


def test_tensorrt_llm_refuses_prompts_longer_than_its_token_budget():
    with pytest.raises(UsageError, match="max_num_tokens"):
        _serve(concurrency=4, engine="trtllm", prompt=4096, max_batched_tokens=2048)
    ok = _serve(concurrency=4, engine="trtllm", prompt=2048, max_batched_tokens=2048)
    assert ok.max_num_batched_tokens == 2048


def test_the_limits_are_the_servings_and_must_be_positive():
    with pytest.raises(UsageError, match="concurrency or rate"):
        _serve(max_num_seqs=8)
    with pytest.raises(UsageError, match="at least 1"):
        _serve(concurrency=4, max_batched_tokens=0)
    from kvcalc.cost.step import Deployment
    from kvcalc.model.presets import get_gpu, get_model

    spec, gpu = get_model("llama-3.1-8b"), get_gpu("h100")
    with pytest.raises(UsageError, match="--max-num-seqs"):  # a flag is a count, not a switch
        serve_report(spec, gpu, Deployment(tp=1), prompt=64, new=8, concurrency=2, max_num_seqs=True)


def test_cli_flags():
    out = run_json("generate", "llama-3.1-8b", "--gpu", "h100", "--concurrency", "16", "--prompt", "1024", "--new",
                   "128", "--max-num-seqs", "4", "--max-batched-tokens", "2048")  # fmt: skip
    assert (out["max_num_seqs"], out["max_num_batched_tokens"]) == (4, 2048)
    assert out["estimate"]["ttft_p99_s"] > out["estimate"]["ttft_p50_s"]  # 12 of 16 clients queue behind 4 seats
    for args in (["--max-num-seqs", "4"], ["--concurrency", "4", "--max-batched-tokens", "0"]):
        r = run("generate", "llama-3.1-8b", "--gpu", "h100", *args)
        assert r.exit_code != 0 and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) <= 2 and ("max-" in r.stderr)


def test_vllm_caps_a_defaulted_seat_count_by_a_smaller_budget_and_refuses_the_reverse():
    # vLLM's arg_utils: a defaulted max_num_seqs (1,024 on an H100) is capped by max_num_batched_tokens
    capped = _serve(concurrency=4, max_batched_tokens=512)
    assert (capped.max_num_seqs, capped.max_num_batched_tokens) == (512, 512)
    with pytest.raises(UsageError, match="vLLM refuses"):  # SchedulerConfig: the budget below the seats
        _serve(concurrency=4, max_num_seqs=64, max_batched_tokens=32)
    # SGLang takes them as given
    assert _serve(concurrency=4, engine="sglang", max_batched_tokens=512).max_num_seqs != 512


def test_fits_concurrency_search_runs_under_the_launch_limits():
    from kvcalc.api import fit

    free = fit("llama-3.1-8b", "h100", seq="2k", tpot_ms=200).concurrency_slo
    vllm = fit("llama-3.1-8b", "h100", seq="2k", tpot_ms=200, max_num_seqs=8).concurrency_slo
    sglang = fit("llama-3.1-8b", "h100", seq="2k", tpot_ms=200, engine="sglang", max_running_requests=16)
    # a lenient goal: the search would reach its limit, which the seats now set
    assert free.concurrency > 16 and (vllm.concurrency, vllm.searched_up_to) == (8, 8)
    assert (sglang.concurrency_slo.concurrency, sglang.concurrency_slo.searched_up_to) == (16, 16)


def _fit_pool(engine: str, *flags: str) -> int:
    out = run_json("fit", "llama-3.1-8b", "--gpu", "h100", "--engine", engine, "--seq", "1152", *flags)
    return out["vllm"]["kv_cache_tokens"] if engine == "vllm" else out["sglang"]["kv_capacity_tokens"]


def test_the_flags_size_the_pool_as_the_engine_sizes_it():
    # vLLM profiles a forward of max_num_batched_tokens tokens and a sampler of min(max_num_seqs, that) rows
    # (gpu_model_runner.profile_run): a larger budget leaves a smaller pool, fewer seats a larger one, and
    # the pool generate serves from is the one fit reports for the same flags
    default = _serve(concurrency=8)
    budget = _serve(concurrency=8, max_batched_tokens=16384)
    seats = _serve(concurrency=8, max_num_seqs=64)
    assert seats.kv_capacity_tokens > default.kv_capacity_tokens > budget.kv_capacity_tokens
    assert default.kv_capacity_tokens == _fit_pool("vllm")
    assert budget.kv_capacity_tokens == _fit_pool("vllm", "--max-batched-tokens", "16384")
    assert seats.kv_capacity_tokens == _fit_pool("vllm", "--max-num-seqs", "64")
    # SGLang's default mem_fraction_static reserves 1.5 MiB a token of chunked_prefill_size (server_args): a
    # 16,384-token chunk keeps 8,192 x 1.5 = 12,288 MiB more of the H100's 81,559 MiB out of the pool, which
    # at 128 KiB a token of Llama-3.1-8B's cache (32 layers x 8 heads x 128 x K and V x 2 bytes) is ~96,000
    # tokens, the fraction of what is free before loading rounded to 0.001
    sg = _serve(concurrency=8, engine="sglang")
    chunked = _serve(concurrency=8, engine="sglang", max_batched_tokens=16384)
    assert chunked.max_num_batched_tokens == 16384
    assert chunked.kv_capacity_tokens == _fit_pool("sglang", "--chunked-prefill-size", "16384")
    assert sg.kv_capacity_tokens - chunked.kv_capacity_tokens == pytest.approx(12288 * 2**20 / 131072, rel=0.02)
    # TensorRT-LLM's profiling peak is --reserve here: its flags leave the pool as it is
    trt = _serve(concurrency=8, engine="trtllm")
    assert _serve(concurrency=8, engine="trtllm", max_batched_tokens=16384).kv_capacity_tokens == trt.kv_capacity_tokens


def test_a_calibration_runs_pool_stays_the_engines_default():
    # a run's pool flags (--mem-fraction-static, --gpu-memory-utilization) are not known beside its
    # scheduler flags, so the fit reads its pool at the engine's defaults (plan/serve_fit)
    from kvcalc.cost.step import Deployment
    from kvcalc.model.presets import get_gpu, get_model
    from kvcalc.plan.serve_pool import serving_limits

    spec, gpu = get_model("llama-3.1-8b"), get_gpu("h100")
    kw = dict(engine="sglang", dtype=None, kv_dtype="bf16", prompt=1024, new=128)
    flags = {"max_num_batched_tokens": 32768}
    default, _ = serving_limits(spec, gpu, Deployment(tp=1), **kw)
    as_run, _ = serving_limits(spec, gpu, Deployment(tp=1), launch=flags, pool_flags=False, **kw)
    as_user, _ = serving_limits(spec, gpu, Deployment(tp=1), launch=flags, **kw)
    assert as_run.kv_blocks == default.kv_blocks > as_user.kv_blocks
    assert as_run.max_num_batched_tokens == as_user.max_num_batched_tokens == 32768


def test_sglang_refuses_to_start_where_a_large_chunk_leaves_no_pool():
    # DeepSeek-V3 fp8 over 8 x H200 with DP attention holds its attention whole on each rank; a 32,768-token
    # chunk keeps 49,152 MiB out of SGLang's default fraction, which the weights then outgrow: one line, why
    r = run("generate", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--ep", "8", "--dp-attention", "--engine",
            "sglang", "--concurrency", "8", "--max-batched-tokens", "32768")  # fmt: skip
    assert r.exit_code != 0 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "would not start with --max-batched-tokens 32,768" in r.stderr and "--mem-fraction-static" in r.stderr
    # seats alone do not move SGLang's fraction: Llama-3.1-70B's 65.7 GiB a GPU outgrow it on 2 x H100 either way
    r = run("generate", "llama-3.1-70b", "--gpu", "h100", "--tp", "2", "--engine", "sglang", "--concurrency", "8",
            "--max-num-seqs", "64", "--engine-version", "0.5.5")  # fmt: skip
    assert r.exit_code != 0 and "Traceback" not in r.stderr and "would not start: RuntimeError" in r.stderr
    ok = run_json("generate", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--ep", "8", "--dp-attention", "--engine",
                  "sglang", "--concurrency", "8")  # fmt: skip
    assert ok["kv_capacity_tokens"] > 0
    # launched as such servers are, with the fraction given, it starts: the pool fit prints for the same flags
    flags = ("--gpu", "h200", "--tp", "8", "--ep", "8", "--dp-attention", "--engine", "sglang",
             "--mem-fraction-static", "0.85")  # fmt: skip
    given = run_json("generate", "deepseek-v3", *flags, "--concurrency", "8", "--max-batched-tokens", "32768")
    own = run_json("fit", "deepseek-v3", *flags, "--chunked-prefill-size", "32768", "--seq", "8192")["sglang"]
    assert given["kv_capacity_tokens"] == own["kv_capacity_tokens"] and own["mem_fraction_static"] == 0.85
    assert "mem_fraction_static 0.85" in given["kv_pool"]


def test_mem_fraction_static_is_sglangs_and_a_share():
    # a larger share, a larger pool: 0.05 of Llama-3.1-8B's pre-load free memory (~79 GiB) at 128 KiB a token
    low, high = (_serve(concurrency=2, engine="sglang", mem_fraction_static=f) for f in (0.8, 0.85))
    pre = 79.11 * 2**30  # about what an H100 has free before loading, less the CUDA context
    assert high.kv_capacity_tokens - low.kv_capacity_tokens == pytest.approx(0.05 * pre / 131072, rel=0.03)
    for kw, words in (
        (dict(engine="vllm"), "needs --engine sglang"),
        (dict(engine="sglang", mem_fraction_static=0), "(0, 1]"),
        (dict(engine="sglang", mem_fraction_static="0.8"), "must be a number"),
    ):
        with pytest.raises(UsageError, match=re.escape(words)):
            _serve(concurrency=2, **{"mem_fraction_static": 0.8, **kw})
    with pytest.raises(UsageError, match="launch flags"):  # a static batch has no server
        generate("llama-3.1-8b", "h100", engine="sglang", mem_fraction_static=0.8)


def test_a_served_request_longer_than_the_models_context_is_warned_of():
    # Llama-3.1-8B's max_position_embeddings is 131,072: 1,024 + 130,048 fits, one token more does not
    assert not _serve(concurrency=2, new=131072 - 1024).warnings
    trained, served = _serve(concurrency=2, new=131072 - 1024 + 1).warnings
    assert "context 131,073 tokens exceeds llama-3.1-8b's max_position_embeddings 131,072" in trained
    # and vLLM (the engine here) would not take such a request: it derives 131,072 from the config too
    assert served.startswith("the engine would not serve requests of 131,073 tokens: they are past the 131,072 tokens")


def test_fits_concurrency_search_serves_from_the_pool_fit_reports():
    # SGLang's --mem-fraction-static sizes the pool fit reports and the one its concurrency search serves from:
    # at 0.25 an H100 keeps 38,001 tokens for Llama-3.1-8B, one 32k request at a time, so a second client waits a
    # whole request and only one meets a 3 s TTFT; the default pool (415,014 tokens) serves several
    from kvcalc.api import fit

    small = fit("llama-3.1-8b", "h100", engine="sglang", seq="32k", ttft_ms=3000, mem_fraction_static=0.25)
    default = fit("llama-3.1-8b", "h100", engine="sglang", seq="32k", ttft_ms=3000)
    assert small.kv_capacity_tokens // 32768 == 1 and small.concurrency_slo.concurrency == 1
    assert default.concurrency_slo.concurrency > 1


def test_gpu_util_is_vllms_share_and_sglang_refuses_it():
    # fit and generate take --gpu-util as vLLM's gpu_memory_utilization: vLLM requests that share of the card, so at
    # 0.5 its KV memory is (0.9 - 0.5) of the card's total smaller, the weights and the profile's peak unchanged
    full = run_json("fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm", "--seq", "8k")["vllm"]
    half = run_json("fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm", "--seq", "8k", "--gpu-util", "0.5")
    shrink = full["available_kv_bytes"] - half["vllm"]["available_kv_bytes"]
    assert shrink == pytest.approx(0.4 * full["gpu_total_bytes"], abs=1)
    # SGLang reads no such share (its pool is --mem-fraction-static's): given there, it is refused, not dropped
    for args in (("fit", "--seq", "8k"), ("generate", "--concurrency", "8")):
        out = run(args[0], "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", *args[1:], "--gpu-util", "0.5")
        assert out.exit_code == 2 and out.stdout == ""
        assert "--gpu-util 0.5 is vLLM's --gpu-memory-utilization" in out.stderr
        assert "--mem-fraction-static" in out.stderr and "Traceback" not in out.stderr
    # not given, it is vLLM's default 0.9 under every engine
    default = run_json("generate", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm", "--concurrency", "8")
    given = run_json(
        "generate", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm", "--concurrency", "8", "--gpu-util", "0.9"
    )
    assert given["kv_pool"] == default["kv_pool"]


def test_a_served_run_over_gpus_without_a_sourced_link_is_one_line():
    # m2-ultra's preset has no interconnect figure: a served run over 4 of them is refused as the static one is
    # (its all-reduces had been divided by a zero bandwidth: an internal ZeroDivisionError), every engine alike
    for engine in ("vllm", "sglang", "trtllm", "llamacpp"):
        out = run("generate", "phi-2", "--gpu", "m2-ultra", "--tp", "4", "--engine", engine, "--concurrency", "1")
        assert out.exit_code == 2 and "internal error" not in out.stderr
        assert "m2-ultra's preset has no sourced interconnect, needed for 4 x 1 GPUs" in out.stderr
    given = run_json(
        "generate", "phi-2", "--gpu", "m2-ultra", "--tp", "4", "--interconnect", "100GB/s", "--concurrency", "1"
    )
    assert given["estimate"]["tpot_s"] > given["tpot_s"] > 0  # timed with the link given


@pytest.mark.parametrize(
    ("args", "said"),
    [
        # each was parsed and dropped: the same answer printed, exit 0
        (("fit", "llama-3.1-8b", "--gpu", "h100", "--mbu", "0.5"), "--mbu applies to a latency goal"),
        (("fit", "llama-3.1-8b", "--gpu", "h100", "--ceiling", "--prompt", "100"), "--prompt, --ceiling apply to a"),
        (("generate", "llama-3.1-8b", "--gpu", "h100", "--requests", "50"), "--requests describes a served run"),
        (("generate", "llama-3.1-8b", "--gpu", "h100", "--range-ratio", "0.5"), "--range-ratio describes a served"),
        (("generate", "llama-3.1-8b", "--gpu", "h100", "--concurrency", "4", "--reserve", "8GiB"), "served by vLLM"),
        (
            (
                "generate",
                "llama-3.1-8b",
                "--gpu",
                "h100",
                "--concurrency",
                "4",
                "--reserve",
                "8GiB",
                "--engine",
                "sglang",
            ),
            "served by SGLang",
        ),  # fmt: skip
    ],
)
def test_an_option_the_run_does_not_read_is_one_line(args, said):
    r = run(*args)
    assert r.exit_code == 2 and said in r.stderr and r.stdout == ""


def test_the_options_are_read_where_they_apply():
    # with a goal --mbu decides the verdict's estimate; a served TensorRT-LLM run takes --reserve as its profiling
    # peak (its pool is 0.9 of what weights and the reserve leave); a static generate keeps its 2 GiB default
    import json

    fit = ("fit", "llama-3.1-8b", "--gpu", "h100", "--tpot-ms", "10", "-f", "json")
    assert json.loads(run(*fit, "--mbu", "0.2").stdout)["slo"]["batch"] < run_json(*fit)["slo"]["batch"]
    served = ("generate", "llama-3.1-8b", "--gpu", "h100", "--concurrency", "4", "--engine", "trtllm", "-f", "json")
    less = run_json(*served, "--reserve", "60GiB")["kv_capacity_tokens"]
    assert less < run_json(*served)["kv_capacity_tokens"]
    static = run_json("generate", "llama-3.1-8b", "--gpu", "h100", "-f", "json")
    assert "+ reserve 2 GiB =" in static["memory_note"]


@pytest.mark.parametrize(
    "kw", [dict(requests=50), dict(range_ratio=0.5), dict(steady_state=True), dict(max_num_seqs=4)]
)
def test_the_python_api_refuses_a_served_runs_arguments_for_a_static_batch(kw):
    # as the command line does (above): they were accepted and dropped, the static batch returned
    with pytest.raises(UsageError, match=f"{next(iter(kw))}: a served run's launch flags or requests"):
        generate(model="llama-3.1-8b", gpu="h100", **kw)
    assert generate(model="llama-3.1-8b", gpu="h100", **{"concurrency": 2, "requests": 8, **kw}).requests >= 8


@pytest.mark.parametrize("kw", [dict(mbu=0.5), dict(efficiency=0.5), dict(prompt=100), dict(ceiling=True)])
def test_the_python_apis_fit_refuses_a_goals_options_without_a_goal(kw):
    import kvcalc

    with pytest.raises(UsageError, match=f"{next(iter(kw))}: a latency goal's options"):
        kvcalc.fit("llama-3.1-8b", "h100", **kw)
    assert kvcalc.fit("llama-3.1-8b", "h100", tpot_ms=10, **kw).slo is not None


def test_the_python_apis_served_generate_refuses_reserve_under_vllm_and_sglang():
    for engine in ("vllm", "sglang"):
        with pytest.raises(UsageError, match="--reserve has no meaning in a run served by"):
            generate(model="llama-3.1-8b", gpu="h100", concurrency=4, reserve="8GiB", engine=engine)
    base = dict(model="llama-3.1-8b", gpu="h100", concurrency=4, engine="trtllm")
    assert generate(**base, reserve="60GiB").kv_capacity_tokens < generate(**base).kv_capacity_tokens
    assert "+ reserve 2 GiB =" in generate(model="llama-3.1-8b", gpu="h100").memory_note  # the static default


def test_one_rule_names_the_served_and_goal_options_given_for_the_cli_and_the_api():
    from kvcalc.plan.inputs import served_options, unread_goal_options

    # a default (range_ratio 1, steady_state off) is not given; one request or a ratio of 0.5 is
    assert served_options(requests=1, range_ratio=1.0, steady_state=False, max_num_seqs=None) == ([], ["requests"])
    assert served_options(mem_fraction_static=0.8, range_ratio=0.5) == (["mem_fraction_static"], ["range_ratio"])
    # --plot's chart draws the speed options, so only --prompt is unread with it
    assert unread_goal_options(prompt=100, mbu=0.5, ceiling=False) == ["prompt", "mbu"]
    assert unread_goal_options(plot=True, prompt=None, mbu=0.5, ceiling=True) == []
    with pytest.raises(TypeError):  # a caller's misspelt option is a bug, not a user's error
        served_options(request=4)
    # the command line names the flags given, in its own spelling
    r = run("generate", "llama-3.1-8b", "--gpu", "h100", "--max-num-seqs", "4")
    assert r.exit_code == 2 and "--max-num-seqs is a serving engine's launch flag (" in r.stderr
    r = run("generate", "llama-3.1-8b", "--gpu", "h100", "--max-batched-tokens", "4096", "--requests", "9")
    assert "--max-batched-tokens is a serving engine's launch flag" in r.stderr and r.stdout == ""


def test_generate_follows_the_sglang_release_fit_follows():
    # gpt-oss-120b on one H100: SGLang 0.5.5 keeps its sliding-window layers in the one pool, 0.5.23 (gpt-oss is on
    # is_hybrid_swa_model's list from 0.5.8) splits them off and reserves more for graphs, so its full-attention pool
    # is smaller. generate --engine-version serves from the pool fit --engine-version reports, release by release.
    model, where = ("gpt-oss-120b",), ("--gpu", "h100", "--engine", "sglang")
    pools = {}
    for release in ("0.5.5", "0.5.23"):
        fitted = run_json("fit", *model, *where, "--seq", "8192", "--engine-version", release)["sglang"]
        served = run_json("generate", *model, *where, "--concurrency", "8", "--engine-version", release)
        assert served["kv_capacity_tokens"] == fitted["kv_capacity_tokens"]
        assert served["kv_pool"].startswith(f"SGLang {release} pool ({fitted['kv_capacity_tokens']:,} tokens)")
        pools[release] = fitted["kv_capacity_tokens"]
    assert pools["0.5.23"] < pools["0.5.5"]
    default = run_json("generate", *model, *where, "--concurrency", "8")
    assert default["kv_capacity_tokens"] == pools["0.5.23"]  # the default release, the newest read
    # the Python API takes the same argument
    api = generate("gpt-oss-120b", "h100", engine="sglang", engine_version="0.5.23", concurrency=8)
    assert api.kv_capacity_tokens == pools["0.5.23"]


def test_generate_engine_version_is_sglangs_and_a_release():
    for args, words in (
        (("--engine", "vllm"), "--engine-version needs --engine sglang"),
        ((), "--engine-version needs --engine sglang"),  # the default engine is vLLM, modelled at 0.19
        (("--engine", "sglang", "--engine-version", "five"), "'five' is not a release number"),
    ):
        version = () if "--engine-version" in args else ("--engine-version", "0.5.23")
        r = run("generate", "llama-3.1-8b", "--gpu", "h100", "--concurrency", "2", *args, *version)
        assert r.exit_code == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1 and not r.stdout
    with pytest.raises(UsageError, match="needs --engine sglang"):
        generate("llama-3.1-8b", "h100", engine="trtllm", engine_version="0.5.23", batch=2)


def test_a_static_batch_asks_the_named_releases_pool():
    # Gemma 4's model class ships in SGLang 0.5.11: an older release would not start, and says which release would
    older = generate("gemma-4-26b-a4b", "h200", engine="sglang", engine_version="0.5.5", batch=4)
    assert not older.fits
    assert older.memory_note.startswith(
        "DOES NOT FIT under --engine sglang: SGLang 0.5.5 has no model class for Gemma4"
    )
    assert older.memory_note.endswith("(pass --engine-version 0.5.11 or later)")
    newer = generate("gemma-4-26b-a4b", "h200", engine="sglang", engine_version="0.5.11", batch=4)
    assert newer.fits and newer.memory_note.startswith("fits: ")


def test_fits_concurrency_search_follows_the_release():
    # The same model under two SGLang releases: 0.5.5's pool seats two 8,192-token requests of gpt-oss-120b on one
    # H100 (18,712 tokens), 0.5.23's one (14,425: its sliding-window layers split off); a client beyond the seats
    # waits out a whole request (4,096 new tokens, far over 3 s), so the search stops at the seats.
    from kvcalc.api import fit

    seats = {}
    for release in ("0.5.5", "0.5.23"):
        r = fit("gpt-oss-120b", "h100", engine="sglang", seq="8k", ttft_ms=3000, engine_version=release)
        seats[release] = r.kv_capacity_tokens // 8192
        assert r.concurrency_slo.concurrency == seats[release]
    assert seats == {"0.5.5": 2, "0.5.23": 1}


def test_roofline_rows_are_held_by_the_named_releases_pool():
    # the same rows as the pools above hold them: batch 2 of 8,192-token sequences fits 0.5.5's pool of gpt-oss-120b
    # on one H100 and not 0.5.23's, and the warning says which release's pool
    from kvcalc.api import roofline

    for release, fits in (("0.5.5", [True, True, False]), ("0.5.23", [True, False, False])):
        r = roofline("gpt-oss-120b", "h100", batch=[1, 2, 4], seq=8192, engine="sglang", engine_version=release)
        assert [row.fits for row in r.rows] == fits
        assert f"(SGLang {release} pool (" in r.warnings[-1]
    cli = run("roofline", "gpt-oss-120b", "--gpu", "h100", "--engine", "vllm", "--engine-version", "0.5.23")
    assert cli.exit_code == 2 and "--engine-version needs --engine sglang" in cli.stderr


def test_the_help_names_the_default_release():
    # the option's help is spelled out (the CLI modules stay light at import): it must name the release the pools follow
    from kvcalc.cli.sglang import EngineVersionOpt, ServedVersionOpt
    from kvcalc.engines.sglang.release import DEFAULT_RELEASE

    for opt in (EngineVersionOpt, ServedVersionOpt):
        assert f"(default {DEFAULT_RELEASE}, the newest read)" in opt.__metadata__[0].help


@pytest.mark.parametrize(
    ("command", "engine", "words"),
    [
        # vLLM has one reading here, 0.19: the way to a later release's pool is its logged figure
        ("fit", "vllm", "kvcalc models vLLM 0.19 alone"),
        ("generate", "vllm", "give fit --engine vllm their logged 'Available KV cache memory' as --kv-memory"),
        ("plan", "trtllm", "kvcalc models TensorRT-LLM 1.x's trtllm-serve defaults"),
    ],
)
def test_engine_version_of_an_engine_modelled_at_one_release_says_which(command, engine, words):
    load = ("--seq", "8k") if command == "fit" else ("--users", "4", "--seq", "8k") if command == "plan" else ()
    extra = ("--concurrency", "4") if command == "generate" else ()
    gpu = () if command == "plan" else ("--gpu", "h100")
    r = run(command, "llama-3.1-8b", *gpu, *load, *extra, "--engine", engine, "--engine-version", "0.34")
    assert r.exit_code == 2 and not r.stdout and len(r.stderr.strip().splitlines()) == 1
    assert "--engine-version needs --engine sglang" in r.stderr and words in r.stderr
