#!/usr/bin/env python3
"""End-to-end driver for edit before execute: AI-Parrot's real ``ConfirmationGuard``
(through the package's ``HitlConfirmationGuard``) asks a ``form`` about a tool that
allows edits (``allow_edit``); the channel sends the tool's pydantic schema along, so an
operator edits the call in the service's console (played by
``tests/integrations/aiparrot_edit_e2e.rs``), and the guard runs with the edited values,
which it re-validates with the same pydantic model.

Environment:
    HITL_BASE_URL    the service, e.g. http://127.0.0.1:PORT
    HITL_TOKEN       agent-a's bearer token
    HITL_REDIS_URL   Redis for the manager (default redis://127.0.0.1:6379/13)

Protocol (one JSON object per line on stdout, as driver.py's): ``ready``; ``asked`` for
the question; ``result`` for the scenario ``edited`` (the guard's ``decision``, the
``sent_parameters`` and their ``args_hash``); ``done``; ``skip`` (Redis not reachable,
exit 4); ``fatal`` (exit 3).
"""

import asyncio  # noqa: F401 - the event loop ``run`` starts
import os

from _protocol import emit, run, skip_without_redis, start  # noqa: E402

BASE_URL = os.environ.get("HITL_BASE_URL", "")
TOKEN = os.environ.get("HITL_TOKEN", "")
REDIS_URL = os.environ.get("HITL_REDIS_URL", "redis://127.0.0.1:6379/13")
start(HITL_BASE_URL=BASE_URL, HITL_TOKEN=TOKEN)

from _scenario import AnnouncingChannel, DeployArgs, confirm, deploy_tool, params  # noqa: E402
from parrot.auth.confirmation import ConfirmationConfig  # noqa: E402

from hitl_telegram_channel import close_confirmation_guard, make_confirmation_guard  # noqa: E402


async def main():
    await skip_without_redis(REDIS_URL)
    guard = await make_confirmation_guard(
        BASE_URL, TOKEN, channel=AnnouncingChannel(BASE_URL, TOKEN, timeout=10.0, route="ops"),
        redis_url=REDIS_URL, config=ConfirmationConfig(approval_timeout=60),
    )
    emit({"event": "ready", "schema": DeployArgs.model_json_schema()})
    try:
        await confirm("edited", guard, deploy_tool(allow_edit=True), params("ledger"))
    finally:
        await close_confirmation_guard(guard)
    emit({"event": "done"})


if __name__ == "__main__":
    run(main)
