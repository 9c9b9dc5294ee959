"""After the yes: what happened when AI-Parrot ran the confirmed call, reported to the
service so the approvers see it under their decision.

    reporter = OutcomeReporter(HitlClient(url, token))
    report_outcomes(agent.tool_manager, reporter)

:func:`report_outcomes` wraps one ``ToolManager``'s ``execute_tool`` (ai-parrot 1.2.4).
The wrapper publishes a :class:`~hitl_telegram_channel.call.Run` for the dispatch;
when a :class:`~hitl_telegram_channel.guard.HitlConfirmationGuard` question confirms
the call, the guard writes the service's record id into it, and once ``execute_tool``
has returned or raised, the wrapper hands the report to the reporter (a background
thread: the agent never waits for it). What is reported:

- a value, or a successful ``ToolResult`` → ``executed``, with ``duration_ms`` (from the
  confirmation to the end of the dispatch, not the wait for the human) and a summary of
  the result (``summarize``, at most 500 characters);
- a ``ToolResult`` that says it failed (``success`` false, or a status such as
  ``error``, ``forbidden``, ``timeout``) → ``failed`` with its ``error``;
- an exception → ``failed`` with ``"<type>: <message>"``, and the exception goes on
  unchanged (ai-parrot's ``AbstractTool`` path turns an ``error`` ``ToolResult`` into a
  ``ValueError`` itself in its default mode, so it arrives here as one);
- a dispatch that never ends (the task cancelled, the process interrupted or killed) →
  nothing: the service marks the call ``unknown`` after the route's
  ``expect_outcome_seconds``, which is the truth (nobody knows whether it ran).

Only a call a question of ours confirmed is reported: not a call the guard let through
from its own window (its window store is the agent's, the service has no record of that
call), nor a grant, nor a tool that needs no confirmation.

Why a wrapper on the instance rather than a ``ToolManager`` subclass: the manager an
agent uses is built by the agent (``BasicAgent`` makes its own), so only the instance
can be reached. Why not AI-Parrot's FEAT-538 invocation observer, which sits exactly
around the tool body: a manager has one observer slot, which AI-Parrot's task memory
uses, and the observer is told neither the parameters nor the confirmation.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from typing import Any, Callable, Optional, Tuple

from parrot.tools.abstract import ToolResult

from .call import Run, running
from .client import MAX_REPORT_CHARS
from .reporter import OutcomeReporter

logger = logging.getLogger("hitl_telegram_channel")

#: ``ToolResult.status`` values that say the call did not do what it does (ai-parrot
#: 1.2.4's manager and tools use these); any other status with ``success`` true
#: (``success``, ``pending`` for a job started) is a run.
FAILED_STATUSES = frozenset(
    {"error", "forbidden", "not_found", "cancelled", "timeout", "authorization_required"}
)
#: Marks a manager whose ``execute_tool`` already reports (installing twice would
#: report every call twice).
_MARK = "_hitl_outcome_reporter"

Summarize = Callable[[str, Any], Optional[str]]


def summarize_result(tool_name: str, result: Any) -> Optional[str]:
    """The default summary of a successful run: the ``ToolResult``'s ``voice_text``,
    else its ``result`` (or the returned value itself), as one line of text (JSON for
    structures), cut to 500 characters. ``None`` for no result.

    It is shown to the route's approvers in Telegram: pass ``summarize`` to
    :func:`report_outcomes` for a tool whose result they should not read."""
    value = result
    if isinstance(result, ToolResult):
        value = result.voice_text if result.voice_text else result.result
    if value is None:
        return None
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, default=str, sort_keys=False)
        except (TypeError, ValueError):
            text = repr(value)
    return _cut(" ".join(text.split())) or None


def outcome_of(
    tool_name: str, result: Any, summarize: Optional[Summarize] = summarize_result
) -> Tuple[str, Optional[str], Optional[str]]:
    """``(status, summary, error)`` for what ``execute_tool`` returned."""
    if isinstance(result, ToolResult) and (
        not result.success or result.status in FAILED_STATUSES
    ):
        error = result.error or f"the tool reported no success (status {result.status!r})"
        if result.status not in ("error", "success") and not error.startswith(result.status):
            error = f"{result.status}: {error}"
        return "failed", None, _cut(error)
    summary = None
    if summarize is not None:
        try:
            summary = summarize(tool_name, result)
        except Exception as exc:  # noqa: BLE001 - a summary must never cost the report
            logger.warning(
                "outcome summary of %r failed (%s): reported without one",
                tool_name, type(exc).__name__,
            )
        summary = _cut(summary) if isinstance(summary, str) and summary else None
    return "executed", summary, None


def error_of(exc: BaseException) -> str:
    """``"<type>: <message>"`` (or the type alone), cut to 500 characters."""
    message = str(exc)
    name = type(exc).__name__
    return _cut(f"{name}: {message}" if message else name)


def report_outcomes(
    tool_manager: Any,
    reporter: OutcomeReporter,
    *,
    summarize: Optional[Summarize] = summarize_result,
) -> Any:
    """Reports the outcome of every call a :class:`HitlConfirmationGuard` question
    confirms on ``tool_manager`` (an AI-Parrot ``ToolManager``), through ``reporter``.
    Returns ``tool_manager``.

    ``summarize(tool_name, result)`` gives a successful run's summary (``None`` for
    none; ``summarize=None`` never sends one). A manager already reporting is left as
    it is. A ``clone()`` of the manager is not wrapped (nor does it carry the guards).
    """
    if not isinstance(reporter, OutcomeReporter):
        raise TypeError(f"reporter must be an OutcomeReporter, not {type(reporter).__name__}")
    execute = getattr(tool_manager, "execute_tool", None)
    if execute is None or not asyncio.iscoroutinefunction(execute):
        raise TypeError(
            f"{type(tool_manager).__name__} has no async execute_tool: not an AI-Parrot ToolManager"
        )
    if getattr(tool_manager, _MARK, None) is not None:
        logger.warning("%r already reports its outcomes: left as it is", tool_manager)
        return tool_manager

    @functools.wraps(execute)
    async def execute_tool(tool_name: str, parameters: Any, *args: Any, **kwargs: Any) -> Any:
        run = Run(tool=tool_name)
        token = running.set(run)
        try:
            result = await execute(tool_name, parameters, *args, **kwargs)
        except Exception as exc:
            # Not CancelledError, KeyboardInterrupt or SystemExit (BaseException): a
            # run cut short is `unknown`, which the service says itself.
            _report(reporter, run, "failed", None, error_of(exc))
            raise
        finally:
            running.reset(token)
        if run.record_id is not None:
            status, summary, error = outcome_of(tool_name, result, summarize)
            _report(reporter, run, status, summary, error)
        return result

    tool_manager.execute_tool = execute_tool
    setattr(tool_manager, _MARK, reporter)
    return tool_manager


def _report(
    reporter: OutcomeReporter,
    run: Run,
    status: str,
    summary: Optional[str],
    error: Optional[str],
) -> None:
    if run.record_id is None:
        return
    duration_ms = None
    if run.confirmed_at is not None:
        duration_ms = max(0, int((time.monotonic() - run.confirmed_at) * 1000))
    try:
        reporter.submit(
            run.record_id, status, summary=summary, error=error, duration_ms=duration_ms
        )
    except Exception:  # noqa: BLE001 - submit never raises; this is the last guard
        logger.exception("outcome %s of %s not queued", status, run.record_id)


def _cut(text: str) -> str:
    """At most :data:`MAX_REPORT_CHARS` characters, an ellipsis marking a cut."""
    if len(text) <= MAX_REPORT_CHARS:
        return text
    return text[: MAX_REPORT_CHARS - 1] + "…"
