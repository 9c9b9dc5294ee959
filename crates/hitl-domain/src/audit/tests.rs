//! The audit events' tests.

// The checks of a whole trail (`verify.rs`), tested here: the `kind` of each event
// they are given is written out, and `tests/docs.rs` reads these too.
use super::*;

/// A valid chain of `(confirmation id, kind, detail)` events.
fn trail(events: &[(&str, &str, &str)]) -> Vec<StoredRow> {
    let at = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
    let mut rows: Vec<StoredRow> = Vec::new();
    for (i, (id, kind, detail)) in events.iter().enumerate() {
        let seq = i as i64 + 1;
        let prev = rows
            .last()
            .map_or(GENESIS_HASH.to_owned(), |r| r.hash.clone());
        let hash = chain_hash(&prev, seq, at, Some(id), kind, "system", detail);
        rows.push(StoredRow {
            seq,
            at,
            confirmation_id: Some((*id).into()),
            kind: (*kind).into(),
            actor: "system".into(),
            detail_text: (*detail).into(),
            prev_hash: prev,
            hash,
        });
    }
    rows
}

fn stored(pairs: &[(&str, &str)]) -> Vec<StoredStatus> {
    pairs
        .iter()
        .map(|(id, status)| StoredStatus {
            id: (*id).into(),
            status: (*status).into(),
        })
        .collect()
}

fn lives() -> Vec<StoredRow> {
    trail(&[
        ("cf_a", "requested", "{}"),
        (
            "cf_a",
            "decided",
            r#"{"button":"approve","status":"confirmed"}"#,
        ),
        ("cf_b", "requested", "{}"),
        ("cf_b", "timeout", r#"{"reason":"r","status":"timeout"}"#),
        ("cf_c", "requested", "{}"),
        (
            "cf_d",
            "window_hit",
            r#"{"reason":"w","status":"confirmed"}"#,
        ),
    ])
}

#[test]
fn statuses_that_match_their_decisions_pass() {
    let statuses = stored(&[
        ("cf_a", "confirmed"),
        ("cf_b", "timeout"),
        ("cf_c", "pending"),
        ("cf_d", "confirmed"),
    ]);
    assert_eq!(cross_check(&lives(), &statuses), vec![]);
    let report = check(&lives(), &statuses, None);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!((report.events, report.ended), (6, 3));
}

#[test]
fn a_status_changed_behind_the_trails_back_is_named_with_both_statuses() {
    let statuses = stored(&[
        ("cf_a", "cancelled"),
        ("cf_b", "timeout"),
        ("cf_c", "confirmed"),
        ("cf_d", "pending"),
    ]);
    let drift = cross_check(&lives(), &statuses);
    assert_eq!(
        drift,
        vec![
            Drift::Mismatch {
                id: "cf_a".into(),
                stored: "cancelled".into(),
                seq: 2,
                kind: "decided".into(),
                recorded: "confirmed",
            },
            Drift::Undecided {
                id: "cf_c".into(),
                stored: "confirmed".into(),
            },
            Drift::Mismatch {
                id: "cf_d".into(),
                stored: "pending".into(),
                seq: 6,
                kind: "window_hit".into(),
                recorded: "confirmed",
            },
        ]
    );
    let text = drift[0].to_string();
    assert!(
        text.contains("cf_a") && text.contains("'cancelled'") && text.contains("'confirmed'"),
        "{text}"
    );
}

#[test]
fn events_written_before_they_named_the_status_imply_it_by_kind() {
    let rows = trail(&[
        ("cf_w", "window_hit", r#"{"reason":"w"}"#),
        ("cf_x", "withdrawn", "{}"),
        ("cf_f", "fail_closed", r#"{"reason":"blocked"}"#),
        ("cf_t", "timeout", r#"{"reason":"late"}"#),
        (
            "cf_i",
            "answered",
            r#"{"default":true,"respondent":"system"}"#,
        ),
        ("cf_i", "timeout", r#"{"reason":"late"}"#),
    ]);
    let statuses = stored(&[
        ("cf_w", "confirmed"),
        ("cf_x", "cancelled"),
        ("cf_f", "cancelled"),
        ("cf_t", "timeout"),
        ("cf_i", "completed"),
    ]);
    assert_eq!(cross_check(&rows, &statuses), vec![]);
    let changed = stored(&[
        ("cf_w", "confirmed"),
        ("cf_x", "confirmed"),
        ("cf_f", "cancelled"),
        ("cf_t", "timeout"),
        ("cf_i", "timeout"),
    ]);
    let drift = cross_check(&rows, &changed);
    assert_eq!(drift.len(), 2, "{drift:?}");
    assert!(matches!(&drift[0], Drift::Mismatch { id, recorded: "cancelled", .. } if id == "cf_x"));
    assert!(matches!(&drift[1], Drift::Mismatch { id, recorded: "completed", .. } if id == "cf_i"));
}

#[test]
fn a_double_decision_an_unreadable_one_and_a_vanished_request_are_reported() {
    let rows = trail(&[
        ("cf_a", "decided", r#"{"status":"confirmed"}"#),
        ("cf_a", "decided", r#"{"status":"cancelled"}"#),
        ("cf_u", "decided", r#"{"button":"approve"}"#),
        ("cf_gone", "timeout", r#"{"status":"timeout"}"#),
    ]);
    let drift = cross_check(
        &rows,
        &stored(&[("cf_a", "confirmed"), ("cf_u", "confirmed")]),
    );
    assert_eq!(
        drift,
        vec![
            Drift::Twice {
                id: "cf_a".into(),
                first: 1,
                second: 2
            },
            Drift::Unreadable {
                id: "cf_u".into(),
                seq: 3,
                kind: "decided".into()
            },
            Drift::Vanished {
                id: "cf_gone".into(),
                seq: 4,
                kind: "timeout".into()
            },
        ]
    );
}

#[test]
fn a_broken_chain_has_no_head_and_is_reported_first() {
    let mut rows = lives();
    rows[1].detail_text = r#"{"button":"approve","status":"cancelled"}"#.into();
    let expected = Head::new(6, &rows[5].hash).unwrap();
    let statuses = stored(&[
        ("cf_a", "cancelled"),
        ("cf_b", "timeout"),
        ("cf_d", "confirmed"),
    ]);
    let report = check(&rows, &statuses, Some(&expected));
    assert_eq!(report.head, None);
    assert!(
        matches!(&report.problems[..], [Problem::Broken(b)] if b.seq == 2),
        "{:?}",
        report.problems
    );
}
