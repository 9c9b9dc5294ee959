#!/usr/bin/env python3
"""End-to-end driver: the real AI-Parrot ``HumanInteractionManager`` and
``ConfirmationGuard`` asking through ``HitlTelegramChannel`` against a running
hitl-telegram service (run by ``tests/integrations/aiparrot_e2e.rs`` against the fake Bot API).

Environment:
    HITL_BASE_URL   the service, e.g. http://127.0.0.1:PORT
    HITL_TOKEN      agent-a's bearer token
    HITL_REDIS_URL  Redis for the manager (default redis://127.0.0.1:6379/13)
    HITL_SCENARIOS  optional comma-separated subset of the scenarios, in order

Protocol: one JSON object per line on stdout (anything else the process prints goes to
stderr):
    {"event": "ready"}                         the guards are wired, the event stream is up
    {"event": "asked", "scenario", "interaction_id", "interaction_type", "question",
     "accepted", "target", "call"}             the channel posted a question (the test
                                               acts in Telegram when accepted is true);
                                               "call" is the tool call it carried, or null
    {"event": "result", "scenario", ...}       a scenario's outcome (the guard's decision
                                               as "decision", its "args_hash", elapsed
                                               seconds, and for the other guard "recorded":
                                               the windows its store recorded meanwhile)
    {"event": "done"}                          every scenario ran
    {"event": "skip", "reason"}                Redis is not reachable (exit 4)
    {"event": "fatal", "error"}                the driver itself failed (exit 3)

The scenarios run one after another; each waits for the test to answer (or not) in
Telegram, bounded by the guard's approval_timeout.
"""

import asyncio
import os
import time

# Takes over stdout for the protocol (see _protocol.py).
from _protocol import emit, run, skip_without_redis, start  # noqa: E402


BASE_URL = os.environ.get("HITL_BASE_URL", "")
TOKEN = os.environ.get("HITL_TOKEN", "")
REDIS_URL = os.environ.get("HITL_REDIS_URL", "redis://127.0.0.1:6379/13")
start(HITL_BASE_URL=BASE_URL, HITL_TOKEN=TOKEN)


from _scenario import AnnouncingChannel, Current, confirm, deploy_tool, params  # noqa: E402
from parrot.auth.confirmation import (  # noqa: E402
    ConfirmationConfig,
    InMemoryConfirmationWindowStore,
)
from parrot.human.models import HumanInteraction, InteractionType  # noqa: E402

from hitl_telegram_channel import (  # noqa: E402
    HitlConfirmationGuard,
    HitlInteractionManager,
    close_confirmation_guard,
    make_confirmation_guard,
)


class RecordingStore(InMemoryConfirmationWindowStore):
    """AI-Parrot's in-memory window store, noting the windows it is told to record
    (what the operator's choice let through OperatorWindowStore)."""

    def __init__(self):
        super().__init__()
        self.recorded = []

    async def record(self, owner_id, tool_name, args_hash, *, window_seconds):
        self.recorded.append(window_seconds)
        await super().record(owner_id, tool_name, args_hash, window_seconds=window_seconds)

    def take(self):
        """What was recorded since the last call, for a scenario's result."""
        taken, self.recorded = self.recorded, []
        return {"recorded": taken}


async def wait_status(interaction_id, status, within=20.0):
    """Polls the service until the interaction has ``status``."""
    import aiohttp

    deadline = time.monotonic() + within
    async with aiohttp.ClientSession() as http:
        while True:
            async with http.get(
                f"{BASE_URL}/v1/interactions/{interaction_id}",
                headers={"Authorization": f"Bearer {TOKEN}"},
            ) as resp:
                view = await resp.json()
            if view.get("status") == status:
                return view
            if time.monotonic() > deadline:
                raise RuntimeError(f"{interaction_id} never became {status}: {view}")
            await asyncio.sleep(0.1)


# ── The scenarios ─────────────────────────────────────────────────────────────

async def main():
    await skip_without_redis(REDIS_URL)

    def channel(**kw):
        return AnnouncingChannel(BASE_URL, TOKEN, timeout=10.0, **kw)

    # In the ops group (any of its approvers answers).
    ops = await make_confirmation_guard(
        BASE_URL, TOKEN, channel=channel(route="ops"), redis_url=REDIS_URL,
        config=ConfirmationConfig(approval_timeout=60),
    )
    # In the other group (bob approves; the test caps its windows at 120 s): the
    # scenarios about the call and its window, in a chat of their own so that Telegram's
    # twenty messages a minute per group do not slow the ops scenarios down.
    other_store = RecordingStore()
    other = await make_confirmation_guard(
        BASE_URL, TOKEN, channel=channel(route="other"), redis_url=REDIS_URL,
        config=ConfirmationConfig(approval_timeout=60), store=other_store,
    )
    # In alice's private chat with the bot (no route: default_recipient).
    private = await make_confirmation_guard(
        BASE_URL, TOKEN, channel=channel(default_recipient="alice"), redis_url=REDIS_URL,
        config=ConfirmationConfig(approval_timeout=60),
    )
    # The ops guard's manager and channel, with a 3 s approval_timeout.
    short = HitlConfirmationGuard(
        InMemoryConfirmationWindowStore(), human_manager=ops.human_manager,
        config=ConfirmationConfig(approval_timeout=3),
    )
    # A route agent-a may not use: the service refuses every question (403).
    refused = await make_confirmation_guard(
        BASE_URL, TOKEN, channel=channel(route="not-a-route"), redis_url=REDIS_URL,
        config=ConfirmationConfig(approval_timeout=30),
    )
    guards = [ops, other, private, refused]
    ops_channel = ops.human_manager.channels["telegram"]
    private_channel = private.human_manager.channels["telegram"]
    for g in guards:
        assert isinstance(g.human_manager, HitlInteractionManager)
        assert g.human_manager.channels["telegram"].connected, "event stream not connected"
    emit({"event": "ready"})

    async def approve():
        await confirm("approve", ops, deploy_tool(), params("billing"))

    async def reject():
        await confirm("reject", private, deploy_tool(), params("payroll"))

    async def timeout():
        await confirm("timeout", short, deploy_tool(), params("search"))

    async def edit_form_approved():
        await confirm("edit_form_approved", ops, deploy_tool(allow_edit=True), params("ledger"))

    async def edit_form_cancelled():
        await confirm("edit_form_cancelled", ops, deploy_tool(allow_edit=True), params("mailer"))

    async def call_shown():
        # A briefing that names only the service: the message must still show the tool
        # and every parameter.
        tool = deploy_tool(template="Deploy {service}?")
        await confirm("call_shown", other, tool, params("ledger-eu"), other_store.take)

    async def once():
        # The tool asks for a 600 s window (the route allows 120 s): "Approve once"
        # records none, so the identical call is asked again.
        tool = deploy_tool(window=600)
        await confirm("once_first", other, tool, params("search-eu"), other_store.take)
        await confirm("once_second", other, tool, params("search-eu"), other_store.take)

    async def window():
        # "Approve for" records the window the route allows (120 s, not the 600 asked).
        tool = deploy_tool(window=600)
        await confirm("window_first", other, tool, params("cache"), other_store.take)
        await confirm("window_second", other, tool, params("cache"), other_store.take)
        # Another call of the same tool with other arguments is asked again.
        await confirm("window_other_args", other, tool, params("cache-eu"), other_store.take)

    async def fail_closed():
        await confirm("fail_closed", refused, deploy_tool(), params("vault"))

    async def notify():
        Current.scenario = "notify"
        sent = await private_channel.send_notification("alice", "Deploy of billing finished")
        emit({"event": "result", "scenario": "notify", "sent": sent})

    async def withdraw():
        # The suspend path: request_human_input_async returns at once; the agent then
        # withdraws the question through the channel.
        Current.scenario = "withdraw"
        manager = ops.human_manager
        interaction = HumanInteraction(
            interaction_type=InteractionType.APPROVAL,
            question="Rotate the API keys?",
            timeout=60,
            default_response=False,
        )
        iid = await manager.request_human_input_async(interaction, channel="telegram")
        await wait_status(iid, "delivered")  # in Telegram before it is withdrawn
        first = await ops_channel.cancel_interaction(iid, "")
        second = await ops_channel.cancel_interaction(iid, "")
        emit({"event": "result", "scenario": "withdraw", "interaction_id": iid,
              "first": first, "second": second})

    async def restart():
        # The test kills and restarts the service while this waits; the answer comes
        # through the event stream resumed with Last-Event-ID.
        await confirm("restart", ops, deploy_tool(), params("gateway"))

    scenarios = {
        "approve": approve,
        "reject": reject,
        "timeout": timeout,
        "edit_form_approved": edit_form_approved,
        "edit_form_cancelled": edit_form_cancelled,
        "call_shown": call_shown,
        "once": once,
        "window": window,
        "fail_closed": fail_closed,
        "notify": notify,
        "withdraw": withdraw,
        "restart": restart,
    }
    chosen = [s for s in os.environ.get("HITL_SCENARIOS", "").split(",") if s] or list(scenarios)
    try:
        for name in chosen:
            await scenarios[name]()
    finally:
        for g in guards:
            await close_confirmation_guard(g)
    emit({"event": "done"})


if __name__ == "__main__":
    run(main)
