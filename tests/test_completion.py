"""Shell completion of model names, GPU names and dtypes (Typer autocompletion callbacks)."""

import os
import subprocess
import sys

import pytest


def complete(line):
    words = line.split(" ")
    env = {**os.environ, "_KVCALC_COMPLETE": "complete_bash", "COMP_WORDS": line, "COMP_CWORD": str(len(words) - 1)}
    out = subprocess.run([sys.executable, "-m", "kvcalc"], env=env, capture_output=True, text=True, timeout=30)
    return out.stdout.split()


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("kvcalc cache llama-3-", {"llama-3-8b", "llama-3-70b"}),
        ("kvcalc show deepseek-v", {"deepseek-v3", "deepseek-v2-lite"}),
        ("kvcalc roofline 7b --gpu a100,h1", {"a100,h100", "a100,h100-pcie"}),
        ("kvcalc fit 7b --gpu h2", {"h200"}),
        ("kvcalc generate 7b --gpu h100 --kv-dtype f", {"fp8", "fp16", "fp32"}),
        ("kvcalc cache 7b --dtype mx", {"mxfp4"}),
        ("kvcalc compare mha --model qwen3-3", {"qwen3-32b"}),
        ("kvcalc compare mha llama-3-", {"llama-3-8b", "llama-3-70b"}),  # compare takes model names too
        ("kvcalc compare m", {"mha", "mqa", "mla", "mistral-7b"}),
        ("kvcalc probe --gpu h2", {"h200"}),
    ],
)
def test_completes_names_and_dtypes(line, expected):
    got = set(complete(line))
    assert expected <= got, got
    prefix = line.split(" ")[-1]
    assert all(g.startswith(prefix) for g in got)


def test_completion_reads_no_yaml():
    code = (
        "import sys; from kvcalc.cli.common import _complete_models, _complete_gpus;"
        "assert _complete_models('qwen') and _complete_gpus('h'); print('yaml' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_engine_version_completes_the_releases_kvcalc_reads():
    # SGLang's releases where kvcalc's reading changes, and (fit's option) llama.cpp's build eras
    from kvcalc.engines.llamacpp.eras import ERAS
    from kvcalc.engines.sglang.release import DEFAULT_RELEASE, SERVED_FROM, release_text

    served = set(complete("kvcalc generate 7b --gpu h100 --engine sglang --engine-version 0.5."))
    assert {DEFAULT_RELEASE, "0.5.5", release_text(SERVED_FROM["Gemma4ForCausalLM"])} <= served
    assert all(r.startswith("0.5.") for r in served)
    assert set(complete("kvcalc plan 7b --engine sglang --engine-version 0.4.1")) == {"0.4.10"}
    fit = set(complete("kvcalc fit 7b --engine llamacpp --engine-version 20"))
    assert fit == {e for e in ERAS if e.startswith("20")} and fit
