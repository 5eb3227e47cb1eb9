"""MiniMax-M3 (model_type minimax_m3): GQA layers with block-sparse attention and an index cache of their own.

SGLang 0.5.23 models/minimax_m3.py and mem_cache/memory_pool.py (MiniMaxSparseKVPool): every layer caches K and V
(4 KV heads of 128); a layer that sparse_attention_config.sparse_attention_freq marks (layers 3-59 of 60) also caches
one index key a token (sparse_index_dim wide; SGLang's index_k_pool, K only while sparse_disable_index_value is 1),
scores every cached token with sparse_num_index_heads index heads (the block's score the max of its tokens') and
attends the top sparse_topk_blocks blocks of sparse_block_size tokens, the local block among them. Its indexer is
index_qkv_proj (hidden -> index heads and one key) with q and k norms. The dense MLPs (the first layers) are
dense_intermediate_size wide; the experts and the shared expert intermediate_size (moe_intermediate_size is the
same in the published config).
"""

from __future__ import annotations

from typing import Any

from kvcalc.model.hf.fields import Config
from kvcalc.model.spec import LayerKind, LayerRun

MODEL_TYPE = "minimax_m3"
# sparse_attention_config's fields that shape the cache or the indexer
SHAPE = ("sparse_num_index_heads", "sparse_index_dim", "sparse_topk_blocks", "sparse_block_size")


def _config(cfg: Config) -> dict[str, Any] | None:
    """sparse_attention_config, checked; None where it is off (use_sparse_attention false or absent)."""
    sac = cfg.get("sparse_attention_config")
    if sac is None:
        return None
    if not isinstance(sac, dict):
        raise cfg.refuse("sparse_attention_config must be an object")
    if not sac.get("use_sparse_attention", False):
        return None
    if not all(isinstance(sac.get(k), int) and not isinstance(sac.get(k), bool) and sac[k] > 0 for k in SHAPE):
        raise cfg.refuse("sparse_attention_config needs positive integers " + ", ".join(SHAPE))
    return sac


def sparse_layers(cfg: Config, layers: int) -> list[LayerRun]:
    """One run a layer: full attention, sparse where sparse_attention_freq says 1; [] without sparse attention."""
    sac = _config(cfg)
    if sac is None:
        return []
    freq = sac.get("sparse_attention_freq")
    if not isinstance(freq, list) or len(freq) != layers or not set(freq) <= {0, 1}:
        raise cfg.refuse(
            f"sparse_attention_config.sparse_attention_freq must give 0 or 1 for each of the {layers} layers"
        )
    no_value = sac.get("sparse_disable_index_value", [1] * layers)
    if not isinstance(no_value, list) or len(no_value) != layers:
        raise cfg.refuse(f"sparse_attention_config.sparse_disable_index_value must give a value for each of {layers}")
    if any(f and not v for f, v in zip(freq, no_value, strict=True)):
        # SGLang then caches an index value too (index_kv_pool) and adds index_o_proj's output to the layer's
        raise cfg.refuse(
            "sparse_attention_config.sparse_disable_index_value 0 (an index value and index_o_proj) is not read",
            hint="its cache is not estimated, rather than guessed",
        )
    return [LayerRun(kind=LayerKind.FULL, sparse=bool(f)) for f in freq]


def index_fields(cfg: Config) -> dict[str, int]:
    """The indexer's ModelSpec fields: its heads and width, and the tokens a sparse layer attends (top blocks x
    block size); {} without sparse attention."""
    sac = _config(cfg)
    if sac is None:
        return {}
    return {
        "index_heads": sac["sparse_num_index_heads"],
        "index_head_dim": sac["sparse_index_dim"],
        "index_topk": sac["sparse_topk_blocks"] * sac["sparse_block_size"],
    }
