"""GGUF files: the header and tensor table (reader), ggml type sizes (types), metadata -> ModelSpec (arch), hub listing and range reads (hub)."""
