"""`fit --engine vllm`: option checks and the glue between fit and the vLLM memory model (used by the
CLI and the Python API alike, so it lives in plan/)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.errors import UsageError
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec

if TYPE_CHECKING:
    from kvcalc.engines.vllm.figures import VllmFigures

# vllm/config/cache.py (v0.19): BlockSize = Literal[1, 8, 16, 32, 64, 128, 256]
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)


def check_options(
    engine: str | None,
    kv_memory: str | None,
    block_size: int,
    reserve: str | None,
    pp: int,
    max_num_seqs: int | None,
    max_batched_tokens: int | None,
    gpu: GpuSpec,
) -> tuple[bool, int | None, int, int]:
    """Refuse options vLLM would refuse or kvcalc would ignore; (is vllm, --kv-memory bytes,
    max_num_seqs, max_num_batched_tokens), the last two defaulting as vLLM does on this GPU."""
    from kvcalc.units import fmt_bytes, parse_bytes

    vllm = engine is not None
    if vllm and engine.lower() in ("llamacpp", "llama.cpp", "llama-cpp"):  # the CLI answers it before this; the API not
        raise UsageError(
            "fit under llama.cpp (its buffers, which quant fits) is the command line's",
            hint="kvcalc fit MODEL --gpu GPU --engine llamacpp; kvcalc.fit takes vllm, sglang, trtllm or none",
        )
    if vllm and engine.lower() != "vllm":
        raise UsageError(f"unknown engine '{engine}'", hint="supported: vllm, sglang, trtllm, llamacpp, none")
    if kv_memory is not None and not vllm:
        raise UsageError(
            "--kv-memory needs --engine vllm", hint="it is the engine's logged 'Available KV cache memory'"
        )
    max_num_seqs, max_batched_tokens = scheduler_limits(gpu, max_num_seqs, max_batched_tokens, refuse=vllm)
    if vllm and block_size not in VLLM_BLOCK_SIZES:
        raise UsageError(
            f"vLLM does not accept --block-size {block_size}",
            hint=f"vLLM 0.19 accepts {', '.join(map(str, VLLM_BLOCK_SIZES))}",
        )
    kv_bytes = None
    if kv_memory is not None:
        kv_bytes = parse_bytes(kv_memory, "--kv-memory")
        if kv_bytes > gpu.capacity_bytes:
            raise UsageError(
                f"--kv-memory {kv_memory} is more than {gpu.name}'s {fmt_bytes(gpu.capacity_bytes)}",
                hint="copy 'Available KV cache memory' from the vLLM log (per GPU)",
            )
    if vllm and kv_memory is None and reserve is not None:
        raise UsageError(
            "--reserve has no meaning with --engine vllm",
            hint="vLLM's own terms (profiling peak, non-torch memory) replace it; --kv-memory gives its figure",
        )
    return vllm, kv_bytes, max_num_seqs, max_batched_tokens


def scheduler_limits(
    gpu: GpuSpec, max_num_seqs: int | None, max_batched_tokens: int | None, *, refuse: bool = True
) -> tuple[int, int]:
    """vLLM's max_num_seqs and max_num_batched_tokens on `gpu` as given, its defaults where not: a defaulted
    max_num_seqs is capped by max_num_batched_tokens (vllm/engine/arg_utils.py _set_default_args). Each must be at
    least 1; with `refuse`, a budget below a given max_num_seqs is refused, as vLLM's SchedulerConfig refuses it."""
    from kvcalc.engines.vllm.memory import default_limits

    seqs, tokens = default_limits(gpu)
    tokens = tokens if max_batched_tokens is None else max_batched_tokens
    given_seqs = max_num_seqs is not None
    seqs = min(seqs, tokens) if max_num_seqs is None else max_num_seqs
    if seqs < 1 or tokens < 1:
        raise UsageError("--max-num-seqs and --max-batched-tokens must be at least 1")
    if refuse and given_seqs and tokens < seqs:
        raise UsageError(
            f"vLLM refuses --max-batched-tokens {tokens:,} below --max-num-seqs {seqs:,}",
            hint="max_num_batched_tokens must be greater than or equal to max_num_seqs (vLLM's SchedulerConfig)",
        )
    return seqs, tokens


def _gib(n: int) -> str:
    # vLLM's format_gib: two decimals, trailing zeros dropped ("16.7", "2.21")
    return f"{round(n / 2**30, 2)}"


def predict_terms(
    spec: ModelSpec,
    gpu: GpuSpec,
    *,
    dtype: str | None,
    gpu_util: float,
    tp: int,
    pp: int,
    max_num_seqs: int,
    max_batched_tokens: int,
    steps: list[str] | None,
):  # noqa: ANN201
    from kvcalc.cost.shard import check_pp
    from kvcalc.engines.vllm.memory import Settings, predict

    check_pp(spec, pp)
    from kvcalc.engines.kernels import checkpoint_refusal

    if why := checkpoint_refusal(spec, "vllm", dtype):
        raise UsageError(why, hint="drop --dtype to predict the checkpoint's own format")
    settings = Settings(
        gpu_memory_utilization=gpu_util,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_batched_tokens,
        tp=tp,
        pp=pp,
    )
    return predict(spec, gpu, settings, dtype=dtype, steps=steps)


def figures(
    spec: ModelSpec,
    terms,  # noqa: ANN001
    kv_bytes: int | None,
    available: int,
    *,
    kv_dtype: str,
    tp: int,
    seq: int,
    block_size: int,
    max_batched_tokens: int,
    steps: list[str] | None,
) -> VllmFigures:
    from kvcalc.engines.vllm.figures import vllm_figures

    stages = None
    if terms is not None and len(terms.stages) > 1:
        from kvcalc.engines.vllm.memory import pp_layers

        ranges = pp_layers(spec.num_layers, len(terms.stages))
        stages = [(r, s.available_kv_bytes) for r, s in zip(ranges, terms.stages)]
    v = vllm_figures(
        spec,
        kv_bytes if kv_bytes is not None else available,
        kv_dtype=kv_dtype,
        tp=tp,
        seq=seq,
        block_size=block_size,
        max_num_batched_tokens=max_batched_tokens,
        stages=stages,
    )
    if terms is not None:
        v = v.model_copy(
            update={
                "gpu_total_bytes": terms.gpu_total_bytes,
                "requested_bytes": terms.requested_bytes,
                "weights_bytes": terms.weights_bytes,
                "profile_peak_bytes": terms.profile_peak_bytes,
                "non_torch_bytes": terms.non_torch_bytes,
                "weight_format": terms.weight_format,
                "activation_dtype": terms.activation_dtype,
                "not_sized": terms.unsized,
                # vLLM's own wording for the predicted terms (gpu_worker.py and utils memory_profiling)
                "log_lines": [
                    f"Requested memory: {terms.requested_bytes / terms.gpu_total_bytes:.6f} (util), "
                    f"{terms.requested_bytes / 2**30:.2f} GiB",
                    f"Total non KV cache memory: {_gib(terms.weights_bytes + terms.profile_peak_bytes + terms.non_torch_bytes)}"
                    f"GiB; torch peak memory increase: {_gib(terms.profile_peak_bytes)}GiB; non-torch forward increase "
                    f"memory: {_gib(terms.non_torch_bytes)}GiB; weights memory: {_gib(terms.weights_bytes)}GiB.",
                    *v.log_lines,
                ],
            }
        )
    if steps is not None:
        if v.block_size != block_size:
            steps.append(
                f"vLLM {v.version} hybrid: attention block raised from {block_size} to {v.block_size} tokens (steps of 16) "
                "so one layer's page holds an SSM / linear-attention layer's state; that state's page is padded to match"
            )
        steps += [
            f"vLLM {v.version}: page = {v.block_size} tokens × per-layer KV = {v.page_bytes_per_layer:,} B; "
            f"num_blocks = ⌊{v.available_kv_bytes:,} / ({v.page_bytes_per_layer:,} × {v.group_size} layers)⌋"
            f" = {v.num_blocks:,}",
            f"vLLM {v.version}: tokens = {v.num_blocks:,} // {v.kv_cache_groups} group(s) × {v.block_size} = "
            f"{v.kv_cache_tokens:,}; concurrency = {v.num_blocks:,} / {v.blocks_per_request:,} blocks per request"
            f" = {v.max_concurrency:.2f}x",
        ]
    return v


def held_at(figures_at, max_num_seqs: int):  # noqa: ANN001, ANN201
    """requests of s tokens -> how many vLLM's pool holds at once: whole requests of its blocks, at most
    max_num_seqs. `figures_at(seq=s)`: figures() for that pool at s."""

    def held(s: int) -> int:
        v = figures_at(seq=s)
        return min(v.num_blocks // v.blocks_per_request, max_num_seqs) if v.blocks_per_request else max_num_seqs

    return held


def default_seqs(spec: ModelSpec, is_vllm: bool) -> list[int]:
    """--seq left out: 8k, or under --engine vllm vLLM's own default max_model_len (engines/vllm/startup:
    131,072 for Llama-3.1-8B, 4,096 for Phi-4-mini's LongRoPE)."""
    if not is_vllm:
        return [8192]
    from kvcalc.engines.vllm.startup import default_max_model_len

    return [default_max_model_len(spec)]


def refuse_architecture(spec: ModelSpec) -> None:
    """An architecture vLLM 0.19's V1 engine does not serve is refused, in vLLM's words."""
    from kvcalc.engines.vllm.startup import unsupported_architecture

    why = unsupported_architecture(spec)
    if why:
        raise UsageError(
            f"--engine vllm: vLLM 0.19 does not serve {spec.name}: {why}",
            hint="drop --engine vllm for kvcalc's own arithmetic",
        )


def _workers(spec: ModelSpec, terms, kv_logged: int | None, v: VllmFigures) -> list[tuple[range, int]]:  # noqa: ANN001
    """Each worker's layers and available KV bytes: one per pipeline stage."""
    from kvcalc.engines.vllm.memory import pp_layers

    if terms is not None and kv_logged is None and len(terms.stages) > 1:
        ranges = pp_layers(spec.num_layers, len(terms.stages))
        return [(r, st.available_kv_bytes) for r, st in zip(ranges, terms.stages)]
    return [(range(spec.num_layers), v.available_kv_bytes)]


def startup(spec: ModelSpec, terms, kv_logged: int | None, v: VllmFigures, seq: int, batched: int):  # noqa: ANN001, ANN201
    """vLLM's start-up check with max_model_len = seq on every worker (each pipeline stage's layers)."""
    from kvcalc.engines.vllm.startup import check_start

    return check_start(
        spec,
        _workers(spec, terms, kv_logged, v),
        max_model_len=seq,
        page=v.page_bytes_per_layer,
        block=v.block_size,
        max_num_batched_tokens=batched,
    )


def largest_context(spec: ModelSpec, terms, kv_logged: int | None, v: VllmFigures, batched: int) -> int:  # noqa: ANN001
    """The longest --max-model-len vLLM starts with: its start-up check's own search (a sliding layer
    books its window plus a step's batched tokens, so this is shorter than the cache bytes alone allow)."""
    from kvcalc.engines.vllm.startup import largest_model_len

    return largest_model_len(
        spec,
        _workers(spec, terms, kv_logged, v),
        page=v.page_bytes_per_layer,
        block=v.block_size,
        max_num_batched_tokens=batched,
    )


def check_layout(tp: int, ep: int | None, dp_attention: bool) -> None:
    """Layouts vLLM 0.19 runs that its memory model here covers: --enable-expert-parallel puts the
    experts over all tp x dp ranks (ep = tp with dp 1); its DP attention (--data-parallel-size N, TP 1
    per rank) runs N engine cores, each with its own profile and pool, which is not modelled here."""
    if dp_attention:
        raise UsageError(
            "--engine vllm with --dp-attention is not modelled: vLLM runs it as --data-parallel-size N engine "
            "cores with --tensor-parallel-size 1 and --enable-expert-parallel, each profiling its own pool",
            hint="drop --engine vllm for kvcalc's own per-rank arithmetic",
        )
    if ep is not None and ep > 1 and ep != tp:
        raise UsageError(
            f"vLLM's expert-parallel size is tp x dp = {tp}, not --ep {ep}",
            hint=f"with --engine vllm give --ep {tp} (--enable-expert-parallel) or leave --ep out",
        )
