"""ggml tensor types: id -> (name, elements per block, bytes per block), as ggml-common.h sizes the blocks.

Checked against ggml/src/ggml-common.h (the static_assert on each block_* struct) and ggml.c's
type_traits of llama.cpp ec98e2002; ids are ggml.h's enum ggml_type (removed ids are absent).
"""

from __future__ import annotations

from kvcalc.errors import SpecError

QK_K = 256  # elements in a K-quant / i-quant super-block

# id: (name, block elements, block bytes)
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("f32", 1, 4),
    1: ("f16", 1, 2),
    2: ("q4_0", 32, 18),  # ggml_half d + 16 nibble bytes
    3: ("q4_1", 32, 20),
    6: ("q5_0", 32, 22),
    7: ("q5_1", 32, 24),
    8: ("q8_0", 32, 34),  # ggml_half d + 32 int8
    9: ("q8_1", 32, 36),
    10: ("q2_K", QK_K, 84),
    11: ("q3_K", QK_K, 110),
    12: ("q4_K", QK_K, 144),
    13: ("q5_K", QK_K, 176),
    14: ("q6_K", QK_K, 210),
    15: ("q8_K", QK_K, 292),
    16: ("iq2_xxs", QK_K, 66),
    17: ("iq2_xs", QK_K, 74),
    18: ("iq3_xxs", QK_K, 98),
    19: ("iq1_s", QK_K, 50),
    20: ("iq4_nl", 32, 18),
    21: ("iq3_s", QK_K, 110),
    22: ("iq2_s", QK_K, 82),
    23: ("iq4_xs", QK_K, 136),
    24: ("i8", 1, 1),
    25: ("i16", 1, 2),
    26: ("i32", 1, 4),
    27: ("i64", 1, 8),
    28: ("f64", 1, 8),
    29: ("iq1_m", QK_K, 56),
    30: ("bf16", 1, 2),
    34: ("tq1_0", QK_K, 54),
    35: ("tq2_0", QK_K, 66),
    39: ("mxfp4", 32, 17),  # e8m0 scale + 16 fp4 nibble bytes
}
BY_NAME = {name: (name, elems, size) for name, elems, size in GGML_TYPES.values()}

# The cache types llama.cpp's -ctk / -ctv accept (common/arg.cpp kv_cache_types).
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


def type_name(type_id: int) -> str:
    try:
        return GGML_TYPES[type_id][0]
    except KeyError:
        raise SpecError(f"ggml tensor type {type_id} is not one kvcalc knows") from None


def row_bytes(type_name_: str, elements: int) -> int:
    """ggml_row_size: bytes of `elements` consecutive values (a whole number of blocks)."""
    _, block, size = BY_NAME[type_name_]
    if elements % block:
        raise SpecError(f"a {type_name_} row of {elements} elements is not a whole number of {block}-element blocks")
    return elements // block * size


def is_quantized(type_name_: str) -> bool:
    return BY_NAME[type_name_][1] > 1
