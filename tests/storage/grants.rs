//! Grants in the store, every behaviour on both backends (as `stores.rs` runs its tests:
//! `sqlite::…`, `postgres::…`): stored and read back, covering a call's scope (exactly
//! or by `tool:*`) for its agent and owner only, expiry, revoking once, an interaction or
//! a grant question used once (also by two stores on one database, as two replicas), and
//! what another store or a reopened one sees.

use std::sync::Arc;
use std::time::Duration;

use hitl_telegram::domain::grant::{Grant, GrantSource, Scope};
use hitl_telegram::domain::ids::{GrantId, OwnerId, ToolName};
use hitl_telegram::domain::question::{Ending, Operator, Question};
use hitl_telegram::service::now;
use hitl_telegram::storage::{GrantInserted, Store};
use time::OffsetDateTime;

use crate::stores::{TestDb, on_both_backends, op, pending};

on_both_backends! {
    a_grant_reads_back_exactly_as_written,
    a_grant_covers_its_own_scope_and_a_wildcard_covers_every_tool,
    a_grant_covers_no_other_tool_owner_or_agent,
    of_several_covering_grants_the_one_expiring_last_answers,
    a_grant_stops_covering_when_it_expires,
    a_revoked_grant_stops_covering_at_once_and_is_revoked_only_once,
    an_agent_revokes_only_its_own_grants_and_an_operator_any,
    of_revokes_from_two_stores_at_once_exactly_one_revokes,
    an_interaction_becomes_a_grant_once_per_agent,
    of_two_stores_storing_one_interaction_at_once_exactly_one_succeeds,
    a_grant_question_becomes_one_grant,
    a_yes_to_a_grant_question_stores_its_grant_in_the_same_write,
    live_grants_are_listed_by_agent_and_route_soonest_expiry_first,
    grants_survive_reopening_the_store_and_a_revoke_is_seen_by_another_store,
}

fn scope(s: &str) -> Scope {
    Scope::parse(s).unwrap()
}

fn owner(s: &str) -> OwnerId {
    OwnerId::parse(s).unwrap()
}

/// The scope a call of `tool` asks for.
fn call(tool: &str) -> Scope {
    Scope::for_tool(&ToolName::parse(tool).unwrap())
}

/// A live grant of `agent` for `owner` in `scope`, granted now on route `ops` for an
/// hour, from the interaction `interaction_id`.
fn granted(agent: &str, owner_id: &str, scope_text: &str, interaction_id: &str) -> Grant {
    let t = now();
    Grant {
        grant_id: GrantId::generate(),
        agent: agent.into(),
        owner_id: owner(owner_id),
        scope: scope(scope_text),
        route: "ops".into(),
        reason: None,
        granted_by: op(7),
        created_at: t,
        expires_at: t + Duration::from_secs(3600),
        revoked_at: None,
        revoked_by: None,
        source: GrantSource::Interaction {
            interaction_id: interaction_id.into(),
        },
    }
}

/// Stores `g`, which must be new; returns it.
async fn store_new(s: &dyn Store, g: Grant) -> Grant {
    assert_eq!(
        s.insert_grant(&g).await.unwrap(),
        GrantInserted::New(g.clone())
    );
    g
}

/// The grant covering `scope` for `agent` and `owner_id` at `at`, by its id.
async fn covering(
    s: &dyn Store,
    agent: &str,
    owner_id: &str,
    asked: &Scope,
    at: OffsetDateTime,
) -> Option<GrantId> {
    s.live_grant_covering(agent, &owner(owner_id), asked, at)
        .await
        .unwrap()
        .map(|g| g.grant_id)
}

async fn a_grant_reads_back_exactly_as_written(db: TestDb) {
    let s = db.store().await;
    // A grant question (a stored question the grant names), with every field set.
    let question = pending(None);
    s.insert(&question, now()).await.unwrap();
    let asked = Grant {
        reason: Some("nightly deploys".into()),
        granted_by: Operator {
            id: 1_234_567_890_123,
            username: Some("alice".into()),
            name: "Alice Ö".into(),
        },
        source: GrantSource::Asked {
            confirmation_id: question.id.clone(),
        },
        ..granted("agent", "alice", "tool:deploy", "unused")
    };
    let asked = store_new(&*s, asked).await;
    assert_eq!(s.grant(&asked.grant_id).await.unwrap(), Some(asked.clone()));
    let presented = store_new(&*s, granted("agent", "bob", "tool:*", "i-1")).await;
    assert_eq!(s.grant(&presented.grant_id).await.unwrap(), Some(presented));
    assert_eq!(s.grant(&GrantId::generate()).await.unwrap(), None);
}

async fn a_grant_covers_its_own_scope_and_a_wildcard_covers_every_tool(db: TestDb) {
    let s = db.store().await;
    let deploy = store_new(&*s, granted("agent", "alice", "tool:deploy", "i-1")).await;
    let every = store_new(&*s, granted("agent", "bob", "tool:*", "i-2")).await;
    let t = now();
    assert_eq!(
        covering(&*s, "agent", "alice", &call("deploy"), t).await,
        Some(deploy.grant_id)
    );
    for tool in ["deploy", "drop_table", "x"] {
        assert_eq!(
            covering(&*s, "agent", "bob", &call(tool), t).await,
            Some(every.grant_id.clone()),
            "{tool}"
        );
    }
    // Asking for every tool is covered by a grant of every tool only.
    assert_eq!(
        covering(&*s, "agent", "bob", &scope("tool:*"), t).await,
        Some(every.grant_id.clone())
    );
    assert_eq!(
        covering(&*s, "agent", "alice", &scope("tool:*"), t).await,
        None
    );
    // Another kind is not a tool.
    assert_eq!(
        covering(&*s, "agent", "bob", &scope("resource:deploy"), t).await,
        None
    );
}

async fn a_grant_covers_no_other_tool_owner_or_agent(db: TestDb) {
    let s = db.store().await;
    store_new(&*s, granted("agent", "alice", "tool:deploy", "i-1")).await;
    let t = now();
    for (agent, owner_id, tool) in [
        ("agent", "alice", "drop_table"),
        ("agent", "alice", "deploy_all"),
        ("agent", "alice", "Deploy"),
        ("agent", "bob", "deploy"),
        ("other-agent", "alice", "deploy"),
    ] {
        assert_eq!(
            covering(&*s, agent, owner_id, &call(tool), t).await,
            None,
            "{agent} {owner_id} {tool}"
        );
    }
}

async fn of_several_covering_grants_the_one_expiring_last_answers(db: TestDb) {
    let s = db.store().await;
    let t = now();
    let short = granted("agent", "alice", "tool:*", "i-1");
    let long = Grant {
        expires_at: t + Duration::from_secs(7200),
        ..granted("agent", "alice", "tool:deploy", "i-2")
    };
    let middle = Grant {
        expires_at: t + Duration::from_secs(5400),
        ..granted("agent", "alice", "tool:*", "i-3")
    };
    for g in [&short, &long, &middle] {
        store_new(&*s, g.clone()).await;
    }
    assert_eq!(
        covering(&*s, "agent", "alice", &call("deploy"), t).await,
        Some(long.grant_id)
    );
    assert_eq!(
        covering(&*s, "agent", "alice", &call("restart"), t).await,
        Some(middle.grant_id)
    );
}

async fn a_grant_stops_covering_when_it_expires(db: TestDb) {
    let s = db.store().await;
    let g = store_new(&*s, granted("agent", "alice", "tool:deploy", "i-1")).await;
    let last = g.expires_at - Duration::from_millis(1);
    assert_eq!(
        covering(&*s, "agent", "alice", &call("deploy"), last).await,
        Some(g.grant_id.clone())
    );
    assert_eq!(
        covering(&*s, "agent", "alice", &call("deploy"), g.expires_at).await,
        None,
        "a grant has ended at its expiry"
    );
    assert!(
        s.live_grants(None, None, g.expires_at)
            .await
            .unwrap()
            .is_empty()
    );
    // Still there to read, as it was.
    assert_eq!(s.grant(&g.grant_id).await.unwrap(), Some(g));
}

async fn a_revoked_grant_stops_covering_at_once_and_is_revoked_only_once(db: TestDb) {
    let s = db.store().await;
    let g = store_new(&*s, granted("agent", "alice", "tool:*", "i-1")).await;
    let at = now();
    let revoked = s
        .revoke_grant(&g.grant_id, None, Some(&op(2)), at)
        .await
        .unwrap()
        .expect("a live grant is revoked");
    assert_eq!(
        revoked,
        Grant {
            revoked_at: Some(at),
            revoked_by: Some(op(2)),
            ..g.clone()
        }
    );
    assert!(!revoked.is_live(at));
    assert_eq!(s.grant(&g.grant_id).await.unwrap(), Some(revoked.clone()));
    assert_eq!(
        covering(&*s, "agent", "alice", &call("deploy"), at).await,
        None
    );
    assert!(s.live_grants(None, None, at).await.unwrap().is_empty());
    // A second revoke (by the agent, by another operator) changes nothing.
    assert_eq!(
        s.revoke_grant(&g.grant_id, Some("agent"), None, at)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        s.revoke_grant(&g.grant_id, None, Some(&op(3)), at)
            .await
            .unwrap(),
        None
    );
    assert_eq!(s.grant(&g.grant_id).await.unwrap(), Some(revoked));
    // An expired grant or an unknown id: nothing to revoke.
    let ended = store_new(&*s, granted("agent", "alice", "tool:x", "i-2")).await;
    assert_eq!(
        s.revoke_grant(&ended.grant_id, None, Some(&op(2)), ended.expires_at)
            .await
            .unwrap(),
        None
    );
    assert_eq!(s.grant(&ended.grant_id).await.unwrap(), Some(ended));
    assert_eq!(
        s.revoke_grant(&GrantId::generate(), None, Some(&op(2)), at)
            .await
            .unwrap(),
        None
    );
}

async fn an_agent_revokes_only_its_own_grants_and_an_operator_any(db: TestDb) {
    let s = db.store().await;
    let mine = store_new(&*s, granted("agent", "alice", "tool:deploy", "i-1")).await;
    let at = now();
    assert_eq!(
        s.revoke_grant(&mine.grant_id, Some("other-agent"), None, at)
            .await
            .unwrap(),
        None,
        "another agent's grant is none of its business"
    );
    assert!(
        covering(&*s, "agent", "alice", &call("deploy"), at)
            .await
            .is_some()
    );
    let revoked = s
        .revoke_grant(&mine.grant_id, Some("agent"), None, at)
        .await
        .unwrap()
        .expect("its own");
    assert_eq!((revoked.revoked_at, revoked.revoked_by), (Some(at), None));
    let theirs = store_new(&*s, granted("other-agent", "alice", "tool:x", "i-1")).await;
    assert!(
        s.revoke_grant(&theirs.grant_id, None, Some(&op(5)), at)
            .await
            .unwrap()
            .is_some(),
        "an operator revokes any agent's grant"
    );
}

async fn of_revokes_from_two_stores_at_once_exactly_one_revokes(db: TestDb) {
    let stores: Vec<Arc<dyn Store>> = vec![db.store().await, db.store().await];
    let g = store_new(&*stores[0], granted("agent", "alice", "tool:*", "i-1")).await;
    let mut tasks = Vec::new();
    for i in 0..8u64 {
        let s = stores[i as usize % 2].clone();
        let id = g.grant_id.clone();
        tasks.push(tokio::spawn(async move {
            s.revoke_grant(&id, None, Some(&op(i)), now())
                .await
                .unwrap()
        }));
    }
    let mut revoked = Vec::new();
    for t in tasks {
        revoked.extend(t.await.unwrap());
    }
    assert_eq!(revoked.len(), 1, "{revoked:?}");
    for s in &stores {
        assert_eq!(
            s.grant(&g.grant_id).await.unwrap().as_ref(),
            revoked.first()
        );
    }
}

async fn an_interaction_becomes_a_grant_once_per_agent(db: TestDb) {
    let s = db.store().await;
    let first = store_new(&*s, granted("agent", "alice", "tool:deploy", "i-1")).await;
    // Presented again, even for another scope or owner, or once the grant is revoked.
    s.revoke_grant(&first.grant_id, None, Some(&op(2)), now())
        .await
        .unwrap();
    let again = granted("agent", "bob", "tool:*", "i-1");
    assert_eq!(
        s.insert_grant(&again).await.unwrap(),
        GrantInserted::InteractionUsed
    );
    assert_eq!(s.grant(&again.grant_id).await.unwrap(), None);
    // Interaction ids are the agent's own: another agent's "i-1" is another one.
    store_new(&*s, granted("other-agent", "alice", "tool:deploy", "i-1")).await;
}

async fn of_two_stores_storing_one_interaction_at_once_exactly_one_succeeds(db: TestDb) {
    let stores: Vec<Arc<dyn Store>> = vec![db.store().await, db.store().await];
    let mut tasks = Vec::new();
    for i in 0..8 {
        let s = stores[i % 2].clone();
        tasks.push(tokio::spawn(async move {
            let g = granted("agent", "alice", "tool:*", "raced");
            s.insert_grant(&g).await.unwrap()
        }));
    }
    let mut new = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            GrantInserted::New(g) => new.push(g),
            GrantInserted::InteractionUsed => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(new.len(), 1, "{new:?}");
    for s in &stores {
        assert_eq!(
            s.live_grants(Some("agent"), None, now()).await.unwrap(),
            new
        );
    }
}

async fn a_grant_question_becomes_one_grant(db: TestDb) {
    let s = db.store().await;
    let question = pending(None);
    s.insert(&question, now()).await.unwrap();
    let asked = |interaction| Grant {
        source: GrantSource::Asked {
            confirmation_id: question.id.clone(),
        },
        ..granted("agent", "alice", "tool:deploy", interaction)
    };
    let first = store_new(&*s, asked("unused")).await;
    // The same approval applied again (a restart redoing it): the grant it made.
    let again = asked("unused");
    assert_eq!(
        s.insert_grant(&again).await.unwrap(),
        GrantInserted::Existing(first.clone())
    );
    assert_eq!(s.grant(&again.grant_id).await.unwrap(), None);
    assert_eq!(s.live_grants(None, None, now()).await.unwrap(), vec![first]);
}

async fn live_grants_are_listed_by_agent_and_route_soonest_expiry_first(db: TestDb) {
    let s = db.store().await;
    let t = now();
    let lasting = |agent: &str, route: &str, secs: u64, interaction: &str| Grant {
        route: route.into(),
        expires_at: t + Duration::from_secs(secs),
        ..granted(agent, "alice", "tool:*", interaction)
    };
    let a_ops_late = store_new(&*s, lasting("a", "ops", 300, "i-1")).await;
    let a_ops_soon = store_new(&*s, lasting("a", "ops", 100, "i-2")).await;
    let a_dev = store_new(&*s, lasting("a", "dev", 200, "i-3")).await;
    let b_ops = store_new(&*s, lasting("b", "ops", 150, "i-1")).await;
    let revoked = store_new(&*s, lasting("a", "ops", 250, "i-4")).await;
    s.revoke_grant(&revoked.grant_id, None, Some(&op(1)), t)
        .await
        .unwrap();
    let ids = |grants: Vec<Grant>| grants.into_iter().map(|g| g.grant_id).collect::<Vec<_>>();
    let listed = |agent, route| {
        let s = s.clone();
        async move { ids(s.live_grants(agent, route, t).await.unwrap()) }
    };
    let late = a_ops_late.grant_id.clone();
    assert_eq!(
        listed(None, None).await,
        ids(vec![
            a_ops_soon.clone(),
            b_ops.clone(),
            a_dev.clone(),
            a_ops_late.clone()
        ])
    );
    assert_eq!(
        listed(Some("a"), None).await,
        ids(vec![a_ops_soon.clone(), a_dev, a_ops_late.clone()])
    );
    assert_eq!(
        listed(None, Some("ops")).await,
        ids(vec![a_ops_soon.clone(), b_ops, a_ops_late.clone()])
    );
    assert_eq!(
        listed(Some("a"), Some("ops")).await,
        ids(vec![a_ops_soon, a_ops_late])
    );
    assert!(listed(Some("c"), None).await.is_empty());
    // Later, only what is still live (the grant expiring then has ended).
    let later = t + Duration::from_secs(200);
    assert_eq!(
        ids(s.live_grants(None, None, later).await.unwrap()),
        vec![late]
    );
}

async fn grants_survive_reopening_the_store_and_a_revoke_is_seen_by_another_store(db: TestDb) {
    let s = db.store().await;
    let g = store_new(&*s, granted("agent", "alice", "tool:deploy", "i-1")).await;
    s.close().await;
    drop(s);
    // Reopened (the service restarted): the grant still lets the call through.
    let first = db.store().await;
    assert_eq!(first.grant(&g.grant_id).await.unwrap(), Some(g.clone()));
    assert_eq!(
        covering(&*first, "agent", "alice", &call("deploy"), now()).await,
        Some(g.grant_id.clone())
    );
    // Another store on the same database (another replica) revokes it: the first stops
    // letting calls through at once, with nothing cached to go stale.
    let second = db.store().await;
    second
        .revoke_grant(&g.grant_id, Some("agent"), None, now())
        .await
        .unwrap()
        .expect("live");
    assert_eq!(
        covering(&*first, "agent", "alice", &call("deploy"), now()).await,
        None
    );
    // And the interaction stays used after a restart.
    assert_eq!(
        first
            .insert_grant(&granted("agent", "alice", "tool:deploy", "i-1"))
            .await
            .unwrap(),
        GrantInserted::InteractionUsed
    );
}

/// A pending grant question of `agent` (an approval interaction with grant terms).
fn grant_question(interaction_id: &str, window_seconds: u64) -> Question {
    let raw = serde_json::json!({
        "interaction_id": interaction_id, "question": "Deploy?",
        "interaction_type": "approval",
        "grant": {"scope": "tool:deploy", "owner_id": "alice", "window_seconds": window_seconds},
    });
    let i = hitl_telegram::domain::interaction::parse(&raw, 3600.0).unwrap();
    Question {
        allow_edit: false,
        window_seconds: 0,
        interaction: Some(Arc::new(i)),
        ..pending(None)
    }
}

async fn a_yes_to_a_grant_question_stores_its_grant_in_the_same_write(db: TestDb) {
    let s = db.store().await;
    let (yes, no) = (grant_question("g-yes", 60), grant_question("g-no", 60));
    for q in [&yes, &no] {
        s.insert(q, now()).await.unwrap();
    }
    let answered = |value: bool| Ending::Completed {
        value: serde_json::Value::Bool(value),
        by: Some(op(7)),
        reason: "answered".into(),
        denial: None,
    };
    let at = now();
    s.decide(&yes.id, &answered(true).decide(at)).await.unwrap();
    s.decide(&no.id, &answered(false).decide(at)).await.unwrap();
    // Read by another store on the same database, as after a restart or on a replica.
    let other = db.store().await;
    let g = other
        .grant(&GrantId::of_question(&yes.id))
        .await
        .unwrap()
        .expect("the yes stored its grant");
    assert_eq!(
        (g.scope.as_str(), g.owner_id.as_str(), g.agent.as_str()),
        ("tool:deploy", "alice", "agent")
    );
    assert_eq!(g.granted_by, op(7));
    assert_eq!(g.expires_at - g.created_at, time::Duration::seconds(60));
    assert_eq!(
        g.source,
        GrantSource::Interaction {
            interaction_id: "g-yes".into()
        }
    );
    assert_eq!(
        other.grant(&GrantId::of_question(&no.id)).await.unwrap(),
        None
    );
    let covering = other
        .live_grant_covering("agent", &owner("alice"), &call("deploy"), now())
        .await
        .unwrap();
    assert_eq!(covering.map(|c| c.grant_id), Some(g.grant_id));
}
