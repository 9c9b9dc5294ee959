"""``HitlTelegramChannel``: an AI-Parrot ``HumanChannel`` backed by the hitl-telegram
service's HTTP API.

Outbound, each call is one HTTP request:

- ``send_interaction`` → ``POST /v1/interactions`` (the ``HumanInteraction`` exactly as
  ``model_dump_json()`` wrote it, and the tool call it is about as ``call`` when one was
  attached with :meth:`HitlTelegramChannel.attach_call`: the service then shows the
  tool, the owner and every parameter, rendered as for ``POST /v1/confirmations``; and,
  for a grant question, its terms as the interaction's ``grant``: attached with
  :meth:`HitlTelegramChannel.attach_grant`, or read from ``GrantGuard``'s own question
  (:func:`~hitl_telegram_channel.grant_terms.grant_guard_terms`), so the person is
  shown the scope, the owner and the window on the service's own lines and their yes
  stores that grant);
- ``send_notification`` → ``POST /v1/notifications``;
- ``cancel_interaction`` → ``DELETE /v1/interactions/{interaction_id}``.

Inbound, :meth:`HitlTelegramChannel.start` runs one listener on ``GET /v1/events``
(Server-Sent Events). Every ``response`` event becomes a ``HumanResponse`` handed to the
registered response handler (the manager's ``receive_response``). The listener keeps the
id of the last event it handled and reconnects with ``Last-Event-ID`` (exponential
backoff with jitter), so nothing is missed across dropped connections or service
restarts.

Fail closed: ``send_interaction`` returns ``True`` only when the service answered 200 or
202 with an interaction that is still open; every error (HTTP status, refused
connection, timeout, malformed answer) is logged with its reason and returns ``False``.
When the service later gives up on an interaction it had accepted (Telegram refused
it: ``status: cancelled``), the listener tells the manager through its cancel handler,
so a waiting ``ConfirmationGuard`` ends ``cancelled`` at once instead of waiting for its
timeout.

The operator's side: an answer refusing with a reason ("Deny with reason") arrives as
any answer does, its text in the ``HumanResponse``'s ``metadata`` (``denial_reason``,
and ``reason``), which AI-Parrot keeps as it is. When an approver gives a question more
time ("+N min"), the service streams a ``status`` event with ``step: "extended"`` and
the new ``expires_at``; for a question this channel asked, the listener hands it to the
extension handler (:meth:`HitlTelegramChannel.register_extension_handler`;
:class:`~hitl_telegram_channel.guard.HitlInteractionManager` registers one that moves
its own timer), since AI-Parrot's ``HumanChannel`` protocol has no such callback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
from collections import OrderedDict
from datetime import datetime
from typing import Any, Awaitable, Callable, Dict, Mapping, Optional, Union
from urllib.parse import quote

import aiohttp
from parrot.human.channels.base import HumanChannel
from parrot.human.models import HumanInteraction, HumanResponse

from .call import ToolCall
from .grant_terms import GrantTerms, grant_guard_terms
from .sse import SseParser

logger = logging.getLogger("hitl_telegram_channel")

ResponseCallback = Callable[[HumanResponse], Awaitable[None]]
CancelCallback = Callable[[str, str], Awaitable[bool]]
#: ``(interaction_id, expires_at, previous_expires_at)``: the service moved the deadline
#: of a question this channel asked to ``expires_at`` (aware UTC); ``previous`` is the
#: deadline the channel knew before, or ``None``.
ExtensionCallback = Callable[[str, datetime, Optional[datetime]], Awaitable[Any]]
#: Where a recipient's questions go: a ``[people]`` name (its private chat with the
#: bot), or the body fields themselves: ``{"route": "ops"}`` or ``{"recipient": "alice"}``.
Target = Union[str, Mapping[str, str]]

#: Statuses after which an interaction takes no more answers.
TERMINAL = frozenset({"completed", "timeout", "cancelled"})
#: How many interactions the channel remembers (delivery outcome, open or not).
_REMEMBERED = 10_000


class HitlTelegramChannel(HumanChannel):
    """AI-Parrot ``HumanChannel`` that asks through a hitl-telegram service.

    Args:
        base_url: The service, e.g. ``http://127.0.0.1:8080``.
        token: The agent's bearer token (never logged).
        route: Send every question to this route (a Telegram group; its approvers
            answer, narrowed to the interaction's ``target_humans`` when it names any).
            Without it, a recipient goes to their private chat with the bot.
        recipient_map: Maps AI-Parrot recipient ids to where they are asked: a
            ``[people]`` name, or ``{"route": ...}`` / ``{"recipient": ...}``. Wins over
            ``route``.
        default_recipient: Where a question with no ``target_humans`` goes when no
            ``route`` is set (a ``ConfirmationGuard``'s are such): a ``[people]`` name,
            or a mapping as above. With neither, the service uses the agent's default
            route.
        timeout: Seconds for each HTTP request (not the event stream).
        retries: Extra attempts of a request the service asks to repeat (429, 503) or
            that could not reach it. Safe: the same ``interaction_id`` is the same
            question.
        max_backoff: Longest wait between reconnections of the event stream.
        connect_timeout: How long :meth:`start` waits for the event stream to connect
            (it keeps trying in the background after that).
        forward_unknown: Also hand on answers to interactions this channel did not
            send (in this process). Off by default: the event stream carries every
            answer of the agent, and when several processes share the agent's token
            and one Redis, a manager that did not ask would record the answer first and
            the one that asked would then drop it as a duplicate. Turn it on for a
            single process that must resume suspended questions across its restarts.
        session: An ``aiohttp.ClientSession`` to use (the channel does not close it).
    """

    channel_type = "hitl_telegram"

    def __init__(
        self,
        base_url: str,
        token: str,
        route: Optional[str] = None,
        recipient_map: Optional[Mapping[str, Target]] = None,
        timeout: float = 10.0,
        *,
        default_recipient: Optional[Target] = None,
        retries: int = 2,
        max_backoff: float = 30.0,
        connect_timeout: float = 5.0,
        forward_unknown: bool = False,
        session: Optional[aiohttp.ClientSession] = None,
    ) -> None:
        if not base_url:
            raise ValueError("base_url is required")
        if not token:
            raise ValueError("token is required")
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.route = route
        self.recipient_map: Dict[str, Target] = dict(recipient_map or {})
        self.default_recipient = default_recipient
        self.timeout = float(timeout)
        self.retries = max(0, int(retries))
        self.max_backoff = float(max_backoff)
        self.connect_timeout = float(connect_timeout)
        self.forward_unknown = bool(forward_unknown)
        self._session = session
        self._own_session = session is None
        self._response_callback: Optional[ResponseCallback] = None
        self._cancel_callback: Optional[CancelCallback] = None
        self._extension_callback: Optional[ExtensionCallback] = None
        self._listener: Optional[asyncio.Task] = None
        self._connected = asyncio.Event()
        #: The id of the last event handled; the stream resumes after it.
        self.last_event_id: Optional[str] = None
        # interaction_id -> accepted by the service (True) or not (False).
        self._accepted: "OrderedDict[str, bool]" = OrderedDict()
        # Interactions we asked that have not ended and that we did not withdraw.
        self._open: "OrderedDict[str, None]" = OrderedDict()
        # interaction_id -> the tool call it asks about (sent as the request's `call`).
        self._calls: "OrderedDict[str, ToolCall]" = OrderedDict()
        # interaction_id -> the grant terms it asks for (sent as the interaction's `grant`).
        self._grants: "OrderedDict[str, GrantTerms]" = OrderedDict()
        # interaction_id -> the deadline the service last reported for it (open ones).
        self._deadlines: "OrderedDict[str, datetime]" = OrderedDict()
        # interaction_id -> the service's record id (`cf_...`) of the question.
        self._records: "OrderedDict[str, str]" = OrderedDict()

    def __repr__(self) -> str:
        return (
            f"<HitlTelegramChannel base_url={self.base_url!r} route={self.route!r} "
            f"default_recipient={self.default_recipient!r}>"
        )

    # ── Where questions go ────────────────────────────────────────────────

    def target_for(self, recipient: Optional[str]) -> Dict[str, str]:
        """The ``route``/``recipient`` fields of a request for ``recipient``.

        ``recipient_map`` first, then the channel's ``route``, then the recipient as a
        ``[people]`` name; an empty recipient (a question with no ``target_humans``)
        goes to ``default_recipient``, else to the agent's default route (``{}``).
        """
        if recipient and recipient in self.recipient_map:
            return _fields(self.recipient_map[recipient])
        if self.route:
            return {"route": self.route}
        if recipient:
            return {"recipient": recipient}
        if self.default_recipient is not None:
            return _fields(self.default_recipient)
        return {}

    def was_accepted(self, interaction_id: str) -> bool:
        """Whether the service accepted this interaction for at least one recipient."""
        return self._accepted.get(interaction_id, False)

    def record_id_for(self, interaction_id: str) -> Optional[str]:
        """The service's record id (``cf_...``) of a question it accepted from this
        channel: what an outcome report (``POST /v1/confirmations/{id}/outcome``)
        names. ``None`` for a question it did not accept."""
        return self._records.get(interaction_id)

    def deadline_for(self, interaction_id: str) -> Optional[datetime]:
        """The deadline the service last reported for an open question this channel
        asked (its ``expires_at``, moved by every "+N min"); ``None`` when unknown."""
        return self._deadlines.get(interaction_id)

    # ── The tool call a question is about ─────────────────────────────────

    def attach_call(self, interaction_id: str, call: ToolCall) -> None:
        """Every send of ``interaction_id`` from now on carries ``call``: the operator
        sees the tool, the owner and the exact parameters, whatever the question says.

        :class:`~hitl_telegram_channel.guard.HitlInteractionManager` does this for the
        questions of a :class:`~hitl_telegram_channel.guard.HitlConfirmationGuard`; call
        it yourself for a question of your own about a tool call. Forgotten when the
        service reports the question ended, or with :meth:`detach_call`.
        """
        self._calls[interaction_id] = call
        self._calls.move_to_end(interaction_id)
        _trim(self._calls)

    def detach_call(self, interaction_id: str) -> Optional[ToolCall]:
        """Forgets the call attached to ``interaction_id`` and returns it."""
        return self._calls.pop(interaction_id, None)

    def call_for(self, interaction_id: str) -> Optional[ToolCall]:
        """The call attached to ``interaction_id``, if any."""
        return self._calls.get(interaction_id)

    # ── The grant a question asks for ─────────────────────────────────────

    def attach_grant(self, interaction_id: str, terms: GrantTerms) -> None:
        """Every send of ``interaction_id`` (an approval) from now on asks for a grant on
        ``terms``: the service shows them to the person under 🔑 and stores the grant
        with their yes. ``GrantGuard``'s own questions need no call: their terms are
        read from their wording. Forgotten when the service reports the question ended,
        or with :meth:`detach_grant`."""
        self._grants[interaction_id] = terms
        self._grants.move_to_end(interaction_id)
        _trim(self._grants)

    def detach_grant(self, interaction_id: str) -> Optional[GrantTerms]:
        """Forgets the grant terms attached to ``interaction_id`` and returns them."""
        return self._grants.pop(interaction_id, None)

    def grant_for(self, interaction: HumanInteraction) -> Optional[GrantTerms]:
        """The grant terms ``interaction`` is asked with: attached ones, else those of
        ``GrantGuard``'s question, else ``None`` (an approval that grants nothing)."""
        attached = self._grants.get(interaction.interaction_id)
        return attached if attached is not None else grant_guard_terms(interaction)

    # ── HumanChannel: outbound ────────────────────────────────────────────

    async def send_interaction(
        self, interaction: HumanInteraction, recipient: str
    ) -> bool:
        """Ask through the service; ``True`` only when it accepted the question."""
        iid = interaction.interaction_id
        call = self._calls.get(iid)
        try:
            body: Dict[str, Any] = {"interaction": json.loads(interaction.model_dump_json())}
            grant = self.grant_for(interaction)
            if grant is not None:
                body["interaction"]["grant"] = grant.body()
            if call is not None:
                body["call"] = call.body()
            body.update(self.target_for(recipient))
            status, payload = await self._request("POST", "/v1/interactions", body)
        except Exception as exc:  # noqa: BLE001 - fail closed on anything
            logger.warning(
                "interaction %s not delivered (recipient=%r): %s", iid, recipient, _describe(exc)
            )
            self._remember(iid, accepted=False)
            return False
        if status not in (200, 202):
            logger.warning(
                "interaction %s refused by the service (recipient=%r): HTTP %s %s",
                iid, recipient, status, _error_text(payload),
            )
            self._remember(iid, accepted=False)
            return False
        state = payload.get("status") if isinstance(payload, dict) else None
        if state in ("cancelled", "timeout"):
            # The same interaction_id again, but it already ended without an answer.
            logger.warning(
                "interaction %s already ended on the service: %s (%s)",
                iid, state, payload.get("reason"),
            )
            self._remember(iid, accepted=False)
            return False
        if call is not None and not (
            isinstance(payload, dict) and isinstance(payload.get("call"), dict)
        ):
            # A record without the call (a service from before `call`, or the id stored
            # earlier without one): the operator would see the bare question, without
            # the parameters it is about. Not asked, so the guard fails closed.
            logger.warning(
                "interaction %s not asked: the service's record does not show the tool "
                "call %r (it answered %s without a `call`)",
                iid, call.tool, status,
            )
            self._remember(iid, accepted=False)
            return False
        self._remember(iid, accepted=True)
        record_id = payload.get("id") if isinstance(payload, dict) else None
        if isinstance(record_id, str) and record_id:
            self._records[iid] = record_id
            self._records.move_to_end(iid)
            _trim(self._records)
        if state not in TERMINAL:
            self._open[iid] = None
            self._open.move_to_end(iid)
            _trim(self._open)
            expires_at = _parse_time(payload.get("expires_at"))
            if expires_at is not None and iid not in self._deadlines:
                self._note_deadline(iid, expires_at)
        logger.info(
            "interaction %s accepted by the service (HTTP %s, recipient=%r, route=%s)",
            iid, status, recipient, payload.get("route") if isinstance(payload, dict) else None,
        )
        return True

    async def send_notification(self, recipient: str, message: str) -> bool:
        """Send a one-way message; errors are logged, never raised.

        Returns whether Telegram took it (the base class expects ``None``; a bool is
        compatible with every caller in AI-Parrot).
        """
        try:
            body: Dict[str, Any] = {"message": message}
            body.update(self.target_for(recipient))
            status, payload = await self._request("POST", "/v1/notifications", body)
        except Exception as exc:  # noqa: BLE001
            logger.warning("notification to %r not sent: %s", recipient, _describe(exc))
            return False
        if status != 200:
            logger.warning(
                "notification to %r not sent: HTTP %s %s", recipient, status, _error_text(payload)
            )
            return False
        return True

    async def cancel_interaction(self, interaction_id: str, recipient: str) -> bool:
        """Withdraw the question (its Telegram message is edited, buttons removed).

        ``True`` when it was open and is now withdrawn; ``False`` when it had already
        ended (409), is unknown (404), or the service could not be reached.
        """
        self._open.pop(interaction_id, None)  # our own withdrawal: no cancel callback
        self._deadlines.pop(interaction_id, None)
        try:
            status, payload = await self._request(
                "DELETE", f"/v1/interactions/{quote(interaction_id, safe='')}", None
            )
        except Exception as exc:  # noqa: BLE001
            logger.warning("interaction %s not withdrawn: %s", interaction_id, _describe(exc))
            return False
        if status == 200:
            return True
        logger.info(
            "interaction %s not withdrawn: HTTP %s %s", interaction_id, status, _error_text(payload)
        )
        return False

    # ── HumanChannel: inbound ─────────────────────────────────────────────

    async def register_response_handler(self, callback: ResponseCallback) -> None:
        self._response_callback = callback

    async def register_cancel_handler(self, callback: CancelCallback) -> None:
        self._cancel_callback = callback

    async def register_extension_handler(self, callback: ExtensionCallback) -> None:
        """``callback(interaction_id, expires_at, previous)`` runs when an approver gave
        a question this channel asked more time ("+N min"). Not part of AI-Parrot's
        ``HumanChannel`` protocol: :class:`~hitl_telegram_channel.guard.HitlInteractionManager`
        registers its ``extend_pending`` here in ``startup``; with a stock manager,
        nothing follows the new deadline and its own timer ends the question at the
        original one."""
        self._extension_callback = callback

    async def start(self) -> None:
        """Start the event-stream listener and wait (up to ``connect_timeout``) until
        it is connected, so answers to questions asked from now on are not missed."""
        if self._listener is not None and not self._listener.done():
            return
        self._connected = asyncio.Event()
        self._listener = asyncio.create_task(self._listen(), name="hitl-telegram-events")
        try:
            await asyncio.wait_for(self._connected.wait(), self.connect_timeout)
        except asyncio.TimeoutError:
            logger.warning(
                "event stream of %s not connected after %.1f s; still trying in the background",
                self.base_url, self.connect_timeout,
            )

    async def stop(self) -> None:
        """Stop the listener and close the HTTP session the channel opened."""
        task, self._listener = self._listener, None
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def connected(self) -> bool:
        """Whether the event stream is connected right now."""
        return self._connected.is_set()

    # ── HTTP ──────────────────────────────────────────────────────────────

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # trust_env stays False: a proxy from the environment is never used.
            self._session = aiohttp.ClientSession()
            self._own_session = True
        return self._session

    def _headers(self, extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        if extra:
            headers.update(extra)
        return headers

    async def _request(self, method: str, path: str, body: Optional[dict]):
        """One API call, repeated on 429/503 and connection errors; (status, JSON)."""
        attempt = 0
        while True:
            try:
                async with self._http().request(
                    method,
                    self.base_url + path,
                    json=body,
                    headers=self._headers(),
                    timeout=aiohttp.ClientTimeout(total=self.timeout),
                    allow_redirects=False,
                ) as resp:
                    text = await resp.text()
                    try:
                        payload = json.loads(text) if text else None
                    except ValueError:
                        payload = {"error": {"code": "not_json", "message": text[:200]}}
                    if resp.status in (429, 503) and attempt < self.retries:
                        attempt += 1
                        delay = _retry_after(resp.headers.get("Retry-After"), attempt)
                        logger.info("%s %s: HTTP %s, retrying in %.1f s", method, path, resp.status, delay)
                        await asyncio.sleep(delay)
                        continue
                    return resp.status, payload
            except (aiohttp.ClientConnectionError, asyncio.TimeoutError) as exc:
                if attempt >= self.retries:
                    raise
                attempt += 1
                delay = _retry_after(None, attempt)
                logger.info("%s %s: %s, retrying in %.1f s", method, path, _describe(exc), delay)
                await asyncio.sleep(delay)

    # ── The event stream ──────────────────────────────────────────────────

    async def _listen(self) -> None:
        failures = 0
        while True:
            parser = SseParser()
            try:
                await self._stream_once(parser)
                reason = "the service ended the stream"
            except asyncio.CancelledError:
                raise
            except _Refused as exc:
                reason = str(exc)
            except Exception as exc:  # noqa: BLE001 - reconnect on anything
                reason = _describe(exc)
            finally:
                self._connected.clear()
            # A connection that carried anything was a good one: back to the base delay.
            failures = 0 if parser.fed else failures + 1
            base = parser.retry if parser.retry is not None else 0.5
            delay = min(self.max_backoff, base * (2 ** min(failures, 10)))
            delay *= random.uniform(0.5, 1.0)
            logger.log(
                logging.INFO if parser.fed else logging.WARNING,
                "event stream: %s; reconnecting in %.1f s (Last-Event-ID %s)",
                reason, delay, self.last_event_id,
            )
            await asyncio.sleep(delay)

    async def _stream_once(self, parser: SseParser) -> None:
        """One connection: handles its events until it ends."""
        resumed = self.last_event_id is not None
        headers = self._headers({"Accept": "text/event-stream", "Cache-Control": "no-cache"})
        if resumed:
            headers["Last-Event-ID"] = self.last_event_id  # type: ignore[assignment]
        timeout = aiohttp.ClientTimeout(total=None, connect=self.timeout, sock_read=60)
        async with self._http().get(
            self.base_url + "/v1/events", headers=headers, timeout=timeout, allow_redirects=False
        ) as resp:
            if resp.status == 422 and resumed:
                # The cursor is not one the service knows (its database was replaced):
                # start from now and catch up on what is open.
                logger.warning("event stream: Last-Event-ID %s refused; starting afresh", self.last_event_id)
                self.last_event_id = None
                raise _Refused("resume cursor refused")
            if resp.status != 200:
                text = await resp.text()
                raise _Refused(f"HTTP {resp.status} {text[:200]}")
            self._connected.set()
            logger.info("event stream connected (resumed: %s)", resumed)
            if not resumed:
                await self._catch_up()
            async for chunk in resp.content.iter_any():
                for event in parser.feed(chunk):
                    await self._handle(event.event, event.data)
                    if event.id is not None:
                        self.last_event_id = event.id

    async def _catch_up(self) -> None:
        """After connecting without a cursor: answers that came for open interactions
        before the stream was there are read from the service and handed on."""
        for iid in list(self._open):
            try:
                status, view = await self._request(
                    "GET", f"/v1/interactions/{quote(iid, safe='')}", None
                )
            except Exception as exc:  # noqa: BLE001
                logger.info("catch-up of %s failed: %s", iid, _describe(exc))
                continue
            if status != 200 or not isinstance(view, dict):
                continue
            for response in view.get("responses") or []:
                await self._deliver_response(response)
            state = view.get("status")
            if state in TERMINAL:
                await self._on_status(iid, state, view.get("reason"), view)
                continue
            # Still open: its deadline may have moved while the stream was not there.
            known = self._deadlines.get(iid)
            expires_at = _parse_time(view.get("expires_at"))
            moved = known is not None and expires_at is not None and expires_at > known
            event = {"expires_at": view.get("expires_at"), "step": "extended" if moved else None}
            await self._on_status(iid, state, view.get("reason"), event)

    async def _handle(self, kind: str, data: str) -> None:
        try:
            payload = json.loads(data)
        except ValueError:
            logger.warning("event stream: %s event with non-JSON data ignored", kind)
            return
        if not isinstance(payload, dict):
            return
        if kind == "response":
            await self._deliver_response(payload.get("response"))
        elif kind == "status":
            iid = payload.get("interaction_id")
            if iid:
                await self._on_status(iid, payload.get("status"), payload.get("reason"), payload)

    async def _deliver_response(self, raw: Any) -> None:
        try:
            response = HumanResponse.model_validate(raw)
        except Exception as exc:  # noqa: BLE001
            logger.warning("event stream: a response AI-Parrot does not accept was ignored: %s", exc)
            return
        if not self.forward_unknown and not self._accepted.get(response.interaction_id):
            logger.debug(
                "response to %s ignored: not asked through this channel", response.interaction_id
            )
            return
        if self._response_callback is None:
            logger.warning(
                "response to %s dropped: no response handler registered", response.interaction_id
            )
            return
        try:
            await self._response_callback(response)
        except Exception:  # noqa: BLE001 - one bad answer must not stop the listener
            logger.exception("the response handler failed on %s", response.interaction_id)

    async def _on_status(
        self, iid: str, status: Any, reason: Any, event: Optional[Mapping[str, Any]] = None
    ) -> None:
        """A ``status`` event (``event``: its whole data: ``expires_at``, ``step``,
        ``denial_reason``, ...)."""
        event = event or {}
        if status not in TERMINAL:
            expires_at = _parse_time(event.get("expires_at"))
            if expires_at is None or iid not in self._open:
                return
            previous = self._deadlines.get(iid)
            self._note_deadline(iid, expires_at)
            if event.get("step") == "extended" and (previous is None or expires_at > previous):
                await self._on_extended(iid, expires_at, previous)
            return
        was_open = iid in self._open
        self._open.pop(iid, None)
        self._deadlines.pop(iid, None)
        # Ended: it is not asked again (the service refuses a further send of an ended
        # question anyway), so its call and grant terms need not be kept.
        self._calls.pop(iid, None)
        self._grants.pop(iid, None)
        if status != "cancelled" or not was_open:
            # completed: the answers came as response events; timeout: the manager's
            # own timer ends it with the same deadline.
            return
        logger.info("interaction %s cancelled by the service: %s", iid, reason)
        if self._cancel_callback is not None:
            try:
                await self._cancel_callback(iid, f"hitl_telegram:{reason or 'cancelled'}")
            except Exception:  # noqa: BLE001
                logger.exception("the cancel handler failed on %s", iid)

    async def _on_extended(
        self, iid: str, expires_at: datetime, previous: Optional[datetime]
    ) -> None:
        logger.info(
            "interaction %s: an approver gave it more time, its deadline is now %s",
            iid, expires_at.isoformat(),
        )
        if self._extension_callback is None:
            logger.info(
                "interaction %s: no extension handler registered; the manager's own timer "
                "still ends it at its original deadline", iid,
            )
            return
        try:
            await self._extension_callback(iid, expires_at, previous)
        except Exception:  # noqa: BLE001 - one failure must not stop the listener
            logger.exception("the extension handler failed on %s", iid)

    def _note_deadline(self, iid: str, expires_at: datetime) -> None:
        self._deadlines[iid] = expires_at
        self._deadlines.move_to_end(iid)
        _trim(self._deadlines)

    def _remember(self, iid: str, *, accepted: bool) -> None:
        self._accepted[iid] = self._accepted.get(iid, False) or accepted
        self._accepted.move_to_end(iid)
        _trim(self._accepted)


class _Refused(Exception):
    """The event stream was refused (an HTTP status other than 200)."""


def _fields(target: Target) -> Dict[str, str]:
    if isinstance(target, str):
        return {"recipient": target}
    fields = {k: v for k, v in target.items() if k in ("route", "recipient") and v}
    if len(fields) != len(target):
        raise ValueError(f"a target has only 'route' and/or 'recipient': {dict(target)!r}")
    return fields


_RFC3339 = re.compile(
    r"(\d{4}-\d\d-\d\d)[Tt ](\d\d:\d\d:\d\d)(\.\d+)?([Zz]|[+-]\d\d:\d\d)"
)


def _parse_time(value: Any) -> Optional[datetime]:
    """An RFC 3339 timestamp (``2026-12-01T12:00:00.123Z``) as an aware datetime;
    ``None`` for anything else. (``datetime.fromisoformat`` takes a ``Z`` and any
    number of fraction digits only from Python 3.11 on.)"""
    if not isinstance(value, str):
        return None
    m = _RFC3339.fullmatch(value.strip())
    if m is None:
        return None
    day, clock, fraction, zone = m.groups()
    micros = (fraction or ".")[1:7].ljust(6, "0")
    zone = "+00:00" if zone in ("Z", "z") else zone
    try:
        return datetime.fromisoformat(f"{day}T{clock}.{micros}{zone}")
    except ValueError:
        return None


def _trim(d: "OrderedDict") -> None:
    while len(d) > _REMEMBERED:
        d.popitem(last=False)


def _retry_after(header: Optional[str], attempt: int) -> float:
    if header and header.strip().isdigit():
        return min(float(header.strip()), 5.0)
    return min(0.25 * (2 ** attempt), 5.0) * random.uniform(0.5, 1.0)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _error_text(payload: Any) -> str:
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        e = payload["error"]
        return f"{e.get('code')}: {e.get('message')}"
    return ""
