"""SGLang's pool of recurrent states (Mamba / GDN / KDA / lightning-attention hybrids): what one request's state
takes, the share of the KV budget carved out for states, and the running requests those states cap, by release.

0.5.5 model_runner.handle_max_mamba_cache and init_memory_pool; from 0.5.7 mem_cache/kv_cache_mixin.py, from 0.5.16
kv_cache_configurator.py; the prefix-cache strategy in server_args.py and arg_groups/overrides.py.
"""

from __future__ import annotations

from typing import NamedTuple

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
# --mamba-ssm-dtype's choices (server_args.py, 0.5.5-0.5.23; float32 unless given) and their bytes an element.
SSM_DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}


def check_ssm_dtype(value: str) -> str:
    """--mamba-ssm-dtype as SGLang's argparse takes it (one of SSM_DTYPES), or UsageError."""
    if value not in SSM_DTYPES:
        from kvcalc.errors import UsageError

        raise UsageError(f"--mamba-ssm-dtype must be one of {', '.join(SSM_DTYPES)}, got {value!r}")
    return value


def state_bytes_per_request(spec: ModelSpec, ssm_dtype: str | None = None) -> int:
    """One request's recurrent state over every layer (stateless ones and mixers beside attention), as SGLang sizes
    it, its SSM / linear-attention state in `ssm_dtype` (--mamba-ssm-dtype; None: float32); a layer whose elements
    are not known apart (a GGUF's) as the spec gives it."""
    ssm = SSM_DTYPES[ssm_dtype] if ssm_dtype else SSM_STATE_BYTES
    total = 0
    for run, n in spec.layer_groups():
        if run.state_elements:
            conv = run.state_elements - run.state_recurrent_elements
            total += n * (run.state_recurrent_elements * ssm + conv * CONV_STATE_BYTES)
        else:
            total += n * run.state_bytes
    return total


# Which prefix cache a hybrid runs with by default (server_args.py; arg_groups/overrides.py from 0.5.15), read in the
# 0.5.5-0.5.23 wheels. "off": no radix cache for its states, so one state slot a request; "no_buffer": the radix
# cache with 3 slots a running request (MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO); "extra_buffer": 2 more for the
# ping-pong tracking buffer with the overlap scheduler on (get_mamba_tracking_slots), the default from 0.5.14 for
# the architectures that support it on the default triton linear-attention backend.
EXTRA_BUFFER_FROM = (0, 5, 14)
EXTRA_BUFFER_ARCHS = frozenset(
    {
        "Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
        "BailingMoeV2_5ForCausalLM", "FalconH1ForCausalLM", "GraniteMoeHybridForCausalLM", "NemotronHForCausalLM",
        "BailingMoeV3ForCausalLM",  # in the list from its first release, 0.5.19
        "KimiK3ForConditionalGeneration",  # in the list from its first release, 0.5.17 ("KDA uses the same ping-pong")
    }
)  # fmt: skip
# (first release with a radix cache, first with extra_buffer) where an architecture differs from the rule above:
# Nemotron-H and Falcon-H1 ran with the radix cache forced off up to 0.5.6; Ling 2.5 (served from 0.5.9) until
# 0.5.12; Kimi Linear until 0.5.13, with extra_buffer from 0.5.16.
STRATEGY_FROM = {
    "NemotronHForCausalLM": ((0, 5, 7), EXTRA_BUFFER_FROM),
    "FalconH1ForCausalLM": ((0, 5, 7), EXTRA_BUFFER_FROM),
    "BailingMoeV2_5ForCausalLM": ((0, 5, 13), EXTRA_BUFFER_FROM),
    "KimiLinearForCausalLM": ((0, 5, 14), (0, 5, 16)),
}
# Radix cache off up to 0.5.8: max_mamba_cache_size is --max-running-requests, else 512; from 0.5.9 the budget's.
FIXED_SLOTS_UNTIL, FIXED_SLOTS = (0, 5, 8), 512
# From 0.5.17 the pool's padding slot is charged: K = (budget - one state) // state, K + 1 states subtracted.
PADDING_CHARGED_FROM = (0, 5, 17)
# From 0.5.17 a pipeline stage sizes its states by the busiest stage's share of the stateful layers
# (kv_cache_configurator.py pp_layer_scale); before, each stage by the whole model's state a request.
STAGE_SHARE_FROM = (0, 5, 17)
# --max-mamba-cache-size K is taken as given from 0.5.7 (K // dp a rank under DP attention); 0.5.5 and 0.5.6 keep it
# only with the radix cache off, and size the pool from the memory ratio otherwise (handle_max_mamba_cache).
GIVEN_SIZE_FROM = (0, 5, 7)


def strategy(release: tuple[int, int, int], architecture: str | None) -> str:
    """The prefix cache `architecture`'s states run with under `release` launched with its defaults."""
    radix, extra = STRATEGY_FROM.get(architecture or "", ((0, 0, 0), EXTRA_BUFFER_FROM))
    if release < radix:
        return "off"
    in_list = architecture in EXTRA_BUFFER_ARCHS or architecture in STRATEGY_FROM
    return "extra_buffer" if release >= extra and in_list else "no_buffer"


def slots_per_request(release: tuple[int, int, int], kind: str) -> int:
    """State slots the pool keeps for each running request: max_running_requests <= max_mamba_cache_size // this.
    0.5.7 added the tracking buffer's 2 to any radix-cached model's ratio, no_buffer too (kv_cache_mixin.py)."""
    if kind == "off":
        return 1
    return 5 if kind == "extra_buffer" or release == (0, 5, 7) else STATES_PER_REQUEST


class StatePool(NamedTuple):
    bytes: int  # carved out of what the weights and the held-back share leave, before the KV pool
    slots: int  # max_mamba_cache_size
    per_request: int  # slots a running request holds: the cap on max_running_requests is slots // this


def stage_state(release: tuple[int, int, int], spec: ModelSpec, per_request: int, stages: list[range]) -> int:
    """One rank's state a request as SGLang sizes its pool under pipeline parallelism: from 0.5.17 the whole model's
    times the busiest stage's share of the stateful layers (`int(per_req * pp_layer_scale)`), the same on every
    stage; before, and with one stage, the whole model's."""
    if len(stages) == 1 or release < STAGE_SHARE_FROM:
        return per_request
    stateful = [i for i, run in enumerate(spec.expanded_layers()) if run.state_bytes or run.state_elements]
    if not stateful:
        return per_request
    busiest = max(sum(1 for i in stateful if i in stage) for stage in stages)
    return int(per_request * (busiest / len(stateful)))


def state_pool(
    release: tuple[int, int, int],
    architecture: str | None,
    rest: float,
    state: int,
    max_running: int | None,
    size: int | None = None,
    dp: int = 1,
) -> StatePool:
    """The state pool of one rank, `state` bytes a request, from `rest` (0.5.5 handle_max_mamba_cache; 0.5.23
    kv_cache_configurator._handle_max_mamba_cache), without speculative decoding: `size` states
    (--max-mamba-cache-size, over `dp` DP-attention ranks) where the release takes it; else r / (1 + r) of rest
    (mamba_full_memory_ratio), in whole states; without the radix cache, up to 0.5.8, 512 states or
    --max-running-requests', and from 0.5.9 --max-running-requests' where given."""
    kind = strategy(release, architecture)
    per = slots_per_request(release, kind)
    if size is not None and (release >= GIVEN_SIZE_FROM or kind == "off"):
        slots = size // dp if release >= GIVEN_SIZE_FROM else size
        return StatePool((slots + (release >= PADDING_CHARGED_FROM)) * state, slots, per)
    if kind == "off" and (max_running is not None or release <= FIXED_SLOTS_UNTIL):
        slots = max_running or FIXED_SLOTS
        return StatePool(slots * state, slots, per)
    budget = rest * MAMBA_FULL_MEMORY_RATIO / (1 + MAMBA_FULL_MEMORY_RATIO)
    if release >= PADDING_CHARGED_FROM:
        slots = max(int((budget - state) // state), 0)
        return StatePool((slots + 1) * state, slots, per)
    slots = int(budget // state)
    return StatePool(slots * state, slots, per)


# From 0.5.13 SGLang refuses to start when there are no state slots (handle_max_mamba_cache) or they leave no running
# request (the pool configuration's max_num_reqs).
TOO_FEW_REFUSED_FROM = (0, 5, 13)


def too_few_states(release: tuple[int, int, int], states: StatePool) -> str:
    """Why SGLang serves nothing when its state slots hold no request (max_mamba_cache_size // the slots a request
    takes is 0: a small --max-mamba-cache-size, or DP attention dividing it): from 0.5.13 its RuntimeError."""
    if release >= TOO_FEW_REFUSED_FROM and states.slots <= 0:
        return (
            "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
            f"Computed max_mamba_cache_size={states.slots}"
        )
    if release >= TOO_FEW_REFUSED_FROM:
        return (
            "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
            f"max_mamba_cache_size={states.slots}, mamba_ratio={states.per_request}, resulting max_num_reqs=0."
        )
    return (
        f"max_mamba_cache_size {states.slots} holds no running request at {states.per_request} state slots each "
        "(max_running_requests 0)"
    )


def size_warnings(
    spec: ModelSpec, release_text: str, max_mamba_cache_size: int | None, ssm_dtype: str | None = None
) -> list[str]:
    """Where SGLang does not read --max-mamba-cache-size or --mamba-ssm-dtype, said so: a model without recurrent
    states, or a release that sizes the states from the memory ratio whatever K says (state_pool)."""
    given = [f for f, v in (("--max-mamba-cache-size", max_mamba_cache_size), ("--mamba-ssm-dtype", ssm_dtype)) if v]
    if not given:
        return []
    from kvcalc.engines.sglang.release import parse_release

    if not state_bytes_per_request(spec):
        flags = " and ".join(given)
        return [f"{flags} {'change' if len(given) > 1 else 'changes'} nothing: {spec.name} keeps no recurrent state, "
                "so SGLang has no state pool to size"]  # fmt: skip
    release = parse_release(release_text)
    if max_mamba_cache_size and release < GIVEN_SIZE_FROM and strategy(release, spec.architecture) != "off":
        return [
            f"--max-mamba-cache-size {max_mamba_cache_size} changes nothing: SGLang {release_text} takes it only with "
            "the radix cache off and sizes the states from mamba_full_memory_ratio (taken as given from 0.5.7)"
        ]
    return []
