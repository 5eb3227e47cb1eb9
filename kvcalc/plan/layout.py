"""One candidate deployment as the planner sees it: which engine accepts the layout, whether it fits and
with what headroom, the KV tokens and concurrency it holds, the engine's start-up refusal in its own
words, and the command that starts it. Pure: specs and numbers in, a result model out.

What each engine accepts (releases this project models):
- vLLM 0.19: --tensor-parallel-size, --pipeline-parallel-size; --enable-expert-parallel puts the
  experts over all tp x dp ranks (so ep = tp here); its DP attention is --data-parallel-size N with
  --tensor-parallel-size 1 per engine core (with --enable-expert-parallel for MoE models).
- SGLang: --tp N; --enable-dp-attention --dp N (N = tp: attention DP over the TP ranks); --ep-size E
  dividing tp (moe tp = tp / E).
- TensorRT-LLM (trtllm-serve): --tp_size, --pp_size, --ep_size; attention DP through its LLM API
  option enable_attention_dp (an extra-options YAML), named in the command's comment.
- llama.cpp (llama-server): one process splits layers (--split-mode layer) or rows (--split-mode row)
  over the GPUs of one machine; no expert parallelism, no attention DP.
"""

from kvcalc.model.formats import weights_label
from kvcalc.results import Result
from kvcalc.units import DEFAULT_GPU_UTIL

ENGINES = ("vllm", "sglang", "trtllm", "llamacpp")


class LayoutFacts(Result):
    """The deployment facts of one (GPU, layout, engine, dtypes, context) candidate."""

    engine: str
    gpu: str
    gpus: int
    tp: int
    pp: int
    ep: int
    dp_attention: bool
    nodes: int
    dtype: str
    kv_dtype: str
    weight_format: str = ""  # the weights' formats as a label, a mix named as one ("mxfp4 experts + bf16")
    seq: int  # the context each request may reach (the engine's max model length)
    accepted: bool  # the engine runs this layout at all
    fits: bool  # accepted, the weights fit and one seq-long request's KV fits (the engine starts)
    headroom_bytes: int  # per GPU: budget - weights - reserve - one seq-long request's KV (< 0: over)
    kv_capacity_tokens: int  # tokens the KV pool holds across the deployment
    max_concurrency: float  # seq-long requests the pool holds at once
    refusal: str | None = None  # why the engine would not run or start it, in its words where it has them
    accounting: str = ""
    command: str  # the command line that starts it
    warnings: list[str] = []


def engine_refusal(  # noqa: ANN201
    engine: str,
    spec,
    tp: int,
    pp: int,
    ep: int,
    dp_attention: bool,
    gpu: str | None = None,  # noqa: ANN001
) -> str | None:
    """Why `engine` does not run this layout (on the GPU named `gpu`), or None."""
    if engine not in ENGINES:
        return f"unknown engine '{engine}' (known: {', '.join(ENGINES)})"
    if gpu is not None:
        from kvcalc.engines.kernels import gpu_refusal

        if why := gpu_refusal(engine, gpu):
            return why
    if engine == "vllm":
        from kvcalc.engines.vllm.startup import unsupported_architecture

        why = unsupported_architecture(spec)
        if why:
            return why
        if ep > 1 and ep != tp:
            return f"vLLM's expert-parallel size is tp x dp ({tp}), not {ep}"
    if engine == "trtllm":
        from kvcalc.engines.trtllm.models import architecture_refusal

        if why := architecture_refusal(spec):
            return why
    if engine == "sglang" and ep > 1 and tp % ep:
        return f"SGLang's --ep-size must divide --tp ({tp}), not {ep}"
    if engine == "llamacpp" and (ep > 1 or dp_attention):
        return "llama.cpp has neither expert parallelism nor attention data parallelism"
    return None


def command(
    engine: str,
    model: str,
    *,
    tp: int,
    pp: int,
    ep: int,
    dp_attention: bool,
    nodes: int,
    seq: int,
    gpu_util: float,
    max_num_seqs: int | None,
    kv_dtype: str,
    quantize: str | None,
) -> str:
    """The launch command line, in each engine's own flags."""
    fp8_kv = kv_dtype in ("fp8", "fp8_e4m3", "fp8_e5m2")
    if engine == "vllm":
        parts = [f"vllm serve {model}"]
        if dp_attention:
            parts.append(f"--data-parallel-size {tp} --tensor-parallel-size 1")
        else:
            parts.append(f"--tensor-parallel-size {tp}")
        if pp > 1:
            parts.append(f"--pipeline-parallel-size {pp}")
        if ep > 1:
            parts.append("--enable-expert-parallel")
        parts += [f"--max-model-len {seq}", f"--gpu-memory-utilization {gpu_util:g}"]
        if max_num_seqs:
            parts.append(f"--max-num-seqs {max_num_seqs}")
        if fp8_kv:
            parts.append("--kv-cache-dtype fp8")
        if quantize:
            parts.append(f"--quantization {quantize}")
        if nodes > 1:
            parts.append("--distributed-executor-backend ray")
        return " ".join(parts)
    if engine == "sglang":
        parts = [f"python -m sglang.launch_server --model-path {model} --tp {tp * pp}"]
        if dp_attention:
            parts.append(f"--dp {tp} --enable-dp-attention")
        if ep > 1:
            parts.append(f"--ep-size {ep}")
        parts += [f"--context-length {seq}", f"--mem-fraction-static {gpu_util:g}"]
        if max_num_seqs:
            parts.append(f"--max-running-requests {max_num_seqs}")
        if fp8_kv:
            parts.append("--kv-cache-dtype fp8_e4m3")
        if quantize:
            parts.append(f"--quantization {quantize}")
        if nodes > 1:
            parts.append(f"--nnodes {nodes} --node-rank 0")
        return " ".join(parts)
    if engine == "trtllm":
        parts = [f"trtllm-serve {model} --tp_size {tp} --pp_size {pp}"]
        if ep > 1:
            parts.append(f"--ep_size {ep}")
        parts += [f"--max_seq_len {seq}", f"--kv_cache_free_gpu_memory_fraction {gpu_util:g}"]
        if max_num_seqs:
            parts.append(f"--max_batch_size {max_num_seqs}")
        if dp_attention:
            parts.append("--extra_llm_api_options extra.yaml  # extra.yaml: enable_attention_dp: true")
        return " ".join(parts)
    split = " --split-mode row" if tp > 1 else (" --split-mode layer" if pp > 1 else "")
    return f"llama-server -m {model} -c {seq} -ngl 999{split}"


def layout_facts(
    spec,  # noqa: ANN001
    gpu,  # noqa: ANN001
    *,
    tp: int = 1,
    pp: int = 1,
    ep: int = 1,
    dp_attention: bool = False,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    engine: str = "vllm",
    dtype: str | None = None,
    kv_dtype: str | None = None,
    seq: int | None = None,
    gpu_util: float = DEFAULT_GPU_UTIL,
    model_id: str | None = None,
    engine_version: str | None = None,
) -> LayoutFacts:
    """The facts of one candidate. vLLM gets its 0.19 accounting and start-up check, SGLang and
    TensorRT-LLM their own pools (engines/sglang, engines/trtllm); llama.cpp gets kvcalc's per-rank
    arithmetic with vLLM 0.19's reserve for the layout, labelled so in `accounting`. `engine_version`: SGLang's."""
    from kvcalc.errors import KvcalcError
    from kvcalc.plan import vllm_fit
    from kvcalc.plan.deploy import deployment
    from kvcalc.plan.fitrun import fit_rows
    from kvcalc.plan.kv_auto import auto_kv_dtype

    engine = engine.lower()
    refusal = layout_refusal = engine_refusal(engine, spec, tp, pp, ep, dp_attention, gpu.name)
    is_vllm = engine == "vllm" and not dp_attention and refusal is None
    kv = kv_dtype or auto_kv_dtype(spec, gpu, engine, dtype)
    length = seq or vllm_fit.default_seqs(spec, engine == "vllm")[0]
    seqs, tokens = vllm_fit.check_options(None, None, 16, None, pp, None, None, gpu)[2:]
    base = dict(engine=engine, gpu=gpu.name, gpus=tp * pp, tp=tp, pp=pp, ep=ep, dp_attention=dp_attention)
    quantize = dtype if dtype in ("fp8",) and spec.dtype in ("bf16", "fp16", "fp32") else None
    hub = next((a for a in spec.aliases if "/" in a), None)  # a preset's hub id, for the command line
    launch_seqs = None if engine == "sglang" else seqs  # vLLM's default is not SGLang's (plan raises it to the users)
    line = command(
        engine,
        model_id or hub or spec.name,
        tp=tp,
        pp=pp,
        ep=ep,
        dp_attention=dp_attention,
        nodes=nodes or 1,
        seq=length,
        gpu_util=gpu_util,
        max_num_seqs=launch_seqs,
        kv_dtype=kv,
        quantize=quantize,
    )
    try:
        dep = deployment(
            spec,
            gpu,
            tp=tp,
            pp=pp,
            interconnect=None,
            gpu_util=gpu_util,
            reserve="2GiB",
            ep=ep,
            dp_attention=dp_attention,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
        )
        (r,) = fit_rows(
            spec,
            gpu,
            dep,
            seqs=[length],
            batches=[1],
            dtype=dtype,
            kv_dtype=kv,
            block_size=16,
            is_vllm=is_vllm,
            kv_logged=None,
            max_num_seqs=seqs,
            max_batched_tokens=tokens,
            reserve_given=False,
        )
        pool = None
        if engine == "sglang" and layout_refusal is None:
            # NOTE: inside the try: what SGLang refuses (a checkpoint it will not re-quantize, a release without the
            # model class) is this candidate's refusal, as vLLM's are, not the whole plan's error
            from kvcalc.plan.sglang import predict as sglang_predict

            pool = sglang_predict(
                spec, gpu, tp=tp, pp=pp, seq=length, batch=1, dtype=dtype, kv_dtype=kv_dtype,
                engine_version=engine_version, mem_fraction_static=gpu_util, chunked_prefill_size=None, page_size=None,
                max_running_requests=None, dp_attention=dp_attention, steps=None,
            )  # fmt: skip
    except KvcalcError as e:
        refusal = refusal or e.message
        return LayoutFacts(
            **base,
            nodes=nodes or 1,
            dtype=dtype or spec.dtype,
            kv_dtype=kv,
            weight_format=weights_label(spec, dtype),
            seq=length,
            accepted=False,
            fits=False,
            headroom_bytes=0,
            kv_capacity_tokens=0,
            max_concurrency=0.0,
            refusal=refusal,
            command=line,
        )
    p = r.per_gpu
    headroom = p.budget_bytes - p.weight_bytes - p.reserve_bytes - p.kv_bytes - p.state_bytes
    start = r.vllm.startup if r.vllm else None
    if start is not None and start.refusal:
        refusal = refusal or start.refusal
    elif is_vllm and r.vllm is None and refusal is None:
        refusal = "No available memory for the cache blocks."  # weights and reserve leave nothing
    tokens_held = r.vllm.kv_cache_tokens if r.vllm else r.kv_capacity_tokens
    concurrency = r.vllm.max_concurrency if r.vllm else r.max_concurrency
    accounting = r.accounting
    fits = r.fits
    if pool is not None:
        tokens_held, concurrency, fits = pool.kv_capacity_tokens, pool.max_concurrency, pool.fits
        refusal = refusal or pool.refusal
        accounting = (
            f"SGLang {pool.release}'s own pool (engines/sglang) at --mem-fraction-static {gpu_util:g}, "
            "as the command says"
        )
    elif engine == "trtllm" and layout_refusal is None:
        from kvcalc.plan.trtllm_fit import replica_pool

        tokens_held, concurrency = replica_pool(spec, gpu, dep, dtype, kv, length)
        fits = fits and concurrency >= 1
        accounting = (
            f"TensorRT-LLM's own pool (engines/trtllm): free_gpu_memory_fraction {gpu_util:g} of what the weights "
            "and a 2 GiB reserve leave"
        )
    elif not is_vllm and engine != "vllm":
        accounting = f"kvcalc per-rank arithmetic, vLLM 0.19's reserve (no {engine} pool model here)"
    elif engine == "vllm" and dp_attention:
        accounting = "kvcalc per-rank arithmetic: vLLM's data-parallel engine cores are not modelled"
    return LayoutFacts(
        **base,
        nodes=r.nodes,
        dtype=r.dtype,
        kv_dtype=kv,
        weight_format=r.weight_format,
        seq=length,
        accepted=layout_refusal is None,
        fits=fits and refusal is None,
        headroom_bytes=headroom,
        kv_capacity_tokens=tokens_held,
        max_concurrency=concurrency,
        refusal=refusal,
        accounting=accounting,
        command=line,
        warnings=r.warnings,
    )
