//! The command line on rules: `rules test` decides a call as the service would (exit 0
//! allow, 1 deny, 4 ask, 3 when it cannot), and `check-config` prints the rules' hash,
//! refuses what could not be applied as read and warns about rules that never match.

use super::cli::{WORKDAY_TOKEN, check_edited, config_cmd, refusal, shows_a_source_line};

/// `rules test` of `call` against the worked example, `config/rules.example.toml`:
/// the exit code, and what it printed.
async fn rules_test(call: &str) -> (i32, String, String) {
    rules_test_on("config/rules.example.toml", call).await
}

/// `rules test` of `call` against the rules of `config`.
async fn rules_test_on(config: &str, call: &str) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("call.json");
    std::fs::write(&path, call).unwrap();
    let out = config_cmd(&["--config", config, "rules", "test", path.to_str().unwrap()])
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn rules_test_exits_0_on_allow_1_on_deny_4_on_ask_naming_the_deciding_rule() {
    let (code, out, _) = rules_test(
        r#"{"tool": "transfer", "agent": "workday-bot", "owner_id": "alice",
            "params": {"amount": 40, "currency": "EUR"}}"#,
    )
    .await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(
            "decision: allow\nby: rule 'small-transfers'\nreason: up to 100 EUR is petty cash"
        ),
        "{out}"
    );

    let (code, out, _) = rules_test(r#"{"tool": "drop_table", "params": {"env": "prod"}}"#).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("decision: deny\nby: rule 'no-drops-in-prod'"),
        "{out}"
    );

    let (code, out, _) =
        rules_test(r#"{"tool": "deploy_web", "params": {"env": "staging"}}"#).await;
    assert_eq!(code, 4, "{out}");
    assert!(
        out.contains("decision: ask\nby: rule 'deploys-ask'"),
        "{out}"
    );

    // A transfer over the band matches no rule: the default asks.
    let (code, out, _) =
        rules_test(r#"{"tool": "transfer", "params": {"amount": 400, "currency": "EUR"}}"#).await;
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("by: the rules' default"), "{out}");

    // The rate is shown, not counted: nothing is stored.
    let (code, out, _) =
        rules_test(r#"{"tool": "ping_status", "agent": "workday-bot", "params": {}}"#).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("rate: at most 20 call(s) per 3600 s"), "{out}");
}

#[tokio::test]
async fn rules_test_exits_3_on_a_call_it_cannot_read_and_on_refused_rules() {
    let (code, _, err) = rules_test(r#"{"tool": "x", "params": [1]}"#).await;
    assert_eq!(code, 3);
    assert!(err.contains("\"params\" must be a JSON object"), "{err}");
    let (code, _, err) = rules_test(r#"{"tool": "x", "argz": {}}"#).await;
    assert_eq!(code, 3);
    assert!(err.contains("not a call"), "{err}");
    // A look-alike of a tool a rule names is refused by the service before any rule.
    let (code, _, err) = rules_test("{\"tool\": \"tr\u{430}nsfer\", \"params\": {}}").await;
    assert_eq!(code, 3);
    assert!(
        err.contains("(422): the tool `tr\u{430}nsfer` looks like `transfer`, which rule 'small-transfers' names"),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[[rules]]\nname = \"big\"\neffect = \"allow\"\ntools = [\"transfer\"]\nwhere = [{ path = \"amount\", op = \"gte\", value = 1000 }]\n",
    )
    .unwrap();
    let call = dir.path().join("call.json");
    std::fs::write(&call, r#"{"tool": "transfer", "params": {"amount": 5000}}"#).unwrap();
    let out = config_cmd(&[
        "--config",
        rules.to_str().unwrap(),
        "rules",
        "test",
        call.to_str().unwrap(),
    ])
    .output()
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rule 'big'"), "{err}");

    // A rules file that is not TOML: said once, with its line and column.
    std::fs::write(&rules, "[[rules]]\nname = \"big\neffect = \"allow\"\n").unwrap();
    let out = config_cmd(&[
        "--config",
        rules.to_str().unwrap(),
        "rules",
        "test",
        call.to_str().unwrap(),
    ])
    .output()
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rules.toml, line 2, column 12: invalid basic string"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(!shows_a_source_line(&err), "{err}");
}

#[tokio::test]
async fn check_config_warns_about_a_rule_for_an_agent_it_does_not_have_and_an_allow_default() {
    let out = check_edited(
        |shipped| {
            format!("rules_default = \"allow\"\n{shipped}")
                + "\n[[rules]]\nname = \"status-pings\"\neffect = \"allow\"\ntools = [\"ping_*\"]\nagents = [\"workday\"]\n"
        },
        "1:x",
        WORKDAY_TOKEN,
    )
    .await;
    assert!(
        out.status.success(),
        "a warning, not a refusal: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "warning: rule 'status-pings' names the agent 'workday', which no [[agents]] entry is (the agents are: workday-bot): the rule never matches for it"
        ),
        "{err}"
    );
    assert!(
        err.contains("warning: rules_default = \"allow\": every call no rule matches is confirmed at once, without asking anyone"),
        "{err}"
    );
}

#[tokio::test]
async fn check_config_prints_the_hash_of_the_rules_in_force_and_refuses_a_one_sided_allow_band() {
    let rules = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/rules.example.toml"
    ))
    .unwrap();
    // Top-level keys go above the first section: put the example's first.
    let out = check_edited(
        |shipped| format!("{rules}\n{shipped}"),
        "1:x",
        WORKDAY_TOKEN,
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("rules: 6 rule(s), default ask, mode enforce, hash "),
        "{stdout}"
    );
    // The example's rules name the shipped configuration's agent: nothing never matches.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("never matches"), "{stderr}");
    // The same hash `rules test` prints for the same rules.
    let (_, tested, _) = rules_test(r#"{"tool": "x", "params": {}}"#).await;
    let hash = |text: &str| {
        text.lines()
            .find_map(|l| l.split_once("hash ").map(|(_, h)| h.to_owned()))
            .expect("a hash")
    };
    assert_eq!(hash(&stdout), hash(&tested));
    assert_eq!(hash(&stdout).len(), 64);

    let out = check_edited(
        |shipped| {
            shipped
                + "\n[[rules]]\nname = \"open-ended\"\neffect = \"allow\"\ntools = [\"transfer\"]\nwhere = [{ path = \"amount\", op = \"lte\", value = 100 }]\n"
        },
        "1:x",
        WORKDAY_TOKEN,
    )
    .await;
    let err = refusal(&out);
    assert!(err.contains("rule 'open-ended'"), "{err}");
}

#[tokio::test]
async fn rules_test_reads_a_calls_mcp_server_and_annotations_as_the_service_does() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[[rules]]\nname = \"fs-reads\"\neffect = \"allow\"\ntools = [\"read_*\"]\nservers = [\"fs\"]\nannotations = { readOnlyHint = true }\n",
    )
    .unwrap();
    let rules = rules.to_str().unwrap();
    let test = |call: &'static str| rules_test_on(rules, call);
    let (code, out, _) =
        test(r#"{"tool": "read_file", "server": "fs", "annotations": {"readOnlyHint": true}}"#)
            .await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("by: rule 'fs-reads'"), "{out}");
    // Another server, no server, or without the annotation: the default asks.
    for call in [
        r#"{"tool": "read_file", "server": "db", "annotations": {"readOnlyHint": true}}"#,
        r#"{"tool": "read_file", "annotations": {"readOnlyHint": true}}"#,
        r#"{"tool": "read_file", "server": "fs"}"#,
    ] {
        let (code, out, _) = test(call).await;
        assert_eq!(code, 4, "{call}: {out}");
    }
    // Refused as the service refuses them.
    let (code, _, err) = test(r#"{"tool": "read_file", "server": "f s"}"#).await;
    assert_eq!(code, 3);
    assert!(err.contains("\"server\" holds ' '"), "{err}");
    let (code, _, err) = test(r#"{"tool": "read_file", "annotations": {"readOnlyHint": 1}}"#).await;
    assert_eq!(code, 3);
    assert!(
        err.contains("\"annotations\" member \"readOnlyHint\": must be true or false"),
        "{err}"
    );
}
