"""Unit tests of outcome reporting on AI-Parrot: ``report_outcomes`` around the real
``ToolManager.execute_tool`` (ai-parrot 1.2.4) with a ``HitlConfirmationGuard``, against
the stub of the service in test_channel.py. Needs ai-parrot and Redis, as the guard
tests there:

    .ci/.venv-parrot/bin/python -m unittest discover -s clients/python/tests

tests/integrations/aiparrot_outcome_e2e.rs runs the same path against the real service.
"""

import asyncio
import sys
import time
import unittest
from pathlib import Path
from types import SimpleNamespace

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent / "src"))
sys.path.insert(0, str(_HERE))

import aiparrot_site  # noqa: E402

aiparrot_site.enter()

from parrot.auth.confirmation import ConfirmationConfig  # noqa: E402
from parrot.tools.abstract import ToolResult  # noqa: E402
from parrot.tools.decorators import tool  # noqa: E402
from parrot.tools.manager import ToolManager  # noqa: E402

import test_channel  # noqa: E402  (as a module: its test classes are not run twice)
from hitl_telegram_channel import HitlClient, OutcomeReporter  # noqa: E402
from hitl_telegram_channel.aiparrot import outcome_of, report_outcomes  # noqa: E402
from hitl_telegram_channel.call import running  # noqa: E402

TOKEN = test_channel.TOKEN
HANG = test_channel.HANG


class DiskFull(Exception):
    """What the failing tool raises: a type of the tool's own, not a builtin."""


#: How long each tool body takes: the reported duration is at least this.
BODY_SECONDS = 0.05
# What a run of the body measures at least, in whole ms: the event loop's timers have
# millisecond granularity (uvloop may fire a sleep up to a millisecond early) and the
# reported duration is truncated to the millisecond.
BODY_MS_AT_LEAST = BODY_SECONDS * 1000 - 2


@tool(requires_confirmation=True, confirm_template="Deploy {service}?")
async def deploy(service: str) -> str:
    """Deploy a service."""
    await asyncio.sleep(BODY_SECONDS)
    return f"deployed {service}  v42\n(3 replicas)"


@tool(requires_confirmation=True)
async def transfer(amount: float) -> ToolResult:
    """Transfer money."""
    await asyncio.sleep(BODY_SECONDS)
    return ToolResult(success=False, status="error", error="insufficient funds", result=None)


@tool(requires_confirmation=True)
async def wipe(disk: str) -> str:
    """Wipe a disk."""
    await asyncio.sleep(BODY_SECONDS)
    raise DiskFull(f"{disk} is full")


@tool(requires_confirmation=True)
async def hang(seconds: float) -> str:
    """Never ends in time."""
    await asyncio.sleep(seconds)
    return "late"


@tool(requires_confirmation=True, confirm_window_seconds=600)
async def restart(service: str) -> str:
    """Restart a service (a window: the identical call is not asked again)."""
    return f"restarted {service}"


@tool()
async def status(service: str) -> str:
    """Needs no confirmation."""
    return "ok"


@tool(requires_confirmation=True)
async def dump(rows: int) -> dict:
    """A large result."""
    return {"rows": ["x" * 20] * rows}


class WrapperTest(test_channel.GuardHarness):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.guard_ = await self.guard(config=ConfirmationConfig(approval_timeout=20))
        self.tools = ToolManager()
        for t in (deploy, transfer, wipe, hang, restart, status, dump):
            self.tools.register_tool(t)
        self.tools.set_confirmation_guard(self.guard_)
        self.reporter = OutcomeReporter(HitlClient(self.base, TOKEN, timeout=5), max_backoff=0.05)
        self.addAsyncCleanup(asyncio.to_thread, self.reporter.close, HANG)
        report_outcomes(self.tools, self.reporter)

    async def run_tool(self, name, params, answer=test_channel.approved_once, n=1, **kw):
        """Dispatches ``name``, answers its n-th question with ``answer``, and returns
        what execute_tool returned (or raised) and the question's record id."""
        task = asyncio.create_task(self.tools.execute_tool(name, params, **kw))
        body = await self.answer(self.guard_, n, answer)
        iid = body["interaction"]["interaction_id"]
        try:
            result = await asyncio.wait_for(task, HANG)
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            result = exc
        return result, test_channel.record_id(iid)

    async def reports(self):
        self.assertTrue(await asyncio.to_thread(self.reporter.flush, HANG))
        return self.stub.outcomes

    async def test_a_confirmed_call_that_runs_is_reported_executed_with_its_duration(self):
        result, rid = await self.run_tool("deploy", {"service": "billing"})
        self.assertEqual(result, "deployed billing  v42\n(3 replicas)")
        [(reported, body)] = await self.reports()
        self.assertEqual(reported, rid)
        self.assertEqual(set(body), {"status", "summary", "duration_ms"})
        self.assertEqual(body["status"], "executed")
        # The result as one line, for the line under the decision in Telegram.
        self.assertEqual(body["summary"], "deployed billing v42 (3 replicas)")
        # From the yes to the end of the run: the body's time, not the human's.
        self.assertGreaterEqual(body["duration_ms"], BODY_MS_AT_LEAST)
        self.assertLess(body["duration_ms"], HANG * 1000)

    async def test_a_failed_tool_result_is_reported_failed_and_returned_unchanged(self):
        result, rid = await self.run_tool("transfer", {"amount": 1200.5})
        self.assertIsInstance(result, ToolResult)
        self.assertEqual((result.success, result.status, result.error),
                         (False, "error", "insufficient funds"))
        [(reported, body)] = await self.reports()
        self.assertEqual(reported, rid)
        self.assertEqual((body["status"], body["error"]), ("failed", "insufficient funds"))
        self.assertNotIn("summary", body)
        self.assertGreaterEqual(body["duration_ms"], BODY_MS_AT_LEAST)

    async def test_an_exception_is_reported_failed_and_raised_unchanged(self):
        raised, rid = await self.run_tool("wipe", {"disk": "sda"})
        self.assertIsInstance(raised, DiskFull)
        self.assertEqual(str(raised), "sda is full")
        [(reported, body)] = await self.reports()
        self.assertEqual(reported, rid)
        self.assertEqual((body["status"], body["error"]), ("failed", "DiskFull: sda is full"))
        self.assertIsInstance(body["duration_ms"], int)

    async def test_a_refused_call_is_not_reported(self):
        result, _ = await self.run_tool(
            "deploy", {"service": "billing"}, answer=test_channel.rejected_by_alice)
        self.assertEqual((result.status, result.error),
                         ("cancelled", "Confirmation cancelled: HITL approval rejected"))
        self.assertEqual(await self.reports(), [])

    async def test_a_tool_without_confirmation_and_a_window_hit_are_not_reported(self):
        self.assertEqual(await self.tools.execute_tool("status", {"service": "billing"}), "ok")
        ctx = SimpleNamespace(user_id="alice", channel=None)
        first, rid = await self.run_tool(
            "restart", {"service": "billing"}, answer=lambda iid: test_channel.approved_for(iid, 600),
            permission_context=ctx)
        self.assertEqual(first, "restarted billing")
        # The guard's own window lets the identical call through: the service has no
        # record of this second run, so there is nothing to report it against.
        again = await self.tools.execute_tool(
            "restart", {"service": "billing"}, permission_context=ctx)
        self.assertEqual(again, "restarted billing")
        self.assertEqual(len(self.stub.posted()), 1)
        self.assertEqual([r for r, _ in await self.reports()], [rid])

    async def test_a_run_cut_short_is_not_reported_so_the_service_can_say_unknown(self):
        task = asyncio.create_task(self.tools.execute_tool("hang", {"seconds": 60}))
        await self.answer(self.guard_, 1, test_channel.approved_once)
        for _ in range(test_channel.WAIT_STEPS):  # until the body runs
            if self.guard_.human_manager.channels["telegram"].record_id_for(
                    self.stub.posted()[0]["interaction"]["interaction_id"]):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        self.assertEqual(await self.reports(), [])

    async def test_the_agent_does_not_wait_for_the_report(self):
        self.stub.outcome_delay = 2.0
        t0 = time.monotonic()
        result, _ = await self.run_tool("deploy", {"service": "billing"})
        took = time.monotonic() - t0
        self.assertEqual(result, "deployed billing  v42\n(3 replicas)")
        self.assertLess(took, self.stub.outcome_delay, "execute_tool waited for the report")
        self.assertEqual(len(await self.reports()), 1)

    async def test_a_service_that_refuses_reports_changes_nothing_for_the_agent(self):
        self.stub.outcome_status = 503
        with self.assertLogs("hitl_telegram_channel", "WARNING") as logs:
            result, rid = await self.run_tool("deploy", {"service": "billing"})
            self.assertEqual(await self.reports(), [])
        self.assertEqual(result, "deployed billing  v42\n(3 replicas)")
        self.assertTrue(any(rid in line and "503" in line for line in logs.output), logs.output)
        raised, _ = await self.run_tool("wipe", {"disk": "sda"}, n=2)
        self.assertIsInstance(raised, DiskFull)

    async def test_a_long_result_is_cut_to_the_services_bound_and_summaries_can_be_turned_off(self):
        await self.run_tool("dump", {"rows": 100})
        [(_, body)] = await self.reports()
        self.assertEqual(len(body["summary"]), 500)
        self.assertTrue(body["summary"].endswith("…"))
        quiet = ToolManager()
        quiet.register_tool(deploy)
        quiet.set_confirmation_guard(self.guard_)
        report_outcomes(quiet, self.reporter, summarize=None)
        task = asyncio.create_task(quiet.execute_tool("deploy", {"service": "billing"}))
        await self.answer(self.guard_, 2, test_channel.approved_once)
        await asyncio.wait_for(task, HANG)
        self.assertEqual(set((await self.reports())[1][1]), {"status", "duration_ms"})

    async def test_wrapping_twice_still_reports_once_and_leaves_nothing_behind(self):
        with self.assertLogs("hitl_telegram_channel", "WARNING"):
            self.assertIs(report_outcomes(self.tools, self.reporter), self.tools)
        await self.run_tool("deploy", {"service": "billing"})
        self.assertEqual(len(await self.reports()), 1)
        self.assertIsNone(running.get())

    def test_only_a_tool_manager_and_a_reporter_are_taken(self):
        with self.assertRaises(TypeError):
            report_outcomes(object(), self.reporter)
        with self.assertRaises(TypeError):
            report_outcomes(ToolManager(), HitlClient(self.base, TOKEN))


class OutcomeOfTest(unittest.TestCase):
    def test_what_each_result_is_reported_as(self):
        cases = [
            ("a value", "done", ("executed", "done", None)),
            ("no value", None, ("executed", None, None)),
            ("a structure, as JSON", {"id": 7, "ok": True}, ("executed", '{"id": 7, "ok": true}', None)),
            ("a successful ToolResult: its voice text",
             ToolResult(result={"x": 1}, voice_text="Deployed."), ("executed", "Deployed.", None)),
            ("a successful ToolResult: its result",
             ToolResult(result="42 rows"), ("executed", "42 rows", None)),
            ("a job started", ToolResult(status="pending", result="job 9"),
             ("executed", "job 9", None)),
            ("an error", ToolResult(success=False, status="error", error="boom", result=None),
             ("failed", None, "boom")),
            ("success false alone", ToolResult(success=False, result=None),
             ("failed", None, "the tool reported no success (status 'success')")),
            ("a status that says it did not run",
             ToolResult(success=False, status="forbidden", error="Permission denied", result=None),
             ("failed", None, "forbidden: Permission denied")),
            ("an error status without success false",
             ToolResult(status="timeout", error="upstream timed out", result=None),
             ("failed", None, "timeout: upstream timed out")),
        ]
        for what, result, expected in cases:
            with self.subTest(what):
                self.assertEqual(outcome_of("t", result), expected)

    def test_a_summary_that_fails_costs_only_the_summary(self):
        def broken(tool_name, result):
            raise KeyError("x")

        with self.assertLogs("hitl_telegram_channel", "WARNING"):
            self.assertEqual(outcome_of("t", "done", broken), ("executed", None, None))


if __name__ == "__main__":
    unittest.main()
