"""Unit tests of HitlGrantStore (AI-Parrot's GrantStore backed by /v1/grants), against
the same stub of the service as test_client.py, and with AI-Parrot's real GrantGuard in
front of it. Needs ai-parrot (the python .ci/run builds):

    .ci/.venv-parrot/bin/python -m unittest discover -s clients/python/tests

tests/integrations/aiparrot_grants_e2e.rs runs the store against the real service.
"""

import asyncio
import json
import sys
import unittest
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent / "src"))
sys.path.insert(0, str(_HERE))

import aiparrot_site  # noqa: E402

aiparrot_site.enter()

from parrot.auth.grants import Grant, GrantGuard, InMemoryGrantStore  # noqa: E402
from parrot.human.models import HumanInteraction, InteractionType  # noqa: E402

from hitl_telegram_channel import HitlClient, HitlError  # noqa: E402
from hitl_telegram_channel.aiparrot import HitlGrantStore  # noqa: E402
from hitl_telegram_channel.grant_terms import GrantTerms, grant_guard_terms, shown_window  # noqa: E402
from test_client import GRANT_ID, TOKEN, Stub, grant, json_answer  # noqa: E402

CONFLICT = {"error": {"code": "conflict", "message": "interaction_id: this approval already granted"}}


def granted(**fields):
    return {"status": "granted", "grant": grant(**fields), "interaction_id": "iid-1", "question": None}


class StoreTests(unittest.TestCase):
    def store(self, answer):
        stub = Stub(answer)
        self.addCleanup(stub.close)
        return stub, HitlGrantStore(HitlClient(stub.url, TOKEN, timeout=5))

    def test_grant_presents_the_guards_approval_and_returns_ai_parrots_grant(self):
        stub, store = self.store(lambda *_: json_answer(201, granted()))
        got = asyncio.run(store.grant("alice", "tool:deploy", granted_by="iid-1", window_seconds=600))
        self.assertIsInstance(got, Grant)
        self.assertEqual(
            (got.grant_id, got.owner_id, got.scope, got.granted_by, got.revoked),
            (GRANT_ID, "alice", "tool:deploy", "111111", False),
        )
        self.assertEqual(got.created_at, datetime(2026, 12, 6, 9, 0, tzinfo=timezone.utc))
        self.assertEqual(got.expires_at, datetime(2026, 12, 6, 9, 15, tzinfo=timezone.utc))
        self.assertTrue(got.is_active(datetime(2026, 12, 6, 9, 14, tzinfo=timezone.utc)))
        self.assertFalse(got.is_active(datetime(2026, 12, 6, 9, 15, tzinfo=timezone.utc)))
        method, path, _, body = stub.requests[0]
        self.assertEqual((method, path), ("POST", "/v1/grants"))
        self.assertEqual(
            json.loads(body),
            {"owner_id": "alice", "scope": "tool:deploy", "window_seconds": 600, "interaction_id": "iid-1"},
        )

    def test_grant_raises_when_the_service_stores_nothing(self):
        _, store = self.store(lambda *_: json_answer(409, CONFLICT))
        with self.assertRaises(HitlError) as caught:
            asyncio.run(store.grant("alice", "tool:deploy", granted_by="iid-1", window_seconds=600))
        self.assertEqual(caught.exception.code, "conflict")

    def test_is_allowed_follows_the_check_and_fails_closed_on_any_error(self):
        _, store = self.store(lambda *_: json_answer(200, {"allowed": True, "grant": grant()}))
        self.assertTrue(asyncio.run(store.is_allowed("alice", "tool:deploy")))
        for answer in (
            lambda *_: json_answer(200, {"allowed": False, "grant": None}),
            lambda *_: json_answer(500, {"error": {"code": "internal", "message": "boom"}}),
            lambda *_: json_answer(503, {"error": {"code": "unavailable", "message": "db"}}),
            lambda *_: (200, {"Content-Type": "text/html"}, b"<h1>proxy</h1>"),
            lambda *_: json_answer(200, {"allowed": True, "grant": None}),
        ):
            _, store = self.store(answer)
            self.assertFalse(asyncio.run(store.is_allowed("alice", "tool:deploy")))
        dead = HitlGrantStore(HitlClient("http://127.0.0.1:9", TOKEN, timeout=2))
        self.assertFalse(asyncio.run(dead.is_allowed("alice", "tool:deploy")))

    def test_revoke_is_true_once_false_for_no_live_grant_and_raises_when_nothing_was_asked(self):
        not_found = {"error": {"code": "not_found", "message": "no live grant with this id"}}
        answers = [(200, grant(live=False, revoked_at="2026-12-06T09:05:00.000Z")), (404, not_found),
                   (503, {"error": {"code": "unavailable", "message": "db"}})]
        stub, store = self.store(lambda *_: json_answer(*answers.pop(0)))
        self.assertTrue(asyncio.run(store.revoke(GRANT_ID)))
        self.assertFalse(asyncio.run(store.revoke(GRANT_ID)))
        with self.assertRaises(HitlError):
            asyncio.run(store.revoke(GRANT_ID))
        self.assertEqual(stub.requests[0][:2], ("DELETE", f"/v1/grants/{GRANT_ID}"))

    def test_list_active_is_the_owners_live_grants(self):
        grants = [grant(), grant(grant_id="gr_" + "c" * 32, owner_id="bob")]
        _, store = self.store(lambda *_: json_answer(200, {"grants": grants}))
        got = asyncio.run(store.list_active("alice"))
        self.assertEqual([(g.grant_id, g.owner_id) for g in got], [(GRANT_ID, "alice")])


def tool(name="deploy", **meta):
    return SimpleNamespace(name=name, routing_meta={"requires_grant": True, **meta})


class Manager:
    """A human manager whose every approval question is answered ``value``."""

    def __init__(self, value=True):
        self.value = value
        self.asked = []

    async def request_human_input(self, interaction, channel=None):
        self.asked.append((interaction, channel))
        return SimpleNamespace(consolidated_value=self.value, interaction_id=interaction.interaction_id)


class GuardTests(unittest.TestCase):
    """AI-Parrot's own GrantGuard (1.2.4) in front of the store."""

    def test_a_yes_is_presented_to_the_service_and_a_stored_grant_lets_the_next_call_through(self):
        answers = [(200, {"allowed": False, "grant": None}), (201, granted()),
                   (200, {"allowed": True, "grant": grant()})]
        stub = Stub(lambda *_: json_answer(*answers.pop(0)))
        self.addCleanup(stub.close)
        manager = Manager()
        guard = GrantGuard(HitlGrantStore(HitlClient(stub.url, TOKEN)), human_manager=manager)
        first = asyncio.run(guard.authorize(tool=tool(grant_window_seconds=600), parameters={}))
        self.assertTrue(first.allowed, first.reason)
        self.assertEqual(first.grant.grant_id, GRANT_ID)
        asked = manager.asked[0][0]
        self.assertIn("Scope: tool:deploy\nOwner: anonymous", asked.question)
        self.assertEqual(
            json.loads(stub.requests[1][3]),
            {"owner_id": "anonymous", "scope": "tool:deploy", "window_seconds": 600,
             "interaction_id": str(asked.interaction_id)},
        )
        second = asyncio.run(guard.authorize(tool=tool(), parameters={}))
        self.assertTrue(second.allowed)
        self.assertEqual(len(manager.asked), 1, "asked again although a grant covers it")

    def test_a_yes_the_service_will_not_turn_into_a_grant_never_allows_the_call(self):
        answers = [(200, {"allowed": False, "grant": None}), (409, CONFLICT)]
        stub = Stub(lambda *_: json_answer(*answers.pop(0)))
        self.addCleanup(stub.close)
        guard = GrantGuard(HitlGrantStore(HitlClient(stub.url, TOKEN)), human_manager=Manager())
        # GrantGuard does not catch the store's error: ToolManager.execute_tool raises it,
        # and the tool does not run.
        with self.assertRaises(HitlError):
            asyncio.run(guard.authorize(tool=tool(), parameters={}))

    def test_a_service_out_of_reach_asks_instead_of_allowing(self):
        manager = Manager(value=False)
        guard = GrantGuard(HitlGrantStore(HitlClient("http://127.0.0.1:9", TOKEN, timeout=2)),
                           human_manager=manager)
        decision = asyncio.run(guard.authorize(tool=tool(), parameters={}))
        self.assertFalse(decision.allowed)
        self.assertEqual(len(manager.asked), 1)


class TermsTests(unittest.TestCase):
    """GrantGuard's question read as the terms it states, and nothing else."""

    def asked(self, **meta):
        """The approval question AI-Parrot's real GrantGuard asks for ``tool(**meta)``."""
        manager = Manager(value=False)
        guard = GrantGuard(InMemoryGrantStore(), human_manager=manager)
        alice = SimpleNamespace(user_id="alice", channel="telegram")
        asyncio.run(guard.authorize(tool=tool(**meta), parameters={}, permission_context=alice))
        return manager.asked[0][0]

    def test_the_window_is_the_one_grant_guard_shows_the_person(self):
        cases = {900: 900, 3600: 3600, 600: 600, 60: 60, 100: 102, 125: 126, 1: 1, 2: 1}
        self.assertEqual({w: shown_window(w) for w in cases}, cases)

    def test_grant_guards_own_question_gives_its_terms(self):
        self.assertEqual(grant_guard_terms(self.asked()), GrantTerms("tool:deploy", "alice", 900))
        wide = self.asked(grant_scope="tool:*", grant_window_seconds=100)
        self.assertEqual(grant_guard_terms(wide), GrantTerms("tool:*", "alice", 102))
        self.assertEqual(GrantTerms("tool:*", "alice", 102).body(),
                         {"scope": "tool:*", "owner_id": "alice", "window_seconds": 102})

    def test_any_other_question_gives_none(self):
        real = self.asked().question
        for question, kind in [
            (real, InteractionType.FREE_TEXT),
            (real + "\nScope: tool:*", InteractionType.APPROVAL),
            ("Read the Q3 report?\n" + real, InteractionType.APPROVAL),
            (real.replace("15.0 min", "15 min"), InteractionType.APPROVAL),
            ("Approve?\nScope: tool:*\nOwner: carol", InteractionType.APPROVAL),
        ]:
            i = HumanInteraction(interaction_type=kind, question=question, timeout=30)
            self.assertIsNone(grant_guard_terms(i), question)


if __name__ == "__main__":
    unittest.main()
