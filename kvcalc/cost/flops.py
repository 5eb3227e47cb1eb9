"""FLOPs of attention and the model's matmuls per step: which keys each layer attends, prefill pairs, the LM head.

Pure; shared by the step model (step.py) and the roofline (roofline.py).
"""

from fractions import Fraction

from kvcalc.cost.kvcache import attended_tokens, index_tokens_held, tokens_held
from kvcalc.cost.params import compute_params
from kvcalc.model.spec import LayerKind, LayerRun, ModelSpec


def _qk_v_dims(spec: ModelSpec, absorbed: bool = False, run: LayerRun | None = None) -> tuple[int, int]:
    """Per-head width of the QK^T product and of the attention x V product (in `run`, if its heads are wider)."""
    if spec.compressed_attention:
        # DeepSeek-V4: every head scores and reads the one head_dim-wide entry (K = V), absorbed or not
        return spec.head_dim_effective, spec.head_dim_effective
    if spec.is_mla:
        if absorbed:
            # NOTE: decode with weight absorption (FlashMLA; vLLM's and SGLang's MLA backends) folds W_UK
            # into the query and W_UV into the output, so every head attends over the cached latent
            # itself: QK over kv_lora_rank + rope (576 for DeepSeek-V3), V over kv_lora_rank (512). The
            # absorbed projections cost what kv_b_proj costs, so the parameter FLOPs do not change.
            return spec.latent_rank + spec.rope_dim, spec.latent_rank
        # Without absorption (prefill) MLA attends with (nope + rope)-wide keys and v_head_dim values.
        qk = (spec.qk_nope_head_dim or 0) + spec.rope_dim
        return qk, spec.v_head_dim or spec.qk_nope_head_dim or qk
    d = spec.run_head_dim(run) if run is not None else spec.head_dim_effective
    return d, spec.run_v_dim(run) if run is not None else spec.v_head_dim or d


def attention_form(spec: ModelSpec, phase: str) -> str:
    """How attention is counted in a phase ("decode" or "prefill"), for --explain."""
    qk, v = _qk_v_dims(spec, absorbed=phase == "decode")
    if not spec.is_mla:
        return f"attention: 2 × {spec.num_heads} heads × ({qk} + {v}) FLOPs per query-key pair"
    if spec.compressed_attention:
        return (
            f"DeepSeek-V4 attention: 2 × {spec.num_heads} heads × ({qk} + {v}) FLOPs per entry read (one {qk}-wide "
            f"entry, K = V): each layer's last {_windows(spec)} raw tokens and its compressed ones (a CSA layer the "
            f"indexer's top {spec.index_topk:,}); the CSA indexer's 2 × {spec.index_heads} heads × "
            f"{spec.index_head_dim} FLOPs on every compressed entry"
        )
    sparse = (
        f"; DeepSeek Sparse Attention: over the indexer's top {spec.index_topk:,} tokens only, and the indexer's "
        f"2 × {spec.index_heads} heads × {spec.index_head_dim} FLOPs on every cached token"
        if spec.index_topk is not None
        else ""
    )
    if phase == "decode":
        return (
            f"MLA decode with weight absorption (as FlashMLA and vLLM run it): 2 × {spec.num_heads} heads × "
            f"({qk} latent + rope + {v} latent) FLOPs per cached token{sparse}"
        )
    return f"MLA prefill without absorption: 2 × {spec.num_heads} heads × ({qk} + {v}) FLOPs per query-key pair{sparse}"


def _windows(spec: ModelSpec) -> str:
    return "/".join(sorted({f"{run.window_tokens:,}" for run, _ in spec.layer_groups() if run.latent_window}))


def decode_keys(run: LayerRun, seq: int) -> Fraction:
    """Keys a new token at context `seq` attends to in one layer.

    A chunked layer (Llama 4) lets query i (from 1) see ((i - 1) mod C) + 1 keys: inside the first
    chunk that is `seq`; past it the position cycles through the chunk, so a step averages (C + 1) / 2.
    """
    if run.kind == LayerKind.CHUNKED and seq > run.window:
        return Fraction(run.window + 1, 2)
    return Fraction(tokens_held(run, seq))


def sparse(spec: ModelSpec, run: LayerRun) -> bool:
    """A layer that attends to the indexer's top-k keys: an MLA layer under DeepSeek Sparse Attention, or a sparse
    self-attention layer (MiniMax-M3's)."""
    if spec.compressed_attention:
        return run.compress_topk  # DeepSeek-V4: its CSA layers alone
    return (run.kind == LayerKind.MLA or run.sparse) and spec.index_topk is not None


def index_flops(spec: ModelSpec) -> int:
    """The lightning indexer's FLOPs per scored key: 2 x index_heads x index_head_dim (DeepSeek-V3.2)."""
    return 2 * (spec.index_heads or 0) * (spec.index_head_dim or 0)


def attended_keys(spec: ModelSpec, run: LayerRun, seq: int) -> Fraction:
    """Cached keys one new token attends to in one layer of `run` (DSA: at most top-k)."""
    if run.latent_window:  # DeepSeek-V4: its window and (the top-k of) its compressed
        return Fraction(attended_tokens(run, seq, spec.index_topk))
    keys = decode_keys(run, seq)
    return min(keys, Fraction(spec.index_topk or seq)) if sparse(spec, run) else keys


def decode_attention_flops(spec: ModelSpec, seq: int) -> int:
    """Attention FLOPs for one new token over `seq` cached tokens: 2·h·(d_qk + d_v) per key, with MLA's
    absorbed widths (kv_lora_rank + rope, kv_lora_rank); DSA's indexer adds its scoring of every key."""
    total, scored = Fraction(0), 0
    for run, n in spec.layer_groups():
        if not run.kind.attends:
            continue
        qk, v = _qk_v_dims(spec, absorbed=True, run=run)
        total += n * 2 * spec.run_heads(run) * (qk + v) * attended_keys(spec, run, seq)
        scored += n * index_tokens_held(run, seq) if sparse(spec, run) and not run.index_shared else 0
    return int(total) + index_flops(spec) * scored


def causal_pairs(prompt: int, window: int | None = None) -> int:
    """Query-key pairs of a causal pass over `prompt` tokens: query i sees min(i, W) keys."""
    if window is None or prompt <= window:
        return prompt * (prompt + 1) // 2
    return window * (window + 1) // 2 + (prompt - window) * window


def chunked_pairs(prompt: int, chunk: int) -> int:
    """Query-key pairs of a chunked causal pass: query i (from 1) sees ((i - 1) mod C) + 1 keys, so each
    whole chunk has C(C + 1)/2 pairs and the last, partial chunk of r tokens r(r + 1)/2 (about P·C/2 in
    all, where a sliding window of C would have about P·C)."""
    whole, rest = divmod(prompt, chunk)
    return whole * chunk * (chunk + 1) // 2 + rest * (rest + 1) // 2


def score_pairs(tokens: int, context: int, ubatch: int) -> int:
    """Query x key pairs a prompt of `tokens` tokens after `context` cached ones writes as scores when
    it goes through in micro-batches of `ubatch`: each micro-batch of q queries scores all the keys
    cached so far and its own (the causal mask is applied to the whole matrix, not skipped), so a
    prompt of T tokens from an empty cache writes T x (T + ubatch) / 2 pairs, not T x T / 2."""
    pairs, done = 0, context
    for start in range(0, tokens, max(1, ubatch)):
        q = min(ubatch, tokens - start)
        done += q
        pairs += q * done
    return pairs


def materialized_scores(
    spec: ModelSpec, attention_layers: int, tokens: int, context: int, ubatch: int, tp: int = 1
) -> int:
    """Scores a prompt writes to memory without flash attention: score_pairs x the attention layers x
    the query heads of a rank."""
    return score_pairs(tokens, context, ubatch) * attention_layers * (spec.num_heads // tp)


def _compressed_sum(prompt: int, ratio: int, cap: int | None = None) -> int:
    """Sum over queries i = 1..prompt of min(i // ratio, cap): the compressed entries each query sees."""
    full = prompt if cap is None else min(prompt, (cap + 1) * ratio - 1)  # past it every query sees `cap`
    q, m = divmod(full + 1, ratio)
    below = ratio * q * (q - 1) // 2 + m * q  # sum of i // ratio for i = 0..full
    return below + (0 if cap is None else cap * (prompt - full))


def compressed_pairs(run: LayerRun, prompt: int, topk: int | None) -> tuple[int, int]:
    """DeepSeek-V4's prompt pass in one layer: (query-entry pairs attended, index keys scored). Query i sees the last
    min(i, W) raw tokens and the i // r compressed entries before it (a CSA layer the indexer's top-k of them, its
    indexer scoring them all)."""
    pairs = causal_pairs(prompt, run.window_tokens)
    r = run.compress_ratio
    if not r:
        return pairs, 0
    scored = _compressed_sum(prompt, r) if run.compress_topk else 0
    return pairs + _compressed_sum(prompt, r, topk if run.compress_topk else None), scored


def layer_pairs(run: LayerRun, prompt: int) -> int:
    """Query-key pairs one layer computes for a prompt of `prompt` tokens."""
    if run.kind == LayerKind.CHUNKED:
        return chunked_pairs(prompt, run.window)
    if run.kind == LayerKind.SLIDING:
        return causal_pairs(prompt, run.window_tokens)
    if run.kind == LayerKind.CROSS:
        return prompt * tokens_held(run, prompt)  # every query sees every encoder / image token
    return causal_pairs(prompt)


def prefill_attention_flops(spec: ModelSpec, prompt: int) -> int:
    """Causal attention FLOPs for a prompt of P tokens: 2·h·(d_qk + d_v) per query-key pair of the
    lower triangle, P(P+1)/2 pairs for a full layer (≈ 2·h·d·P² FLOPs per layer at d_qk = d_v = d)."""
    total = 0
    for run, n in spec.layer_groups():
        qk, v = _qk_v_dims(spec, run=run)
        if run.latent_window:  # DeepSeek-V4's layers
            pairs, scored = compressed_pairs(run, prompt, spec.index_topk)
            total += n * index_flops(spec) * scored
        elif sparse(spec, run):
            # DSA: query i attends to min(i, top-k) keys (a window's pairs); the indexer scores all i
            pairs = causal_pairs(prompt, spec.index_topk)
            total += 0 if run.index_shared else n * index_flops(spec) * causal_pairs(prompt)
        else:
            pairs = layer_pairs(run, prompt) if run.kind.attends else 0
        total += n * 2 * spec.run_heads(run) * (qk + v) * pairs
    return total


def lm_head_params(spec: ModelSpec) -> int:
    """The LM head's weights (vocab x hidden), tied or not: compute_params counts them once."""
    return spec.vocab * spec.hidden_size


def prefill_flops(spec: ModelSpec, prompt: int) -> int:
    """One sequence's prompt pass: every prompt token through the layers, but the LM head only for the
    last position (vLLM's prefill and HF generate compute logits for the token they sample)."""
    if spec.params:
        # NOTE: an explicit count (THEORY.md's textbook 7b / 70b) is the 2N-per-token model, whole.
        return 2 * spec.params * prompt + prefill_attention_flops(spec, prompt)
    body = compute_params(spec) - lm_head_params(spec)
    return 2 * body * prompt + 2 * lm_head_params(spec) + prefill_attention_flops(spec, prompt)
