"""Reporting outcomes off the agent's path: :class:`OutcomeReporter` sends
``POST /v1/confirmations/{id}/outcome`` from a background thread.

    reporter = OutcomeReporter(HitlClient("http://127.0.0.1:8080", token))
    reporter.submit(decision.id, "executed", summary="billing v42 live", duration_ms=850)

Why a thread and not a request the agent awaits: the report is for the approvers, and
the agent has its tool's result already; waiting for the service (or for its timeout
when it is down) would only delay the next step of the agent. Why a thread and not an
asyncio task: a task still pending when the event loop closes (``asyncio.run``
returning, the agent's last call) is cancelled and its report lost, and the reporter
must work from synchronous code too.

Why reports survive the interpreter's exit: the thread is a daemon (a service that does
not answer must never keep the agent from exiting), and an ``atexit`` hook waits up to
``exit_timeout`` seconds for the reports still queued (``atexit`` runs while daemon
threads are still alive), as sentry-sdk's background worker flushes its queue at exit.
What a crash or a ``kill -9`` loses, the service covers: a route with
``expect_outcome_seconds`` marks the call ``unknown``, never success.

A report that cannot be sent is logged as a warning (the record id, the status and the
service's error; never the summary or the error text, which may carry the tool's data)
and dropped; it never raises into the agent. A report the service could not answer
(unreachable, timeout, 429, 502, 503, 504) is sent again, up to ``retries`` more times:
the same report again is accepted, so a retry after a lost answer is harmless.
"""

from __future__ import annotations

import atexit
import collections
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Deque, Dict, Optional

from .client import HitlClient, HitlError, outcome_body

logger = logging.getLogger("hitl_telegram_channel")

#: HTTP statuses after which the same report is sent again.
_RETRIED_STATUSES = frozenset({429, 502, 503, 504})


@dataclass(frozen=True)
class _Report:
    confirmation_id: str
    #: The request's body, checked when submitted.
    body: Dict[str, Any]

    @property
    def status(self) -> str:
        return self.body["status"]


class OutcomeReporter:
    """Sends outcome reports in the background, in the order they were submitted.

    Args:
        client: The agent's client (its token is the one that asked).
        retries: Further attempts of a report the service could not answer.
        max_backoff: Longest wait between attempts, in seconds (a ``Retry-After``
            from the service is honoured up to this bound).
        exit_timeout: How long the interpreter's exit waits for queued reports.
        max_queued: Reports beyond this many waiting are dropped with a warning (a
            service down for long must not grow the agent's memory without bound).
    """

    def __init__(
        self,
        client: HitlClient,
        *,
        retries: int = 3,
        max_backoff: float = 10.0,
        exit_timeout: float = 10.0,
        max_queued: int = 1000,
    ) -> None:
        if not isinstance(client, HitlClient):
            raise TypeError(f"client must be a HitlClient, not {type(client).__name__}")
        self.client = client
        self.retries = max(0, int(retries))
        self.max_backoff = float(max_backoff)
        self.exit_timeout = float(exit_timeout)
        self.max_queued = max(1, int(max_queued))
        self._queue: Deque[_Report] = collections.deque()
        # Guards the queue, the count of reports not yet settled and the thread.
        self._cond = threading.Condition()
        self._unsettled = 0
        self._closed = False
        self._thread: Optional[threading.Thread] = None
        # Set by close(): a backoff wait ends at once.
        self._stop = threading.Event()

    def __repr__(self) -> str:
        return f"OutcomeReporter({self.client!r})"

    def submit(
        self,
        confirmation_id: str,
        status: str,
        *,
        summary: Optional[str] = None,
        error: Optional[str] = None,
        duration_ms: Optional[int] = None,
    ) -> bool:
        """Queues one report and returns at once: ``True`` when queued, ``False`` when
        dropped (closed, or ``max_queued`` reports already waiting; both logged). Never
        waits for the service, and nothing the service does makes it raise; a report
        the contract cannot hold (see :meth:`HitlClient.report_outcome`) is a
        ``ValueError`` here, before anything is queued."""
        report = _Report(confirmation_id, outcome_body(status, summary, error, duration_ms))
        with self._cond:
            if self._closed:
                logger.warning(
                    "outcome %s of %s not reported: the reporter is closed", status, confirmation_id
                )
                return False
            if len(self._queue) >= self.max_queued:
                logger.warning(
                    "outcome %s of %s not reported: %d reports are already waiting",
                    status, confirmation_id, len(self._queue),
                )
                return False
            self._queue.append(report)
            self._unsettled += 1
            self._start()
            self._cond.notify_all()
        return True

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Waits until every report submitted so far is sent or given up; ``False``
        when ``timeout`` (seconds) passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._unsettled:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout: Optional[float] = None) -> bool:
        """Takes no more reports, waits for the queued ones as :meth:`flush` does,
        then stops the thread. Returns whether every report was settled."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        settled = self.flush(timeout)
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(None if timeout is None else max(0.0, timeout))
        atexit.unregister(self._at_exit)
        return settled

    def _start(self) -> None:
        # Called with the lock held: one thread, started on the first report.
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._run, name="hitl-outcome-reporter", daemon=True
        )
        self._thread.start()
        atexit.register(self._at_exit)

    def _at_exit(self) -> None:
        with self._cond:
            waiting = self._unsettled
        if waiting and not self.flush(self.exit_timeout):
            with self._cond:
                lost = self._unsettled
            logger.warning(
                "%d outcome report(s) not sent within %.0f s of exit", lost, self.exit_timeout
            )

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stop.is_set():
                    self._cond.wait()
                if not self._queue:
                    return
                report = self._queue.popleft()
            try:
                self._send(report)
            except Exception:  # noqa: BLE001 - the thread must outlive any one report
                logger.exception("outcome report of %s failed", report.confirmation_id)
            finally:
                with self._cond:
                    self._unsettled -= 1
                    self._cond.notify_all()

    def _send(self, report: _Report) -> None:
        for attempt in range(self.retries + 1):
            try:
                self.client._post_outcome(report.confirmation_id, report.body)
            except HitlError as e:
                # No answer at all (unreachable, client_timeout), or one that asks to
                # come back (a proxy's 502 page counts); not a 200 the client could
                # not read (unexpected_response without a status): that one was taken.
                transient = e.status in _RETRIED_STATUSES or (
                    e.status is None and e.code != "unexpected_response"
                )
                if transient and attempt < self.retries:
                    delay = min(self.max_backoff, e.retry_after or 0.5 * 2**attempt)
                    if self._stop.wait(delay):
                        logger.warning(
                            "outcome %s of %s not reported: closed while retrying after %s",
                            report.status, report.confirmation_id, e,
                        )
                        return
                    continue
                logger.warning(
                    "outcome %s of %s not reported: %s", report.status, report.confirmation_id, e
                )
                return
            logger.info("outcome %s of %s reported", report.status, report.confirmation_id)
            return
