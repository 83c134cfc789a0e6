"""A small CSP runtime: stages in threads joined by bounded channels.

The training pipeline is a graph of independent stages (loader -> target forward workers -> drafter
-> ...) that talk only through bounded channels. This module gives the three things such a graph
needs and that a bare ``threading`` + ``queue`` setup gets wrong:

* back-pressure: a :class:`Channel` holds at most ``capacity`` items, so a fast producer waits
  instead of filling memory;
* failure semantics: the FIRST exception in any stage cancels the whole graph. Every blocking
  channel operation polls a shared cancellation token with a short timeout, so a stage blocked on a
  full or empty channel wakes within ``poll_s`` and unwinds. :meth:`Graph.run` joins every thread
  and re-raises the error as :class:`StageError` naming the stage: no hang, no silent thread death;
* accounting: each stage records the time it spent blocked on ``put``/``get``; busy time is the
  rest. Each channel integrates its fill over time. Both are read as windowed fractions
  (:meth:`Graph.sample`) for the ``stage_busy`` and ``queue_fill`` log fields.

Normal shutdown is by closing, not cancelling: a stage that returns closes its inputs (upstream
producers then see :class:`ChannelClosed` on ``put`` and return too) and marks itself done on its
outputs (downstream consumers drain what is left, then see :class:`ChannelClosed` on ``get``).

Graceful stop on SIGINT/SIGTERM is the program's business: :func:`install_stop_handlers` sets a
:class:`threading.Event` that the stepping stage checks between steps; a second signal cancels the
graph outright.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

Clock = Callable[[], float]

#: How often a blocked channel operation re-checks the cancellation token. Short enough that a
#: cancelled graph unwinds in well under a second, long enough to cost nothing while waiting.
DEFAULT_POLL_S = 0.05


class ChannelClosed(Exception):
    """Raised by ``put`` on a closed channel, and by ``get`` on a closed, drained channel."""


class Cancelled(Exception):
    """Raised inside a stage's blocking operations once the graph has been cancelled."""


class StageError(RuntimeError):
    """The first exception raised by a stage, re-raised in the caller of :meth:`Graph.run`.

    Attributes:
        stage: name of the stage that failed.
        error: the original exception (also chained as ``__cause__``).
    """

    def __init__(self, stage: str, error: BaseException):
        super().__init__(f"stage {stage!r} failed: {type(error).__name__}: {error}")
        self.stage = stage
        self.error = error


class CancelToken:
    """Shared flag that tells every stage to unwind; remembers the first reason given."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self.reason: tuple[str, BaseException] | None = None

    def cancel(self, stage: str, error: BaseException) -> bool:
        """Cancel with a reason; returns True for the first caller only (the error that wins)."""
        with self._lock:
            first = self.reason is None
            if first:
                self.reason = (stage, error)
            self._event.set()
            return first

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        """Raise :class:`Cancelled` if the graph has been cancelled."""
        if self._event.is_set():
            raise Cancelled()


@dataclass
class StageStats:
    """Cumulative timings of one stage (seconds). Written by the stage's own thread only."""

    started: float | None = None
    stopped: float | None = None
    blocked: float = 0.0
    blocked_since: float | None = None  # set while the stage is inside a blocking put/get

    def blocked_until(self, now: float) -> float:
        """Total blocked time up to ``now``, counting a wait still in progress."""
        extra = now - self.blocked_since if self.blocked_since is not None else 0.0
        return self.blocked + extra


_current = threading.local()


def _stage_stats() -> StageStats | None:
    """Stats of the stage running in this thread (None outside a stage, e.g. in tests)."""
    return getattr(_current, "stats", None)


class Channel:
    """A bounded FIFO between stages, with close semantics and time-integrated fill.

    Args:
        name: label used in ``queue_fill``.
        capacity: maximum number of items held; ``put`` blocks while full.
        poll_s: how often a blocked operation re-checks cancellation and closing.
        clock: monotonic clock (injectable for tests).
    """

    def __init__(
        self,
        name: str,
        capacity: int,
        *,
        poll_s: float = DEFAULT_POLL_S,
        clock: Clock = time.perf_counter,
    ):
        if capacity < 1:
            raise ValueError(f"channel {name!r}: capacity must be >= 1, got {capacity}")
        self.name = name
        self.capacity = capacity
        self._q: queue.Queue = queue.Queue(maxsize=capacity)
        self._poll_s = poll_s
        self._clock = clock
        self._token: CancelToken | None = None
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._producers = 0
        self._producers_done = 0
        # Fill integral: sum of size * dt since the window start.
        self._size = 0
        self._t_last = clock()
        self._t_window = self._t_last
        self._integral = 0.0
        self.max_size = 0  # high-water mark, for tests and debugging

    # -- wiring (done by Graph) ------------------------------------------------------------------
    def _attach(self, token: CancelToken) -> None:
        self._token = token

    def _add_producer(self) -> None:
        with self._lock:
            self._producers += 1

    def producer_done(self) -> None:
        """One producer finished; once all have, consumers see end of stream after draining."""
        with self._lock:
            self._producers_done += 1
            if self._producers_done >= self._producers:
                self._closed.set()

    def close(self) -> None:
        """Close the channel: further ``put`` calls raise, ``get`` drains then raises."""
        self._closed.set()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    # -- fill accounting ---------------------------------------------------------------------------
    def _record(self, delta: int) -> None:
        with self._lock:
            now = self._clock()
            self._integral += self._size * (now - self._t_last)
            self._t_last = now
            self._size += delta
            self.max_size = max(self.max_size, self._size)

    def sample_fill(self, reset: bool = True) -> float:
        """Mean fill (0..1 of capacity) over time since the last reset."""
        with self._lock:
            now = self._clock()
            integral = self._integral + self._size * (now - self._t_last)
            span = now - self._t_window
            fill = integral / span / self.capacity if span > 0 else self._size / self.capacity
            # The count moves after the queue's own operation, so a put and a get racing in
            # other threads can leave it one past the capacity for a moment; a fill fraction
            # is at most 1 (the log's schema checks it: a record above 1 stopped a test run once).
            fill = min(1.0, max(0.0, fill))
            if reset:
                self._integral = 0.0
                self._t_last = now
                self._t_window = now
            return fill

    def qsize(self) -> int:
        return self._q.qsize()

    # -- blocking operations -----------------------------------------------------------------------
    @contextmanager
    def _blocked(self) -> Iterator[None]:
        """Count the time inside as the calling stage's time blocked on a channel."""
        stats = _stage_stats()
        t0 = self._clock()
        if stats is not None:
            stats.blocked_since = t0
        try:
            yield
        finally:
            if stats is not None:
                stats.blocked += self._clock() - t0
                stats.blocked_since = None

    def _check(self) -> None:
        if self._token is not None:
            self._token.check()

    def put(self, item: Any) -> None:
        """Append ``item``, waiting while the channel is full.

        Raises:
            ChannelClosed: the channel was closed (the consumer has finished).
            Cancelled: the graph was cancelled.
        """
        with self._blocked():
            while True:
                self._check()
                if self._closed.is_set():
                    raise ChannelClosed(self.name)
                try:
                    self._q.put(item, timeout=self._poll_s)
                except queue.Full:
                    continue
                self._record(+1)
                return

    def get(self) -> Any:
        """Remove and return the oldest item, waiting while the channel is empty.

        Raises:
            ChannelClosed: the channel is closed and drained (end of stream).
            Cancelled: the graph was cancelled.
        """
        with self._blocked():
            while True:
                self._check()
                try:
                    item = self._q.get(timeout=self._poll_s)
                except queue.Empty:
                    if self._closed.is_set() and self._q.empty():
                        raise ChannelClosed(self.name) from None
                    continue
                self._record(-1)
                return item


@dataclass
class Stage:
    """One unit of work run in its own thread.

    Args:
        name: label used in errors and ``stage_busy``.
        fn: called with no arguments in the stage's thread; it talks to the graph only through the
            channels it closes over. Returning, or raising :class:`ChannelClosed`, ends the stage
            normally; any other exception cancels the graph.
        inputs: channels this stage consumes (closed when it ends, to stop upstream producers).
        outputs: channels this stage produces (marked done when it ends, to end downstream).
    """

    name: str
    fn: Callable[[], None]
    inputs: Sequence[Channel] = ()
    outputs: Sequence[Channel] = ()
    stats: StageStats = field(default_factory=StageStats)


class Graph:
    """Runs stages in threads; the first failure stops them all and is re-raised.

    Args:
        stages: the stages; their channels are discovered from ``inputs``/``outputs``.
        clock: monotonic clock for busy-time accounting (injectable for tests).
        join_poll_s: how often the caller's thread wakes while joining (keeps signal handlers in
            the main thread responsive: Python runs them only between bytecodes).
    """

    def __init__(
        self,
        stages: Sequence[Stage],
        *,
        clock: Clock = time.perf_counter,
        join_poll_s: float = 0.1,
    ):
        names = [s.name for s in stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names must be unique, got {names}")
        self.stages = list(stages)
        self.token = CancelToken()
        self._clock = clock
        self._join_poll_s = join_poll_s
        self._threads: list[threading.Thread] = []
        self.channels: list[Channel] = []
        for stage in self.stages:
            for ch in (*stage.inputs, *stage.outputs):
                if ch not in self.channels:
                    self.channels.append(ch)
                    ch._attach(self.token)
            for ch in stage.outputs:
                ch._add_producer()
        self._window_start = clock()
        self._window_blocked = {s.name: 0.0 for s in self.stages}

    def _run_stage(self, stage: Stage) -> None:
        _current.stats = stage.stats
        stage.stats.started = self._clock()
        try:
            stage.fn()
        except (ChannelClosed, Cancelled):
            pass  # normal end of stream, or unwinding after another stage's failure
        except BaseException as exc:  # noqa: BLE001 - every failure must stop the graph
            self.token.cancel(stage.name, exc)
        finally:
            stage.stats.stopped = self._clock()
            for ch in stage.inputs:
                ch.close()
            for ch in stage.outputs:
                ch.producer_done()
            _current.stats = None

    def start(self) -> None:
        """Start every stage's thread (daemon threads, so a crash of the caller cannot hang exit)."""
        self._window_start = self._clock()
        for stage in self.stages:
            t = threading.Thread(
                target=self._run_stage, args=(stage,), name=f"stage-{stage.name}", daemon=True
            )
            self._threads.append(t)
            t.start()

    def cancel(self, reason: BaseException, stage: str = "<caller>") -> None:
        """Cancel the graph from outside (e.g. a second Ctrl-C)."""
        self.token.cancel(stage, reason)

    def join(self) -> None:
        """Wait for every stage; re-raise the first stage failure as :class:`StageError`."""
        try:
            for t in self._threads:
                while t.is_alive():
                    t.join(self._join_poll_s)
        except BaseException as exc:
            # KeyboardInterrupt or similar in the caller's thread: stop the stages, then propagate.
            self.token.cancel("<caller>", exc)
            for t in self._threads:
                t.join()
            raise
        if self.token.reason is not None:
            stage, error = self.token.reason
            raise StageError(stage, error) from error

    def run(self) -> None:
        """Start, then join (see :meth:`join`)."""
        self.start()
        self.join()

    def alive(self) -> list[str]:
        """Names of stages whose thread is still running."""
        # Not strict: before start() (or after it failed part way) only the first stages have a
        # thread, and the others are not running.
        return [s.name for s, t in zip(self.stages, self._threads, strict=False) if t.is_alive()]

    def sample(self, reset: bool = True) -> tuple[dict[str, float], dict[str, float]]:
        """Windowed accounting since the last reset.

        Returns:
            (stage_busy, queue_fill): fraction of the window's wall time each stage spent outside
            blocking channel operations, and each channel's time-averaged fill fraction.
        """
        now = self._clock()
        span = now - self._window_start
        busy: dict[str, float] = {}
        for s in self.stages:
            blocked = s.stats.blocked_until(now)
            w_blocked = blocked - self._window_blocked[s.name]
            start = max(self._window_start, s.stats.started or now)
            end = s.stats.stopped if s.stats.stopped is not None else now
            active = max(0.0, min(end, now) - start)
            busy[s.name] = max(0.0, min(1.0, (active - w_blocked) / span)) if span > 0 else 0.0
            if reset:
                self._window_blocked[s.name] = blocked
        fill = {ch.name: ch.sample_fill(reset=reset) for ch in self.channels}
        if reset:
            self._window_start = now
        return busy, fill


class StopRequest(threading.Event):
    """A graceful-stop flag that remembers which signal set it (``signum``; None if set by code)."""

    def __init__(self) -> None:
        super().__init__()
        self.signum: int | None = None


def install_stop_handlers(
    stop: StopRequest, on_second: Callable[[], None] | None = None
) -> Callable[[], None]:
    """Make SIGINT/SIGTERM request a graceful stop; a second signal calls ``on_second``.

    Must be called from the main thread (a Python rule for ``signal.signal``).

    Args:
        stop: set by the first signal (its ``signum`` recorded); the training loop then finishes
            its step, checkpoints and exits.
        on_second: called on a repeated signal; default raises KeyboardInterrupt in the main
            thread (the program then stops at once, without a final checkpoint).

    Returns:
        A function restoring the previous handlers.
    """
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum: int, frame: Any) -> None:
        if not stop.is_set():
            stop.signum = signum
            stop.set()
            return
        if on_second is not None:
            on_second()
        else:
            raise KeyboardInterrupt

    for sig in previous:
        signal.signal(sig, handler)

    def restore() -> None:
        for sig, h in previous.items():
            signal.signal(sig, h)

    return restore
