"""Thin Typer commands: parse, ask plan/cost, present, print. The one error boundary lives in common.py."""
