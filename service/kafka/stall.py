"""The last resort against a client call that blocks past its own timeout.

librdkafka 2.16's transactional calls can block for good when a coordinator's node dies:
``send_offsets_to_transaction`` waits for a coordinator it no longer looks for (confluentinc/librdkafka
#5456: the coordinator request's timeout is never checked; #5511: a decommissioned broker stays the
cached coordinator). The thread waits in C, so nothing in Python can interrupt it. :class:`Stall`
watches such a call from a thread of its own: when the call has not returned ``GRACE_S`` after its own
timeout, the process says so in one line and exits with :class:`service.errors.StalledError`'s code. Under
exactly-once that loses nothing: the restarted instance registers the same transactional id, which
aborts (or completes) whatever transaction was open, and reads again from the committed offsets.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import structlog

from service.errors import StalledError

_log = structlog.get_logger("microbatch.sink")

GRACE_S = 10.0
"""Beyond a call's own timeout: librdkafka answers within its timers' granularity, so ten seconds more is
a call that will not return, not a slow answer."""


class Stall:
    """One watcher thread (started with the first guard; none with ``watch=False``, where the caller
    runs :meth:`check`) for the calls of one client, made one at a time. ``exit``: how the process ends
    (``os._exit``: the stuck thread holds the client, so no clean shutdown can complete); ``clock``:
    monotonic seconds; ``grace_s``: how long past its timeout a call may take."""

    def __init__(
        self,
        exit: Callable[[int], object] = os._exit,
        clock: Callable[[], float] = time.monotonic,
        *,
        watch: bool = True,
        grace_s: float = GRACE_S,
    ) -> None:
        self._exit = exit
        self._grace_s = grace_s
        self._clock = clock
        self._watch = watch
        self._cond = threading.Condition()
        self._armed: tuple[str, float, float] | None = None  # the call, its limit, its deadline
        self._thread: threading.Thread | None = None

    @contextmanager
    def guard(self, call: str, timeout_s: float) -> Iterator[None]:
        """Exit the process if the body (``call``, with its own ``timeout_s``) has not returned
        ``grace_s`` after that timeout."""
        limit_s = timeout_s + self._grace_s
        with self._cond:
            self._armed = (call, limit_s, self._clock() + limit_s)
            if self._thread is None and self._watch:
                self._thread = threading.Thread(target=self._run, name="stall-watch", daemon=True)
                self._thread.start()
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                self._armed = None

    def check(self) -> float | None:
        """End the process if the guarded call is overdue; else the seconds until it would be (None:
        no call is guarded)."""
        if self._armed is None:
            return None
        call, limit_s, deadline = self._armed
        left = deadline - self._clock()
        if left > 0:
            return left
        self._stalled(call, limit_s)
        return None

    def _run(self) -> None:
        with self._cond:
            while True:
                self._cond.wait(self.check())

    def _stalled(self, call: str, limit_s: float) -> None:
        error = StalledError(call, limit_s)
        _log.critical("client_call_stalled", call=call, waited_s=limit_s, exit_code=error.exit_code)
        print(f"microbatch: {error}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        self._exit(error.exit_code)
