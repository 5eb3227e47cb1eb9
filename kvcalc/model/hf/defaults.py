"""Class defaults (transformers' *Config.__init__) for fields that real configs omit, by model_type."""

from __future__ import annotations

from typing import Any

# Published class defaults (transformers' *Config.__init__) for fields that real configs
# omit. NOTE: Gemma 3's text_config often lists no head counts; its class defaults supply them.
TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {
        "vocab_size": 262208,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
        "tie_word_embeddings": True,
        # NOTE: Gemma3TextConfig's defaults; vLLM's gemma3.py builds the global layers' rotary cache from
        # max_position_embeddings (x 8 under Gemma 3's linear scaling) and the sliding layers' own from
        # rope_local_base_freq, whether or not a sparse text_config (gemma-3-4b-it) lists them.
        "max_position_embeddings": 131072,
        "rope_local_base_freq": 10000.0,
    },
    # Gemma4TextConfig (transformers 5.25): its full-attention layers take global_head_dim (default 512) and,
    # with attention_k_eq_v, num_global_key_value_heads; per-layer input embeddings are on by default.
    "gemma4_text": {
        "vocab_size": 262144,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 30,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "global_head_dim": 512,
        "sliding_window": 512,
        "tie_word_embeddings": True,
        "max_position_embeddings": 131072,
        "hidden_size_per_layer_input": 256,
        "vocab_size_per_layer_input": 262144,
    },
    # Gemma3nTextConfig (transformers 5.25): without layer_types every 5th layer is full attention; the last
    # num_kv_shared_layers layers reuse earlier K and V (reader._kv_shared_tail).
    "gemma3n_text": {
        "vocab_size": 262400,
        "hidden_size": 2048,
        "intermediate_size": 16384,
        "num_hidden_layers": 35,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "sliding_window": 512,
        "num_kv_shared_layers": 15,
        "tie_word_embeddings": True,
        "max_position_embeddings": 32768,
        "hidden_size_per_layer_input": 256,
        "vocab_size_per_layer_input": 262144,
        "altup_num_inputs": 4,
        "laurel_rank": 64,
    },
    # vLLM 0.19's FlashConfig (models/longcat_flash.py): LongCat-Flash's MLA ranks
    "longcat_flash": {
        "num_layers": 28,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "vocab_size": 131072,
    },
    # vLLM 0.19's Step3TextConfig (transformers_utils/configs/step3_vl.py): Step 3's text model
    "step3_text": {
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "num_attention_heads": 64,
        "num_attention_groups": 1,
        "num_hidden_layers": 61,
        "vocab_size": 128815,
        "head_dim": 256,
        "max_position_embedding": 65536,
        "moe_intermediate_size": 5120,
        "moe_num_experts": 48,
        "moe_top_k": 3,
        "share_expert_dim": 5120,
        "share_q_dim": 2048,
    },
    "gemma2": {"head_dim": 256, "sliding_window": 4096, "tie_word_embeddings": True},
    "gemma": {"head_dim": 256, "tie_word_embeddings": True},
    "llama": {"tie_word_embeddings": False},
    "mistral": {"tie_word_embeddings": False, "sliding_window": 4096},
    "mixtral": {"tie_word_embeddings": False},
    # Qwen2Config / Qwen3Config: with use_sliding_window, layers from max_window_layers (28) on slide;
    # Qwen3Config's head_dim is 128, not hidden_size / heads (Qwen3-4B: 2560 / 32 = 80).
    "qwen2": {"tie_word_embeddings": False, "max_window_layers": 28},
    "qwen3": {"tie_word_embeddings": False, "max_window_layers": 28, "head_dim": 128},
    # Qwen3VLTextConfig (a Qwen3-VL config's text_config) has Qwen3's head_dim of 128 too.
    "qwen3_vl_text": {"head_dim": 128},
    "qwen2_moe": {"tie_word_embeddings": False},
    "qwen3_moe": {"tie_word_embeddings": False},
    # Qwen3NextConfig / Qwen3_5TextConfig: without layer_types, every 4th layer is full attention.
    "qwen3_next": {"tie_word_embeddings": False, "full_attention_interval": 4},
    "qwen3_5_text": {"full_attention_interval": 4},
    "qwen3_5_moe_text": {"full_attention_interval": 4},
    "phi3": {"tie_word_embeddings": False},
    "starcoder2": {"tie_word_embeddings": True},
    "gpt_oss": {"tie_word_embeddings": False},
    "deepseek_v2": {"tie_word_embeddings": False},
    "deepseek_v3": {"tie_word_embeddings": False},
    "glm4_moe": {"tie_word_embeddings": False},
    "cohere": {"tie_word_embeddings": True},
    # Llama4TextConfig: chunks of 8,192 unless the config says otherwise (null: no chunking).
    "llama4_text": {"tie_word_embeddings": False, "no_rope_layer_interval": 4, "attention_chunk_size": 8192},
    "mllama_text_model": {"tie_word_embeddings": False},
    "nemotron_h": {"tie_word_embeddings": False},
    "chatglm": {"tie_word_embeddings": False},
    # FalconConfig's max_position_embeddings (2,048): Falcon-7B / 40B's config.json has none, and the engines'
    # getattr finds the class default
    "falcon": {"max_position_embeddings": 2048},
    "qwen": {"tie_word_embeddings": False},
    # Exaone4Config (transformers 5.25): sliding_window 4096 and, without layer_types, every 4th layer full
    # attention (sliding_window_pattern 4, or spelled out as "LLLG").
    "exaone4": {"sliding_window": 4096, "sliding_window_pattern": 4},
    # Cohere2Config: sliding_window 4096; without layer_types every 4th layer is full attention.
    "cohere2": {"tie_word_embeddings": True, "sliding_window": 4096, "sliding_window_pattern": 4},
    # GraniteMoeHybridConfig.__init__ defaults (granite-4.0-h).
    "granitemoehybrid": {
        "tie_word_embeddings": False,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "shared_intermediate_size": 1024,
        "mamba_n_heads": 128,
        "mamba_n_groups": 1,
        "mamba_d_state": 256,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
    },
    "lfm2": {"tie_word_embeddings": True, "conv_L_cache": 3},
    # Lfm3Config (transformers 5.25): its defaults, for the keys a file leaves out
    "lfm3": {
        "vocab_size": 128000,
        "hidden_size": 2048,
        "intermediate_size": 7680,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "max_position_embeddings": 128000,
        "conv_L_cache": 7,
        "sliding_window": 256,
        "tie_word_embeddings": True,
    },  # fmt: skip
    # Lfm2MoeConfig (transformers 5): LFM2-8B-A1B's shape; its dense layers' MLP is intermediate_size wide
    "lfm2_moe": {
        "tie_word_embeddings": True,
        "conv_L_cache": 3,
        "num_dense_layers": 2,
        "num_experts": 32,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 1792,
        "intermediate_size": 7168,
    },
    # BambaConfig.__init__ defaults.
    "bamba": {
        "tie_word_embeddings": False,
        "mamba_n_heads": 128,
        "mamba_n_groups": 1,
        "mamba_d_state": 256,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
    },
    "hunyuan_v1_moe": {"tie_word_embeddings": False},
    # AfmoeConfig.__init__ defaults (Arcee Trinity): every 4th layer global, the rest slide.
    "afmoe": {
        "tie_word_embeddings": False,
        "head_dim": 128,
        "num_dense_layers": 1,
        "num_experts": 64,
        "num_experts_per_tok": 6,
        "num_shared_experts": 2,
        "moe_intermediate_size": 1408,
        "global_attn_every_n_layers": 4,
        "sliding_window": 1024,
    },
    # JambaConfig.__init__ defaults: attention at i % 8 == 4, experts at i % 2 == 1.
    "jamba": {
        "tie_word_embeddings": False,
        "num_key_value_heads": 8,
        "attn_layer_period": 8,
        "attn_layer_offset": 4,
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
        "num_experts": 16,
        "num_experts_per_tok": 2,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
    },
    # MambaConfig / FalconMambaConfig and Mamba2Config (Mamba-Codestral-7B's shape): read by model/hf/ssm.py
    "mamba": {"vocab_size": 50280, "hidden_size": 768, "num_hidden_layers": 32, "state_size": 16, "expand": 2},
    "falcon_mamba": {"vocab_size": 50280, "hidden_size": 768, "num_hidden_layers": 32, "state_size": 16, "expand": 2},
    "mamba2": {
        "vocab_size": 32768,
        "hidden_size": 4096,
        "num_hidden_layers": 64,
        "num_heads": 128,
        "head_dim": 64,
        "state_size": 128,
        "n_groups": 8,
        "expand": 2,
        "tie_word_embeddings": False,
    },
}
# Gemma4UnifiedTextConfig (transformers 5.25): Gemma 4's text layers (Gemma4UnifiedTextAttention and MLP are
# Gemma4Text's) without per-layer input embeddings or a MoE block, a 1,024-token window and 262,144 positions by
# default; read as gemma4_text (families.SAME_TEXT_MODEL)
TYPE_DEFAULTS["gemma4_unified_text"] = {
    **{k: v for k, v in TYPE_DEFAULTS["gemma4_text"].items() if not k.endswith("_per_layer_input")},
    "sliding_window": 1024,
    "max_position_embeddings": 262144,
}
