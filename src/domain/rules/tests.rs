//! The engine as the configuration will use it: rule sets read from values and refused
//! with their rule's name. (Patterns and conditions alone are tested in their modules.)

use serde_json::{Value, json};

use super::*;

fn rules(rules: Value) -> RuleSet {
    let list = rules.as_array().expect("a list of rules").clone();
    RuleSet::from_values(&list, None).unwrap_or_else(|e| panic!("refused: {e}"))
}

/// The message a set is refused with.
fn refusal(rules: Value) -> String {
    let list = rules.as_array().expect("a list of rules").clone();
    match RuleSet::from_values(&list, None) {
        Ok(set) => panic!("accepted: {set:?}"),
        Err(e) => e.to_string(),
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
    assert_eq!(point.rules()[0].conditions().len(), 3);
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
