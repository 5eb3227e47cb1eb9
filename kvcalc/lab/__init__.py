"""Checks of the premises on a tiny float64 decoder (kvcalc lab)."""
