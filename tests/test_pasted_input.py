"""Issue 23's pasted input: hub URLs read as hub ids, and ORG/NAME@REV of a preset's alias."""

from __future__ import annotations

import pytest
from conftest import run, run_json

from kvcalc.errors import UsageError
from kvcalc.model.hubref import hub_id

REPO = "meta-llama/Meta-Llama-3-8B"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"https://huggingface.co/{REPO}", REPO),
        (f"https://huggingface.co/{REPO}/", REPO),
        (f"http://hf.co/{REPO}", REPO),
        (f"huggingface.co/{REPO}", REPO),
        (f"https://huggingface.co/{REPO}/tree/main", f"{REPO}@main"),
        (f"https://huggingface.co/{REPO}/tree/v1.0", f"{REPO}@v1.0"),
        (f"https://huggingface.co/{REPO}/blob/main/config.json", f"{REPO}@main"),
        (f"https://huggingface.co/{REPO}/resolve/0a1b2c3/config.json?download=true", f"{REPO}@0a1b2c3"),
        (f"https://huggingface.co/{REPO}/tree/refs%2Fpr%2F1", f"{REPO}@refs/pr/1"),  # a PR branch, quoted
        ("llama-3-8b", "llama-3-8b"),  # not a URL: unchanged
        ("acme/tiny@v1", "acme/tiny@v1"),
    ],
)
def test_hub_urls_read_as_hub_ids(url, expected):
    assert hub_id(url) == expected


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (f"https://huggingface.co/{REPO}/blob/main/model.safetensors", "points at model.safetensors"),
        ("https://huggingface.co/datasets/acme/data", "is a hub dataset, not a model"),
        ("https://huggingface.co/meta-llama", "names no model repository"),
        (f"https://huggingface.co/{REPO}/discussions/3", "reads a model repository's config.json"),
    ],
)
def test_urls_kvcalc_cannot_read_are_refused_in_one_line(url, says):
    with pytest.raises(UsageError, match=says):
        hub_id(url)
    result = run("cache", url)
    assert result.exit_code == 2 and result.stdout == "" and says in result.stderr
    assert result.stderr.count("\n") == 1


OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}


@pytest.mark.parametrize(
    "text",
    [
        f"https://huggingface.co/{REPO}",
        f"https://huggingface.co/{REPO}/tree/main",
        f"https://huggingface.co/{REPO}/blob/main/config.json",
        f"https://huggingface.co/{REPO}/resolve/main/config.json",
        f"{REPO}@main",
    ],
)
def test_a_presets_url_or_main_revision_is_the_preset_offline(text, monkeypatch):
    for k, v in OFFLINE.items():
        monkeypatch.setenv(k, v)
    out = run_json("cache", text, "--seq", "8192")
    # llama-3-8b: 32 layers x 8 KV heads x 128 x K and V x 2 B = 128 KiB per token; 8,192 tokens = 1 GiB
    assert out["model"] == "llama-3-8b" and out["total_bytes"] == 2**30


def test_another_revision_of_a_preset_says_what_the_preset_is(monkeypatch):
    for k, v in OFFLINE.items():
        monkeypatch.setenv(k, v)
    result = run("cache", f"{REPO}@0a1b2c3")
    assert result.exit_code != 0 and result.stdout == "" and result.stderr.count("\n") == 1
    assert f"the preset llama-3-8b is {REPO} at main" in result.stderr
    assert f"name {REPO} or {REPO}@main to use it offline" in result.stderr
