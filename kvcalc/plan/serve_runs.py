"""Runs of alike decode steps in the serving simulation (plan/serve.py): a run's time summed without
timing every step, and how many of its steps end before an arrival. Pure: a step timer in, seconds
or steps out."""

from __future__ import annotations

import math
from collections.abc import Callable

# A step's time from its composition: (decoding sequences, their contexts summed, prefill tokens,
# the tokens those prefill sequences already held (summed), prefill sequences) -> seconds.
StepTimer = Callable[[int, int, int, int, int], float]

LINEAR_TOLERANCE = 1e-9  # relative: a run whose midpoint lies on its chord is summed as a series


def run_seconds(timer: StepTimer, n: int, context_sum: int, k: int) -> float:
    """Seconds of k decode-only steps of n sequences whose contexts sum to context_sum at the first
    step and each grow by one a step. NOTE: step times are convex piecewise-linear in the context
    (a max of memory and compute lines plus constants), so a run whose midpoint lies on the chord
    is linear throughout and sums as an arithmetic series; otherwise it is split in two."""
    if k <= 0:
        return 0.0
    a = timer(n, context_sum, 0, 0, 0)
    if k == 1:
        return a
    b = timer(n, context_sum + n * (k - 1), 0, 0, 0)
    if k == 2:
        return a + b
    m = (k - 1) // 2
    mid = timer(n, context_sum + n * m, 0, 0, 0)
    chord = a + (b - a) * m / (k - 1)
    if abs(mid - chord) <= LINEAR_TOLERANCE * max(abs(b), abs(a)):
        return k * (a + b) / 2
    return run_seconds(timer, n, context_sum, m + 1) + run_seconds(timer, n, context_sum + n * (m + 1), k - m - 1)


def steps_before(timer: StepTimer, n: int, context_sum: int, k_max: int, budget: float) -> int:
    """The most steps (<= k_max, at least one) of a decode run that end no later than `budget`
    seconds from now: a new arrival is seen at the first step boundary after it."""
    if run_seconds(timer, n, context_sum, k_max) <= budget:
        return k_max
    a, b = timer(n, context_sum, 0, 0, 0), timer(n, context_sum + n * (k_max - 1), 0, 0, 0)
    if a >= budget:
        return 1
    lo, hi = 1, k_max - 1
    m = (k_max - 1) // 2
    if k_max > 2 and abs(timer(n, context_sum + n * m, 0, 0, 0) - (a + (b - a) * m / (k_max - 1))) <= (
        LINEAR_TOLERANCE * max(a, b)
    ):
        # Linear steps a + d j: j steps take j a + d j (j - 1) / 2, solved for j (no more step times).
        d = (b - a) / (k_max - 1)

        def total(j: int) -> float:
            return j * a + d * j * (j - 1) / 2

        j = budget / a if d == 0 else ((d / 2 - a) + math.sqrt((a - d / 2) ** 2 + 2 * d * budget)) / d
        j = max(1, min(int(j), k_max - 1))
        while j > 1 and total(j) > budget:
            j -= 1
        while j < k_max - 1 and total(j + 1) <= budget:
            j += 1
        return j
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if run_seconds(timer, n, context_sum, mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo
