//! The plain Python client (`clients/python`, `hitl_telegram_channel.HitlClient` and
//! `verify_webhook`) against the real service and the fake Telegram, run by a python3
//! that cannot import AI-Parrot: a blocking approval, a suspended call decided while it
//! long-polls, a withdrawal and the errors an agent branches on, a real signed webhook
//! delivery checked (and its replays and tamperings refused), a grant presented with a
//! call, and the example of `clients/python/README.md` run as written.
//!
//! The scripts hide `parrot`, `navconfig` and `aiohttp` from Python's import system, so
//! they prove the client needs none of them even on a machine where they are installed.
//! Without python3 on `PATH` the tests say so and pass, as the other Python checks do.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::app::*;
use crate::support::grants::{approved_grant, gated};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Where the package's sources live: put on `PYTHONPATH`, nothing installed.
const CLIENT_SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/python/src");

/// Every script starts with this: AI-Parrot and its HTTP library made unimportable, the
/// package imported, a client for agent-a, and `say(**fields)` for one JSON stdout line.
const PRELUDE: &str = r#"
import importlib.abc, json, os, sys

class HideAiParrot(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("parrot", "navconfig", "aiohttp"):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)", name=name)
        return None

sys.meta_path.insert(0, HideAiParrot())
import hitl_telegram_channel
from hitl_telegram_channel import AlreadyDecided, Confirmation, HitlClient, HitlError, verify_webhook

client = HitlClient(os.environ["HITL_URL"], os.environ["HITL_TOKEN"])

def say(**fields):
    print(json.dumps(fields), flush=True)
"#;

/// A python3 running one script, read a JSON line at a time.
struct PyAgent {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    stderr: Arc<Mutex<String>>,
}

impl PyAgent {
    /// Runs `PRELUDE` + `body` as agent-a of `app`, with the extra environment `env`;
    /// `None` when python3 is not installed.
    fn start(app: &TestApp, env: &[(&str, &str)], body: &str) -> Option<PyAgent> {
        let script = format!("{PRELUDE}\n{body}");
        let spawned = Command::new("python3")
            .args(["-c", &script])
            .envs(env.iter().copied())
            .env("PYTHONPATH", CLIENT_SRC)
            .env("PYTHONUNBUFFERED", "1")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("HITL_URL", &app.base)
            .env("HITL_TOKEN", TOKEN_A)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                eprintln!("skipped: python3 is not on PATH");
                return None;
            }
            Err(e) => panic!("could not run python3: {e}"),
        };
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let mut err_lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = err_lines.next_line().await {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        Some(PyAgent {
            stdin: child.stdin.take(),
            lines: BufReader::new(child.stdout.take().expect("stdout")).lines(),
            child,
            stderr,
        })
    }

    /// The script's next `say(...)`; panics with its stderr when it ends or stalls.
    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line()).await;
        match line {
            Ok(Ok(Some(line))) => serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}\n{}", self.log())),
            other => panic!("the script said nothing more ({other:?}):\n{}", self.log()),
        }
    }

    /// Writes one JSON line to the script's stdin.
    async fn send(&mut self, value: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin");
        stdin
            .write_all(format!("{value}\n").as_bytes())
            .await
            .expect("write to the script");
        stdin.flush().await.expect("flush");
    }

    /// Waits for the script to exit; panics unless it succeeded.
    async fn finish(mut self) {
        drop(self.stdin.take());
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("the script exits")
            .expect("exit status");
        // Let the stderr reader drain before reporting.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(status.success(), "python3: {status}\n{}", self.log());
    }

    fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

#[tokio::test]
async fn the_package_imports_in_a_python_without_ai_parrot_and_names_the_extra_for_the_channel() {
    let app = TestApp::spawn().await;
    let Some(mut py) = PyAgent::start(
        &app,
        &[],
        r#"
loaded = sorted(m for m in sys.modules if m.partition(".")[0] in ("parrot", "navconfig", "aiohttp"))
try:
    hitl_telegram_channel.HitlTelegramChannel
    channel = "imported"
except ImportError as e:
    channel = str(e)
namespace = {}
exec("from hitl_telegram_channel import *", namespace)
say(loaded=loaded, channel=channel, star=sorted(k for k in namespace if not k.startswith("__")))
"#,
    ) else {
        return;
    };
    let said = py.next().await;
    py.finish().await;
    assert_eq!(said["loaded"], json!([]), "{said}");
    let channel = said["channel"].as_str().unwrap();
    assert!(
        channel.contains(r#"pip install "hitl-telegram-channel[aiparrot]""#),
        "{channel}"
    );
    let star = said["star"].as_array().unwrap();
    for name in ["HitlClient", "verify_webhook", "Confirmation", "HitlError"] {
        assert!(star.contains(&json!(name)), "{name} not in {star:?}");
    }
}

#[tokio::test]
async fn a_blocking_python_call_returns_the_operators_approval_with_the_parameters_as_sent() {
    let app = TestApp::spawn().await;
    let Some(mut py) = PyAgent::start(
        &app,
        &[],
        r#"
c = client.create("deploy", {"service": "billing", "replicas": 3, "ratio": 0.1},
                  owner_id="u-42", timeout_seconds=20)
say(status=c.status, allowed=c.allowed, via=c.via, tool=c.tool, owner_id=c.owner_id,
    parameters=c.parameters, decided_by=c.decided_by, id=c.id, pending=c.pending)
"#,
    ) else {
        return;
    };
    let msg = app.telegram.wait_for_messages(1).await.remove(0);
    assert_eq!(msg.chat_id, OPS_CHAT);
    app.telegram
        .tap(OPS_CHAT, msg.message_id, "✅ Approve", alice());
    let said = py.next().await;
    py.finish().await;
    assert_eq!(said["status"], "confirmed", "{said}");
    assert_eq!(said["allowed"], true);
    assert_eq!(said["pending"], false);
    assert_eq!(said["via"], "operator");
    assert_eq!(said["tool"], "deploy");
    assert_eq!(said["owner_id"], "u-42");
    assert_eq!(
        said["parameters"],
        json!({"service": "billing", "replicas": 3, "ratio": 0.1})
    );
    assert_eq!(
        said["decided_by"],
        json!({"id": ALICE, "username": "alice", "name": "Alice"})
    );
    let (_, record) = app.get(said["id"].as_str().unwrap()).await;
    assert_eq!(record["status"], "confirmed");
}

#[tokio::test]
async fn a_suspended_python_call_is_pending_at_once_and_its_long_poll_returns_the_refusal() {
    let app = TestApp::spawn().await;
    let Some(mut py) = PyAgent::start(
        &app,
        &[],
        r#"
p = client.create("deploy", {"service": "billing"}, wait="suspend", timeout_seconds=20)
early = client.wait_for(p.id, timeout=0.3)
say(id=p.id, status=p.status, allowed=p.allowed, early=early.status)
c = client.wait_for(p.id)
say(id=c.id, status=c.status, allowed=c.allowed, via=c.via, parameters=c.parameters)
"#,
    ) else {
        return;
    };
    let pending = py.next().await;
    assert_eq!(pending["status"], "pending", "{pending}");
    assert_eq!(pending["allowed"], false);
    assert_eq!(
        pending["early"], "pending",
        "a bounded wait returns the pending record"
    );
    let msg = app.telegram.wait_for_messages(1).await.remove(0);
    app.telegram
        .tap(OPS_CHAT, msg.message_id, "❌ Cancel", bob());
    let decided = py.next().await;
    py.finish().await;
    assert_eq!(decided["id"], pending["id"]);
    assert_eq!(decided["status"], "cancelled", "{decided}");
    assert_eq!(decided["allowed"], false);
    assert_eq!(decided["via"], "operator");
    assert_eq!(decided["parameters"], Value::Null);
}

#[tokio::test]
async fn python_withdraws_a_pending_call_and_gets_the_services_error_codes() {
    let app = TestApp::spawn().await;
    let Some(mut py) = PyAgent::start(
        &app,
        &[],
        r#"
def failure(call):
    try:
        call()
    except AlreadyDecided as e:
        return {"status": e.status, "code": e.code, "record": e.confirmation.status,
                "via": e.confirmation.via}
    except HitlError as e:
        return {"status": e.status, "code": e.code, "message": e.message, "text": str(e)}
    return "no error"

p = client.create("deploy", {"service": "billing"}, wait="suspend", timeout_seconds=20)
say(id=p.id)
w = client.withdraw(p.id)
say(status=w.status, via=w.via, allowed=w.allowed)
stranger = HitlClient(os.environ["HITL_URL"], "not-a-token-of-anyone")
nowhere = HitlClient("http://127.0.0.1:1", os.environ["HITL_TOKEN"])
say(
    again=failure(lambda: client.withdraw(p.id)),
    unknown=failure(lambda: client.get("cf_" + "0" * 32)),
    invalid=failure(lambda: client.create("deploy", {}, timeout_seconds=-1)),
    unauthorized=failure(lambda: stranger.get(p.id)),
    unreachable=failure(lambda: nowhere.get(p.id)),
    client_repr=repr(client),
)
"#,
    ) else {
        return;
    };
    let created = py.next().await;
    let id = created["id"].as_str().unwrap().to_owned();
    let withdrawn = py.next().await;
    assert_eq!(withdrawn["status"], "cancelled", "{withdrawn}");
    assert_eq!(withdrawn["via"], "withdrawn");
    assert_eq!(withdrawn["allowed"], false);
    let errors = py.next().await;
    py.finish().await;

    assert_eq!(
        errors["again"],
        json!({"status": 409, "code": "already_decided", "record": "cancelled", "via": "withdrawn"})
    );
    assert_eq!(errors["unknown"]["status"], 404, "{errors}");
    assert_eq!(errors["unknown"]["code"], "not_found");
    assert_eq!(errors["invalid"]["status"], 422);
    assert_eq!(errors["invalid"]["code"], "invalid_field");
    let message = errors["invalid"]["message"].as_str().unwrap();
    assert!(message.starts_with("timeout_seconds"), "{message}");
    assert_eq!(errors["unauthorized"]["status"], 401);
    assert_eq!(errors["unauthorized"]["code"], "unauthorized");
    assert_eq!(errors["unreachable"]["status"], Value::Null);
    assert_eq!(errors["unreachable"]["code"], "unreachable");
    // The token is in no error and no repr.
    let everything = errors.to_string();
    assert!(!everything.contains(TOKEN_A), "{everything}");
    assert!(
        !everything.contains("not-a-token-of-anyone"),
        "{everything}"
    );

    let (_, record) = app.get(&id).await;
    assert_eq!(record["via"], "withdrawn");
    let msg = app.telegram.sent_messages().remove(0);
    app.telegram
        .wait_for_message(OPS_CHAT, msg.message_id, "withdrawal shown", |m| {
            !m.has_buttons()
        })
        .await;
}

/// The first `python` block of `clients/python/README.md`, pointed at `base`.
fn readme_example(base: &str) -> String {
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/clients/python/README.md"
    ))
    .expect("clients/python/README.md");
    let code = &readme[readme.find("```python\n").expect("a python example") + 10..];
    let code = &code[..code.find("```").expect("the example's end")];
    assert!(code.contains("http://127.0.0.1:8080"), "{code}");
    code.replace("http://127.0.0.1:8080", base)
}

#[tokio::test]
async fn the_readme_example_runs_as_written_against_the_service() {
    let app = TestApp::spawn().await;
    // The example reports the transfer's outcome: the report's answer is said too.
    let body = format!(
        "def transfer(**kwargs):\n    say(transferred=kwargs)\n\
         _report = HitlClient.report_outcome\n\
         def report_outcome(self, *args, **kwargs):\n\
         \x20   record = _report(self, *args, **kwargs)\n\
         \x20   say(reported=record.id, outcome=record.raw['outcome'])\n\
         \x20   return record\n\
         HitlClient.report_outcome = report_outcome\n{}\n\
         say(status=decision.status, via=decision.via, allowed=decision.allowed)\n",
        readme_example(&app.base)
    );
    let Some(mut py) = PyAgent::start(&app, &[("HITL_AGENT_TOKEN", TOKEN_A)], &body) else {
        return;
    };
    let asked = app.telegram.wait_for_messages(1).await.remove(0);
    assert!(
        asked.visible_text.contains("Send 1,200.50 EUR to ACME?"),
        "{}",
        asked.visible_text
    );
    app.telegram
        .tap(OPS_CHAT, asked.message_id, "✅ Approve", alice());
    let transferred = py.next().await;
    assert_eq!(
        transferred,
        json!({"transferred": {"to": "ACME", "amount": 1200.5}})
    );
    let reported = py.next().await;
    let outcome = &reported["outcome"];
    assert_eq!(
        (&outcome["status"], &outcome["duration_ms"]),
        (&json!("executed"), &json!(850)),
        "{reported}"
    );
    // The service keeps it: the record as any read shows it.
    let id = reported["reported"].as_str().unwrap();
    let (status, record) = app.get(id).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["outcome"], *outcome, "{record}");
    let suspended = app.telegram.wait_for_messages(2).await.remove(1);
    app.telegram
        .tap(OPS_CHAT, suspended.message_id, "❌ Cancel", bob());
    let ended = py.next().await;
    py.finish().await;
    assert_eq!(
        ended,
        json!({"status": "cancelled", "via": "operator", "allowed": false})
    );
}

/// Keeps every delivery it receives (headers and raw body) and answers 200.
type Deliveries = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

async fn keep_delivery(
    State(seen): State<Deliveries>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    seen.lock().unwrap().push((headers, body));
    StatusCode::OK
}

#[tokio::test]
async fn verify_webhook_accepts_a_real_delivery_and_refuses_replays_tampering_and_stale_ones() {
    let seen: Deliveries = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let prefix = format!("http://{}/hooks", listener.local_addr().unwrap());
    let receiver = Router::new()
        .route("/hooks/{*rest}", post(keep_delivery))
        .with_state(seen.clone());
    tokio::spawn(async move { axum::serve(listener, receiver).await.unwrap() });
    let app = TestApp::spawn_with_callback_prefix(&prefix).await;

    let Some(mut py) = PyAgent::start(
        &app,
        &[("CALLBACK_URL", &format!("{prefix}/agent-a"))],
        r#"
import email.message
p = client.create("deploy", {"service": "billing"}, wait="suspend", timeout_seconds=20,
                  callback_url=os.environ["CALLBACK_URL"])
say(id=p.id)
delivery = json.loads(sys.stdin.readline())
headers, body = delivery["headers"], bytes.fromhex(delivery["body"])
secret = delivery["secret"]
ts = int(headers["x-hitl-timestamp"])

def changed(**edits):
    h = dict(headers)
    for name, value in edits.items():
        name = name.replace("_", "-")
        if value is None:
            h.pop(name)
        else:
            h[name] = value
    return h

as_written = {"X-Hitl-Timestamp": headers["x-hitl-timestamp"],
              "X-Hitl-Delivery": headers["x-hitl-delivery"],
              "X-Hitl-Signature": headers["x-hitl-signature"]}
parsed = email.message.Message()  # what http.server's self.headers is
for name, value in as_written.items():
    parsed[name] = value
doubled = email.message.Message()
for name, value in as_written.items():
    doubled[name] = value
doubled["X-Hitl-Delivery"] = "wh_" + "f" * 32
# The same signed bytes cut differently: part of the body moved into the id.
cut = body.index(b".")
shifted_id = headers["x-hitl-delivery"] + "." + body[:cut].decode()
say(
    genuine=verify_webhook(secret, headers, body),
    names_as_written=verify_webhook(secret.encode(), as_written, body),
    http_server_headers=verify_webhook(secret, parsed, body),
    record=Confirmation.from_json(json.loads(body)).status,
    other_delivery_id=verify_webhook(secret, changed(x_hitl_delivery="wh_" + "0" * 32), body),
    shifted_parts=verify_webhook(secret, changed(x_hitl_delivery=shifted_id), body[cut + 1:]),
    other_body=verify_webhook(secret, headers, body.replace(b"confirmed", b"cancelled")),
    other_timestamp=verify_webhook(secret, changed(x_hitl_timestamp=str(ts + 1)), body),
    wrong_secret=verify_webhook("not-the-secret", headers, body),
    no_signature=verify_webhook(secret, changed(x_hitl_signature=None), body),
    two_delivery_ids=verify_webhook(secret, doubled, body),
    stale=verify_webhook(secret, headers, body, 300, now=ts + 301),
    early=verify_webhook(secret, headers, body, 300, now=ts - 301),
    within_tolerance=verify_webhook(secret, headers, body, 300, now=ts + 299),
)
"#,
    ) else {
        return;
    };
    let created = py.next().await;
    let msg = app.telegram.wait_for_messages(1).await.remove(0);
    app.telegram
        .tap(OPS_CHAT, msg.message_id, "✅ Approve", alice());
    let (headers, body) = {
        let mut waited = 0;
        loop {
            if let Some(d) = seen.lock().unwrap().first().cloned() {
                break d;
            }
            assert!(waited < 400, "no delivery arrived");
            waited += 1;
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    };
    let header = |name: &str| headers[name].to_str().unwrap().to_owned();
    py.send(&json!({
        "secret": HOOK_SECRET_A,
        "headers": {
            "x-hitl-timestamp": header("x-hitl-timestamp"),
            "x-hitl-delivery": header("x-hitl-delivery"),
            "x-hitl-signature": header("x-hitl-signature"),
        },
        "body": hex::encode(&body),
    }))
    .await;
    let verdicts = py.next().await;
    py.finish().await;
    let record: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(record["id"], created["id"]);
    assert_eq!(
        verdicts,
        json!({
            "genuine": true, "names_as_written": true, "http_server_headers": true,
            "record": "confirmed",
            "other_delivery_id": false, "shifted_parts": false, "other_body": false,
            "other_timestamp": false, "wrong_secret": false, "no_signature": false,
            "two_delivery_ids": false, "stale": false, "early": false,
            "within_tolerance": true,
        })
    );
}

/// `HitlClient.create` presents a grant (`grant_scope`, `require_grant_only`): a scope
/// that does not cover the tool, or that nobody maps, is `invalid_field` naming both; a
/// deny rule beats a live `tool:*` grant; a mapped scope confirms only its tools.
#[tokio::test]
async fn a_python_call_presents_a_grant_that_never_widens_it_and_loses_to_a_deny_rule() {
    let app = TestApp::spawn_with_settings(gated).await;
    approved_grant(&app, "tool:*", "emp-1").await;
    approved_grant(&app, "billing:write", "emp-1").await;
    let Some(mut py) = PyAgent::start(
        &app,
        &[],
        r#"
def present(tool, params, scope):
    try:
        c = client.create(tool, params, owner_id="emp-1", grant_scope=scope,
                          require_grant_only=True)
        return {"status": c.status, "via": c.via, "reason": c.reason}
    except HitlError as e:
        return {"status": e.status, "code": e.code, "message": e.message}

say(
    other_tool=present("drop_table", {"env": "staging"}, "tool:deploy"),
    denied=present("drop_table", {"env": "prod"}, "tool:*"),
    mapped=present("refund_card", {"amount": 5}, "billing:write"),
    outside=present("drop_table", {"env": "staging"}, "billing:write"),
    unmapped=present("transfer", {"amount": 5}, "billing:read"),
)
"#,
    ) else {
        return;
    };
    let said = py.next().await;
    py.finish().await;
    let refused = |name: &str, message: &str| {
        let r = &said[name];
        assert_eq!(
            (r["status"].as_u64(), r["code"].as_str()),
            (Some(422), Some("invalid_field")),
            "{name}: {r}"
        );
        assert!(
            r["message"].as_str().unwrap().starts_with(message),
            "{name}: {r}"
        );
    };
    refused(
        "other_tool",
        "grant_scope: 'tool:deploy' does not cover tool 'drop_table'",
    );
    refused(
        "outside",
        "grant_scope: 'billing:write' does not cover tool 'drop_table': route 'ops' maps it to transfer, refund_*",
    );
    refused(
        "unmapped",
        "grant_scope: 'billing:read' does not cover tool 'transfer'",
    );
    assert_eq!(said["denied"]["status"], "cancelled", "{said}");
    assert_eq!(said["denied"]["via"], "rule");
    assert!(
        said["denied"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("denied by rule 'no-drops-in-prod'"),
        "{said}"
    );
    assert_eq!(said["mapped"]["status"], "confirmed", "{said}");
    assert_eq!(said["mapped"]["via"], "grant");
    assert!(
        said["mapped"]["reason"]
            .as_str()
            .unwrap()
            .ends_with("billing:write covers refund_card (grant_scopes of route 'ops': refund_*)"),
        "{said}"
    );
}
