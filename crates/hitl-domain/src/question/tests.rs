use super::*;

fn op() -> Operator {
    Operator {
        id: 7,
        username: Some("alice".into()),
        name: "Alice".into(),
    }
}

#[test]
fn each_outcome_maps_to_one_status_and_via() {
    let at = OffsetDateTime::UNIX_EPOCH;
    let d = Ending::Approved {
        by: op(),
        once: false,
    }
    .decide(at);
    assert_eq!((d.status, d.via), (Status::Confirmed, Via::Operator));
    assert_eq!(d.reason, "approved by Alice (@alice)");
    let d = Ending::Cancelled(op()).decide(at);
    assert_eq!((d.status, d.via), (Status::Cancelled, Via::Operator));
    let d = Ending::TimedOut {
        after: Duration::from_secs(120),
    }
    .decide(at);
    assert_eq!((d.status, d.via), (Status::Timeout, Via::Timeout));
    assert!(d.reason.contains("2 min"), "{}", d.reason);
    let d = Ending::Withdrawn.decide(at);
    assert_eq!((d.status, d.via), (Status::Cancelled, Via::Withdrawn));
    let d = Ending::FailedClosed {
        reason: "chat not found".into(),
    }
    .decide(at);
    assert_eq!((d.status, d.via), (Status::Cancelled, Via::FailClosed));
    assert!(d.reason.contains("chat not found"));
}

#[test]
fn durations_read_naturally() {
    assert_eq!(human_duration(Duration::from_secs(120)), "2 min");
    assert_eq!(human_duration(Duration::from_secs(90)), "90 s");
    assert_eq!(human_duration(Duration::from_millis(1500)), "1.5 s");
    assert_eq!(human_duration(Duration::from_millis(250)), "0.25 s");
}

#[test]
fn times_print_as_rfc3339_utc_with_milliseconds() {
    let t = OffsetDateTime::from_unix_timestamp_nanos(1_700_000_000_123_000_000).unwrap();
    assert_eq!(rfc3339(t), "2023-11-14T22:13:20.123Z");
}

#[test]
fn statuses_and_vias_round_trip_through_their_names() {
    for s in [
        Status::Pending,
        Status::Confirmed,
        Status::Cancelled,
        Status::Timeout,
        Status::Completed,
    ] {
        assert_eq!(Status::parse(s.as_str()), Some(s));
    }
    for v in [
        Via::Operator,
        Via::Window,
        Via::Timeout,
        Via::Withdrawn,
        Via::FailClosed,
    ] {
        assert_eq!(Via::parse(v.as_str()), Some(v));
    }
}
