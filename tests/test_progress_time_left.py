"""The time left a job shows while it runs, replayed on synthetic progress streams with given timestamps (no
sleeping, nothing timed): after a fifth of the job it must be within 0.67–1.5 of the time really left, whatever
the stage's first steps cost."""

from __future__ import annotations

from guiapp.progress import Progress


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def replay(steps: list[tuple[float, int, float]], *, bytes_total: int = 0, work_total: float = 0.0,
           warm_up: float = 0.0) -> list[tuple[float, float, float | None]]:
    """Run a stage of `steps` (seconds it takes, bytes, work) through Progress; for each step, the fraction done,
    the seconds really left after it and the time left shown."""
    clock, events = Clock(), []
    progress = Progress(on_event=events.append, clock=clock)
    progress.start_stage("Working", total=len(steps), bytes_total=bytes_total, work_total=work_total)
    clock.now += warm_up
    shown = []
    for seconds, nbytes, work in steps:
        clock.now += seconds
        progress.step("piece", nbytes=nbytes, work=work)
        shown.append(events[-1])
    end = clock.now
    return [(event.fraction, end - (100.0 + warm_up + sum(s for s, _, _ in steps[:i + 1])), event.eta)
            for i, event in enumerate(shown)]


def ratio_after_a_fifth(replayed: list[tuple[float, float, float | None]]) -> float:
    """The time left shown at the first step past 20 % against the time really left then (the benchmark's
    measure, benchmarks/estimates.py)."""
    fraction, left, eta = next(r for r in replayed if 0.2 <= r[0] < 1)
    assert eta is not None
    return eta / left


def test_a_slow_first_step_does_not_stretch_the_time_left():
    """A merge's first tensor (the embeddings, a sixth of the bytes) also carries the stage's warm-up: threads
    starting, the first read not overlapped with anything. Measured from the stage's start, the rate made the time
    left about twice the real one for the rest of the job."""
    steps = [(0.65, 16_000_000, 0.0)] + [(0.04, 2_000_000, 0.0)] * 42
    replayed = replay(steps, bytes_total=100_000_000)
    assert 0.9 <= ratio_after_a_fifth(replayed) <= 1.1
    assert all(0.9 <= eta / left <= 1.1 for fraction, left, eta in replayed if 0.2 <= fraction < 1)


def test_a_warm_up_longer_than_a_step_fades_out():
    """An extraction's first decomposition also loads torch's linear algebra: its second step is slow too."""
    steps = [(1.9, 0, 5.0), (0.7, 0, 5.0)] + [(0.05, 0, 3.0)] * 30
    replayed = replay(steps, work_total=100.0)
    assert 0.67 <= ratio_after_a_fifth(replayed) <= 1.5


def test_a_generation_whose_tokens_grow_slower_is_predicted_by_their_cost():
    """Each token of a long generation attends to all the tokens before it: here the per-token time grows
    linearly from 10 ms to 60 ms. Counted as equal tokens, the time left after a fifth is about half the real one;
    counted by each token's cost (what the generate stage declares), it is right."""
    seconds = [0.010 + 0.0005 * index for index in range(100)]
    by_tokens = replay([(s, 0, 0.0) for s in seconds])
    by_cost = replay([(s, 0, s * 1000) for s in seconds], work_total=sum(seconds) * 1000)
    assert ratio_after_a_fifth(by_tokens) < 0.67  # why the stage counts its tokens' cost
    assert 0.9 <= ratio_after_a_fifth(by_cost) <= 1.1


def test_a_machine_that_gets_busier_is_followed():
    """Over a long stage the time left looks at the recent rate, not the whole stage's: here every step takes
    three times longer from the middle on."""
    steps = [(1.0, 1_000_000, 0.0)] * 100 + [(3.0, 1_000_000, 0.0)] * 100
    replayed = replay(steps, bytes_total=200_000_000)
    fraction, left, eta = next(r for r in replayed if r[0] >= 0.75)
    assert 0.9 <= eta / left <= 1.1


def test_the_time_left_is_unknown_before_any_work_and_zero_at_the_end():
    clock, events = Clock(), []
    progress = Progress(on_event=events.append, clock=clock)
    progress.start_stage("Working", total=2, bytes_total=10)
    assert events[-1].eta is None
    clock.now += 1
    progress.step("first", nbytes=5)
    assert events[-1].eta == 1.0  # the first step is all there is to go by
    clock.now += 1
    progress.step("second", nbytes=5)
    assert events[-1].eta == 0.0


def test_work_found_done_already_moves_the_bar_but_not_the_time_left():
    """Files already downloaded count as done at once; the time left comes from the bytes really transferred."""
    clock, events = Clock(), []
    progress = Progress(on_event=events.append, clock=clock)
    progress.start_stage("Downloading", total=3, bytes_total=300)
    progress.skip("cached", nbytes=100)
    assert events[-1].eta is None and events[-1].fraction > 0.3
    for _ in range(2):
        clock.now += 10
        progress.step("file", nbytes=50)
    assert events[-1].eta == 20.0  # 100 bytes left at 5 bytes a second
