"""TensorRT-LLM's KV pool before anyone runs trtllm-serve: its defaults and the pool its PyTorch backend sizes."""
