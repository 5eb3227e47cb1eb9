"""`python -m kvcalc` runs the CLI."""

from kvcalc.cli import app

app(prog_name="kvcalc")
