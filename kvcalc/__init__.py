"""kvcalc: LLM inference memory and speed, from the architecture up."""

__version__ = "0.1.0"
