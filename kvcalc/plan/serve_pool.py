"""The limits and KV pool a served deployment runs under (`generate --concurrency/--rate`, the calibration's closed
loops, fit's concurrency search): each engine's own pool and scheduler defaults from its memory model (vLLM 0.19's,
SGLang's by release, TensorRT-LLM's, llama-server's slots), the user's launch flags over them, and the refusal of a
request that alone outgrows the pool."""

from collections.abc import Mapping

from kvcalc.cost.step import Deployment, held_kv_bytes, stages
from kvcalc.errors import DoesNotFitError
from kvcalc.hardware.gpu import GpuSpec
from kvcalc.model.spec import ModelSpec
from kvcalc.plan.serve import Limits


def kv_pool(
    spec: ModelSpec, gpu: GpuSpec, dep: Deployment, *, engine: str, dtype: str | None, kv_dtype: str, context: int,
    launch: Mapping[str, int] | None = None, mem_fraction_static: float | None = None, release: str | None = None,
    max_mamba_cache_size: int | None = None, mamba_ssm_dtype: str | None = None,
) -> tuple[Limits, str]:  # fmt: skip
    """One rank's scheduler limits, KV blocks and policy: vLLM 0.19's own pool and OpenAI-server defaults with
    --engine vllm; SGLang's pool, max_running_requests and chunked_prefill_size (its release's defaults) and its
    scheduler with sglang; TensorRT-LLM's pool (--gpu-util as its free_gpu_memory_fraction, of what weights and
    --reserve leave) in blocks of 32 under trtllm-serve's limits and scheduler with trtllm; llama-server's slots and
    batch (engines/llamacpp/server.py) over one cache of its default -c, or the largest llama.cpp's buffers fit
    (llamacpp_cells), with llamacpp; otherwise capacity x gpu_util less weights and --reserve in vLLM-sized blocks
    under vLLM's limits and scheduler.
    `launch`: the scheduler flags the server was launched with (serving_limits'), where they size the pool:
    vLLM profiles its peak with a forward of max_num_batched_tokens tokens and a sampler of min(max_num_seqs,
    that) rows; SGLang's default mem_fraction_static reserves room by chunked_prefill_size. TensorRT-LLM's
    profiling peak is --reserve here, so its flags leave the pool as it is. serving_limits applies the flags.
    `mem_fraction_static`: SGLang's, as launched (None: its release's default for the card); `release`: SGLang's
    (None: engines/sglang/release.DEFAULT_RELEASE); `max_mamba_cache_size` / `mamba_ssm_dtype`: SGLang's, a hybrid's
    state slots and its SSM state's dtype."""
    launch = launch or {}
    if engine == "vllm" and not dep.dp_attention:
        from kvcalc.engines.runtime import GIB
        from kvcalc.engines.vllm.figures import VLLM_VERSION, vllm_figures
        from kvcalc.engines.vllm.memory import Settings, default_limits, pp_layers, predict
        from kvcalc.engines.vllm.startup import NO_CACHE_MEMORY

        seqs, tokens = default_limits(gpu)
        seqs = launch.get("max_num_seqs", seqs)
        tokens = launch.get("max_num_batched_tokens", tokens)
        settings = Settings(
            gpu_memory_utilization=dep.gpu_util, max_num_seqs=seqs, max_num_batched_tokens=tokens, tp=dep.tp, pp=dep.pp
        )
        terms = predict(spec, gpu, settings, dtype=dtype)
        if short := next((s for s in terms.stages if s.available_kv_bytes <= 0), None):
            # NOTE: vLLM's check_enough_kv_cache_memory (engines/vllm/startup.check_start) refuses a pool of no blocks
            raise DoesNotFitError(
                f"vLLM {VLLM_VERSION} would not start: {NO_CACHE_MEMORY} (weights "
                f"{short.weights_bytes / GIB:.2f} GiB + peak {short.profile_peak_bytes / GIB:.2f} GiB + non-torch "
                f"{short.non_torch_bytes / GIB:.2f} GiB a GPU, of {terms.requested_bytes / GIB:.2f} GiB at "
                f"--gpu-util {dep.gpu_util:g})",
                hint="more GPUs (--tp/--pp), a smaller --dtype, or a larger --gpu-util",
            )
        per_stage = None
        if len(terms.stages) > 1:
            per_stage = [(r, s.available_kv_bytes) for r, s in zip(pp_layers(spec.num_layers, dep.pp), terms.stages)]
        fig = vllm_figures(
            spec, terms.available_kv_bytes, kv_dtype=kv_dtype, tp=dep.tp, seq=context,
            max_num_batched_tokens=tokens, stages=per_stage,
        )  # fmt: skip
        limits = Limits(seqs, tokens, fig.num_blocks // fig.kv_cache_groups, fig.block_size)
        return limits, f"vLLM {fig.version} pool ({fig.kv_cache_tokens:,} tokens), max_num_seqs {seqs}, budget {tokens}"
    if engine == "sglang":
        from kvcalc.engines.sglang.pool import SglangSettings
        from kvcalc.engines.sglang.pool import predict as sglang_predict
        from kvcalc.plan.serve_policies import SglangPolicy

        flags = SglangSettings(
            tp=dep.tp, pp=dep.pp, dp_attention=dep.dp_attention, kv_dtype=kv_dtype,
            chunked_prefill_size=launch.get("max_num_batched_tokens"), max_running_requests=launch.get("max_num_seqs"),
            mem_fraction_static=mem_fraction_static, max_mamba_cache_size=max_mamba_cache_size,
            mamba_ssm_dtype=mamba_ssm_dtype, **({"release": release} if release else {}),
        )  # fmt: skip
        p = sglang_predict(spec, gpu, flags, seq=context, dtype=dtype)
        if p.refusal:
            given = launch.get("max_num_batched_tokens")
            raise DoesNotFitError(
                f"SGLang {p.release} would not start{f' with --max-batched-tokens {given:,}' if given else ''}: "
                + p.refusal,
                hint="its default --mem-fraction-static keeps 1.5 MiB a token of the chunk out: give the fraction your "
                "server launches with (--mem-fraction-static), or more GPUs (--tp)",
            )
        limits = Limits(
            p.max_running_requests,
            p.chunked_prefill_size,
            p.kv_capacity_tokens // p.dp_size // p.page_size,
            p.page_size,
            SglangPolicy,
        )
        at = f", mem_fraction_static {mem_fraction_static:g}" if mem_fraction_static is not None else ""
        at += f", max_mamba_cache_size {max_mamba_cache_size:,}" if max_mamba_cache_size is not None else ""
        at += f", mamba_ssm_dtype {mamba_ssm_dtype}" if mamba_ssm_dtype is not None else ""
        return limits, (
            f"SGLang {p.release} pool ({p.kv_capacity_tokens // p.dp_size:,} tokens{at}), max_running_requests "
            f"{p.max_running_requests}, chunked_prefill_size {p.chunked_prefill_size}"
        )
    if engine == "trtllm":
        from kvcalc.engines.trtllm import pool as trt
        from kvcalc.plan.serve_policies import TrtllmPolicy

        p = trt.predict(spec, gpu, dep, dtype=dtype, kv_dtype=kv_dtype)
        limits = Limits(trt.MAX_BATCH_SIZE, trt.MAX_NUM_TOKENS, p.blocks, trt.TOKENS_PER_BLOCK, TrtllmPolicy)
        return limits, (
            f"TensorRT-LLM 1.x pool ({p.tokens:,} tokens: free_gpu_memory_fraction {dep.gpu_util:g} of what "
            f"weights and --reserve leave), max_batch_size {trt.MAX_BATCH_SIZE}, max_num_tokens {trt.MAX_NUM_TOKENS}, "
            "GUARANTEED_NO_EVICT (trtllm-serve's defaults)"
        )
    from kvcalc.engines.vllm.memory import default_limits

    seqs, tokens = default_limits(gpu)
    bs = 16
    # NOTE: vLLM runs DP attention as --data-parallel-size engine cores of tp 1, each profiling its own pool
    # (plan/vllm_fit.check_layout): priced here per rank by kvcalc's own arithmetic, whole heads a rank
    dp = " under DP attention" if engine == "vllm" else ""
    budget = int(gpu.capacity_bytes * dep.gpu_util) - dep.reserve_bytes
    blocks = min(
        (budget - st.resident_bytes) // max(held_kv_bytes(st, bs, kv_dtype), 1) for st in stages(spec, dep, dtype)
    )
    if engine == "llamacpp":  # llama-server's slots and batch over its one cache (engines/llamacpp/server.py)
        from kvcalc.engines.llamacpp import server

        slots_given = "max_num_seqs" in (launch or {})  # -np given: a server launched for them is given its -c
        cells, how = llamacpp_cells(spec, gpu, dep, dtype, kv_dtype, max(blocks, 0) * bs, slots_given)
        slots = f"-np {launch['max_num_seqs']}" if slots_given and launch else f"{server.SLOTS} slots (--parallel)"
        return Limits(server.SLOTS, server.N_BATCH, cells // bs, bs), (
            f"llama-server's {slots} over one cache of {cells:,} tokens ({how}), n_batch {server.N_BATCH}"
        )
    return (
        Limits(seqs, tokens, max(blocks, 0), bs),
        f"capacity x gpu_util - weights - reserve ({blocks * bs:,} tokens; no {engine} pool model{dp}), "
        f"max_num_seqs {seqs}, budget {tokens} (vLLM's defaults)",
    )


def default_requests(concurrency: int | None) -> int:
    """10 x concurrency in a closed loop (as InferenceX and most `vllm bench serve --max-concurrency` send), >= 16; 200 open."""
    return max(10 * concurrency, 16) if concurrency else 200


def serving_limits(
    spec: ModelSpec,
    gpu: GpuSpec,
    dep: Deployment,
    *,
    engine: str,
    dtype: str | None,
    kv_dtype: str,
    prompt: int,
    new: int,
    launch: Mapping[str, int] | None = None,
    pool_flags: bool = True,
    mem_fraction_static: float | None = None,
    release: str | None = None,
    max_mamba_cache_size: int | None = None,
    mamba_ssm_dtype: str | None = None,
) -> tuple[Limits, str]:
    """kv_pool, refusing a request that alone outgrows the pool. `launch`: Limits fields a run's launch
    flags set (a user's, or a calibration point's: scripts/import_calibration.py), the server's figures;
    they size the pool too unless `pool_flags` is False (kv_pool), as SGLang's `mem_fraction_static` does."""
    sizing = dict(
        launch=launch if pool_flags else None, mem_fraction_static=mem_fraction_static, release=release,
        max_mamba_cache_size=max_mamba_cache_size, mamba_ssm_dtype=mamba_ssm_dtype,
    )  # fmt: skip
    limits, pool = kv_pool(
        spec, gpu, dep, engine=engine, dtype=dtype, kv_dtype=kv_dtype, context=prompt + new, **sizing
    )
    if launch:
        # NOTE: SGLang splits its server-wide chunked_prefill_size and max_running_requests over the
        # DP-attention ranks (server_args, scheduler); the other flags are one rank's. The limits here are
        # one rank's until the DP-attention lines below multiply them by the ranks.
        r = dep.kv_ranks if dep.dp_attention else 1
        split = {"max_num_seqs": r, "max_num_batched_tokens": r} if engine == "sglang" else {}
        limits = limits._replace(**{k: max(1, v // split.get(k, 1)) for k, v in launch.items()})
        pool += "; launched with " + ", ".join(f"{k} {v:,}" for k, v in launch.items())
    budget_set = "max_num_batched_tokens" in (launch or {})
    if engine == "trtllm" and not budget_set and prompt + limits.max_num_seqs > limits.max_num_batched_tokens:
        # NOTE: TRT-LLM schedules a prompt whole (context chunking is off by default) beside the running
        # decodes, so a deployment serving longer prompts raises max_num_tokens; taken as the prompt
        # plus a token for every seat, so a prompt never waits for the batch to drain.
        limits = limits._replace(max_num_batched_tokens=prompt + limits.max_num_seqs)
        pool += f"; max_num_tokens raised to {limits.max_num_batched_tokens:,} for {prompt:,}-token prompts"
    if dep.dp_attention:
        # NOTE: each of the tp DP-attention ranks schedules its own requests into its own KV pool (SGLang
        # --enable-dp-attention, TensorRT-LLM enable_attention_dp, vLLM --data-parallel-size): the
        # replica's limits are tp times one rank's, the pool as the engine model prices one rank; so is
        # SGLang's max_prefill_tokens, which each rank's scheduler applies to its own prefill batch.
        r = dep.kv_ranks
        limits = limits._replace(
            max_num_seqs=limits.max_num_seqs * r,
            max_num_batched_tokens=limits.max_num_batched_tokens * r,
            max_prefill_tokens=limits.max_prefill_tokens * r,
            kv_blocks=limits.kv_blocks * r,
        )
        pool += f"; x {r} DP-attention ranks"
    if limits.pool_holds(prompt + new) < 1:
        msg = f"one request of {prompt + new:,} tokens does not fit the KV pool ({limits.kv_blocks * limits.block_size:,} tokens)"
        hint = "more GPUs (--tp), a smaller --dtype or --kv-dtype, or shorter requests"
        if engine == "llamacpp":  # no tensor parallelism: llama.cpp leaves what does not fit to the CPU
            from kvcalc.plan.quants import offload_hint

            msg += offload_hint(spec, gpu, prompt + new, dep.gpus, dtype)
            hint = "the serving simulation holds the model whole on the GPUs: a smaller quant (--dtype q4_k_m, q3_k_m, ...),"
            hint += " more GPUs (--pp: llama.cpp's layer split) or shorter requests"
        raise DoesNotFitError(msg, hint=hint)
    return limits, pool


def llamacpp_cells(
    spec: ModelSpec, gpu: GpuSpec, dep: Deployment, dtype: str | None, kv_dtype: str, arithmetic: int,
    slots_given: bool = False,
) -> tuple[int, str]:  # fmt: skip
    """The cells of llama-server's one cache and where they come from. Launched with its default -c (no -np
    given), the model's training context, lowered by --fit to the largest -c whose buffers fit
    (plan/quants.largest_context: the weights of the file --dtype names, laid out as llama-quantize writes it, the
    cache, the compute buffer) on the pipeline's GPUs with --fit's headroom free, every layer on them; launched for
    `slots_given` slots, the largest -c that fits (a server launched for more slots is given more); kvcalc's own
    `arithmetic` where --dtype or --kv-dtype is no llama.cpp type (int4, fp8)."""
    from kvcalc.engines.llamacpp.eras import era
    from kvcalc.engines.llamacpp.server import SLOTS
    from kvcalc.plan.quants import largest_context, server_setup

    setup = server_setup(spec, gpu, dep.gpus, dtype, kv_dtype)
    if setup is None:
        return arithmetic, "capacity x gpu_util - weights - reserve: --dtype / --kv-dtype is no llama.cpp type"
    rows, what, settings = setup
    cells = largest_context(spec, rows, era(None), parallel=SLOTS, **settings)
    train = spec.max_position_embeddings
    if slots_given or not train:
        return cells, f"the largest -c llama.cpp's buffers fit: {what}"
    if cells >= train:
        return (
            train,
            f"llama-server's default -c, the training context; llama.cpp's buffers would fit {cells:,}: {what}",
        )
    return cells, f"the training context {train:,} lowered by --fit to the largest -c llama.cpp's buffers fit: {what}"
