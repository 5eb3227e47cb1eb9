"""llama.cpp's buffers as llama-server of a stated build allocates them: build eras, KV cache, model and compute buffers."""
