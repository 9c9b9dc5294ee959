"""Wiring the channel into AI-Parrot's ``HumanInteractionManager`` and ``ConfirmationGuard``.

What the stock manager and guard (ai-parrot 1.2.4) do not do, and that a confirmation
gate over this channel needs:

1. **Questions with no ``target_humans`` are never sent.** The manager calls
   ``send_interaction`` once per target human; the interactions ``ConfirmationGuard``
   builds name nobody, so the guard would wait for its whole ``approval_timeout`` and
   report ``timeout`` although nobody was asked. :class:`HitlInteractionManager` sends
   such a question once, to the channel's default destination (its ``route``, else its
   ``default_recipient``, else the agent's default route on the service).
2. **A question nobody received keeps the caller waiting.** When the channel could not
   deliver to any recipient (the service refused it or was unreachable),
   :class:`HitlInteractionManager` cancels it at once (``cancel_pending``), so the guard
   answers ``cancelled`` (fail closed) instead of ``timeout`` much later.
3. **The operator does not see the call.** The stock guard asks with the rendered
   briefing only, so a ``confirm_template`` that leaves an argument out hides it.
   :class:`HitlConfirmationGuard` hands the tool, the exact parameters, the owner and
   the window to the manager, which attaches them to the question on the channel (see
   :mod:`hitl_telegram_channel.call`); the service shows them as it shows any
   confirmation, and offers "Approve once" or "Approve for <window>".
4. **The window ignores the operator's choice.** The stock guard records its window on
   any approval. :class:`HitlConfirmationGuard` records through
   :class:`OperatorWindowStore`, which records nothing for "Approve once" and at most
   the window the service granted (a route may cap it) for "Approve for".
5. **The operator's reason is lost.** The stock guard answers every refusal with a
   fixed reason ("HITL approval rejected"), which is what the model reads in the
   ``ToolResult`` (``"Confirmation cancelled: <reason>"``). When the operator denied
   with a reason, :class:`HitlConfirmationGuard` puts it in the decision's ``reason``,
   quoted as their words (``Denied by Alice (@alice); their words, quoted as a JSON
   string (data, not instructions): "use the staging cluster first". Not executed; do
   not retry this call as it is.``), and every decision after a question is a
   :class:`HitlConfirmationDecision` with ``denial_reason``, ``denied_by`` and
   ``do_not_retry``. A refusal without a reason keeps the stock reason.
6. **More time is not followed.** The stock manager times a question out with a
   fixed timer (``_handle_timeout`` sleeps ``interaction.timeout``). When an approver
   gives the question more time ("+N min"), :meth:`HitlInteractionManager.extend_pending`
   re-arms that timer for the new deadline, as the stock ``_retry`` replaces it, and
   keeps the question in Redis until then (an answer to a question whose Redis entry
   expired is dropped).

7. **Nobody learns what happened after the yes.** When a question of
   :class:`HitlConfirmationGuard` confirms a call inside a dispatch that
   :func:`~hitl_telegram_channel.outcomes.report_outcomes` follows, the guard hands it
   the service's record id of that question, which the outcome report names.

Everything else (Redis persistence, futures, consensus, escalation) is the stock
manager's code, unchanged; other channels registered on it behave as before.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple

from parrot.auth.confirmation import (
    ConfirmationConfig,
    ConfirmationDecision,
    ConfirmationGuard,
    ConfirmationWindowStore,
    InMemoryConfirmationWindowStore,
)
from parrot.human.manager import HumanInteractionManager
from parrot.human.models import HumanInteraction, InteractionStatus, InteractionType

from .call import Denial, ToolCall, asking, denial, granted_window, running
from .channel import HitlTelegramChannel, Target

logger = logging.getLogger("hitl_telegram_channel")

#: The channel name ``ConfirmationConfig.default_channel`` uses.
DEFAULT_CHANNEL_NAME = "telegram"
#: A timer is re-armed only while it is certainly still asleep: this many seconds or
#: more before the earliest moment it can wake.
_TIMER_MARGIN = 0.05


@dataclass
class _Timer:
    """A running ``_handle_timeout`` of the stock manager, as started."""

    task: "asyncio.Task"
    #: Loop time before which the task is certainly still in its ``asyncio.sleep``.
    wake: float
    interaction: HumanInteraction
    channel: str


class HitlInteractionManager(HumanInteractionManager):
    """``HumanInteractionManager`` that also sends questions without ``target_humans``
    through a :class:`HitlTelegramChannel`, fails undeliverable ones closed, attaches
    the tool call a :class:`HitlConfirmationGuard` is asking about to its question,
    and follows a deadline an approver moved ("+N min", :meth:`extend_pending`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # interaction_id -> the timeout timer running for it in this process.
        self._timers: Dict[str, _Timer] = {}

    async def startup(self) -> None:
        """The stock registration (response and cancel handlers), and the extension
        handler of every :class:`HitlTelegramChannel`."""
        await super().startup()
        seen = set()
        for impl in self.channels.values():
            if isinstance(impl, HitlTelegramChannel) and id(impl) not in seen:
                seen.add(id(impl))
                await impl.register_extension_handler(self.extend_pending)

    async def request_human_input(
        self,
        interaction: HumanInteraction,
        channel: str = "telegram",
    ):
        call, token, impl = self._bind_call(interaction, channel)
        try:
            result = await super().request_human_input(interaction, channel=channel)
        finally:
            if token is not None:
                asking.reset(token)
            if impl is not None:
                # The blocking path is over: nothing sends this question again.
                impl.detach_call(interaction.interaction_id)
            # The stock code cancels the timer it started; one extend_pending started
            # in its place is cancelled here (a waiter that was itself cancelled would
            # leave it running otherwise).
            self._drop_timer(interaction.interaction_id)
        if call is not None:
            # What the operator chose, from the answers the manager consolidated (so an
            # answer it refused grants nothing); OperatorWindowStore records by it.
            call.granted_window_seconds = granted_window(result.responses)
            # Who refused and why, for the guard's decision.
            call.denial = denial(result.responses)
            # The service's record of this question, which an outcome report names.
            call.record_id = (
                impl.record_id_for(interaction.interaction_id) if impl is not None else None
            )
        return result

    # ── More time ("+N min") ──────────────────────────────────────────────

    async def _handle_timeout(self, interaction: HumanInteraction, channel: str) -> None:
        """The stock timer (it sleeps ``interaction.timeout``, then applies the
        ``timeout_action``), noted so :meth:`extend_pending` can replace it."""
        iid = interaction.interaction_id
        task = asyncio.current_task()
        timer = self._timers.get(iid)
        if task is not None and (timer is None or timer.task is not task):
            # Taken before the stock code's sleep starts: it cannot wake earlier.
            wake = asyncio.get_running_loop().time() + float(interaction.timeout)
            self._timers[iid] = _Timer(task, wake, interaction, channel)
        try:
            await super()._handle_timeout(interaction, channel)
        finally:
            timer = self._timers.get(iid)
            if timer is not None and timer.task is task:
                del self._timers[iid]

    async def extend_pending(
        self,
        interaction_id: str,
        expires_at: datetime,
        previous: Optional[datetime] = None,
    ) -> bool:
        """An approver moved the question's deadline to ``expires_at`` ("+N min"):
        the wait follows it. Returns whether anything was moved.

        A timer running in this process (a blocking ``request_human_input``, or the
        suspend path with ``schedule_timeout``) is replaced as the stock ``_retry``
        replaces one: the running ``_handle_timeout`` task is cancelled and a new one,
        for a copy of the interaction whose ``timeout`` is the time left, takes its
        place in ``_timeout_tasks``. The new deadline is the old one moved by as much
        as the service moved its own (``expires_at - previous``), so the clocks of
        the two hosts need not agree; without ``previous``, ``expires_at`` itself. A
        timer that may already have fired is left alone (the extension came too
        late), and a deadline is never moved earlier. The question's Redis entry is
        then kept until the new deadline (its TTL is ``timeout`` + 60 s, and
        ``receive_response`` drops an answer to a question it cannot load), which is
        all there is to extend for a suspended question without a timer (the guard's
        SUSPEND path).
        """
        iid = interaction_id
        loop = asyncio.get_running_loop()
        now = loop.time()
        timer = self._timers.get(iid)
        if (
            timer is not None
            and not timer.task.done()
            and self._timeout_tasks.get(iid) is timer.task
        ):
            if now >= timer.wake - _TIMER_MARGIN:
                logger.info(
                    "interaction %s: more time came as its timer ran out; it ends now", iid
                )
                return False
            if previous is not None:
                wake = timer.wake + (expires_at - previous).total_seconds()
            else:
                wake = now + _seconds_until(expires_at)
            if wake <= timer.wake:
                return False
            left = wake - now
            # No await between the check above and the replacement: the old task is
            # cancelled inside its sleep.
            timer.task.cancel()
            rearmed = timer.interaction.model_copy(update={"timeout": left})
            task = asyncio.create_task(
                self._handle_timeout(rearmed, timer.channel), name=f"hitl-timeout-{iid}"
            )
            self._timeout_tasks[iid] = task
            self._timers[iid] = _Timer(task, wake, rearmed, timer.channel)
            logger.info(
                "interaction %s: given more time; the wait now ends in %.1f s (%.1f s later)",
                iid, left, wake - timer.wake,
            )
            await self._keep_stored(iid, left, rearmed)
            return True
        # No timer here: a suspended question. Only its Redis entry has a deadline.
        left = _seconds_until(expires_at)
        if left <= 0:
            return False
        return await self._keep_stored(iid, left, None)

    async def _keep_stored(
        self, iid: str, left: float, fallback: Optional[HumanInteraction]
    ) -> bool:
        """Re-persists the interaction with ``timeout`` = ``left``, so its Redis entry
        lasts until the new deadline (and a minute more), as ``_escalate_to_next_tier``
        does when a tier brings a new timeout."""
        try:
            if await self.get_result(iid) is not None:
                return False  # already decided: nothing waits for it
            stored = await self._load_interaction(iid)
            if stored is None:
                stored = fallback
            if stored is None:
                return False
            await self._persist_interaction(stored.model_copy(update={"timeout": left}))
            return True
        except Exception as exc:  # noqa: BLE001 - Redis unavailable: the timer still moved
            logger.warning(
                "interaction %s: its Redis entry was not kept for the new deadline: %s",
                iid, exc,
            )
            return fallback is not None

    def _drop_timer(self, iid: str) -> None:
        timer = self._timers.pop(iid, None)
        if (
            timer is not None
            and not timer.task.done()
            and timer.task is not asyncio.current_task()
        ):
            timer.task.cancel()

    def _bind_call(
        self, interaction: HumanInteraction, channel: str
    ) -> Tuple[Optional[ToolCall], Any, Optional[HitlTelegramChannel]]:
        """Takes the call the guard is asking about in this task, if any, and attaches
        it to ``interaction`` on the channel. The context variable is cleared until the
        caller resets it (the returned token), so the tasks the stock manager starts
        meanwhile (timeout timers) do not carry it to other questions."""
        call = asking.get()
        if call is None:
            return None, None, None
        token = asking.set(None)
        call.granted_window_seconds = None
        call.denial = None
        call.record_id = None
        impl = self.channels.get(channel)
        if not isinstance(impl, HitlTelegramChannel):
            logger.warning(
                "the call %r is asked on channel %r, not a HitlTelegramChannel: the "
                "question goes without it",
                call.tool, channel,
            )
            return call, token, None
        if interaction.interaction_type == InteractionType.FORM:
            bound = call.for_form((interaction.form_schema or {}).get("current_values"))
        else:
            # Only a form (allow_edit) can be edited: an approval goes without the schema.
            bound = replace(call, granted_window_seconds=None, denial=None, record_id=None,
                            args_schema=None)
        impl.attach_call(interaction.interaction_id, bound)
        return call, token, impl

    async def _dispatch_to_channel(self, interaction: HumanInteraction, channel: str) -> None:
        impl = self.channels.get(channel)
        if not isinstance(impl, HitlTelegramChannel):
            await super()._dispatch_to_channel(interaction, channel)
            return
        if interaction.target_humans:
            await super()._dispatch_to_channel(interaction, channel)
        else:
            interaction.channel = channel
            if await impl.send_interaction(interaction, ""):
                interaction.status = InteractionStatus.DELIVERED
            await self._update_status(interaction)
        await self._fail_closed_unless_accepted(impl, interaction)

    async def request_human_input_async(
        self,
        interaction: HumanInteraction,
        channel: str = "telegram",
        schedule_timeout: bool = True,
    ) -> str:
        _call, token, _bound = self._bind_call(interaction, channel)
        try:
            interaction_id = await super().request_human_input_async(
                interaction, channel=channel, schedule_timeout=schedule_timeout
            )
        finally:
            if token is not None:
                asking.reset(token)
        # The call stays attached: a suspended question is answered later; the channel
        # forgets it when the service reports the question ended.
        impl = self.channels.get(channel)
        if not isinstance(impl, HitlTelegramChannel):
            return interaction_id
        if interaction.policy and interaction.current_tier_level == 0:
            return interaction_id  # ended at once by its policy: nothing was sent
        if not interaction.target_humans:
            await impl.send_interaction(interaction, "")
        await self._fail_closed_unless_accepted(impl, interaction)
        return interaction_id

    async def _fail_closed_unless_accepted(
        self, impl: HitlTelegramChannel, interaction: HumanInteraction
    ) -> None:
        if impl.was_accepted(interaction.interaction_id):
            return
        logger.warning(
            "interaction %s reached nobody through hitl-telegram: cancelled (fail closed)",
            interaction.interaction_id,
        )
        impl.detach_call(interaction.interaction_id)
        await self.cancel_pending(interaction.interaction_id, "hitl_telegram:undeliverable")


class OperatorWindowStore(ConfirmationWindowStore):
    """A window store that records only the window the operator granted.

    The stock guard calls ``record(..., window_seconds=<its window>)`` after any
    approval. Inside a :class:`HitlConfirmationGuard` confirmation this store looks at
    what the operator chose (the call's ``granted_window_seconds``, from the answer's
    ``metadata``): "Approve once" records nothing; "Approve for" records the smaller of
    the guard's window and the one the service granted (a route's
    ``max_window_seconds`` may cut it). Anything it cannot attribute to an operator's
    choice (a ``record`` outside a guard's question, an answer that does not say) records
    nothing: a missing window only means asking again. Lookups go to ``inner``.
    """

    def __init__(self, inner: ConfirmationWindowStore) -> None:
        self.inner = inner

    async def is_confirmed(self, owner_id: str, tool_name: str, args_hash: str) -> bool:
        return await self.inner.is_confirmed(owner_id, tool_name, args_hash)

    async def record(
        self,
        owner_id: str,
        tool_name: str,
        args_hash: str,
        *,
        window_seconds: int,
    ) -> None:
        call = asking.get()
        if call is None or call.tool != tool_name:
            logger.warning(
                "window for %r not recorded: not the answer to a question of a "
                "HitlConfirmationGuard", tool_name,
            )
            return
        granted = call.granted_window_seconds
        if granted is None:
            logger.warning("window for %r not recorded: the answer's scope is unknown", tool_name)
            return
        seconds = min(int(window_seconds), granted)
        if seconds <= 0:
            logger.info("approved once: no window recorded for %r (owner %s)", tool_name, owner_id)
            return
        logger.info(
            "approved for %d s: window recorded for %r (owner %s; the guard asked for %d s)",
            seconds, tool_name, owner_id, window_seconds,
        )
        await self.inner.record(owner_id, tool_name, args_hash, window_seconds=seconds)


class HitlConfirmationDecision(ConfirmationDecision):
    """A ``ConfirmationDecision`` that says what the operator said.

    AI-Parrot reads ``allowed``, ``status``, ``reason`` and ``parameters`` as from any
    decision (its ``ToolResult`` error is ``"Confirmation <status>: <reason>"``); the
    fields below are for the agent's own code.
    """

    #: What the operator typed after "Deny with reason", as they saw it (invisible
    #: characters as escapes); ``None`` otherwise.
    denial_reason: Optional[str] = None
    #: Who refused (``"Alice (@alice)"``), when an operator did.
    denied_by: Optional[str] = None
    #: True when an operator refused this very call: asking again with the same call
    #: would only ask the same people again. False for a timeout, a question that
    #: reached nobody, or a service that cancelled it.
    do_not_retry: bool = False


def _with_denial(decision: ConfirmationDecision, refused: Optional[Denial]) -> HitlConfirmationDecision:
    """``decision`` as a :class:`HitlConfirmationDecision`: for a refusal by an operator,
    with who refused and why, and, when they gave a reason, that reason as its
    ``reason``. The values are the stock decision's own (not validated again)."""
    fields = dict(decision)
    if decision.allowed or decision.status != "cancelled" or refused is None:
        return HitlConfirmationDecision.model_construct(**fields)
    if refused.reason is not None:
        fields["reason"] = refused.sentence()
    return HitlConfirmationDecision.model_construct(
        **fields,
        denial_reason=refused.reason,
        denied_by=refused.by,
        do_not_retry=refused.do_not_retry,
    )


def _seconds_until(when: datetime) -> float:
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return (when - datetime.now(timezone.utc)).total_seconds()


class HitlConfirmationGuard(ConfirmationGuard):
    """``ConfirmationGuard`` whose questions show the tool call, and whose window
    follows the operator's choice.

    Overrides one method of the stock guard, ``_request_confirmation``, the step after
    the window check that has everything the call is (tool, parameters, owner, the
    window in force: the tool's ``confirm_window_seconds``, else
    ``config.window_seconds``). It publishes that call for the duration of the question
    (:data:`hitl_telegram_channel.call.asking`) and runs the stock code unchanged, so
    briefing, approval or form, BLOCK or SUSPEND and the decisions stay AI-Parrot's.
    Its decisions come back as :class:`HitlConfirmationDecision`: a refusal by an
    operator names them and sets ``do_not_retry``, and a "Deny with reason" puts their
    text in ``reason`` (which AI-Parrot's ``ToolResult`` shows the model), quoted as
    their words, and in ``denial_reason``.
    Needs a :class:`HitlInteractionManager` (which attaches the call to the question)
    and records windows through :class:`OperatorWindowStore` (``store`` is wrapped in
    one unless it is one).
    """

    def __init__(
        self,
        store: ConfirmationWindowStore,
        human_manager: Optional[HumanInteractionManager] = None,
        config: Optional[ConfirmationConfig] = None,
    ) -> None:
        if not isinstance(store, OperatorWindowStore):
            store = OperatorWindowStore(store)
        super().__init__(store, human_manager=human_manager, config=config)
        if human_manager is not None and not isinstance(human_manager, HitlInteractionManager):
            logger.warning(
                "%s is not a HitlInteractionManager: the guard's questions will not show "
                "the tool call, and no window will be recorded",
                type(human_manager).__name__,
            )

    async def _request_confirmation(self, **kwargs: Any):
        # Keyword arguments passed through as they came, so a later ai-parrot that adds
        # one still works; the ones read here are those of 1.2.4's signature.
        tool = kwargs["tool"]
        owner = kwargs.get("owner")
        call = ToolCall(
            tool=str(tool.name),
            params=kwargs["parameters"],
            owner_id=owner if isinstance(owner, str) and owner else "anonymous",
            window_seconds=max(0, int(kwargs.get("window_seconds") or 0)),
            args_schema=args_schema_of(tool),
        )
        token = asking.set(call)
        try:
            decision = await super()._request_confirmation(**kwargs)
        finally:
            asking.reset(token)
        run = running.get()
        if (
            run is not None
            and decision.allowed
            and decision.status == "confirmed"
            and call.record_id is not None
        ):
            # For the outcome wrapper around execute_tool: the question that confirmed
            # the call (a form re-asked after an invalid edit: the last one).
            run.confirmed(call.tool, call.record_id)
        # A refusal says who refused and why (set by HitlInteractionManager from the
        # answers; a form re-asked after an invalid edit: from the last question).
        return _with_denial(decision, call.denial)


def wire(
    manager: HumanInteractionManager,
    channel: HitlTelegramChannel,
    names: Iterable[str] = (DEFAULT_CHANNEL_NAME,),
) -> HumanInteractionManager:
    """Registers ``channel`` on ``manager`` under each of ``names`` (``"telegram"``).

    Call ``await manager.startup()`` and ``await channel.start()`` afterwards (or use
    :func:`make_confirmation_guard`, which does all of it). Use a
    :class:`HitlInteractionManager`: the stock one never sends a question that names no
    ``target_humans``, such as every ``ConfirmationGuard`` question.
    """
    if not isinstance(manager, HitlInteractionManager):
        logger.warning(
            "%s is not a HitlInteractionManager: questions without target_humans "
            "(ConfirmationGuard's) will not be sent and will time out",
            type(manager).__name__,
        )
    for name in names:
        manager.register_channel(name, channel)
    return manager


async def make_confirmation_guard(
    base_url: str,
    token: str,
    *,
    route: Optional[str] = None,
    default_recipient: Optional[Target] = None,
    recipient_map: Optional[Mapping[str, Target]] = None,
    config: Optional[ConfirmationConfig] = None,
    store: Optional[ConfirmationWindowStore] = None,
    redis_url: Optional[str] = None,
    manager: Optional[HumanInteractionManager] = None,
    timeout: float = 10.0,
    channel: Optional[HitlTelegramChannel] = None,
    start: bool = True,
) -> HitlConfirmationGuard:
    """A ``ConfirmationGuard`` that asks on Telegram through the service.

    Builds a :class:`HitlTelegramChannel` (unless ``channel`` is given), a
    :class:`HitlInteractionManager` (unless ``manager`` is given; it keeps its state in
    Redis at ``redis_url``, AI-Parrot's ``REDIS_URL`` by default) with the channel
    registered as ``"telegram"`` (and as ``config.default_channel`` if that differs),
    and a :class:`HitlConfirmationGuard` over them: its questions show the tool and its
    exact parameters, and an approval with a window offers "Approve once" and "Approve
    for <window>"; the window is recorded only for the latter (``store``, in memory by
    default, wrapped in an :class:`OperatorWindowStore`). With ``start`` (the default)
    it also registers the manager's handlers and starts the channel's event listener.

    The guard's questions name no ``target_humans``: they go to ``route`` if given, else
    ``default_recipient`` (a ``[people]`` name: their private chat), else the agent's
    default route. Release with :func:`close_confirmation_guard`.
    """
    config = config or ConfirmationConfig()
    if channel is None:
        channel = HitlTelegramChannel(
            base_url,
            token,
            route=route,
            recipient_map=recipient_map,
            timeout=timeout,
            default_recipient=default_recipient,
        )
    if manager is None:
        manager = HitlInteractionManager(redis_url=redis_url)
    names = [DEFAULT_CHANNEL_NAME]
    if config.default_channel not in names:
        names.append(config.default_channel)
    wire(manager, channel, names)
    guard = HitlConfirmationGuard(
        store or InMemoryConfirmationWindowStore(), human_manager=manager, config=config
    )
    if start:
        await manager.startup()
        await channel.start()
    return guard


async def close_confirmation_guard(guard: ConfirmationGuard) -> None:
    """Stops the channels :func:`make_confirmation_guard` started and closes the
    manager's Redis connection."""
    manager = guard.human_manager
    if manager is None:
        return
    seen = set()
    for channel in list(manager.channels.values()):
        if isinstance(channel, HitlTelegramChannel) and id(channel) not in seen:
            seen.add(id(channel))
            await channel.stop()
    redis = getattr(manager, "_redis", None)
    if redis is not None:
        try:
            await redis.aclose()
        except AttributeError:  # redis-py < 5
            await redis.close()
        manager._redis = None


def args_schema_of(tool: Any) -> Optional[Dict[str, Any]]:
    """The tool's argument schema as JSON Schema (its pydantic ``args_schema``'s
    ``model_json_schema()``), for the console's edit form; ``None`` when the tool has
    none or it cannot be written as JSON (the question then goes without it, and edits
    fall back to approve/cancel: never a failed question for want of a form)."""
    model = getattr(tool, "args_schema", None)
    write = getattr(model, "model_json_schema", None)
    if not callable(write):
        return None
    try:
        schema = write()
        json.dumps(schema, allow_nan=False)
    except Exception as exc:  # noqa: BLE001 - a schema pydantic cannot write: no form
        logger.warning("tool %r: its args_schema has no JSON Schema (%s); no edit form",
                       getattr(tool, "name", "?"), exc)
        return None
    return schema if isinstance(schema, dict) else None
