"""Falcon-H1: attention and a Mamba-2 mixer side by side in every layer (a parallel hybrid).

The fixture is Falcon-H1-0.5B's config as NVIDIA-NeMo/Megatron-Bridge @ 067f987 quotes it
(tests/unit_tests/models/falcon_h1/test_falcon_h1_bridge.py, FALCON_H1_500M_CONFIG): it leaves out
mamba_d_ssm, which FalconH1Config then takes as 1024 and refuses (24 heads x 64 is 1,536), so the figures
below give it the 1,536 the bridge itself writes back (mamba_d_ssm = heads x head dim). Figures by hand from
transformers' FalconH1DecoderLayer / FalconH1Mixer and vLLM 0.19's mamba2_state_shape.
"""

import json

from conftest import FIXTURES, GiB, run, run_json
from gguf_writer import gguf_bytes, llama_like

from kvcalc.cost.params import param_counts
from kvcalc.engines.vllm.figures import vllm_figures
from kvcalc.model.gguf.arch import spec_from_gguf
from kvcalc.model.gguf.reader import read_header
from kvcalc.model.hf.reader import spec_from_config

QUOTED = FIXTURES / "configs" / "falcon-h1-0.5b.json"
RAW = {**json.loads(QUOTED.read_text()), "mamba_d_ssm": 1536}

# one layer: 8 query heads and 2 KV heads of 64 over hidden 1024; Mamba-2 of 24 heads x 64, 1 group, state 128,
# conv 4, no gated norm (mamba_rms_norm false), no projection biases; SwiGLU 2048
ATTENTION = 1024 * 512 + 2 * 1024 * 128 + 512 * 1024
CONV_DIM = 1536 + 2 * 128
MAMBA = 1024 * (1536 + CONV_DIM + 24) + CONV_DIM * 4 + CONV_DIM + 3 * 24 + 1536 * 1024
MLP = 3 * 1024 * 2048
LAYER_STATE = (24 * 64 * 128 + 3 * CONV_DIM) * 2  # bf16: SSM state + conv window
KV_PER_TOKEN = 36 * 2 * 2 * 64 * 2


def _spec():
    return spec_from_config(RAW, "falcon-h1-0.5b", "falcon-h1-0.5b/config.json")


def _config(tmp_path):
    path = tmp_path / "falcon-h1-0.5b" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(RAW))
    return path


def test_parameters_cache_and_state_by_hand(tmp_path):
    total = 36 * (ATTENTION + MAMBA + MLP + 2 * 1024) + 2 * 32784 * 1024 + 1024
    assert param_counts(_spec()).total == total == 521_411_104  # "Falcon-H1-0.5B"
    path = _config(tmp_path)
    out = run_json("cache", path, "--batch", "2", "--seq", "8192")
    assert out["bytes_per_token"] == KV_PER_TOKEN == 18_432
    assert out["total_bytes"] == 2 * 8192 * KV_PER_TOKEN
    assert out["state_bytes"] == 2 * 36 * LAYER_STATE == 2 * 14_542_848


def test_the_quoted_config_is_refused_as_transformers_refuses_it():
    result = run("cache", QUOTED)
    assert result.exit_code != 0 and result.stderr.count("\n") == 1
    assert "mamba_n_heads x mamba_d_head (24 x 64) differs from the mixer width 1024 (mamba_d_ssm" in result.stderr


def test_vllm_groups_attention_and_mamba_layers():
    # every layer registers an Attention and a MambaMixer2: 36 + 36 layers in two groups; the attention block
    # grows in steps of 16 tokens until a layer's page (512 B a token) holds a layer's state (403,968 B): 800
    v = vllm_figures(_spec(), 10 * GiB, kv_dtype="bf16", tp=1, seq=8192)
    assert (v.block_size, v.page_bytes_per_layer, v.kv_cache_groups, v.group_size) == (800, 409_600, 2, 36)
    blocks = 10 * GiB // (409_600 * 36)
    assert v.num_blocks == blocks and v.kv_cache_tokens == blocks // 2 * 800
    assert v.blocks_per_request == 11 + 1 and v.max_concurrency == blocks / 12


def test_llamacpp_holds_both_caches(tmp_path):
    path = _config(tmp_path)
    out = run_json("cache", path, "--seq", "8192", "--gpu", "rtx-4090", "--engine", "llamacpp")
    parts = {p["cache"]: p for p in out["llamacpp"]["kv_parts"]}
    assert parts["recurrent"]["layers"] == parts["non-SWA"]["layers"] == 36
    assert parts["recurrent"]["k_bytes"] == 36 * 4 * (24 * 64 * 128 + 3 * CONV_DIM)  # f32
    assert parts["non-SWA"]["k_bytes"] == parts["non-SWA"]["v_bytes"] == 36 * 8192 * 2 * 64 * 2


def test_gguf_falcon_h1_layers_carry_their_state():
    ssm = {"falcon-h1.ssm.conv_kernel": 4, "falcon-h1.ssm.inner_size": 512, "falcon-h1.ssm.state_size": 16,
           "falcon-h1.ssm.group_count": 1}  # fmt: skip
    md, t = llama_like("falcon-h1", extra=ssm)
    data = gguf_bytes(md, t, data=False)[0]
    spec = spec_from_gguf(read_header(lambda s, n: data[s : s + n], "m.gguf", 4096), "falcon-h1-tiny-Q4_K_M.gguf")
    (run_,) = {r for r, _ in spec.layer_groups()}
    assert run_.parallel_mixer and run_.kind.value == "full"
    # llama.cpp's n_embd_r + n_embd_s in f32: (4 - 1) x (512 + 2 x 16) + 16 x 512
    assert run_.state_bytes == 4 * (3 * (512 + 2 * 16) + 16 * 512)


def test_show_names_the_mixer_beside_the_attention(tmp_path):
    path = _config(tmp_path)
    out = run("show", path)
    assert "36 x full, state 394.50 KiB per sequence (a Mamba-2 mixer beside the attention)" in out.stdout
