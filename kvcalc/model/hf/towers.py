"""Vision towers and dummy images as vLLM 0.19 loads and profiles them, for the families kvcalc knows.

Pure: reads a config dict, returns parameter and element counts. Each family follows vLLM's own
module layout (which linear layers are tensor-parallel, which stay whole on every rank).
"""

from __future__ import annotations

from typing import Any

# A tower config whose fields have the wrong type or shape is not sized, as an unknown family's is not.
UNREADABLE = (LookupError, TypeError, ValueError, AttributeError, ArithmeticError)


def vision_params(raw: dict[str, Any], text: dict[str, Any]) -> tuple[int, int] | None:
    """The vision tower and projector vLLM loads: (split over tp, replicated) parameters, else None."""
    try:
        return _vision_params(raw, text)
    except UNREADABLE:
        return None


def _vision_params(raw: dict[str, Any], text: dict[str, Any]) -> tuple[int, int] | None:
    vision = raw.get("vision_config")
    if not isinstance(vision, dict):
        return None
    if str(raw.get("model_type")) == "llama4":
        return _llama4_vision(vision, text)
    if str(raw.get("model_type")) == "mistral3" and vision.get("model_type") == "pixtral":
        return _pixtral_vision(raw, vision, text)
    if str(raw.get("model_type")) in ("llava", "llava_next"):
        return _llava_vision(raw, vision, text)
    if str(raw.get("model_type")) in QWEN_VL:
        return _qwen_vl_vision(str(raw.get("model_type")), vision)
    if str(raw.get("model_type")) == "gemma4":
        return _gemma4_towers(raw, vision, text)
    if str(raw.get("model_type")) == "gemma3n":
        return _gemma3n_towers(raw, vision, text)
    if str(raw.get("model_type")) != "gemma3":
        return None
    if vision.get("model_type", "siglip_vision_model") != "siglip_vision_model" or vision.get("vision_use_head"):
        return None
    h, inter, layers = (
        int(vision["hidden_size"]),
        int(vision["intermediate_size"]),
        int(vision["num_hidden_layers"]),
    )
    patch, image = int(vision["patch_size"]), int(vision["image_size"])
    text_hidden = int(text["hidden_size"])
    channels = int(vision.get("num_channels", 3))
    # NOTE: vllm/model_executor/models/siglip.py: QKVParallelLinear (3h x h + 3h bias) and fc1
    # (ColumnParallel, I x h + I) split their rows over tp, out_proj and fc2 (RowParallel) their
    # columns, keeping their h biases whole; two LayerNorms (4h) per layer; the patch Conv2d and
    # post_layernorm replicated; the position table a VocabParallelEmbedding (split).
    # gemma3_mm.py Gemma3MultiModalProjector: mm_input_projection_weight [h, text hidden] and an
    # RMSNorm of h, replicated.
    positions = (image // patch) ** 2
    split = layers * (4 * h * h + 3 * h + 2 * h * inter + inter) + positions * h
    replicated = layers * 6 * h + channels * patch * patch * h + h + 2 * h + h * text_hidden + h
    return split, replicated


def _llama4_vision(vision: dict[str, Any], text: dict[str, Any]) -> tuple[int, int] | None:
    """Llama 4's vision model, pixel-shuffle adapter and projector (vllm/model_executor/models/mllama4.py)."""
    h, inter, layers = (
        int(vision["hidden_size"]),
        int(vision["intermediate_size"]),
        int(vision["num_hidden_layers"]),
    )
    patch, image, channels = int(vision["patch_size"]), int(vision["image_size"]), int(vision["num_channels"])
    proj_in, proj_out = int(vision["projector_input_dim"]), int(vision["projector_output_dim"])
    out_dim, text_hidden = int(vision["vision_output_dim"]), int(text["hidden_size"])
    bias = bool(vision.get("multi_modal_projector_bias"))
    # NOTE: per encoder layer QKVParallelLinear (3h x h + 3h bias), RowParallelLinear o_proj (h x h,
    # its h bias whole), Llama4VisionMLP fc1 (ColumnParallel, I x h + I) and fc2 (RowParallel, h x I, h
    # bias whole), two LayerNorms (4h); the unfold "convolution" a ColumnParallelLinear (C p^2 -> h, no
    # bias); class and position embeddings and two LayerNorms replicated; the pixel-shuffle adapter a
    # Llama4VisionMLP (intermediate_size -> projector_input_dim -> projector_output_dim) and the
    # projector's linear_1 a ColumnParallelLinear (vision_output_dim -> text hidden, no bias).
    split = layers * (4 * h * h + 3 * h + 2 * h * inter + inter) + channels * patch * patch * h
    split += inter * proj_in + proj_in * proj_out + (proj_in if bias else 0) + out_dim * text_hidden
    replicated = layers * 6 * h + h + ((image // patch) ** 2 + 1) * h + 4 * h + (proj_out if bias else 0)
    return split, replicated


def _pixtral_vision(raw: dict[str, Any], vision: dict[str, Any], text: dict[str, Any]) -> tuple[int, int] | None:
    """Mistral 3's Pixtral tower and projector (vllm/model_executor/models/pixtral.py, mistral3.py)."""
    h, inter, layers = (
        int(vision["hidden_size"]),
        int(vision["intermediate_size"]),
        int(vision["num_hidden_layers"]),
    )
    patch, channels = int(vision["patch_size"]), int(vision.get("num_channels", 3))
    merge, text_hidden = int(raw.get("spatial_merge_size", 1)), int(text["hidden_size"])
    layers = _loaded_layers(raw.get("vision_feature_layer", -1), layers)
    bias = bool(raw.get("multimodal_projector_bias"))
    # NOTE: PixtralHFTransformerBlock: QKVParallelLinear and RowParallelLinear o_proj without bias
    # (4h^2), a gated MLP (MergedColumnParallel gate_up, RowParallel down: 3hI), two RMSNorms (2h,
    # replicated); patch_conv (no bias) and ln_pre replicated. Mistral3MultiModalProjector: RMSNorm
    # and the patch merger's nn.Linear (h merge^2 -> h) replicated, linear_1 (ColumnParallel, h ->
    # text hidden) and linear_2 (RowParallel, text hidden -> text hidden) split.
    split = layers * (4 * h * h + 3 * h * inter) + h * text_hidden + text_hidden * text_hidden
    split += text_hidden if bias else 0
    replicated = layers * 2 * h + channels * patch * patch * h + h + h + h * merge * merge * h
    replicated += text_hidden if bias else 0
    return split, replicated


def _loaded_layers(feature_layer: Any, layers: int) -> int:
    """Encoder layers vLLM builds: up to the deepest vision_feature_layer (llava.py _get_num_hidden_layers)."""
    wanted = feature_layer if isinstance(feature_layer, list) else [feature_layer]
    return max(layers + int(i) + 1 if int(i) < 0 else int(i) for i in wanted)


def _llava_vision(raw: dict[str, Any], vision: dict[str, Any], text: dict[str, Any]) -> tuple[int, int] | None:
    """LLaVA / LLaVA-NeXT with a CLIP or SigLIP tower (vllm/model_executor/models/llava.py, clip.py, siglip.py)."""
    kind = vision.get("model_type")
    if kind not in ("clip_vision_model", "siglip_vision_model"):
        return None
    h, inter = int(vision["hidden_size"]), int(vision["intermediate_size"])
    patch, image = int(vision["patch_size"]), int(vision["image_size"])
    channels, text_hidden = int(vision.get("num_channels", 3)), int(text["hidden_size"])
    feature = raw.get("vision_feature_layer", -2)
    layers = _loaded_layers(feature, int(vision["num_hidden_layers"]))
    n_features = len(feature) if isinstance(feature, list) else 1
    bias = raw.get("multimodal_projector_bias", True) is not False
    positions = (image // patch) ** 2
    # NOTE: init_vision_tower_for_llava builds the encoder up to the deepest feature layer without the
    # post-LayerNorm (require_post_norm=False). Per layer QKVParallelLinear (3h x h + 3h bias) and fc1
    # (ColumnParallel, I x h + I) split, out_proj and fc2 (RowParallel) split with their h biases whole,
    # two LayerNorms (4h). CLIP: class embedding, patch Conv2d (no bias), a (positions + 1) x h table and
    # pre_layrnorm, replicated. SigLIP: patch Conv2d with bias, replicated; the position table a
    # VocabParallelEmbedding (split); the attention-pooling head unless vision_use_head is false.
    # LlavaMultiModalProjector: linear_1 (ColumnParallel, h x feature layers -> text hidden) and
    # linear_2 (RowParallel), with biases unless multimodal_projector_bias is false; LLaVA-NeXT adds an
    # image_newline vector.
    split = layers * (4 * h * h + 3 * h + 2 * h * inter + inter)
    replicated = layers * 6 * h + channels * patch * patch * h
    if kind == "clip_vision_model":
        replicated += h + (positions + 1) * h + 2 * h
    else:
        replicated += h
        split += positions * h
        if vision.get("vision_use_head", True):
            # SiglipMultiheadAttentionPoolingHead: probe, nn.MultiheadAttention, LayerNorm, MLP (replicated)
            replicated += h + 4 * h * h + 4 * h + 2 * h + 2 * h * inter + inter + h
    split += n_features * h * text_hidden + text_hidden * text_hidden + (text_hidden if bias else 0)
    replicated += (text_hidden if bias else 0) + (text_hidden if raw.get("model_type") == "llava_next" else 0)
    return split, replicated


# Qwen's vision transformers: Qwen2-VL (LayerNorm, GELU MLP of mlp_ratio x embed_dim), Qwen2.5-VL (RMSNorm, gated
# MLP of intermediate_size), Qwen3-VL and Qwen3.5 (LayerNorm, GELU MLP, a learned position table, a biased patch
# Conv3d, deepstack mergers), each ending in a merger of spatial_merge_size^2 patches into the text width.
QWEN_VL = {"qwen2_vl": 2, "qwen2_5_vl": 25, "qwen3_vl": 3, "qwen3_vl_moe": 3, "qwen3_5": 3, "qwen3_5_moe": 3}


def _qwen_vl_vision(kind: str, vision: dict[str, Any]) -> tuple[int, int] | None:
    """(split, replicated) as vLLM's qwen2_vl.py / qwen2_5_vl.py / qwen3_vl.py build them: qkv and the MLP's first
    matrices column-parallel (their biases split too), proj and the last matrices row-parallel (biases whole);
    norms, the patch Conv3d and the position table whole. Published totals it reproduces: Qwen2-VL-2B 665,271,296,
    Qwen2.5-VL-7B 676,550,144, Qwen3-VL-8B 576,388,336 vision parameters (the hub totals less the text model)."""
    gen = QWEN_VL[kind]
    depth, merge = int(vision["depth"]), int(vision.get("spatial_merge_size", 2))
    patch, frames = int(vision["patch_size"]), int(vision.get("temporal_patch_size", 2))
    channels = int(vision.get("in_chans", vision.get("in_channels", 3)))
    if gen == 2:
        d, out = int(vision["embed_dim"]), int(vision["hidden_size"])
        inter = int(vision.get("mlp_ratio", 4) * d)
    else:
        d, inter, out = int(vision["hidden_size"]), int(vision["intermediate_size"]), int(vision["out_hidden_size"])
    norm = 2 * d if gen != 25 else d  # LayerNorm weight and bias; Qwen2.5-VL's RMSNorm a weight
    up = 2 * inter if gen == 25 else inter  # Qwen2.5-VL: gate_up_proj
    split = depth * (3 * d * d + 3 * d + d * d + up * d + up + inter * d)
    replicated = depth * (2 * norm + d + d) + channels * frames * patch * patch * d
    wide = d * merge * merge
    mergers = 1 + (len(vision.get("deepstack_visual_indexes") or []) if gen == 3 else 0)
    split += mergers * (wide * wide + wide + wide * out)
    replicated += mergers * out + norm + (mergers - 1) * 2 * wide  # ln_q (deepstack mergers' norm is the wide one)
    if gen == 3:
        replicated += d + int(vision.get("num_position_embeddings", 0)) * d  # the Conv3d's bias, pos_embed
    return split, replicated


# transformers 5.25's Gemma4VisionConfig / Gemma4AudioConfig defaults, for the keys a file leaves out
GEMMA4_VISION = {
    "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 16, "num_attention_heads": 12,
    "num_key_value_heads": 12, "head_dim": 64, "patch_size": 16, "position_embedding_size": 10240, "standardize": False,
}  # fmt: skip
GEMMA4_AUDIO = {
    "hidden_size": 1024, "num_hidden_layers": 12, "num_attention_heads": 8, "subsampling_conv_channels": [128, 32],
    "conv_kernel_size": 5, "output_proj_dims": 1536,
}  # fmt: skip


def _gemma4_towers(raw: dict[str, Any], vision: dict[str, Any], text: dict[str, Any]) -> tuple[int, int] | None:
    """Gemma 4's vision tower and, where the config has an audio_config, its audio tower, each with its projector into
    the text width (vLLM gemma4_mm.py): transformers' own modules (AutoModel.from_config), whole on every rank, then
    Gemma4MultimodalEmbedder's ReplicatedLinear embedding_projection (its norm has no weight)."""
    v = {**GEMMA4_VISION, **{k: x for k, x in vision.items() if x is not None}}
    text_hidden = int(text["hidden_size"])
    h, inter, layers = int(v["hidden_size"]), int(v["intermediate_size"]), int(v["num_hidden_layers"])
    heads, kv, d = int(v["num_attention_heads"]), int(v["num_key_value_heads"]), int(v["head_dim"])
    patch, positions = int(v["patch_size"]), int(v["position_embedding_size"])
    # NOTE: transformers Gemma4VisionEncoderLayer: q / o over heads x head_dim, k / v over KV heads, a gated MLP, four
    # RMS norms and the q / k norms (v_norm has no scale); Gemma4VisionPatchEmbedder: a 3 x patch^2 -> hidden
    # projection and a two-axis position table; std_bias / std_scale buffers where it standardizes. The clipped
    # linears' four scalar bounds are not counted.
    layer = 2 * h * heads * d + 2 * h * kv * d + 3 * h * inter + 4 * h + 2 * d
    tower = layers * layer + 3 * patch * patch * h + 2 * positions * h + (2 * h if v["standardize"] else 0)
    total = tower + h * text_hidden
    audio = raw.get("audio_config")
    if isinstance(audio, dict):
        heard = _gemma4_audio({**GEMMA4_AUDIO, **{k: x for k, x in audio.items() if x is not None}}, text_hidden)
        if heard is None:
            return None
        total += heard
    return 0, total


def _gemma4_audio(a: dict[str, Any], text_hidden: int) -> int | None:
    """Gemma 4's audio tower (transformers Gemma4AudioModel) and its projector: two conv sub-sampling layers into the
    hidden width; per Conformer layer two feed-forwards 4 x hidden wide with their norms, the light conv (its start
    projection to 2 x hidden, a depthwise kernel, its end projection and two norms), three layer norms, attention q /
    k / v / post and relative_k_proj, hidden x hidden each, and a per-dim scale; output_proj (with a bias) to
    output_proj_dims, then embed_audio's projection from there to the text width."""
    h, layers, heads = int(a["hidden_size"]), int(a["num_hidden_layers"]), int(a["num_attention_heads"])
    c0, c1 = (int(c) for c in a["subsampling_conv_channels"])
    k, out = int(a["conv_kernel_size"]), int(a["output_proj_dims"])
    subsample = 9 * c0 + c0 + 9 * c0 * c1 + c1 + (c0 // 4) * c1 * h
    return layers * _conformer_layer(h, k, heads) + subsample + out * h + out + out * text_hidden


def _conformer_layer(h: int, kernel: int, heads: int) -> int:
    """One Gemma 3n / 4 audio Conformer layer: two feed-forwards 4 x h wide with pre and post norms; attention q, k,
    v, the relative-position projection and the output, h x h each, and a per-dim scale (h / heads); the light conv's
    start projection (to 2 h), depthwise kernel, end projection and two norms; three more norms."""
    return 24 * h * h + (kernel + 9) * h + h // heads


# Encoders timm builds by name for transformers' TimmWrapperModel (no classifier head), in parameters: counted from
# timm 1.0.31 (the same as transformers 5.25's Gemma3nVisionConfig default builds)
TIMM_ENCODERS = {"mobilenetv5_300m_enc": 294_126_912}
# transformers 5.25's Gemma3nAudioConfig defaults, for the keys a file leaves out
GEMMA3N_AUDIO = {
    "hidden_size": 1536, "conf_num_hidden_layers": 12, "conf_num_attention_heads": 8, "conf_conv_kernel_size": 5,
    "input_feat_size": 128, "sscp_conv_channel_size": [128, 32], "sscp_conv_kernel_size": [[3, 3], [3, 3]],
    "sscp_conv_stride_size": [[2, 2], [2, 2]], "vocab_size": 128,
}  # fmt: skip


def _gemma3n_towers(raw: dict[str, Any], vision: dict[str, Any], text: dict[str, Any]) -> tuple[int, int] | None:
    """Gemma 3n's timm vision encoder and its audio encoder (AutoModel.from_config, whole on every rank), each with a
    Gemma3nMultimodalEmbedder (vLLM gemma3n_mm.py): a VocabParallelEmbedding of its 128 hard tokens and a
    RowParallelLinear projection to the text width (split over tp), the hard and soft token norms (whole)."""
    tower = TIMM_ENCODERS.get(str(vision.get("architecture", "mobilenetv5_300m_enc")))
    audio = raw.get("audio_config")
    if tower is None or vision.get("model_args") or not isinstance(audio, dict):
        return None
    a = {**GEMMA3N_AUDIO, **{k: x for k, x in audio.items() if x is not None}}
    text_hidden, v_hidden = int(text["hidden_size"]), int(vision.get("hidden_size", 2048))
    h, layers, heads = int(a["hidden_size"]), int(a["conf_num_hidden_layers"]), int(a["conf_num_attention_heads"])
    channels = [int(c) for c in a["sscp_conv_channel_size"]]
    kernels = [(int(kh), int(kw)) for kh, kw in a["sscp_conv_kernel_size"]]
    strides = [int(sw) for _, sw in a["sscp_conv_stride_size"]]
    freq = int(a["input_feat_size"])
    tokens = (int(vision.get("vocab_size", 128)), int(a["vocab_size"]))
    # the sub-sampling convs (one input channel, then each block's; a norm of their channels) pad the frequency axis
    # by one each side, then the projection from the last block's channels x frequencies to h
    subsample, before = 0, 1
    for c, (kh, kw), sw in zip(channels, kernels, strides):
        subsample += c * before * kh * kw + c
        before, freq = c, (freq + 2 - kw) // sw + 1
    heard = layers * _conformer_layer(h, int(a["conf_conv_kernel_size"]), heads) + subsample + before * freq * h
    split = tokens[0] * v_hidden + v_hidden * text_hidden + tokens[1] * h + h * text_hidden
    return split, tower + heard + 2 * v_hidden + 2 * h


LLAMA4_MAX_TILES = 16  # Llama4ImageProcessor's max_patches (preprocessor_config.json, not config.json)


def image_profile(raw: dict[str, Any]) -> tuple[int, int] | None:
    """The profiling run's dummy image (_image_profile), None where its tower config cannot be read."""
    try:
        return _image_profile(raw)
    except UNREADABLE:
        return None


def _image_profile(raw: dict[str, Any]) -> tuple[int, int] | None:
    """The profiling run's dummy image: (placeholder tokens, pixel values), where known.

    Gemma 3: mm_tokens_per_image embeddings from an image_size^2 picture (no pan-and-scan). Mistral 3
    (Pixtral): an image_size^2 picture in patch_size patches merged spatial_merge_size^2 to one, n x n
    tokens plus one [IMG_BREAK] / [IMG_END] per row (vllm/model_executor/models/mistral3.py). Llama 4: a
    16:1 picture (mllama4.py get_image_size_with_most_features: Llama4ImageProcessor's max_patches, 16, tiles
    in a row) and its global tile, 17 tiles of image_size^2, each (image_size / patch_size)^2 patches pixel-
    shuffled pixel_shuffle_ratio^2 to one (vLLM 0.19 logs "profiled with 3 image items" in 8,192 tokens)."""
    vision = raw.get("vision_config")
    kind = str(raw.get("model_type"))
    if kind not in ("gemma3", "mistral3", "llama4") or not isinstance(vision, dict):
        return None
    size, channels = int(vision["image_size"]), int(vision.get("num_channels", 3))
    if kind == "llama4":
        per_tile = (size // int(vision["patch_size"])) ** 2 // round(1 / float(vision["pixel_shuffle_ratio"]) ** 2)
        tiles = LLAMA4_MAX_TILES + 1
        return tiles * per_tile, tiles * channels * size * size
    if kind == "gemma3":
        tokens = int(raw.get("mm_tokens_per_image", 256))
    else:
        side = size // int(vision["patch_size"]) // int(raw.get("spatial_merge_size", 1))
        tokens = side * side + side
    return tokens, channels * size * size
