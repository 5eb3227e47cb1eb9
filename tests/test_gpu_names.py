"""A GPU as people spell it resolves to its preset (hardware/names.py through presets.get_gpu): nvidia-smi's
device names, aiconfigurator's system names, the reference table's ids, vendor and package words; a name
whose stated memory is another part's is refused, never matched to the nearest."""

import csv

import pytest
import yaml
from conftest import shared_path

from kvcalc.errors import NotFoundError
from kvcalc.hardware.names import Spelling, same_memory, spellings
from kvcalc.model import presets

# (spelling, preset): nvidia-smi's names are those the presets quote from public fixtures
# (h100.yaml, a100.yaml, l40s.yaml, gh200.yaml, v100.yaml).
SPELLED = [
    ("NVIDIA H100 80GB HBM3", "h100"),
    ("NVIDIA A100-SXM4-80GB", "a100"),
    ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
    ("Tesla V100-SXM2-32GB", "v100"),
    ("NVIDIA GH200 144G HBM3e", "gh200"),
    ("NVIDIA L40S", "l40s"),
    ("H100 SXM", "h100"),
    ("H100 SXM5 80GB", "h100"),
    ("H100 PCIe", "h100-pcie"),
    ("H100 NVL", "h100-nvl"),
    ("A100 80GB PCIe", "a100-pcie"),
    ("H200 SXM 141GB", "h200"),
    ("B200-SXM-180GB", "b200"),  # sold as 180 GB, announced as 192 GB: within the tolerance either way
    ("B200 192GB", "b200"),
    ("DGX B200", "b200"),
    ("AMD Instinct MI300X 192GB", "mi300x"),
    ("MI355X", "mi355x"),
    ("GeForce RTX 4090", "rtx-4090"),
    ("NVIDIA GeForce RTX 3090 24GB", "rtx-3090"),
    ("RTX 6000 Ada", "rtx-6000-ada"),
    ("Apple M2 Ultra", "m2-ultra"),
    ("Gaudi 3", "gaudi3"),
    ("GB200 NVL72", "gb200"),  # the rack, read as its GPU (the preset's scale-up domain is the rack's 72)
    ("GB300 NVL72", "gb300"),
]


@pytest.mark.parametrize(("spelled", "preset"), SPELLED)
def test_a_spelling_resolves_to_its_preset(spelled, preset):
    assert presets.get_gpu(spelled).name == preset


@pytest.mark.parametrize("spelled", ["H100 94GB", "A100 24GB", "GH200 480GB", "B200 141GB"])
def test_a_stated_memory_of_another_part_is_refused(spelled):
    # H100 NVL is the 94 GB H100; 480 GB is GH200's Grace-side LPDDR5X, not its GPU memory
    with pytest.raises(NotFoundError, match="unknown GPU"):
        presets.get_gpu(spelled)


def test_spellings_drop_vendor_then_package_then_a_checked_capacity():
    assert spellings("NVIDIA A100-SXM4-40GB") == [
        Spelling("a100-sxm4-40gb", None),
        Spelling("a100-40gb", None),
        Spelling("a100", 40_000_000_000),
    ]
    assert spellings("h200_sxm") == [Spelling("h200-sxm", None), Spelling("h200", None)]
    assert spellings("MI300X 192GiB")[-1] == Spelling("mi300x", 192 * 2**30)
    # two capacities: neither is dropped (which one the name means is not clear)
    assert all(s.memory_bytes is None for s in spellings("A100 40GB 80GB"))
    assert same_memory(None, 1) and same_memory(180_000_000_000, 192_000_000_000)
    assert not same_memory(94_000_000_000, 80_000_000_000)


def test_a_preset_file_path_is_never_respelled(tmp_path):
    with pytest.raises(NotFoundError):
        presets.get_gpu(str(tmp_path / "NVIDIA H100.yaml"))


# Reference ids without a preset, and why.
NOT_MODELLED = {
    "jetson-agx-orin-64gb": "an embedded module; its dense peaks are derived from sparse INT8",
    "dgx-spark-gb10": "no sourced BF16, FP16 or FP8 peak (only FP4)",
    "tpu7x-ironwood": "no TPU v7 preset",
    "trainium1": "no Trainium 1 preset",
    "inferentia2": "no Inferentia 2 preset",
}


def test_every_reference_id_resolves_to_the_part_it_names():
    ref = yaml.safe_load(shared_path("reference", "gpus.yaml").read_text())
    for entry in ref["accelerators"]:
        if entry["id"] in NOT_MODELLED:
            with pytest.raises(NotFoundError):
                presets.get_gpu(entry["id"])
            continue
        gpu = presets.get_gpu(entry["id"])
        assert gpu.memory_bytes == entry["memory_bytes"], entry["id"]
        assert gpu.hbm_bandwidth_bytes_per_s == entry["hbm_bandwidth"], entry["id"]


def test_every_aiconfigurator_system_resolves():
    # aiconfigurator's `system` column: h100_sxm, h200_sxm, b200_sxm, b300_sxm, gb200, gb300
    with shared_path("reference", "aic_silicon_sample.csv").open(newline="") as f:
        systems = {row["system"] for row in csv.DictReader(f)}
    assert len(systems) >= 6
    for system in systems:
        assert presets.get_gpu(system).name == system.removesuffix("_sxm")
