"""llama-server's serving defaults (tools/server/server.cpp, common/common.h): the slots and the batch that
`generate --engine llamacpp --concurrency/--rate` schedules with where no launch flag says otherwise, and the memory
llama.cpp's --fit keeps free. Its one cache (unified over the slots) is the default -c, the training context, shared
by the 4 slots, lowered as --fit lowers it to the largest -c llama.cpp's buffers fit (plan/quants.largest_context); a
server launched for its slots (-np) is given the largest -c that fits (plan/serve_pool.llamacpp_cells)."""

# NOTE: an unset --parallel is 4 slots over one unified cache (PR #16736; its log line: "setting n_parallel = 4 and
# kv_unified = true"): at most 4 requests run at once, the others wait for a slot.
SLOTS = 4
# NOTE: common_params.n_batch: one update_slots() pass is one batch of at most 2,048 tokens, every generating slot's
# next token first, then prompt tokens (llama_decode splits it into ubatches of 512).
N_BATCH = 2048
# NOTE: kept free of llama.cpp's buffers for the CUDA context and driver: llama.cpp's own --fit targets 1024 MiB
# free (llama_params_fit_impl, ggml-org/llama.cpp#20153); `fit` and `plan --engine llamacpp` keep the same.
FIT_HEADROOM = 1 << 30
