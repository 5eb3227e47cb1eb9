"""Pure serving under load: a step-level simulation of continuous batching as vLLM's V1 scheduler
runs it (vllm/v1/core/sched/scheduler.py, 0.19), timed by any step-time function.

Each engine step first schedules the running requests in admission order (a decode costs one
token, an unfinished prompt the rest of its chunk), then, if nothing was preempted, admits waiting
requests first-come-first-served while max_num_seqs and the token budget (max_num_batched_tokens)
allow; a prompt longer than the budget left is chunked. KV is held in blocks of `block_size` tokens
from a pool of `kv_blocks`: when a running request cannot get its next block, the most recently
admitted one is preempted (its blocks freed, recomputed from scratch later, vLLM's RECOMPUTE mode)
and goes back to the front of the queue.

Closed loop: `concurrency` clients, each sending its next request when the last one finishes; a
request reaches the queue at the next step or the one after (turnaround_steps), so identical requests
drift apart as real clients' do.
Open loop: Poisson arrivals at `rate` requests/s (seeded). Runs of decode-only steps whose batch
does not change are jumped over: the step time is evaluated at the run's ends and its midpoint, and
summed as an arithmetic series where it is linear in the context (split where it is not), so the
work grows with the number of events (arrivals, prefills, finishes), not with tokens. Limits.policy
swaps in SGLang's or TensorRT-LLM's scheduler (plan/serve_policies.py)."""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import NamedTuple

from kvcalc.plan.serve_load import Load, lengths
from kvcalc.plan.serve_load import arrivals as load_arrivals
from kvcalc.plan.serve_runs import StepTimer, run_seconds, steps_before
from kvcalc.plan.serve_stats import ServeStats
from kvcalc.plan.serve_stats import stats as _stats


class Limits(NamedTuple):
    """The engine's scheduler limits and KV pool."""

    max_num_seqs: int
    max_num_batched_tokens: int
    kv_blocks: int
    block_size: int = 16
    policy: type | None = None  # the scheduler: None, vLLM V1's; plan/serve_policies.py: SGLang's, TRT-LLM's
    max_prefill_tokens: int = 16384  # SGLang's prompt tokens a prefill batch admits (server_args.max_prefill_tokens)
    recv_interval: int = 1  # SGLang's --scheduler-recv-interval: decode iterations between reads of new requests

    def pool_holds(self, tokens: int) -> int:
        """Whole requests of `tokens` tokens the KV pool holds at once (each in whole blocks)."""
        return self.kv_blocks // -(-tokens // self.block_size)


def decoding_at_once(load: Load, limits: Limits) -> int:
    """The most of a closed loop's requests that decode in one step: its clients, the engine's max_num_seqs and the
    requests its KV pool holds at the shortest prompt and a token (each decoding request holds them)."""
    shortest = max(1, int(load.prompt * min(1.0, load.range_ratio)))
    return max(1, min(load.concurrency or 1, limits.max_num_seqs, limits.pool_holds(shortest + 1)))


class _Req:
    # A decoding request's computed and generated counts are as of engine step `sync`; both grow
    # by one a step after it (the engine materializes them when it needs them one by one).
    __slots__ = ("arrival", "prompt", "new", "first", "finish", "computed", "generated", "sync", "key", "version")

    def __init__(self, arrival: float, prompt: int, new: int) -> None:
        self.arrival, self.prompt, self.new = arrival, prompt, new
        self.first = self.finish = -1.0
        self.computed = self.generated = self.sync = self.key = self.version = 0


def new_request(lengths: list[tuple[int, int]], i: int, t: float, spread: tuple[int, int] | None = None) -> _Req:
    """The i-th request, sent at t; `spread` (j, c) cuts its new tokens to ceil(new x j / c)."""
    prompt, new = lengths[i]
    return _Req(t, prompt, -(-new * spread[0] // spread[1]) if spread else new)


class Trace(NamedTuple):
    """A closed-loop run in engine steps (its schedule does not depend on step times). `steps`: a
    StepTimer's five arguments, k steps alike (a decode run) and the step clock it starts at;
    `requests`: (arrival, first token, finish) step clocks and new tokens of every request;
    `in_system`: the requests in the system during each entry of `steps`."""

    steps: list[tuple[int, int, int, int, int, int, int]]
    requests: list[tuple[int, int, int, int]]
    in_system: list[int]
    preemptions: int = 0


def simulate(timer: StepTimer, load: Load, limits: Limits) -> ServeStats:
    """Run `load` through the scheduler, timing each step with `timer`.

    Closed loop: the figures are over the steady state, the requests that finish after the
    `concurrency`-th finish and no later than the one that sends the last request (the burst at
    start and the drain at the end, when fewer clients are busy, are left out); requests/s is
    those completions over that window. Open loop: over every request, from the first arrival
    to the last finish."""
    return (limits.policy or _Engine)(load, limits).run(timer)


GOLDEN = (math.sqrt(5) - 1) / 2


def turnaround_steps(i: int) -> int:
    """Engine steps a closed-loop client's i-th request misses after it is sent: 0 or 1, drawn by
    the golden-ratio sequence (deterministic, evenly mixed). NOTE: the client's turnaround (the
    stream's end, a new HTTP request, tokenizing, the hand-off to the engine) is comparable to a
    decode step, so a request sent as a step ends makes the next step or misses it about as often;
    without it, identical requests that finish together would prefill together for ever (every
    prompt in one step), which real fixed-length runs do not."""
    return int((i * GOLDEN) % 1.0 >= 0.5)


class _Clients:
    """What every scheduler shares: the clients and the queue they send to, the running requests,
    the pool's free blocks, the finish heap and the record of a run. A closed-loop request reaches
    the queue turnaround_steps after it is sent (`pending` until then); an engine with nothing to do
    takes the next pending request at once (a client's turnaround is far shorter than a step)."""

    def __init__(self, load: Load, limits: Limits) -> None:
        self.load, self.limits = load, limits
        self.bs = limits.block_size
        self.lengths, self.reqs = lengths(load), 0
        self.waiting: deque[_Req] = deque()
        self.pending: list[tuple[int, int, _Req]] = []  # (engine step it reaches the queue at, tie, request)
        self.running: dict[_Req, None] = {}  # admission order
        self.free = limits.kv_blocks
        self.clock = 0  # engine steps done
        self.heap: list[tuple[int, int, int, _Req]] = []  # (step it finishes at, tie, version, request)
        self.pushes = 0  # NOTE: the tie-break: a counter, not id(r), so equal finish steps pop in one order every run
        self.finished: list[_Req] = []
        self.preemptions = 0
        self.trace: Trace | None = None

    def _send(self, t: float, spread: tuple[int, int] | None = None, client: bool = False) -> None:
        """The next request, sent at t (`client`: by a closed-loop client, after its turnaround)."""
        r = new_request(self.lengths, self.reqs, t, spread)
        if client:
            # NOTE: through `pending` even when it misses no step, so that the queue keeps the order
            # in which requests reached it: one that missed the last step goes before one sent as it ended.
            d = turnaround_steps(self.reqs) if self.load.turnaround else 0
            heapq.heappush(self.pending, (self.clock + d, self.reqs, r))
        else:
            self.waiting.append(r)
        self.reqs += 1

    def _start(self) -> None:
        """The closed loop's clients send their first requests at once."""
        load = self.load
        if load.concurrency is None:
            return
        c = min(load.concurrency, load.requests)
        for i in range(c):
            # NOTE: unless the run is a benchmark's burst, the clients' first requests are cut to 1/C,
            # 2/C, .., C/C of `new` tokens, so that the clients are spread evenly over a request's life,
            # as they are in a long run. They end before the steady state the figures are taken over.
            self._send(0.0, None if load.burst else (i + 1, c), client=True)

    def _deliver(self, idle: bool) -> None:
        """Pending requests whose step has come join the queue; `idle`: the engine has nothing else,
        so the next of them comes now (the others keep their distance behind it)."""
        if idle and self.pending and self.pending[0][0] > self.clock:
            shift = self.pending[0][0] - self.clock
            self.pending = [(s - shift, i, r) for s, i, r in self.pending]  # still a heap
        while self.pending and self.pending[0][0] <= self.clock:
            self.waiting.append(heapq.heappop(self.pending)[2])

    def _pending_cap(self, k: int) -> int:
        """A run of k decode steps cut at the step that sees the next pending request."""
        return max(1, min(k, self.pending[0][0] - self.clock)) if self.pending else k

    def _retire(self, r: _Req, now: float) -> None:
        r.finish = now
        self.free += self._released(r)
        self.finished.append(r)
        if self.load.concurrency is not None and self.reqs < self.load.requests:
            self._send(now, client=True)

    def _pages(self, tokens: int) -> int:
        return -(-tokens // self.bs)

    def _released(self, r: _Req) -> int:
        return self._pages(r.computed)

    def _idle(self) -> bool:
        return not self.running and not self.waiting

    def _in_system(self) -> int:
        """Requests sent and not finished: queued, running or on their way to the queue."""
        return len(self.running) + len(self.waiting) + len(self.pending)


class _Engine(_Clients):
    """vLLM V1's scheduler state. Decoding requests are held as aggregates (their count, context sum,
    how many start a new block at each step, a heap of finish steps), so a step costs O(prefilling
    requests) unless the token budget or the pool binds; then every request is brought up to date
    and the step scheduled one request at a time, in vLLM's order (the last running is preempted first)."""

    def __init__(self, load: Load, limits: Limits) -> None:
        super().__init__(load, limits)
        self.prefilling: dict[_Req, None] = {}  # running requests with prompt tokens still to compute
        self.dec = 0  # decoding requests
        self.dec_computed = 0  # their computed tokens, summed, as of `clock`
        self.starts = [0] * self.bs  # decoders by (computed - clock) mod block: who opens a block when

    # --- decoders as aggregates -----------------------------------------------------------

    def _add_decoder(self, r: _Req) -> None:
        r.sync, r.version = self.clock, r.version + 1
        r.key = (r.computed - self.clock) % self.bs
        self.dec += 1
        self.dec_computed += r.computed
        self.starts[r.key] += 1
        self.pushes += 1
        heapq.heappush(self.heap, (self.clock + r.new - r.generated, self.pushes, r.version, r))

    def _drop_decoder(self, r: _Req) -> None:
        self._sync(r)
        r.version += 1  # its heap entry is stale now
        self.dec -= 1
        self.dec_computed -= r.computed
        self.starts[r.key] -= 1

    def _sync(self, r: _Req) -> None:
        gone = self.clock - r.sync
        r.computed, r.generated, r.sync = r.computed + gone, r.generated + gone, self.clock

    def _opening(self, k: int) -> int:
        """Blocks the decoders open over the next k steps: one each time a context fills a block."""
        cycles, rest = divmod(k, self.bs)
        return cycles * self.dec + sum(self.starts[(-(self.clock + j)) % self.bs] for j in range(rest))

    def _room(self, k: int) -> int:
        """The most decode steps, at most k and at least one, whose new blocks the free ones hold (the
        first step's are taken already). NOTE: exact, not whole cycles of block_size steps: with the
        pool full and requests waiting (vLLM's preemption regime) a run then lasts until the next
        block shortage rather than a step at a time."""
        first = self._opening(1)
        if k <= 1 or self._opening(k) - first <= self.free:
            return max(1, k)
        lo, hi = 1, k  # the steps' blocks fit at lo, not at hi (_opening grows with the steps)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self._opening(mid) - first <= self.free else (lo, mid)
        return lo

    # --- one step ---------------------------------------------------------------------------

    aggregate_preemption = True  # False: every preempting step goes the slow way (tests compare the two)

    def _preempt_newest(self, work: list[tuple[_Req, int]], want: int) -> bool:
        """The slow way's preemption where the budget held every decoder, without listing them: the
        newest running requests go, one at a time, until the blocks the others want fit (each request's
        want is fixed before anyone goes, and vLLM pops from the end only when the one in hand does not
        fit, so that is the fewest at the end whose pages cover the shortfall). False, changing nothing,
        when every running request would go: the slow way decides that step."""
        takes, victims, freed = dict(work), [], 0
        for r in reversed(self.running):
            if want <= self.free + freed:
                break
            held = r.computed if r in self.prefilling else r.computed + self.clock - r.sync
            take = takes.get(r, 0) if r in self.prefilling else 1
            want -= self._blocks(held, take)
            freed += self._pages(held)
            victims.append(r)
        if want > self.free + freed or len(victims) >= len(self.running):
            return False
        for v in victims:  # newest first; each goes to the front of the queue, so they end in admission order
            if v not in self.prefilling:
                self._drop_decoder(v)
            self._preempt(v)
        self.free -= want
        return True

    def _preempt(self, r: _Req) -> None:
        """vLLM's RECOMPUTE preemption: its blocks freed, back to the front of the queue to start over."""
        del self.running[r]
        self.prefilling.pop(r, None)
        self.free += self._pages(r.computed)
        r.computed = 0
        self.waiting.appendleft(r)
        self.preemptions += 1

    def _blocks(self, computed: int, take: int) -> int:
        return self._pages(computed + take) - self._pages(computed)

    def _need(self, r: _Req) -> int:
        return r.prompt + r.generated - r.computed

    def _schedule(self) -> tuple[list[tuple[_Req, int]], bool, int, bool]:
        """(prompt work scheduled, whether anyone was preempted, token budget left, the slow way): the
        decoders are all scheduled, as aggregates, unless the step went the slow way, which lists
        every running request with its tokens (0: left out by the budget)."""
        budget = self.limits.max_num_batched_tokens
        if self.dec <= budget:
            # NOTE: the unfinished prompts are the newest running requests (one is admitted only if
            # every request before it was scheduled whole), so the decoders take a token each and
            # the prompts the budget left, in admission order: vLLM's loop, without walking it.
            left, work = budget - self.dec, []
            for r in self.prefilling:
                take = min(self._need(r), left)
                work.append((r, take))
                left -= take
            want = self._opening(1) + sum(self._blocks(r.computed, t) for r, t in work)
            if want <= self.free:
                self.free -= want
                return work, False, left, False
            if self.aggregate_preemption and self._preempt_newest(work, want):
                return [(r, t) for r, t in work if r in self.running], True, left, False
        # The slow way: vLLM's loop over the running requests in order, preempting the newest.
        for r in list(self.running):
            if r not in self.prefilling:
                self._drop_decoder(r)
        self.heap.clear()
        scheduled, preempted = [], False
        queue = list(self.running)
        i = 0
        while i < len(queue) and budget > 0:
            r = queue[i]
            take = min(self._need(r), budget)
            want = self._blocks(r.computed, take)
            while want > self.free:
                victim = queue.pop()
                self._preempt(victim)
                preempted = True
                if victim is r:
                    break
            if r not in self.running:
                break
            self.free -= want
            scheduled.append((r, take))
            budget -= take
            i += 1
        for r in queue[i:]:
            scheduled.append((r, 0))  # not scheduled this step; still running
        return scheduled, preempted, budget, True

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
                now = arrivals[nxt]  # idle until the next arrival (open loop only)
                continue
            work, preempted, budget, slow = self._schedule()
            if not preempted:
                while self.waiting and len(self.running) < self.limits.max_num_seqs and budget > 0:
                    r = self.waiting[0]
                    take = min(self._need(r), budget)
                    want = self._blocks(r.computed, take)
                    if want > self.free:
                        break
                    self.waiting.popleft()
                    self.running[r] = None
                    self.prefilling[r] = None
                    self.free -= want
                    work.append((r, take))
                    budget -= take
            if not work and not self.dec:
                raise ValueError("a single request does not fit the KV pool")
            # The step's composition: the decoders (aggregated, or listed after the slow way) and prompt work.
            n, contexts, pre, held, seqs = self.dec, self.dec_computed + self.dec, 0, 0, 0
            for r, take in work:
                if not take:
                    continue
                if r in self.prefilling:
                    pre, held, seqs = pre + take, held + r.computed, seqs + 1
                else:
                    n, contexts = n + 1, contexts + r.computed + 1
            k = 1
            if not pre and not slow and not preempted:
                # NOTE: a decode-only step that admitted no one keeps whoever waits blocked (free blocks
                # only shrink, the batch stays full) until a finish: the batch is the same until its
                # first finish, a block shortage or, with an empty queue, an arrival.
                k = self._room(self.heap[0][0] - self.clock if self.heap else 1)
                if not self.waiting:  # a request reaching the queue would be admitted
                    k = self._pending_cap(k)
                    if nxt < len(arrivals):
                        k = steps_before(timer, n, contexts, k, arrivals[nxt] - now)
                seconds = run_seconds(timer, n, contexts, k)
                if k > 1:
                    self.free -= self._opening(k) - self._opening(1)  # the first step's blocks are taken
            else:
                seconds = timer(n, contexts, pre, held, seqs)
            inside = self._in_system()
            area += seconds * inside
            now += seconds
            if self.trace is not None:
                self.trace.steps.append((n, contexts, pre, held, seqs, k, self.clock))
                self.trace.in_system.append(inside)
            steps += k
            self.clock += k
            self.dec_computed += self.dec * k
            self._finish_decoders(now)
            for r, take in work:
                if not take and r in self.running and r not in self.prefilling:
                    self._add_decoder(r)  # left out of this step by the budget
                    continue
                if not take:
                    continue
                r.computed += take
                if r.computed == r.prompt + r.generated:
                    r.generated += 1  # the step that computes a prompt's last token samples the next
                    if r.first < 0:
                        r.first = now
                if r.generated >= r.new:
                    self._retire(r, now)
                elif r.generated and r.computed == r.prompt + r.generated - 1:
                    # NOTE: a prompt chunk that stops one token short (generated 0) is still a prompt:
                    # its last token samples the first output token in a later step, as vLLM does.
                    self.prefilling.pop(r, None)
                    self._add_decoder(r)
        return _stats(self.finished, load, steps, self.preemptions, area, now)

    def _finish_decoders(self, now: float) -> None:
        while self.heap and self.heap[0][0] <= self.clock:
            _, _, version, r = heapq.heappop(self.heap)
            if version != r.version or r not in self.running:
                continue
            self._drop_decoder(r)
            self._retire(r, now)

    def _retire(self, r: _Req, now: float) -> None:
        del self.running[r]
        self.prefilling.pop(r, None)
        super()._retire(r, now)
