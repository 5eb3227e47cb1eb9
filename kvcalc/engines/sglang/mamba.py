"""SGLang's pool of recurrent states (Mamba / GDN / KDA / lightning-attention hybrids): what one request's state
takes, the share of the KV budget carved out for states, and the running requests those states cap.

0.5.5 model_runner.handle_max_mamba_cache and init_memory_pool; the same rule in 0.5.23's kv_cache_configurator.
"""

from __future__ import annotations

from kvcalc.model.spec import ModelSpec

MAMBA_FULL_MEMORY_RATIO = 0.9  # server_args.py mamba_full_memory_ratio (0.5.5)
# With the radix cache, the request pool holds a third of the states (MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO).
STATES_PER_REQUEST = 3
# SGLang keeps a mixer's conv windows in bf16 (SGLANG_MAMBA_CONV_DTYPE) and its SSM / linear-attention state in
# float32, whatever the model's dtype (configs/mamba_utils.py Mamba2CacheParams.mamba_cache_per_req: --mamba-ssm-dtype,
# float32 by default, through 0.5.8; from 0.5.9 mamba2_state_dtype: SGLANG_MAMBA_SSM_DTYPE, else the config's
# mamba_ssm_dtype where its config class passes itself, else float32). vLLM keeps the model's dtype (the spec's
# state_bytes), so Qwen3-Next's state is about twice as large under SGLang. NOTE: a config naming a 16-bit
# mamba_ssm_dtype (none of the presets; Qwen3.5's name float32) is read as float32.
SSM_STATE_BYTES, CONV_STATE_BYTES = 4, 2


def state_bytes_per_request(spec: ModelSpec) -> int:
    """One request's recurrent state over every layer (stateless ones and mixers beside attention), as SGLang sizes
    it; a layer whose elements are not known apart (a GGUF's) as the spec gives it."""
    total = 0
    for run, n in spec.layer_groups():
        if run.state_elements:
            conv = run.state_elements - run.state_recurrent_elements
            total += n * (run.state_recurrent_elements * SSM_STATE_BYTES + conv * CONV_STATE_BYTES)
        else:
            total += n * run.state_bytes
    return total


def mamba_carve_out(rest: float, state_per_request: int) -> int:
    """The state pool's bytes (radix cache on): r / (1 + r) of what the weights and the held-back share leave,
    rounded down to whole requests' states."""
    raw = rest * MAMBA_FULL_MEMORY_RATIO / (1 + MAMBA_FULL_MEMORY_RATIO)
    return int(raw // state_per_request) * state_per_request


def mamba_requests(mamba_bytes: int, state_per_request: int) -> int:
    """The running requests a state pool of `mamba_bytes` allows."""
    return mamba_bytes // state_per_request // STATES_PER_REQUEST
