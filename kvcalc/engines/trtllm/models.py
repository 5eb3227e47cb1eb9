"""The model classes TensorRT-LLM's PyTorch backend (trtllm-serve, the LLM API) can load, and its refusal of others.

tensorrt_llm/_torch/models: each modeling_*.py registers the config.json architecture names it serves
(`@register_auto_model("LlamaForCausalLM")`); `_arch_index.py` tabulates them (a test there fails on any drift
from the decorators). AutoModelForCausalLM.from_config raises `ValueError: Unknown architecture for
AutoModelForCausalLM: <architectures[0]>` for a name it does not hold, with no automatic fallback: the
AutoDeploy backend (`--backend _autodeploy`) or a custom module directory is opt-in, and a TensorRT engine build
(trtllm-build) is another path altogether. The names below are the table's on TensorRT-LLM main in August
2026 (after 1.2; read from the stored source, not a tagged release); 1.0 registered fewer (its "Supported
Models" page lists 17), so a model read as served here may need a recent release.
"""

from __future__ import annotations

from kvcalc.model.spec import ModelSpec

REGISTERED = frozenset(
    {
        "AfmoeForCausalLM", "BartForConditionalGeneration", "BertForSequenceClassification", "CLIPVisionModel",
        "Cohere2ForCausalLM", "Cosmos3ForConditionalGeneration", "DeciLMForCausalLM", "DeepseekV32ForCausalLM",
        "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM", "EAGLE3LlamaForCausalLM", "Eagle3DeepSeekV3ForCausalLM",
        "Exaone4ForCausalLM", "Exaone4_5_ForConditionalGeneration", "ExaoneMoeForCausalLM", "ExaoneMoEForCausalLM",
        "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration", "Gemma4AssistantForCausalLM", "Gemma4ForCausalLM",
        "Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration", "Glm4MoeForCausalLM",
        "GlmMoeDsaForCausalLM", "GptOssForCausalLM", "HCXVisionForCausalLM", "HCXVisionModel",
        "HunYuanDenseV1ForCausalLM", "HunYuanMoEV1ForCausalLM", "KimiK25ForConditionalGeneration",
        "KimiK3ForConditionalGeneration", "KimiLinearForCausalLM", "LagunaForCausalLM",
        "Llama4ForConditionalGeneration", "LlamaForCausalLM", "LlavaLlamaModel", "LlavaNextForConditionalGeneration",
        "MBartForConditionalGeneration", "MTPDraftModelForCausalLM", "MiniCPMV4_6ForConditionalGeneration",
        "MiniMaxM2ForCausalLM", "MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration",
        "Mistral3ForConditionalGeneration", "MistralForCausalLM", "MistralLarge3EagleForCausalLM",
        "MistralLarge3ForCausalLM", "MixtralForCausalLM", "MllamaForConditionalGeneration", "NemotronForCausalLM",
        "NemotronHForCausalLM", "NemotronHPuzzleForCausalLM", "NemotronH_Nano_Omni_Reasoning_V3",
        "NemotronH_Nano_VL_V2", "NemotronH_Omni_Reasoning_V3", "Phi3ForCausalLM", "Phi4MMForCausalLM",
        "PixtralForConditionalGeneration", "PixtralVisionModel", "Qwen2ForCausalLM", "Qwen2ForProcessRewardModel",
        "Qwen2ForRewardModel", "Qwen2MoeForCausalLM", "Qwen2VLForConditionalGeneration",
        "Qwen2_5_VLForConditionalGeneration", "Qwen3ForCausalLM", "Qwen3ForTextEmbedding", "Qwen3MoeForCausalLM",
        "Qwen3NextForCausalLM", "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
        "Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForCausalLM",
        "Qwen3_5MoeForConditionalGeneration", "Qwen4ExpForCausalLM", "Qwen4ExpForConditionalGeneration",
        "QwenImageBenchForConditionalGeneration", "SeedOssForCausalLM", "SiglipVisionModel",
        "Starcoder2ForCausalLM", "Step3p5ForCausalLM", "Step3p7ForConditionalGeneration",
        "T5ForConditionalGeneration", "WhisperForConditionalGeneration",
    }
)  # fmt: skip


def architecture_refusal(spec: ModelSpec) -> str | None:
    """TensorRT-LLM's refusal of a config.json architecture its PyTorch backend registers no class for, in its
    words; None where it does, or where the spec names none (a GGUF file, a hand-written preset)."""
    arch = spec.architecture
    if spec.has_sparse_layers and arch in REGISTERED:
        return f"{arch}: kvcalc does not model TensorRT-LLM's MiniMax-M3 sparse-attention cache"
    if spec.compressed_attention:
        return f"{arch}: kvcalc does not model TensorRT-LLM's DeepSeek-V4 caches (compressed, window and index)"
    if not arch or arch in REGISTERED:
        return None
    return (
        f"ValueError: Unknown architecture for AutoModelForCausalLM: {arch}; no class in tensorrt_llm/_torch/models "
        "registers it, though --backend _autodeploy, a custom module or a TensorRT engine build may serve it"
    )
