"""A plain client for ``/v1/confirmations`` and ``/v1/grants``, for any Python agent
(standard library only).

    client = HitlClient("http://127.0.0.1:8080", token)
    decision = client.create("transfer", {"to": "ACME", "amount": 1200.5}, owner_id="alice")
    if decision.allowed:
        transfer(**decision.parameters)
        client.report_outcome(decision.id, "executed", duration_ms=850)

Why ``urllib`` rather than aiohttp or httpx: this module must import, and work, in an
agent that installed nothing but this package (the AI-Parrot channel, which needs
aiohttp, is the ``aiparrot`` extra), and a confirmation is a handful of requests per
decision, far from where a connection pool pays. The calls block; an asyncio agent runs
them in a thread (``await asyncio.to_thread(client.create, ...)``).

Every failure is a :class:`HitlError` carrying the service's error ``code``, so callers
branch on codes, never on message text. Nothing here ever treats a failure as an
approval: only a record whose ``status`` is ``confirmed`` has ``allowed`` true.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, TypeVar
from urllib.parse import quote, urlencode, urlsplit

T = TypeVar("T")

#: The statuses a request can end in; ``pending`` is the only other one.
TERMINAL_STATUSES = frozenset({"confirmed", "cancelled", "timeout"})
#: What an agent may report of running a confirmed call (``unknown`` is the service's own,
#: set when a route's ``expect_outcome_seconds`` pass with no report).
REPORTED_STATUSES = ("executed", "failed", "not_executed")
#: Every ``outcome.status`` a record may carry.
OUTCOME_STATUSES = frozenset(REPORTED_STATUSES) | {"unknown"}
#: The service's bound on a report's ``summary`` and ``error``, in characters.
MAX_REPORT_CHARS = 500
#: The service's bound on one long-poll (``GET ...?wait=N``, N at most 60).
MAX_LONG_POLL_SECONDS = 60.0
#: How much longer than the service may hold a request the client waits for its answer:
#: the service answers a blocking call when its timeout fires, plus delivery latency.
_SLACK_SECONDS = 30.0


class HitlError(Exception):
    """A call that did not produce a record.

    Attributes:
        status: The HTTP status, or ``None`` when no answer came (``code`` is then
            ``unreachable`` or ``client_timeout``).
        code: The service's error code (``unauthorized``, ``forbidden``, ``not_found``,
            ``already_decided``, ``invalid_field``, ``rate_limited``, ``unavailable``,
            ...; see "Errors" in the service's docs/http-api.md), or ``unexpected_response`` for an answer
            that is not the service's JSON (a proxy's error page).
        message: The service's sentence (it names the field for ``invalid_field``).
        retry_after: Seconds from ``Retry-After`` (429, 503), else ``None``.
    """

    def __init__(
        self,
        status: Optional[int],
        code: str,
        message: str,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(f"{code}: {message}" if status is None else f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after
        # The whole error body (a 409 carries the record under ``confirmation``).
        self._body: Dict[str, Any] = {}


class AlreadyDecided(HitlError):
    """A withdrawal (``DELETE``) of a request that had already ended (409).

    ``confirmation`` is the request as it ended: a withdrawal that lost the race to an
    operator's tap tells the agent what was decided instead.
    """

    def __init__(self, message: str, confirmation: "Confirmation") -> None:
        super().__init__(409, "already_decided", message)
        self.confirmation = confirmation


@dataclass(frozen=True)
class Confirmation:
    """A confirmation record as ``/v1/confirmations`` returns it (and a webhook posts it).

    Only what an agent acts on is a field; everything else the service sends (the
    window fields, ``created_at``, ...) is in :attr:`raw`, so a newer service's
    additions are not lost.
    """

    id: str
    #: ``pending``, ``confirmed``, ``cancelled`` or ``timeout``.
    status: str
    #: True only for ``confirmed``: the one value to gate the tool call on.
    allowed: bool
    #: ``operator``, ``window``, ``timeout``, ``withdrawn``, ``fail_closed``, ``rule``
    #: or ``grant``; ``None`` while pending.
    via: Optional[str]
    reason: Optional[str]
    tool: str
    owner_id: str
    #: When allowed, the parameters exactly as sent (run the tool with these); else None.
    parameters: Optional[Dict[str, Any]]
    #: Who decided (``{"id", "username", "name"}``), when an operator did.
    decided_by: Optional[Dict[str, Any]]
    #: The whole record as received.
    raw: Dict[str, Any] = field(repr=False, compare=False)
    #: What the operator typed after "Deny with reason", as they saw it in Telegram
    #: (invisible characters such as bidi controls and ESC as escapes like
    #: ``\u202e``; at most 500 characters); ``None`` otherwise. ``reason`` quotes it as
    #: their words, a JSON string: data, not instructions.
    denial_reason: Optional[str] = None
    #: True when an operator refused the call: it was not executed, and asking again
    #: with the same call would only ask the same people again. Change the call (see
    #: ``denial_reason``) or ask the user instead. False for a timeout, a withdrawal or
    #: a question that reached nobody (and from a service that does not report it).
    do_not_retry: bool = False
    #: The steps the question took on the operators' side; ``None`` from a service
    #: that does not report them.
    progress: Optional["Progress"] = None
    #: What is known of running the confirmed call (:meth:`HitlClient.report_outcome`,
    #: or ``unknown`` set by the service); ``None`` before any report.
    outcome: Optional["Outcome"] = None
    #: True when an operator approved the call with changes (in the console):
    #: :attr:`parameters` are then the edited ones, the ones to run.
    edited: bool = False
    #: The argument hash of the call as first asked, when edited; else ``None``.
    original_args_hash: Optional[str] = None

    @classmethod
    def from_json(cls, record: Any) -> "Confirmation":
        """Parses a record; ``ValueError`` naming the field when it is not one."""
        if not isinstance(record, dict):
            raise ValueError(f"a confirmation record is a JSON object, not {type(record).__name__}")

        def text(name: str, optional: bool = False) -> Optional[str]:
            value = record.get(name)
            if value is None and optional:
                return None
            if not isinstance(value, str):
                raise ValueError(f"confirmation record: {name} is not a string")
            return value

        status = text("status")
        if status != "pending" and status not in TERMINAL_STATUSES:
            raise ValueError(f"confirmation record: unknown status {status!r}")
        allowed = record.get("allowed")
        if not isinstance(allowed, bool):
            raise ValueError("confirmation record: allowed is not a boolean")
        if allowed and status != "confirmed":
            # Fail closed on a record that contradicts itself.
            raise ValueError(f"confirmation record: allowed with status {status!r}")
        parameters = record.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise ValueError("confirmation record: parameters is not an object")
        decided_by = record.get("decided_by")
        if decided_by is not None and not isinstance(decided_by, dict):
            raise ValueError("confirmation record: decided_by is not an object")
        # Always present from a service with "Deny with reason"; absent from an older one.
        do_not_retry = record.get("do_not_retry", False)
        if not isinstance(do_not_retry, bool):
            raise ValueError("confirmation record: do_not_retry is not a boolean")
        progress = record.get("progress")
        if progress is not None:
            progress = Progress.from_json(progress)
        outcome = record.get("outcome")
        if outcome is not None:
            outcome = Outcome.from_json(outcome)
        edited = record.get("edited", False)
        if not isinstance(edited, bool):
            raise ValueError("confirmation record: edited is not a boolean")
        return cls(
            id=text("id"),
            status=status,
            allowed=allowed,
            via=text("via", optional=True),
            reason=text("reason", optional=True),
            tool=text("tool"),
            owner_id=text("owner_id"),
            parameters=parameters,
            decided_by=decided_by,
            raw=record,
            denial_reason=text("denial_reason", optional=True),
            do_not_retry=do_not_retry,
            progress=progress,
            outcome=outcome,
            edited=edited,
            original_args_hash=text("original_args_hash", optional=True),
        )

    @property
    def pending(self) -> bool:
        """Whether nobody (and no timeout) has decided yet."""
        return self.status == "pending"


@dataclass(frozen=True)
class Progress:
    """The steps a question took between its delivery and its outcome (a record's
    ``progress``)."""

    #: Telegram took the question's (first) message.
    delivered: bool
    #: How many of the route's reminder points have passed (a reminder went at each).
    reminders_sent: int
    #: When the question was also posted to the route's escalation route (RFC 3339);
    #: ``None`` if it was not.
    escalated_at: Optional[str]
    #: How many times an approver moved the deadline ("+N min"); the record's
    #: ``expires_at`` is the deadline as it now is.
    extensions: int
    #: How many times an approver tapped "Deny with reason".
    reasons_requested: int

    @classmethod
    def from_json(cls, value: Any) -> "Progress":
        """Parses a record's ``progress``; ``ValueError`` naming the field when it is
        not one."""
        if not isinstance(value, dict):
            raise ValueError("confirmation record: progress is not an object")

        def count(name: str) -> int:
            n = value.get(name)
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise ValueError(f"confirmation record: progress.{name} is not a count")
            return n

        delivered = value.get("delivered")
        if not isinstance(delivered, bool):
            raise ValueError("confirmation record: progress.delivered is not a boolean")
        escalated_at = value.get("escalated_at")
        if escalated_at is not None and not isinstance(escalated_at, str):
            raise ValueError("confirmation record: progress.escalated_at is not a string")
        return cls(
            delivered=delivered,
            reminders_sent=count("reminders_sent"),
            escalated_at=escalated_at,
            extensions=count("extensions"),
            reasons_requested=count("reasons_requested"),
        )


@dataclass(frozen=True)
class Outcome:
    """What happened after the yes: a record's ``outcome``."""

    #: ``executed``, ``failed`` or ``not_executed`` as the agent reported it, or
    #: ``unknown`` when the route expected a report and none came in time (a late report
    #: replaces it). Unknown is never success.
    status: str
    summary: Optional[str]
    #: Why it failed (with ``failed`` only).
    error: Optional[str]
    duration_ms: Optional[int]
    #: When the report was taken (RFC 3339), or when the service gave up waiting.
    reported_at: Optional[str]

    @classmethod
    def from_json(cls, value: Any) -> "Outcome":
        """Parses a record's ``outcome``; ``ValueError`` naming the field when it is
        not one."""
        if not isinstance(value, dict):
            raise ValueError("confirmation record: outcome is not an object")
        status = value.get("status")
        if status not in OUTCOME_STATUSES:
            raise ValueError(f"confirmation record: unknown outcome.status {status!r}")

        def text(name: str) -> Optional[str]:
            t = value.get(name)
            if t is not None and not isinstance(t, str):
                raise ValueError(f"confirmation record: outcome.{name} is not a string")
            return t

        duration = value.get("duration_ms")
        if duration is not None and (
            not isinstance(duration, int) or isinstance(duration, bool) or duration < 0
        ):
            raise ValueError("confirmation record: outcome.duration_ms is not a count")
        return cls(
            status=status,
            summary=text("summary"),
            error=text("error"),
            duration_ms=duration,
            reported_at=text("reported_at"),
        )


@dataclass(frozen=True)
class GrantRecord:
    """A grant as ``/v1/grants`` returns it: the agent may run calls in ``scope`` for
    ``owner_id`` without asking, while it is ``live``.

    Only what an agent acts on is a field; everything else (``route``, ``reason``,
    ``revoked_by``, ...) is in :attr:`raw`.
    """

    #: ``gr_`` and 32 lowercase hex digits.
    grant_id: str
    owner_id: str
    #: ``tool:deploy``, or ``tool:*`` for every tool.
    scope: str
    #: The person who said yes (``{"id", "username", "name"}``).
    granted_by: Dict[str, Any]
    #: RFC 3339, UTC.
    created_at: str
    expires_at: str
    #: When it was revoked (RFC 3339), else ``None``.
    revoked_at: Optional[str]
    #: Whether it lets calls through now (not revoked, not expired), as the service saw it.
    live: bool
    #: The approval it came from (``interaction_id``), when one was presented or asked.
    interaction_id: Optional[str]
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, record: Any) -> "GrantRecord":
        """Parses a grant; ``ValueError`` naming the field when it is not one."""
        if not isinstance(record, dict):
            raise ValueError(f"a grant is a JSON object, not {type(record).__name__}")

        def text(name: str, optional: bool = False) -> Optional[str]:
            value = record.get(name)
            if value is None and optional:
                return None
            if not isinstance(value, str):
                raise ValueError(f"grant: {name} is not a string")
            return value

        granted_by = record.get("granted_by")
        if not isinstance(granted_by, dict):
            raise ValueError("grant: granted_by is not an object")
        live = record.get("live")
        if not isinstance(live, bool):
            raise ValueError("grant: live is not a boolean")
        revoked_at = text("revoked_at", optional=True)
        if live and revoked_at is not None:
            # Fail closed on a record that contradicts itself.
            raise ValueError("grant: live although revoked")
        return cls(
            grant_id=text("grant_id"),
            owner_id=text("owner_id"),
            scope=text("scope"),
            granted_by=granted_by,
            created_at=text("created_at"),
            expires_at=text("expires_at"),
            revoked_at=revoked_at,
            live=live,
            interaction_id=text("interaction_id", optional=True),
            raw=record,
        )


@dataclass(frozen=True)
class GrantAnswer:
    """What ``POST /v1/grants`` answers."""

    #: ``granted`` (:attr:`grant` is stored), ``refused`` (a person said no),
    #: ``timeout`` (nobody answered in time) or ``pending`` (``wait="suspend"``: present
    #: :attr:`interaction_id` once it is answered yes).
    status: str
    grant: Optional[GrantRecord]
    #: The approval the grant came from, or the question that asks for it.
    interaction_id: str
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @property
    def granted(self) -> bool:
        """True only when a grant was stored: the one value to act on."""
        return self.status == "granted" and self.grant is not None

    @classmethod
    def from_json(cls, answer: Any) -> "GrantAnswer":
        """Parses an answer; ``ValueError`` naming the field when it is not one."""
        if not isinstance(answer, dict):
            raise ValueError(f"a grant answer is a JSON object, not {type(answer).__name__}")
        status = answer.get("status")
        if status not in ("granted", "refused", "timeout", "pending"):
            raise ValueError(f"grant answer: unknown status {status!r}")
        grant = answer.get("grant")
        grant = None if grant is None else GrantRecord.from_json(grant)
        if (status == "granted") != (grant is not None):
            raise ValueError(f"grant answer: status {status!r} with grant {grant is not None}")
        interaction_id = answer.get("interaction_id")
        if not isinstance(interaction_id, str):
            raise ValueError("grant answer: interaction_id is not a string")
        return cls(status=status, grant=grant, interaction_id=interaction_id, raw=answer)


class HitlClient:
    """Talks to one hitl-telegram service as one agent (its bearer token).

    Args:
        base_url: The service, e.g. ``http://127.0.0.1:8080`` (scheme required).
        token: The agent's token. Sent only in ``Authorization``; never in an error or
            ``repr``.
        timeout: Seconds to wait for the answer to a call that does not wait for a human.
        block_timeout: For a blocking ``create`` without ``timeout_seconds``, how long the
            service may hold it (its ``default_timeout_seconds``, 120 unless configured);
            the client waits that plus 30 s of slack.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        block_timeout: float = 120.0,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(
                f"base_url must be an http(s) URL such as http://127.0.0.1:8080, not {base_url!r}"
            )
        if parts.username is not None or parts.password is not None:
            # They would show in every error message and repr.
            raise ValueError("base_url must not hold credentials: the token authenticates")
        if not token:
            raise ValueError("token is empty")
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.timeout = timeout
        self.block_timeout = block_timeout
        # No proxy for a service on loopback (urllib would otherwise honour
        # http_proxy for 127.0.0.1 when no_proxy does not list it).
        handlers: list = [_NoRedirects()]
        if parts.hostname in ("127.0.0.1", "localhost", "::1"):
            handlers.append(urllib.request.ProxyHandler({}))
        self._opener = urllib.request.build_opener(*handlers)

    def __repr__(self) -> str:
        return f"HitlClient({self.base_url!r})"

    def create(
        self,
        tool: str,
        params: Mapping[str, Any],
        *,
        wait: str = "block",
        owner_id: Optional[str] = None,
        template: Optional[str] = None,
        window_seconds: Optional[int] = None,
        allow_edit: Optional[bool] = None,
        timeout_seconds: Optional[float] = None,
        route: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        context: Optional[str] = None,
        callback_url: Optional[str] = None,
        args_schema: Optional[Mapping[str, Any]] = None,
        grant_scope: Optional[str] = None,
        require_grant_only: Optional[bool] = None,
    ) -> Confirmation:
        """``POST /v1/confirmations``: asks a human about one tool call.

        ``grant_scope`` (``"tool:deploy"``, ``"tool:*"``) presents a grant
        (:meth:`request_grant`) for ``owner_id``: with no live grant covering it the call
        is ``cancelled`` at once, nobody asked; with ``require_grant_only=True`` a live
        grant confirms it without asking. The scope must cover ``tool`` (``tool:<tool>``
        or ``tool:*``; another kind only where the service's ``grant_scopes`` maps it to
        ``tool``), else :class:`HitlError` ``invalid_field`` (422). A ``deny`` rule
        cancels the call whatever grant it presents.

        ``args_schema`` (the tool's JSON Schema, e.g. a pydantic model's
        ``model_json_schema()``) with ``allow_edit=True`` lets an operator edit the call in
        the console before approving it; the answer then has ``edited`` set and the
        edited :attr:`Confirmation.parameters`, which are the ones to run.

        ``wait="block"`` returns the decision (``confirmed``, ``cancelled`` or
        ``timeout``); ``wait="suspend"`` returns at once, usually ``pending`` (a window
        hit is ``confirmed`` at once), to be followed with :meth:`wait_for` or a webhook.
        Arguments left ``None`` are not sent, so the service's defaults apply. Repeat a
        call that failed without an answer with the same ``idempotency_key``: it is the
        same request, not a second question.
        """
        if wait not in ("block", "suspend"):
            raise ValueError(f'wait must be "block" or "suspend", not {wait!r}')
        body: Dict[str, Any] = {"tool": tool, "params": dict(params), "wait": wait}
        optional = {
            "owner_id": owner_id,
            "template": template,
            "window_seconds": window_seconds,
            "allow_edit": allow_edit,
            "timeout_seconds": timeout_seconds,
            "route": route,
            "idempotency_key": idempotency_key,
            "context": context,
            "callback_url": callback_url,
            "args_schema": dict(args_schema) if args_schema is not None else None,
            "grant_scope": grant_scope,
            "require_grant_only": require_grant_only,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        if wait == "block":
            held = timeout_seconds if timeout_seconds is not None else self.block_timeout
            read_timeout = float(held) + _SLACK_SECONDS
        else:
            read_timeout = self.timeout
        return self._record(self._call("POST", "/v1/confirmations", body, read_timeout))

    def get(self, confirmation_id: str, *, wait: Optional[float] = None) -> Confirmation:
        """``GET /v1/confirmations/{id}``; with ``wait`` (seconds, at most 60) it
        long-polls until the request ends or ``wait`` passes, and returns it either way."""
        path = f"/v1/confirmations/{quote(confirmation_id, safe='')}"
        read_timeout = self.timeout
        if wait is not None:
            if not 0 <= wait <= MAX_LONG_POLL_SECONDS:
                raise ValueError(f"wait must be within 0..={MAX_LONG_POLL_SECONDS:g} seconds, not {wait!r}")
            path += f"?wait={wait:g}"
            read_timeout = wait + self.timeout
        return self._record(self._call("GET", path, None, read_timeout))

    def wait_for(self, confirmation_id: str, *, timeout: Optional[float] = None) -> Confirmation:
        """Long-polls until the request is decided and returns it.

        With ``timeout`` (seconds) it returns the record as it stands then, possibly
        still ``pending``; without, it waits as long as the request does (every request
        ends: the service times it out).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            step = MAX_LONG_POLL_SECONDS
            if deadline is not None:
                step = max(0.0, min(step, deadline - time.monotonic()))
            record = self.get(confirmation_id, wait=step)
            if not record.pending or (deadline is not None and time.monotonic() >= deadline):
                return record

    def withdraw(self, confirmation_id: str) -> Confirmation:
        """``DELETE /v1/confirmations/{id}``: withdraws a pending request and returns it
        (``cancelled`` via ``withdrawn``). Raises :class:`AlreadyDecided`, carrying the
        decided record, when it had already ended."""
        path = f"/v1/confirmations/{quote(confirmation_id, safe='')}"
        try:
            return self._record(self._call("DELETE", path, None, self.timeout))
        except HitlError as e:
            record = e._body.get("confirmation")
            if e.status == 409 and e.code == "already_decided" and isinstance(record, dict):
                raise AlreadyDecided(e.message, self._record(record)) from None
            raise

    def report_outcome(
        self,
        confirmation_id: str,
        status: str,
        summary: Optional[str] = None,
        error: Optional[str] = None,
        duration_ms: Optional[int] = None,
    ) -> Confirmation:
        """``POST /v1/confirmations/{id}/outcome``: what happened when the agent ran
        the confirmed call. Returns the record with its :attr:`Confirmation.outcome`
        (the whole record in ``raw``).

        ``status`` is ``executed``, ``failed`` (with ``error``, why) or ``not_executed``
        (the agent did not run it after all); ``summary`` and ``error`` are shown to
        the approvers under the decision, at most 500 characters each, so keep secrets
        out of them. One report per confirmation: sending the same report again is
        accepted (a retry after a lost answer is safe), a different one is
        :class:`HitlError` ``409``, as is a report on a request that was not
        ``confirmed``; ``404`` for an unknown id or another agent's; ``422``
        ``invalid_field`` names what the service refused.
        """
        body = outcome_body(status, summary, error, duration_ms)
        return self._record(self._post_outcome(confirmation_id, body))

    def _post_outcome(self, confirmation_id: str, body: Dict[str, Any]) -> Any:
        """The report's request, answering the record as received, not parsed: the
        background reporter needs only to know it was taken (and the record of an
        AI-Parrot question is an interaction's, not a confirmation's)."""
        path = f"/v1/confirmations/{quote(confirmation_id, safe='')}/outcome"
        return self._call("POST", path, body, self.timeout)

    def request_grant(
        self,
        owner_id: str,
        scope: str,
        *,
        window_seconds: Optional[int] = None,
        route: Optional[str] = None,
        reason: Optional[str] = None,
        interaction_id: Optional[str] = None,
        wait: Optional[str] = None,
        timeout_seconds: Optional[float] = None,
    ) -> GrantAnswer:
        """``POST /v1/grants``: a grant of ``scope`` for ``owner_id``, for
        ``window_seconds`` (900 by default; the route may cut it).

        Without ``interaction_id`` the route's approvers are asked in Telegram, shown
        these terms; a yes stores the grant from the tap. ``wait="block"`` (the default)
        returns ``granted``, ``refused`` or ``timeout``; ``wait="suspend"`` returns
        ``pending`` at once. With ``interaction_id`` it presents a grant question of
        this agent (asked here, or as an interaction with ``grant`` terms, as the
        channel asks ``GrantGuard``'s) that a person answered yes: ``granted`` with the
        grant their yes stored, or :class:`HitlError` ``conflict`` (409) when it grants
        nothing (no grant question, not a yes, ended) or ``scope``, ``owner_id`` or
        ``window_seconds`` differ from its terms (leave ``window_seconds`` out to take
        them as they are).
        """
        if interaction_id is not None and (wait is not None or timeout_seconds is not None):
            # The service refuses the mix too (422); said here, before anything is sent.
            raise ValueError(
                "interaction_id presents an answered approval: wait and timeout_seconds ask a new one"
            )
        if wait not in (None, "block", "suspend"):
            raise ValueError(f'wait must be "block" or "suspend", not {wait!r}')
        body: Dict[str, Any] = {"owner_id": owner_id, "scope": scope}
        optional = {
            "window_seconds": window_seconds,
            "route": route,
            "reason": reason,
            "interaction_id": interaction_id,
            "wait": wait,
            "timeout_seconds": timeout_seconds,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        if interaction_id is None and wait != "suspend":
            held = timeout_seconds if timeout_seconds is not None else self.block_timeout
            read_timeout = float(held) + _SLACK_SECONDS
        else:
            read_timeout = self.timeout
        payload = self._call("POST", "/v1/grants", body, read_timeout)
        return self._parsed(GrantAnswer.from_json, payload)

    def check_grant(self, owner_id: str, scope: str) -> Optional[GrantRecord]:
        """``GET /v1/grants/check``: the live grant of this agent that covers ``scope``
        for ``owner_id`` (``tool:*`` covers every tool), or ``None`` when none does."""
        query = urlencode({"owner_id": owner_id, "scope": scope})
        payload = self._call("GET", f"/v1/grants/check?{query}", None, self.timeout)
        if not isinstance(payload, dict) or not isinstance(payload.get("allowed"), bool):
            raise HitlError(None, "unexpected_response", "grant check: allowed is not a boolean")
        grant = payload.get("grant")
        if payload["allowed"] != (grant is not None):
            # Fail closed on an answer that contradicts itself.
            raise HitlError(None, "unexpected_response", "grant check: allowed disagrees with grant")
        found = None if grant is None else self._parsed(GrantRecord.from_json, grant)
        if found is not None and not found.live:
            raise HitlError(None, "unexpected_response", "grant check: allowed by a grant that is not live")
        return found

    def list_grants(self) -> List[GrantRecord]:
        """``GET /v1/grants``: this agent's live grants, soonest expiry first."""
        payload = self._call("GET", "/v1/grants", None, self.timeout)
        grants = payload.get("grants") if isinstance(payload, dict) else None
        if not isinstance(grants, list):
            raise HitlError(None, "unexpected_response", "grant list: grants is not a list")
        return [self._parsed(GrantRecord.from_json, g) for g in grants]

    def revoke_grant(self, grant_id: str) -> GrantRecord:
        """``DELETE /v1/grants/{id}``: revokes a live grant of this agent and returns it
        (with ``revoked_at``). :class:`HitlError` ``not_found`` (404) when no live grant
        of this agent has that id (unknown, another agent's, revoked or expired)."""
        path = f"/v1/grants/{quote(grant_id, safe='')}"
        return self._parsed(GrantRecord.from_json, self._call("DELETE", path, None, self.timeout))

    def _parsed(self, parse: Callable[[Any], T], payload: Any) -> T:
        try:
            return parse(payload)
        except ValueError as e:
            raise HitlError(None, "unexpected_response", str(e)) from None

    def _record(self, payload: Any) -> Confirmation:
        return self._parsed(Confirmation.from_json, payload)

    def _call(self, method: str, path: str, body: Optional[dict], read_timeout: float) -> Any:
        data = None if body is None else json.dumps(body, allow_nan=False).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self._token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with self._opener.open(request, timeout=read_timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as e:
            with e:
                raise _error(e.code, e.headers, e.read()) from None
        except (socket.timeout, TimeoutError):
            raise HitlError(
                None,
                "client_timeout",
                f"no answer from {self.base_url} within {read_timeout:g} s",
            ) from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, (socket.timeout, TimeoutError)):
                raise HitlError(
                    None,
                    "client_timeout",
                    f"no answer from {self.base_url} within {read_timeout:g} s",
                ) from None
            raise HitlError(None, "unreachable", f"{self.base_url}: {e.reason}") from None
        except OSError as e:  # a connection reset mid-answer
            raise HitlError(None, "unreachable", f"{self.base_url}: {e}") from None
        try:
            return json.loads(raw)
        except ValueError:
            raise HitlError(None, "unexpected_response", "the answer is not JSON") from None


def outcome_body(
    status: str,
    summary: Optional[str] = None,
    error: Optional[str] = None,
    duration_ms: Optional[int] = None,
) -> Dict[str, Any]:
    """The body of ``POST /v1/confirmations/{id}/outcome``, the fields left ``None``
    not sent; ``ValueError`` for a report the contract cannot hold (a status other than
    the three an agent reports, ``error`` without ``failed``, a duration that is not a
    non-negative integer). The lengths are the service's to check (422)."""
    if status not in REPORTED_STATUSES:
        raise ValueError(
            f'status must be "executed", "failed" or "not_executed", not {status!r}'
        )
    if error is not None and status != "failed":
        raise ValueError(f'error is only for status "failed", not {status!r}')
    if duration_ms is not None and (
        not isinstance(duration_ms, int) or isinstance(duration_ms, bool) or duration_ms < 0
    ):
        raise ValueError(f"duration_ms must be a non-negative integer, not {duration_ms!r}")
    for name, value in (("summary", summary), ("error", error)):
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{name} must be a string, not {type(value).__name__}")
    body: Dict[str, Any] = {"status": status}
    optional = {"summary": summary, "error": error, "duration_ms": duration_ms}
    body.update({k: v for k, v in optional.items() if v is not None})
    return body


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Refuses to follow redirects: urllib would send the bearer token on to wherever
    a redirect points, and the service never redirects. A 3xx becomes an
    ``unexpected_response`` error."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102
        return None


def _error(status: int, headers: Any, raw: bytes) -> HitlError:
    """The exception for an error answer: the service's code and message when the body
    is its ``{"error": {"code", "message"}}``, else ``unexpected_response``."""
    retry_after = None
    value = headers.get("Retry-After") if headers is not None else None
    if value is not None:
        try:
            retry_after = float(value)
        except ValueError:
            retry_after = None
    try:
        body = json.loads(raw)
        code = body["error"]["code"]
        message = body["error"]["message"]
        if not isinstance(code, str) or not isinstance(message, str):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        return HitlError(
            status,
            "unexpected_response",
            f"HTTP {status} without the service's JSON error body",
            retry_after,
        )
    error = HitlError(status, code, message, retry_after)
    error._body = body
    return error
