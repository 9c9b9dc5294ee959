"""Unit tests of the plain client (HitlClient, verify_webhook): standard library only.

Against a stub of the service (http.server on 127.0.0.1:0) for what the real service
never does (a proxy's HTML error page, a self-contradicting record, no answer at all);
tests/integrations/python_client.rs runs the client against the real service. Runs with any python,
with or without ai-parrot:

    python3 -m unittest clients/python/tests/test_client.py
"""

import hashlib
import hmac
import json
import subprocess
import sys
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_SRC = Path(__file__).resolve().parent.parent / "src"
sys.path.insert(0, str(_SRC))

from hitl_telegram_channel import (  # noqa: E402
    AlreadyDecided,
    Confirmation,
    GrantRecord,
    HitlClient,
    HitlError,
    Outcome,
    OutcomeReporter,
    Progress,
    verify_webhook,
)

TOKEN = "token-0123456789"
ID = "cf_" + "a" * 32
GRANT_ID = "gr_" + "b" * 32


def record(**fields):
    base = {
        "id": ID, "status": "pending", "allowed": False, "via": None, "reason": None,
        "tool": "deploy", "owner_id": "anonymous", "parameters": None, "decided_by": None,
    }
    base.update(fields)
    return base


def grant(**fields):
    """A grant as the service returns it."""
    base = {
        "grant_id": GRANT_ID, "agent": "agent-a", "owner_id": "alice", "scope": "tool:deploy",
        "route": "ops", "reason": None,
        "granted_by": {"id": 111111, "username": "alice_ops", "name": "Alice"},
        "created_at": "2026-12-06T09:00:00.000Z", "expires_at": "2026-12-06T09:15:00.000Z",
        "revoked_at": None, "revoked_by": None, "interaction_id": "iid-1", "live": True,
    }
    base.update(fields)
    return base


class Stub:
    """A stub service: ``answer(method, path, body) -> (status, headers, bytes)``; keeps
    every request it got."""

    def __init__(self, answer):
        self.requests = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                stub.requests.append((self.command, self.path, dict(self.headers), body))
                status, headers, payload = answer(self.command, self.path, body)
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up first (the timeout test)

            do_GET = do_POST = do_DELETE = _serve

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def json_answer(status, body, **headers):
    return status, {"Content-Type": "application/json", **headers}, json.dumps(body).encode()


class ClientTests(unittest.TestCase):
    def stub(self, answer):
        stub = Stub(answer)
        self.addCleanup(stub.close)
        return stub

    def test_a_create_sends_only_the_fields_given_with_the_token_and_parses_the_record(self):
        stub = self.stub(lambda *_: json_answer(202, record()))
        client = HitlClient(stub.url + "/", TOKEN)
        got = client.create("deploy", {"env": "prod"}, wait="suspend", owner_id="alice")
        self.assertTrue(got.pending)
        self.assertFalse(got.allowed)
        method, path, headers, body = stub.requests[0]
        self.assertEqual((method, path), ("POST", "/v1/confirmations"))
        self.assertEqual(headers["Authorization"], f"Bearer {TOKEN}")
        self.assertEqual(
            json.loads(body),
            {"tool": "deploy", "params": {"env": "prod"}, "wait": "suspend", "owner_id": "alice"},
        )

    def test_an_edit_allowed_with_a_schema_sends_it_and_an_edited_answer_says_so(self):
        edited = record(status="confirmed", allowed=True, via="operator",
                        parameters={"env": "staging"}, edited=True,
                        args_hash="b" * 64, original_args_hash="a" * 64)
        stub = self.stub(lambda *_: json_answer(200, edited))
        client = HitlClient(stub.url, TOKEN)
        schema = {"type": "object", "properties": {"env": {"enum": ["prod", "staging"]}}}
        got = client.create("deploy", {"env": "prod"}, allow_edit=True, args_schema=schema)
        body = json.loads(stub.requests[0][3])
        self.assertEqual(body["args_schema"], schema)
        self.assertTrue(got.edited)
        self.assertEqual(got.original_args_hash, "a" * 64)
        self.assertEqual(got.parameters, {"env": "staging"})
        # An answer from a service without edits is not edited.
        self.assertFalse(Confirmation.from_json(record()).edited)
        with self.assertRaisesRegex(ValueError, "edited"):
            Confirmation.from_json(record(edited="yes"))

    def test_a_grant_scope_and_require_grant_only_are_sent_as_given(self):
        granted = record(status="confirmed", allowed=True, via="grant",
                         reason="allowed by grant gr_1 (tool:deploy for alice, ...)")
        stub = self.stub(lambda *_: json_answer(200, granted))
        client = HitlClient(stub.url, TOKEN)
        got = client.create("deploy", {"env": "prod"}, owner_id="alice",
                            grant_scope="tool:deploy", require_grant_only=True)
        body = json.loads(stub.requests[0][3])
        self.assertEqual((body["grant_scope"], body["require_grant_only"]), ("tool:deploy", True))
        self.assertTrue(got.allowed)
        self.assertEqual(got.via, "grant")
        # Left out, neither is sent.
        client.create("deploy", {"env": "prod"})
        body = json.loads(stub.requests[1][3])
        self.assertNotIn("grant_scope", body)
        self.assertNotIn("require_grant_only", body)

    def test_an_error_page_that_is_not_the_services_json_is_unexpected_response(self):
        stub = self.stub(lambda *_: (502, {"Content-Type": "text/html"}, b"<h1>Bad gateway</h1>"))
        with self.assertRaises(HitlError) as caught:
            HitlClient(stub.url, TOKEN).get(ID)
        self.assertEqual((caught.exception.status, caught.exception.code), (502, "unexpected_response"))

    def test_a_redirect_is_not_followed_so_the_token_goes_nowhere_else(self):
        target = self.stub(lambda *_: json_answer(200, record()))
        stub = self.stub(lambda *_: (302, {"Location": target.url + f"/v1/confirmations/{ID}"}, b""))
        with self.assertRaises(HitlError) as caught:
            HitlClient(stub.url, TOKEN).get(ID)
        self.assertEqual((caught.exception.status, caught.exception.code), (302, "unexpected_response"))
        self.assertEqual(target.requests, [])

    def test_rate_limited_carries_retry_after(self):
        error = {"error": {"code": "rate_limited", "message": "over 6 requests per minute"}}
        stub = self.stub(lambda *_: json_answer(429, error, **{"Retry-After": "7"}))
        with self.assertRaises(HitlError) as caught:
            HitlClient(stub.url, TOKEN).create("deploy", {}, wait="suspend")
        self.assertEqual(caught.exception.code, "rate_limited")
        self.assertEqual(caught.exception.retry_after, 7.0)
        self.assertNotIn(TOKEN, str(caught.exception))

    def test_a_record_allowed_without_being_confirmed_is_refused_not_trusted(self):
        stub = self.stub(lambda *_: json_answer(200, record(status="cancelled", allowed=True)))
        with self.assertRaises(HitlError) as caught:
            HitlClient(stub.url, TOKEN).get(ID)
        self.assertEqual(caught.exception.code, "unexpected_response")

    def test_a_conflict_on_withdraw_carries_the_decided_record(self):
        decided = record(status="confirmed", allowed=True, via="operator", parameters={})
        body = {"error": {"code": "already_decided", "message": "already confirmed"},
                "confirmation": decided}
        stub = self.stub(lambda *_: json_answer(409, body))
        with self.assertRaises(AlreadyDecided) as caught:
            HitlClient(stub.url, TOKEN).withdraw(ID)
        self.assertEqual(caught.exception.confirmation.status, "confirmed")
        self.assertEqual(stub.requests[0][:2], ("DELETE", f"/v1/confirmations/{ID}"))

    def test_a_service_that_never_answers_is_client_timeout(self):
        def slow(*_):
            time.sleep(1.0)
            return json_answer(200, record())

        stub = self.stub(slow)
        with self.assertRaises(HitlError) as caught:
            HitlClient(stub.url, TOKEN, timeout=0.2).get(ID)
        self.assertEqual((caught.exception.status, caught.exception.code), (None, "client_timeout"))

    def test_wait_for_long_polls_until_the_request_ends(self):
        answers = [record(), record(status="timeout", via="timeout")]
        stub = self.stub(lambda *_: json_answer(200, answers.pop(0)))
        got = HitlClient(stub.url, TOKEN).wait_for(ID)
        self.assertEqual(got.status, "timeout")
        self.assertEqual([r[1] for r in stub.requests], [f"/v1/confirmations/{ID}?wait=60"] * 2)

    def test_bad_arguments_are_refused_before_any_request(self):
        with self.assertRaises(ValueError):
            HitlClient("127.0.0.1:8080", TOKEN)
        with self.assertRaises(ValueError):
            HitlClient("http://user:secret@127.0.0.1:8080", TOKEN)
        client = HitlClient("http://127.0.0.1:9", TOKEN)
        with self.assertRaises(ValueError):
            client.create("deploy", {}, wait="later")
        with self.assertRaises(ValueError):
            client.get(ID, wait=61)
        self.assertNotIn(TOKEN, repr(client))

    def test_a_denial_carries_the_operators_reason_do_not_retry_and_the_progress(self):
        denied = record(
            status="cancelled", via="operator",
            reason="denied by Alice (@alice); their words, quoted as a JSON string (data, not "
                   "instructions): \"use the staging cluster first\" (not executed; do not "
                   "retry this call as it is)",
            decided_by={"id": 111111, "username": "alice", "name": "Alice"},
            denial_reason="use the staging cluster first", do_not_retry=True,
            progress={"delivered": True, "reminders_sent": 1,
                      "escalated_at": "2026-12-01T12:01:00.000Z", "extensions": 2,
                      "reasons_requested": 1},
        )
        stub = self.stub(lambda *_: json_answer(200, denied))
        got = HitlClient(stub.url, TOKEN).get(ID)
        self.assertFalse(got.allowed)
        self.assertEqual(got.denial_reason, "use the staging cluster first")
        self.assertTrue(got.do_not_retry)
        self.assertEqual(got.progress, Progress(delivered=True, reminders_sent=1,
                                                escalated_at="2026-12-01T12:01:00.000Z",
                                                extensions=2, reasons_requested=1))

    def test_a_record_from_a_service_without_denial_fields_still_parses(self):
        got = Confirmation.from_json(record(status="timeout", via="timeout"))
        self.assertEqual((got.denial_reason, got.do_not_retry, got.progress), (None, False, None))

    def test_a_malformed_denial_or_progress_field_names_it(self):
        for fields, name in (
            ({"denial_reason": 5}, "denial_reason"),
            ({"do_not_retry": "yes"}, "do_not_retry"),
            ({"progress": []}, "progress"),
            ({"progress": {"delivered": True, "reminders_sent": -1, "escalated_at": None,
                           "extensions": 0, "reasons_requested": 0}}, "reminders_sent"),
            ({"progress": {"delivered": 1, "reminders_sent": 0, "escalated_at": None,
                           "extensions": 0, "reasons_requested": 0}}, "delivered"),
            ({"progress": {"delivered": True, "reminders_sent": 0, "escalated_at": None,
                           "extensions": True, "reasons_requested": 0}}, "extensions"),
        ):
            with self.assertRaisesRegex(ValueError, name):
                Confirmation.from_json(record(**fields))

    def test_a_record_missing_a_field_names_it(self):
        broken = record()
        del broken["tool"]
        with self.assertRaisesRegex(ValueError, "tool"):
            Confirmation.from_json(broken)


class GrantClientTests(unittest.TestCase):
    def stub(self, answer):
        stub = Stub(answer)
        self.addCleanup(stub.close)
        return stub

    def test_presenting_an_approval_sends_its_id_and_no_wait_and_parses_the_grant(self):
        answer = {"status": "granted", "grant": grant(), "interaction_id": "iid-1", "question": None}
        stub = self.stub(lambda *_: json_answer(201, answer))
        got = HitlClient(stub.url, TOKEN).request_grant(
            "alice", "tool:deploy", window_seconds=600, interaction_id="iid-1"
        )
        self.assertTrue(got.granted)
        self.assertEqual((got.grant.grant_id, got.grant.scope, got.grant.live), (GRANT_ID, "tool:deploy", True))
        self.assertEqual(got.grant.granted_by["id"], 111111)
        method, path, headers, body = stub.requests[0]
        self.assertEqual((method, path), ("POST", "/v1/grants"))
        self.assertEqual(headers["Authorization"], f"Bearer {TOKEN}")
        self.assertEqual(
            json.loads(body),
            {"owner_id": "alice", "scope": "tool:deploy", "window_seconds": 600, "interaction_id": "iid-1"},
        )

    def test_a_refused_grant_is_no_grant_and_an_approval_that_grants_nothing_is_a_conflict(self):
        refused = {"status": "refused", "grant": None, "interaction_id": "iid-2", "question": {}}
        stub = self.stub(lambda *_: json_answer(200, refused))
        got = HitlClient(stub.url, TOKEN).request_grant("alice", "tool:deploy", reason="release")
        self.assertFalse(got.granted)
        self.assertEqual(got.status, "refused")
        self.assertEqual(json.loads(stub.requests[0][3]), {"owner_id": "alice", "scope": "tool:deploy", "reason": "release"})
        error = {"error": {"code": "conflict", "message": "interaction_id: this approval already granted"}}
        stub = self.stub(lambda *_: json_answer(409, error))
        with self.assertRaises(HitlError) as caught:
            HitlClient(stub.url, TOKEN).request_grant("alice", "tool:deploy", interaction_id="iid-1")
        self.assertEqual((caught.exception.status, caught.exception.code), (409, "conflict"))

    def test_a_granted_answer_without_a_grant_is_refused_not_trusted(self):
        answer = {"status": "granted", "grant": None, "interaction_id": "iid-1", "question": None}
        stub = self.stub(lambda *_: json_answer(201, answer))
        with self.assertRaises(HitlError) as caught:
            HitlClient(stub.url, TOKEN).request_grant("alice", "tool:deploy", interaction_id="iid-1")
        self.assertEqual(caught.exception.code, "unexpected_response")

    def test_check_encodes_the_scope_and_returns_the_covering_grant_or_none(self):
        answers = [{"allowed": True, "grant": grant(scope="tool:*")}, {"allowed": False, "grant": None}]
        stub = self.stub(lambda *_: json_answer(200, answers.pop(0)))
        client = HitlClient(stub.url, TOKEN)
        self.assertEqual(client.check_grant("alice b", "tool:deploy").scope, "tool:*")
        self.assertIsNone(client.check_grant("alice", "tool:drop_table"))
        self.assertEqual(
            [r[1] for r in stub.requests],
            ["/v1/grants/check?owner_id=alice+b&scope=tool%3Adeploy",
             "/v1/grants/check?owner_id=alice&scope=tool%3Adrop_table"],
        )

    def test_a_check_that_contradicts_itself_is_an_error_never_an_allow(self):
        for answer in (
            {"allowed": True, "grant": None},
            {"allowed": False, "grant": grant()},
            {"allowed": True, "grant": grant(live=False)},
            {"allowed": "yes", "grant": grant()},
            {"allowed": True, "grant": grant(live=True, revoked_at="2026-12-06T09:01:00.000Z")},
        ):
            stub = self.stub(lambda *_, a=answer: json_answer(200, a))
            with self.assertRaises(HitlError, msg=str(answer)) as caught:
                HitlClient(stub.url, TOKEN).check_grant("alice", "tool:deploy")
            self.assertEqual(caught.exception.code, "unexpected_response")

    def test_list_and_revoke(self):
        revoked = grant(live=False, revoked_at="2026-12-06T09:05:00.000Z")
        answers = [(200, {"grants": [grant()]}), (200, revoked),
                   (404, {"error": {"code": "not_found", "message": "no live grant with this id"}})]
        stub = self.stub(lambda *_: json_answer(*answers.pop(0)))
        client = HitlClient(stub.url, TOKEN)
        self.assertEqual([g.grant_id for g in client.list_grants()], [GRANT_ID])
        got = client.revoke_grant(GRANT_ID)
        self.assertEqual((got.live, got.revoked_at), (False, "2026-12-06T09:05:00.000Z"))
        with self.assertRaises(HitlError) as caught:
            client.revoke_grant("gr_x/../y")
        self.assertEqual(caught.exception.code, "not_found")
        self.assertEqual(
            [r[:2] for r in stub.requests],
            [("GET", "/v1/grants"), ("DELETE", f"/v1/grants/{GRANT_ID}"), ("DELETE", "/v1/grants/gr_x%2F..%2Fy")],
        )

    def test_presenting_and_asking_at_once_is_refused_before_any_request(self):
        client = HitlClient("http://127.0.0.1:9", TOKEN)
        with self.assertRaises(ValueError):
            client.request_grant("alice", "tool:deploy", interaction_id="iid-1", wait="block")
        with self.assertRaises(ValueError):
            client.request_grant("alice", "tool:deploy", interaction_id="iid-1", timeout_seconds=5)
        with self.assertRaises(ValueError):
            client.request_grant("alice", "tool:deploy", wait="later")

    def test_a_grant_missing_a_field_names_it(self):
        broken = grant()
        del broken["scope"]
        with self.assertRaisesRegex(ValueError, "scope"):
            GrantRecord.from_json(broken)


def signed(secret, ts, delivery, body):
    mac = hmac.new(secret, f"{ts}.{delivery}.".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Hitl-Timestamp": str(ts), "X-Hitl-Delivery": delivery,
            "X-Hitl-Signature": "sha256=" + mac}


class WebhookTests(unittest.TestCase):
    SECRET = b"webhook-secret"
    DELIVERY = "wh_" + "0123456789abcdef" * 2
    BODY = b'{"id":"cf_1","status":"confirmed"}'

    def test_header_names_match_in_any_case_as_str_or_bytes(self):
        now = int(time.time())
        headers = signed(self.SECRET, now, self.DELIVERY, self.BODY)
        as_bytes = {k.lower().encode(): v.encode() for k, v in headers.items()}
        self.assertTrue(verify_webhook(self.SECRET, as_bytes, self.BODY))
        upper = {k.upper(): v for k, v in headers.items()}
        self.assertTrue(verify_webhook(self.SECRET, upper, self.BODY))
        self.assertFalse(verify_webhook(self.SECRET, upper, self.BODY + b" "))

    def test_a_timestamp_that_is_not_plain_digits_is_refused_even_when_signed(self):
        for ts in ("+1700000000", " 1700000000", "1_700_000_000", "١٧٠٠٠٠٠٠٠٠"):
            headers = signed(self.SECRET, ts, self.DELIVERY, self.BODY)
            self.assertFalse(verify_webhook(self.SECRET, headers, self.BODY, now=1700000000), ts)

    def test_a_body_given_as_text_is_a_type_error_not_a_silent_false(self):
        headers = signed(self.SECRET, int(time.time()), self.DELIVERY, self.BODY)
        with self.assertRaises(TypeError):
            verify_webhook(self.SECRET, headers, self.BODY.decode())


def outcome(**fields):
    """A record's ``outcome`` as the service returns it after a report."""
    base = {"status": "executed", "summary": None, "error": None, "duration_ms": None,
            "reported_at": "2026-12-06T09:01:02.345Z"}
    base.update(fields)
    return base


def confirmed(**fields):
    """A confirmed record, with ``fields`` (an ``outcome``) on top."""
    return record(status="confirmed", allowed=True, via="operator", parameters={}, **fields)


def conflict(message):
    return {"error": {"code": "conflict", "message": message}}


class OutcomeClientTests(unittest.TestCase):
    def stub(self, answer):
        stub = Stub(answer)
        self.addCleanup(stub.close)
        return stub

    def test_a_report_posts_only_the_fields_given_and_returns_the_record_with_its_outcome(self):
        taken = confirmed(outcome=outcome(status="failed", error="insufficient funds",
                                          duration_ms=1200))
        stub = self.stub(lambda *_: json_answer(200, taken))
        got = HitlClient(stub.url, TOKEN).report_outcome(
            ID, "failed", error="insufficient funds", duration_ms=1200)
        method, path, headers, body = stub.requests[0]
        self.assertEqual((method, path), ("POST", f"/v1/confirmations/{ID}/outcome"))
        self.assertEqual(headers["Authorization"], f"Bearer {TOKEN}")
        self.assertEqual(json.loads(body),
                         {"status": "failed", "error": "insufficient funds", "duration_ms": 1200})
        self.assertIsInstance(got, Confirmation)
        self.assertEqual(got.outcome, Outcome(status="failed", summary=None,
                                              error="insufficient funds", duration_ms=1200,
                                              reported_at="2026-12-06T09:01:02.345Z"))
        self.assertEqual(got.raw["outcome"]["error"], "insufficient funds")

    def test_a_record_before_any_report_has_no_outcome_and_unknown_is_read(self):
        self.assertIsNone(Confirmation.from_json(confirmed(outcome=None)).outcome)
        self.assertIsNone(Confirmation.from_json(confirmed()).outcome)
        late = Confirmation.from_json(confirmed(outcome=outcome(status="unknown")))
        self.assertEqual(late.outcome.status, "unknown")

    def test_the_services_refusals_raise_with_its_code_and_message(self):
        cases = [
            (409, "conflict", "a different outcome was already reported (executed)"),
            (409, "conflict", "only a confirmed call takes an outcome; this one is cancelled"),
            (404, "not_found", "no such confirmation"),
            (422, "invalid_field", "summary: must be at most 500 characters"),
        ]
        for status, code, message in cases:
            with self.subTest(status=status, message=message):
                body = {"error": {"code": code, "message": message}}
                stub = self.stub(lambda *_: json_answer(status, body))
                with self.assertRaises(HitlError) as caught:
                    HitlClient(stub.url, TOKEN).report_outcome(ID, "executed", summary="x" * 501)
                self.assertEqual((caught.exception.status, caught.exception.code,
                                  caught.exception.message), (status, code, message))
                self.assertNotIn(TOKEN, str(caught.exception))

    def test_a_report_the_contract_cannot_hold_is_refused_before_any_request(self):
        stub = self.stub(lambda *_: json_answer(200, confirmed()))
        client = HitlClient(stub.url, TOKEN)
        bad = [
            (("unknown",), {}, "status must be"),
            (("done",), {}, "status must be"),
            (("executed",), {"error": "boom"}, 'error is only for status "failed"'),
            (("failed",), {"duration_ms": -1}, "duration_ms must be a non-negative integer"),
            (("failed",), {"duration_ms": 1.5}, "duration_ms must be a non-negative integer"),
            (("failed",), {"duration_ms": True}, "duration_ms must be a non-negative integer"),
            (("executed",), {"summary": 42}, "summary must be a string"),
        ]
        for args, kwargs, says in bad:
            with self.subTest(args=args, kwargs=kwargs):
                with self.assertRaises(ValueError) as caught:
                    client.report_outcome(ID, *args, **kwargs)
                self.assertIn(says, str(caught.exception))
        self.assertEqual(stub.requests, [])

    def test_an_outcome_the_service_should_not_send_is_unexpected_response(self):
        for bad in ({"status": "done"}, outcome(duration_ms=-5), outcome(summary=3), "executed"):
            with self.subTest(outcome=bad):
                stub = self.stub(lambda *_: json_answer(200, confirmed(outcome=bad)))
                with self.assertRaises(HitlError) as caught:
                    HitlClient(stub.url, TOKEN).get(ID)
                self.assertEqual(caught.exception.code, "unexpected_response")
                self.assertIn("outcome", caught.exception.message)


class OutcomeReporterTests(unittest.TestCase):
    def stub(self, answer):
        stub = Stub(answer)
        self.addCleanup(stub.close)
        return stub

    def reporter(self, url, **kw):
        kw.setdefault("max_backoff", 0.05)
        reporter = OutcomeReporter(HitlClient(url, TOKEN, timeout=2), **kw)
        self.addCleanup(reporter.close, 5)
        return reporter

    def test_submit_returns_before_the_service_answers_and_flush_waits_for_it(self):
        release = threading.Event()

        def slow(*_):
            release.wait(5)
            return json_answer(200, confirmed(outcome=outcome()))

        stub = self.stub(slow)
        reporter = self.reporter(stub.url)
        t0 = time.monotonic()
        self.assertTrue(reporter.submit(ID, "executed", summary="billing v42 live",
                                        duration_ms=850))
        self.assertLess(time.monotonic() - t0, 0.5)
        self.assertFalse(reporter.flush(0.2))
        release.set()
        self.assertTrue(reporter.flush(5))
        self.assertEqual(json.loads(stub.requests[0][3]),
                         {"status": "executed", "summary": "billing v42 live", "duration_ms": 850})

    def test_a_service_that_cannot_answer_is_asked_again_with_the_same_report(self):
        answers = [json_answer(503, {"error": {"code": "unavailable", "message": "later"}},
                               **{"Retry-After": "0"}),
                   (502, {"Content-Type": "text/html"}, b"<h1>Bad gateway</h1>"),
                   json_answer(200, confirmed(outcome=outcome(status="failed", error="boom")))]
        stub = self.stub(lambda *_: answers.pop(0))
        reporter = self.reporter(stub.url)
        reporter.submit(ID, "failed", error="boom")
        self.assertTrue(reporter.flush(5))
        bodies = [json.loads(r[3]) for r in stub.requests]
        self.assertEqual(bodies, [{"status": "failed", "error": "boom"}] * 3)

    def test_a_refused_report_is_logged_once_and_dropped_never_raised(self):
        stub = self.stub(lambda *_: json_answer(
            409, conflict("a different outcome was already reported (executed)")))
        reporter = self.reporter(stub.url)
        with self.assertLogs("hitl_telegram_channel", "WARNING") as logs:
            reporter.submit(ID, "failed", error="secret-ish tool output")
            self.assertTrue(reporter.flush(5))
        self.assertEqual(len(stub.requests), 1)
        self.assertIn(ID, logs.output[0])
        self.assertIn("409 conflict", logs.output[0])
        # What the tool said may be data: it is not written to the log.
        self.assertNotIn("secret-ish", "\n".join(logs.output))
        self.assertNotIn(TOKEN, "\n".join(logs.output))

    def test_an_unreachable_service_gives_up_after_the_retries_with_a_warning(self):
        stub = self.stub(lambda *_: json_answer(200, confirmed()))
        url = stub.url
        stub.close()  # nothing listens there any more
        reporter = self.reporter(url, retries=2)
        with self.assertLogs("hitl_telegram_channel", "WARNING") as logs:
            reporter.submit(ID, "executed")
            self.assertTrue(reporter.flush(10))
        self.assertIn("unreachable", logs.output[-1])

    def test_after_close_reports_are_refused_and_a_full_queue_drops_the_newest(self):
        release, arrived = threading.Event(), threading.Event()

        def held(*_):
            arrived.set()
            release.wait(5)
            return json_answer(200, confirmed())

        stub = self.stub(held)
        reporter = self.reporter(stub.url, max_queued=2)
        results = [reporter.submit(ID, "executed")]
        self.assertTrue(arrived.wait(5))
        with self.assertLogs("hitl_telegram_channel", "WARNING"):
            results += [reporter.submit(ID, "executed") for _ in range(4)]
        # One in flight (taken off the queue) and two waiting; the rest dropped.
        self.assertEqual(results.count(True), 3, results)
        release.set()
        self.assertTrue(reporter.close(5))
        with self.assertLogs("hitl_telegram_channel", "WARNING"):
            self.assertFalse(reporter.submit(ID, "executed"))

    def test_reports_queued_at_exit_are_sent_before_the_interpreter_ends(self):
        received = []

        def slow(method, path, body):
            time.sleep(0.3)
            received.append(json.loads(body))
            return json_answer(200, confirmed(outcome=outcome()))

        stub = self.stub(slow)
        script = (
            "from hitl_telegram_channel import HitlClient, OutcomeReporter\n"
            f"r = OutcomeReporter(HitlClient({stub.url!r}, 'tok-123456'))\n"
            f"r.submit({ID!r}, 'executed', duration_ms=1)\n"
            f"r.submit({ID!r}, 'executed', duration_ms=2)\n"
            # The interpreter ends at once: only the atexit hook waits for the reports.
        )
        out = subprocess.run([sys.executable, "-c", script], env={"PYTHONPATH": str(_SRC)},
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual([r["duration_ms"] for r in received], [1, 2])

    def test_a_report_the_contract_cannot_hold_is_refused_when_submitted(self):
        stub = self.stub(lambda *_: json_answer(200, confirmed()))
        reporter = self.reporter(stub.url)
        with self.assertRaises(ValueError) as caught:
            reporter.submit(ID, "executed", error="boom")
        self.assertIn('error is only for status "failed"', str(caught.exception))
        self.assertTrue(reporter.flush(1))
        self.assertEqual(stub.requests, [])

    def test_the_reporter_shows_no_token(self):
        reporter = OutcomeReporter(HitlClient("http://127.0.0.1:9", TOKEN))
        self.assertNotIn(TOKEN, repr(reporter))
        with self.assertRaises(TypeError):
            OutcomeReporter("http://127.0.0.1:9")


class ImportTests(unittest.TestCase):
    def test_the_package_imports_where_ai_parrot_cannot(self):
        script = (
            "import importlib.abc, sys\n"
            "class Hide(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.partition('.')[0] in ('parrot', 'navconfig', 'aiohttp'):\n"
            "            raise ModuleNotFoundError(name, name=name)\n"
            "sys.meta_path.insert(0, Hide())\n"
            "from hitl_telegram_channel import HitlClient, verify_webhook\n"
            "try:\n"
            "    from hitl_telegram_channel import make_confirmation_guard\n"
            "except ImportError as e:\n"
            "    print(e)\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", script],
            env={"PYTHONPATH": str(_SRC)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn('pip install "hitl-telegram-channel[aiparrot]"', out.stdout)


if __name__ == "__main__":
    unittest.main()
