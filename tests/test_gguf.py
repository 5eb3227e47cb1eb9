"""GGUF files: the header and tensor table read from the front of the file only, the ggml type
sizes, metadata -> ModelSpec, one-line errors, and the hub path by HTTP range requests."""

import json
import os
import struct
import subprocess
import sys

import ggufhub
import pytest
from conftest import FIXTURES, run, run_json
from gguf_writer import gguf_bytes, llama_like

from kvcalc.errors import SpecError
from kvcalc.model.gguf.arch import quant_label, spec_from_gguf
from kvcalc.model.gguf.hub import group_files
from kvcalc.model.gguf.reader import read_header
from kvcalc.model.gguf.types import BY_NAME, row_bytes


def header_of(data: bytes, name: str = "m.gguf", chunk: int = 4096):
    return read_header(lambda s, n: data[s : s + n], name, chunk)


def test_block_sizes_are_ggml_commons():
    # ggml-common.h static_asserts: (bytes, elements) per block
    expected = {
        "q4_0": (18, 32), "q4_1": (20, 32), "q5_0": (22, 32), "q5_1": (24, 32), "q8_0": (34, 32), "mxfp4": (17, 32),
        "iq4_nl": (18, 32), "q2_K": (84, 256), "q3_K": (110, 256), "q4_K": (144, 256), "q5_K": (176, 256),
        "q6_K": (210, 256), "iq2_xxs": (66, 256), "iq2_xs": (74, 256), "iq2_s": (82, 256), "iq3_xxs": (98, 256),
        "iq3_s": (110, 256), "iq1_s": (50, 256), "iq1_m": (56, 256), "iq4_xs": (136, 256), "tq1_0": (54, 256),
        "tq2_0": (66, 256), "f16": (2, 1), "bf16": (2, 1), "f32": (4, 1),
    }  # fmt: skip
    assert {k: (BY_NAME[k][2], BY_NAME[k][1]) for k in expected} == expected
    # q8_0 is 34 bytes per 32 elements, not 1 byte per element (Ollama's old estimator: 6% under)
    assert row_bytes("q8_0", 4096) == 4352 and row_bytes("q4_0", 4096) == 2304


def test_header_and_tensor_table_give_the_architecture_and_exact_weight_bytes():
    md, tensors = llama_like(layers=4, hidden=256, heads=8, kv_heads=2, ff=512, vocab=1000)
    data, header_len = gguf_bytes(md, tensors)
    h = header_of(data)
    assert h.version == 3 and len(h.tensors) == len(tensors) and h.data_offset == -(-header_len // 32) * 32
    spec = spec_from_gguf(h, "tiny-Q4_K_M.gguf")
    assert (spec.num_layers, spec.hidden_size, spec.num_heads, spec.kv_heads, spec.vocab_size) == (4, 256, 8, 2, 1000)
    assert spec.intermediate_size == 512 and not spec.tie_embeddings and spec.max_position_embeddings == 8192
    # q4_K: 144 B per 256; q6_K 210 per 256; f32 norms. token_embd 256 x 1000 in q4_K = 1000 rows x 144 B.
    by_name = {t.name: t.nbytes for t in h.tensors}
    assert by_name["token_embd.weight"] == 1000 * 144
    assert by_name["blk.0.attn_q.weight"] == 256 * 144 and by_name["blk.0.ffn_down.weight"] == 256 * (512 // 256 * 210)
    assert by_name["blk.0.attn_norm.weight"] == 256 * 4
    # every tensor's bytes, 32-aligned, is exactly the data section the writer laid out
    assert sum(-(-n // 32) * 32 for n in by_name.values()) == len(data) - h.data_offset


def test_gemma3_sliding_pattern_and_deepseek_mla_from_metadata():
    md, t = llama_like("gemma3", layers=18, hidden=640, heads=4, kv_heads=1, ff=2048, wtype="q8_0", tied=True,
                       extra={"gemma3.attention.sliding_window": 512, "gemma3.attention.key_length": 256,
                              "gemma3.attention.value_length": 256})  # fmt: skip
    spec = spec_from_gguf(header_of(gguf_bytes(md, t, data=False)[0]), "gemma-3-270m-it-Q8_0.gguf")
    kinds = [(r.kind.value, n) for r, n in spec.layer_groups()]
    assert kinds == [("sliding", 15), ("full", 3)] and spec.head_dim == 256 and spec.tie_embeddings
    assert [r.kind.value for r in spec.expanded_layers()][:6] == ["sliding"] * 5 + ["full"]
    md = {
        "general.architecture": "deepseek2", "deepseek2.block_count": 61, "deepseek2.embedding_length": 7168,
        "deepseek2.attention.head_count": 128, "deepseek2.attention.head_count_kv": 1,
        "deepseek2.attention.key_length": 576, "deepseek2.attention.value_length": 512,
        "deepseek2.attention.key_length_mla": 192, "deepseek2.attention.value_length_mla": 128,
        "deepseek2.attention.kv_lora_rank": 512, "deepseek2.rope.dimension_count": 64,
        "deepseek2.attention.q_lora_rank": 1536, "deepseek2.feed_forward_length": 18432,
        "deepseek2.expert_count": 256, "deepseek2.expert_used_count": 8, "deepseek2.expert_feed_forward_length": 2048,
        "deepseek2.leading_dense_block_count": 3, "deepseek2.vocab_size": 129280,
    }  # fmt: skip
    spec = spec_from_gguf(header_of(gguf_bytes(md, [("token_embd.weight", (7168, 129280), "q4_K")])[0]), "ds.gguf")
    assert spec.is_mla and (spec.kv_lora_rank, spec.qk_rope_head_dim, spec.qk_nope_head_dim, spec.v_head_dim) == (
        512, 64, 128, 128,
    )  # fmt: skip
    assert spec.experts == 256 and spec.dense_layers == 3
    # mistral4: llama_model_mistral4 reuses deepseek2's loader (models.h), so the same keys read the same model
    md4 = {k.replace("deepseek2.", "mistral4."): v for k, v in md.items()} | {"general.architecture": "mistral4"}
    md4["mistral4.expert_shared_count"] = md["deepseek2.expert_shared_count"] = 1
    same = [
        spec_from_gguf(header_of(gguf_bytes(m, [("token_embd.weight", (7168, 129280), "q4_K")])[0]), "m.gguf")
        for m in (md, md4)
    ]
    assert same[0].model_dump(exclude={"name", "source"}) == same[1].model_dump(exclude={"name", "source"})
    assert same[1].shared_expert_intermediate_size == 2048 and same[1].is_mla


def test_quant_labels_from_names_and_split_parts_grouped():
    assert quant_label("Qwen3-8B-Q4_K_M.gguf") == "Q4_K_M"
    assert quant_label("gemma-3-27b-it-UD-Q4_K_XL.gguf") == "UD-Q4_K_XL"
    assert quant_label("Q8_0/DeepSeek-V3-Q8_0-00001-of-00016.gguf") == "Q8_0"
    assert quant_label("model-IQ4_XS.gguf") == "IQ4_XS" and quant_label("gpt-oss-20b-MXFP4.gguf") == "MXFP4"
    files = [("a-Q8_0-00002-of-00002.gguf", 5), ("a-Q8_0-00001-of-00002.gguf", 7), ("a-Q4_K_M.gguf", 6),
             ("mmproj-F16.gguf", 1), ("README.md", 1)]  # fmt: skip
    groups = group_files(files)
    assert [(g.label, g.paths, g.size_bytes) for g in groups] == [
        ("Q4_K_M", ("a-Q4_K_M.gguf",), 6),
        ("Q8_0", ("a-Q8_0-00001-of-00002.gguf", "a-Q8_0-00002-of-00002.gguf"), 12),
    ]


def _one_line_error(path, *args):
    r = run("cache", str(path), *args)
    assert r.exit_code == 1, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr
    return lines[0]


def test_bad_files_get_one_line_saying_what_is_wrong(tmp_path):
    md, t = llama_like()
    good, header_len = gguf_bytes(md, t)
    cases = {
        "empty.gguf": (b"", "not a GGUF file: it is empty"),
        "config.gguf": (b'{"model_type": "llama"}', "not a GGUF file: it starts like JSON"),
        "zip.gguf": (b"PK\x03\x04" + b"\0" * 64, "not a GGUF file: it starts with b'PK\\x03\\x04'"),
        "trunc.gguf": (good[: header_len // 2], "truncated GGUF: the header needs byte"),
        "v1.gguf": (b"GGUF" + struct.pack("<I", 1) + b"\0" * 64, "GGUF version 1 is not supported"),
        "be.gguf": (b"GGUF" + struct.pack(">I", 3) + b"\0" * 64, "a big-endian GGUF file"),
    }
    for name, (data, message) in cases.items():
        (tmp_path / name).write_bytes(data)
        assert message in _one_line_error(tmp_path / name), name
    # an unknown ggml type id (here 31, a removed one) is named
    bad = good.replace(struct.pack("<IQ", 12, 0), struct.pack("<IQ", 31, 0), 1)
    (tmp_path / "type.gguf").write_bytes(bad)
    assert "has ggml type 31, which kvcalc does not know" in _one_line_error(tmp_path / "type.gguf")
    # an architecture kvcalc does not read
    md2, t2 = llama_like("bert")
    (tmp_path / "bert.gguf").write_bytes(gguf_bytes(md2, t2, data=False)[0])
    assert "GGUF architecture 'bert' is not one kvcalc reads" in _one_line_error(tmp_path / "bert.gguf")


def test_a_local_gguf_is_a_model_everywhere_and_only_its_header_is_read(tmp_path, monkeypatch):
    md, t = llama_like(layers=4, hidden=256, heads=8, kv_heads=2)
    data, header_len = gguf_bytes(md, t)
    path = tmp_path / "tiny-Q4_K_M.gguf"
    path.write_bytes(data + b"\0" * (8 << 20))  # 8 MiB more tensor data that must not be read
    out = run_json("cache", path, "--seq", "1024")
    assert out["bytes_per_token"] == 4 * 2 * 2 * 32 * 2  # layers x K,V x kv heads x head dim x bf16
    # a GGUF under another name is recognised by its magic, not parsed as JSON
    other = tmp_path / "model.bin"
    other.write_bytes(data)
    assert run_json("cache", other, "--seq", "1024")["bytes_per_token"] == out["bytes_per_token"]
    from kvcalc.model.gguf.reader import read_local

    assert read_local(str(path)).bytes_read < 2 << 20 < len(data) + (8 << 20)


@pytest.fixture
def gguf_repo(tmp_path):
    md, t = llama_like(layers=4, hidden=512, heads=8, kv_heads=2, ff=1024, vocab=2000)
    q4, header_q4 = gguf_bytes(md, t)
    md8, t8 = llama_like(layers=4, hidden=512, heads=8, kv_heads=2, ff=1024, vocab=2000, wtype="q8_0")
    q8, header_q8 = gguf_bytes(md8, t8)
    pad = b"\0" * (6 << 20)  # the data the header read must never reach
    files = {"acme/Tiny-GGUF": {"Tiny-Q4_K_M.gguf": q4 + pad, "Tiny-Q8_0.gguf": q8 + pad, "README.md": b"hi"}}
    server, url = ggufhub.start(files)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=url, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_ETAG_TIMEOUT="5")
    yield env, {"Tiny-Q4_K_M.gguf": (header_q4, len(q4) + len(pad)), "Tiny-Q8_0.gguf": (header_q8, len(q8) + len(pad))}
    server.shutdown()


def kvcalc_cli(env, *args):
    return subprocess.run([sys.executable, "-m", "kvcalc", *args], env=env, capture_output=True, text=True, timeout=60)


def test_hub_repo_lists_every_quant_and_reads_only_headers_by_range(gguf_repo):
    env, sizes = gguf_repo
    done = kvcalc_cli(
        env, "fit", "acme/Tiny-GGUF", "--gpu", "rtx-4090", "--engine", "llamacpp", "--seq", "4k", "-f", "json"
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert [r["quant"] for r in out["rows"]] == ["Q4_K_M", "Q8_0"]
    assert all(r["fits_fully"] for r in out["rows"]) and out["rows"][0]["file_bytes"] == sizes["Tiny-Q4_K_M.gguf"][1]
    from kvcalc.model.gguf.hub import FIRST_CHUNK

    for name, (header_len, size) in sizes.items():
        ranges = [(s, e) for p, s, e in ggufhub.GgufHub.served if p == name]
        # one range request from byte 0, within the first chunk: the header, never the 6 MiB of tensor data
        assert ranges and ranges[0][0] == 0 and header_len < FIRST_CHUNK
        assert sum(e - s for s, e in ranges) <= FIRST_CHUNK < size // 4
    assert "README.md" not in {p for p, _, _ in ggufhub.GgufHub.served}


def test_hub_quant_pick_and_errors(gguf_repo):
    env, _ = gguf_repo
    done = kvcalc_cli(env, "cache", "acme/Tiny-GGUF:Q8_0", "--engine", "llamacpp", "--seq", "4k", "-f", "json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["quant"] == "Q8_0" and out["model"] == "acme/Tiny-GGUF:Q8_0"
    done = kvcalc_cli(env, "cache", "acme/Tiny-GGUF:Q2_K", "--engine", "llamacpp")
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        "kvcalc: error: acme/Tiny-GGUF has no quant matching 'Q2_K' (its quants: Q4_K_M, Q8_0)"
    ]


def test_reader_refuses_a_corrupt_count_without_reading_on():
    data = b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 1)
    with pytest.raises(SpecError, match="corrupt GGUF header"):
        header_of(data)


def test_unreachable_hub_is_one_line_within_seconds(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf"), HF_HUB_ETAG_TIMEOUT="2")
    done = kvcalc_cli(env, "fit", "acme/Tiny-GGUF", "--gpu", "rtx-4090", "--engine", "llamacpp")
    assert done.returncode == 1 and done.stderr.startswith(
        "kvcalc: error: acme/Tiny-GGUF: the hub could not be reached"
    )
    assert len(done.stderr.strip().splitlines()) == 1


def test_split_gguf_parts_are_read_together(tmp_path):
    md, t = llama_like(layers=4)
    first = [x for x in t if not x[0].startswith(("blk.2.", "blk.3.", "output"))]
    second = [x for x in t if x not in first]
    md1 = {**md, "split.no": 0, "split.count": 2}
    (tmp_path / "tiny-Q4_K_M-00001-of-00002.gguf").write_bytes(gguf_bytes(md1, first)[0])
    (tmp_path / "tiny-Q4_K_M-00002-of-00002.gguf").write_bytes(gguf_bytes({"split.no": 1, "split.count": 2}, second)[0])
    out = run_json("cache", tmp_path / "tiny-Q4_K_M-00001-of-00002.gguf", "--engine", "llamacpp", "--seq", "1k")
    whole = tmp_path / "whole-Q4_K_M.gguf"
    whole.write_bytes(gguf_bytes(md, t)[0])
    ref = run_json("cache", whole, "--engine", "llamacpp", "--seq", "1k")
    for key in ("model_buffer_bytes", "cpu_mapped_bytes", "kv_bytes"):
        assert out["llamacpp"][key] == ref["llamacpp"][key], key
    (tmp_path / "tiny-Q4_K_M-00002-of-00002.gguf").unlink()
    r = run("cache", tmp_path / "tiny-Q4_K_M-00001-of-00002.gguf")
    assert r.exit_code == 1 and "split GGUF part(s) missing beside it: tiny-Q4_K_M-00002-of-00002.gguf" in r.stderr


def test_hybrid_layers_recurrent_as_llamacpp_marks_them():
    from kvcalc.engines.llamacpp.eras import era
    from kvcalc.engines.llamacpp.kv import kv_parts

    ssm = {"ssm.conv_kernel": 4, "ssm.inner_size": 1024, "ssm.state_size": 128, "ssm.group_count": 1}
    # qwen3next: every 4th layer attends, the rest are recurrent; Mamba-style state
    # (d_conv - 1)(d_inner + 2 n_group d_state) + d_state d_inner = 3,840 + 131,072 f32 per layer and sequence
    md, t = llama_like("qwen3next", layers=8, extra={f"qwen3next.{k}": v for k, v in ssm.items()})
    spec = spec_from_gguf(header_of(gguf_bytes(md, t, data=False)[0]), "q3n.gguf")
    assert [r.kind.value for r in spec.expanded_layers()] == (["stateless"] * 3 + ["full"]) * 2
    parts = {p.cache: p for p in kv_parts(spec, 4096, era(None), parallel=2)[0]}
    assert parts["recurrent"].bytes == 6 * 2 * 4 * (3840 + 131072) and parts["non-SWA"].layers == 2
    # nemotron_h: no KV heads and no MLP = a Mamba layer; no KV heads but an MLP = an MLP-only layer
    extra = {"nemotron_h.attention.head_count_kv": [0, 0, 2, 0], "nemotron_h.feed_forward_length": [0, 512, 0, 512]}
    md, t = llama_like("nemotron_h", layers=4, extra={**extra, **{f"nemotron_h.{k}": v for k, v in ssm.items()}})
    spec = spec_from_gguf(header_of(gguf_bytes(md, t, data=False)[0]), "nh.gguf")
    assert [(r.kind.value, r.state_bytes) for r in spec.expanded_layers()] == [
        ("stateless", 4 * (3840 + 131072)), ("stateless", 0), ("full", 0), ("stateless", 0),
    ]  # fmt: skip


@pytest.mark.parametrize("arch", ["qwen35", "qwen35moe"])
def test_qwen35_gguf_reads_as_its_loader_marks_recurrent_layers(arch):
    from kvcalc.engines.llamacpp.eras import era
    from kvcalc.engines.llamacpp.kv import kv_parts

    # src/models/qwen35.cpp / qwen35moe.cpp: attention.recurrent_layers where the file lists it, else every layer
    # but each full_attention_interval-th (4) is a Gated DeltaNet layer, its state Mamba-style
    # (d_conv - 1)(d_inner + 2 n_group d_state) + d_state d_inner = 3 x (1,024 + 256) + 131,072 f32
    ssm = {"ssm.conv_kernel": 4, "ssm.inner_size": 1024, "ssm.state_size": 128, "ssm.group_count": 1}
    moe = {"expert_count": 8, "expert_used_count": 2, "expert_feed_forward_length": 64} if arch == "qwen35moe" else {}
    md, t = llama_like(arch, layers=8, extra={f"{arch}.{k}": v for k, v in {**ssm, **moe}.items()})
    spec = spec_from_gguf(header_of(gguf_bytes(md, t, data=False)[0]), f"{arch}.gguf")
    assert [r.kind.value for r in spec.expanded_layers()] == (["stateless"] * 3 + ["full"]) * 2
    assert spec.experts == (8 if moe else 0)
    parts = {p.cache: p for p in kv_parts(spec, 4096, era(None), parallel=1)[0]}
    assert parts["recurrent"].bytes == 6 * 4 * (3 * 1280 + 131072) and parts["non-SWA"].layers == 2
    md[f"{arch}.attention.recurrent_layers"] = [True, False] * 4
    spec = spec_from_gguf(header_of(gguf_bytes(md, t, data=False)[0]), f"{arch}.gguf")
    assert [r.kind.value for r in spec.expanded_layers()] == ["stateless", "full"] * 4


def test_nemotron_h_moe_gguf_loads_as_nemotron_h():
    # llama_model_nemotron_h_moe reuses nemotron_h's loader: a layer without KV heads and without an MLP is Mamba-2,
    # one without KV heads but with an MLP (here a MoE) holds nothing
    ssm = {"ssm.conv_kernel": 4, "ssm.inner_size": 1024, "ssm.state_size": 128, "ssm.group_count": 8}
    extra = {
        "attention.head_count_kv": [0, 0, 2, 0], "feed_forward_length": [0, 512, 0, 512], "expert_count": 8,
        "expert_used_count": 2, "expert_feed_forward_length": 64, "expert_shared_feed_forward_length": 128, **ssm,
    }  # fmt: skip
    md, t = llama_like("nemotron_h_moe", layers=4, extra={f"nemotron_h_moe.{k}": v for k, v in extra.items()})
    spec = spec_from_gguf(header_of(gguf_bytes(md, t, data=False)[0]), "nh-moe.gguf")
    state = 4 * (3 * (1024 + 2 * 8 * 128) + 128 * 1024)
    assert [(r.kind.value, r.state_bytes) for r in spec.expanded_layers()] == [
        ("stateless", state), ("stateless", 0), ("full", 0), ("stateless", 0),
    ]  # fmt: skip
    assert (spec.experts, spec.shared_expert_intermediate_size) == (8, 128)


def test_gemma3n_gguf_caches_its_first_twenty_layers_and_keeps_per_layer_embeddings_on_the_cpu(tmp_path):
    # src/models/gemma3n.cpp: load_swa_pattern(ml, 5) (four sliding layers, then a full one) and n_layer_kv_from_start
    # 20: of E4B's 35 layers, 0-19 hold K and V (16 sliding over 512 tokens, 4 full), 20-34 read an earlier layer's
    md, t = llama_like("gemma3n", layers=35, hidden=256, heads=8, kv_heads=2)
    md.update({"gemma3n.attention.sliding_window": 512, "gemma3n.attention.key_length": 256,
               "gemma3n.attention.value_length": 256})  # fmt: skip
    path = tmp_path / "gemma-3n-E4B-it-Q8_0.gguf"
    path.write_bytes(gguf_bytes(md, t)[0])
    out = run_json("cache", path, "--seq", "8192")
    # K and V x 2 KV heads x 256 x 2 B = 2,048 B a layer and token
    assert out["total_bytes"] == 4 * 2048 * 8192 + 16 * 2048 * 512
    # per_layer_token_embd is an input-layer tensor (llama-arch.cpp LLM_TENSOR_INFOS): mapped on the CPU with
    # token_embd, not placed on the first GPU with the layers; the AltUp projections go with the output layer
    ple = ("per_layer_token_embd.weight", (256 * 35, 1000), "q8_0")
    altup = ("altup_proj.weight", (256, 256, 3), "f16")
    (tmp_path / "with.gguf").write_bytes(gguf_bytes(md, [*t, ple, altup])[0])
    base = run_json("cache", path, "--seq", "1024", "--gpu", "h100", "--engine", "llamacpp")["llamacpp"]
    more = run_json("cache", tmp_path / "with.gguf", "--seq", "1024", "--gpu", "h100", "--engine", "llamacpp")
    more = more["llamacpp"]
    assert more["cpu_mapped_bytes"] - base["cpu_mapped_bytes"] == 256 * 35 * 1000 // 32 * 34  # q8_0: 34 B / 32
    gpu = more["model_buffer_bytes"] - base["model_buffer_bytes"]
    assert 256 * 256 * 3 * 2 <= gpu < 256 * 256 * 3 * 2 + 1024  # the f16 AltUp projection, as allocated


def test_gemma4_gguf_reads_as_the_hub_config_does(tmp_path):
    # src/models/gemma4.cpp and llama_hparams: sliding_window_pattern one bool a layer; a sliding layer's head
    # key_length_swa wide, a full layer's key_length; head_count_kv per layer; no attn_v on a full layer: Vcur =
    # Kcur. Gemma 4 26B-A4B's shape: the spec its config.json gives (model_presets/gemma-4-26b-a4b.yaml)
    from kvcalc.cost.kvcache import bytes_per_token
    from kvcalc.model.presets import get_model

    extra = {
        "attention.sliding_window": 1024, "attention.sliding_window_pattern": [True] * 5 + [False],  # x 5
        "attention.key_length": 512, "attention.value_length": 512, "attention.key_length_swa": 256,
        "attention.value_length_swa": 256, "attention.head_count_kv": [8] * 5 + [2],
        "expert_count": 128, "expert_used_count": 8, "expert_feed_forward_length": 704,
    }  # fmt: skip
    md, t = llama_like("gemma4", layers=30, hidden=2816, heads=16, kv_heads=8, ff=2112)
    md.update({f"gemma4.{k}": v * 5 if isinstance(v, list) else v for k, v in extra.items()})
    t = [x for x in t if not any(x[0] == f"blk.{il}.attn_v.weight" for il in range(5, 30, 6))]
    data = gguf_bytes(md, t, data=False)[0]
    spec = spec_from_gguf(read_header(lambda s, n: data[s : s + n], "m.gguf", 1 << 20), "gemma-4-26B-A4B-Q4_K_M.gguf")
    hub = get_model("gemma-4-26b-a4b")
    assert spec.layer_pattern == hub.layer_pattern and spec.head_dim == hub.head_dim == 256
    kv = 25 * 2 * 8 * 256 * 2 + 5 * 2 * 2 * 512 * 2
    assert bytes_per_token(spec, "bf16") == bytes_per_token(hub, "bf16") == kv
    assert spec.shared_expert_intermediate_size == hub.shared_expert_intermediate_size == 2112
    # attention.shared_kv_layers: the last N layers read an earlier layer's K and V (n_layer_kv_from_start)
    md["gemma4.attention.shared_kv_layers"] = 6
    data = gguf_bytes(md, t, data=False)[0]
    spec = spec_from_gguf(read_header(lambda s, n: data[s : s + n], "m.gguf", 1 << 20), "m.gguf")
    assert [r.kv_shared for r in spec.expanded_layers()] == [False] * 24 + [True] * 6


def test_deci_gguf_caches_the_layers_that_keep_attention(tmp_path):
    # deci.cpp (Llama-3.x-Nemotron NAS): head_count_kv per layer, 0 where the block's attention is a no-op or a
    # linear map: no cache there. The HF fixture's blocks (tests/fixtures/configs/nemotron-nas.json: 8 heads over
    # groups of 4, no-op, 8, 2) as the converter writes them: 2, 0, 1 and 4 KV heads x d 32, 7 heads in all
    md, t = llama_like("deci", layers=4, hidden=256, heads=8, kv_heads=2)
    md.update({"deci.attention.head_count": [8, 0, 8, 8], "deci.attention.head_count_kv": [2, 0, 1, 4]})
    path = tmp_path / "nas-Q4_K_M.gguf"
    path.write_bytes(gguf_bytes(md, t, data=False)[0])
    out = run_json("cache", path, "--seq", "1000")
    assert (
        out["total_bytes"]
        == run_json("cache", FIXTURES / "configs" / "nemotron-nas.json", "--seq", "1000")["total_bytes"]
    )
    assert out["total_bytes"] == 7 * 32 * 2 * 2 * 1000


def test_multi_token_prediction_blocks_are_placed_but_not_cached(tmp_path):
    # GLM-4.5's GGUF keeps its MTP block after the trunk (block_count 93, nextn_predict_layers 1): llama.cpp caches
    # the trunk's layers alone (n_layer() = n_layer_all - n_layer_nextn) and places every block with -ngl
    md, t = llama_like("glm4moe", layers=5, hidden=256, heads=8, kv_heads=2)
    md["glm4moe.nextn_predict_layers"] = 1
    md["glm4moe.attention.head_count_kv"] = [2] * 5  # per-layer lists name the MTP block too
    path = tmp_path / "tiny-Q4_K_M.gguf"
    path.write_bytes(gguf_bytes(md, t)[0])
    spec = spec_from_gguf(read_header(lambda s, n: path.read_bytes()[s : s + n], path.name, 1 << 20), path.name)
    assert spec.num_layers == 4 and spec.checkpoint is not None and spec.checkpoint.mtp_blocks == 1
    assert run_json("cache", path, "--seq", "1024")["bytes_per_token"] == 4 * 2 * 2 * 32 * 2
    out = run_json("cache", path, "--seq", "1024", "--gpu", "h100", "--engine", "llamacpp")["llamacpp"]
    (part,) = out["kv_parts"]
    assert part["k_bytes"] == 4 * 1024 * 2 * 32 * 2  # 4 layers x 1,024 cells x 2 KV heads x 32 x f16
    gpu = next(d for d in out["devices"] if d["name"] == "GPU0")
    assert gpu["layers"] == 5  # the MTP block's weights are on the GPU too


@pytest.mark.parametrize(
    "arch",
    [
        "seed_oss", "apertus", "arcee", "hunyuan-dense", "exaone", "dbrx", "xverse", "orion", "grok", "phimoe", "phi2",
        "chatglm", "nemotron", "codeshell", "plamo", "jais", "hy_v3", "grovemoe",
    ],
)  # fmt: skip
def test_full_attention_architectures_read_as_llama(arch):
    # src/models/<arch>.cpp: every layer full attention with llama's keys: the cache is llama's
    md, t = llama_like(arch, layers=4, hidden=256, heads=8, kv_heads=2)
    data = gguf_bytes(md, t, data=False)[0]
    spec = spec_from_gguf(read_header(lambda s, n: data[s : s + n], "m.gguf", 1 << 20), f"{arch}-Q4_K_M.gguf")
    assert spec.num_layers == 4 and {r.kind.value for r, _ in spec.layer_groups()} == {"full"}
    assert spec.kv_heads == 2 and spec.head_dim_effective == 32


def test_phimoe_window_is_not_a_sliding_cache():
    # Phi-3.5-MoE's converter writes sliding_window 131072; phimoe.cpp sets no SWA type, as phi3.cpp
    md, t = llama_like(
        "phimoe", layers=4, hidden=256, heads=8, kv_heads=2, extra={"phimoe.attention.sliding_window": 512}
    )
    data = gguf_bytes(md, t, data=False)[0]
    spec = spec_from_gguf(read_header(lambda s, n: data[s : s + n], "m.gguf", 1 << 20), "phimoe-Q4_K_M.gguf")
    assert {r.kind.value for r, _ in spec.layer_groups()} == {"full"}


@pytest.mark.parametrize(
    "arch, keys, width",
    [
        # dots1 / deepseek2 / glm4moe: n_ff_exp x n_expert_shared, whatever else the file says
        ("dots1", {"expert_shared_count": 2, "expert_feed_forward_length": 64}, 128),
        ("glm4moe", {"expert_shared_count": 1, "expert_feed_forward_length": 64, "expert_shared_feed_forward_length": 96}, 64),
        # bailingmoe2: (expert_shared_feed_forward_length, else n_ff_exp) x n_expert_shared
        ("bailingmoe2", {"expert_shared_count": 2, "expert_feed_forward_length": 64, "expert_shared_feed_forward_length": 96}, 192),
        # afmoe: n_ff_exp x n_expert_shared; cohere2moe: the length, else that; exaone-moe: the length, else n_ff_exp
        ("afmoe", {"expert_shared_count": 2, "expert_feed_forward_length": 64}, 128),
        ("cohere2moe", {"expert_shared_count": 2, "expert_feed_forward_length": 64}, 128),
        ("deepseek", {"expert_shared_count": 2, "expert_feed_forward_length": 64}, 128),  # deepseek.cpp: n_ff_exp x count
        ("cohere2moe", {"expert_shared_count": 2, "expert_feed_forward_length": 64, "expert_shared_feed_forward_length": 96}, 96),
        ("exaone-moe", {"expert_shared_count": 2, "expert_feed_forward_length": [0, 64]}, 64),
        # qwen2moe: the length alone
        ("qwen2moe", {"expert_shared_count": 4, "expert_feed_forward_length": 64, "expert_shared_feed_forward_length": 96}, 96),
    ],
)  # fmt: skip
def test_shared_expert_width_as_each_architecture_builds_it(arch, keys, width):
    extra = {f"{arch}.{k}": v for k, v in {"expert_count": 8, "expert_used_count": 2, **keys}.items()}
    md, t = llama_like(arch, layers=2, hidden=256, heads=8, kv_heads=2, extra=extra)
    data = gguf_bytes(md, t, data=False)[0]
    spec = spec_from_gguf(read_header(lambda s, n: data[s : s + n], "m.gguf", 1 << 20), f"{arch}-Q4_K_M.gguf")
    assert spec.shared_expert_intermediate_size == width


@pytest.mark.parametrize(
    "arch, sliding",
    [
        ("afmoe", [True, True, True, False, True, True, True, False]),  # load_swa_pattern(ml, 4): 3 sliding, 1 full
        ("exaone-moe", [True, True, True, False, True, True, True, False]),
        ("cohere2moe", [False, True, True, True, False, True, True, True]),  # dense first: layers 0 and 4 full
    ],
)
def test_sliding_patterns_as_each_architecture_loads_them(arch, sliding):
    md, t = llama_like(arch, layers=8, hidden=256, heads=8, kv_heads=2, extra={f"{arch}.attention.sliding_window": 128})
    data = gguf_bytes(md, t, data=False)[0]
    spec = spec_from_gguf(read_header(lambda s, n: data[s : s + n], "m.gguf", 1 << 20), f"{arch}-Q4_K_M.gguf")
    assert [r.kind.value == "sliding" for r in spec.expanded_layers()] == sliding
    assert all(r.window_tokens == 128 for r in spec.expanded_layers() if r.kind.value == "sliding")


def test_expert_widths_that_differ_between_layers_are_refused():
    extra = {
        "exaone-moe.expert_count": 8,
        "exaone-moe.expert_used_count": 2,
        "exaone-moe.expert_feed_forward_length": [64, 96],
    }
    md, t = llama_like("exaone-moe", layers=2, hidden=256, heads=8, kv_heads=2, extra=extra)
    data = gguf_bytes(md, t, data=False)[0]
    with pytest.raises(SpecError, match="expert_feed_forward_length differs between layers"):
        spec_from_gguf(read_header(lambda s, n: data[s : s + n], "m.gguf", 1 << 20), "exaone-moe-Q4_K_M.gguf")


def test_mimo2_values_narrower_than_keys_and_kv_heads_per_layer(tmp_path):
    # mimo2.cpp: K n_embd_head_k, V n_embd_head_v per KV head; which layers slide from the per-layer pattern
    extra = {
        "mimo2.attention.key_length": 48, "mimo2.attention.value_length": 32, "mimo2.attention.head_count_kv": [2, 4, 4, 4],
        "mimo2.attention.sliding_window": 128, "mimo2.attention.sliding_window_pattern": [False, True, True, True],
    }  # fmt: skip
    md, t = llama_like("mimo2", layers=4, hidden=256, heads=8, kv_heads=2, extra=extra)
    path = tmp_path / "mimo-Q4_K_M.gguf"
    path.write_bytes(gguf_bytes(md, t)[0])
    out = run_json("cache", path, "--seq", "100")
    # layer 0 full with 2 KV heads, three sliding layers with 4: each head K 48 + V 32 wide, 2 B an element (bf16)
    assert out["bytes_per_token"] == (2 + 3 * 4) * (48 + 32) * 2
    parts = run_json("cache", path, "--seq", "1024", "--gpu", "h100", "--engine", "llamacpp")["llamacpp"]["kv_parts"]
    full = next(p for p in parts if p["cache"] == "non-SWA")
    assert (full["k_bytes"], full["v_bytes"]) == (1024 * 2 * 48 * 2, 1024 * 2 * 32 * 2)


def test_step35_sliding_layers_and_kv_heads_per_layer(tmp_path):
    # step35.cpp (Step-3.5-Flash): sliding_window_pattern one bool a layer (get_arr, required), head counts per
    # layer: full layers with 2 KV heads here, sliding ones with 4, each head 32 wide (256 / 8)
    extra = {
        "step35.attention.head_count_kv": [2, 4, 4, 4], "step35.attention.sliding_window": 128,
        "step35.attention.sliding_window_pattern": [False, True, True, True],
    }  # fmt: skip
    md, t = llama_like("step35", layers=4, hidden=256, heads=8, kv_heads=2, extra=extra)
    path = tmp_path / "step-3.5-Q4_K_M.gguf"
    path.write_bytes(gguf_bytes(md, t)[0])
    # 1,000 tokens: the full layer holds them all, each sliding layer its 128
    assert run_json("cache", path, "--seq", "1000")["total_bytes"] == (2 * 1000 + 3 * 4 * 128) * 2 * 32 * 2


def test_kimi_linear_gguf_kda_layers_are_recurrent_beside_mla(tmp_path):
    # kimi-linear.cpp: a layer with no KV heads is a Kimi Delta Attention layer (is_recr), the others MLA. KDA's
    # state (llama-hparams.cpp n_embd_r / n_embd_s), f32: 3 x (d_conv 4 - 1) x 8 heads x 32 + 32 x 32 x 8 elements
    extra = {
        "attention.head_count_kv": [0, 0, 0, 8], "attention.kv_lora_rank": 64, "rope.dimension_count": 16,
        "attention.key_length_mla": 48, "attention.value_length_mla": 32, "kda.head_dim": 32, "ssm.conv_kernel": 4,
        "expert_count": 8, "expert_used_count": 2, "expert_feed_forward_length": 64, "expert_shared_count": 1,
    }  # fmt: skip
    md, t = llama_like("kimi-linear", layers=4, extra={f"kimi-linear.{k}": v for k, v in extra.items()})
    path = tmp_path / "Kimi-Linear-Q4_K_M.gguf"
    path.write_bytes(gguf_bytes(md, t)[0])
    out = run_json("cache", path, "--seq", "1000", "--batch", "2")
    # one MLA layer caches its latent, (64 + 16) x 2 B a token; three KDA layers a state a sequence
    assert out["total_bytes"] == 2 * 1000 * (64 + 16) * 2
    assert out["state_bytes"] == 2 * 3 * 4 * (3 * 3 * 8 * 32 + 32 * 32 * 8)
    spec = spec_from_gguf(header_of(gguf_bytes(md, t, data=False)[0]), path.name)
    assert spec.shared_expert_intermediate_size == 64 and spec.is_mla


def test_laguna_gguf_slides_three_layers_in_four_where_the_file_gives_a_window():
    # laguna.cpp: load_swa_pattern(ml, 4, dense_first) only where sliding_window is set (XS.2); M.1 has none: all
    # full. One shared expert unless the file counts more, its width expert_shared_feed_forward_length
    moe = {"expert_count": 8, "expert_used_count": 2, "expert_feed_forward_length": 64}
    md, t = llama_like("laguna", layers=8, extra={f"laguna.{k}": v for k, v in moe.items()})
    spec = spec_from_gguf(header_of(gguf_bytes(md, t, data=False)[0]), "laguna-M.1.gguf")
    assert {r.kind.value for r in spec.expanded_layers()} == {"full"} and spec.shared_expert_intermediate_size == 64
    md["laguna.attention.sliding_window"] = 512
    md["laguna.expert_shared_feed_forward_length"] = 96
    spec = spec_from_gguf(header_of(gguf_bytes(md, t, data=False)[0]), "laguna-XS.2.gguf")
    assert [r.kind.value for r in spec.expanded_layers()] == (["full"] + ["sliding"] * 3) * 2
    assert spec.shared_expert_intermediate_size == 96


@pytest.mark.parametrize(
    ("arch", "pattern", "kinds"),
    [
        # mellum.cpp: load_swa_pattern(ml, 4) where the file gives a window: three sliding layers, then a full one
        ("mellum", None, ["sliding"] * 3 + ["full"]),
        # maple.cpp / spark2-5.cpp: get_arr(sliding_window_pattern), one bool a layer, required
        ("maple", [True, False, True, True], ["sliding", "full", "sliding", "sliding"]),
        ("spark2_5", [False, True, True, False], ["full", "sliding", "sliding", "full"]),
        ("granite_swa", [True, True, True, False], ["sliding"] * 3 + ["full"]),  # granite-swa.cpp: get_arr, required
        # muse-glimmer.cpp: load_swa_pattern(ml, 4); plamo3.cpp: load_swa_pattern(ml, 8) where the file gives a window
        ("muse-glimmer", None, ["sliding"] * 3 + ["full"]),
    ],
)
def test_sliding_patterns_as_each_loader_sets_them(arch, pattern, kinds):
    extra = {f"{arch}.attention.sliding_window": 256}
    if pattern is not None:
        extra[f"{arch}.attention.sliding_window_pattern"] = pattern
    md, t = llama_like(arch, layers=4, extra=extra)
    spec = spec_from_gguf(header_of(gguf_bytes(md, t, data=False)[0]), f"{arch}.gguf")
    assert [r.kind.value for r in spec.expanded_layers()] == kinds


def test_smallthinker_gguf_slides_with_the_window_its_loader_forces(tmp_path):
    # smallthinker.cpp: where the file gives a sliding_window, n_swa = 4096 whatever it says, and
    # load_swa_pattern(ml, 4, dense_first): layers 0 and 4 full, the rest sliding; no window: every layer full
    moe = {"expert_count": 8, "expert_used_count": 2, "expert_feed_forward_length": 64}
    md, t = llama_like("smallthinker", layers=8, extra={f"smallthinker.{k}": v for k, v in moe.items()})
    spec = spec_from_gguf(header_of(gguf_bytes(md, t, data=False)[0]), "SmallThinker-4BA0.6B-Q4_K_M.gguf")
    assert {r.kind.value for r in spec.expanded_layers()} == {"full"} and spec.experts == 8
    md["smallthinker.attention.sliding_window"] = 2048
    path = tmp_path / "SmallThinker-21BA3B-Q4_K_M.gguf"
    path.write_bytes(gguf_bytes(md, t)[0])
    spec = spec_from_gguf(header_of(gguf_bytes(md, t, data=False)[0]), path.name)
    assert [r.kind.value for r in spec.expanded_layers()] == (["full"] + ["sliding"] * 3) * 2
    assert {r.window_tokens for r in spec.expanded_layers() if r.kind.value == "sliding"} == {4096}
    # 8,192 tokens: 2 full layers hold them all, 6 sliding ones 4,096 each; 2 KV heads x 32 wide (256 / 8), K and V
    assert run_json("cache", path, "--seq", "8192")["total_bytes"] == (2 * 8192 + 6 * 4096) * 2 * 2 * 32 * 2


def test_openelm_gguf_reads_heads_per_layer_and_layer_0s_head_width(tmp_path):
    # openelm.cpp: query heads, KV heads and MLP widths per layer, every layer full attention. Its converter writes
    # key_length; without one llama.cpp's head width is n_embd / n_head(0), layer 0's count (256 / 4 = 64), not
    # the widest layer's (256 / 8 = 32)
    extra = {"openelm.attention.head_count": [4, 4, 8, 8], "openelm.attention.head_count_kv": [1, 1, 2, 2]}
    md, t = llama_like("openelm", layers=4, extra=extra)
    path = tmp_path / "OpenELM-270M-Q4_K_M.gguf"
    path.write_bytes(gguf_bytes(md, t)[0])
    assert spec_from_gguf(header_of(gguf_bytes(md, t, data=False)[0]), path.name).head_dim == 64
    assert run_json("cache", path, "--seq", "100")["bytes_per_token"] == (1 + 1 + 2 + 2) * 2 * 64 * 2
    md["openelm.attention.key_length"] = md["openelm.attention.value_length"] = 16
    assert spec_from_gguf(header_of(gguf_bytes(md, t, data=False)[0]), path.name).head_dim == 16


def test_gguf_heads_per_layer_set_each_layers_attention_flops(tmp_path):
    # openelm.cpp builds layer il with n_head(il) query heads: 4, 4, 8, 8 over 1, 1, 2, 2 KV heads, 16 wide. One new
    # token over 100 cached keys: 2 x heads x (16 + 16) FLOPs a key and layer, (4 + 4 + 8 + 8) heads, not 4 x 8
    from kvcalc.cost.flops import decode_attention_flops, prefill_attention_flops

    extra = {
        "openelm.attention.head_count": [4, 4, 8, 8], "openelm.attention.head_count_kv": [1, 1, 2, 2],
        "openelm.attention.key_length": 16, "openelm.attention.value_length": 16,
    }  # fmt: skip
    md, t = llama_like("openelm", layers=4, extra=extra)
    spec = spec_from_gguf(header_of(gguf_bytes(md, t, data=False)[0]), "OpenELM-270M-Q4_K_M.gguf")
    assert [spec.run_heads(r) for r in spec.expanded_layers()] == [4, 4, 8, 8]
    assert decode_attention_flops(spec, 100) == 2 * (4 + 4 + 8 + 8) * (16 + 16) * 100
    # a causal prompt of 10 tokens: 55 query-key pairs a layer
    assert prefill_attention_flops(spec, 10) == 2 * (4 + 4 + 8 + 8) * (16 + 16) * 55


def test_minicpm3_gguf_caches_every_heads_k_and_v(tmp_path):
    # minicpm3.cpp decompresses each head's K (nope + rope) and V before build_attn: no latent in llama.cpp's cache
    extra = {
        "minicpm3.attention.q_lora_rank": 48, "minicpm3.attention.kv_lora_rank": 32, "minicpm3.rope.dimension_count": 8,
        "minicpm3.attention.key_length": 24, "minicpm3.attention.value_length": 16, "minicpm3.attention.head_count_kv": 8,
    }  # fmt: skip
    md, t = llama_like("minicpm3", layers=4, hidden=256, heads=8, kv_heads=8, extra=extra)
    path = tmp_path / "minicpm3-Q4_K_M.gguf"
    path.write_bytes(gguf_bytes(md, t)[0])
    assert run_json("cache", path, "--seq", "100")["bytes_per_token"] == 4 * (32 + 8) * 2  # the latent, as SGLang
    (part,) = run_json("cache", path, "--seq", "1024", "--gpu", "h100", "--engine", "llamacpp")["llamacpp"]["kv_parts"]
    assert (part["k_bytes"], part["v_bytes"]) == (4 * 1024 * 8 * 24 * 2, 4 * 1024 * 8 * 16 * 2)


def test_lfm2_short_convolution_layers_and_their_state():
    from kvcalc.engines.llamacpp.eras import era
    from kvcalc.engines.llamacpp.kv import kv_parts

    # lfm2.cpp: a layer without KV heads is a short-convolution layer (is_recr_impl = n_head_kv(il) == 0), its state
    # the last l_cache - 1 inputs, n_embd wide, in f32 (llama_hparams::n_embd_r). LFM2-1.2B's layout: attention at
    # layers 2, 5, 8, 10, 12 and 14 of 16, l_cache 3, 8 KV heads of 64.
    kv = [8 if il in (2, 5, 8, 10, 12, 14) else 0 for il in range(16)]
    extra = {"lfm2.attention.head_count_kv": kv, "lfm2.shortconv.l_cache": 3}
    md, t = llama_like("lfm2", layers=16, hidden=2048, heads=32, kv_heads=8, extra=extra)
    spec = spec_from_gguf(header_of(gguf_bytes(md, t, data=False)[0]), "LFM2-1.2B-Q4_K_M.gguf")
    kinds = [r.kind.value for r in spec.expanded_layers()]
    assert [il for il, k in enumerate(kinds) if k == "full"] == [2, 5, 8, 10, 12, 14]
    parts = {p.cache: p for p in kv_parts(spec, 4096, era(None), parallel=4)[0]}
    assert parts["recurrent"].bytes == 10 * 4 * (2 * 2048) * 4  # 10 conv layers x 4 sequences x 2 inputs x 2,048, f32
    assert parts["non-SWA"].layers == 6
    # LFM2-8B-A1B's GGUF (lfm2moe): the same layers, experts after leading_dense_block_count dense ones
    moe = {"lfm2moe.attention.head_count_kv": kv, "lfm2moe.shortconv.l_cache": 3, "lfm2moe.expert_count": 32,
           "lfm2moe.expert_used_count": 4, "lfm2moe.expert_feed_forward_length": 1792,
           "lfm2moe.leading_dense_block_count": 2}  # fmt: skip
    md, t = llama_like("lfm2moe", layers=16, hidden=2048, heads=32, kv_heads=8, extra=moe)
    spec = spec_from_gguf(header_of(gguf_bytes(md, t, data=False)[0]), "LFM2-8B-A1B-Q4_K_M.gguf")
    assert (spec.experts, spec.experts_per_token, spec.dense_layers) == (32, 4, 2)
    assert sum(r.state_bytes for r in spec.expanded_layers()) == 10 * 2 * 2048 * 4


def _dsa_metadata(arch: str, layers: int = 6, context: int = 163840) -> dict:
    # DeepSeek-V3.2's attention (MLA: latent 512, rope 64) and lightning indexer (64 heads of 128, top 2,048) on a
    # small trunk; deepseek32.cpp / glm-dsa.cpp read the indexer keys with get_key (required)
    md = {
        "block_count": layers, "embedding_length": 1024, "attention.head_count": 16, "attention.head_count_kv": 1,
        "attention.key_length": 576, "attention.value_length": 512, "attention.key_length_mla": 192,
        "attention.value_length_mla": 128, "attention.kv_lora_rank": 512, "rope.dimension_count": 64,
        "attention.q_lora_rank": 256, "feed_forward_length": 2048, "expert_count": 8, "expert_used_count": 2,
        "expert_feed_forward_length": 256, "expert_shared_count": 1, "leading_dense_block_count": 1,
        "vocab_size": 1000, "context_length": context, "attention.indexer.head_count": 64,
        "attention.indexer.key_length": 128, "attention.indexer.top_k": 2048,
    }  # fmt: skip
    return {"general.architecture": arch, **{f"{arch}.{k}": v for k, v in md.items()}}


def test_deepseek_sparse_attention_ggufs_cache_the_latent_and_the_indexer_keys(tmp_path):
    # llama-kv-cache-dsa.cpp: kv_mla, the latent cache (K only, 512 + 64 wide), and kv_lid, the same cells with one
    # key head of indexer.key_length (128) a layer, K only, in -ctk's type; deepseek32: every trunk layer has one
    path = tmp_path / "DeepSeek-V3.2-Q4_K_M.gguf"
    path.write_bytes(gguf_bytes(_dsa_metadata("deepseek32"), [("token_embd.weight", (1024, 1000), "q4_K")])[0])
    spec = spec_from_gguf(header_of(path.read_bytes()), path.name)
    assert (spec.index_heads, spec.index_head_dim, spec.index_topk) == (64, 128, 2048) and spec.is_sparse
    assert spec.shared_expert_intermediate_size == 256
    parts = {p["cache"]: p for p in run_json("cache", path, "--seq", "8192", "--engine", "llamacpp", "--gpu", "h100")[
        "llamacpp"]["kv_parts"]}  # fmt: skip
    assert parts["non-SWA"]["k_bytes"] == 6 * 8192 * (512 + 64) * 2 and parts["non-SWA"]["v_bytes"] == 0
    assert parts["indexer"]["k_bytes"] == 6 * 8192 * 128 * 2 and parts["indexer"]["v_bytes"] == 0
    q8 = run_json("cache", path, "--seq", "8192", "--engine", "llamacpp", "--gpu", "h100", "--kv-dtype", "q8_0")
    (lid,) = [p for p in q8["llamacpp"]["kv_parts"] if p["cache"] == "indexer"]
    assert lid["k_bytes"] == 6 * 8192 * 128 // 32 * 34  # q8_0: 34 B a block of 32
    # before the 2026-04 era no build had the cache: refused in those words
    old = run("cache", path, "--seq", "8192", "--engine", "llamacpp", "--gpu", "h100", "--engine-version", "2026-01")
    assert old.exit_code == 2 and "no DeepSeek Sparse Attention cache" in old.stderr
    del_keys = {k: v for k, v in _dsa_metadata("deepseek32").items() if "indexer.top_k" not in k}
    with pytest.raises(SpecError, match="indexer"):
        spec_from_gguf(header_of(gguf_bytes(del_keys, [("token_embd.weight", (1024, 1000), "q4_K")])[0]), "x.gguf")


@pytest.mark.parametrize(
    ("context", "types", "full"),
    [
        (202752, None, [True] * 8),  # GLM-5 / 5.1 (context under 1,048,576): every layer its own indexer
        (1048576, None, [True, True, True, False, False, False, True, False]),  # GLM-5.2's table: 0, 1, then 2 + 4k
        (1048576, [1, 0, 1, 0, 1, 0, 1, 0], [True, False] * 4),  # attention.indexer.types, one a layer
    ],
)
def test_glm_dsa_indexer_keys_only_where_a_layer_has_its_own_indexer(tmp_path, context, types, full):
    md = _dsa_metadata("glm-dsa", layers=8, context=context)
    if types is not None:
        md["glm-dsa.attention.indexer.types"] = types
    path = tmp_path / "GLM-5-Q4_K_M.gguf"
    path.write_bytes(gguf_bytes(md, [("token_embd.weight", (1024, 1000), "q4_K")])[0])
    spec = spec_from_gguf(header_of(path.read_bytes()), path.name)
    assert [not r.index_shared for r in spec.expanded_layers()] == full
    parts = run_json("cache", path, "--seq", "4096", "--engine", "llamacpp", "--gpu", "h100")["llamacpp"]["kv_parts"]
    (lid,) = [p for p in parts if p["cache"] == "indexer"]
    assert (lid["layers"], lid["k_bytes"]) == (sum(full), sum(full) * 4096 * 128 * 2)


def test_plamo3_slides_seven_layers_in_eight_and_llama_like_archs_read_full():
    # plamo3.cpp: load_swa_pattern(ml, 8) where the file gives a window, none without
    md, t = llama_like("plamo3", layers=16, extra={"plamo3.attention.sliding_window": 2048})
    spec = spec_from_gguf(header_of(gguf_bytes(md, t, data=False)[0]), "plamo3.gguf")
    assert [r.kind.value for r in spec.expanded_layers()] == (["sliding"] * 7 + ["full"]) * 2
    # deepseek (DeepSeek-MoE v1), arctic, jais2, maincoder, bitnet, chameleon, cogvlm, hunyuan_vl: their loaders read
    # llama's attention keys and build one plain cache over every layer (build_attn with llm_graph_input_attn_kv)
    for arch in ("deepseek", "arctic", "jais2", "maincoder", "bitnet", "chameleon", "cogvlm", "hunyuan_vl"):
        md, t = llama_like(arch, layers=4, hidden=256, heads=8, kv_heads=2)
        spec = spec_from_gguf(header_of(gguf_bytes(md, t, data=False)[0]), f"{arch}.gguf")
        assert {r.kind.value for r in spec.expanded_layers()} == {"full"} and spec.kv_heads == 2, arch


def test_hy_v4_caches_indexer_keys_only_with_an_indexer(tmp_path):
    # hy-v4.cpp: the indexer keys are optional (its all-full-attention checkpoints have none: one plain MLA cache);
    # with indexer.top_k, attention.indexer.types says which layers own an indexer, and layer 0 must
    md = {k.replace("deepseek32.", "hy_v4."): v for k, v in _dsa_metadata("deepseek32", layers=4).items()}
    md["general.architecture"] = "hy_v4"
    dense = {k: v for k, v in md.items() if ".indexer." not in k}
    spec = spec_from_gguf(header_of(gguf_bytes(dense, [("token_embd.weight", (1024, 1000), "q4_K")])[0]), "hy.gguf")
    assert spec.is_mla and not spec.is_sparse and spec.shared_expert_intermediate_size == 256
    md["hy_v4.attention.indexer.types"] = [1, 0, 1, 0]
    path = tmp_path / "HY-V4-Q4_K_M.gguf"
    path.write_bytes(gguf_bytes(md, [("token_embd.weight", (1024, 1000), "q4_K")])[0])
    parts = run_json("cache", path, "--seq", "4096", "--engine", "llamacpp", "--gpu", "h100")["llamacpp"]["kv_parts"]
    (lid,) = [p for p in parts if p["cache"] == "indexer"]
    assert (lid["layers"], lid["k_bytes"]) == (2, 2 * 4096 * 128 * 2)
    md["hy_v4.attention.indexer.types"] = [0, 1, 1, 1]
    with pytest.raises(SpecError, match="layer 0 must own an indexer"):
        spec_from_gguf(header_of(gguf_bytes(md, [("token_embd.weight", (1024, 1000), "q4_K")])[0]), "hy.gguf")


def test_minimax01_lightning_layers_hold_a_head_dim_square_state(tmp_path):
    # minimax-01.cpp: attention.recurrent_layers, else all but every full_attention_interval-th (8) layer are lightning
    # attention, recurrent with n_embd_head_la = the key width: a key_length^2 state a head, f32, no conv window
    extra = {"minimax-01.attention.key_length": 32, "minimax-01.attention.value_length": 32}
    md, t = llama_like("minimax-01", layers=16, hidden=256, heads=8, kv_heads=8, extra=extra)
    path = tmp_path / "MiniMax-M1-Q4_K_M.gguf"
    path.write_bytes(gguf_bytes(md, t)[0])
    spec = spec_from_gguf(header_of(path.read_bytes()), path.name)
    assert [r.kind.value for r in spec.expanded_layers()] == (["stateless"] * 7 + ["full"]) * 2
    out = run_json("cache", path, "--seq", "1000", "--engine", "llamacpp", "--gpu", "h100")
    parts = {p["cache"]: p for p in out["llamacpp"]["kv_parts"]}
    assert parts["recurrent"]["k_bytes"] == 14 * 4 * 32 * 32 * 8 * 1  # one sequence (-np 1), 14 layers
    assert parts["non-SWA"]["k_bytes"] == 2 * 1024 * 8 * 32 * 2  # two full layers, 1,000 tokens padded to 1,024 cells
    md["minimax-01.attention.recurrent_layers"] = [True, False] * 8
    spec = spec_from_gguf(header_of(gguf_bytes(md, t, data=False)[0]), path.name)
    assert [r.kind.value for r in spec.expanded_layers()] == ["stateless", "full"] * 8


@pytest.mark.parametrize(("arch", "shift", "kv_heads"), [("rwkv6", None, 0), ("rwkv7", None, 0), ("rwkv6qwen2", 1, 2)])
def test_rwkv_layers_are_recurrent_with_their_token_shift_and_wkv_state(tmp_path, arch, shift, kv_heads):
    # llm_arch_is_recurrent: every layer of an RWKV model is recurrent (RWKV6-Qwen2 files give KV heads all the same);
    # llama-hparams.cpp n_embd_r = token_shift_count (default 2) x n_embd, n_embd_s = n_embd x wkv.head_size, f32
    extra = {f"{arch}.wkv.head_size": 64} | ({f"{arch}.token_shift_count": shift} if shift else {})
    md, t = llama_like(arch, layers=4, hidden=256, heads=8, kv_heads=2, extra=extra)
    md[f"{arch}.attention.head_count"], md[f"{arch}.attention.head_count_kv"] = 0, kv_heads  # as converters write
    path = tmp_path / f"{arch}-Q4_K_M.gguf"
    path.write_bytes(gguf_bytes(md, t)[0])
    spec = spec_from_gguf(header_of(path.read_bytes()), path.name)
    assert {r.kind.value for r in spec.expanded_layers()} == {"stateless"}
    parts = run_json("cache", path, "--seq", "4096", "--engine", "llamacpp", "--gpu", "h100")["llamacpp"]["kv_parts"]
    assert [p["cache"] for p in parts] == ["recurrent"]
    assert parts[0]["k_bytes"] == 4 * 4 * ((shift or 2) * 256 + 256 * 64)


def test_plamo2_mamba_layers_where_a_layer_has_no_kv_heads(tmp_path):
    # plamo2.cpp: is_recr = n_head_kv(il) == 0; a recurrent layer keeps (d_conv - 1) x (d_inner + 2 x groups x d_state)
    # conv inputs and d_state x d_inner state, f32 (n_embd_r / n_embd_s)
    extra = {"plamo2.attention.head_count_kv": [0, 2, 0, 2], "plamo2.ssm.conv_kernel": 4, "plamo2.ssm.inner_size": 512,
             "plamo2.ssm.state_size": 64, "plamo2.ssm.time_step_rank": 16, "plamo2.ssm.group_count": 1}  # fmt: skip
    md, t = llama_like("plamo2", layers=4, hidden=256, heads=8, kv_heads=2, extra=extra)
    path = tmp_path / "plamo-2-8b-Q4_K_M.gguf"
    path.write_bytes(gguf_bytes(md, t)[0])
    spec = spec_from_gguf(header_of(path.read_bytes()), path.name)
    assert [r.kind.value for r in spec.expanded_layers()] == ["stateless", "full"] * 2
    parts = run_json("cache", path, "--seq", "4096", "--engine", "llamacpp", "--gpu", "h100")["llamacpp"]["kv_parts"]
    by = {p["cache"]: p for p in parts}
    assert by["recurrent"]["k_bytes"] == 2 * 4 * (3 * (512 + 2 * 64) + 64 * 512)
    assert by["non-SWA"]["k_bytes"] == 2 * 4096 * 2 * 32 * 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # each reached the arithmetic as a wrong type and ended as "internal error" (found by mutating headers)
        (
            {"llama.attention.head_count": "abc"},
            "GGUF key llama.attention.head_count is 'abc': llama.cpp reads a whole",
        ),
        ({"llama.feed_forward_length": 1.5}, "GGUF key llama.feed_forward_length is 1.5"),
        ({"llama.attention.head_count_kv": -3}, "GGUF key llama.attention.head_count_kv is -3"),
        ({"llama.block_count": 0}, "GGUF metadata lacks llama.block_count or llama.embedding_length (or gives 0)"),
        ({"tokenizer.ggml.tokens": 7}, "GGUF key tokenizer.ggml.tokens is 7: llama.cpp reads an array of strings"),
        # one number where llama.cpp's get_key reads one (an array or a bool is another type there)
        ({"llama.context_length": [1, 2]}, "GGUF key llama.context_length is [1, 2]: llama.cpp reads one whole number"),
        ({"llama.attention.kv_lora_rank": True}, "GGUF key llama.attention.kv_lora_rank is True: llama.cpp reads one"),
        ({"llama.feed_forward_length": []}, "is []: llama.cpp reads a whole number or a non-empty array of them"),
    ],
)
def test_metadata_of_a_type_llamacpp_would_not_load_is_refused_by_key(tmp_path, change, message):
    md, t = llama_like()
    md.update(change)
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(md, t, data=False)[0])
    line = _one_line_error(path)
    assert line.startswith("kvcalc: error: m.gguf: ") and message in line
