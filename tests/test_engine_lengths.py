"""The longest request each engine takes for a config.json, read as the engine reads it (model/hf/positions.py),
and what a spec keeps of it (Checkpoint.lengths: only where an engine's differs from max_position_embeddings)."""

import json

import pytest
from conftest import FIXTURES

from kvcalc.engines.lengths import context_refusal, longest_context
from kvcalc.model.hf.positions import trtllm_max_seq_len
from kvcalc.model.hf.reader import spec_from_config


def _fixture(name: str) -> dict:
    return json.loads((FIXTURES / "real_configs" / name).read_text())


LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 2}
LLAMA |= {"intermediate_size": 11008, "vocab_size": 32000, "max_position_embeddings": 4096}


@pytest.mark.parametrize(
    "text, length",
    [
        (LLAMA, 4096),
        (LLAMA | {"rope_scaling": {"type": "linear", "factor": 2.0}}, 8192),
        (
            LLAMA | {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}},
            4096,
        ),
        (LLAMA | {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, 4096),
        ({k: v for k, v in LLAMA.items() if k != "max_position_embeddings"}, 2048),  # infer_max_seq_len's default
    ],
)
def test_tensorrt_llms_max_seq_len_is_its_inferred_one(text, length):
    assert trtllm_max_seq_len(text) == length


def test_gemma_3s_linear_factor_lengthens_sglang_and_tensorrt_llm_not_vllm():
    # Gemma 3 4B: max_position_embeddings 131,072, rope_scaling linear x 8 (already in that length, says vLLM)
    spec = spec_from_config(_fixture("gemma-3-4b.json"), "gemma-3-4b", "test")
    assert spec.max_position_embeddings == 131072
    assert [longest_context(spec, e) for e in ("vllm", "sglang", "trtllm", "llamacpp")] == [
        131072,
        1048576,
        1048576,
        None,
    ]


def test_a_spec_keeps_only_the_lengths_that_differ():
    spec = spec_from_config(_fixture("llama-3.1-70b.json"), "llama-3.1-70b", "test")
    assert spec.checkpoint is not None and spec.checkpoint.lengths is None  # every engine: 131,072
    assert context_refusal(spec, "vllm", 131072) is None
    assert context_refusal(spec, "trtllm", 131073).endswith("it cuts max_seq_len to that and rejects longer requests")
    qwen = spec_from_config(_fixture("qwen-72b.json"), "qwen-72b", "test")
    assert qwen.max_position_embeddings == 32768
    lengths = qwen.checkpoint.lengths
    assert (lengths.vllm_default, lengths.vllm_key, lengths.sglang, lengths.trtllm) == (8192, "seq_length", 8192, None)


def test_lengths_are_whole_positive_numbers_and_model_max_length_is_cohere_s_alone():
    from kvcalc.model.hf.positions import trained_length, vllm_lengths

    assert trained_length(LLAMA | {"max_position_embeddings": 4096.0}) == 4096
    assert trained_length(LLAMA | {"max_position_embeddings": float("inf")}) is None
    assert trained_length(LLAMA | {"max_position_embeddings": True, "seq_length": 2048}) == 2048
    # a tokenizer's model_max_length pasted into config.json is not the trained context, except Cohere's own field
    huge = LLAMA | {"model_max_length": 10**30}
    assert trained_length(huge) == 4096 and vllm_lengths(huge, huge)[0] == 10**30  # vLLM takes it all the same
    assert trained_length(LLAMA | {"model_type": "cohere", "model_max_length": 131072}) == 131072


def test_fits_largest_context_stops_where_the_engine_does():
    from conftest import run, run_json

    # Qwen-72B (v1): vLLM and SGLang take 8,192 (seq_length) and say whose limit it is
    for engine in ("vllm", "sglang"):
        d = run_json("fit", "qwen-72b", "--gpu", "h200", "--tp", "8", "--engine", engine, "--seq", "4k")
        assert d["max_seq"] == 8192 and d["max_seq_memory"] > 300_000 and d["max_seq_limit"] is not None
    # TensorRT-LLM's PyTorch backend registers no QWenLMHeadModel: it would not load the model at all
    r = run("fit", "qwen-72b", "--gpu", "h200", "--tp", "8", "--engine", "trtllm", "--seq", "4k")
    assert r.exit_code == 2 and "Unknown architecture for AutoModelForCausalLM: QWenLMHeadModel" in r.stderr
    # where it serves the model, its longest is max_position_embeddings (131,072 for Llama-3.1-8B: llama3 RoPE
    # adds no factor), cut to rather than refused past, so no engine limit is named
    d = run_json("fit", "llama-3.1-8b", "--gpu", "h200", "--engine", "trtllm", "--seq", "4k")
    assert d["max_seq"] == 131072 and d["max_seq_memory"] > 131072 and d["max_seq_limit"] is None
