"""Number syntax, ranges, sizes and unit formatting."""

import pytest

from kvcalc.errors import UsageError
from kvcalc.units import elements_to_bytes, fmt_bytes, fmt_flops, fmt_rate, parse_bytes, parse_count, parse_range


@pytest.mark.parametrize(
    ("text", "value"), [("8k", 8192), ("128k", 131072), ("1m", 1048576), ("4096", 4096), ("8K", 8192), ("1.5k", 1536)]
)
def test_counts(text, value):
    assert parse_count(text) == value


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("1..64", [1, 2, 4, 8, 16, 32, 64]),
        ("8..64+8", [8, 16, 24, 32, 40, 48, 56, 64]),
        ("1,8,64", [1, 8, 64]),
        ("1..100", [1, 2, 4, 8, 16, 32, 64, 100]),
        ("1k,8k", [1024, 8192]),
        ("4", [4]),
    ],
)
def test_ranges(text, values):
    assert parse_range(text) == values


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("64..1", "runs backwards"),
        ("0", "at least 1"),
        ("-4", "at least 1"),
        ("abc", "not a number"),
        ("1.3k", "whole number"),
        ("4,096", "thousands separators"),  # not the list [4, 96]
        ("1,000,000", "thousands separators"),
        ("131,072", "thousands separators"),
    ],
)
def test_bad_ranges(text, message):
    with pytest.raises(UsageError, match=message):
        parse_range(text, "--batch")


def test_a_list_of_three_digit_items_is_still_a_list():
    assert parse_range("8,128,512") == [8, 128, 512]


def test_sizes():
    assert parse_bytes("52.79GiB") == int(52.79 * 2**30)
    assert parse_bytes("80GB") == 80 * 10**9
    assert parse_bytes("1024") == 1024
    with pytest.raises(UsageError):
        parse_bytes("lots")


def test_int4_is_half_a_byte_never_zero():
    assert elements_to_bytes(2, "int4") == 1
    assert elements_to_bytes(3, "int4") == 2  # rounded up to a whole byte
    assert elements_to_bytes(32, "mxfp4") == 17  # 4-bit values + one 8-bit scale per 32


def test_formatting_units():
    assert fmt_bytes(524288) == "512 KiB"
    assert fmt_bytes(16 * 2**30) == "16 GiB"
    assert fmt_bytes(14_000_000_000) == "13.04 GiB"
    assert fmt_rate(2.039e12) == "2.04 TB/s"
    assert fmt_flops(312e12) == "312 TFLOP/s"


def test_a_figure_that_rounds_up_takes_the_next_unit():
    from kvcalc.units import fmt_params, fmt_seconds

    # 2^40 - 2^20 B is 1,023.999 GiB: at two decimals that is 1.00 TiB, not "1,024.00 GiB"
    assert fmt_bytes(2**40 - 2**20) == "1.00 TiB"
    assert fmt_bytes(2**30 - 1) == "1.00 GiB" and fmt_bytes(1000 * 2**20) == "1,000 MiB"
    assert fmt_rate(999.999e12) == "1.00 PB/s" and fmt_rate(990e12) == "990 TB/s"
    assert fmt_seconds(0.9999999) == "1.00 s" and fmt_seconds(0.0042) == "4.20 ms"
    assert fmt_params(999.999e6) == "1.00B"
