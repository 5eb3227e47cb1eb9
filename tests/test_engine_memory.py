"""A static `generate --batch` under a serving engine says when the engine would not start on the layout or would
not hold the batch at once (plan/engine_memory.py): the same pools and limits `fit --engine` and the serving
simulation read. It said "fits" by kvcalc's arithmetic where SGLang would not start."""

import json

from conftest import run, run_json

from kvcalc.engines.vllm.memory import default_limits
from kvcalc.model.presets import get_gpu


def _static(*args: str) -> dict:
    return json.loads(run("generate", *args, "-f", "json").stdout)


def test_a_layout_sglang_refuses_is_not_said_to_fit():
    # Llama-3-70B on 2 x H100: 65.7 GiB of weights a GPU fit kvcalc's 0.9 x 79.2 GiB budget with 2.3 GiB to spare,
    # but SGLang holds back (1 - 0.834) of the memory free before load and has no room left for a pool
    g = _static("llama-3-70b", "--gpu", "h100", "--tp", "2", "--engine", "sglang", "--engine-version", "0.5.5")
    assert not g["fits"] and g["memory_note"].startswith("DOES NOT FIT under --engine sglang: SGLang 0.5.5 would not")
    f = json.loads(
        run("fit", "llama-3-70b", "--gpu", "h100", "--tp", "2", "--engine", "sglang", "--engine-version", "0.5.5",
            "-f", "json").stdout
    )  # fmt: skip
    assert f["sglang"]["refusal"] and f["sglang"]["refusal"] in g["memory_note"]


def test_vllms_pool_decides_how_many_sequences_run_together():
    # the same layout under vLLM starts, with the pool fit --engine vllm predicts; 8 x 8,192 tokens are 65,536
    # slots of 16-token blocks, more than it holds, and 1 x 8,192 fits
    f = run_json("fit", "llama-3-70b", "--gpu", "h100", "--tp", "2", "--engine", "vllm", "--seq", "1k")
    pool = f["kv_capacity_tokens"]
    assert 8_192 < pool < 65_536
    g = _static("llama-3-70b", "--gpu", "h100", "--tp", "2", "--engine", "vllm", "--batch", "8")
    assert not g["fits"] and f"need 65,536 token slots of its pool's {pool:,}" in g["memory_note"]
    assert _static("llama-3-70b", "--gpu", "h100", "--tp", "2", "--engine", "vllm")["fits"]


def test_a_batch_beyond_the_schedulers_seats_runs_in_waves():
    seats, _ = default_limits(get_gpu("h100"))  # vLLM's default max_num_seqs on an H100: 1,024
    args = ("llama-3.1-8b", "--gpu", "h100", "--prompt", "100", "--new", "100", "--engine", "vllm")
    g = _static(*args, "--batch", str(seats + 1))
    assert not g["fits"] and f"its scheduler seats {seats:,} sequences at once, not {seats + 1:,}" in g["memory_note"]
    assert _static(*args, "--batch", str(seats))["fits"]
    assert _static(*args, "--batch", str(seats + 1), "--engine", "trtllm")["fits"]  # max_batch_size 2,048
    assert _static(*args[:-2], "--batch", str(seats + 1))["fits"]  # no --engine: kvcalc's arithmetic alone


def test_a_served_run_says_when_the_pool_holds_fewer_requests_than_clients():
    # the same layout's 9,808-token pool (613 blocks of 16) holds 613 // 80 = 7 requests of 1,024 + 256 tokens;
    # the simulation queues the other 57 clients (and preempts), which the figures hold but nothing said
    args = ("generate", "llama-3-70b", "--gpu", "h100", "--tp", "2", "--prompt", "1k", "--new", "256")
    r = run_json(*args, "--concurrency", "64")
    blocks = r["kv_capacity_tokens"] // 16
    assert blocks == 613 and r["preemptions"] > 0
    assert f"holds {blocks // 80} requests of 1,280 tokens at once" in r["warnings"][0]
    assert "the other 57 of 64 clients wait for room" in r["warnings"][0]
    assert run_json(*args, "--concurrency", "7")["warnings"] == []


def test_roofline_rows_say_what_the_engine_holds():
    # the same layout under SGLang: no row runs (it would not start); under vLLM only batch 1 of 8,192 tokens is
    # held (2 x 8,192 = 16,384 slots of its 9,808), though kvcalc's arithmetic fits batch 2 in the 0.9 budget
    args = ("roofline", "llama-3-70b", "--gpu", "h100", "--tp", "2", "--batch", "1..16", "--seq", "8k")
    sg = run_json(*args, "--engine", "sglang")
    assert (
        not any(r["fits"] for r in sg["rows"])
        and "5 of 5 rows: DOES NOT FIT under --engine sglang" in sg["warnings"][-1]
    )
    vl = run_json(*args, "--engine", "vllm")
    assert [r["batch"] for r in vl["rows"] if r["fits"]] == [1]
    assert "need 16,384 token slots of its pool's 9,808" in vl["warnings"][-1]
    # no engine named: kvcalc's arithmetic
    assert [r["batch"] for r in run_json(*args)["rows"] if r["fits"]] == [1, 2]
    # llama.cpp's own buffers (fit's), all but --fit's 1 GiB of each card (83.96 GB): the first GPU's 41 of 80 layers
    # are 70.16 GB of f16 weights, and 8 x 8,192 tokens of their cache (41 x 8 heads x 128 x 2 x 2 B = 167,936 B a
    # token) 11.01 GB: 81.55 GB with the compute buffer; 16 sequences would need twice the cache
    lc = run_json(*args, "--engine", "llamacpp")
    assert [r["batch"] for r in lc["rows"] if r["fits"]] == [1, 2, 4, 8]
    assert lc["warnings"][0].startswith("1 of 5 rows: DOES NOT FIT under llama.cpp's buffers (-c 131,072 -np 16")


def test_the_python_apis_roofline_asks_the_engine_alike():
    import kvcalc

    r = kvcalc.roofline("llama-3-70b", "h100", tp=2, batch="1..16", seq=8192, engine="sglang", engine_version="0.5.5")
    assert not any(row.fits for row in r.rows) and "SGLang 0.5.5 would not start" in r.warnings[-1]


def test_sequences_past_the_context_the_engine_derives_are_not_said_to_fit():
    # Llama-3-8B's config gives 8,192 positions: vLLM 0.19 and SGLang 0.5.5 refuse a longer --max-model-len /
    # --context-length before loading anything; TensorRT-LLM cuts its max_seq_len to 8,192 and rejects longer requests
    for engine, name in (("vllm", "vLLM"), ("sglang", "SGLang"), ("trtllm", "TensorRT-LLM")):
        g = _static("llama-3-8b", "--gpu", "h100", "--prompt", "8k", "--new", "1k", "--batch", "2", "--engine", engine)
        assert not g["fits"]
        assert (
            f"9,216-token sequences: they are past the 8,192 tokens {name} derives for llama-3-8b" in g["memory_note"]
        )
        ok = _static("llama-3-8b", "--gpu", "h100", "--prompt", "7k", "--new", "1k", "--batch", "2", "--engine", engine)
        assert ok["fits"]
    rows = run_json("roofline", "llama-3-8b", "--gpu", "h100", "--engine", "vllm", "--seq", "4k,16k", "--batch", "1")
    assert [r["fits"] for r in rows["rows"]] == [True, False]
