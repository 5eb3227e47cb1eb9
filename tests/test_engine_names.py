"""--engine as people write it (engines/names.py): spellings of the four engines kvcalc models, and the two
engines the acceptance reads as the nearest of them (LMDeploy as trtllm, TGI as vllm), said on stderr."""

import json

import pytest
from conftest import run

from kvcalc import api
from kvcalc.engines.names import engine_name
from kvcalc.errors import UsageError


@pytest.mark.parametrize(
    ("spelled", "engine"),
    [("vLLM", "vllm"), ("SGLang", "sglang"), ("TensorRT-LLM", "trtllm"), ("trt-llm", "trtllm"),
     ("trtllm-serve", "trtllm"), ("llama.cpp", "llamacpp"), ("llama-server", "llamacpp")],
)  # fmt: skip
def test_a_spelling_is_the_engine_without_a_note(spelled, engine):
    assert engine_name(spelled) == (engine, None)


@pytest.mark.parametrize(
    ("spelled", "engine"), [("lmdeploy", "trtllm"), ("LMDeploy", "trtllm"), ("tgi", "vllm"), ("Ollama", "llamacpp")]
)
def test_an_engine_without_a_model_is_the_nearest_and_says_so(spelled, engine):
    name, note = engine_name(spelled)
    assert name == engine and note.startswith(f"{spelled} has no speed model of its own; estimated as {engine}")


def test_an_unknown_engine_is_one_line_naming_the_four():
    with pytest.raises(UsageError, match="unknown engine 'exllama'") as err:
        engine_name("exllama")
    assert "vllm, sglang, trtllm, llamacpp" in err.value.hint


def test_generate_estimates_lmdeploy_as_trtllm_and_says_so_on_stderr():
    args = ["generate", "llama-3-8b", "--gpu", "a100", "--batch", "16", "--prompt", "128", "--new", "128"]
    lmdeploy = run(*args, "--engine", "lmdeploy", "--format", "json")
    trtllm = run(*args, "--engine", "trtllm", "--format", "json")
    assert lmdeploy.exit_code == 0 and "estimated as trtllm, the nearest" in lmdeploy.stderr
    assert json.loads(lmdeploy.stdout) == json.loads(trtllm.stdout)  # stdout stays the JSON alone
    tensorrt = api.generate("llama-3-8b", gpu="a100", batch=16, prompt=128, new=128, engine="TensorRT-LLM")
    assert tensorrt.model_dump(mode="json") == json.loads(trtllm.stdout)


def _one_run_csv(tmp_path, engine):
    f = tmp_path / f"{engine}.csv"
    f.write_text(
        "model,gpu,tp,engine,prompt,new,concurrency,ttft_ms,tpot_ms\n"
        f"llama-3-8b,h100,1,{engine},1024,256,8,60,9.5\n"
        f"llama-3-8b,h100,1,{engine},1024,256,32,150,12.5\n"
    )
    return str(f)


def test_calibrate_reads_an_engine_spelling_and_refuses_a_stand_in(tmp_path, monkeypatch):
    monkeypatch.setenv("KVCALC_PRESETS", str(tmp_path))
    ok = run("calibrate", _one_run_csv(tmp_path, "TensorRT-LLM"), "--format", "json")
    assert ok.exit_code == 0, ok.stderr
    assert json.loads(ok.stdout)["engine"] == "trtllm"
    assert (tmp_path / "calibration" / "h100--trtllm.json").exists()
    # LMDeploy's runs would set trtllm's terms: estimating lmdeploy as trtllm is a reading, calibrating is not
    refused = run("calibrate", _one_run_csv(tmp_path, "lmdeploy"))
    assert refused.exit_code != 0 and "Traceback" not in refused.stderr
    assert "engine 'lmdeploy' has no speed model of its own to calibrate: its runs would set trtllm's terms" in (
        refused.stderr
    )
