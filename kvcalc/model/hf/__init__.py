"""Hugging Face config.json readers: one module per family group, assembled by reader.py."""
