"""`kvcalc plan GGUF --engine llamacpp`: each quant file of a GGUF repo is an option, judged by llama.cpp's
own buffers and the calibrated estimate of steps built from its tensor table, with the llama-server command;
the hub is the loopback server, and only the files' headers are read."""

import json
import shlex

import ggufhub
import pytest
from conftest import run
from gguf_writer import gguf_bytes, llama_like
from test_gguf import gguf_repo, kvcalc_cli  # noqa: F401 (the loopback hub fixture)

from kvcalc.model.gguf.hub import FIRST_CHUNK


def test_plan_picks_among_a_repos_quants(gguf_repo):  # noqa: F811
    env, sizes = gguf_repo
    args = ("plan", "acme/Tiny-GGUF", "--seq", "8k", "--users", "8", "--engine", "llamacpp", "--gpu", "rtx-4090")
    done = kvcalc_cli(env, *args, "-f", "json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["engine"] == "llamacpp" and out["model"] == "acme/Tiny-GGUF"
    by_quant = {o["dtype"]: o for o in out["options"]}
    assert set(by_quant) == {"Q4_K_M", "Q8_0"}
    # no goal: one GPU each (more would cost more); unpriced, so ranked by GPU count then the faster estimate:
    # the smaller file reads fewer bytes per step
    q4, q8 = by_quant["Q4_K_M"], by_quant["Q8_0"]
    assert q4["gpus"] == q8["gpus"] == 1 and out["options"][0]["dtype"] == "Q4_K_M"
    assert q4["estimate"]["tpot_s"] < q8["estimate"]["tpot_s"]
    for o in out["options"]:
        lo, hi = o["estimate"]["interval"]["tpot_s"]
        assert lo <= o["estimate"]["tpot_s"] <= hi and o["fits"] and o["users_held"] == 8
    # llama-server's -c is shared by the -np slots: 8 x 8k
    assert q4["command"] == "llama-server -hf acme/Tiny-GGUF:Q4_K_M -c 65536 -np 8 -ngl 999"
    assert "llama.cpp's buffers" in q4["accounting"]
    for name in sizes:  # headers only
        assert sum(e - s for p, s, e in ggufhub.GgufHub.served if p == name) <= 2 * FIRST_CHUNK
    table = kvcalc_cli(env, *args)
    assert "llama-server -hf acme/Tiny-GGUF:Q4_K_M" in table.stdout and "its buffers" in table.stdout
    # the first option is served by the simulation its check line runs: llama-server's -np 8 slots, the quant's
    # spec as the file's header gives it; its buffers line is `fit --engine llamacpp`
    assert q4["decided_on"].startswith("simulation") and out["simulated"] == 1
    assert q4["buffers"] == "kvcalc fit acme/Tiny-GGUF:Q4_K_M --engine llamacpp --gpu rtx-4090 --seq 8192 --parallel 8"
    check = shlex.split(q4["check"])
    assert check[:3] == ["kvcalc", "generate", "acme/Tiny-GGUF:Q4_K_M"] and "--max-num-seqs" in check
    done = kvcalc_cli(env, *check[1:], "-f", "json")
    assert done.returncode == 0, done.stderr
    served = json.loads(done.stdout)["estimate"]
    for k in ("tpot_s", "ttft_s", "ttft_p99_s", "tokens_per_s"):
        assert q4["estimate"][k] == pytest.approx(served[k])


def test_plan_rejects_what_does_not_fit_and_dtype_flags(tmp_path):
    md, tensors = llama_like(layers=4, hidden=512, heads=8, kv_heads=2, ff=1024, vocab=2000)
    path = tmp_path / "Tiny-Q4_K_M.gguf"
    path.write_bytes(gguf_bytes(md, tensors)[0])
    # 4 layers x 2 heads x 64 x (K + V) x 2 B = 2 KiB a cell: 64 slots of 128k cells is 16 GiB of KV,
    # over a 12 GB card with 1 GiB kept free, and within a 24 GB one
    r = run("plan", str(path), "--seq", "128k", "--users", "64", "--engine", "llamacpp", "--gpu", "rtx-3060,rtx-4090",
            "--max-gpus", "1", "-f", "json")  # fmt: skip
    out = json.loads(r.stdout)
    assert [o["gpu"] for o in out["options"]] == ["rtx-4090"]
    assert out["options"][0]["command"].startswith(f"llama-server -m {path} -c 8388608 -np 64")
    rej = [x for x in out["rejected"] if x["gpu"] == "rtx-3060"]
    assert rej and rej[0]["kind"] == "does-not-fit" and "GiB over" in rej[0]["line"]
    r = run("plan", str(path), "--seq", "8k", "--users", "1", "--engine", "llamacpp", "--dtype", "fp8")
    assert r.exit_code == 2 and "do not apply to a GGUF plan" in r.stderr
