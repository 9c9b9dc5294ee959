//! The wire format against the real AI-Parrot package, in both directions.
//!
//! `tests/fixtures/aiparrot/` holds what ai-parrot 1.2.4 itself produced
//! (`scripts/aiparrot_fixtures.py`): `interactions.json`, the exact `model_dump_json()` of a
//! `HumanInteraction` of every type, the consensus cases, a `timeout_action="default"` case
//! and the two interactions its `ConfirmationGuard` builds (an approval, and a form for
//! `allow_edit`); `responses.json`, `HumanResponse` objects as its channels build them.
//!
//! Every case is posted as it is, must reach Telegram with the right buttons, is answered
//! there, and the `HumanResponse`s that come back must have the fixtures' shape and pass
//! the real package's own checks (`scripts/validate_human_responses.py`:
//! `HumanResponse.model_validate_json`, the manager's response-type compatibility and
//! `is_valid_respondent`).
//!
//! That last part needs a Python with ai-parrot: `HITL_AIPARROT_PYTHON` (the path of the
//! interpreter, e.g. `.ci/.venv-parrot/bin/python`). Without it those checks say so and
//! pass, unless `HITL_REQUIRE_AIPARROT=1` (set by `.ci/run`, which installs the pinned
//! version).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use crate::support::app::*;
use crate::support::fake_telegram::{SentMessage, TgUser};
use crate::support::interactions::{post_interaction, wait_for_status_as};
use crate::support::parrot_driver::parrot_python;
use reqwest::StatusCode;
use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/aiparrot");
const VALIDATOR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/scripts/validate_human_responses.py"
);

/// The parameters the fixtures' `ConfirmationGuard` was asked about (`GUARD_PARAMS` in
/// `scripts/aiparrot_fixtures.py`).
fn guard_params() -> Value {
    json!({"path": "/tmp/x", "force": false})
}

fn fixture(name: &str) -> Value {
    let path = Path::new(FIXTURES).join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let doc: Value = serde_json::from_str(&text).expect("fixture JSON");
    assert_eq!(
        doc["aiparrot_version"], "1.2.4",
        "{name} comes from the pinned ai-parrot"
    );
    doc
}

fn cases() -> Map<String, Value> {
    fixture("interactions.json")["cases"]
        .as_object()
        .expect("cases")
        .clone()
}

fn fixture_responses() -> Vec<Value> {
    fixture("responses.json")["responses"]
        .as_array()
        .expect("responses")
        .clone()
}

/// The group each case is asked in: its own route and chat, so Telegram's flood limits
/// (twenty messages a minute per group, which the service keeps) do not make the cases
/// wait for each other. `ops` cases: alice and bob approve; `council` cases: alice, bob
/// and carol, quorum 2 (like the base settings' routes of those names).
fn case_route(name: &str) -> String {
    format!("fx-{name}")
}

fn case_chat(index: usize) -> i64 {
    -1_001_000_100_000 - index as i64
}

/// The base settings, plus a route per case, and AI-Parrot's timeouts up to its default
/// of 7200 s (the base settings cap them at 3600).
fn parrot_settings(toml: String) -> String {
    let names: Vec<String> = cases().keys().cloned().collect();
    let mut routes = String::new();
    for (i, name) in names.iter().enumerate() {
        let (approvers, quorum) = match plan(name).route {
            "ops" => (format!("[{ALICE}, {BOB}]"), ""),
            "council" => (format!("[{ALICE}, {BOB}, {CAROL}]"), "quorum = 2\n"),
            other => panic!("no such kind of route: {other}"),
        };
        routes.push_str(&format!(
            "[[routes]]\nname = \"{}\"\nchat_id = {}\napprovers = {approvers}\n{quorum}",
            case_route(name),
            case_chat(i)
        ));
    }
    let listed: Vec<String> = names
        .iter()
        .map(|n| format!("\"{}\"", case_route(n)))
        .collect();
    let edited = toml
        .replace("max_timeout_seconds = 3600", "max_timeout_seconds = 7200")
        .replace(
            "routes = [\"ops\", \"other\", \"council\"]",
            &format!(
                "routes = [\"ops\", \"other\", \"council\", {}]",
                listed.join(", ")
            ),
        )
        .replacen("[[agents]]", &format!("{routes}[[agents]]"), 1);
    assert!(
        edited.contains("max_timeout_seconds = 7200") && edited.contains(&listed[0]),
        "the base settings changed; update parrot_settings"
    );
    edited
}

/// One thing a person does in Telegram.
enum Step {
    Tap(&'static str, TgUser),
    Reply(TgUser, &'static str),
}

/// How a fixture case is posted, what it looks like in Telegram, and how it is answered.
struct Plan {
    /// Who approves: `ops` (alice, bob) or `council` (alice, bob, carol; quorum 2).
    route: &'static str,
    /// The keyboard as delivered, left to right, top to bottom.
    buttons: &'static [&'static str],
    steps: Vec<Step>,
    /// The settled value.
    result: Value,
    /// `respondent` of each `HumanResponse`, in order.
    respondents: &'static [&'static str],
}

const OPTIONS: &[&str] = &["Option A", "Option B", "Option C"];
const APPROVAL: &[&str] = &["✅ Approve", "❌ Reject", "✋ Deny with reason"];
const FORM: &[&str] = &["✅ Approve", "❌ Cancel", "✋ Deny with reason"];

/// Every case, by name. `target_humans` decide the kind of group: an `ops` one (alice and
/// bob approve) when they are alice, or alice and bob; a `council` one (alice, bob and
/// carol, quorum 2) when carol is among them. All three are in `[people]`; the fixtures'
/// `dave` (consensus_quorum) is not, and in no route: he can never answer, which the
/// quorum of 2 makes no difference to (the message says "2 of 4 answered"). The guard's
/// cases name nobody, so any approver may answer, and the respondent is the Telegram
/// user id in decimal.
fn plan(name: &str) -> Plan {
    use Step::*;
    let p = |route, buttons, steps, result, respondents| Plan {
        route,
        buttons,
        steps,
        result,
        respondents,
    };
    match name {
        "free_text" => p(
            "ops",
            &[],
            vec![Reply(alice(), "Aurora")],
            json!("Aurora"),
            &["alice"],
        ),
        "single_choice" => p(
            "ops",
            OPTIONS,
            vec![Tap("Option B", alice())],
            json!("b"),
            &["alice"],
        ),
        "multi_choice" => p(
            "ops",
            &["☐ Option A", "☐ Option B", "☐ Option C", "✔️ Done"],
            vec![
                Tap("☐ Option A", alice()),
                Tap("☐ Option C", alice()),
                Tap("✔️ Done", alice()),
            ],
            json!(["a", "c"]),
            &["alice"],
        ),
        "approval" => p(
            "ops",
            APPROVAL,
            vec![Tap("✅ Approve", alice())],
            json!(true),
            &["alice"],
        ),
        "form" => p(
            "ops",
            FORM,
            vec![Tap("✅ Approve", alice())],
            guard_params(),
            &["alice"],
        ),
        "poll" => p(
            "council",
            OPTIONS,
            vec![Tap("Option C", carol())],
            json!("c"),
            &["carol"],
        ),
        "consensus_all_required" => p(
            "ops",
            APPROVAL,
            vec![Tap("✅ Approve", alice()), Tap("✅ Approve", bob())],
            json!(true),
            &["alice", "bob"],
        ),
        "consensus_majority" => p(
            "council",
            OPTIONS,
            vec![Tap("Option A", alice()), Tap("Option A", bob())],
            json!("a"),
            &["alice", "bob"],
        ),
        "consensus_quorum" => p(
            "council",
            APPROVAL,
            vec![Tap("✅ Approve", bob()), Tap("✅ Approve", carol())],
            json!(true),
            &["bob", "carol"],
        ),
        // Nobody answers: after 2 s its default_response (false) completes it.
        "timeout_default_approval" => p("ops", APPROVAL, vec![], json!(false), &["system"]),
        "confirmation_guard_approval" => p(
            "ops",
            APPROVAL,
            vec![Tap("✅ Approve", alice())],
            json!(true),
            &["111111"],
        ),
        "confirmation_guard_form" => p(
            "ops",
            FORM,
            vec![Tap("✅ Approve", bob())],
            guard_params(),
            &["222222"],
        ),
        other => panic!("a new fixture case {other:?}: add it to plan()"),
    }
}

/// A fixture case after it was answered in Telegram.
struct Answered {
    name: String,
    /// The `HumanInteraction` exactly as AI-Parrot dumped it.
    interaction: Value,
    /// `GET /v1/interactions/{interaction_id}` once it completed.
    view: Value,
}

impl Answered {
    fn responses(&self) -> &[Value] {
        self.view["responses"].as_array().expect("responses")
    }
}

/// Posts a case and checks its message; returns the message once the service has stored
/// its id (status `delivered`), so taps and replies are bound to it.
async fn ask(
    app: &TestApp,
    name: &str,
    interaction: &Value,
    chat: i64,
    plan: &Plan,
) -> SentMessage {
    let id = interaction["interaction_id"]
        .as_str()
        .expect("interaction_id");
    let (status, view) = post_interaction(
        app,
        json!({"interaction": interaction, "route": case_route(name)}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{name}: {view}");
    assert_eq!(view["interaction_id"], id, "{name}");
    assert_eq!(
        view["interaction_type"], interaction["interaction_type"],
        "{name}"
    );
    assert_eq!(
        &view["interaction"], interaction,
        "{name}: the HumanInteraction is echoed exactly"
    );
    let msg = app.telegram.wait_for_message_in(chat, 1).await[0].clone();
    wait_for_status_as(app, TOKEN_A, id, "delivered", Duration::from_secs(10)).await;

    let question = interaction["question"].as_str().expect("question");
    assert!(
        msg.visible_text.contains(question),
        "{name}: the question is in the message: {}",
        msg.visible_text
    );
    if let Some(context) = interaction["context"].as_str() {
        assert!(msg.visible_text.contains(context), "{name}: context");
    }
    if let Some(agent) = interaction["source_agent"].as_str() {
        assert!(msg.visible_text.contains(agent), "{name}: source agent");
    }
    assert_eq!(msg.button_texts(), plan.buttons, "{name}: the buttons");
    let free_text = interaction["interaction_type"] == "free_text";
    assert_eq!(
        msg.force_reply, free_text,
        "{name}: ForceReply for free text"
    );
    if interaction["interaction_type"] == "form" {
        assert!(
            msg.visible_text.contains("/tmp/x"),
            "{name}: the form's values are shown: {}",
            msg.visible_text
        );
    }
    msg
}

async fn answer(app: &TestApp, msg: &SentMessage, steps: &[Step]) {
    for step in steps {
        match step {
            Step::Tap(button, user) => {
                let q = app
                    .telegram
                    .tap(msg.chat_id, msg.message_id, *button, user.clone());
                app.telegram.wait_for_callback_answer(&q).await;
            }
            Step::Reply(user, text) => {
                app.telegram
                    .send_reply(msg.chat_id, user.clone(), text, msg.message_id);
            }
        }
    }
}

/// Checks the outcome of a case and that its buttons are gone.
async fn finish(
    app: &TestApp,
    name: &str,
    interaction: &Value,
    msg: &SentMessage,
    plan: &Plan,
) -> Answered {
    let id = interaction["interaction_id"]
        .as_str()
        .expect("interaction_id");
    let view = wait_for_status_as(app, TOKEN_A, id, "completed", Duration::from_secs(10)).await;
    assert_eq!(view["result"], plan.result, "{name}: {view}");
    let responses = view["responses"].as_array().expect("responses");
    let respondents: Vec<&str> = responses
        .iter()
        .map(|r| r["respondent"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(respondents, plan.respondents, "{name}: {view}");
    for r in responses {
        assert_eq!(r["interaction_id"], id, "{name}: {r}");
        assert_eq!(
            r["response_type"], interaction["interaction_type"],
            "{name}: {r}"
        );
    }
    if let Some(last) = responses.last() {
        assert_eq!(
            last["value"], plan.result,
            "{name}: the last answer is the settled value"
        );
    }
    if !msg.force_reply {
        app.telegram
            .wait_for_message(
                msg.chat_id,
                msg.message_id,
                format!("{name}: buttons removed once completed"),
                |m| !m.has_buttons(),
            )
            .await;
    }
    Answered {
        name: name.to_owned(),
        interaction: interaction.clone(),
        view,
    }
}

/// Posts every fixture case, answers it in Telegram as its plan says (the cases side by
/// side, each in its own group), and returns what came back, in the fixtures' order.
async fn answer_every_case() -> Vec<Answered> {
    let app = Arc::new(TestApp::spawn_with_settings(parrot_settings).await);
    let cases = cases();
    assert_eq!(cases.len(), 12, "the fixtures have every case");
    let mut running = tokio::task::JoinSet::new();
    for (index, (name, interaction)) in cases.into_iter().enumerate() {
        let app = app.clone();
        running.spawn(async move {
            let plan = plan(&name);
            let msg = ask(&app, &name, &interaction, case_chat(index), &plan).await;
            answer(&app, &msg, &plan.steps).await;
            let answered = finish(&app, &name, &interaction, &msg, &plan).await;
            (index, answered)
        });
    }
    let mut out = Vec::new();
    while let Some(done) = running.join_next().await {
        match done {
            Ok(case) => out.push(case),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("a case did not finish: {e}"),
        }
    }
    out.sort_by_key(|(index, _)| *index);
    out.into_iter().map(|(_, answered)| answered).collect()
}

#[tokio::test]
async fn every_fixture_interaction_reaches_telegram_and_is_answered() {
    let answered = answer_every_case().await;
    // Details are asserted along the way; here the set.
    let names: BTreeSet<&str> = answered.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, cases().keys().map(String::as_str).collect());

    let default = answered
        .iter()
        .find(|a| a.name == "timeout_default_approval")
        .expect("the timeout case");
    let r = &default.responses()[0];
    assert_eq!(r["value"], false, "{r}");
    assert_eq!(r["metadata"]["default"], true, "marked as a default: {r}");
}

#[tokio::test]
async fn the_confirmation_guards_form_is_approved_with_exactly_its_parameters() {
    let answered = answer_every_case().await;
    let form = answered
        .iter()
        .find(|a| a.name == "confirmation_guard_form")
        .expect("the guard's form");
    assert_eq!(
        form.interaction["form_schema"]["current_values"],
        guard_params()
    );
    let responses = form.responses();
    assert_eq!(responses.len(), 1, "{}", form.view);
    let r = &responses[0];
    assert_eq!(r["response_type"], "form");
    // Exactly: the same keys, and `force` the boolean false (not "False" or "false"), so
    // the guard's args schema accepts it and the tool runs with what it asked about.
    assert_eq!(r["value"], guard_params(), "{r}");
    assert_eq!(
        serde_json::to_string(&r["value"]).expect("json"),
        serde_json::to_string(&guard_params()).expect("json")
    );
    assert_eq!(form.view["result"], guard_params());
}

/// The JSON type of a value, as the fixtures are compared by it.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect()
}

/// `YYYY-MM-DDTHH:MM:SS[.ffffff]Z`: what pydantic dumps for an aware UTC datetime.
fn is_aware_utc(ts: &str) -> bool {
    let b = ts.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| r.clone().all(|i| b.get(i).is_some_and(u8::is_ascii_digit));
    let base = b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    let rest = &ts[19.min(ts.len())..];
    let fraction_ok = match rest.strip_suffix('Z') {
        Some("") => true,
        Some(f) => {
            f.len() >= 2
                && f.len() <= 7
                && f.starts_with('.')
                && f[1..].bytes().all(|c| c.is_ascii_digit())
        }
        None => false,
    };
    base && fraction_ok
}

#[tokio::test]
async fn our_responses_have_the_shapes_of_ai_parrots() {
    let theirs = fixture_responses();
    let key_set = keys(&theirs[0]);
    assert!(theirs.iter().all(|r| keys(r) == key_set));
    // The value types AI-Parrot's channels put in each response_type, and the form keys.
    let mut value_kinds: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for r in &theirs {
        value_kinds
            .entry(r["response_type"].as_str().expect("type").to_owned())
            .or_default()
            .insert(kind(&r["value"]));
    }
    let their_form = theirs
        .iter()
        .find(|r| r["response_type"] == "form")
        .expect("a form response");
    assert!(is_aware_utc(theirs[0]["timestamp"].as_str().expect("ts")));

    let answered = answer_every_case().await;
    let mut types_seen = BTreeSet::new();
    for a in &answered {
        for r in a.responses() {
            let name = &a.name;
            assert_eq!(keys(r), key_set, "{name}: exactly AI-Parrot's fields: {r}");
            for field in ["interaction_id", "respondent", "response_type", "timestamp"] {
                assert_eq!(kind(&r[field]), "string", "{name}: {field}: {r}");
            }
            assert_eq!(kind(&r["metadata"]), "object", "{name}: {r}");
            let ts = r["timestamp"].as_str().expect("timestamp");
            assert!(
                is_aware_utc(ts),
                "{name}: an aware UTC timestamp as pydantic dumps one: {ts}"
            );
            let rtype = r["response_type"].as_str().expect("response_type");
            types_seen.insert(rtype.to_owned());
            let expected = value_kinds
                .get(rtype)
                .unwrap_or_else(|| panic!("{name}: no fixture response of type {rtype}"));
            assert!(
                expected.contains(kind(&r["value"])),
                "{name}: a {rtype} value is {expected:?} in AI-Parrot, ours: {r}"
            );
            match &r["value"] {
                Value::Array(keys) => assert!(
                    keys.iter().all(Value::is_string),
                    "{name}: option keys: {r}"
                ),
                Value::Object(_) => assert_eq!(
                    keys(&r["value"]),
                    keys(&their_form["value"]),
                    "{name}: the form's fields: {r}"
                ),
                _ => {}
            }
        }
    }
    let all_types: BTreeSet<String> = value_kinds.keys().cloned().collect();
    assert_eq!(types_seen, all_types, "every response type was answered");
}

/// Runs the validator on `items`; returns its exit code and its JSON report.
async fn validate(python: &Path, items: &Value) -> (Option<i32>, Value, String) {
    let mut child = tokio::process::Command::new(python)
        .arg(VALIDATOR)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the validator starts");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(items.to_string().as_bytes())
        .await
        .expect("write stdin");
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("the validator finishes within 2 minutes")
        .expect("the validator runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report = serde_json::from_str(&stdout).unwrap_or_else(|_| {
        panic!(
            "the validator printed no JSON report (exit {:?}):\n{stdout}\n{stderr}",
            out.status.code()
        )
    });
    (out.status.code(), report, format!("{stdout}{stderr}"))
}

#[tokio::test]
async fn ai_parrot_itself_accepts_our_responses() {
    let Some(python) = parrot_python() else {
        return;
    };
    let answered = answer_every_case().await;
    let mut items = Vec::new();
    let mut defaults = Vec::new();
    for a in &answered {
        for r in a.responses() {
            let item = json!({"interaction": a.interaction, "response": r});
            // A default applied on timeout was given by nobody: its respondent is
            // "system", which is not one of target_humans; it is checked apart.
            if r["metadata"]["default"] == true {
                defaults.push(item);
            } else {
                items.push(item);
            }
        }
    }
    assert_eq!(items.len(), 14, "one answer per person per case");
    let (code, report, text) = validate(&python, &Value::Array(items.clone())).await;
    assert_eq!(
        code,
        Some(0),
        "ai-parrot refused some of our HumanResponses:\n{text}"
    );
    assert_eq!(report["aiparrot_version"], "1.2.4", "{text}");
    assert_eq!(report["total"], items.len(), "{text}");
    assert_eq!(report["passed"], items.len(), "{text}");

    // The default applied on timeout is a valid HumanResponse of the right type for its
    // interaction; only the respondent check (a person from target_humans) cannot hold.
    assert_eq!(defaults.len(), 1);
    let (_, report, text) = validate(&python, &Value::Array(defaults)).await;
    eprintln!(
        "the default applied on timeout, as ai-parrot sees it: {}",
        report["results"][0]
    );
    let checks = &report["results"][0]["checks"];
    assert_eq!(checks["response"], true, "{text}");
    assert_eq!(checks["interaction_id"], true, "{text}");
    assert_eq!(checks["response_type"], true, "{text}");

    // And the validator does refuse what AI-Parrot refuses: an extra field.
    let mut tampered = items[0].clone();
    tampered["response"]["chat_id"] = json!(case_chat(0));
    let (code, report, text) = validate(&python, &json!([tampered])).await;
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(report["failed_indices"], json!([0]), "{text}");
}
