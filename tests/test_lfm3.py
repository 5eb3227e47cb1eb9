"""LFM3 (transformers 5.25 Lfm3Config / modeling_lfm3.py): short-convolution layers between full and sliding attention
layers, a sigmoid output gate a head, sandwich norms. tests/fixtures/configs/lfm3-defaults.json is Lfm3Config's
defaults as transformers saves them: 24 layers of 2,048 (13 conv, 6 full, 5 sliding over 256 tokens), 16 heads and 4
KV heads of 128, MLP 7,680, conv_L_cache 7, vocabulary 128,000 tied."""

import json

from conftest import FIXTURES, run_json

from kvcalc.cost.params import param_counts
from kvcalc.model.hf.reader import spec_from_config

CONFIG = FIXTURES / "configs" / "lfm3-defaults.json"


def test_lfm3_layers_cache_and_state_by_hand():
    spec = spec_from_config(json.loads(CONFIG.read_text()), "lfm3", CONFIG.name)
    kinds = [r.kind.value for r in spec.expanded_layers()]
    # Lfm3Config: full at i % 4 == 2, sliding at the other even layers from 4, a short conv elsewhere
    assert kinds == [("full" if i % 4 == 2 else "sliding" if i % 4 == 0 and i else "stateless") for i in range(24)]
    out = run_json("cache", CONFIG, "--seq", "8192", "--batch", "2")
    # 6 full layers hold 8,192 tokens, 5 sliding ones 256; 4 KV heads x 128, K and V, bf16; each conv layer keeps
    # conv_L_cache - 1 = 6 steps of 2,048 channels a sequence (Lfm3ShortConv, as LFM2's)
    assert out["total_bytes"] == 2 * (6 * 8192 + 5 * 256) * 2 * 4 * 128 * 2
    assert out["state_bytes"] == 2 * 13 * 6 * 2048 * 2


def test_lfm3_parameters_by_hand():
    spec = spec_from_config(json.loads(CONFIG.read_text()), "lfm3", CONFIG.name)
    h = 2048
    conv = 3 * h * h + h * 7 + h * h  # in_proj (B, C, x), the depthwise conv, out_proj; no biases
    # q / o over 16 heads of 128, k / v over 4, the q / k norms, g_proj's sigmoid gate a head (hidden -> 16)
    attention = h * 16 * 128 * 2 + h * 4 * 128 * 2 + 2 * 128 + h * 16
    layer = 3 * h * 7680 + 4 * h  # w1 / w3 / w2, and operator, ffn, post-operator and post-ffn norms
    total = 128000 * h + 13 * conv + 11 * attention + 24 * layer + h
    assert param_counts(spec).total == total == 1_728_801_536  # transformers 5.25 builds as many
    # without the gate and the sandwich norms: 11 gates and 2 x 24 norms fewer
    plain = json.loads(CONFIG.read_text()) | {"use_attention_gate": False, "use_sandwich_norm": False}
    assert param_counts(spec_from_config(plain, "lfm3", "x.json")).total == total - 11 * h * 16 - 48 * h
