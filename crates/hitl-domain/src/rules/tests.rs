//! The engine as the configuration and the service will use it: rule sets read from
//! values, refused with their rule's name, and deciding calls. (Patterns and conditions
//! alone are tested in their modules.)

use serde_json::{Value, json};

use super::*;
use crate::python::json::parse;

fn rules(rules: Value) -> RuleSet {
    rules_with_default(rules, None)
}

fn rules_with_default(rules: Value, default: Option<Effect>) -> RuleSet {
    let list = rules.as_array().expect("a list of rules").clone();
    RuleSet::from_values(&list, default).unwrap_or_else(|e| panic!("refused: {e}"))
}

/// The message a set is refused with.
fn refusal(rules: Value) -> String {
    let list = rules.as_array().expect("a list of rules").clone();
    match RuleSet::from_values(&list, None) {
        Ok(set) => panic!("accepted: {set:?}"),
        Err(e) => e.to_string(),
    }
}

fn call<'a>(tool: &'a str, params: &Value) -> RuleCall<'a> {
    call_text(tool, &params.to_string())
}

/// A call whose `params` are the JSON text `params`, as Python decodes it (`1e400` is
/// `inf`, which no `Value` holds). Leaked: a test's few calls live as long as it does.
fn call_text<'a>(tool: &'a str, params: &str) -> RuleCall<'a> {
    RuleCall {
        tool,
        agent: "agent-a",
        owner: Some("alice"),
        params: Box::leak(Box::new(parse(params).expect("JSON"))),
        server: None,
        annotations: None,
    }
}

/// `call` made through an MCP gateway: to `server`, carrying `annotations` (a JSON
/// object of booleans). Leaked, as [`call_text`]'s params.
fn mcp_call<'a>(
    tool: &'a str,
    server: Option<&'a str>,
    annotations: Option<Value>,
) -> RuleCall<'a> {
    RuleCall {
        server,
        annotations: annotations.map(|a| {
            &*Box::leak(Box::new(
                crate::mcp_call::Annotations::from_value(&a).expect("annotations"),
            ))
        }),
        ..call(tool, &json!({}))
    }
}

/// The effect and the deciding rule's name (`None`: the default decided).
fn decide(set: &RuleSet, call: &RuleCall<'_>) -> (Effect, Option<String>) {
    let d = set.evaluate(call);
    (d.effect, d.rule_name().map(str::to_owned))
}

fn by(effect: Effect, rule: &str) -> (Effect, Option<String>) {
    (effect, Some(rule.to_owned()))
}

#[test]
fn a_matching_deny_wins_over_an_earlier_allow() {
    let set = rules(json!([
        {"name": "reads", "effect": "allow", "tools": ["*"]},
        {"name": "no-drops", "effect": "deny", "tools": ["drop_*"], "reason": "never"},
    ]));
    let params = json!({});
    assert_eq!(
        decide(&set, &call("drop_table", &params)),
        by(Effect::Deny, "no-drops")
    );
    assert_eq!(
        decide(&set, &call("read_report", &params)),
        by(Effect::Allow, "reads")
    );
}

#[test]
fn a_matching_ask_wins_over_an_earlier_allow_and_loses_to_a_later_deny() {
    let set = rules(json!([
        {"name": "all", "effect": "allow", "tools": ["*"]},
        {"name": "deploys-ask", "effect": "ask", "tools": ["deploy*"]},
        {"name": "prod-deploys", "effect": "deny", "tools": ["deploy"],
         "where": [{"path": "env", "op": "eq", "value": "production"}]},
    ]));
    let staging = json!({"env": "staging"});
    let production = json!({"env": "production"});
    assert_eq!(
        decide(&set, &call("deploy", &staging)),
        by(Effect::Ask, "deploys-ask")
    );
    assert_eq!(
        decide(&set, &call("deploy", &production)),
        by(Effect::Deny, "prod-deploys")
    );
    assert_eq!(
        decide(&set, &call("read", &production)),
        by(Effect::Allow, "all")
    );
}

#[test]
fn within_an_effect_the_first_matching_rule_in_the_file_decides() {
    let set = rules(json!([
        {"name": "first-allow", "effect": "allow", "tools": ["read_*"]},
        {"name": "second-allow", "effect": "allow", "tools": ["*"]},
        {"name": "first-deny", "effect": "deny", "tools": ["drop_*"]},
        {"name": "second-deny", "effect": "deny", "tools": ["*_table"]},
        {"name": "first-ask", "effect": "ask", "tools": ["write_*"]},
        {"name": "second-ask", "effect": "ask", "tools": ["*"]},
    ]));
    let p = json!({});
    assert_eq!(
        decide(&set, &call("drop_table", &p)),
        by(Effect::Deny, "first-deny")
    );
    assert_eq!(
        decide(&set, &call("write_x", &p)),
        by(Effect::Ask, "first-ask")
    );
    let allows = rules(json!([
        {"name": "first-allow", "effect": "allow", "tools": ["read_*"]},
        {"name": "second-allow", "effect": "allow", "tools": ["*"]},
    ]));
    assert_eq!(
        decide(&allows, &call("read_x", &p)),
        by(Effect::Allow, "first-allow")
    );
    assert_eq!(
        decide(&allows, &call("other", &p)),
        by(Effect::Allow, "second-allow")
    );
}

#[test]
fn with_no_matching_rule_the_default_decides_and_it_is_ask_unless_configured() {
    let set_rules = json!([{"name": "reads", "effect": "allow", "tools": ["read_*"]}]);
    let p = json!({});
    let ask = rules(set_rules.clone());
    assert_eq!(ask.default_effect(), Effect::Ask);
    assert_eq!(decide(&ask, &call("deploy", &p)), (Effect::Ask, None));
    assert!(matches!(
        ask.evaluate(&call("deploy", &p)).by,
        DecidedBy::Default
    ));
    for effect in [Effect::Allow, Effect::Deny, Effect::Ask] {
        let set = rules_with_default(set_rules.clone(), Some(effect));
        assert_eq!(decide(&set, &call("deploy", &p)), (effect, None));
        assert_eq!(
            decide(&set, &call("read_x", &p)),
            by(Effect::Allow, "reads")
        );
    }
    let empty = rules_with_default(json!([]), Some(Effect::Deny));
    assert_eq!(decide(&empty, &call("anything", &p)), (Effect::Deny, None));
}

#[test]
fn the_agents_filter_limits_a_rule_to_the_agents_it_names() {
    let set = rules(json!([
        {"name": "b-may", "effect": "allow", "tools": ["*"], "agents": ["agent-b", "agent-c"]},
    ]));
    let p = json!({});
    let mut c = call("deploy", &p);
    assert_eq!(decide(&set, &c), (Effect::Ask, None));
    c.agent = "agent-b";
    assert_eq!(decide(&set, &c), by(Effect::Allow, "b-may"));
    c.agent = "agent-bb";
    assert_eq!(decide(&set, &c), (Effect::Ask, None));
}

#[test]
fn the_owners_filter_never_matches_a_call_made_on_behalf_of_no_one() {
    let set = rules(json!([
        {"name": "alice-may", "effect": "allow", "tools": ["*"], "owners": ["alice"]},
        {"name": "anyone-reads", "effect": "allow", "tools": ["read"]},
    ]));
    let p = json!({});
    let mut c = call("deploy", &p);
    assert_eq!(decide(&set, &c), by(Effect::Allow, "alice-may"));
    c.owner = Some("bob");
    assert_eq!(decide(&set, &c), (Effect::Ask, None));
    c.owner = None;
    assert_eq!(decide(&set, &c), (Effect::Ask, None));
    c.tool = "read";
    assert_eq!(decide(&set, &c), by(Effect::Allow, "anyone-reads"));
}

#[test]
fn tool_patterns_select_the_calls_a_rule_is_about() {
    let set = rules(json!([
        {"name": "v-one-digit", "effect": "deny", "tools": ["api_v?"]},
        {"name": "reads", "effect": "allow", "tools": ["read_*", "list_*"]},
    ]));
    let p = json!({});
    assert_eq!(
        decide(&set, &call("api_v2", &p)),
        by(Effect::Deny, "v-one-digit")
    );
    assert_eq!(decide(&set, &call("api_v10", &p)), (Effect::Ask, None));
    assert_eq!(
        decide(&set, &call("list_users", &p)),
        by(Effect::Allow, "reads")
    );
    assert_eq!(decide(&set, &call("reader", &p)), (Effect::Ask, None));
}

#[test]
fn an_allow_reads_a_call_exactly_while_a_deny_fails_closed() {
    let set = rules(json!([
        {"name": "non-staging", "effect": "deny", "tools": ["*"],
         "where": [{"path": "target.env", "op": "ne", "value": "staging"}]},
        {"name": "small", "effect": "allow", "tools": ["*"],
         "where": [{"path": "amount", "op": "gte", "value": 0},
                   {"path": "amount", "op": "lte", "value": 100}]},
    ]));
    let staging = |amount: Value| json!({"amount": amount, "target": {"env": "staging"}});
    assert_eq!(
        decide(&set, &call("pay", &staging(json!(50)))),
        by(Effect::Allow, "small")
    );
    // An allow lets through only what it names as written: "50" is no number to it.
    for amount in [json!("50"), json!([50]), json!({"value": 50}), json!(true)] {
        assert_eq!(
            decide(&set, &call("pay", &staging(amount.clone()))),
            (Effect::Ask, None),
            "{amount}"
        );
    }
    for params in [
        json!({"Amount": 50, "target": {"env": "staging"}}),
        json!({"amount": 50, "target.env": "staging"}),
    ] {
        // The deny reads `target.env` in any spelling, the allow `amount` exactly.
        assert_ne!(
            decide(&set, &call("pay", &params)),
            by(Effect::Allow, "small"),
            "{params}"
        );
    }
    // A deny's `ne` holds on a value missing at its exact path (a tool may take its own
    // default), or one of another kind or value in any spelling.
    for params in [
        json!({"amount": 50}),
        json!({"amount": 50, "Target": {"env": "staging"}}),
        json!({"amount": 50, "target": {"env": 1}}),
        json!({"amount": 50, "target": {"env": null}}),
        json!({"amount": 50, "target": {"env": ["staging", "prod"]}}),
        json!({"amount": 50, "target": {"env": "staging", "ENV": "prod"}}),
    ] {
        assert_eq!(
            decide(&set, &call("pay", &params)),
            by(Effect::Deny, "non-staging"),
            "{params}"
        );
    }
    // ...and not on the value it names, in any case or width, at its exact key.
    let spelled = json!({"amount": 50, "target": {"env": "STAGING "}});
    assert_eq!(
        decide(&set, &call("pay", &spelled)),
        by(Effect::Allow, "small")
    );
}

#[test]
fn with_allow_as_the_default_no_spelling_of_a_denied_call_gets_through() {
    let set = rules_with_default(
        json!([
            {"name": "big-transfers", "effect": "deny", "tools": ["transfer"],
             "where": [{"path": "amount", "op": "gt", "value": 1000}]},
            {"name": "no-drops-in-prod", "effect": "deny", "tools": ["drop_*"],
             "where": [{"path": "env", "op": "in", "value": ["prod", "production"]}]},
            {"name": "big-invoices", "effect": "deny", "tools": ["pay_invoice"],
             "where": [{"path": "invoice.total", "op": "gte", "value": 5000}]},
            {"name": "no-admins", "effect": "deny", "tools": ["grant_role"],
             "where": [{"path": "role", "op": "eq", "value": "admin"}]},
        ]),
        Some(Effect::Allow),
    );
    for (tool, params, rule) in [
        ("transfer", r#"{"amount": 9000}"#, "big-transfers"),
        ("transfer", r#"{"amount": "9000"}"#, "big-transfers"),
        ("transfer", r#"{"amount": [9000]}"#, "big-transfers"),
        (
            "transfer",
            r#"{"amount": {"value": 9000}}"#,
            "big-transfers",
        ),
        ("transfer", r#"{"amount": 1e400}"#, "big-transfers"),
        ("transfer", r#"{"Amount": 9000}"#, "big-transfers"),
        ("transfer", r#"{"amount ": 9000}"#, "big-transfers"),
        ("Transfer", r#"{"amount": 9000}"#, "big-transfers"),
        ("transfer ", r#"{"amount": 9000}"#, "big-transfers"),
        ("ｔransfer", r#"{"amount": 9000}"#, "big-transfers"),
        ("drop_table", r#"{"env": "prod"}"#, "no-drops-in-prod"),
        ("DROP_table", r#"{"env": "prod"}"#, "no-drops-in-prod"),
        ("drop_table", r#"{"env": "PROD"}"#, "no-drops-in-prod"),
        ("drop_table", r#"{"env": "prod "}"#, "no-drops-in-prod"),
        ("drop_table", r#"{"env": ["prod"]}"#, "no-drops-in-prod"),
        (
            "pay_invoice",
            r#"{"invoice": {"total": 5000}}"#,
            "big-invoices",
        ),
        ("pay_invoice", r#"{"invoice.total": 5000}"#, "big-invoices"),
        (
            "pay_invoice",
            r#"{"invoice": [{"total": 5000}]}"#,
            "big-invoices",
        ),
        ("grant_role", r#"{"role": "admin"}"#, "no-admins"),
        ("grant_role", r#"{"role": "Admin"}"#, "no-admins"),
        ("grant_role", r#"{"role": ["admin"]}"#, "no-admins"),
    ] {
        assert_eq!(
            decide(&set, &call_text(tool, params)),
            by(Effect::Deny, rule),
            "{tool} {params}"
        );
    }
    // The same calls, harmless, are the default's.
    for (tool, params) in [
        ("transfer", r#"{"amount": "50"}"#),
        ("drop_table", r#"{"env": ["staging"]}"#),
        ("pay_invoice", r#"{"invoice": [{"total": 10}]}"#),
        ("grant_role", r#"{"role": "Viewer"}"#),
    ] {
        assert_eq!(
            decide(&set, &call_text(tool, params)),
            (Effect::Allow, None),
            "{tool} {params}"
        );
    }
    // A look-alike of a name a rule spells out is for the caller to refuse.
    let look = set.look_alike("tr\u{430}nsfer").expect("a look-alike");
    assert_eq!(
        (look.rule.as_str(), look.pattern.as_str()),
        ("big-transfers", "transfer")
    );
    assert!(
        look.to_string()
            .contains("looks like `transfer`, which rule 'big-transfers' names")
    );
    assert_eq!(
        set.look_alike("Transfer"),
        None,
        "the same name, spelled otherwise"
    );
    assert_eq!(set.look_alike("refund"), None);
}

#[test]
fn a_deny_or_ask_naming_owners_compares_them_in_normal_form_and_an_allow_as_written() {
    let set = rules(json!([
        {"name": "not-for-carol", "effect": "deny", "tools": ["*"], "owners": ["carol"]},
        {"name": "alice-reads", "effect": "allow", "tools": ["read"], "owners": ["alice"]},
    ]));
    let p = json!({});
    let mut c = call("read", &p);
    c.owner = Some("Carol ");
    assert_eq!(decide(&set, &c), by(Effect::Deny, "not-for-carol"));
    c.owner = Some("alice");
    assert_eq!(decide(&set, &c), by(Effect::Allow, "alice-reads"));
    c.owner = Some("Alice");
    assert_eq!(decide(&set, &c), (Effect::Ask, None));
}

#[test]
fn a_two_sided_band_on_an_allow_is_accepted_and_lets_only_its_band_through() {
    let set = rules(json!([
        {"name": "small-transfers", "effect": "allow", "tools": ["transfer"],
         "where": [{"path": "amount", "op": "gt", "value": 0},
                   {"path": "amount", "op": "lte", "value": 100}]},
    ]));
    for (amount, allowed) in [
        (json!(50), true),
        (json!(100.0), true),
        (json!(0.5), true),
        (json!(0), false),
        (json!(-5), false),
        (json!(100.01), false),
        (json!(u64::MAX), false),
        (json!(i64::MIN), false),
    ] {
        let params = json!({ "amount": amount });
        let expected = if allowed {
            by(Effect::Allow, "small-transfers")
        } else {
            (Effect::Ask, None)
        };
        assert_eq!(
            decide(&set, &call("transfer", &params)),
            expected,
            "{amount}"
        );
    }
}

#[test]
fn an_allow_bounded_on_one_side_only_is_refused_at_load_saying_how_to_close_it() {
    let message = refusal(json!([
        {"name": "small-transfers", "effect": "allow", "tools": ["transfer"],
         "where": [{"path": "amount", "op": "lte", "value": 100}]},
    ]));
    assert_eq!(
        message,
        "rule 'small-transfers': an allow on `amount` must be bounded at both ends: it has \
         `lte 100` but no `gt`/`gte` (any lower value, a negative one included, would pass); \
         add e.g. { path = \"amount\", op = \"gte\", value = 0 }"
    );
    let message = refusal(json!([
        {"name": "big-enough", "effect": "allow", "tools": ["transfer"],
         "where": [{"path": "limits.amount", "op": "gt", "value": 10},
                   {"path": "other", "op": "lt", "value": 5},
                   {"path": "other", "op": "gte", "value": 1}]},
    ]));
    assert!(message.starts_with("rule 'big-enough': an allow on `limits.amount`"));
    assert!(
        message.contains("it has `gt 10` but no `lt`/`lte`"),
        "{message}"
    );
    assert!(message.contains("op = \"lte\""), "{message}");
}

#[test]
fn a_one_sided_band_on_a_deny_or_an_ask_is_accepted() {
    let set = rules(json!([
        {"name": "big-transfers", "effect": "deny", "tools": ["transfer"],
         "where": [{"path": "amount", "op": "gt", "value": 10000}]},
        {"name": "mid-transfers", "effect": "ask", "tools": ["transfer"],
         "where": [{"path": "amount", "op": "gt", "value": 100}]},
    ]));
    let huge = json!({"amount": 20000});
    let mid = json!({"amount": 500});
    assert_eq!(
        decide(&set, &call("transfer", &huge)),
        by(Effect::Deny, "big-transfers")
    );
    assert_eq!(
        decide(&set, &call("transfer", &mid)),
        by(Effect::Ask, "mid-transfers")
    );
}

#[test]
fn bounds_that_no_number_satisfies_together_are_refused_for_every_effect() {
    for effect in ["allow", "ask", "deny"] {
        let message = refusal(json!([
            {"name": "outside", "effect": effect, "tools": ["transfer"],
             "where": [{"path": "amount", "op": "gt", "value": 1000},
                       {"path": "amount", "op": "lt", "value": 10}]},
        ]));
        assert!(
            message.starts_with(
                "rule 'outside': its conditions on `amount` can never all hold (`gt 1000` and \
                 `lt 10`)"
            ),
            "{message}"
        );
    }
    let touching = refusal(json!([
        {"name": "point", "effect": "deny", "tools": ["*"],
         "where": [{"path": "n", "op": "gte", "value": 5},
                   {"path": "n", "op": "lt", "value": 5.0}]},
    ]));
    assert!(touching.contains("(`gte 5` and `lt 5.0`)"), "{touching}");
    // One point is a band: gte 5 with lte 5 holds on 5.
    let point = rules(json!([
        {"name": "five", "effect": "allow", "tools": ["*"],
         "where": [{"path": "n", "op": "gte", "value": 5},
                   {"path": "n", "op": "gte", "value": 1},
                   {"path": "n", "op": "lte", "value": 5}]},
    ]));
    let five = json!({"n": 5});
    assert_eq!(decide(&point, &call("x", &five)), by(Effect::Allow, "five"));
}

#[test]
fn a_decision_names_its_rule_and_reason_and_an_allow_hands_over_its_rate() {
    let set = rules(json!([
        {"name": "staging-reads", "effect": "allow", "tools": ["read_*"],
         "rate": {"max": 20, "per_seconds": 3600}, "reason": "reads are safe in staging"},
        {"name": "drops", "effect": "deny", "tools": ["drop_*"], "reason": "never in prod"},
    ]));
    let p = json!({});
    let allow = set.evaluate(&call("read_report", &p));
    assert_eq!(allow.effect, Effect::Allow);
    assert_eq!(allow.rule_name(), Some("staging-reads"));
    assert_eq!(allow.reason(), Some("reads are safe in staging"));
    let rate = allow.rate().expect("the allow's rate");
    assert_eq!((rate.max.get(), rate.per_seconds.get()), (20, 3600));
    let deny = set.evaluate(&call("drop_table", &p));
    assert_eq!(deny.reason(), Some("never in prod"));
    assert_eq!(deny.rate(), None);
    let default = set.evaluate(&call("other", &p));
    assert_eq!(
        (default.rule_name(), default.reason(), default.rate()),
        (None, None, None)
    );
}

#[test]
fn a_rate_is_refused_on_an_ask_or_a_deny_and_when_zero() {
    for effect in ["ask", "deny"] {
        let message = refusal(json!([
            {"name": "limited", "effect": effect, "tools": ["*"],
             "rate": {"max": 1, "per_seconds": 60}},
        ]));
        assert!(
            message.starts_with(&format!(
                "rule 'limited': `rate` is only for an `allow` rule (it counts the calls an \
                 allow lets through), and this rule's effect is `{effect}`"
            )),
            "{message}"
        );
    }
    for (rate, field) in [
        (json!({"max": 0, "per_seconds": 60}), "max"),
        (json!({"max": 5, "per_seconds": 0}), "per_seconds"),
    ] {
        let message = refusal(json!([
            {"name": "limited", "effect": "allow", "tools": ["*"], "rate": rate},
        ]));
        assert_eq!(
            message,
            format!("rule 'limited': `rate.{field}` is 0: it must be a whole number of at least 1")
        );
    }
    let negative = refusal(json!([
        {"name": "limited", "effect": "allow", "tools": ["*"],
         "rate": {"max": -1, "per_seconds": 60}},
    ]));
    assert!(
        negative.starts_with("rule 'limited': `rate.max`: "),
        "{negative}"
    );
}

#[test]
fn unknown_keys_are_refused_naming_the_rule_and_the_key() {
    for (rule, key) in [
        (
            json!({"name": "typo", "effect": "deny", "tools": ["*"], "tool": "x"}),
            "tool",
        ),
        (
            json!({"name": "typo", "effect": "deny", "tools": ["*"],
                   "where": [{"path": "a", "op": "exists", "vaule": true}]}),
            "vaule",
        ),
        (
            json!({"name": "typo", "effect": "allow", "tools": ["*"],
                   "rate": {"max": 1, "per_second": 60}}),
            "per_second",
        ),
    ] {
        let message = refusal(json!([rule]));
        assert!(message.starts_with("rule 'typo': "), "{message}");
        assert!(
            message.contains(&format!("unknown field `{key}`")),
            "{message}"
        );
    }
}

#[test]
fn an_unknown_op_or_effect_is_refused_naming_the_rule_and_where_it_is() {
    let op = refusal(json!([
        {"name": "fine", "effect": "ask", "tools": ["*"]},
        {"name": "small", "effect": "deny", "tools": ["*"],
         "where": [{"path": "a", "op": "exists"}, {"path": "amount", "op": "le", "value": 1}]},
    ]));
    assert!(
        op.starts_with("rule 'small': `where[1].op`: unknown variant `le`"),
        "{op}"
    );
    let effect = refusal(json!([{"name": "blocker", "effect": "block", "tools": ["*"]}]));
    assert!(
        effect.starts_with("rule 'blocker': `effect`: unknown variant `block`"),
        "{effect}"
    );
}

#[test]
fn a_rule_without_a_usable_name_is_named_by_its_place_in_the_file() {
    let missing = refusal(json!([
        {"name": "first", "effect": "ask", "tools": ["*"]},
        {"effect": "ask", "tools": ["*"]},
    ]));
    assert_eq!(missing, "rule #2 (no name): missing field `name`");
    let empty = refusal(json!([{"name": " ", "effect": "ask", "tools": ["*"]}]));
    assert!(
        empty.starts_with("rule #1 (no name): `name` is empty: give every rule a name"),
        "{empty}"
    );
    let empty_and_broken = refusal(json!([{"name": "", "effect": "maybe", "tools": ["*"]}]));
    assert!(
        empty_and_broken.starts_with("rule #1 (no name): `effect`: unknown variant"),
        "{empty_and_broken}"
    );
    let not_a_table = refusal(json!([["allow"]]));
    assert!(
        not_a_table.starts_with("rule #1 (no name): it is a list, not a table"),
        "{not_a_table}"
    );
}

#[test]
fn a_name_used_twice_is_refused_with_both_places() {
    let message = refusal(json!([
        {"name": "reads", "effect": "allow", "tools": ["read_*"]},
        {"name": "other", "effect": "ask", "tools": ["*"]},
        {"name": "reads", "effect": "deny", "tools": ["read_secrets"]},
    ]));
    assert_eq!(
        message,
        "rule 'reads': the name is also rule #1's (this is rule #3): rule names must be \
         unique, rename one"
    );
}

#[test]
fn a_name_must_read_as_what_it_is() {
    let invisible = refusal(json!([{"name": "re\u{200b}ads", "effect": "ask", "tools": ["*"]}]));
    assert!(
        invisible.starts_with(
            "rule 're\\u200bads': `name` holds an invisible or layout-changing character \
             (\\u200b)"
        ),
        "{invisible}"
    );
    let long = "x".repeat(MAX_NAME_CHARS + 1);
    let message = refusal(json!([{"name": long, "effect": "ask", "tools": ["*"]}]));
    assert!(
        message.contains("`name` is 129 characters long"),
        "{message}"
    );
}

#[test]
fn empty_tools_and_unsupported_patterns_are_refused_naming_the_rule() {
    let empty = refusal(json!([{"name": "nothing", "effect": "deny", "tools": []}]));
    assert!(
        empty.starts_with("rule 'nothing': `tools` is empty"),
        "{empty}"
    );
    let missing = refusal(json!([{"name": "nothing", "effect": "deny"}]));
    assert_eq!(missing, "rule 'nothing': missing field `tools`");
    let blank = refusal(json!([{"name": "blank", "effect": "deny", "tools": ["read", ""]}]));
    assert!(
        blank.starts_with("rule 'blank': tools pattern \"\": an empty pattern"),
        "{blank}"
    );
    for c in ['[', ']', '{', '}', '\\'] {
        let message = refusal(json!([
            {"name": "classy", "effect": "deny", "tools": [format!("drop_{c}x")]},
        ]));
        assert!(
            message.starts_with(&format!(
                "rule 'classy': tools pattern {:?}: `{c}` is not supported",
                format!("drop_{c}x")
            )),
            "{message}"
        );
    }
}

#[test]
fn an_empty_agents_or_owners_list_is_refused_as_a_rule_that_never_matches() {
    for key in ["agents", "owners"] {
        let message = refusal(json!([
            {"name": "nobody", "effect": "deny", "tools": ["*"], key: []},
        ]));
        assert!(
            message.starts_with(&format!(
                "rule 'nobody': `{key}` is an empty list, so the rule could never match"
            )),
            "{message}"
        );
    }
}

#[test]
fn a_bad_regex_is_refused_naming_the_rule_and_giving_the_regex_error() {
    let message = refusal(json!([
        {"name": "hosts", "effect": "deny", "tools": ["*"],
         "where": [{"path": "host", "op": "matches", "value": "prod-(db"}]},
    ]));
    assert!(
        message.starts_with(
            "rule 'hosts': `where[0]` on \"host\": `matches` has an invalid regular expression: "
        ),
        "{message}"
    );
    assert!(message.contains("unclosed group"), "{message}");
}

#[test]
fn values_of_the_wrong_kind_for_their_op_are_refused_naming_the_rule() {
    for (condition, expected) in [
        (
            json!({"path": "env", "op": "in", "value": "staging"}),
            "`where[0]` on \"env\": `in` needs a list as its value, not a string",
        ),
        (
            json!({"path": "amount", "op": "lt", "value": "100"}),
            "`where[0]` on \"amount\": `lt` compares numbers, and its value is a string",
        ),
        (
            json!({"path": "host", "op": "matches", "value": 5}),
            "`where[0]` on \"host\": `matches` needs a regular expression as a string, not a \
             number",
        ),
        (
            json!({"path": "env", "op": "eq"}),
            "`where[0]` on \"env\": `eq` needs a `value`",
        ),
        (
            json!({"path": "a..b", "op": "exists"}),
            "`where[0]` on \"a..b\": the path \"a..b\" has an empty segment",
        ),
    ] {
        let message = refusal(json!([
            {"name": "typed", "effect": "deny", "tools": ["*"], "where": [condition]},
        ]));
        assert!(
            message.starts_with(&format!("rule 'typed': {expected}")),
            "{message}"
        );
    }
}

#[test]
fn the_same_rules_give_the_same_fingerprint_whichever_way_they_were_read() {
    let text = json!([
        {"name": "small", "effect": "allow", "tools": ["transfer"],
         "where": [{"path": "amount", "op": "gte", "value": 0},
                   {"path": "amount", "op": "lte", "value": 100},
                   {"path": "memo", "op": "exists"}],
         "rate": {"max": 20, "per_seconds": 3600}},
        {"name": "drops", "effect": "deny", "tools": ["drop_*"], "reason": "never"},
    ]);
    let a = rules(text.clone());
    let b = rules(text.clone());
    assert_eq!(a.fingerprint(), b.fingerprint());
    let raw: Vec<RawRule> = serde_json::from_value(text).unwrap();
    let c = RuleSet::parse(raw, None).unwrap();
    assert_eq!(a.fingerprint(), c.fingerprint());
    // `exists` without a value is `exists` true: the same checked rule.
    let explicit = rules(json!([
        {"name": "small", "effect": "allow", "tools": ["transfer"],
         "where": [{"path": "amount", "op": "gte", "value": 0},
                   {"path": "amount", "op": "lte", "value": 100},
                   {"path": "memo", "op": "exists", "value": true}],
         "rate": {"max": 20, "per_seconds": 3600}},
        {"name": "drops", "effect": "deny", "tools": ["drop_*"], "reason": "never"},
    ]));
    assert_eq!(a.fingerprint(), explicit.fingerprint());
    let full = a.fingerprint().as_str();
    assert_eq!(full.len(), 64);
    assert!(
        full.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    assert_eq!(a.fingerprint().short(), format!("rules:{}", &full[..16]));
    assert_eq!(a.fingerprint().to_string(), a.fingerprint().short());
}

#[test]
fn any_change_of_order_content_or_default_changes_the_fingerprint() {
    let one = json!({"name": "one", "effect": "allow", "tools": ["read_*"]});
    let two = json!({"name": "two", "effect": "deny", "tools": ["drop_*"]});
    let base = rules(json!([one.clone(), two.clone()]));
    let mut seen = vec![base.fingerprint().clone()];
    let mut differs = |set: RuleSet| {
        let f = set.fingerprint().clone();
        assert!(!seen.contains(&f), "{set:?} has a fingerprint already seen");
        seen.push(f);
    };
    differs(rules(json!([two.clone(), one.clone()])));
    differs(rules_with_default(
        json!([one.clone(), two.clone()]),
        Some(Effect::Deny),
    ));
    differs(rules(json!([one.clone()])));
    differs(rules(json!([
        one.clone(),
        {"name": "two", "effect": "deny", "tools": ["drop_*"], "reason": "never"},
    ])));
    differs(rules(json!([
        one.clone(),
        {"name": "two", "effect": "deny", "tools": ["drop_*", "truncate_*"]},
    ])));
    differs(rules(json!([
        one.clone(),
        {"name": "two", "effect": "deny", "tools": ["drop_*"], "agents": ["agent-a"]},
    ])));
    differs(rules(json!([
        one.clone(),
        {"name": "two", "effect": "deny", "tools": ["drop_*"],
         "where": [{"path": "env", "op": "eq", "value": "prod"}]},
    ])));
    differs(rules(json!([
        one.clone(),
        {"name": "two", "effect": "deny", "tools": ["drop_*"],
         "where": [{"path": "env", "op": "ne", "value": "prod"}]},
    ])));
    differs(rules(json!([
        {"name": "one", "effect": "allow", "tools": ["read_*"],
         "rate": {"max": 1, "per_seconds": 60}},
        two.clone(),
    ])));
    differs(rules(json!([
        {"name": "one", "effect": "ask", "tools": ["read_*"]},
        two,
    ])));
}

#[test]
fn a_rule_a_decision_and_a_call_read_plainly_in_debug_without_parameter_values() {
    let set = rules(json!([
        {"name": "small", "effect": "allow", "tools": ["transfer"],
         "where": [{"path": "amount", "op": "gte", "value": 0},
                   {"path": "amount", "op": "lte", "value": 100},
                   {"path": "to", "op": "matches", "value": "^acct-"}]},
    ]));
    let rule = format!("{:?}", set.rules()[0]);
    assert!(rule.contains("name: \"small\""), "{rule}");
    assert!(rule.contains("tools: [\"transfer\"]"), "{rule}");
    assert!(
        rule.contains("[`amount` gte 0, `amount` lte 100, `to` matches \"^acct-\"]"),
        "{rule}"
    );
    let params = json!({"amount": 5, "to": "acct-1"});
    let decision = format!("{:?}", set.evaluate(&call("transfer", &params)));
    assert_eq!(decision, "Ruling { effect: Allow, by: Rule(\"small\") }");
    let call = format!("{:?}", call("transfer", &params));
    assert_eq!(
        call,
        "Call { tool: \"transfer\", agent: \"agent-a\", owner: Some(\"alice\"), server: None, \
         annotations: None, .. }",
        "no parameter values"
    );
}

#[test]
fn a_servers_rule_matches_only_calls_to_a_server_it_names() {
    let set = rules(json!([
        {"name": "fs-reads", "effect": "allow", "tools": ["read_*"], "servers": ["fs", "db-*"]},
        {"name": "prod-db", "effect": "deny", "tools": ["*"], "servers": ["prod-db"]},
    ]));
    let ask = (Effect::Ask, None);
    assert_eq!(
        decide(&set, &mcp_call("read_file", Some("fs"), None)),
        by(Effect::Allow, "fs-reads")
    );
    assert_eq!(
        decide(&set, &mcp_call("read_rows", Some("db-staging"), None)),
        by(Effect::Allow, "fs-reads")
    );
    assert_eq!(decide(&set, &mcp_call("read_file", Some("git"), None)), ask);
    assert_eq!(
        decide(&set, &mcp_call("read_file", None, None)),
        ask,
        "a call naming no server never matches a rule that lists servers"
    );
    assert_eq!(
        decide(&set, &mcp_call("read_rows", Some("prod-db"), None)),
        by(Effect::Deny, "prod-db")
    );
    // A deny reads names in normal form, as for tools: `PROD-DB` is `prod-db`.
    assert_eq!(
        decide(&set, &mcp_call("read_rows", Some("PROD-DB"), None)),
        by(Effect::Deny, "prod-db")
    );
    // An allow reads them exactly.
    assert_eq!(decide(&set, &mcp_call("read_file", Some("FS"), None)), ask);
}

#[test]
fn an_annotations_rule_matches_only_calls_carrying_each_annotation_with_its_value() {
    let set = rules(json!([
        {"name": "reads", "effect": "allow", "tools": ["*"],
         "annotations": {"readOnlyHint": true}},
        {"name": "destructive", "effect": "deny", "tools": ["*"],
         "annotations": {"destructiveHint": true, "readOnlyHint": false}},
    ]));
    let ask = (Effect::Ask, None);
    let with = |a: Value| mcp_call("tool", Some("fs"), Some(a));
    assert_eq!(
        decide(
            &set,
            &with(json!({"readOnlyHint": true, "openWorldHint": false}))
        ),
        by(Effect::Allow, "reads")
    );
    assert_eq!(decide(&set, &with(json!({"readOnlyHint": false}))), ask);
    assert_eq!(decide(&set, &with(json!({}))), ask);
    assert_eq!(
        decide(&set, &mcp_call("tool", Some("fs"), None)),
        ask,
        "a call without annotations never matches a rule that lists some"
    );
    assert_eq!(
        decide(
            &set,
            &with(json!({"destructiveHint": true, "readOnlyHint": false}))
        ),
        by(Effect::Deny, "destructive")
    );
    assert_eq!(
        decide(&set, &with(json!({"destructiveHint": true}))),
        ask,
        "every listed annotation must be carried"
    );
}

#[test]
fn servers_and_annotations_are_refused_at_load_when_they_could_not_be_applied() {
    let refused = |rule: Value| refusal(json!([rule]));
    let base = |extra: Value| {
        let mut rule = json!({"name": "r", "effect": "allow", "tools": ["*"]});
        for (k, v) in extra.as_object().expect("an object") {
            rule[k] = v.clone();
        }
        rule
    };
    let not_bool = refused(base(json!({"annotations": {"readOnlyHint": "yes"}})));
    assert!(
        not_bool.starts_with("rule 'r': `annotations.readOnlyHint` is a string"),
        "{not_bool}"
    );
    let number = refused(base(json!({"annotations": {"readOnlyHint": 1}})));
    assert!(number.contains("is a number"), "{number}");
    assert!(refused(base(json!({"annotations": {}}))).contains("`annotations` is empty"));
    assert!(refused(base(json!({"annotations": {"": true}}))).contains("must not be empty"));
    assert!(refused(base(json!({"servers": []}))).contains("`servers` is an empty list"));
    let glob = refused(base(json!({"servers": ["db-[12]"]})));
    assert!(
        glob.starts_with("rule 'r': servers pattern \"db-[12]\""),
        "{glob}"
    );
    let shape = refused(base(json!({"annotations": true})));
    assert!(shape.starts_with("rule 'r': `annotations`"), "{shape}");
}

#[test]
fn the_fingerprint_changes_with_servers_and_annotations_and_not_without_them() {
    let plain = rules(json!([{"name": "r", "effect": "allow", "tools": ["*"]}]));
    let servers = rules(json!([
        {"name": "r", "effect": "allow", "tools": ["*"], "servers": ["fs"]}
    ]));
    let other = rules(json!([
        {"name": "r", "effect": "allow", "tools": ["*"], "servers": ["db"]}
    ]));
    let annotated = rules(json!([
        {"name": "r", "effect": "allow", "tools": ["*"], "annotations": {"readOnlyHint": true}}
    ]));
    let hashes = [&plain, &servers, &other, &annotated].map(|s| s.fingerprint().clone());
    for (i, a) in hashes.iter().enumerate() {
        for b in &hashes[i + 1..] {
            assert_ne!(a, b);
        }
    }
    // The canonical form of a rule without the new keys is what it was before them.
    assert_eq!(
        plain.fingerprint().as_str(),
        hex::encode(Sha256::digest(
            json!({"default": "ask", "rules": [{
                "name": "r", "effect": "allow", "tools": ["*"], "agents": null,
                "owners": null, "where": [], "rate": null, "reason": null,
            }]})
            .to_string()
        ))
    );
}
