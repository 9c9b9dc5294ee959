use super::*;

fn base(kind: &str) -> Value {
    json!({"interaction_id": "i-1", "question": "Deploy?", "interaction_type": kind})
}

#[test]
fn parses_a_minimal_approval_with_ai_parrot_defaults() {
    let i = parse(&base("approval"), 86400.0).unwrap();
    assert_eq!(i.kind, InteractionType::Approval);
    assert_eq!(i.consensus, ConsensusMode::FirstResponse);
    assert_eq!(i.timeout_action, TimeoutAction::Cancel);
    assert_eq!(i.timeout, DEFAULT_TIMEOUT);
}

#[test]
fn choice_questions_need_options_with_unique_keys() {
    let e = parse(&base("single_choice"), 60.0).unwrap_err();
    assert_eq!(e.field, "interaction.options");
    let mut v = base("poll");
    v["options"] = json!([{"key": "a", "label": "A"}, {"key": "a", "label": "B"}]);
    assert_eq!(
        parse(&v, 60.0).unwrap_err().field,
        "interaction.options[1].key"
    );
}

#[test]
fn an_interaction_id_no_path_can_carry_is_refused_naming_it() {
    for id in [".", ".."] {
        let v = json!({"interaction_id": id, "question": "q"});
        let e = parse(&v, 3600.0).unwrap_err();
        assert_eq!(e.field, "interaction.interaction_id", "{id}");
        assert!(e.reason.contains("URL path"), "{}", e.reason);
    }
    let v = json!({"interaction_id": "a/b?c#d%e...", "question": "q"});
    assert!(parse(&v, 3600.0).is_ok());
}

#[test]
fn unknown_enum_values_name_the_field() {
    let mut v = base("approval");
    v["consensus_mode"] = json!("unanimous");
    assert_eq!(
        parse(&v, 60.0).unwrap_err().field,
        "interaction.consensus_mode"
    );
    let v = base("telepathy");
    assert_eq!(
        parse(&v, 60.0).unwrap_err().field,
        "interaction.interaction_type"
    );
}

#[test]
fn form_values_come_from_current_values_else_defaults() {
    let mut v = base("form");
    v["form_schema"] =
        json!({"current_values": {"path": "/x"}, "properties": {"y": {"default": 1}}});
    assert_eq!(
        parse(&v, 60.0).unwrap().form_values,
        *json!({"path": "/x"}).as_object().unwrap()
    );
    v["form_schema"] = json!({"properties": {"y": {"default": 1}, "z": {}}});
    assert_eq!(
        parse(&v, 60.0).unwrap().form_values,
        *json!({"y": 1, "z": null}).as_object().unwrap()
    );
}

#[test]
fn timeouts_beyond_the_configured_cap_are_shortened_to_it() {
    let mut v = base("approval");
    v["timeout"] = json!(120.5);
    assert_eq!(
        parse(&v, 3600.0).unwrap().timeout,
        Duration::from_millis(120_500)
    );
    v["timeout"] = json!(7200.0);
    assert_eq!(
        parse(&v, 3600.0).unwrap().timeout,
        Duration::from_secs(3600)
    );
    v["timeout"] = json!(0);
    assert_eq!(parse(&v, 3600.0).unwrap_err().field, "interaction.timeout");
    v["timeout"] = json!("soon");
    assert!(parse(&v, 3600.0).is_err());
}

#[test]
fn a_refusal_answers_with_the_no_of_the_questions_type_or_not_at_all() {
    let at = time::macros::datetime!(2026-12-01 12:00 UTC);
    let refuse = |item: Value| refusal_response(&item, "alice", "why", at);
    for (kind, response_type, value) in [
        ("approval", "approval", json!(false)),
        ("multi_choice", "multi_choice", json!([])),
        ("form", "free_text", Value::Null),
        ("poll", "poll", Value::Null),
        ("nonsense", "free_text", Value::Null),
    ] {
        let r = refuse(json!({"interaction_id": "i-1", "interaction_type": kind})).unwrap();
        assert_eq!(r["response_type"], response_type, "{kind}");
        assert_eq!(r["value"], value, "{kind}");
        assert_eq!(r["respondent"], "alice");
        assert_eq!(r["metadata"]["refused"], true);
        assert_eq!(
            r["metadata"]["reason"],
            "refused by hitl-telegram and never asked: why"
        );
        let fields: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            fields,
            [
                "interaction_id",
                "metadata",
                "respondent",
                "response_type",
                "timestamp",
                "value"
            ]
        );
    }
    // Nothing to answer: no id, or not even an object.
    assert_eq!(refuse(json!({"interaction_type": "approval"})), None);
    assert_eq!(refuse(json!({"interaction_id": ""})), None);
    assert_eq!(refuse(json!({"interaction_id": 7})), None);
    assert_eq!(refuse(json!(["interaction_id"])), None);
}

#[test]
fn first_response_settles_on_the_first_answer() {
    let c = consensus(ConsensusMode::FirstResponse, &[json!(false)], 3, None);
    assert_eq!(c, Consensus::Settled(json!(false)));
    assert_eq!(
        consensus(ConsensusMode::FirstResponse, &[], 3, None),
        Consensus::Open
    );
}

#[test]
fn all_required_waits_for_everyone_and_closes_early_on_a_conflict() {
    let m = ConsensusMode::AllRequired;
    assert_eq!(consensus(m, &[json!(true)], 2, None), Consensus::Open);
    assert_eq!(
        consensus(m, &[json!(true), json!(true)], 2, None),
        Consensus::Settled(json!(true))
    );
    assert!(matches!(
        consensus(m, &[json!(true), json!(false)], 3, None),
        Consensus::NoAgreement(_)
    ));
}

#[test]
fn majority_settles_as_soon_as_a_value_has_more_than_half() {
    let m = ConsensusMode::Majority;
    assert_eq!(consensus(m, &[json!("a")], 3, None), Consensus::Open);
    assert_eq!(
        consensus(m, &[json!("a"), json!("a")], 3, None),
        Consensus::Settled(json!("a"))
    );
    assert!(matches!(
        consensus(m, &[json!("a"), json!("b"), json!("c")], 3, None),
        Consensus::NoAgreement(_)
    ));
}

#[test]
fn quorum_counts_matching_answers_and_multi_choice_compares_as_sets() {
    let m = ConsensusMode::Quorum;
    let ab = json!(["a", "b"]);
    let ba = json!(["b", "a"]);
    assert_eq!(
        consensus(m, std::slice::from_ref(&ab), 5, Some(2)),
        Consensus::Open
    );
    assert_eq!(
        consensus(m, &[ab.clone(), ba], 5, Some(2)),
        Consensus::Settled(ab)
    );
}

#[test]
fn human_response_has_exactly_ai_parrots_fields() {
    let at = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
    let a = Answer {
        respondent: "alice".into(),
        by: Some(Operator {
            id: 111,
            username: None,
            name: "Alice".into(),
        }),
        value: json!(true),
        is_default: false,
        once: false,
        reason: None,
        at,
    };
    let r = human_response("i-1", InteractionType::Approval, &a, None);
    let keys: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "interaction_id",
            "metadata",
            "respondent",
            "response_type",
            "timestamp",
            "value"
        ]
    );
    assert_eq!(r["timestamp"], "2027-01-15T08:00:00.000000Z");
}
