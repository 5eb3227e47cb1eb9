"""vLLM 0.19's start-up refusals (engines/vllm/startup.py): check_enough_kv_cache_memory's message and
estimate_max_model_len, the default max_model_len, and architectures V1 does not serve."""

import json

import pytest
from conftest import FIXTURES, run, run_json, shared_path

from kvcalc.engines.vllm.startup import check_start, default_max_model_len, length_refusal, unsupported_architecture
from kvcalc.model.hf.reader import spec_from_config
from kvcalc.model.presets import get_model


def test_l4_128k_refuses_and_names_the_length_that_starts():
    # Llama-3.1-8B on one L4: page 16 x 2 x 8 x 128 x 2 B = 65,536 B per layer, 32 layers; one 131,072-token
    # request needs 8,192 blocks x 32 x 65,536 B = 16 GiB. vLLM's estimate is the largest length whose
    # cdiv(L, 16) blocks fit: num_blocks x 16 when the pool holds num_blocks whole blocks of every layer.
    out = run("fit", "llama-3.1-8b", "--gpu", "l4", "--seq", "128k", "--engine", "vllm", "--format", "json")
    assert out.exit_code == 3
    import json

    d = json.loads(out.stdout)
    s = d["vllm"]["startup"]
    assert s["needed_kv_bytes"] == 8192 * 32 * 65536 == 16 * 2**30
    assert s["estimated_max_model_len"] == d["vllm"]["num_blocks"] * 16
    assert "To serve at least one request with the models's max seq len (131072), (16.0 GiB KV cache" in s["refusal"]
    assert f"the estimated maximum model length is {s['estimated_max_model_len']}." in s["refusal"]
    assert not d["ok"] and "REFUSES TO START" in d["verdict"]


def test_estimate_is_vllms_binary_search():
    spec = get_model("llama-3.1-8b")
    page = 65536
    # 1,000 blocks of all 32 layers: 16,000 tokens start, 16,001 would need a 1,001st block
    start = check_start(
        spec, [(range(32), 1000 * 32 * page)], max_model_len=131072, page=page, block=16, max_num_batched_tokens=2048
    )
    assert start.estimated_max_model_len == 16000
    ok = check_start(
        spec, [(range(32), 1000 * 32 * page)], max_model_len=16000, page=page, block=16, max_num_batched_tokens=2048
    )
    assert ok.refusal is None and ok.needed_kv_bytes == 1000 * 32 * page
    none = check_start(spec, [(range(32), 0)], max_model_len=8, page=page, block=16, max_num_batched_tokens=2048)
    assert none.refusal.startswith("No available memory for the cache blocks.")


def test_default_max_model_len_is_the_models_own():
    assert default_max_model_len(get_model("llama-3.1-8b")) == 131072
    d = run_json("fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm")
    assert d["seq"] == 131072 and d["vllm"]["startup"]["max_model_len"] == 131072
    assert run_json("fit", "llama-3.1-8b", "--gpu", "h100")["seq"] == 8192  # without an engine: 8k


def _derived(raw: dict) -> int:
    return default_max_model_len(spec_from_config(raw, "x", "test"))


LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 2}
LLAMA |= {"intermediate_size": 11008, "vocab_size": 32000, "max_position_embeddings": 4096}


@pytest.mark.parametrize(
    "fixture, length",
    [
        # LongRoPE: the short table's original_max_position_embeddings, not the 131,072 of the long one
        ("phi-4-mini.json", 4096),
        # Qwen (v1): seq_length 8,192 is smaller than max_position_embeddings 32,768; vLLM takes the smaller
        ("qwen-72b.json", 8192),
        # YaRN: original_max_position_embeddings 4,096 x factor 32
        ("gpt-oss-120b.json", 131072),
        # llama3 rope: its factor 8 is not applied (max_position_embeddings is already the long context)
        ("llama-3.1-70b.json", 131072),
        # Gemma 3: linear factor 8, already in max_position_embeddings (vLLM skips gemma3)
        ("gemma-3-4b.json", 131072),
    ],
)
def test_default_max_model_len_is_what_vllm_derives_from_the_config(fixture, length):
    assert _derived(json.loads((FIXTURES / "real_configs" / fixture).read_text())) == length


@pytest.mark.parametrize(
    "name, length",
    [
        ("command-r-v01.json", 131072),  # Cohere's model_max_length replaces max_position_embeddings (8,192)
        ("chatglm3-6b.json", 8192),  # ChatGLM's seq_length: no max_position_embeddings at all
        ("bloom-7b1.json", 2048),  # ALiBi, none of the keys: vLLM's default 2,048
        ("deepseek-v3.json", 163840),  # YaRN 4,096 x 40
    ],
)
def test_default_max_model_len_of_shared_configs(name, length):
    assert _derived(json.loads(shared_path("configs", name).read_text())) == length


def test_rope_factors_lengthen_the_default_unless_llama3_or_longrope():
    assert _derived(LLAMA) == 4096
    assert _derived(LLAMA | {"rope_scaling": {"type": "linear", "factor": 2.0}}) == 8192
    assert _derived(LLAMA | {"rope_scaling": {"rope_type": "dynamic", "factor": 4.0}}) == 16384
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    assert _derived(LLAMA | {"max_position_embeddings": 32768, "rope_scaling": yarn}) == 131072
    llama3 = {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}
    assert _derived(LLAMA | {"max_position_embeddings": 131072, "rope_scaling": llama3}) == 131072
    assert _derived(LLAMA | {"rope_scaling": {"type": "linear", "factor": None}}) == 4096  # vLLM falls back to 1
    # the smallest length key wins; the trained length the spec keeps is max_position_embeddings
    spec = spec_from_config(LLAMA | {"max_seq_len": 2048}, "x", "test")
    assert default_max_model_len(spec) == 2048 and spec.max_position_embeddings == 4096


def test_command_r_default_length_refuses_to_start_on_two_h100s():
    # Command-R v01 (MHA, 64 KV heads x 128 x 40 layers x 2 B x 2 = 1.25 MiB a token): vLLM's default max_model_len
    # is its model_max_length, 131,072 tokens = 160 GiB of KV over tp 2, 80 GiB a GPU: it does not start on 2 x H100
    out = run("fit", "command-r", "--gpu", "h100", "--tp", "2", "--engine", "vllm", "--format", "json")
    assert out.exit_code == 3
    d = json.loads(out.stdout)
    assert d["seq"] == 131072 and d["vllm"]["startup"]["needed_kv_bytes"] == 131072 * 40 * 32 * 128 * 2 * 2
    assert "REFUSES TO START" in d["verdict"] and not d["warnings"]  # 131,072 is Command-R's own context


def test_a_max_model_len_beyond_the_configs_is_refused_in_vllms_words():
    # _get_and_verify_max_len: Llama-3-8B derives 8,192 (a float by then: RoPE scaled by 1.0); 16,384 is a ValueError
    out = run("fit", "llama-3-8b", "--gpu", "h100", "--engine", "vllm", "--seq", "16k", "--format", "json")
    assert out.exit_code == 3
    refusal = json.loads(out.stdout)["vllm"]["startup"]["refusal"]
    assert refusal.startswith(
        "User-specified max_model_len (16384) is greater than the derived max_model_len (max_position_embeddings=8192.0 "
        "or model_max_length=None in model's config.json). To allow overriding this maximum, set the env var "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
    )
    assert run("fit", "llama-3-8b", "--gpu", "h100", "--engine", "vllm", "--seq", "8k").exit_code == 0
    # LongRoPE: Phi-4-mini defaults to its short table (4,096) but takes up to the long one's 131,072
    phi = get_model("phi-4-mini")
    assert default_max_model_len(phi) == 4096
    assert length_refusal(phi, 131072) is None and length_refusal(phi, 131073) is not None
    # Command-R: model_max_length is the limit, named as such
    assert "(model_max_length=131072.0 or model_max_length=131072 in" in length_refusal(get_model("command-r"), 200000)
    # BLOOM's config has no length key: vLLM defaults to 2,048 and takes any length given
    bloom = get_model("bloom-7b1")
    assert default_max_model_len(bloom) == 2048 and length_refusal(bloom, 1 << 20) is None


def test_encoder_decoders_vllm_v1_does_not_serve():
    assert unsupported_architecture(get_model("whisper-tiny")) is None  # Whisper is in V1's registry
    why = unsupported_architecture(get_model("llama-3.2-11b-vision"))
    assert "MllamaForConditionalGeneration was supported in vLLM until v0.10.2" in why
    out = run("fit", "llama-3.2-11b-vision", "--gpu", "h100", "--engine", "vllm")
    assert out.exit_code == 2 and "accounting" not in out.stdout


def test_a_decoder_with_remote_code_only_is_refused_in_vllms_words():
    # Hunyuan-Large (HunYuanForCausalLM): in neither vLLM 0.19's registry nor transformers, its remote code older than
    # the Transformers backend; the A13B (HunYuanMoEV1ForCausalLM) is vLLM's own hunyuan_v1.py
    why = unsupported_architecture(get_model("hunyuan-large"))
    assert why == "Model architectures ['HunYuanForCausalLM'] are not supported for now."
    assert unsupported_architecture(get_model("hunyuan-a13b")) is None
    out = run("fit", "hunyuan-large", "--gpu", "h200", "--gpus", "8", "--engine", "vllm", "--seq", "8k")
    assert out.exit_code == 2 and "vLLM 0.19 does not serve hunyuan-large" in out.stderr
    # SGLang 0.5.x has no class for it either (srt/models/hunyuan.py: the V1 MoE and dense), nor takes its remote code
    sglang = run("fit", "hunyuan-large", "--gpu", "h200", "--gpus", "8", "--engine", "sglang", "--seq", "8k")
    assert sglang.exit_code == 2 and "HunYuanForCausalLM has no SGlang implementation" in sglang.stderr
    # a speed under vLLM (the default engine) says the deployment cannot be made
    served = run_json("generate", "hunyuan-large", "--gpu", "h200", "--tp", "8", "--concurrency", "4", "--prompt", "1k",
                      "--new", "1k")  # fmt: skip
    assert served["warnings"] == [f"not a real deployment: vLLM 0.19 would not start: {why}"]
    plain = run_json("generate", "hunyuan-a13b", "--gpu", "h200", "--tp", "2", "--batch", "4", "--prompt", "1k")
    assert not any("would not start" in w for w in plain["warnings"])


def test_t5_and_bart_are_refused_in_vllms_words():
    # vLLM 0.19's registry: T5 is in no list (_TEXT_GENERATION_MODELS, _PREVIOUSLY_SUPPORTED_MODELS,
    # _OOT_SUPPORTED_MODELS), so _raise_for_unsupported says "not supported for now"; BART moved to a plugin.
    from conftest import FIXTURES

    t5 = run("fit", FIXTURES / "configs" / "t5-encdec.json", "--gpu", "h100", "--engine", "vllm")
    assert t5.exit_code == 2 and "['T5ForConditionalGeneration'] are not supported for now" in t5.stderr
    bart = run("fit", FIXTURES / "configs" / "bart-large.json", "--gpu", "h100", "--engine", "vllm")
    assert bart.exit_code == 2 and "BartForConditionalGeneration is not supported in-tree anymore" in bart.stderr
    whisper = run("fit", "whisper-tiny", "--gpu", "h100", "--engine", "vllm", "--seq", "448")
    assert whisper.exit_code in (0, 3) and "vLLM 0.19 accounting" in whisper.stdout
