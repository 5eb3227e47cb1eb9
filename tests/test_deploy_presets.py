"""Issue 20's GPU preset facts: the four new presets against their datasheets, scale-up domains and
scale-out links, and dated, sourced prices."""

import pytest

from kvcalc.model import presets


@pytest.mark.parametrize(
    ("name", "memory", "bandwidth", "bf16", "link_each_way"),
    [
        # RTX A6000 datasheet: 48 GB GDDR6, 768 GB/s, tensor 309.7 TF sparse -> 154.8 dense; NVLink bridge 112.5 GB/s both ways
        ("rtx-a6000", 48e9, 768e9, 154.8, 56.25e9),
        # H800 SXM datasheet: H100 SXM's 80 GB HBM3 and 3.35 TB/s, BF16 1,979 TF sparse; NVLink 400 GB/s both ways
        ("h800", 80e9, 3.35e12, 989.4, 200e9),
        # A800 SXM datasheet: A100 SXM 80GB's HBM2e 2,039 GB/s and BF16 312 TF; NVLink 400 GB/s both ways
        ("a800", 80e9, 2.039e12, 312, 200e9),
        # L20 brief: 48 GB GDDR6, 864 GB/s, BF16 239 TF sparse -> 119.5; PCIe Gen4 x16, 64 GB/s both ways
        ("l20", 48e9, 864e9, 119.5, 32e9),
    ],
)
def test_new_presets_match_their_sources(name, memory, bandwidth, bf16, link_each_way):
    gpu = presets.get_gpu(name)
    assert gpu.memory_bytes == memory and gpu.hbm_bandwidth_bytes_per_s == bandwidth
    assert gpu.peak_dense_tflop_per_s["bf16"] == bf16
    assert gpu.link_bandwidth_bytes_per_s == link_each_way
    assert gpu.sources and gpu.scale_up_domain == 8


def test_scale_up_domains():
    for name in ("h100", "h200", "b200", "h800", "a800", "a100", "mi300x"):
        assert presets.get_gpu(name).scale_up_domain == 8, name
    assert presets.get_gpu("gb200").scale_up_domain == 72
    # one 400 Gb/s NIC per GPU: 50 GB/s each way
    assert presets.get_gpu("h100").scale_out_bandwidth_bytes_per_s == 400e9 / 8


def test_prices_are_dated_and_sourced():
    priced = [g for g in map(presets.get_gpu, presets.preset_names(presets.GPU_DIR)) if g.price_usd_per_hour]
    assert {g.name for g in priced} >= {"h100", "a100", "a40", "rtx-a6000"}
    for g in priced:
        assert g.price_source and "2023-24" in g.price_source
    assert presets.get_gpu("h100").price_usd_per_hour == 4.76  # HGX H100 component price
    assert presets.get_gpu("h100-pcie").price_usd_per_hour == 4.25  # Vidur's Feb-2024 H100 figure
