"""The one error boundary as a law: a config.json or GGUF header with any field replaced by a value of another type,
sign or size is either read (and its cache computed) or refused with kvcalc's own error, never another exception.
Mutating fixtures this way found internal errors in both readers (a group_size of 'abc', a head count of 'abc', a
block_count of 0, a tokenizer that is not an array, an fp8 block that is not two numbers)."""

import json
import os

from conftest import FIXTURES
from gguf_writer import gguf_bytes, llama_like
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcalc.cost.kvcache import cache_report
from kvcalc.errors import KvcalcError
from kvcalc.model.gguf.arch import spec_from_gguf
from kvcalc.model.gguf.reader import read_header
from kvcalc.model.hf.reader import spec_from_config

# Deterministic in CI (derandomize): the same examples each run. KVCALC_FUZZ_EXAMPLES=5000 searches afresh, at random
# (how the fields added to model/hf/fields.check_types were found).
EXAMPLES = int(os.environ.get("KVCALC_FUZZ_EXAMPLES", "200"))
FRESH = "KVCALC_FUZZ_EXAMPLES" in os.environ
DELETE = object()
# what a mutated field becomes: gone, null, a string, a float, a count of any sign or size, a short list, an object
values = st.one_of(
    st.just(DELETE),
    st.none(),
    st.text(max_size=4),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**12), 10**12),
    st.lists(st.integers(-3, 300), max_size=3),
    st.booleans(),
    st.just({"x": 1}),
)
# every fixture config, hand-made and real (tests/fixtures/configs, real_configs)
CONFIGS = sorted(
    str(p.relative_to(FIXTURES)) for d in ("configs", "real_configs") for p in (FIXTURES / d).glob("*.json")
)


def _paths(d, path=()):
    if isinstance(d, dict):
        for k, v in d.items():
            yield path + (k,)
            yield from _paths(v, path + (k,))


def _replace(doc: dict, path: tuple, value) -> None:
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value


def _read_or_refuse(read) -> None:
    try:
        spec = read()
        cache_report(spec, 2, 4096, "bf16")
    except KvcalcError:
        pass


@settings(max_examples=EXAMPLES, derandomize=not FRESH, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CONFIGS), st.data(), values)
def test_a_config_with_any_field_replaced_is_read_or_refused(name, data, value):
    doc = json.loads((FIXTURES / name).read_text())
    path = data.draw(st.sampled_from(list(_paths(doc))))
    _replace(doc, path, value)
    _read_or_refuse(lambda: spec_from_config(doc, "m", "m/config.json"))


gguf_values = st.one_of(
    st.just(DELETE),
    st.text(max_size=4),
    st.floats(allow_nan=False, width=32),
    st.integers(-(2**40), 2**40),
    st.lists(st.integers(-3, 300), min_size=1, max_size=3),
    st.booleans(),
)


@settings(max_examples=EXAMPLES, derandomize=not FRESH, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["llama", "qwen3", "gemma2", "phi3"]), st.data(), gguf_values)
def test_a_gguf_header_with_any_key_replaced_is_read_or_refused(arch, data, value):
    extra = {f"{arch}.attention.sliding_window": 512} if arch == "gemma2" else {}
    md, tensors = llama_like(arch, extra=extra)
    key = data.draw(st.sampled_from([k for k in md if k != "general.architecture"]))
    if value is DELETE:
        del md[key]
    else:
        md[key] = value
    raw = gguf_bytes(md, tensors, data=False)[0]
    _read_or_refuse(lambda: spec_from_gguf(read_header(lambda s, n: raw[s : s + n], "m.gguf", 4096), "m.gguf"))


MODELS = ["llama-3.1-8b", "deepseek-v3", "gemma-2-9b", "gpt-oss-120b", "qwen3.5-35b-a3b", "mixtral-8x7b", "mha"]
GPUS = ["h100", "a100", "b200", "rtx-4090", "mi300x", "m2-ultra"]
counts = st.one_of(st.integers(-2, 4096), st.sampled_from(["1k", "abc", "", "1..8", "-5"]))


@settings(
    max_examples=EXAMPLES // 4, derandomize=not FRESH, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    st.sampled_from(MODELS), st.sampled_from(GPUS), st.integers(-1, 16), counts, counts, st.one_of(st.none(), counts),
    st.sampled_from([None, "vllm", "sglang", "trtllm", "llamacpp", "tgi", "bogus"]),
    st.one_of(st.none(), st.integers(-1, 48)), st.sampled_from([None, "fp8", "int4", "q4_k_m", "zz"]),
)  # fmt: skip
def test_the_python_api_returns_a_result_or_raises_kvcalcs_error(
    model, gpu, tp, prompt, new, batch, engine, concurrency, dtype
):
    from kvcalc import api

    calls = [
        lambda: api.generate(
            model, gpu, prompt=prompt, new=new, batch=batch if batch is not None else 1, tp=tp, engine=engine,
            concurrency=concurrency, dtype=dtype,
        ),
        lambda: api.fit(model, gpu, seq=prompt, batch=batch if batch is not None else 1, tp=tp, engine=engine,
                        dtype=dtype, tpot_ms=50),
        lambda: api.cache(model, batch=batch if batch is not None else 1, seq=prompt, tp=tp, gpu=gpu, dtype=dtype),
        lambda: api.roofline(model, gpu, batch=batch if batch is not None else "1..8", seq=new, tp=tp, engine=engine),
    ]  # fmt: skip
    for call in calls:
        try:
            call()
        except KvcalcError:
            pass
