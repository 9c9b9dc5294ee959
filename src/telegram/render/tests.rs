use sha2::{Digest, Sha256};

use super::*;
use crate::domain::args_hash::ArgsHash;
use crate::domain::ids::{CallbackToken, OwnerId, ToolName};
use crate::domain::python;
use crate::domain::question::{Operator, Seed, Status, Via};
use crate::service::TapAction;

fn record(params_json: &str) -> Question {
    let params = python::json::parse_object(params_json).unwrap();
    let t = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
    Question::pending(Seed {
        agent: "bot".into(),
        route: "ops".into(),
        chat_id: -100,
        tool: ToolName::parse("deploy").unwrap(),
        owner_id: OwnerId::anonymous(),
        args_hash: ArgsHash::of(&params),
        params_json: params_json.into(),
        briefing: "Deploy <b>now</b> & then".into(),
        context: Some("</pre> context".into()),
        allow_edit: false,
        window_seconds: 0,
        window_requested_seconds: None,
        has_call: false,
        idempotency_key: None,
        callback_url: None,
        created_at: t,
        expires_at: t + time::Duration::minutes(2),
        interaction: None,
        expect_outcome_seconds: None,
        args_schema: None,
        server: None,
        annotations: None,
    })
}

#[test]
fn agent_text_is_escaped_and_shown_literally() {
    let text = question_text(&record(r#"{"html": "<b>x</b> &amp;"}"#));
    assert!(
        text.contains("Deploy &lt;b&gt;now&lt;/b&gt; &amp; then"),
        "{text}"
    );
    assert!(text.contains("&lt;/pre&gt; context"), "{text}");
    assert!(text.contains("&lt;b&gt;x&lt;/b&gt; &amp;amp;"), "{text}");
}

#[test]
fn a_huge_value_is_cut_alone_with_its_length_and_hash_and_the_decided_message_fits() {
    let big = format!(
        r#"{{"blob": "{}", "amount": 1000000, "to": "ACME"}}"#,
        "<&>".repeat(5000)
    );
    let mut r = record(&big);
    let text = question_text(&r);
    assert!(
        units(&text) <= TELEGRAM_MAX_CHARS - OUTCOME_RESERVE,
        "{}",
        units(&text)
    );
    let digest = hex::encode(Sha256::digest("<&>".repeat(5000).as_bytes()));
    for needle in [
        "\"amount\": 1000000",
        "\"to\": \"ACME\"",
        &format!("✂️ 15000 chars, sha256 {}", &digest[..8]),
        "attached below",
        r.args_hash.as_str(),
    ] {
        assert!(text.contains(needle), "missing {needle:?} in {text}");
    }
    let file = attachment(&r).expect("a cut message sends the parameters along");
    let canonical = python::json::dumps_sorted_dict(&python::json::parse_object(&big).unwrap());
    assert_eq!(file.content, canonical.as_bytes());
    assert_eq!(
        hex::encode(Sha256::digest(&file.content)),
        r.args_hash.as_str(),
        "the file is exactly what the args hash covers"
    );
    assert!(attachment(&record(r#"{"a": 1}"#)).is_none());
    r.status = Status::Confirmed;
    r.via = Some(Via::Operator);
    r.decided_at = Some(r.created_at);
    r.decided_by = Some(Operator {
        id: 1,
        username: Some("a".repeat(32)),
        name: "n".repeat(128),
    });
    assert!(units(&decided_text(&r)) <= TELEGRAM_MAX_CHARS);
}

#[test]
fn option_callback_data_round_trips_and_refuses_non_canonical_numbers() {
    let t = CallbackToken::generate();
    for action in [TapAction::Choose(0), TapAction::Toggle(49), TapAction::Done] {
        let d = callback_data(action, &t);
        assert!(d.len() <= 64, "{d}");
        assert_eq!(parse_callback_data(&d), Some((action, t.clone())));
    }
    let token = t.as_str();
    for bad in [
        format!("o:{token}"),
        format!("o:{token}:07"),
        format!("o:{token}:+7"),
        format!("o:{token}:256"),
        format!("t:{token}:-1"),
        format!("d:{token}:1"),
    ] {
        assert!(parse_callback_data(&bad).is_none(), "{bad}");
    }
}

#[test]
fn callback_data_round_trips_and_fits_telegram() {
    let t = CallbackToken::generate();
    let d = callback_data(TapAction::Approve, &t);
    assert!(d.len() <= 64);
    assert_eq!(
        parse_callback_data(&d),
        Some((TapAction::Approve, t.clone()))
    );
    assert_eq!(
        parse_callback_data(&callback_data(TapAction::Cancel, &t)).map(|p| p.0),
        Some(TapAction::Cancel)
    );
    for bad in [
        "",
        "a",
        "x:abc",
        "a:",
        "a:zz",
        "a:0123456789abcdef0123456789abcdeF",
    ] {
        assert!(parse_callback_data(bad).is_none(), "{bad}");
    }
}

#[test]
fn a_grant_questions_terms_are_shown_whole_after_the_longest_agent_text_and_it_fits() {
    use crate::domain::grant::GrantTerms;
    use crate::service::EscalationView;
    // Terms as long as the service takes them once escaped, the agent's texts as long as
    // it takes them, each character escaped to several.
    let owner = "&".repeat(178);
    let raw = serde_json::json!({
        "interaction_id": "g", "question": "<".repeat(4096), "context": "&".repeat(4096),
        "interaction_type": "approval", "severity": "critical", "source_agent": "a".repeat(200),
        "grant": {"scope": "tool:x", "owner_id": owner, "window_seconds": 86_400},
    });
    let mut i = crate::domain::interaction::parse(&raw, f64::MAX).unwrap();
    let terms = i.grant.take().unwrap().capped(3600);
    assert!(terms.shown_units("bot") <= GrantTerms::MAX_SHOWN_UNITS);
    assert!(terms.shown_units("bot") > GrantTerms::MAX_SHOWN_UNITS - 10);
    i.grant = Some(terms);
    let mut r = record("{}");
    r.interaction = Some(std::sync::Arc::new(i));
    let view = View {
        expected: 3,
        escalation: Some(EscalationView {
            from_route: "r".repeat(64),
            to_route: "s".repeat(64),
            at: r.created_at,
            here: true,
        }),
        // The longest SLA mark too: the worst case must still fit.
        sla: Some((crate::domain::sla::SlaMark::Overdue, r.created_at)),
        ..Default::default()
    };
    let (text, _) = render(&r, &view);
    assert!(
        units(&text) <= TELEGRAM_MAX_CHARS - OUTCOME_RESERVE,
        "{}",
        units(&text)
    );
    for whole in [
        "Scope: <code>tool:x</code> (every call of this one tool)".to_owned(),
        format!("Owner: <code>{}</code>", "&amp;".repeat(178)),
        "Duration: 1 h from your tap (the agent asked for 1 day; the route allows at most this)"
            .to_owned(),
    ] {
        assert!(text.contains(&whole), "{whole}: {text}");
    }
    assert!(text.contains("more characters of the question not shown"));

    // Approved: the outcome names the grant, and the message still fits.
    r.status = Status::Completed;
    r.via = Some(Via::Operator);
    r.result = Some(serde_json::Value::Bool(true));
    r.decided_at = Some(r.created_at);
    r.decided_by = Some(Operator {
        id: 1,
        username: Some("a".repeat(32)),
        name: "n".repeat(128),
    });
    let (text, _) = render(&r, &view);
    assert!(units(&text) <= TELEGRAM_MAX_CHARS, "{}", units(&text));
    assert!(text.contains("🔑 <b>Granted</b> until"), "{text}");
}

/// An HTML message's text as Telegram reports it back (with a reply): tags gone,
/// entities read.
fn as_telegram_reports(html: &str) -> String {
    let mut text = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}

#[test]
fn only_a_reason_prompt_names_its_request_to_a_reply() {
    let r = record("{}");
    let prompt = as_telegram_reports(&reason_prompt_text(&r, 42, "Alice"));
    assert_eq!(reason_prompt_names(&prompt), Some(r.id.clone()), "{prompt}");

    // The agent's words: a notification naming the request, even in a prompt's words.
    let forged = format!(
        "✋ Alice, why deny deploy ({})? Reply to this message with your reason by noon",
        r.id
    );
    for agents_words in [format!("ref {}", r.id), forged.clone()] {
        let note = as_telegram_reports(&notification_text("bot", &agents_words));
        assert_eq!(reason_prompt_names(&note), None, "{note}");
    }
    assert_eq!(reason_prompt_names(&format!("ref {}", r.id)), None);

    // A prompt whose question quotes another prompt names its own request.
    let other = QuestionId::generate();
    let quoting = format!(
        "✋ Alice, why deny “x ({other})? Reply to this message with your reason by” ({})? \
         Reply to this message with your reason by noon.",
        r.id
    );
    assert_eq!(reason_prompt_names(&quoting), Some(r.id));
}

#[test]
fn an_mcp_calls_server_and_hints_show_under_the_owner_escaped() {
    use crate::domain::mcp_call::{Annotations, ServerName};
    let mut r = record("{}");
    assert!(!question_text(&r).contains("MCP server"));
    r.server = Some(ServerName::parse("fs.main").unwrap());
    r.annotations = Some(
        Annotations::from_value(&serde_json::json!({
            "readOnlyHint": true,
            "<b>x\u{202e}</b>": false,
        }))
        .unwrap(),
    );
    let text = question_text(&r);
    assert!(
        text.contains(
            "👤 Owner: <code>anonymous</code>\n🔌 MCP server: <code>fs.main</code>\n🏷 Hints \
             (the server's own): &lt;b&gt;x\\u202e&lt;/b&gt;=false, read-only\n\n"
        ),
        "{text}"
    );
    // Annotations given empty say nothing.
    r.annotations = Some(Annotations::default());
    assert!(!question_text(&r).contains("Hints"));
}
