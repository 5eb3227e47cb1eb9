"""Vision-language models whose decoder cross-attends to image tokens: Llama 3.2 Vision (mllama).

Sources: transformers models/mllama/modeling_mllama.py (MllamaVisionModel: patch conv without bias,
class embedding, gated positional and tile embeddings, 32 local + 8 gated global layers with biased
MLPs, projector 7,680 -> text hidden), and vLLM model_executor/models/mllama.py, where each image
becomes max_num_tiles x ((image_size / patch_size)^2 + 1) encoder tokens (4 x 1,601 = 6,404).
"""

from __future__ import annotations

from typing import Any

from kvcalc.model.hf.fields import Config


def mllama_fields(cfg: Config, vision: Any, text_hidden: int) -> dict[str, Any]:
    if not isinstance(vision, dict):
        raise cfg.refuse("mllama config has no vision_config")
    v = Config(vision, f"{cfg.where} (vision_config)", {})
    d = v.int_field("hidden_size", default=1280)
    layers = v.int_field("num_hidden_layers", default=32)
    global_layers = v.int_field("num_global_layers", default=8)
    inter = v.int_field("intermediate_size", default=5120)
    image, patch = v.int_field("image_size", default=560), v.int_field("patch_size", default=14)
    tiles = v.int_field("max_num_tiles", default=4)
    channels = v.int_field("num_channels", default=3)
    out_dim = v.int_field("vision_output_dim", default=7680)
    listed = v.get("supported_aspect_ratios", default=[[1, 1], [1, 2], [1, 3], [1, 4], [2, 1], [2, 2], [3, 1], [4, 1]])
    if not isinstance(listed, list):
        raise v.refuse(f"field supported_aspect_ratios must be a list, got {listed!r}")
    ratios = len(listed)
    patches = (image // patch) ** 2 + 1  # + the class token
    layer = 4 * d * d + 2 * d * inter + inter + d + 4 * d  # q/k/v/o, fc1/fc2 with biases, 2 LayerNorms
    tower = (
        channels * patch * patch * d  # patch embedding (no bias)
        + d  # class embedding
        + patches * d
        + 1  # gated positional embedding
        + (ratios + 1) * tiles * patches * d  # gated tile positional embedding
        + 2 * ((ratios + 1) * tiles * d + 1)  # pre- and post-tile positional embeddings (gated)
        + 4 * d  # layernorm_pre, layernorm_post
        + layers * layer
        + global_layers * (layer + 2)  # global layers carry attention and MLP gates
        + out_dim * text_hidden
        + text_hidden  # multi_modal_projector
    )
    # The text model's own extras: 8 more embedding rows (MllamaTextModel: vocab_size + 8, the image tokens'), and
    # in each cross-attention layer its attention and MLP gates (one each) and q_norm / k_norm of head_dim each.
    cross = cfg.get("cross_attention_layers", default=[])
    head_dim = text_hidden // cfg.int_field("num_attention_heads")
    text_extras = 8 * text_hidden + len(cross if isinstance(cross, list) else []) * (2 + 2 * head_dim)
    # NOTE: one image per sequence unless --images says otherwise (a text-only request holds none).
    return {"extra_params": tower + text_extras, "image_tokens": tiles * patches, "images": 1}
