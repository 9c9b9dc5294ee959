"""Wiring the channel into AI-Parrot's ``HumanInteractionManager`` and ``ConfirmationGuard``.

Two things the stock manager (ai-parrot 1.2.4) does not do, and that a confirmation
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

Everything else (Redis persistence, futures, timeouts, consensus, escalation) is the
stock manager's code, unchanged; other channels registered on it behave as before.
"""

from __future__ import annotations

import logging
from typing import Iterable, Mapping, Optional

from parrot.auth.confirmation import (
    ConfirmationConfig,
    ConfirmationGuard,
    ConfirmationWindowStore,
    InMemoryConfirmationWindowStore,
)
from parrot.human.manager import HumanInteractionManager
from parrot.human.models import HumanInteraction, InteractionStatus

from .channel import HitlTelegramChannel, Target

logger = logging.getLogger("hitl_telegram_channel")

#: The channel name ``ConfirmationConfig.default_channel`` uses.
DEFAULT_CHANNEL_NAME = "telegram"


class HitlInteractionManager(HumanInteractionManager):
    """``HumanInteractionManager`` that also sends questions without ``target_humans``
    through a :class:`HitlTelegramChannel`, and fails undeliverable ones closed."""

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
        interaction_id = await super().request_human_input_async(
            interaction, channel=channel, schedule_timeout=schedule_timeout
        )
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
        await self.cancel_pending(interaction.interaction_id, "hitl_telegram:undeliverable")


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
) -> ConfirmationGuard:
    """A ``ConfirmationGuard`` that asks on Telegram through the service.

    Builds a :class:`HitlTelegramChannel` (unless ``channel`` is given), a
    :class:`HitlInteractionManager` (unless ``manager`` is given; it keeps its state in
    Redis at ``redis_url``, AI-Parrot's ``REDIS_URL`` by default) with the channel
    registered as ``"telegram"`` (and as ``config.default_channel`` if that differs),
    and the guard over them. With ``start`` (the default) it also registers the
    manager's handlers and starts the channel's event listener.

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
    guard = ConfirmationGuard(
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
