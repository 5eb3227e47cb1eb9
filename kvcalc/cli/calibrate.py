"""`kvcalc calibrate FILE...` (registered on cli.app): read the user's own benchmark results, refit the
estimate for that GPU + engine (plan/calibrating.py) and save it under $KVCALC_PRESETS/calibration/."""

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from kvcalc.cli.common import Fmt, FmtOpt, _emit, app
from kvcalc.errors import UsageError

CSV_COLUMNS = ("model", "gpu", "tp", "engine", "prompt", "new", "ttft_ms", "tpot_ms")


def _bad(path: Path, what: str) -> UsageError:
    return UsageError(
        f"{path}: {what}",
        hint="give the JSON of `vllm bench serve --save-result`, SGLang bench_serving's output, a genai-perf/AIPerf "
        "export, or a CSV with columns " + ", ".join(CSV_COLUMNS) + " and concurrency or batch",
    )


def _number(path: Path, data: dict, *keys: str) -> float | None:
    for key in keys:
        value = data
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def _find(data: Any, key: str) -> Any:
    """The first value of `key` anywhere in nested dicts (genai-perf nests its input config)."""
    if isinstance(data, dict):
        if key in data and not isinstance(data[key], dict):
            return data[key]
        for v in data.values():
            found = _find(v, key)
            if found is not None:
                return found
    return None


def _telemetry_gpu(data: dict) -> str | None:
    """The GPU preset of an AIPerf export's --gpu-telemetry, where every GPU it saw has one name that matches one."""
    from kvcalc.hardware.probe import match_preset
    from kvcalc.model.presets import GPU_DIR, preset_names

    def values(d: Any) -> list:
        return list(d.values()) if isinstance(d, dict) else []

    telemetry = data.get("telemetry_data")
    endpoints = values(telemetry.get("endpoints")) if isinstance(telemetry, dict) else []
    names = [gpu.get("gpu_name") for ep in endpoints if isinstance(ep, dict) for gpu in values(ep.get("gpus"))
             if isinstance(gpu, dict)]  # fmt: skip
    one = {n for n in names if isinstance(n, str)} if all(isinstance(n, str) for n in names) else set()
    return match_preset(one.pop(), preset_names(GPU_DIR)) if len(one) == 1 else None


def _from_json(path: Path, data: dict, defaults: dict) -> dict:
    """One run from vLLM's / SGLang's bench_serving JSON or a genai-perf / AIPerf export: its figures, and
    what the file says of the model, GPU, engine and tp where the command line does not."""
    found: dict = {}
    if "time_to_first_token" in data or "inter_token_latency" in data:  # genai-perf / AIPerf
        ttft = _number(path, data, "time_to_first_token.avg")
        tpot = _number(path, data, "inter_token_latency.avg")
        prompt = _number(path, data, "input_sequence_length.avg")
        new = _number(path, data, "output_sequence_length.avg")
        conc = _find(data, "concurrency")
        model = _find(data, "model") or _find(data, "model_names")  # genai-perf; AIPerf's input_config.endpoint
        model = model[0] if isinstance(model, list) and model else model
        found["gpu"] = _telemetry_gpu(data)
    else:  # vllm bench serve --save-result, SGLang bench_serving
        ttft = _number(path, data, "mean_ttft_ms")
        tpot = _number(path, data, "mean_tpot_ms", "mean_itl_ms")
        done = _number(path, data, "completed") or 0
        prompt = (_number(path, data, "total_input_tokens") or 0) / done if done else None
        new = (_number(path, data, "total_output_tokens") or 0) / done if done else None
        conc = data.get("max_concurrency")
        info = data.get("server_info") if isinstance(data.get("server_info"), dict) else None
        model = data.get("model_id") or data.get("model") or (info or {}).get("model_path")
        if info is not None:  # SGLang's bench_serving keeps the server's /get_server_info
            found.update(engine="sglang", tp=info.get("tp_size") if isinstance(info.get("tp_size"), int) else None)
    missing = [
        n for n, v in (("TTFT", ttft), ("TPOT", tpot), ("prompt length", prompt), ("output length", new)) if not v
    ]
    if missing:
        raise _bad(path, "no " + ", ".join(missing))
    if not isinstance(conc, (int, float)) or conc < 1:
        raise _bad(path, "no max concurrency (a closed-loop run with --max-concurrency is needed)")
    rec = dict(defaults, prompt=round(prompt), new=round(new), concurrency=int(conc), ttft_ms=ttft, tpot_ms=tpot)
    for key, value in dict(found, model=model).items():
        rec[key] = rec.get(key) or value
    rec["tp"] = rec.get("tp") or 1
    return rec


def _from_csv(path: Path, text: str, defaults: dict) -> list[dict]:
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        raise _bad(path, "no rows")
    cols = set(rows[0])
    missing = [c for c in ("prompt", "new") if c not in cols] + (
        ["concurrency or batch"] if not cols & {"concurrency", "batch"} else []
    )
    if missing:
        raise _bad(path, "missing column " + ", ".join(missing))
    out = []
    for i, r in enumerate(rows, start=2):
        try:
            rec = dict(defaults)
            for key in ("model", "gpu", "engine"):
                if r.get(key):
                    rec[key] = r[key].strip()
            rec.update(tp=int(r.get("tp") or rec.get("tp") or 1), prompt=int(r["prompt"]), new=int(r["new"]))
            if r.get("concurrency"):
                rec["concurrency"] = int(r["concurrency"])
            else:
                rec["batch"] = int(r["batch"])
            rec["ttft_ms"] = float(r["ttft_ms"]) if r.get("ttft_ms") else None
            rec["tpot_ms"] = float(r["tpot_ms"]) if r.get("tpot_ms") else None
        except (KeyError, ValueError, TypeError) as e:
            raise _bad(path, f"line {i}: {e}") from None
        out.append(rec)
    return out


def _measured(model: Any, rec: dict) -> Any:
    """A run read from a file as the Measured model checks it, or one line naming the file and the field."""
    from pydantic import ValidationError

    from kvcalc.model.validate import validation_message

    try:
        return model(**rec)
    except ValidationError as exc:
        raise _bad(Path(rec["file"]), validation_message(exc)) from None


def read_runs(paths: list[Path], defaults: dict) -> list[dict]:
    import json

    runs = []
    for path in paths:
        try:
            text = path.read_text()
        except OSError as e:
            raise _bad(path, e.strerror or "unreadable") from None
        if path.suffix.lower() == ".csv":
            found = _from_csv(path, text, defaults)
        else:
            try:
                docs = [json.loads(text)]
            except ValueError:
                try:  # SGLang appends one JSON object per line
                    docs = [json.loads(line) for line in text.splitlines() if line.strip()]
                except ValueError:
                    raise _bad(path, "not JSON or CSV") from None
            found = [_from_json(path, d, defaults) for d in docs if isinstance(d, dict)]
            if not found:
                raise _bad(path, "no result object")
        for rec in found:
            for key in ("model", "gpu", "engine"):
                if not rec.get(key):
                    raise _bad(path, f"no {key} (give --{key})")
            rec["file"] = str(path)
        runs += found
    return runs


@app.command()
def calibrate(
    files: Annotated[
        list[Path], typer.Argument(help="Benchmark results: vLLM/SGLang JSON, genai-perf/AIPerf export, CSV.")
    ],
    gpu: Annotated[
        Optional[str],
        typer.Option(
            "--gpu", "-g", help="GPU preset the runs used (default: the file's: a CSV's, AIPerf's telemetry)."
        ),
    ] = None,
    engine: Annotated[
        Optional[str],
        typer.Option(
            "--engine", help="vllm, sglang, trtllm or llamacpp (default: the file's: a CSV's; SGLang's JSON)."
        ),
    ] = None,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Model (default: the file's).")] = None,
    tp: Annotated[
        Optional[int],
        typer.Option(
            "--tp", help="Tensor-parallel GPUs of the runs (default: the file's, else 1; a CSV's tp column wins)."
        ),
    ] = None,
    save: Annotated[
        bool, typer.Option("--save/--no-save", help="Save the fit for later estimates (default: save).")
    ] = True,
    fmt: FmtOpt = Fmt.table,
) -> None:
    """Fit the speed estimate to your own benchmark runs on one GPU + engine; later estimates there use it.

    Prints the median error on your points before and after; saves to $KVCALC_PRESETS/calibration/.
    CSV columns: model, gpu, tp, engine, prompt, new, concurrency or batch, ttft_ms, tpot_ms."""
    import json

    from kvcalc.plan.calibrating import Measured, calibrate_runs
    from kvcalc.plan.calibration import user_file
    from kvcalc.plan.estimated import engine_for_estimate

    # NOTE: an engine's spellings are read (TensorRT-LLM, llama.cpp); a stand-in (lmdeploy, tgi) is refused,
    # as its runs would calibrate another engine's terms.
    given = engine_for_estimate(engine, ceiling=False, nearest=False) if engine else None
    defaults = {"gpu": gpu, "engine": given, "model": model, "tp": tp}
    runs = [_measured(Measured, r) for r in read_runs(files, defaults)]
    groups: dict[tuple[str, str], list] = {}
    for r in runs:
        groups.setdefault((r.gpu, engine_for_estimate(r.engine, ceiling=False, nearest=False) or r.engine), []).append(
            r
        )
    results = []
    for (g, e), rs in groups.items():
        res = calibrate_runs(rs, g, e)
        if save:
            path = user_file(res.gpu, e)
            path.parent.mkdir(parents=True, exist_ok=True)
            doc = {"constants": res.constants, "points": res.points, "files": sorted({r.file for r in rs})}
            path.write_text(json.dumps(doc, indent=1) + "\n")
            res.saved_to = str(path)
        results.append(res)

    def sheets() -> list:
        from kvcalc.present.render import Sheet

        out = []
        for res in results:
            sheet = Sheet(
                title=f"Calibration: {res.engine} on {res.gpu}, {res.points} points", columns=["", "before", "after"]
            )
            for m in res.error_before:
                sheet.rows.append([f"median {m} error", f"{res.error_before[m]:.1%}", f"{res.error_after[m]:.1%}"])
            sheet.notes.append(
                f"Saved to {res.saved_to}: later estimates on {res.gpu} + {res.engine} use it and say so."
                if res.saved_to
                else "Not saved (--no-save)."
            )
            out.append(sheet)
        return out

    payload = (
        results[0].model_dump(mode="json")
        if len(results) == 1
        else {"results": [r.model_dump(mode="json") for r in results]}
    )
    _emit(fmt, payload, sheets(), [r.model_dump() for r in results])
