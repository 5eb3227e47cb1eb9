"""The `kvcalc` command (`python -m kvcalc`, and the console script's entry point)."""

import gc


def main() -> None:
    # NOTE: a kvcalc run is one short process: CPython's cyclic garbage collector spends about 13 ms
    # of a 200 ms start scanning the objects that importing Typer, Rich and Pydantic creates, none of
    # which is garbage; reference counting frees what the run itself discards. Measured with and
    # without it (benchmarks/startup.py --memory): peak memory of the largest grids and `kvcalc lab`
    # moves by under 0.5 MiB, a 16k-point chart by 3 MiB, and each runs faster without it.
    # Only the command turns it off; `import kvcalc` (the Python API) leaves it on.
    gc.disable()
    from kvcalc.cli.app import app

    try:
        app(prog_name="kvcalc")
    finally:
        # NOTE: at exit CPython collects once more, collector off or not, and that pass scans every
        # object the imports made, none of them garbage: 48 M of the 900 M instructions `kvcalc
        # generate 7b --gpu a100` ran, about 15 ms of its 150 ms (benchmarks/startup.py). Frozen
        # objects are out of its reach. What it gives up: finalizers of cyclic garbage at exit, which
        # Python never promised; kvcalc closes every file it writes (with, write_text, savefig).
        gc.freeze()


if __name__ == "__main__":
    main()
