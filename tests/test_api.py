"""The Python API (kvcalc/api.py): the same result models as --format json, from the same core."""

import json
import subprocess
import sys

import pytest
from conftest import GiB, run_json

import kvcalc
from kvcalc.errors import KvcalcError, NotFoundError, UsageError


def test_import_kvcalc_stays_cheap():
    code = "import sys, kvcalc; print(json.dumps(sorted(m for m in ('kvcalc.api', 'pydantic', 'yaml', 'rich', 'typer') if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", "import json;" + code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_cache_by_hand():
    # llama-3-8b: 32 layers x 8 KV heads x head dim 128 x (K and V) x 2 B = 131,072 B per token;
    # 16 sequences x 8,192 tokens x 131,072 B = 16 GiB
    r = kvcalc.cache("llama-3-8b", batch=16, seq="8k")
    assert r.bytes_per_token == 131_072 and r.total_bytes == 16 * GiB
    assert r.model_dump(mode="json") == run_json("cache", "llama-3-8b", "--batch", "16", "--seq", "8k")


def test_cache_grid_and_gpu_share_match_the_cli():
    rs = kvcalc.cache("llama-3-8b", batch=[1, 16], seq="8k", gpu="a100")
    assert [r.total_bytes for r in rs] == [GiB, 16 * GiB]
    assert rs[1].gpu_memory_share == 16 * GiB / rs[1].gpu_memory_bytes
    cli = run_json("cache", "llama-3-8b", "--batch", "1,16", "--seq", "8k", "--gpu", "a100")["rows"]
    assert [r.model_dump(mode="json") for r in rs] == cli


def test_roofline_fit_generate_compare_match_the_cli():
    assert kvcalc.roofline("7b", "a100", batch="1,64", seq="4k").model_dump(mode="json") == run_json(
        "roofline", "7b", "--gpu", "a100", "--batch", "1,64", "--seq", "4k"
    )
    assert kvcalc.fit("llama-3-70b", "h100", tp=2, seq="8k").model_dump(mode="json") == run_json(
        "fit", "llama-3-70b", "--gpu", "h100", "--tp", "2", "--seq", "8k"
    )
    assert kvcalc.generate("7b", "h100", prompt="1k", new=256).model_dump(mode="json") == run_json(
        "generate", "7b", "--gpu", "h100", "--prompt", "1k", "--new", "256"
    )
    assert kvcalc.compare("mha", "gqa", "mla").model_dump(mode="json") == run_json("compare", "mha", "gqa", "mla")


def test_parallel_and_estimates_match_the_cli():
    assert kvcalc.roofline("llama-3-70b", "h100", batch="1,64", tp=4, efficiency=0.6).model_dump(
        mode="json"
    ) == run_json("roofline", "llama-3-70b", "--gpu", "h100", "--batch", "1,64", "--tp", "4", "--efficiency", "0.6")
    assert kvcalc.generate("llama-3-70b", "h100", tp=2, pp=2, new="1m").model_dump(mode="json") == run_json(
        "generate", "llama-3-70b", "--gpu", "h100", "--tp", "2", "--pp", "2", "--new", "1m", status=3
    )
    assert kvcalc.fit("llama-3-70b", "h100", tp=2, pp=2).model_dump(mode="json") == run_json(
        "fit", "llama-3-70b", "--gpu", "h100", "--tp", "2", "--pp", "2"
    )


def test_theory_7b_on_a100():
    # THEORY.md: 7b on a100 at batch 1, 1k context: 140.3 tokens/s ceiling
    row = kvcalc.roofline("7b", "a100", batch=1, seq=1024).rows[0]
    assert round(row.tokens_per_s, 1) == 140.3


def test_api_names_survive_importing_the_core_modules():
    import kvcalc.cost.roofline  # noqa: F401  (binds the subpackages on the package)
    import kvcalc.plan.fit
    import kvcalc.plan.generate

    assert callable(kvcalc.roofline) and callable(kvcalc.fit) and callable(kvcalc.generate)
    assert kvcalc.roofline("7b", ["a100", "h100"], batch=1)[1].gpu == "h100"
    from kvcalc.cost.roofline import roofline_report

    assert callable(roofline_report)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: kvcalc.cache("lama-3-8b"), NotFoundError),
        (lambda: kvcalc.cache("7b", batch=0), UsageError),
        (lambda: kvcalc.cache("7b", seq="1..1m+1"), UsageError),
        (lambda: kvcalc.cache("deepseek-v3", window=4096), UsageError),
        (lambda: kvcalc.roofline("7b", ""), UsageError),
        (lambda: kvcalc.fit("7b", "h100", gpu_util=float("nan")), UsageError),
        (lambda: kvcalc.generate("7b", "h100", new=-1), UsageError),
        (lambda: kvcalc.compare(), UsageError),
        # arguments a notebook hands over that the CLI never sees: each a KvcalcError, not a
        # TypeError or AttributeError from deep inside, and never a silent default
        (lambda: kvcalc.cache("7b", kv_dtype=None), UsageError),
        (lambda: kvcalc.cache("7b", seq=[]), UsageError),  # was: [] (no result, no error)
        (lambda: kvcalc.cache(None), UsageError),
        (lambda: kvcalc.cache("7b", gpu=5), UsageError),
        (lambda: kvcalc.cache("7b", layers=True), UsageError),  # was: 1 layer
        (lambda: kvcalc.roofline("7b", "h100", layers="x"), UsageError),
        (lambda: kvcalc.roofline("7b", "h100", tp=2, interconnect=5), UsageError),
        (lambda: kvcalc.fit("7b", ["h100", "a100"]), UsageError),
        (lambda: kvcalc.generate("7b", "a100,h100"), UsageError),
        (lambda: kvcalc.fit("7b", "h100", reserve=0.5), UsageError),  # was: a reserve of 0 bytes
        (lambda: kvcalc.fit("7b", "h100", reserve=True), UsageError),
        (lambda: kvcalc.fit("7b", "h100", gpu_util=True), UsageError),
        (lambda: kvcalc.compare(None), UsageError),
        (lambda: kvcalc.compare("mha", 5), UsageError),
        (lambda: kvcalc.roofline("7b", []), UsageError),  # was: [] (no result, no error)
        (lambda: kvcalc.cache("7b", gpu=[]), UsageError),
        (lambda: kvcalc.cache("7b", seq=range(1, 10**9)), UsageError),  # refused before iterating
    ],
)
def test_bad_input_raises_a_kvcalc_error(call, error):
    with pytest.raises(error) as info:
        call()
    assert isinstance(info.value, KvcalcError) and "\n" not in info.value.message


def test_results_dump_as_json():
    json.dumps(kvcalc.generate("7b", "h100").model_dump(mode="json"))


def test_a_spec_object_gets_the_same_refusals_as_a_name():
    # deepseek-v3 caches one MLA latent per token (512 + 64 elements): --kv-heads and --window
    # would be ignored, so they are refused for a ModelSpec exactly as for the preset's name
    from kvcalc.model.presets import get_model

    spec = get_model("deepseek-v3")
    for kwargs in ({"kv_heads": 8}, {"window": 4096}):
        with pytest.raises(UsageError, match="has no meaning for deepseek-v3"):
            kvcalc.cache(spec, **kwargs)
    # a what-if that applies still does: 7b with 8 KV heads is 32 x 8 x 128 x 2 x 2 B = 131,072 B per token
    assert kvcalc.cache(get_model("7b"), kv_heads=8).bytes_per_token == 131_072


def test_counts_as_text_and_lists_of_items():
    # layers "2": 2 x (K and V) x 32 KV heads x 128 x 2 B = 32,768 B per token, x 8,192 tokens (the default)
    assert kvcalc.roofline("7b", "h100", batch=1, layers="2").rows[0].kv_bytes == 32_768 * 8192
    # a block size given as text is the same block size: 16
    assert kvcalc.fit("7b", "h100", block_size="16") == kvcalc.fit("7b", "h100", block_size=16)
    # compare(["mha", "gqa"]) is compare("mha", "gqa"): the 70B's 64 heads against its 8 KV heads
    assert kvcalc.compare(["mha", "gqa"]).rows[1].ratio == 8 / 64


def test_fit_takes_lists_as_the_command_does():
    # README: a list gives a list of results. fit --batch 1,4 --seq 8k,16k prints 4 rows; so does the API,
    # each the same FitResult. 7b at 8k: 32 x 2 x 32 x 128 x 2 B x 8,192 = 4 GiB of KV per sequence.
    rs = kvcalc.fit("7b", "h100", batch=[1, 4], seq="8k,16k")
    cli = run_json("fit", "7b", "--gpu", "h100", "--batch", "1,4", "--seq", "8k,16k")["rows"]
    assert [r.model_dump(mode="json") for r in rs] == cli
    assert [(r.batch, r.seq, r.per_gpu.kv_bytes) for r in rs] == [
        (1, 8192, 4 * GiB),
        (4, 8192, 16 * GiB),
        (1, 16384, 8 * GiB),
        (4, 16384, 32 * GiB),
    ]


def test_generate_takes_efficiency_as_the_command_does():
    # --efficiency 0.5 scales both roofs: the memory-bound step takes twice the ceiling's time
    ceiling = kvcalc.generate("7b", "h100")
    half = kvcalc.generate("7b", "h100", efficiency=0.5)
    assert half.tpot_s == pytest.approx(2 * ceiling.tpot_s, rel=1e-12)
    assert kvcalc.generate("7b", "h100", mbu=0.5, mfu=0.5) == half
    cli = run_json("generate", "7b", "--gpu", "h100", "--efficiency", "0.5")
    assert half.model_dump(mode="json") == cli["what_if"] and ceiling.tpot_s == cli["tpot_s"]


def test_generate_serves_under_load_as_the_cli_does():
    # The same closed loop through the API and `generate --concurrency`: the same simulation, field for field.
    api = kvcalc.generate("llama-3.1-8b", "h100", prompt="1k", new=256, concurrency=16).model_dump(mode="json")
    cli = run_json("generate", "llama-3.1-8b", "--gpu", "h100", "--prompt", "1k", "--new", "256", "--concurrency", "16")
    assert api == cli
    assert api["estimate"]["tpot_s"] >= api["tpot_s"] > 0  # the estimate is never faster than the ceiling
    one = kvcalc.generate("llama-3.1-8b", "h100", prompt="1k", new=256, concurrency=1)
    static = kvcalc.generate("llama-3.1-8b", "h100", prompt="1k", new=256)
    assert one.tpot_s == pytest.approx(static.tpot_s, rel=1e-9)  # concurrency 1 is batch 1


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"concurrency": 4, "rate": 2.0}, "not both"),
        ({"concurrency": 4, "efficiency": 0.5}, "static-batch what-ifs"),
        ({"concurrency": 4, "batch": 8}, "static batch"),
        ({"rate": "fast"}, "rate must be a number"),
        ({"concurrency": 0}, "concurrency"),
    ],
)
def test_generate_serving_arguments_are_checked(kwargs, error):
    with pytest.raises(KvcalcError, match=error):
        kvcalc.generate("7b", "h100", **kwargs)


def test_fits_latency_goals_decide_on_the_estimate_as_the_command_does():
    # `fit --tpot-ms` decides on the calibrated estimate and names the ceiling beside it; kvcalc.fit alike
    api = kvcalc.fit("llama-3.1-70b", "h100", tp=4, seq="8k", tpot_ms=30)
    cli = run_json("fit", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--seq", "8k", "--tpot-ms", "30")
    (cli,) = cli if isinstance(cli, list) else [cli]
    assert api.slo is not None and api.slo.model_dump(mode="json") == cli["slo"]
    assert api.slo.basis.startswith("estimate") and api.slo.batch < api.slo.ceiling_batch
    # and searches closed-loop serving as the command does (it lived in the command alone once)
    assert api.concurrency_slo is not None and api.concurrency_slo.model_dump(mode="json") == cli["concurrency_slo"]
    assert (api.concurrency_slo.prompt, api.concurrency_slo.new) == (4096, 4096)
    assert 1 <= api.concurrency_slo.concurrency <= api.concurrency_slo.ceiling_concurrency
    bound = kvcalc.fit("llama-3.1-70b", "h100", tp=4, seq="8k", tpot_ms=30, ceiling=True)
    assert bound.slo is not None and bound.slo.batch == api.slo.ceiling_batch and "(ceiling)" in bound.verdict
    assert bound.concurrency_slo is None  # --ceiling: the bound alone, no estimate to serve with
