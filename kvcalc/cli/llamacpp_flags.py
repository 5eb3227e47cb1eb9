"""Which options a command's llama.cpp branch reads (`cache` / `fit --engine llamacpp`): one usage line for an
option the branch it answers in would drop, the command's others under llama.cpp, llama.cpp's own without it."""

from typing import Optional

from kvcalc.cli.llamacpp import wanted
from kvcalc.errors import UsageError


def check_flags(
    engine: Optional[str], command: str, others: dict[str, bool], own: dict[str, bool], reads: str = ""
) -> bool:
    """Whether `command` answers as llama.cpp (wanted(engine)), after one line for a flag that branch would drop:
    under --engine llamacpp the command's `others` given (flag -> given?), llama.cpp's `own` flags without it.
    `reads`: the flags it reads beyond llama.cpp's own, for the hint."""
    if wanted(engine):
        if named := [flag for flag, given in others.items() if given]:
            raise UsageError(
                f"{command} --engine llamacpp does not read {', '.join(named)}",
                hint=f"it reads {reads}{', '.join(own)}, --kv-dtype, --dtype",
            )
        return True
    if named := [flag for flag, given in own.items() if given]:
        raise UsageError(
            f"{', '.join(named)} {'needs' if len(named) == 1 else 'need'} --engine llamacpp",
            hint="llama-server's flags; a GGUF quant can be named in MODEL too (org/repo:Q4_K_M)",
        )
    return False


def shared_flags(
    explain: bool, plot: Optional[str], layers: Optional[int], kv_heads: Optional[int], head_dim: Optional[int],
    window: Optional[str], images: Optional[int], encoder_seq: Optional[str],
) -> dict[str, bool]:  # fmt: skip
    """cache's and fit's options llama.cpp's branch does not read (--explain, --plot, the what-ifs), for check_flags."""
    return {
        "--explain": explain,
        "--plot": plot is not None,
        "--layers": layers is not None,
        "--kv-heads": kv_heads is not None,
        "--head-dim": head_dim is not None,
        "--window": window is not None,
        "--images": images is not None,
        "--encoder-seq": encoder_seq is not None,
    }


def own_flags(
    quant: Optional[str], parallel: int, kv_unified: bool, ubatch: int, flash_attn: str, ngl: Optional[int], swa: bool,
    cpu_moe: bool = False, n_cpu_moe: Optional[int] = None,
) -> dict[str, bool]:  # fmt: skip
    """llama.cpp's flags a command was given (not at their defaults), for check_flags."""
    return {
        "--cpu-moe": cpu_moe,
        "--n-cpu-moe": n_cpu_moe is not None,
        "--quant": quant is not None,
        "--parallel": parallel != 1,
        "--kv-unified": kv_unified,
        "--ubatch": ubatch != 512,
        "--flash-attn": flash_attn != "on",
        "--ngl": ngl is not None,
        "--swa-full": swa,
    }
