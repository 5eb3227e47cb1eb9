"""`fit --engine vllm` plumbing: moved to kvcalc/plan/vllm_fit.py so that kvcalc.fit(engine="vllm") runs the
same code; the names stay importable from here."""

from kvcalc.plan.vllm_fit import (  # noqa: F401
    VLLM_BLOCK_SIZES,
    auto_kv_dtype,
    check_layout,
    check_options,
    default_seqs,
    figures,
    predict_terms,
    refuse_architecture,
    startup,
)
