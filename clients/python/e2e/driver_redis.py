#!/usr/bin/env python3
"""End-to-end driver for the Redis path: the real AI-Parrot ``HumanInteractionManager``
and ``ConfirmationGuard`` asking through AI-Parrot's own ``CLIDaemonHumanChannel``
(Redis queues), which a hitl-telegram service with ``[redis_bridge]`` serves (run by
``tests/integrations/aiparrot_redis_e2e.rs`` against the fake Bot API).

Nothing of hitl-telegram's Python client is on the wire here: the channel is AI-Parrot's,
unchanged, with its stock response listener. Two managers:

* the stock ``HumanInteractionManager``, asking an approval with
  ``target_humans=["alice"]`` (scenario ``stock_approve``);
* for ``ConfirmationGuard`` (whose questions name no ``target_humans``, which the stock
  manager sends to nobody), ``HitlInteractionManager`` from ``hitl_telegram_channel``
  with the small ``DefaultRecipientManager`` below, which sends such a question to the
  queue of one default recipient (``alice``). ``HitlInteractionManager`` itself only does
  this for its own HTTP channel.

Environment:
    HITL_REDIS_URL      the Redis the bridge serves (default redis://127.0.0.1:6379)
    HITL_BRIDGE_PREFIX  the bridge's prefix (CLIDaemonHumanChannel's queue_prefix)
    HITL_RECIPIENT      the recipient the guard's questions go to (default alice)
    HITL_SCENARIOS      optional comma-separated subset of the scenarios, in order

Protocol: one JSON object per line on stdout, as ``driver.py``'s: ``ready``, then
``asked`` (``scenario``, ``interaction_id``, ``interaction_type``, ``question``,
``recipient``, ``accepted``) for each question queued, ``result`` per scenario, ``done``;
``skip`` (exit 4) when Redis is unreachable, ``fatal`` (exit 3) on a failure.
"""

import asyncio
import logging
import os
import sys
import time

# Takes over stdout for the protocol (see _protocol.py).
from _protocol import emit, run, start  # noqa: E402


REDIS_URL = os.environ.get("HITL_REDIS_URL", "redis://127.0.0.1:6379")
PREFIX = os.environ.get("HITL_BRIDGE_PREFIX", "")
RECIPIENT = os.environ.get("HITL_RECIPIENT", "alice")
start(HITL_BRIDGE_PREFIX=PREFIX)


from redis.asyncio import Redis  # noqa: E402

from _scenario import Current, announce, confirm, deploy_tool, params  # noqa: E402
from parrot.auth.confirmation import (  # noqa: E402
    ConfirmationConfig,
    ConfirmationGuard,
    InMemoryConfirmationWindowStore,
)
from parrot.human.channels.cli import CLIDaemonHumanChannel  # noqa: E402
from parrot.human.manager import HumanInteractionManager  # noqa: E402
from parrot.human.models import (  # noqa: E402
    HumanInteraction,
    InteractionStatus,
    InteractionType,
)

from hitl_telegram_channel import HitlInteractionManager  # noqa: E402


# ── The agent side ────────────────────────────────────────────────────────────

class Announcing(CLIDaemonHumanChannel):
    """AI-Parrot's channel, unchanged; it only says on the protocol what it queued, so
    the test can answer it in Telegram."""

    async def send_interaction(self, interaction, recipient):
        accepted = await super().send_interaction(interaction, recipient)
        announce(interaction, accepted, recipient=recipient)
        return accepted


class DefaultRecipientManager(HitlInteractionManager):
    """Sends a question that names no ``target_humans`` (every ``ConfirmationGuard``
    question) to ``default_recipient``'s queue; everything else is the parent's."""

    def __init__(self, *args, default_recipient, **kwargs):
        super().__init__(*args, **kwargs)
        self.default_recipient = default_recipient

    async def _dispatch_to_channel(self, interaction, channel):
        impl = self.channels.get(channel)
        if interaction.target_humans or impl is None:
            await super()._dispatch_to_channel(interaction, channel)
            return
        interaction.channel = channel
        if await impl.send_interaction(interaction, self.default_recipient):
            interaction.status = InteractionStatus.DELIVERED
            await self._update_status(interaction)
        else:
            await self.cancel_pending(interaction.interaction_id, "undeliverable")


async def main():
    redis = Redis.from_url(REDIS_URL)
    try:
        await asyncio.wait_for(redis.ping(), 5)
    except Exception as exc:  # noqa: BLE001
        emit({"event": "skip", "reason": f"Redis at {REDIS_URL} is not reachable: {exc!r}"})
        sys.exit(4)

    channel = Announcing(redis, queue_prefix=PREFIX)
    # The stock manager, with the channel under its own name.
    stock = HumanInteractionManager(channels={"cli": channel}, redis_url=REDIS_URL)
    # The guards' manager: the same channel, as the guard's default channel.
    guarded = DefaultRecipientManager(
        channels={"telegram": channel}, redis_url=REDIS_URL, default_recipient=RECIPIENT
    )
    # Both register on the one channel; the last one's handler receives the answers,
    # and the manager state lives in Redis, so either one resolves its own futures:
    # keep one handler that dispatches to whichever manager is waiting.
    await stock.startup()
    await guarded.startup()

    async def on_response(response):
        for m in (stock, guarded):
            if m.has_pending(response.interaction_id):
                await m.receive_response(response)
                return
        logging.getLogger("driver").info(
            "answer for %s, which nobody waits for", response.interaction_id
        )

    await channel.register_response_handler(on_response)
    listener = asyncio.create_task(channel.start_response_listener(RECIPIENT))

    guard = ConfirmationGuard(
        InMemoryConfirmationWindowStore(), human_manager=guarded,
        config=ConfirmationConfig(approval_timeout=60),
    )
    short = ConfirmationGuard(
        InMemoryConfirmationWindowStore(), human_manager=guarded,
        config=ConfirmationConfig(approval_timeout=3),
    )
    emit({"event": "ready"})

    async def stock_approve():
        Current.scenario = "stock_approve"
        t0 = time.monotonic()
        result = await stock.request_human_input(
            HumanInteraction(
                question="Rotate the billing API keys?",
                interaction_type=InteractionType.APPROVAL,
                target_humans=[RECIPIENT],
                timeout=60,
            ),
            channel="cli",
        )
        emit({
            "event": "result",
            "scenario": "stock_approve",
            "status": result.status.value,
            "consolidated_value": result.consolidated_value,
            "respondents": [r.respondent for r in result.responses],
            "elapsed": round(time.monotonic() - t0, 3),
        })

    async def approve():
        await confirm("approve", guard, deploy_tool(), params("billing"))

    async def reject():
        await confirm("reject", guard, deploy_tool(), params("payroll"))

    async def timeout():
        await confirm("timeout", short, deploy_tool(), params("search"))

    async def edit_form_approved():
        await confirm("edit_form_approved", guard, deploy_tool(allow_edit=True), params("ledger"))

    async def edit_form_cancelled():
        await confirm("edit_form_cancelled", guard, deploy_tool(allow_edit=True), params("mailer"))

    async def window():
        tool = deploy_tool(window=60)
        await confirm("window_first", guard, tool, params("cache"))
        await confirm("window_second", guard, tool, params("cache"))

    scenarios = {
        "stock_approve": stock_approve,
        "approve": approve,
        "reject": reject,
        "timeout": timeout,
        "edit_form_approved": edit_form_approved,
        "edit_form_cancelled": edit_form_cancelled,
        "window": window,
    }
    chosen = [s for s in os.environ.get("HITL_SCENARIOS", "").split(",") if s] or list(scenarios)
    try:
        for name in chosen:
            await scenarios[name]()
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
        for m in (stock, guarded):
            if m._redis is not None:
                await m._redis.aclose()
                m._redis = None
        await redis.aclose()
    emit({"event": "done"})


if __name__ == "__main__":
    run(main)
