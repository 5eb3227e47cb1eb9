"""Step 3 (stepfun-ai/step3): multi-matrix factorization attention, one KV head of 256 for 64 query heads.

vLLM 0.19's step3_text.py builds every layer's Attention with num_kv_heads = 1 (and refuses another count);
Step3TextConfig (transformers_utils/configs/step3_vl.py) gives the text model's defaults: 61 layers, 64 heads,
num_attention_groups 1, head_dim 256, 48 experts on layers 4-59 beside a shared expert, low-rank queries
(share_q_dim 2048). The cache is exact; the parameters are unknown (its low-rank queries, experts listed by
moe_layers_enum and shared expert are not read).
"""

import json

import pytest
from conftest import run, run_json

from kvcalc.cost.kvcache import bytes_per_token
from kvcalc.errors import SpecError
from kvcalc.model.hf.reader import spec_from_config

WRAPPER = {
    "architectures": ["Step3VLForConditionalGeneration"], "model_type": "step3_vl",
    "text_config": {"architectures": ["Step3TextForCausalLM"], "model_type": "step3_text"},
    "vision_config": {"model_type": "step3_vision_encoder"},
}  # fmt: skip


def test_one_kv_head_of_256_on_every_layer():
    spec = spec_from_config(WRAPPER, "step3", "step3/config.json")
    assert (spec.num_layers, spec.num_heads, spec.kv_heads, spec.head_dim_effective) == (61, 64, 1, 256)
    assert bytes_per_token(spec, "bf16") == 2 * 61 * 1 * 256 * 2 == 62_464
    assert spec.params_unknown and "share_q_dim" in spec.params_unknown and "moe_num_experts" in spec.params_unknown


def test_another_group_count_is_refused():
    raw = json.loads(json.dumps(WRAPPER))
    raw["text_config"]["num_attention_groups"] = 8
    with pytest.raises(SpecError, match="num_attention_groups 8"):
        spec_from_config(raw, "step3", "step3/config.json")


def test_cache_answers_and_engines_ask_for_the_weights(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(WRAPPER))
    out = run_json("cache", str(tmp_path), "--batch", "4", "--seq", "65536")
    assert out["bytes_per_token"] == 62_464 and out["total_bytes"] == 4 * 65536 * 62_464
    res = run("fit", str(tmp_path), "--gpu", "h200", "--tp", "8", "--seq", "64k", "--engine", "vllm")
    assert res.exit_code != 0 and isinstance(res.exception, SystemExit)  # an error line, not a traceback
    assert "parameters unknown" in res.stderr and len(res.stderr.strip().splitlines()) == 1
