#!/usr/bin/env python3
"""End-to-end driver for grants: AI-Parrot's real ``GrantGuard`` (FEAT-211) with
:class:`HitlGrantStore`, asking its own approval through ``HitlTelegramChannel``,
against a running hitl-telegram service (run by
``tests/integrations/aiparrot_grants_e2e.rs``, which plays the operator in the fake
Bot API, restarts the service and revokes the grant).

Environment:
    HITL_BASE_URL    the service, e.g. http://127.0.0.1:PORT
    HITL_TOKEN       agent-a's bearer token
    HITL_REDIS_URL   Redis for the manager (default redis://127.0.0.1:6379/13)
    HITL_SIGNAL_DIR  a directory where the test creates ``restarted`` once the service
                     is back, and ``revoked`` once it revoked the grant

Protocol (one JSON object per line on stdout, as driver.py's): ``ready``; ``asked``
for each question the channel posted; ``result`` for each of the three calls
(``first``: asked and approved; ``after_restart``: let through by the stored grant;
``after_revoke``: asked again), with the guard's decision; ``done``; ``skip`` (Redis
not reachable, exit 4); ``fatal`` (exit 3).
"""

import asyncio
import os
from pathlib import Path
from types import SimpleNamespace

from _protocol import emit, run, skip_without_redis, start  # noqa: E402

BASE_URL = os.environ.get("HITL_BASE_URL", "")
TOKEN = os.environ.get("HITL_TOKEN", "")
REDIS_URL = os.environ.get("HITL_REDIS_URL", "redis://127.0.0.1:6379/13")
SIGNAL_DIR = os.environ.get("HITL_SIGNAL_DIR", "")
start(HITL_BASE_URL=BASE_URL, HITL_TOKEN=TOKEN, HITL_SIGNAL_DIR=SIGNAL_DIR)
SIGNALS = Path(SIGNAL_DIR)

from _scenario import AnnouncingChannel, Current  # noqa: E402
from parrot.auth.grants import GrantConfig, GrantGuard  # noqa: E402

from hitl_telegram_channel import HitlClient, close_confirmation_guard, make_confirmation_guard  # noqa: E402
from hitl_telegram_channel.aiparrot import HitlGrantStore  # noqa: E402

#: What GrantGuard reads from a tool: its name and routing_meta (a real AbstractTool
#: needs the separate ai-parrot-tools package).
DEPLOY = SimpleNamespace(name="deploy", routing_meta={"requires_grant": True})
#: The caller: GrantGuard takes the grant's owner from user_id.
ALICE = SimpleNamespace(user_id="alice", channel="telegram")


async def signal(name, within=120.0):
    """Waits for the test to create ``name`` in the signal directory."""
    for _ in range(int(within / 0.1)):
        if (SIGNALS / name).exists():
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"the test never signalled {name!r}")


async def main():
    await skip_without_redis(REDIS_URL)

    # The channel and manager make_confirmation_guard wires; the GrantGuard shares them,
    # as an agent with both guards would.
    confirmations = await make_confirmation_guard(
        BASE_URL, TOKEN, channel=AnnouncingChannel(BASE_URL, TOKEN, timeout=10.0, route="ops"),
        redis_url=REDIS_URL,
    )
    store = HitlGrantStore(HitlClient(BASE_URL, TOKEN, timeout=10.0))
    guard = GrantGuard(
        store,
        human_manager=confirmations.human_manager,
        config=GrantConfig(window_seconds=3600, approval_timeout=60),
    )
    emit({"event": "ready"})

    async def call(scenario):
        Current.scenario = scenario
        decision = await guard.authorize(tool=DEPLOY, parameters={"service": "billing"},
                                         permission_context=ALICE)
        emit({"event": "result", "scenario": scenario,
              "decision": decision.model_dump(mode="json"),
              "active": [g.model_dump(mode="json") for g in await store.list_active("alice")]})

    try:
        await call("first")
        await signal("restarted")
        await call("after_restart")
        await signal("revoked")
        await call("after_revoke")
    finally:
        await close_confirmation_guard(confirmations)
    emit({"event": "done"})


if __name__ == "__main__":
    run(main)
