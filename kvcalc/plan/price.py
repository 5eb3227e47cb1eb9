"""Cost of a deployment: on-demand $ per hour from the GPU presets' dated prices or --price overrides,
and $ per million output tokens at a given output rate. Pure arithmetic, linear in the price."""

from kvcalc.errors import UsageError


def parse_prices(items: list[str] | None) -> dict[str, float]:
    """--price G=USD/h (repeatable, or comma-joined): {gpu name: US$ per GPU-hour}."""
    out: dict[str, float] = {}
    for item in items or []:
        for part in item.split(","):
            name, sep, value = part.partition("=")
            try:
                usd = float(value.strip().removesuffix("/h").removesuffix("/hr"))
            except ValueError:
                usd = -1.0
            if not sep or not name.strip() or not usd > 0 or usd == float("inf"):
                raise UsageError(f"--price '{part}' is not GPU=USD/h", hint="for example --price h100=2.49")
            out[name.strip().lower()] = usd
    return out


def usd_per_gpu_hour(gpu, prices: dict[str, float] | None = None) -> float | None:  # noqa: ANN001
    """A --price override (by preset name or alias), else the preset's dated price, else None."""
    for key in (gpu.name, *gpu.aliases):
        if prices and key.lower() in prices:
            return prices[key.lower()]
    return gpu.price_usd_per_hour


def usd_per_hour(gpu, gpus: int, prices: dict[str, float] | None = None) -> float | None:  # noqa: ANN001
    one = usd_per_gpu_hour(gpu, prices)
    return None if one is None else one * gpus


def usd_per_million_tokens(usd_hour: float, tokens_per_s: float) -> float:
    """$ per million tokens produced at `tokens_per_s` for the whole deployment."""
    if tokens_per_s <= 0:
        return float("inf")
    return usd_hour / (tokens_per_s * 3600) * 1e6
