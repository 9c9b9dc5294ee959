//! Proposals as a route's chat will see them: drawn from histories, held back by what
//! is in force, written as the configuration writes rules.

use serde_json::{Value, json};

use super::*;

const BOT: &str = "reports-bot";

fn decided(tool: &str, params: Value, approved: bool) -> Decided {
    Decided {
        agent: BOT.to_owned(),
        tool: tool.to_owned(),
        owner: None,
        params_json: params.to_string(),
        approved,
    }
}

fn times(n: usize, tool: &str, params: Value, approved: bool) -> Vec<Decided> {
    (0..n)
        .map(|_| decided(tool, params.clone(), approved))
        .collect()
}

fn no_rules() -> RuleSet {
    RuleSet::parse(Vec::new(), None).unwrap()
}

fn rules(rules: Value) -> RuleSet {
    let list = rules.as_array().expect("a list of rules").clone();
    RuleSet::from_values(&list, None).unwrap_or_else(|e| panic!("refused: {e}"))
}

/// The proposals for `history` with nothing in force and the default thresholds.
fn proposals(history: &[Decided]) -> Vec<Suggestion> {
    suggest(history, &no_rules(), &[], &[], Thresholds::default(), 7)
}

fn staging() -> Value {
    json!({"env": "staging"})
}

/// Whether the checked form of `raw` lets `params` through on `tool` for the bot.
fn matches(raw: &RawRule, tool: &str, params: Value) -> bool {
    let set = RuleSet::parse(vec![raw.clone()], None).expect("the proposal loads");
    let params = parse(&params.to_string()).unwrap();
    set.rules()[0].matches(&RuleCall {
        tool,
        agent: BOT,
        owner: None,
        params: &params,
        server: None,
        annotations: None,
    })
}

#[test]
fn fourteen_identical_approvals_propose_one_allow_written_as_the_configuration_does() {
    let found = proposals(&times(14, "read_report", staging(), true));
    assert_eq!(found.len(), 1, "{found:?}");
    let s = &found[0];
    assert_eq!(s.effect, Effect::Allow);
    assert_eq!(s.count, 14);
    assert_eq!((s.agent.as_str(), s.tool.as_str()), (BOT, "read_report"));
    assert_eq!(s.summary, "`read_report` with `env = staging`");
    assert_eq!(
        s.toml,
        r#"[[rules]]
name = "suggested-read_report-e2eb1551"
effect = "allow"
tools = ["read_report"]
agents = ["reports-bot"]
where = [
  { path = "env", op = "eq", value = "staging" },
]
reason = "approved 14 times in 7 days, never cancelled"
"#
    );
    let expected: RawRule = serde_json::from_value(json!({
        "name": "suggested-read_report-e2eb1551",
        "effect": "allow",
        "tools": ["read_report"],
        "agents": ["reports-bot"],
        "where": [{"path": "env", "op": "eq", "value": "staging"}],
        "reason": "approved 14 times in 7 days, never cancelled",
    }))
    .unwrap();
    assert_eq!(s.rule, expected, "the TOML above, read as a rule");
    assert!(matches(&s.rule, "read_report", staging()));
    assert!(!matches(&s.rule, "read_report", json!({"env": "prod"})));
}

#[test]
fn one_cancel_among_the_approvals_proposes_nothing() {
    let mut history = times(13, "read_report", staging(), true);
    history.insert(6, decided("read_report", staging(), false));
    assert!(proposals(&history).is_empty());
}

#[test]
fn twelve_cancels_propose_a_deny() {
    let found = proposals(&times(12, "drop_table", json!({"table": "users"}), false));
    assert_eq!(found.len(), 1, "{found:?}");
    let s = &found[0];
    assert_eq!(s.effect, Effect::Deny);
    assert_eq!(s.count, 12);
    assert_eq!(s.rule.effect, Effect::Deny);
    assert_eq!(
        s.rule.reason.as_deref(),
        Some("cancelled 12 times in 7 days, never approved")
    );
    assert!(s.toml.contains("effect = \"deny\"\n"), "{}", s.toml);
    assert!(matches(&s.rule, "drop_table", json!({"table": "users"})));
}

#[test]
fn a_call_any_configured_rule_matches_is_never_proposed() {
    let history = times(14, "read_report", staging(), true);
    let with =
        |configured: &RuleSet| suggest(&history, configured, &[], &[], Thresholds::default(), 7);
    for effect in ["deny", "allow", "ask"] {
        let configured = rules(json!([{
            "name": "configured", "effect": effect, "tools": ["read_*"],
            "where": [{"path": "env", "op": "eq", "value": "staging"}],
        }]));
        assert!(with(&configured).is_empty(), "{effect}");
    }
    // A deny reads loosely: `Staging` is the `staging` it forbids.
    let loose = rules(json!([{
        "name": "no-staging", "effect": "deny", "tools": ["READ_REPORT"],
        "where": [{"path": "env", "op": "eq", "value": "Staging"}],
    }]));
    assert!(with(&loose).is_empty());
    let elsewhere = rules(json!([{ "name": "other", "effect": "deny", "tools": ["transfer"] }]));
    assert_eq!(
        with(&elsewhere).len(),
        1,
        "a rule on another tool holds nothing back"
    );
}

#[test]
fn a_configured_rule_matching_one_call_of_the_group_holds_the_group_back() {
    let mut history = times(13, "read_report", json!({"env": "staging", "n": 1}), true);
    history.push(decided(
        "read_report",
        json!({"env": "staging", "n": 500}),
        true,
    ));
    let configured = rules(json!([{
        "name": "big", "effect": "ask", "tools": ["read_report"],
        "where": [{"path": "n", "op": "gt", "value": 100}],
    }]));
    let found = suggest(&history, &configured, &[], &[], Thresholds::default(), 7);
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn a_numeric_parameter_gets_both_bounds_and_the_proposal_loads() {
    let mut history = Vec::new();
    for amount in [40, 10, 90, 55, 10, 70, 25, 33, 61, 88, 12] {
        history.push(decided(
            "transfer",
            json!({"amount": amount, "currency": "EUR"}),
            true,
        ));
    }
    let found = proposals(&history);
    assert_eq!(found.len(), 1, "{found:?}");
    let s = &found[0];
    let conditions: Vec<(&str, Op, Option<&Value>)> = s
        .rule
        .conditions
        .iter()
        .map(|c| (c.path.as_str(), c.op, c.value.as_ref()))
        .collect();
    assert_eq!(
        conditions,
        [
            ("amount", Op::Gte, Some(&json!(10))),
            ("amount", Op::Lte, Some(&json!(90))),
            ("currency", Op::Eq, Some(&json!("EUR"))),
        ]
    );
    assert_eq!(
        s.summary,
        "`transfer` with `currency = EUR`, `amount` from 10 to 90"
    );
    assert!(s.toml.contains(
        "where = [\n  { path = \"amount\", op = \"gte\", value = 10 },\n  \
         { path = \"amount\", op = \"lte\", value = 90 },\n  \
         { path = \"currency\", op = \"eq\", value = \"EUR\" },\n]\n"
    ));
    assert!(RuleSet::parse(vec![s.rule.clone()], None).is_ok());
    assert!(matches(
        &s.rule,
        "transfer",
        json!({"amount": 50, "currency": "EUR"})
    ));
    assert!(!matches(
        &s.rule,
        "transfer",
        json!({"amount": 91, "currency": "EUR"})
    ));
    assert!(!matches(
        &s.rule,
        "transfer",
        json!({"amount": 9, "currency": "EUR"})
    ));
}

#[test]
fn fractions_and_integers_share_one_band_written_as_json_writes_them() {
    let mut history = times(9, "pay", json!({"amount": 2}), true);
    history.push(decided("pay", json!({"amount": 0.5}), true));
    history.push(decided("pay", json!({"amount": 1e20}), true));
    let found = proposals(&history);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].toml.contains("value = 0.5 }"), "{}", found[0].toml);
    assert!(
        found[0].toml.contains("value = 1e+20 }"),
        "{}",
        found[0].toml
    );
    assert_eq!(found[0].summary, "`pay` with `amount` from 0.5 to 1e+20");
}

#[test]
fn one_value_seen_for_a_number_is_a_band_of_one() {
    let found = proposals(&times(10, "pay", json!({"amount": 5}), true));
    assert_eq!(found[0].summary, "`pay` with `amount = 5`");
    assert!(matches(&found[0].rule, "pay", json!({"amount": 5})));
    assert!(!matches(&found[0].rule, "pay", json!({"amount": 6})));
}

#[test]
fn below_min_decisions_nothing_is_proposed() {
    assert!(proposals(&times(9, "read_report", staging(), true)).is_empty());
    assert_eq!(
        proposals(&times(10, "read_report", staging(), true)).len(),
        1
    );
    let strict = Thresholds { min_decisions: 20 };
    let history = times(14, "read_report", staging(), true);
    assert!(suggest(&history, &no_rules(), &[], &[], strict, 7).is_empty());
}

#[test]
fn a_never_suggest_pattern_suppresses_its_tools() {
    let mut history = times(14, "read_report", staging(), true);
    history.extend(times(10, "ping", json!({}), true));
    let never = [Glob::parse("read_*").unwrap()];
    let found = suggest(&history, &no_rules(), &[], &never, Thresholds::default(), 7);
    let tools: Vec<&str> = found.iter().map(|s| s.tool.as_str()).collect();
    assert_eq!(tools, ["ping"]);
    assert_eq!(found[0].summary, "`ping` with no parameters");
    assert!(!found[0].toml.contains("where"), "{}", found[0].toml);
}

#[test]
fn a_rule_already_accepted_in_the_chat_suppresses_what_it_covers() {
    let history = times(14, "read_report", staging(), true);
    let first = proposals(&history);
    let accepted = RuleSet::parse(vec![first[0].rule.clone()], None).unwrap();
    let chat = [&accepted.rules()[0]];
    let found = suggest(&history, &no_rules(), &chat, &[], Thresholds::default(), 7);
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn a_null_list_or_table_value_leaves_its_call_out() {
    for odd in [json!(null), json!(["a"]), json!({"k": 1})] {
        let history = times(14, "read_report", json!({"env": "staging", "x": odd}), true);
        assert!(proposals(&history).is_empty(), "{odd}");
    }
    let mut history = times(10, "read_report", staging(), true);
    history.extend(times(
        5,
        "read_report",
        json!({"env": "staging", "x": null}),
        true,
    ));
    let found = proposals(&history);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].count, 10, "only the calls a rule states exactly");
}

#[test]
fn calls_no_rule_could_state_exactly_are_left_out() {
    for params in [
        json!({"a.b": 1}),
        json!({"": "x"}),
        json!({"n": 9_223_372_036_854_775_808_u64}),
        json!([1, 2]),
        json!("staging"),
    ] {
        assert!(
            proposals(&times(12, "read_report", params.clone(), true)).is_empty(),
            "{params}"
        );
    }
    let not_json = Decided {
        params_json: "{not json".to_owned(),
        ..decided("read_report", json!({}), true)
    };
    assert!(proposals(&vec![not_json; 12]).is_empty());
    let inf = Decided {
        params_json: r#"{"n": 1e400}"#.to_owned(),
        ..decided("read_report", json!({}), true)
    };
    assert!(proposals(&vec![inf; 12]).is_empty());
}

#[test]
fn a_tool_name_a_pattern_would_read_as_one_is_never_proposed() {
    for tool in [
        "read_*",
        "read?",
        "read[1]",
        "re{a}d",
        "back\\slash",
        "wide\u{ff0a}",
        "",
    ] {
        assert!(
            proposals(&times(12, tool, staging(), true)).is_empty(),
            "{tool:?}"
        );
    }
}

#[test]
fn different_string_values_form_separate_groups() {
    let mut history = times(10, "read_report", json!({"env": "prod"}), true);
    history.extend(times(11, "read_report", staging(), true));
    history.extend(times(10, "read_report", json!({"env": "dev"}), false));
    let found = proposals(&history);
    let seen: Vec<(&str, Effect, u64)> = found
        .iter()
        .map(|s| (s.summary.as_str(), s.effect, s.count))
        .collect();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(
        seen[0],
        ("`read_report` with `env = staging`", Effect::Allow, 11)
    );
    assert!(seen.contains(&("`read_report` with `env = prod`", Effect::Allow, 10)));
    assert!(seen.contains(&("`read_report` with `env = dev`", Effect::Deny, 10)));
    // A boolean is a value too: `true` and `false` are two groups.
    let mut flags = times(10, "sync", json!({"dry_run": true}), true);
    flags.extend(times(10, "sync", json!({"dry_run": false}), false));
    let found = proposals(&flags);
    assert_eq!(found.len(), 2);
    assert!(
        found
            .iter()
            .any(|s| s.summary == "`sync` with `dry_run = true`" && s.effect == Effect::Allow)
    );
}

#[test]
fn most_decisions_come_first_then_tool_then_agent() {
    let mut history = times(10, "b_tool", staging(), true);
    history.extend(times(10, "a_tool", staging(), true));
    history.extend(times(12, "z_tool", staging(), true));
    for d in times(10, "a_tool", staging(), true) {
        history.push(Decided {
            agent: "aaa-bot".to_owned(),
            ..d
        });
    }
    let order: Vec<(String, String)> = proposals(&history)
        .into_iter()
        .map(|s| (s.tool, s.agent))
        .collect();
    let expected = [
        ("z_tool", BOT),
        ("a_tool", "aaa-bot"),
        ("a_tool", BOT),
        ("b_tool", BOT),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(t, a)| ((*t).to_owned(), (*a).to_owned()))
        .collect();
    assert_eq!(order, expected);
}

#[test]
fn an_owner_is_named_only_when_every_call_had_the_same_one() {
    let owned = |owner: Option<&str>| Decided {
        owner: owner.map(str::to_owned),
        ..decided("read_report", staging(), true)
    };
    let alice = vec![owned(Some("alice")); 10];
    let found = proposals(&alice);
    assert_eq!(found[0].rule.owners, Some(vec!["alice".to_owned()]));
    assert!(
        found[0].toml.contains("\nowners = [\"alice\"]\n"),
        "{}",
        found[0].toml
    );
    let mut mixed = alice.clone();
    mixed.push(owned(Some("bob")));
    assert_eq!(proposals(&mixed)[0].rule.owners, None);
    let mut some_none = alice;
    some_none.push(owned(None));
    assert_eq!(proposals(&some_none)[0].rule.owners, None);
}

#[test]
fn an_allow_that_would_let_through_a_cancelled_call_is_held_back() {
    let mut history = times(14, "read_report", staging(), true);
    history.push(decided(
        "read_report",
        json!({"env": "staging", "force": true}),
        false,
    ));
    assert!(
        proposals(&history).is_empty(),
        "`env = staging` covers the cancelled call"
    );
    let mut other_agent = times(14, "read_report", staging(), true);
    other_agent.push(Decided {
        agent: "another-bot".to_owned(),
        ..decided("read_report", staging(), false)
    });
    assert_eq!(proposals(&other_agent).len(), 1, "the rule names its agent");
}

#[test]
fn the_toml_escapes_what_a_basic_string_cannot_hold() {
    let value = "a \"quoted\" C:\\path\nnext\u{7f}\u{1}";
    let found = proposals(&times(10, "read_report", json!({"note": value}), true));
    let toml = &found[0].toml;
    assert!(
        toml.contains(r#"value = "a \"quoted\" C:\\path\u000Anext\u007F\u0001" }"#),
        "{toml}"
    );
    assert!(!toml.contains('\u{7f}') && !toml.contains('\u{1}'));
    assert_eq!(
        toml.lines().count(),
        9,
        "no raw newline inside a value: {toml}"
    );
    assert_eq!(
        found[0].summary,
        "`read_report` with `note = a \"quoted\" C:\\path\\nnext\\x7f\\x01`"
    );
}

#[test]
fn a_long_tool_name_is_cut_so_the_name_loads_and_keeps_its_hash() {
    let tool = "t".repeat(200);
    let found = proposals(&times(10, &tool, staging(), true));
    let name = &found[0].rule.name;
    assert_eq!(name.chars().count(), MAX_NAME_CHARS);
    assert!(name.starts_with("suggested-ttt"));
    let hash = name.rsplit('-').next().unwrap();
    assert_eq!(hash.len(), 8);
    assert!(hash.chars().all(|c| c.is_ascii_hexdigit()));
}

#[test]
fn the_name_stays_while_the_counts_grow_and_changes_with_the_rule() {
    let name = |history: &[Decided]| proposals(history)[0].rule.name.clone();
    let fourteen = name(&times(14, "read_report", staging(), true));
    assert_eq!(fourteen, name(&times(30, "read_report", staging(), true)));
    assert_ne!(
        fourteen,
        name(&times(14, "read_report", json!({"env": "prod"}), true))
    );
    assert_ne!(fourteen, name(&times(14, "read_report", staging(), false)));
}

#[test]
fn a_proposal_stored_as_json_reads_back_as_the_same_rule() {
    let mut history = times(
        10,
        "transfer",
        json!({"amount": 5, "currency": "EUR"}),
        true,
    );
    history.push(decided(
        "transfer",
        json!({"amount": 7.5, "currency": "EUR"}),
        true,
    ));
    let raw = proposals(&history)[0].rule.clone();
    let stored = serde_json::to_value(&raw).unwrap();
    assert!(
        stored.get("where").is_some() && stored.get("owners").is_none(),
        "{stored}"
    );
    let read: RawRule = serde_json::from_value(stored.clone()).unwrap();
    assert_eq!(read, raw);
    let direct = RuleSet::parse(vec![raw], None).unwrap();
    let from_values = RuleSet::from_values(&[stored], None).unwrap();
    assert_eq!(direct.fingerprint(), from_values.fingerprint());
}

#[test]
fn a_decided_calls_debug_leaves_its_parameters_out() {
    let d = decided("read_report", json!({"token": "s3cr3t-value"}), true);
    let shown = format!("{d:?}");
    assert!(
        shown.contains("read_report") && shown.contains(BOT),
        "{shown}"
    );
    assert!(
        !shown.contains("s3cr3t") && !shown.contains("params"),
        "{shown}"
    );
}

#[test]
fn every_key_of_a_raw_rule_survives_json_and_reads_back_the_same() {
    let raw: RawRule = serde_json::from_value(json!({
        "name": "all-keys",
        "effect": "allow",
        "tools": ["deploy_*"],
        "agents": ["ci"],
        "owners": ["alice"],
        "servers": ["prod-*"],
        "annotations": {"readOnlyHint": true},
        "where": [
            {"path": "env", "op": "exists"},
            {"path": "ticket", "op": "eq", "value": null},
            {"path": "n", "op": "gte", "value": 1},
            {"path": "n", "op": "lte", "value": 9.5},
        ],
        "rate": {"max": 20, "per_seconds": 3600},
        "reason": "all of it",
    }))
    .unwrap();
    let stored = serde_json::to_value(&raw).unwrap();
    assert!(stored["where"][0].get("value").is_none(), "{stored}");
    assert_eq!(stored["where"][1]["value"], Value::Null, "{stored}");
    assert_eq!(
        serde_json::from_value::<RawRule>(stored.clone()).unwrap(),
        raw
    );
    let direct = RuleSet::parse(vec![raw], None).unwrap();
    let from_values = RuleSet::from_values(&[stored], None).unwrap();
    assert_eq!(direct.fingerprint(), from_values.fingerprint());
}
