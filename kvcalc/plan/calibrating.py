"""Pure refit of the estimate's constants for one GPU + engine from a user's own measurements
(`kvcalc calibrate`): the measured records in, the fitted constants and the error before and after
out. Reading the files is cli/calibrate.py's; saving is the command's."""

from pydantic import Field

from kvcalc.results import Result


# NOTE: no `from __future__ import annotations`: Pydantic would compile every annotation string at import.
class Measured(Result):
    """One measured run: a static `batch` or closed-loop `concurrency`, mean TTFT and TPOT in ms. The bounds are the
    boundary a user's file is checked at (cli/calibrate.py names the file and the field that breaks one)."""

    file: str
    model: str = Field(min_length=1)
    gpu: str = Field(min_length=1)
    engine: str = Field(min_length=1)
    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    prompt: int = Field(ge=1)
    new: int = Field(ge=1)
    batch: int | None = Field(None, ge=1)
    concurrency: int | None = Field(None, ge=1)
    ttft_ms: float | None = Field(None, gt=0, allow_inf_nan=False)
    tpot_ms: float | None = Field(None, gt=0, allow_inf_nan=False)


class CalibrationResult(Result):
    gpu: str
    engine: str
    points: int
    constants: dict[str, float]  # the fitted ones only; the rest stay the shipped fit's
    error_before: dict[str, float]  # median |predicted / measured - 1| per metric, shipped constants
    error_after: dict[str, float]
    saved_to: str | None = None


def calibrate_runs(runs: list[Measured], gpu: str, engine: str) -> CalibrationResult:
    """Fit the per-step, per-sequence and per-layer engine costs and the family's bandwidth and FLOP
    efficiency to the runs (all on one GPU + engine), from the shipped constants."""
    from kvcalc.cost.fitting import Point, Setup, fit, interval, median_abs_error, setup_features
    from kvcalc.cost.shard import link_for
    from kvcalc.cost.step import Deployment
    from kvcalc.engines.kernels import gpu_as_run_by, prompt_chunk
    from kvcalc.errors import UsageError
    from kvcalc.hardware.family import gpu_family
    from kvcalc.model.presets import get_gpu
    from kvcalc.plan.calibration import shipped
    from kvcalc.plan.inputs import resolve
    from kvcalc.plan.serve_fit import run_features

    g = gpu_as_run_by(get_gpu(gpu), engine)
    fam = gpu_family(g)
    points = []
    for r in runs:
        spec = resolve(r.model).spec
        setup = Setup(r.batch, r.concurrency, r.prompt, r.new)
        chunk = prompt_chunk(engine)
        dep = Deployment(tp=r.tp, pp=r.pp, link=link_for(g))
        if r.concurrency is not None:
            # NOTE: a closed-loop run is fitted through the serving simulation generate --concurrency prints
            sf = run_features(spec, g, dep, setup, engine=engine, dtype=None, kv_dtype="bf16")
        else:
            sf = setup_features(spec, g, dep, setup, None, "bf16", chunk)
        for metric, value in (("ttft_ms", r.ttft_ms), ("tpot_ms", r.tpot_ms)):
            if value:
                points.append(Point(sf, engine, metric, value, 1.0, r.file))
    if not points:
        raise UsageError("no TTFT or TPOT figures to fit in the files given")
    base, _ = shipped()
    names = [f"bw_eff.{fam}", f"step_s.{engine}", f"seq_s.{engine}", f"decode_layer_s.{engine}"]
    if any(p.metric == "ttft_ms" for p in points):
        names += [f"mfu.{fam}", f"prefill_layer_s.{engine}"]
    if any(p.sf.run is not None and p.metric == "ttft_ms" for p in points):
        names.append(f"server_s.{engine}")  # a served run's TTFT holds the API server's time
    fitted = fit(points, base, names)
    mine = {n: fitted[n] for n in names}
    if len(points) >= 10:  # NOTE: fewer points say little about the spread; keep the shipped interval then
        mine.update(interval(points, fitted))

    def errors(c: dict) -> dict[str, float]:
        out = {}
        for m in ("ttft_ms", "tpot_ms"):
            sel = [p for p in points if p.metric == m]
            if sel:
                out[m] = median_abs_error(sel, c)
        return out

    return CalibrationResult(
        gpu=g.name,
        engine=engine,
        points=len(points),
        constants=mine,
        error_before=errors(base),
        error_after=errors(fitted),
    )
