#!/usr/bin/env python3
"""End-to-end driver for outcome reports: AI-Parrot's real ``ToolManager`` with a
``HitlConfirmationGuard`` and ``report_outcomes``, against a running hitl-telegram
service (run by ``tests/integrations/aiparrot_outcome_e2e.rs``, which plays the operator
in the fake Bot API and reads each outcome back from the service).

Environment:
    HITL_BASE_URL    the service, e.g. http://127.0.0.1:PORT
    HITL_TOKEN       agent-a's bearer token
    HITL_REDIS_URL   Redis for the manager (default redis://127.0.0.1:6379/13)

Protocol (one JSON object per line on stdout, as driver.py's): ``ready``; ``asked`` for
each question the channel posted; ``result`` for each scenario (``executed``: the tool
returns a value; ``failed_result``: it returns a ``ToolResult`` that failed;
``exception``: it raises), with what ``execute_tool`` returned or raised and the record
id the report names (``record_id``); ``done`` once every queued report was sent
(``flushed``); ``skip`` (Redis not reachable, exit 4); ``fatal`` (exit 3).
"""

import asyncio
import os

from _protocol import emit, run, skip_without_redis, start  # noqa: E402

BASE_URL = os.environ.get("HITL_BASE_URL", "")
TOKEN = os.environ.get("HITL_TOKEN", "")
REDIS_URL = os.environ.get("HITL_REDIS_URL", "redis://127.0.0.1:6379/13")
start(HITL_BASE_URL=BASE_URL, HITL_TOKEN=TOKEN)

from _scenario import AnnouncingChannel, Current  # noqa: E402
from parrot.auth.confirmation import ConfirmationConfig  # noqa: E402
from parrot.tools.abstract import ToolResult  # noqa: E402
from parrot.tools.decorators import tool  # noqa: E402
from parrot.tools.manager import ToolManager  # noqa: E402

from hitl_telegram_channel import (  # noqa: E402
    HitlClient,
    OutcomeReporter,
    close_confirmation_guard,
    make_confirmation_guard,
    report_outcomes,
)

#: How long each tool body runs: the reported duration is at least this.
BODY_SECONDS = 0.3


class DiskFull(Exception):
    """What the failing tool raises."""


@tool(requires_confirmation=True, confirm_template="Deploy {service}?")
async def deploy(service: str) -> str:
    """Deploy a service."""
    await asyncio.sleep(BODY_SECONDS)
    return f"{service} v42 is live"


@tool(requires_confirmation=True, confirm_template="Transfer {amount} EUR?")
async def transfer(amount: float) -> ToolResult:
    """Transfer money."""
    await asyncio.sleep(BODY_SECONDS)
    return ToolResult(success=False, status="error", error="insufficient funds", result=None)


@tool(requires_confirmation=True, confirm_template="Wipe {disk}?")
async def wipe(disk: str) -> str:
    """Wipe a disk."""
    await asyncio.sleep(BODY_SECONDS)
    raise DiskFull(f"{disk} is full")


class Channel(AnnouncingChannel):
    """Notes the questions it posted, to name the record each scenario reports on."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.asked = []

    async def send_interaction(self, interaction, recipient):
        self.asked.append(interaction.interaction_id)
        return await super().send_interaction(interaction, recipient)


SCENARIOS = [
    ("executed", "deploy", {"service": "billing"}),
    ("failed_result", "transfer", {"amount": 1200.5}),
    ("exception", "wipe", {"disk": "sda"}),
]


async def main():
    await skip_without_redis(REDIS_URL)
    channel = Channel(BASE_URL, TOKEN, timeout=10.0, route="ops")
    guard = await make_confirmation_guard(
        BASE_URL, TOKEN, channel=channel, redis_url=REDIS_URL,
        config=ConfirmationConfig(approval_timeout=60),
    )
    tools = ToolManager()
    for t in (deploy, transfer, wipe):
        tools.register_tool(t)
    tools.set_confirmation_guard(guard)
    reporter = OutcomeReporter(HitlClient(BASE_URL, TOKEN, timeout=10.0))
    report_outcomes(tools, reporter)
    emit({"event": "ready", "body_seconds": BODY_SECONDS})

    try:
        for scenario, name, params in SCENARIOS:
            Current.scenario = scenario
            before = len(channel.asked)
            result = {"event": "result", "scenario": scenario}
            try:
                value = await tools.execute_tool(name, params)
            except Exception as exc:  # noqa: BLE001 - the scenario reports it
                result["raised"] = {"type": type(exc).__name__, "message": str(exc)}
            else:
                if isinstance(value, ToolResult):
                    result["tool_result"] = value.model_dump(mode="json", include={
                        "success", "status", "error"})
                else:
                    result["value"] = value
            asked = channel.asked[before:]
            # The record the report names: the service's id of the question asked.
            result["record_id"] = channel.record_id_for(asked[-1]) if asked else None
            emit(result)
        flushed = await asyncio.to_thread(reporter.flush, 30)
    finally:
        await close_confirmation_guard(guard)
        reporter.close(10)
    emit({"event": "done", "flushed": flushed})


if __name__ == "__main__":
    run(main)
