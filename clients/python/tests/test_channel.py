"""Unit tests of the channel against a stub of the service's API (aiohttp).

Run with the python that has ai-parrot (stdlib unittest, nothing else needed):

    .ci/.venv-parrot/bin/python -m unittest discover -s clients/python/tests

The ConfirmationGuard tests also need Redis (HITL_REDIS_URL, default
redis://127.0.0.1:6379/13) and skip without it.
"""

import asyncio
import json
import os
import sys
import tempfile
import time
import unittest
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent / "src"))

if "SITE_ROOT" not in os.environ:
    # AI-Parrot's configuration layer needs this scaffold to import.
    _root = Path(tempfile.mkdtemp(prefix="aiparrot-site-"))
    (_root / "env" / "dev").mkdir(parents=True)
    (_root / "env" / "dev" / ".env").write_text("")
    (_root / "etc").mkdir()
    (_root / "etc" / "config.ini").write_text("[general]\n")
    os.environ["SITE_ROOT"] = str(_root)
    os.environ.setdefault("ENV", "dev")
    os.chdir(_root)

from aiohttp import web  # noqa: E402
from parrot.auth.confirmation import ConfirmationConfig  # noqa: E402
from parrot.human.models import HumanInteraction, InteractionType  # noqa: E402

from hitl_telegram_channel import (  # noqa: E402
    HitlTelegramChannel,
    SseParser,
    close_confirmation_guard,
    make_confirmation_guard,
)

TOKEN = "token-0123456789"
REDIS_URL = os.environ.get("HITL_REDIS_URL", "redis://127.0.0.1:6379/13")


def approval(question="Ship it?"):
    return HumanInteraction(
        interaction_type=InteractionType.APPROVAL, question=question, timeout=30
    )


def response_for(iid, value=True, respondent="111111"):
    return {
        "interaction_id": iid,
        "respondent": respondent,
        "response_type": "approval",
        "value": value,
        "timestamp": "2026-01-02T03:04:05.678901Z",
        "metadata": {"channel": "telegram"},
    }


class StubService:
    """The parts of the API the channel uses, scripted per test."""

    def __init__(self):
        self.requests = []
        self.create_status = 202
        self.create_body = None
        self.fail_first = []  # statuses returned before create_status
        self.event_batches = []  # per connection: list of (id, kind, data); None closes
        self.event_headers = []
        self.delete_status = 200
        self.events_open = asyncio.Event()

    def app(self):
        app = web.Application()
        app.router.add_post("/v1/interactions", self.create)
        app.router.add_delete("/v1/interactions/{iid}", self.delete)
        app.router.add_get("/v1/interactions/{iid}", self.get)
        app.router.add_post("/v1/notifications", self.notify)
        app.router.add_get("/v1/events", self.events)
        return app

    def authorized(self, request):
        return request.headers.get("Authorization") == f"Bearer {TOKEN}"

    async def create(self, request):
        body = await request.json()
        self.requests.append(("POST", request.path, body))
        if not self.authorized(request):
            return web.json_response({"error": {"code": "unauthorized", "message": "no"}}, status=401)
        if self.fail_first:
            status = self.fail_first.pop(0)
            return web.json_response(
                {"error": {"code": "x", "message": "later"}}, status=status,
                headers={"Retry-After": "0"},
            )
        if self.create_status >= 300:
            return web.json_response(
                {"error": {"code": "forbidden", "message": "route 'x' is not allowed"}},
                status=self.create_status,
            )
        iid = body["interaction"]["interaction_id"]
        view = self.create_body or {"interaction_id": iid, "status": "pending", "route": "ops"}
        return web.json_response(view, status=self.create_status)

    async def delete(self, request):
        self.requests.append(("DELETE", request.path, None))
        if self.delete_status != 200:
            return web.json_response({"error": {"code": "already_decided", "message": "ended"}},
                                     status=self.delete_status)
        return web.json_response({"status": "cancelled"})

    async def get(self, request):
        self.requests.append(("GET", request.path, None))
        return web.json_response({"status": "delivered", "responses": []})

    async def notify(self, request):
        body = await request.json()
        self.requests.append(("POST", request.path, body))
        return web.json_response({"chat_id": 1, "message_id": 2})

    async def events(self, request):
        self.event_headers.append(dict(request.headers))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"retry: 50\n\n")
        self.events_open.set()
        batch = self.event_batches.pop(0) if self.event_batches else []
        for item in batch:
            if item is None:
                return resp
            if isinstance(item, (int, float)):
                await asyncio.sleep(item)
                continue
            seq, kind, data = item
            await resp.write(f"id: {seq}\nevent: {kind}\ndata: {json.dumps(data)}\n\n".encode())
        await asyncio.sleep(3600)
        return resp


class ServiceTestCase(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.stub = StubService()
        self.runner = web.AppRunner(self.stub.app(), shutdown_timeout=0.2)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.base = f"http://127.0.0.1:{port}"
        self.channels = []

    async def asyncTearDown(self):
        for c in self.channels:
            await c.stop()
        await self.runner.cleanup()

    def channel(self, **kw):
        kw.setdefault("timeout", 2.0)
        c = HitlTelegramChannel(self.base, kw.pop("token", TOKEN), **kw)
        c.connect_timeout = 2.0
        self.channels.append(c)
        return c


class SseParserTest(unittest.TestCase):
    def test_events_split_anywhere_with_any_line_end(self):
        stream = (b"retry: 3000\n\n: keep-alive\r\nid: 7\r\nevent: status\r\n"
                  b"data: {\"a\":\r\ndata: 1}\r\n\r\nid: 8\rdata: x\r\r")
        for size in (1, 2, 3, 7, len(stream)):
            p = SseParser()
            events = []
            for i in range(0, len(stream), size):
                events += p.feed(stream[i:i + size])
            self.assertEqual([(e.event, e.data, e.id) for e in events],
                             [("status", '{"a":\n1}', "7"), ("message", "x", "8")], size)
            self.assertEqual(p.retry, 3.0)
            self.assertEqual(p.last_event_id, "8")

    def test_an_event_without_data_is_not_dispatched(self):
        p = SseParser()
        self.assertEqual(p.feed(b"event: status\nid: 3\n\n"), [])
        self.assertEqual(p.last_event_id, "3")


class SendTest(ServiceTestCase):
    async def test_accepted_only_on_200_or_202_with_an_open_interaction(self):
        c = self.channel(route="ops")
        i = approval()
        self.assertTrue(await c.send_interaction(i, "alice"))
        method, path, body = self.stub.requests[-1]
        self.assertEqual(body["route"], "ops")
        self.assertNotIn("recipient", body)
        self.assertEqual(body["interaction"], json.loads(i.model_dump_json()))
        self.assertTrue(c.was_accepted(i.interaction_id))

        self.stub.create_status = 200
        self.stub.create_body = {"status": "cancelled", "reason": "bot was blocked"}
        self.assertFalse(await c.send_interaction(approval(), "alice"))

    async def test_every_error_is_false(self):
        for status in (401, 403, 404, 409, 413, 422, 500, 502):
            self.stub.create_status = status
            c = self.channel()
            i = approval()
            with self.assertLogs("hitl_telegram_channel", "WARNING") as logs:
                self.assertFalse(await c.send_interaction(i, "alice"), status)
            self.assertIn(f"HTTP {status}", "\n".join(logs.output))
            self.assertFalse(c.was_accepted(i.interaction_id))
        # A wrong token.
        self.stub.create_status = 202
        self.assertFalse(await self.channel(token="wrong-token-000").send_interaction(approval(), "a"))

    async def test_unreachable_is_false(self):
        c = HitlTelegramChannel("http://127.0.0.1:9", TOKEN, timeout=1.0, retries=1)
        self.channels.append(c)
        t0 = time.monotonic()
        self.assertFalse(await c.send_interaction(approval(), "alice"))
        self.assertLess(time.monotonic() - t0, 5)

    async def test_429_and_503_are_retried_with_the_same_interaction(self):
        self.stub.fail_first = [429, 503]
        c = self.channel()
        i = approval()
        self.assertTrue(await c.send_interaction(i, "alice"))
        ids = [b["interaction"]["interaction_id"] for m, p, b in self.stub.requests if m == "POST"]
        self.assertEqual(ids, [i.interaction_id] * 3)

    async def test_targets(self):
        c = self.channel(recipient_map={"U1": "alice", "U2": {"route": "council"}},
                         default_recipient="bob")
        self.assertEqual(c.target_for("U1"), {"recipient": "alice"})
        self.assertEqual(c.target_for("U2"), {"route": "council"})
        self.assertEqual(c.target_for("carol"), {"recipient": "carol"})
        self.assertEqual(c.target_for(""), {"recipient": "bob"})
        self.assertEqual(self.channel().target_for(""), {})
        self.assertEqual(self.channel(route="ops").target_for("carol"), {"route": "ops"})

    async def test_notification_and_withdrawal(self):
        c = self.channel()
        self.assertTrue(await c.send_notification("alice", "done"))
        self.assertEqual(self.stub.requests[-1][2], {"message": "done", "recipient": "alice"})
        self.assertTrue(await c.cancel_interaction("a/b c", "alice"))
        self.assertEqual(self.stub.requests[-1][:2], ("DELETE", "/v1/interactions/a/b c"))
        self.stub.delete_status = 409
        self.assertFalse(await c.cancel_interaction("x", "alice"))


class ListenTest(ServiceTestCase):
    async def test_responses_reach_the_handler_and_the_stream_resumes_after_the_last_id(self):
        got = []

        async def handler(response):
            got.append(response)

        self.stub.event_batches = [
            [(41, "status", {"interaction_id": "q1", "status": "delivered"}),
             (42, "response", {"id": "x", "interaction_id": "q1", "response": response_for("q1")}),
             None],
            [(43, "response", {"id": "x", "interaction_id": "q2",
                               "response": response_for("q2", False, "alice")})],
        ]
        c = self.channel(forward_unknown=True)
        await c.register_response_handler(handler)
        await c.start()
        for _ in range(100):
            if len(got) == 2:
                break
            await asyncio.sleep(0.05)
        self.assertEqual([(r.interaction_id, r.value, r.respondent) for r in got],
                         [("q1", True, "111111"), ("q2", False, "alice")])
        self.assertNotIn("Last-Event-ID", self.stub.event_headers[0])
        self.assertEqual(self.stub.event_headers[1]["Last-Event-ID"], "42")
        self.assertEqual(self.stub.event_headers[0]["Authorization"], f"Bearer {TOKEN}")
        self.assertEqual(c.last_event_id, "43")

    async def test_a_bad_response_is_skipped_and_the_listener_goes_on(self):
        got = []

        async def handler(response):
            got.append(response)

        bad = response_for("q1")
        bad["chat_id"] = 5  # HumanResponse forbids extra fields
        self.stub.event_batches = [[
            (1, "response", {"response": bad}),
            (2, "response", {"response": response_for("q2")}),
        ]]
        c = self.channel(forward_unknown=True)
        await c.register_response_handler(handler)
        await c.start()
        for _ in range(100):
            if got:
                break
            await asyncio.sleep(0.05)
        self.assertEqual([r.interaction_id for r in got], ["q2"])

    async def test_a_cancelled_form_as_the_service_sends_it_reaches_the_manager(self):
        # The service sends a form's Cancel as the free_text answer None (AI-Parrot's form
        # responses must be dicts); the channel hands it on unchanged.
        got = []

        async def handler(response):
            got.append(response)

        c = self.channel()
        form = HumanInteraction(interaction_type=InteractionType.FORM, question="Edit?",
                                form_schema={"fields": {"a": {}}}, timeout=30)
        self.assertTrue(await c.send_interaction(form, "alice"))
        cancel = dict(response_for(form.interaction_id), response_type="free_text", value=None)
        self.stub.event_batches = [[(1, "response", {"response": cancel})]]
        await c.register_response_handler(handler)
        await c.start()
        for _ in range(100):
            if got:
                break
            await asyncio.sleep(0.05)
        self.assertEqual([(r.response_type.value, r.value) for r in got], [("free_text", None)])

    async def test_by_default_only_answers_to_its_own_questions_are_handed_on(self):
        got = []

        async def handler(response):
            got.append(response)

        c = self.channel()
        mine = approval()
        self.assertTrue(await c.send_interaction(mine, "alice"))
        self.stub.event_batches = [[
            (1, "response", {"response": response_for("someone-elses")}),
            (2, "response", {"response": response_for(mine.interaction_id)}),
        ]]
        await c.register_response_handler(handler)
        await c.start()
        for _ in range(100):
            if c.last_event_id == "2":
                break
            await asyncio.sleep(0.05)
        self.assertEqual([r.interaction_id for r in got], [mine.interaction_id])

    async def test_cancelled_by_the_service_calls_the_cancel_handler_unless_we_withdrew(self):
        cancelled = []

        async def on_cancel(iid, reason):
            cancelled.append((iid, reason))
            return True

        c = self.channel()
        await c.register_cancel_handler(on_cancel)
        a, b = approval("A?"), approval("B?")
        self.assertTrue(await c.send_interaction(a, "alice"))
        self.assertTrue(await c.send_interaction(b, "alice"))
        await c.cancel_interaction(b.interaction_id, "alice")
        self.stub.event_batches = [[
            (1, "status", {"interaction_id": a.interaction_id, "status": "cancelled",
                           "reason": "Forbidden: bot was blocked by the user"}),
            (2, "status", {"interaction_id": b.interaction_id, "status": "cancelled",
                           "reason": "withdrawn"}),
            (3, "status", {"interaction_id": None, "status": "cancelled"}),
        ]]
        await c.start()
        for _ in range(60):
            if c.last_event_id == "3":
                break
            await asyncio.sleep(0.05)
        self.assertEqual(cancelled, [(a.interaction_id,
                                      "hitl_telegram:Forbidden: bot was blocked by the user")])


async def _redis_up():
    try:
        import redis.asyncio as aioredis

        r = aioredis.from_url(REDIS_URL)
        await asyncio.wait_for(r.ping(), 2)
        await r.aclose()
        return True
    except Exception:  # noqa: BLE001
        return False


class Tool:
    name = "deploy"
    args_schema = None

    def __init__(self):
        self.routing_meta = {"requires_confirmation": True}


class GuardTest(ServiceTestCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        if not await _redis_up():
            self.skipTest(f"Redis at {REDIS_URL} is not reachable")

    async def test_a_refused_question_is_cancelled_at_once(self):
        self.stub.create_status = 403
        guard = await make_confirmation_guard(
            self.base, TOKEN, route="nope", redis_url=REDIS_URL,
            config=ConfirmationConfig(approval_timeout=20),
        )
        try:
            t0 = time.monotonic()
            d = await guard.confirm(tool=Tool(), parameters={"a": 1})
            self.assertEqual(d.status, "cancelled")
            self.assertLess(time.monotonic() - t0, 5)
        finally:
            await close_confirmation_guard(guard)

    async def test_an_approval_from_the_stream_confirms(self):
        guard = await make_confirmation_guard(
            self.base, TOKEN, default_recipient="alice", redis_url=REDIS_URL,
            config=ConfirmationConfig(approval_timeout=20),
        )
        channel = guard.human_manager.channels["telegram"]
        try:
            task = asyncio.create_task(guard.confirm(tool=Tool(), parameters={"a": 1}))
            for _ in range(100):
                if any(m == "POST" for m, _, _ in self.stub.requests):
                    break
                await asyncio.sleep(0.05)
            body = [b for m, p, b in self.stub.requests if m == "POST"][0]
            self.assertEqual(body["recipient"], "alice")
            self.assertEqual(body["interaction"]["target_humans"], [])
            iid = body["interaction"]["interaction_id"]
            # The answer, as the listener would hand it on.
            await channel._handle("response", json.dumps({"response": response_for(iid)}))
            d = await asyncio.wait_for(task, 5)
            self.assertEqual((d.status, d.parameters), ("confirmed", {"a": 1}))
        finally:
            await close_confirmation_guard(guard)


if __name__ == "__main__":
    unittest.main()
