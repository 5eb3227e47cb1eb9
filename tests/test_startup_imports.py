"""What `kvcalc roofline` and `kvcalc generate` import at start-up (benchmarks/startup.py times them against a
minimal Typer + Rich app): not json (the shipped fit is a module, cost/calibration_data.py), not Rich's
table or emoji codes (a table at its natural widths is laid out directly, present/sheet.py), and not the
other commands' modules. test_cli.py holds the same check for `kvcalc cache`."""

import os
import subprocess
import sys

import pytest

NEVER = [
    "json",
    "yaml",
    "numpy",
    "huggingface_hub",
    "matplotlib",
    "rich.table",
    "rich._emoji_codes",
    "kvcalc.api",
    "kvcalc.plan.fit",
    "kvcalc.plan.variants",
    "kvcalc.model.gguf.mix",  # llama.cpp's quant mixes: only for a --dtype that names one
]
# roofline's rows and generate's static batch ask the engine's pool only when --engine is given
# (plan/engine_memory.py, through plan/serve_pool.serving_limits: about 70 M instructions, benchmarks/startup.py),
# and never the serving simulation's report
ENGINE_POOL = ["kvcalc.plan.serve_pool", "kvcalc.engines.vllm.figures"]
ONLY_GENERATE = ["kvcalc.plan.generate", "kvcalc.cost.fitting"]


def _loaded(args: list[str], names: list[str], tmp_path) -> tuple[str, list[str]]:
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: sys.stderr.write('LOADED %r\\n' % [m for m in {names!r} if m in sys.modules]))\n"
        f"sys.argv = ['kvcalc', *{args!r}]\n"
        "from kvcalc.__main__ import main\n"
        "main()\n"
    )
    env = {**os.environ, "KVCALC_PRESETS": str(tmp_path), "COLUMNS": "100"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout, eval(done.stderr.strip().splitlines()[-1].removeprefix("LOADED "))


@pytest.mark.parametrize(
    ("args", "figure"),
    [
        # 7b (Llama-2-7B) on an A100, batch 64 x 8,192: the KV read is 64 x 8,192 x 512 KiB = 256 GiB
        (["roofline", "7b", "--gpu", "a100"], "256.00"),
        # its prompt, 7,936 tokens, and the 256 new ones
        (["generate", "7b", "--gpu", "a100"], "prompt 7,936 + 256 new tokens"),
    ],
)
def test_roofline_and_generate_start_without_json_rich_tables_or_other_commands(args, figure, tmp_path):
    out, loaded = _loaded(args, NEVER + ONLY_GENERATE + ENGINE_POOL, tmp_path)
    assert figure in out
    expected = ONLY_GENERATE if args[0] == "generate" else []
    assert loaded == expected
    _, loaded = _loaded([*args, "--engine", "vllm"], [*ENGINE_POOL, "kvcalc.plan.serve_report"], tmp_path)
    assert loaded == ENGINE_POOL  # named: its pool is asked


def test_a_saved_calibration_is_still_read(tmp_path):
    # json comes in only when the user's file is there; then the estimate says whose constants it used
    (tmp_path / "calibration").mkdir()
    (tmp_path / "calibration" / "a100--vllm.json").write_text('{"points": 3, "constants": {"bw_eff.ampere": 0.5}}')
    out, loaded = _loaded(["roofline", "7b", "--gpu", "a100", "--batch", "1"], ["json"], tmp_path)
    assert loaded == ["json"]
    assert "your calibration for a100 + vllm: 3 points" in " ".join(out.split())
