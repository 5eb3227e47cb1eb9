"""The serving simulation's schedulers other than vLLM's (plan/serve.py holds vLLM V1's and the
shared figures): SGLang's and TensorRT-LLM's, each as its release runs it by default. Both count
tokens and blocks only, so a closed loop's schedule does not depend on step times (plan/serve_trace.trace).

SGLang (0.5.x, sglang/srt/managers/scheduler.py and schedule_policy.py, no --enable-mixed-chunk):
each iteration runs EITHER a prefill batch OR a decode batch. A prefill batch is tried first: the
unfinished chunked request, then waiting requests in order while seats (max_running_requests),
chunked_prefill_size, max_prefill_tokens (Limits: 16,384 by default) and the pool allow. The pool test reserves, beside
each admitted prompt, its max_new_tokens, and for every running request its tokens still to come times
new_token_ratio (0.7 at start, decaying by 0.7 x 0.86 / 600 a decode step to 0.098). A prompt longer
than the chunk budget left is chunked; its later chunks come first in the next prefill. The running
decodes are paused for that iteration: they gain no token. When admission fails for want of seats or
tokens the batch is marked full and no prefill is tried until a running request finishes. A decode
batch that does not fit the pool retracts the requests with the fewest output tokens (recomputed
later, back of the queue) and resets new_token_ratio to (decoded + 20 x running) / max_new summed.
With --scheduler-recv-interval N > 1 (SchedulerRecvSkipper; 1, off, by default) the scheduler reads new
requests only once the iterations since its last read weigh N: a decode iteration 1, a prefill 1,000 (so
right after a prefill), an idle one 1 (an idle loop spins at once); a request that reached it waits for that.

TensorRT-LLM (1.x, trtllm-serve PyTorch backend, tensorrt_llm/_torch/pyexecutor/scheduler.py): the
capacity scheduler's default GUARANTEED_NO_EVICT admits a waiting request, in order, only if the
blocks of its whole prompt + max new tokens fit beside what the running requests will need to their
end; the first that does not fit stops admission (no preemption: it queues). The micro-batch
scheduler then puts the running decodes (a token each) and the admitted prompts, whole (context
chunking is off by default), in ONE iteration while max_num_tokens (8,192) allows, up to
max_batch_size (2,048) requests. A prompt samples its first token in the step that computes it."""

from __future__ import annotations

import heapq

from kvcalc.plan.serve import Limits, Load, _Clients, _Req
from kvcalc.plan.serve_load import arrivals as load_arrivals
from kvcalc.plan.serve_runs import StepTimer, run_seconds, steps_before
from kvcalc.plan.serve_stats import ServeStats
from kvcalc.plan.serve_stats import stats as _stats

SGLANG_CLIP_MAX_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
SGLANG_INIT_NEW_TOKEN_RATIO = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO x schedule_conservativeness 1.0
SGLANG_MIN_NEW_TOKEN_RATIO = 0.7 * 0.14  # x SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
SGLANG_NEW_TOKEN_RATIO_DECAY = (SGLANG_INIT_NEW_TOKEN_RATIO - SGLANG_MIN_NEW_TOKEN_RATIO) / 600  # a decode step
SGLANG_RETRACT_DECODE_STEPS = 20
SGLANG_RECV_PREFILL_WEIGHT = 1000  # SGLANG_SCHEDULER_RECV_SKIPPER_WEIGHT_DEFAULT (a decode iteration weighs 1)


class _Policy(_Clients):
    """What both schedulers share beyond plan/serve._Clients: decoding requests as aggregates over a
    decode-step clock (`dclock`; a step that decodes nobody leaves them where they are), finishes on
    the heap, the loop, and the Trace record of every step or run of alike decode steps."""

    def __init__(self, load: Load, limits: Limits) -> None:
        super().__init__(load, limits)
        self.dclock = 0  # decode steps
        self.dec_computed = 0  # the decoders' computed tokens summed, as of dclock

    def _sync(self, r: _Req) -> None:
        gone = self.dclock - r.sync
        r.computed, r.generated, r.sync = r.computed + gone, r.generated + gone, self.dclock

    def _add_decoder(self, r: _Req) -> None:
        r.sync, r.version = self.dclock, r.version + 1
        self.running[r] = None
        self.dec_computed += r.computed
        self.pushes += 1
        heapq.heappush(self.heap, (self.dclock + r.new - r.generated, self.pushes, r.version, r))

    def _drop_decoder(self, r: _Req) -> None:
        self._sync(r)
        r.version += 1  # its heap entry is stale now
        del self.running[r]
        self.dec_computed -= r.computed

    def _decode(self, k: int) -> None:
        """k decode steps of every running request; those that reach their new tokens finish."""
        self.dclock += k
        self.dec_computed += len(self.running) * k

    def _finish_decoders(self, now: float) -> None:
        while self.heap and self.heap[0][0] <= self.dclock:
            _, _, version, r = heapq.heappop(self.heap)
            if version != r.version or r not in self.running:
                continue
            self._drop_decoder(r)
            self._retire(r, now)

    def _prompt_done(self, r: _Req, take: int, now: float) -> bool:
        """A prompt chunk of `take` tokens computed: True when the prompt is whole (its first token sampled)."""
        r.computed += take
        if r.computed < r.prompt + r.generated:
            return False
        r.generated += 1
        if r.first < 0:
            r.first = now
        if r.generated >= r.new:
            self._retire(r, now)
        else:
            self._add_decoder(r)
        return True

    def _run_length(self, timer: StepTimer, until: float | None, admits: bool) -> int:
        """Decode steps alike from now: to the first finish, within the pool, and (`admits`: a request
        that reached the queue would be admitted) no later than the step that sees the next pending
        request or (`until`: seconds to it) arrival."""
        n = len(self.running)
        k = max(1, self.heap[0][0] - self.dclock if self.heap else 1)
        k = max(1, min(k, self._page_bound(n)))
        if admits:
            k = self._pending_cap(k)
            if until is not None:
                k = steps_before(timer, n, self.dec_computed + n, k, until)
        return k

    def _page_bound(self, n: int) -> int:
        return self.bs * (self.free // max(n, 1))

    def run(self, timer: StepTimer) -> ServeStats:
        load = self.load
        arrivals = load_arrivals(load)
        now, steps, area = 0.0, 0, 0.0
        self._start()
        nxt = 0
        while len(self.finished) < load.requests:
            while nxt < len(arrivals) and arrivals[nxt] <= now:
                self._send(arrivals[nxt])
                nxt += 1
            self._deliver(self._idle())
            if self._idle():
                now = arrivals[nxt]  # open loop only
                continue
            until = arrivals[nxt] - now if nxt < len(arrivals) else None
            in_system = self._in_system()
            n, contexts, pre, held, seqs, k, seconds, done = self._step(timer, until)
            area += seconds * in_system
            now += seconds
            if self.trace is not None:
                self.trace.steps.append((n, contexts, pre, held, seqs, k, self.clock))
                self.trace.in_system.append(in_system)
            steps += k
            self.clock += k
            self._finish_decoders(now)
            for r, take in done:
                self._prompt_done(r, take, now)
        return _stats(self.finished, load, steps, self.preemptions, area, now)

    def _step(self, timer: StepTimer, until: float | None) -> tuple:
        raise NotImplementedError


class SglangPolicy(_Policy):
    """SGLang's default scheduler: prefill-or-decode iterations (module docstring)."""

    def __init__(self, load: Load, limits: Limits) -> None:
        super().__init__(load, limits)
        self.chunked: _Req | None = None  # the prompt being chunked: neither waiting nor decoding
        self.full = False  # running_batch.batch_is_full
        self.ratio = SGLANG_INIT_NEW_TOKEN_RATIO
        self.dec_left = 0  # the decoders' new tokens still to come, summed, as of dclock
        self.since = 0  # the recv skipper's count: iterations since the scheduler last read its requests, weighed

    def _add_decoder(self, r: _Req) -> None:
        super()._add_decoder(r)
        self.dec_left += r.new - r.generated

    def _drop_decoder(self, r: _Req) -> None:
        super()._drop_decoder(r)
        self.dec_left -= r.new - r.generated
        self.full = False  # the batch shrank

    def _decode(self, k: int) -> None:
        super()._decode(k)
        self.dec_left -= len(self.running) * k

    def _idle(self) -> bool:
        return super()._idle() and self.chunked is None

    def _deliver(self, idle: bool) -> None:
        """Pending requests join the queue only when the scheduler reads (module docstring)."""
        if idle or self.since >= self.limits.recv_interval:
            self.since = 0
            super()._deliver(idle)

    def _pending_cap(self, k: int) -> int:
        """A decode run cut at the step that reads the next pending request."""
        if self.limits.recv_interval <= 1 or not self.pending:
            return super()._pending_cap(k)
        return max(1, min(k, self.limits.recv_interval - self.since))

    def _in_system(self) -> int:
        return super()._in_system() + (self.chunked is not None)

    def _reserved(self) -> float:
        """Tokens the running requests are expected to still write: remaining new x new_token_ratio."""
        if self.load.new <= SGLANG_CLIP_MAX_NEW_TOKENS:
            return self.dec_left * self.ratio
        return (
            sum(min(r.new - r.generated - (self.dclock - r.sync), SGLANG_CLIP_MAX_NEW_TOKENS) for r in self.running)
            * self.ratio
        )

    def _prefill(self) -> list[tuple[_Req, int]]:
        """get_new_batch_prefill: the prompt work of a prefill batch, its pages taken ([]: none)."""
        if (self.full or not self.waiting) and self.chunked is None:
            return []
        seats = self.limits.max_num_seqs - len(self.running)
        if seats <= 0 and self.chunked is None:
            self.full = True
            return []
        free = self.free * self.bs
        offset, cur = self._reserved(), 0
        rem_input, rem_chunk = self.limits.max_prefill_tokens, self.limits.max_num_batched_tokens
        work: list[tuple[_Req, int]] = []

        def take(r: _Req, t: int, reserve: int) -> None:
            nonlocal offset, cur, rem_input, rem_chunk
            paged = self._pages(t) * self.bs
            offset, cur = offset + paged + reserve, cur + paged
            rem_input, rem_chunk = rem_input - paged, rem_chunk - paged
            self.free -= self._pages(r.computed + t) - self._pages(r.computed)
            work.append((r, t))

        if self.chunked is not None:
            r, self.chunked = self.chunked, None
            need = r.prompt + r.generated - r.computed
            t = min(need, rem_chunk, max(int(free - offset), self.bs))
            take(r, t, min(r.new, SGLANG_CLIP_MAX_NEW_TOKENS) if t == need else 0)
        while self.waiting:
            if len(work) >= seats:
                self.full = True
                break
            r = self.waiting[0]
            need = r.prompt + r.generated - r.computed
            if need + min(max(r.new - r.generated, 0), SGLANG_CLIP_MAX_NEW_TOKENS) >= free - offset:
                self.full = True  # NO_TOKEN
                break
            paged = self._pages(need) * self.bs
            if paged >= rem_input and work:
                break
            t = need if paged <= rem_chunk else rem_chunk // self.bs * self.bs
            if t <= 0 or self._pages(r.computed + t) - self._pages(r.computed) > self.free:
                break
            self.waiting.popleft()
            take(r, t, min(r.new, SGLANG_CLIP_MAX_NEW_TOKENS) if t == need else 0)
            if free - offset <= 0 or free - cur <= 0:
                self.full = True
                break
            if rem_input <= 0 or rem_chunk <= 0:
                break
        return work

    def _retract(self) -> None:
        """retract_decode: free the requests with the fewest output tokens until the next step fits."""
        order = sorted(self.running, key=lambda r: r.generated + self.dclock - r.sync, reverse=True)
        while True:
            if len(order) == 1:
                break
            victim = order.pop()
            self._drop_decoder(victim)
            self.free += self._pages(victim.computed)
            victim.computed = 0
            self.waiting.append(victim)
            self.preemptions += 1
            if self._opening(1) <= self.free:
                break
        decoded = sum(r.generated + self.dclock - r.sync for r in self.running)
        total_new = sum(r.new for r in self.running)
        self.ratio = min(1.0, (decoded + SGLANG_RETRACT_DECODE_STEPS * len(self.running)) / (total_new + 1))

    def _opening(self, k: int) -> int:
        """Pages the decoders open over their next k steps."""
        if self.bs == 1:
            return len(self.running) * k
        d = self.dclock
        return sum(
            self._pages(r.computed + d - r.sync + k) - self._pages(r.computed + d - r.sync) for r in self.running
        )

    def _page_bound(self, n: int) -> int:
        return self.free // max(n, 1) if self.bs == 1 else super()._page_bound(n)

    def _step(self, timer: StepTimer, until: float | None) -> tuple:
        work = self._prefill()
        if work:
            # NOTE: a prefill iteration runs the prompts alone: the running decodes wait it out.
            pre, held = sum(t for _, t in work), sum(r.computed for r, _ in work)
            for r, t in work:
                if r.computed + t < r.prompt + r.generated:
                    self.chunked = r
            self.since += SGLANG_RECV_PREFILL_WEIGHT
            return 0, 0, pre, held, len(work), 1, timer(0, 0, pre, held, len(work)), work
        if not self.running:
            raise ValueError("a single request does not fit the KV pool")
        n = len(self.running)
        if self._opening(1) > self.free:
            self._retract()  # sets new_token_ratio instead of decaying it
            n, k = len(self.running), 1
            if self._opening(1) > self.free:
                raise ValueError("a single request does not fit the KV pool")
        else:
            # Unless the batch is full, an arrival is admitted at the next iteration.
            k = self._run_length(timer, until, admits=not (self.full or self.waiting))
            self.ratio = max(self.ratio - SGLANG_NEW_TOKEN_RATIO_DECAY * k, SGLANG_MIN_NEW_TOKEN_RATIO)
        contexts = self.dec_computed + n
        seconds = run_seconds(timer, n, contexts, k)
        self.free -= self._opening(k)
        self._decode(k)
        self.since += k
        return n, contexts, 0, 0, 0, k, seconds, []


class TrtllmPolicy(_Policy):
    """TensorRT-LLM's GUARANTEED_NO_EVICT capacity scheduler and its micro-batch scheduler (module docstring)."""

    def __init__(self, load: Load, limits: Limits) -> None:
        super().__init__(load, limits)
        self.free = limits.kv_blocks  # here: blocks not promised to a running request's whole length

    def _whole(self, r: _Req) -> int:
        return self._pages(r.prompt + r.new)

    def _released(self, r: _Req) -> int:
        return self._whole(r)

    def _step(self, timer: StepTimer, until: float | None) -> tuple:
        n, budget = len(self.running), self.limits.max_num_batched_tokens
        work: list[tuple[_Req, int]] = []
        pre = 0
        while self.waiting and n + len(work) < self.limits.max_num_seqs:
            r = self.waiting[0]
            if self._whole(r) > self.free or n + pre + r.prompt > budget:
                break  # the first request that does not fit stops admission
            self.waiting.popleft()
            self.free -= self._whole(r)
            work.append((r, r.prompt))
            pre += r.prompt
        if not work and not n:
            raise ValueError("a single request does not fit the KV pool (or its prompt max_num_tokens)")
        contexts = self.dec_computed + n
        if work:
            seconds, k = timer(n, contexts, pre, 0, len(work)), 1
        else:
            # NOTE: nothing is admitted until a request finishes (its promised blocks return) or,
            # with an empty queue, one arrives: the decode batch stays the same until then.
            k = self._run_length(timer, until, admits=not self.waiting)
            seconds = run_seconds(timer, n, contexts, k)
        self._decode(k)
        return n, contexts, pre, 0, len(work), k, seconds, work

    def _page_bound(self, n: int) -> int:
        return 1 << 62  # the blocks were promised at admission


POLICIES = {"sglang": SglangPolicy, "trtllm": TrtllmPolicy}  # engine name -> Limits.policy
