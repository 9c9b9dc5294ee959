//! Telegram outages, in the store, on both backends: at most one open (two stores on
//! one database, as two leaders, begin it once), its beginning and end each stored once
//! with its audit event and its alert, the alerts due and their attempts recorded, and
//! an open outage read back by a reopened store.

use std::time::Duration;

use hitl_telegram::domain::audit;
use hitl_telegram::domain::ids::{DeliveryId, OutageId};
use hitl_telegram::domain::outage::{AlertKind, Outage};
use hitl_telegram::service::now;
use hitl_telegram::storage::{DeliveryAttempt, NewAlert};

use crate::stores::{TestDb, on_both_backends};

on_both_backends! {
    one_outage_is_open_at_a_time_and_each_moment_is_stored_once_with_its_alert,
    an_alert_is_retried_until_delivered_and_audited_once,
}

fn alert(kind: AlertKind) -> NewAlert {
    NewAlert {
        delivery_id: DeliveryId::generate(),
        kind,
        url: "http://127.0.0.1:9/alerts".into(),
        body: format!(r#"{{"event":"{}"}}"#, kind.as_str()),
    }
}

fn outage() -> Outage {
    Outage {
        id: OutageId::generate(),
        // Milliseconds, as stored.
        since: now().replace_millisecond(0).unwrap() - Duration::from_secs(300),
    }
}

async fn one_outage_is_open_at_a_time_and_each_moment_is_stored_once_with_its_alert(db: TestDb) {
    let (a, b) = (db.store().await, db.store().await);
    let (first, second) = (outage(), outage());
    let t = now();
    let (e1, e2) = (
        audit::telegram_outage_started(&first, "refused", 2, t),
        audit::telegram_outage_started(&second, "refused", 2, t),
    );
    let (a1, a2) = (alert(AlertKind::Began), alert(AlertKind::Began));
    let (x, y) = tokio::join!(
        a.begin_outage(&first, &e1, Some(&a1), t),
        b.begin_outage(&second, &e2, Some(&a2), t),
    );
    let (x, y) = (x.unwrap(), y.unwrap());
    assert!(x ^ y, "exactly one leader begins it: {x} {y}");
    let open = a.open_outage().await.unwrap().expect("open");
    assert_eq!(open, if x { first.clone() } else { second.clone() });
    // A store opened anew (a restarted leader) reads the same one back.
    let reopened = db.store().await;
    assert_eq!(reopened.open_outage().await.unwrap(), Some(open.clone()));

    let ended = audit::telegram_outage_ended(&open, 1, t);
    let end_alert = alert(AlertKind::Ended);
    assert!(
        a.end_outage(&open, &ended, Some(&end_alert), t)
            .await
            .unwrap()
    );
    assert!(
        !b.end_outage(&open, &ended, Some(&alert(AlertKind::Ended)), t)
            .await
            .unwrap(),
        "ended once"
    );
    assert_eq!(a.open_outage().await.unwrap(), None);

    let due = a.due_alerts(now(), 10).await.unwrap();
    let kinds: Vec<&str> = due.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["telegram_outage_started", "telegram_outage_ended"]);
    assert!(due.iter().all(|e| e.outage_id == open.id));
    assert_eq!(due[1].delivery_id, end_alert.delivery_id);
    assert_eq!(due[1].body, end_alert.body);

    let rows = a.audit_rows(None).await.unwrap();
    audit::verify(&rows).expect("the audit chain holds");
    let kinds: Vec<&str> = rows.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(kinds, ["telegram_outage_started", "telegram_outage_ended"]);
}

async fn an_alert_is_retried_until_delivered_and_audited_once(db: TestDb) {
    let s = db.store().await;
    let o = outage();
    let t = now();
    let event = audit::telegram_outage_started(&o, "refused", 0, t);
    assert!(
        s.begin_outage(&o, &event, Some(&alert(AlertKind::Began)), t)
            .await
            .unwrap()
    );
    let entry = s.due_alerts(t, 10).await.unwrap().remove(0);
    let later = t + Duration::from_secs(60);
    let retry = DeliveryAttempt::Retry {
        next_at: later,
        error: "receiver answered HTTP 503".into(),
    };
    s.alert_attempted(&entry, retry, t).await.unwrap();
    assert!(s.due_alerts(t, 10).await.unwrap().is_empty(), "not yet due");
    assert_eq!(
        s.next_alert_due_after(t)
            .await
            .unwrap()
            .map(|d| d.unix_timestamp()),
        Some(later.unix_timestamp())
    );
    let again = s.due_alerts(later, 10).await.unwrap().remove(0);
    assert_eq!(again.attempts, 1);
    s.alert_attempted(&again, DeliveryAttempt::Delivered, later)
        .await
        .unwrap();
    // A second record of the same attempt (another worker) changes nothing.
    s.alert_attempted(&again, DeliveryAttempt::Delivered, later)
        .await
        .unwrap();
    assert!(s.due_alerts(later, 10).await.unwrap().is_empty());
    assert_eq!(s.next_alert_due_after(t).await.unwrap(), None);
    let rows = s.audit_rows(None).await.unwrap();
    let kinds: Vec<&str> = rows.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(kinds, ["telegram_outage_started", "outage_alert_delivered"]);
}
