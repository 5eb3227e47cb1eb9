"""Pure state-space models (Mamba, Falcon-Mamba, Mamba-2): no KV cache, a constant state per sequence.

Figures by hand from transformers' mixers (MambaMixer, Mamba2Mixer) and vLLM 0.19's state shapes
(mamba1_state_shape, mamba2_state_shape) and pool for an attention-free model. The Falcon-Mamba fixture is
tiiuae/falcon-mamba-7b's config.json as public test helpers quote it (hub: 7.27B parameters).
"""

import json

from conftest import FIXTURES, GiB, MiB, run, run_json

from kvcalc.cost.params import param_counts
from kvcalc.engines.vllm.figures import vllm_figures
from kvcalc.engines.vllm.memory import Settings, predict
from kvcalc.engines.weights import weight_bytes
from kvcalc.model.hf.reader import spec_from_config
from kvcalc.model.presets import get_gpu

CONFIGS = FIXTURES / "configs"
FALCON_MAMBA = CONFIGS / "falcon-mamba-7b.json"

# Falcon-Mamba-7B, one layer: d_inner 8192 (intermediate_size), d_state 16, dt_rank 256, conv 4, hidden 4096
FM_MIXER = (
    4096 * 2 * 8192  # in_proj: x and gate
    + 8192 * 4 + 8192  # depthwise conv and its bias
    + 8192 * (256 + 2 * 16)  # x_proj: dt, B, C
    + 256 * 8192 + 8192  # dt_proj and its bias
    + 8192 * 16  # A_log
    + 8192  # D
    + 8192 * 4096  # out_proj
)  # fmt: skip
FM_LAYER_STATE = 3 * 8192 * 2 + 8192 * 16 * 2  # conv window (kernel - 1) x d_inner + SSM d_inner x d_state, bf16
# Jamba-v0.1's config as far as JambaConfig's defaults do not fill it
JAMBA_V01 = {"model_type": "jamba", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
             "intermediate_size": 14336, "vocab_size": 65536}  # fmt: skip


def test_falcon_mamba_parameters_and_state_by_hand():
    spec = spec_from_config(json.loads(FALCON_MAMBA.read_text()), "falcon-mamba-7b", str(FALCON_MAMBA))
    assert spec.attention_free
    total = 64 * (FM_MIXER + 4096) + 2 * 65024 * 4096 + 4096  # layers with one norm each, untied ends, norm_f
    assert param_counts(spec).total == total == 7_272_665_088  # the hub's "7.27B"
    out = run_json("cache", FALCON_MAMBA, "--batch", "16", "--seq", "8192", "--gpu", "h100")
    assert out["bytes_per_token"] == 0 and out["total_bytes"] == 0
    assert out["state_bytes"] == 16 * 64 * FM_LAYER_STATE == 16 * 19_922_944
    assert out["gpu_memory_share"] == out["state_bytes"] / out["gpu_memory_bytes"]  # what the GPU holds


def test_falcon_mamba_width_defaults_to_expand_times_hidden():
    # FalconMambaConfig takes intermediate_size when given, else expand x hidden (16 x 4096 here)
    out = run_json("cache", CONFIGS / "falcon-mamba.json", "--seq", "100")
    assert out["state_bytes"] == 64 * (3 * 65536 * 2 + 65536 * 16 * 2)


def test_mamba_ignores_intermediate_size_and_ties_embeddings():
    # MambaConfig always sets intermediate_size = expand x hidden; PretrainedConfig ties by default
    raw = {"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24, "vocab_size": 50280,
           "intermediate_size": 999, "state_size": 16, "expand": 2, "conv_kernel": 4}  # fmt: skip
    spec = spec_from_config(raw, "mamba-130m", "mamba-130m/config.json")
    d = 1536
    mixer = 768 * 2 * d + d * 4 + d + d * (48 + 32) + 48 * d + d + d * 16 + d + d * 768  # dt_rank ceil(768/16)
    assert param_counts(spec).total == 24 * (mixer + 768) + 50280 * 768 + 768  # "mamba-130m": 129,135,360
    assert param_counts(spec).total == 129_135_360
    assert spec.layer_groups()[0][0].state_bytes == 3 * d * 2 + d * 16 * 2


def test_mamba2_defaults_are_mamba_codestral():
    # Mamba2Config's defaults: 64 layers, hidden 4096, 128 heads x 64, state 128, 8 groups, vocab 32768, untied
    spec = spec_from_config({"model_type": "mamba2"}, "mamba2", "mamba2/config.json")
    conv_dim = 8192 + 2 * 8 * 128
    mixer = 4096 * (8192 + conv_dim + 128) + conv_dim * 4 + conv_dim + 3 * 128 + 8192 + 8192 * 4096
    assert param_counts(spec).total == 64 * (mixer + 4096) + 2 * 32768 * 4096 + 4096 == 7_285_403_648
    run_ = spec.layer_groups()[0][0]
    assert run_.state_bytes == 128 * 64 * 128 * 2 + 3 * conv_dim * 2
    assert run_.state_elements == 128 * 64 * 128 + 3 * conv_dim


def test_mamba2_width_must_agree():
    result = run("cache", _write({"model_type": "mamba2", "hidden_size": 1024, "num_heads": 8}))
    assert result.exit_code != 0 and result.stderr.count("\n") == 1
    assert "num_heads x head_dim (8 x 64) differs from expand x hidden_size (2 x 1024)" in result.stderr


def _write(raw: dict):
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / "config.json"
    path.write_text(json.dumps(raw))
    return path


def test_attention_overrides_are_refused():
    result = run("cache", FALCON_MAMBA, "--kv-heads", "2")
    assert result.exit_code != 0 and result.stdout == ""
    assert "--kv-heads has no meaning for 'falcon_mamba': a pure state-space model has no attention" in result.stderr


def test_vllm_pool_of_an_attention_free_model():
    # vLLM turns prefix caching off for attention-free models, so a MambaSpec block is max_model_len tokens and
    # a request holds one; one group of all 64 layers, a page being one layer's state
    spec = spec_from_config(json.loads(FALCON_MAMBA.read_text()), "falcon-mamba-7b", str(FALCON_MAMBA))
    v = vllm_figures(spec, 10 * GiB, kv_dtype="bf16", tp=1, seq=8192)
    blocks = 10 * GiB // (64 * FM_LAYER_STATE)
    assert (v.num_blocks, v.block_size, v.kv_cache_groups, v.blocks_per_request) == (blocks, 8192, 1, 1)
    assert v.kv_cache_tokens == blocks * 8192 and v.max_concurrency == blocks == 538
    # at tp 2 each rank holds half of every layer's state: twice the requests
    assert vllm_figures(spec, 10 * GiB, kv_dtype="bf16", tp=2, seq=8192).num_blocks == 10 * GiB // (
        64 * FM_LAYER_STATE // 2
    )


def test_engines():
    out = run("fit", FALCON_MAMBA, "--gpu", "h100", "--seq", "8192", "--engine", "sglang")
    assert out.exit_code != 0 and out.stderr.count("\n") == 1
    assert "has no attention layers (a pure state-space model); SGLang serves none" in out.stderr
    out = run("generate", FALCON_MAMBA, "--gpu", "h100", "--engine", "trtllm", "--concurrency", "4")
    assert out.exit_code != 0 and out.stderr.count("\n") == 1
    assert "trtllm-serve's PyTorch backend has no Mamba / Mamba-2 model" in out.stderr
    # llama.cpp keeps the recurrent state in f32 whatever the checkpoint's dtype: twice vLLM's bf16 state
    out = run_json("cache", FALCON_MAMBA, "--seq", "8192", "--gpu", "rtx-4090", "--engine", "llamacpp")
    (part,) = out["llamacpp"]["kv_parts"]
    assert (part["cache"], part["k_type"], part["cells"]) == ("recurrent", "f32", 1)
    assert part["k_bytes"] == 2 * 64 * FM_LAYER_STATE == 38 * MiB


def test_compare_with_a_model_that_caches_nothing():
    out = run_json("compare", FALCON_MAMBA, "llama-3.1-8b", "--seq", "8192")
    first, second = out["rows"]
    assert (first["kv_heads"], first["total_bytes"], first["ratio"]) == (0, 0, 1.0)
    assert second["ratio"] is None  # no multiple of nothing


def test_show_says_there_is_no_attention():
    out = run("show", FALCON_MAMBA)
    assert out.exit_code == 0
    assert "none: state-space layers only, no KV cache" in out.stdout
    assert "KV heads" not in out.stdout and "num_heads" not in out.stdout
    assert run_json("show", FALCON_MAMBA)["attention_free"] is True
    assert run_json("show", "llama-3.1-8b")["attention_free"] is False


def test_tensor_parallelism_splits_the_mixers_by_width():
    # vLLM's MambaMixer shards d_inner (expand x hidden) over the ranks: tp must divide the width
    bad = run("generate", FALCON_MAMBA, "--gpu", "h100", "--tp", "3", "--batch", "8")
    assert (
        bad.exit_code != 0 and "tensor parallelism 3 does not divide falcon-mamba-7b's hidden size 4096" in bad.stderr
    )
    one = run_json("cache", FALCON_MAMBA, "--batch", "8", "--seq", "1024", "--tp", "2")
    assert one["state_bytes"] == 8 * 64 * FM_LAYER_STATE // 2  # per rank: half of every layer's state


def test_jamba_parameters_by_hand():
    # Jamba-v0.1 (JambaConfig's defaults fill the layout): 4 attention layers (i % 8 == 4), 28 Mamba-1, experts
    # on odd layers (16 x SwiGLU 14336, top 2), a dense MLP on even ones, untied embeddings of 65,536
    spec = spec_from_config(JAMBA_V01, "jamba-v0.1", "jamba/config.json")
    mamba = (
        4096 * 16384 + 8192 * 4 + 8192 + 8192 * (256 + 32) + 256 * 8192 + 8192 + 8192 * 16 + 8192 + 8192 * 4096
        + 256 + 2 * 16  # JambaMambaMixer's dt, B and C norms
    )  # fmt: skip
    attention = 2 * 4096 * 4096 + 2 * 4096 * 1024
    mlp = 3 * 4096 * 14336
    total = 2 * 65536 * 4096 + 4 * attention + 28 * mamba + 16 * (16 * mlp + 4096 * 16) + 16 * mlp + 65 * 4096
    assert param_counts(spec).total == total == 51_570_323_328  # the hub's "51.6B"


def test_vllm_builds_the_mamba1_a_in_float32():
    # vLLM 0.19's MambaMixer holds A as [d_inner / tp, d_state] in float32 (engines/fp32.py), the rest of the mixer
    # in the model dtype: 2 B more for each of A's elements, each rank its share
    falcon = spec_from_config(json.loads(FALCON_MAMBA.read_text()), "falcon-mamba-7b", str(FALCON_MAMBA))
    jamba = spec_from_config(JAMBA_V01, "jamba-v0.1", "jamba/config.json")
    assert weight_bytes(falcon, "bf16", None).mixers == 64 * FM_MIXER * 2  # the checkpoint's 16 bits
    h100 = get_gpu("h100")
    for spec, mamba_layers in ((falcon, 64), (jamba, 28)):
        for tp in (1, 2, 4):
            bf16 = weight_bytes(spec, "bf16", None, tp=tp)
            vllm = predict(spec, h100, Settings(tp=tp)).weights
            assert vllm.mixers - bf16.mixers == mamba_layers * (8192 // tp) * 16 * 2
            assert vllm.total - bf16.total == vllm.mixers - bf16.mixers
    assert 64 * 8192 * 16 * 2 == 16 * MiB  # Falcon-Mamba-7B on one GPU


def test_plan_offers_no_kv_dtype_to_a_model_without_kv():
    # an fp8 KV cache changes nothing when nothing is cached: the planner lists one option per weight dtype
    out = run_json("plan", FALCON_MAMBA, "--seq", "8k", "--users", "64", "--tpot-ms", "40", "--gpu", "h100")
    kinds = [(o["gpus"], o["tp"], o["replicas"], o["dtype"]) for o in out["options"]]
    assert {o["kv_dtype"] for o in out["options"]} == {"bf16"} and len(kinds) == len(set(kinds))


def test_a_float32_checkpoint_keeps_its_state_in_16_bits():
    # state-spaces/mamba-2.8b-hf's config (as a public Mamba fork's README quotes it) declares float32; vLLM serves
    # a float32 checkpoint in bf16 (_resolve_auto_dtype), and its 'auto' state dtypes follow the served dtype
    path = CONFIGS / "mamba-2.8b-hf.json"
    spec = spec_from_config(json.loads(path.read_text()), "mamba-2.8b-hf", str(path))
    d = 5120
    mixer = 2560 * 2 * d + d * 4 + d + d * (160 + 32) + 160 * d + d + d * 16 + d + d * 2560
    assert param_counts(spec).total == 64 * (mixer + 2560) + 50280 * 2560 + 2560 == 2_768_345_600  # "2.77B", tied
    out = run_json("cache", path, "--seq", "2048")
    assert out["kv_dtype"] == "bf16" and out["state_bytes"] == 64 * (d * 16 + 3 * d) * 2
