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


def _point(engine, family="hopper", served=False, static=False):
    decode = SimpleNamespace(family=family, allreduces=0, link="nvlink", stage_bytes=((0,) * 7,), a2a=(0,))
    sf = SimpleNamespace(decode=decode, run=object() if served else None, prompts_per_step=0)
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
    # rows beyond those loaded still count as the source's size
    script.SOURCE_ROWS.update({"mlc": 3})
    assert weights(mlc + xdai)["mlc", "llamacpp"] == pytest.approx(math.log(4) / 10)
    script.SOURCE_ROWS.clear()
