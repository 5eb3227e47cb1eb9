"""Typer options the speed commands share (roofline, generate, fit): the deployment (--tp/--gpus, --pp,
--interconnect, --ep, --nodes/--gpus-per-node; --dp-attention is cli/sglang.py's), the memory budget (--gpu-util, --reserve) and the estimate (--efficiency/--mbu/--mfu)."""

from typing import Annotated, Optional

import typer

TpOpt = Annotated[
    Optional[int],
    typer.Option("--tp", help="Tensor-parallel GPUs per pipeline stage (vLLM's rule: divides the heads)."),
]
GpusOpt = Annotated[Optional[int], typer.Option("--gpus", help="Same as --tp.")]
PpOpt = Annotated[
    Optional[int], typer.Option("--pp", help="Pipeline stages (layers split as vLLM's get_pp_indices splits them).")
]
InterconnectOpt = Annotated[
    Optional[str],
    typer.Option(
        "--interconnect",
        help="Link between the GPUs: nvlink3/4/5, infinity-fabric, pcie3/4/5, or a one-way rate such as 100GB/s "
        "(default: the GPU preset's).",
    ),
]
GpuUtilOpt = Annotated[
    Optional[float],
    typer.Option(
        "--gpu-util",
        help="Share of GPU memory to use, as vLLM's gpu_memory_utilization (default 0.9; a run served by --engine "
        "trtllm takes it as TensorRT-LLM's free_gpu_memory_fraction: a share of what weights and --reserve leave; "
        "SGLang reads no such share).",
    ),
]
ReserveOpt = Annotated[
    str, typer.Option("--reserve", help="Per-GPU memory kept for activations, CUDA graphs and buffers.")
]
EffOpt = Annotated[
    Optional[float],
    typer.Option("--efficiency", help="Scale both roofs by F (0-1] for an estimate beside the ceiling."),
]
MbuOpt = Annotated[Optional[float], typer.Option("--mbu", help="Memory-bandwidth utilization (0-1] for the estimate.")]
MfuOpt = Annotated[Optional[float], typer.Option("--mfu", help="Model FLOP/s utilization (0-1] for the estimate.")]
EpOpt = Annotated[
    Optional[int],
    typer.Option(
        "--ep",
        help="Expert-parallel ranks (default 1): each holds experts/N whole experts; must divide --tp "
        "(SGLang's ep_size; vLLM's enable_expert_parallel, whose EP size is tp x dp).",
    ),
]
NodesOpt = Annotated[
    Optional[int],
    typer.Option("--nodes", help="Nodes the tp x pp GPUs fill (checked; default: as many as they need)."),
]
GpusPerNodeOpt = Annotated[
    Optional[int],
    typer.Option(
        "--gpus-per-node",
        help="GPUs per scale-up domain (default: the GPU preset's, 8 on HGX/MI300X, 72 on NVL72); "
        "collectives beyond it use the scale-out link.",
    ),
]
