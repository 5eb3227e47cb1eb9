"""scripts/calibrate.py's rules that decide what the shipped fit can learn from which source: each point's
weight by its source's size, and which constants exist to be fitted."""

import importlib.util
import math
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("calibrate_script", ROOT / "scripts" / "calibrate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_sources_points_weigh_ln_1_plus_n_capped_at_a_ten_point_sources(script):
    w = script.source_weight
    assert w(50) == pytest.approx(math.log(51) / 50) and w(10) == pytest.approx(math.log(11) / 10)
    assert w(2) == pytest.approx(math.log(3) / 10) and w(1) == pytest.approx(math.log(2) / 10)
    for n in range(1, 400):
        assert n * w(n) <= math.log1p(n) + 1e-12  # never more than ln(1 + n) in all
        assert w(n) <= w(10) + 1e-12  # no point outweighs one of a ten-point source
        assert (n + 1) * w(n + 1) > n * w(n)  # a bigger source weighs more in all
    # MLC's two 2023 llama.cpp points against the dozen 7-8B runs of XiongjieDai's 86: the dozen win the
    # weighted median now (with ln(1 + n) / n the two weighed 1.10 against 0.62)
    assert 2 * w(2) < 12 * w(86)
    assert 2 * math.log(3) / 2 > 12 * math.log(87) / 86


def _point(engine, family="hopper", served=False, static=False, scores=0.0, index_layers=0, dequant=0.0, experts=0.0):
    decode = SimpleNamespace(
        family=family,
        allreduces=0,
        link="nvlink",
        stage_bytes=((0,) * 7,),
        a2a=(0,),
        index_layers=index_layers,
        dequant=dequant,
    )
    first = SimpleNamespace(scores=scores, experts=(0.0, 0.0, experts))  # (FLOPs, rows, experts reached)
    sf = SimpleNamespace(decode=decode, first=first, run=object() if served else None, prompts_per_step=0)
    sf.setup = SimpleNamespace(concurrency=None if static else 8)
    return SimpleNamespace(engine=engine, sf=sf, weight=1.0)


def test_trtllms_served_prompt_cost_is_its_own_with_or_without_static_points(script):
    served = [_point("trtllm", served=True), _point("vllm", served=True)]
    static = [_point("trtllm", static=True)]
    for points in (served, served + static):
        names = script.names_for(points)
        # the compiled engine's cost and trtllm-serve's are two constants; a fold without static points
        # leaves the first at its start instead of fitting it from served runs
        assert "prefill_layer_s.trtllm.served" in names and "prefill_layer_s.trtllm" in names
        assert "prefill_layer_s.vllm.served" not in names
    llama = script.names_for([_point("llamacpp", family="apple", static=True)])
    assert {"bw_eff.apple.llamacpp", "mfu.apple.llamacpp"} <= set(llama)


def test_sglangs_api_server_time_keeps_its_start_and_the_other_engines_fit_theirs(script):
    from kvcalc.cost.calibration import STARTING
    from kvcalc.cost.calibration_data import CONSTANTS

    dense = [_point(e, served=True) for e in ("sglang", "vllm", "trtllm")]
    names = script.names_for(dense)
    assert {"server_s.vllm", "server_s.trtllm"} <= set(names) and "server_s.sglang" not in names
    # the shipped value is the start: ~15 ms, the public single-client floor of small models under SGLang
    assert CONSTANTS["server_s.sglang"] == STARTING["server_s.sglang"] == 0.015
    # a MoE prompt's excess is its own term, fitted where SGLang's served runs are MoE and for SGLang alone
    assert not [n for n in names if n.startswith("moe_server_s")]
    moe = script.names_for([*dense, *(_point(e, served=True, experts=256.0) for e in ("sglang", "vllm"))])
    assert [n for n in moe if n.startswith("moe_server_s")] == ["moe_server_s.sglang"]
    assert CONSTANTS["moe_server_s"] == 0.0 < CONSTANTS["moe_server_s.sglang"]  # no shared value for the others


def test_a_dsa_indexers_cost_is_fitted_only_where_points_have_one(script):
    # without a DeepSeek Sparse Attention run index_layer_s keeps its start (calibration.STARTING); with GLM-5's
    # SGLang runs (the shipped fit) SGLang's is fitted and is the shared value the other engines take
    assert not any(n.startswith("index_layer_s") for n in script.names_for([_point("sglang", served=True)]))
    points = [_point("sglang", served=True, index_layers=78), _point("vllm", served=True)]
    names = script.names_for(points)
    assert "index_layer_s.sglang" in names and "index_layer_s.vllm" not in names
    c = {"index_layer_s": 50e-6, "index_layer_s.sglang": 100e-6}
    script.shared_means(points, c, [n for n in names if n.startswith("index_layer_s")])
    assert c["index_layer_s"] == pytest.approx(100e-6)


def test_only_llamacpps_materialized_scores_get_a_cost_and_it_is_never_shared(script):
    # the calibration's llama.cpp points are llama-bench runs without flash attention: their prompts'
    # scores go through memory in micro-batches of n_ubatch; every other engine's stay on chip
    assert script.scores_of("llamacpp") == 512 and script.scores_of("vllm") == script.scores_of("trtllm") == 0
    points = [_point("llamacpp", family="ada", static=True, scores=1e9), _point("vllm", static=True)]
    names = script.names_for(points)
    assert "score_bytes.llamacpp" in names and "score_bytes.vllm" not in names
    assert "score_bytes.llamacpp" not in script.names_for([_point("llamacpp", family="ada", static=True)])
    # the shared value every other engine falls back on stays 0 (flash attention), whatever llama.cpp's is
    c = {"score_bytes": 0.0, "score_bytes.llamacpp": 38.0, "step_s": 3e-4, "step_s.llamacpp": 2e-3, "step_s.vllm": 5e-4}
    for p in points:
        p.sf.decode.link = "pcie"
        p.source = "s"
    script.shared_means(points, c, ["score_bytes.llamacpp", "step_s.llamacpp", "step_s.vllm"])
    assert c["score_bytes"] == 0.0 and c["score_bytes.llamacpp"] == 38.0
    assert c["step_s"] == pytest.approx(math.sqrt(2e-3 * 5e-4))  # a shared time constant is their mean


class _Sourced(NamedTuple):  # the fields reweighted reads of a fitting.Point
    engine: str
    sf: SimpleNamespace
    weight: float
    source: str


def _sourced(source, engine, static, n):
    p = _point(engine, static=static)
    return [_Sourced(engine, p.sf, 1.0, source) for _ in range(n)]


def test_the_cap_applies_where_a_rival_source_measures_the_same_engine_and_regime(script):
    script.SOURCE_ROWS.clear()  # counts come from the points given
    mlc, xdai = _sourced("mlc", "llamacpp", True, 2), _sourced("xdai", "llamacpp", True, 86)
    gpustack, aic = _sourced("gpustack", "vllm", False, 4), _sourced("aic", "vllm", False, 1209)

    def weights(points):
        return {(p.source, p.engine): p.weight for p in script.reweighted(points)}

    w = weights(mlc + xdai + gpustack + aic)
    assert w["mlc", "llamacpp"] == pytest.approx(math.log(3) / 10)  # XiongjieDai's 86 rival it
    assert w["gpustack", "vllm"] == pytest.approx(math.log(5) / 10)  # aiconfigurator's served vLLM runs
    assert w["xdai", "llamacpp"] == pytest.approx(math.log(87) / 86)
    # aiconfigurator held out: GPUStack's runs are all the fit has of served vLLM, full weight
    assert weights(mlc + xdai + gpustack)["gpustack", "vllm"] == pytest.approx(math.log(5) / 4)
    # a static vLLM source is no rival of served runs
    static = _sourced("rocm", "vllm", True, 28)
    assert weights(gpustack + static)["gpustack", "vllm"] == pytest.approx(math.log(5) / 4)
    # a build's points are its engine's: a source of today's llama.cpp rivals two legacy-build runs
    legacy, today = _sourced("mlc", "llamacpp.legacy", True, 2), _sourced("ggml", "llamacpp", True, 32)
    assert weights(legacy + today)["mlc", "llamacpp.legacy"] == pytest.approx(math.log(3) / 10)
    assert weights(legacy)["mlc", "llamacpp.legacy"] == pytest.approx(math.log(3) / 2)  # no rival: full weight
    # rows beyond those loaded still count as the source's size
    script.SOURCE_ROWS.update({"mlc": 3})
    assert weights(mlc + xdai)["mlc", "llamacpp"] == pytest.approx(math.log(4) / 10)
    script.SOURCE_ROWS.clear()


def test_a_legacy_llamacpp_build_fits_its_own_fixed_costs_and_prompt_efficiency(script):
    # the 2023 / May 2024 llama-bench runs (import_calibration.LEGACY_LLAMACPP) predate CUDA graphs and
    # int8 tensor-core MMQ: their per-step and per-layer costs and FLOP efficiency are their own, their
    # bandwidth efficiency the engine's
    points = [
        _point("llamacpp", family="ada", static=True),
        _point("llamacpp.legacy", family="ada", static=True),
        _point("llamacpp.legacy", family="apple", static=True),
    ]
    names = set(script.names_for(points))
    for n in ("step_s", "seq_s", "decode_layer_s", "prefill_layer_s"):
        assert {f"{n}.llamacpp", f"{n}.llamacpp.legacy"} <= names
    assert {"mfu.ada.llamacpp.legacy", "bw_eff.apple.llamacpp", "mfu.apple.llamacpp"} <= names
    assert not any(n.startswith("bw_eff.") and n.endswith(".legacy") for n in names)
    # a family whose llama.cpp points are all legacy (Apple here) fits llama.cpp's own efficiency from them
    assert "mfu.apple.llamacpp.legacy" not in names and "mfu.ada.llamacpp.legacy" not in script.names_for(points[1:])
    # a build's constant is no engine's: the shared step_s is the engines' mean, legacy left out
    c = {"step_s": 1.0, "step_s.llamacpp": 1e-3, "step_s.llamacpp.legacy": 4e-3}
    for p in points:
        p.source = "s"
    script.shared_means(points, c, ["step_s.llamacpp", "step_s.llamacpp.legacy"])
    assert c["step_s"] == pytest.approx(1e-3)


def test_a_constant_read_by_fewer_than_five_points_takes_its_fallback(script):
    # Six H100 points fit the Hopper efficiencies; two A100 points are too few for Ampere's (a family
    # efficiency fitted on two decode runs went to 0.18 once); llama.cpp's own efficiency on the 4090 stays,
    # as its fallback would be the serving engines' Ada value, not a mean of families. Two points of the
    # legacy build are too few for its fixed costs (they take today's build's), not for its efficiency; six
    # of ROCm's vLLM build are enough for its own, two are not. Hopper's runs are of two models; CDNA3's of one,
    # too few for a family's efficiency (it takes the shared value), not for a build's fixed costs.
    from kvcalc.cost.fitting import Point, Setup, setup_features
    from kvcalc.cost.step import Deployment
    from kvcalc.model.presets import get_gpu, get_model

    points = []
    runs = (("h100", "vllm", (1, 8, 32)), ("a100", "vllm", (1,)), ("rtx-4090", "llamacpp", (1, 2, 4)))
    builds = (("rtx-4090", "llamacpp.legacy", (1,)), ("mi300x", "vllm.rocm", (1, 2, 4)))
    for gpu, engine, batches in (*runs, *builds):
        for i, b in enumerate(batches):
            model = "qwen3-8b" if gpu == "h100" and i == 0 else "llama-3.1-8b"
            sf = setup_features(get_model(model), get_gpu(gpu), Deployment(), Setup(b, None, 512, 128), None, "bf16")
            points += [Point(sf, engine, m, 1.0, label=f"{model} on {gpu}") for m in ("tpot_ms", "ttft_ms")]
    names = script.names_for(points)
    kept = script.measured(points, names)
    assert {"bw_eff.cdna3", "mfu.cdna3"} <= set(names) and not {"bw_eff.cdna3", "mfu.cdna3"} & set(kept)
    one_model = [p._replace(label="llama-3.1-8b on h100") if p.label.startswith("qwen3") else p for p in points]
    assert not {"bw_eff.hopper", "mfu.hopper"} & set(script.measured(one_model, names))
    assert {"bw_eff.ampere", "mfu.ampere", "bw_eff.ada.llamacpp", "mfu.ada.llamacpp"} <= set(names)
    assert {"bw_eff.hopper", "mfu.hopper", "bw_eff.ada.llamacpp", "mfu.ada.llamacpp"} <= set(kept)
    assert not {"bw_eff.ampere", "mfu.ampere", "bw_eff.ada", "mfu.ada"} & set(kept)
    assert "step_s.llamacpp.legacy" in names and "step_s.llamacpp.legacy" not in kept
    assert {"step_s.llamacpp", "mfu.ada.llamacpp.legacy"} <= set(kept)
    # ROCm's vLLM build: six points (three batches, two metrics) fit its own fixed costs
    assert {"step_s.vllm.rocm", "seq_s.vllm.rocm", "step_s.vllm"} <= set(kept)
    assert "step_s.vllm.rocm" not in script.measured(points[:-4], script.names_for(points[:-4]))
    dropped = {n for n in names if n not in kept}
    assert all(n.startswith(("bw_eff.", "mfu.")) or n.endswith(".legacy") for n in dropped)


def test_a_builds_constant_no_figure_moves_is_left_out_of_the_fit(script):
    # ROCm's vLLM runs are dense: their steps look up the build's MoE costs without depending on them, so
    # the search never moves those, and a start left in the fit would stand in for vLLM's fitted value
    from kvcalc.cost.fitting import Point, Setup, setup_features
    from kvcalc.cost.step import Deployment
    from kvcalc.model.presets import get_gpu, get_model

    spec = get_model("llama-3.1-8b")
    points = []
    for gpu, engine, value in (("h100", "vllm", 8.0), ("mi300x", "vllm.rocm", 9.0)):
        for b in (1, 2, 4, 8, 16, 32):
            sf = setup_features(spec, get_gpu(gpu), Deployment(), Setup(b, None, 512, 128), None, "bf16")
            points.append(Point(sf, engine, "tpot_ms", value * (1 + b / 64), 1.0, source=gpu))
    c = script.calibrate(points, sweeps=1)
    assert "step_s.vllm.rocm" in c and "seq_s.vllm.rocm" in c
    assert "moe_layer_s.vllm.rocm" not in c and "moe_prefill_expert_s.vllm.rocm" not in c


def test_each_phases_interval_is_the_narrowest_that_holds_80_percent_of_a_source_it_never_saw(script):
    # Two sources of 100 equal-weight decode residuals each: A's log-ratios 0..0.99, B's shifted by 0.03. Scored
    # against A's 5th-95th percentile (about 0.05..0.94), B's points from 0.03 to 1.02 fall inside for 0.05..0.94:
    # 90 of them; so for A against B. A served phase whose sources disagree wholly holds none and takes the widest.
    decode = [{"phase": "decode", "source": s, "log_ratio": i / 100 + shift, "weight": 1.0}
              for s, shift in (("A", 0.0), ("B", 0.03)) for i in range(100)]  # fmt: skip
    inside, n = script.nested_inside(decode, "decode", 0.05)
    assert n == 200 and 170 <= inside <= 190
    assert script.phase_tail(decode, "decode") == script.INTERVAL_TAILS[0]
    apart = [{"phase": "served", "source": s, "log_ratio": x + i / 1000, "weight": 1.0}
             for s, x in (("A", 0.0), ("B", 5.0)) for i in range(50)]  # fmt: skip
    assert script.nested_inside(apart, "served", 0.02) == (0, 100)
    assert script.phase_tail(apart, "served") == script.INTERVAL_TAILS[-1]
    # a phase where the narrowest misses 80% but a wider one holds it: B spread 1.4 times as wide as A
    wide = [{"phase": "prefill", "source": s, "log_ratio": k * i / 100, "weight": 1.0}
            for s, k in (("A", 1.0), ("B", 1.4)) for i in range(100)]  # fmt: skip
    tail = script.phase_tail(wide, "prefill")
    assert tail < script.INTERVAL_TAILS[0]
    for t in script.INTERVAL_TAILS:
        i, m = script.nested_inside(wide, "prefill", t)
        assert (i >= 0.8 * m) == (t <= tail)
