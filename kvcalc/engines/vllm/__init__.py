"""vLLM 0.19: weights as it loads them, its memory profile and KV pool, its start-up figures."""
