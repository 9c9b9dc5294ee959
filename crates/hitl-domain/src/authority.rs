//! Who may do what, as one configuration says: the part of a configuration that decides
//! which person may answer a question or use an operator command (routes with their
//! chats, topics, approvers, escalations, `forbid_self_approval` and quorum; `[people]`;
//! `[owner_telegram_ids]`) and which routes each agent may ask on, as a value that can
//! be stored, compared across replicas and evaluated without I/O.
//!
//! Several replicas on one database each record their own [`Authority`] with its
//! [`Fingerprint`]. While the live replicas' fingerprints differ, an operator's action
//! counts only if every live replica's authority allows it (the service asks each one:
//! [`Authority::refusal`], [`Authority::approves_in_chat`], [`Authority::approves`]),
//! and [`Authority::differences`] says how they differ. It holds no secret: agents are
//! named, never their tokens nor their digests.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::interaction::Interaction;
use super::question::Question;

/// What one configuration says about who may decide. Maps are ordered, so one
/// configuration always serialises to the same text and so to one [`Fingerprint`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Authority {
    /// Routes by name.
    pub routes: BTreeMap<String, RouteAuthority>,
    /// `[people]`: names (as `target_humans` and recipients use them) to Telegram ids.
    pub people: BTreeMap<String, u64>,
    /// `[owner_telegram_ids]`: an agent's `owner_id` to the person it stands for
    /// (`forbid_self_approval`).
    pub owners: BTreeMap<String, u64>,
    /// Agents by name, with the routes they may ask on.
    pub agents: BTreeMap<String, AgentAuthority>,
}

/// One route's settings that decide who answers there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteAuthority {
    pub chat_id: i64,
    /// The forum topic the route lives in (operator commands count only there).
    pub topic_id: Option<i32>,
    pub approvers: BTreeSet<u64>,
    pub forbid_self_approval: bool,
    /// How many answers settle a quorum question asked on it.
    pub quorum: Option<u32>,
    pub escalation: Option<EscalationAuthority>,
}

/// Where a route's questions are escalated and who decides once they are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EscalationAuthority {
    pub to: String,
    /// Approvers of both routes decide in either chat (else each chat's own).
    pub union: bool,
}

/// An agent's routes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentAuthority {
    pub routes: BTreeSet<String>,
    pub default_route: String,
}

/// Why a person may not answer a question, by one configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not an approver of the route (or of the escalation route) in this chat, nor the
    /// person of a private chat the question was sent to.
    NotAnApprover,
    /// The interaction names its `target_humans`, and this person is none of them.
    NotATarget,
    /// The route forbids self-approval and the request was made on this person's behalf.
    OwnRequest,
}

/// The SHA-256 of an [`Authority`]'s text, in lowercase hex: equal fingerprints, equal
/// configurations (as far as who may decide goes).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// A stored fingerprint: 64 lowercase hex digits, else `None`.
    pub fn parse(s: &str) -> Option<Fingerprint> {
        (s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| Fingerprint(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 12 digits: enough to tell configurations apart in a log or `/healthz`.
    pub fn short(&self) -> &str {
        &self.0[..12]
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short())
    }
}

/// One way two configurations differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// What differs, by name: `route 'ops'`, `agent 'agent-a'`, `person 'alice'`,
    /// `owner 'alice-owner'`.
    pub subject: String,
    /// Which of its settings: `approvers`, `chat`, `defined`, ...
    pub aspect: &'static str,
    /// The setting in the first configuration, and in the second (ids included: for
    /// the log, not for unauthenticated readers).
    pub here: String,
    pub there: String,
}

impl Difference {
    /// What differs without the values: `route 'ops': approvers`.
    pub fn summary(&self) -> String {
        format!("{}: {}", self.subject, self.aspect)
    }
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {} here, {} there",
            self.subject, self.aspect, self.here, self.there
        )
    }
}

/// Where a route's chat is now, when it moved (a group upgraded to a supergroup): the
/// database's knowledge, the same whichever configuration is asked.
pub type Moved<'a> = &'a dyn Fn(&str) -> Option<i64>;

impl Authority {
    /// The text stored and hashed: compact JSON, maps in key order.
    pub fn canonical_json(&self) -> String {
        // Only maps with string keys, integers, strings and booleans: serialising cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint(hex::encode(Sha256::digest(self.canonical_json())))
    }

    /// The chat `route` posts to now, when this configuration has the route.
    fn chat_of(&self, route: &str, moved: Moved<'_>) -> Option<i64> {
        let r = self.routes.get(route)?;
        Some(moved(route).unwrap_or(r.chat_id))
    }

    /// Whether `user` approves `route` by this configuration.
    pub fn approves(&self, route: &str, user: u64) -> bool {
        self.routes
            .get(route)
            .is_some_and(|r| r.approvers.contains(&user))
    }

    /// Whether `route` is, by this configuration, a route of `chat_id` (in topic
    /// `thread`) that `user` approves: what an operator command needs.
    pub fn approves_in_chat(
        &self,
        route: &str,
        chat_id: i64,
        thread: Option<i32>,
        user: u64,
        moved: Moved<'_>,
    ) -> bool {
        let Some(r) = self.routes.get(route) else {
            return false;
        };
        self.chat_of(route, moved) == Some(chat_id)
            && (r.topic_id.is_none() || r.topic_id == thread)
            && r.approvers.contains(&user)
    }

    /// Whether `user` is one of the interaction's `target_humans` (by name through
    /// `[people]`, or by numeric id); everyone is when it names none.
    pub fn is_target(&self, i: &Interaction, user: u64) -> bool {
        i.target_humans.is_empty()
            || i.target_humans
                .iter()
                .any(|t| self.people.get(t) == Some(&user) || *t == user.to_string())
    }

    /// Why `user` may not answer `q` in `chat_id` by this configuration, if they may
    /// not. The first reason found, in this order: who approves in that chat, who the
    /// interaction is for, whose request it is.
    pub fn refusal(
        &self,
        q: &Question,
        chat_id: i64,
        user: u64,
        moved: Moved<'_>,
    ) -> Option<Refusal> {
        let route = self.routes.get(&q.route);
        // Once escalated, the escalation route's chat holds a copy; who decides where is
        // the union of both routes' approvers, or each chat's own (`escalation_approvers`).
        let escalated = route
            .filter(|_| q.progress.escalated_at.is_some())
            .and_then(|r| r.escalation.as_ref())
            .and_then(|e| {
                let to = self.routes.get(&e.to)?;
                Some((e.union, self.chat_of(&e.to, moved)?, to))
            });
        let allowed = match route {
            Some(route) if chat_id == q.chat_id => {
                route.approvers.contains(&user)
                    || escalated.is_some_and(|(union, _, to)| union && to.approvers.contains(&user))
            }
            Some(route) if escalated.is_some_and(|(_, chat, _)| chat == chat_id) => escalated
                .is_some_and(|(union, _, to)| {
                    to.approvers.contains(&user) || (union && route.approvers.contains(&user))
                }),
            // A private chat the question was sent to: only its person answers there.
            _ => {
                i64::try_from(user).ok() == Some(chat_id)
                    && q.messages().any(|(chat, _)| chat == chat_id)
            }
        };
        if !allowed {
            return Some(Refusal::NotAnApprover);
        }
        if let Some(i) = &q.interaction
            && !self.is_target(i, user)
        {
            return Some(Refusal::NotATarget);
        }
        // Checked on every tap, including Cancel: an owner may not decide their own
        // request either way when the route forbids it.
        if q.interaction.is_none()
            && route.is_some_and(|r| r.forbid_self_approval)
            && self.owners.get(q.owner_id.as_str()) == Some(&user)
        {
            return Some(Refusal::OwnRequest);
        }
        None
    }

    /// How this configuration (`here`) differs from `there`, subject by subject in name
    /// order; empty when they are the same.
    pub fn differences(&self, there: &Authority) -> Vec<Difference> {
        let mut out = Vec::new();
        let mut differ = |subject: &str, aspect, here: String, there: String| {
            if here != there {
                out.push(Difference {
                    subject: subject.to_owned(),
                    aspect,
                    here,
                    there,
                });
            }
        };
        for name in keys(&self.routes, &there.routes) {
            let subject = format!("route '{name}'");
            match (self.routes.get(name), there.routes.get(name)) {
                (Some(a), Some(b)) => {
                    differ(
                        &subject,
                        "chat",
                        a.chat_id.to_string(),
                        b.chat_id.to_string(),
                    );
                    differ(&subject, "topic", shown(&a.topic_id), shown(&b.topic_id));
                    differ(&subject, "approvers", ids(&a.approvers), ids(&b.approvers));
                    differ(
                        &subject,
                        "forbid_self_approval",
                        a.forbid_self_approval.to_string(),
                        b.forbid_self_approval.to_string(),
                    );
                    differ(&subject, "quorum", shown(&a.quorum), shown(&b.quorum));
                    differ(
                        &subject,
                        "escalation",
                        escalation(&a.escalation),
                        escalation(&b.escalation),
                    );
                }
                (a, b) => differ(&subject, "defined", defined(a), defined(b)),
            }
        }
        for name in keys(&self.agents, &there.agents) {
            let subject = format!("agent '{name}'");
            match (self.agents.get(name), there.agents.get(name)) {
                (Some(a), Some(b)) => {
                    differ(&subject, "routes", names(&a.routes), names(&b.routes));
                    differ(
                        &subject,
                        "default_route",
                        a.default_route.clone(),
                        b.default_route.clone(),
                    );
                }
                (a, b) => differ(&subject, "defined", defined(a), defined(b)),
            }
        }
        for name in keys(&self.people, &there.people) {
            let (a, b) = (self.people.get(name), there.people.get(name));
            differ(&format!("person '{name}'"), "telegram id", id(a), id(b));
        }
        for name in keys(&self.owners, &there.owners) {
            let (a, b) = (self.owners.get(name), there.owners.get(name));
            differ(&format!("owner '{name}'"), "telegram id", id(a), id(b));
        }
        out
    }
}

/// Every key of either map, in order, once.
fn keys<'a, V>(a: &'a BTreeMap<String, V>, b: &'a BTreeMap<String, V>) -> BTreeSet<&'a String> {
    a.keys().chain(b.keys()).collect()
}

fn shown<T: fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "none".to_owned(), T::to_string)
}

fn defined<T>(v: Option<T>) -> String {
    if v.is_some() { "defined" } else { "absent" }.to_owned()
}

fn id(v: Option<&u64>) -> String {
    v.map_or_else(|| "absent".to_owned(), u64::to_string)
}

fn ids(v: &BTreeSet<u64>) -> String {
    let all: Vec<String> = v.iter().map(u64::to_string).collect();
    format!("[{}]", all.join(", "))
}

fn names(v: &BTreeSet<String>) -> String {
    let all: Vec<&str> = v.iter().map(String::as_str).collect();
    format!("[{}]", all.join(", "))
}

fn escalation(e: &Option<EscalationAuthority>) -> String {
    match e {
        None => "none".to_owned(),
        Some(e) if e.union => format!("to '{}' (union)", e.to),
        Some(e) => format!("to '{}' (each)", e.to),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;
    use time::OffsetDateTime;

    use super::*;
    use crate::args_hash::ArgsHash;
    use crate::ids::{OwnerId, ToolName};
    use crate::interaction;
    use crate::question::Seed;

    const OPS: i64 = -100;
    const ESC: i64 = -200;
    const ALICE: u64 = 1;
    const BOB: u64 = 2;
    const CAROL: u64 = 3;

    fn route(chat_id: i64, approvers: &[u64]) -> RouteAuthority {
        RouteAuthority {
            chat_id,
            topic_id: None,
            approvers: approvers.iter().copied().collect(),
            forbid_self_approval: false,
            quorum: None,
            escalation: None,
        }
    }

    /// `ops` (Alice, Bob; escalating to `esc`), `esc` (Carol); Alice owns `alice-owner`.
    fn authority() -> Authority {
        let mut ops = route(OPS, &[ALICE, BOB]);
        ops.forbid_self_approval = true;
        ops.escalation = Some(EscalationAuthority {
            to: "esc".into(),
            union: false,
        });
        Authority {
            routes: [("ops".into(), ops), ("esc".into(), route(ESC, &[CAROL]))].into(),
            people: [("alice".into(), ALICE), ("bob".into(), BOB)].into(),
            owners: [("alice-owner".into(), ALICE)].into(),
            agents: [(
                "agent".into(),
                AgentAuthority {
                    routes: ["ops".to_owned()].into(),
                    default_route: "ops".into(),
                },
            )]
            .into(),
        }
    }

    fn question(owner: &str) -> Question {
        let params = crate::python::json::parse_object("{}").unwrap();
        let t = OffsetDateTime::UNIX_EPOCH;
        let seed = Seed {
            agent: "agent".into(),
            route: "ops".into(),
            chat_id: OPS,
            tool: ToolName::parse("deploy").unwrap(),
            owner_id: OwnerId::parse(owner).unwrap(),
            args_hash: ArgsHash::of(&params),
            params_json: "{}".into(),
            briefing: "deploy".into(),
            context: None,
            allow_edit: false,
            window_seconds: 0,
            window_requested_seconds: None,
            has_call: false,
            idempotency_key: None,
            callback_url: None,
            created_at: t,
            expires_at: t + Duration::from_secs(60),
            interaction: None,
            expect_outcome_seconds: None,
            args_schema: None,
            server: None,
            annotations: None,
        };
        Question {
            message_id: Some(10),
            ..Question::pending(seed)
        }
    }

    fn for_people(targets: &[&str]) -> Question {
        let mut q = question("anonymous");
        let i = interaction::parse(
            &json!({
                "interaction_id": "i-1",
                "question": "Proceed?",
                "interaction_type": "approval",
                "target_humans": targets,
            }),
            3600.0,
        )
        .unwrap();
        q.interaction = Some(Arc::new(i));
        q
    }

    fn unmoved(_: &str) -> Option<i64> {
        None
    }

    #[test]
    fn only_the_routes_approvers_answer_in_its_chat() {
        let a = authority();
        let q = question("anonymous");
        assert_eq!(a.refusal(&q, OPS, ALICE, &unmoved), None);
        assert_eq!(a.refusal(&q, OPS, BOB, &unmoved), None);
        assert_eq!(
            a.refusal(&q, OPS, CAROL, &unmoved),
            Some(Refusal::NotAnApprover)
        );
        // Not in a chat the question is not in, even for an approver.
        assert_eq!(
            a.refusal(&q, ESC, ALICE, &unmoved),
            Some(Refusal::NotAnApprover)
        );
        // A configuration without the route lets nobody answer in the group.
        let mut without = a.clone();
        without.routes.remove("ops");
        assert_eq!(
            without.refusal(&q, OPS, ALICE, &unmoved),
            Some(Refusal::NotAnApprover)
        );
    }

    #[test]
    fn once_escalated_each_chat_has_its_own_approvers_or_both_routes_union() {
        let mut a = authority();
        let mut q = question("anonymous");
        q.progress.escalated_at = Some(OffsetDateTime::UNIX_EPOCH);
        assert_eq!(a.refusal(&q, ESC, CAROL, &unmoved), None);
        assert_eq!(
            a.refusal(&q, ESC, ALICE, &unmoved),
            Some(Refusal::NotAnApprover)
        );
        assert_eq!(
            a.refusal(&q, OPS, CAROL, &unmoved),
            Some(Refusal::NotAnApprover)
        );
        if let Some(e) = a.routes.get_mut("ops").and_then(|r| r.escalation.as_mut()) {
            e.union = true;
        }
        assert_eq!(a.refusal(&q, ESC, ALICE, &unmoved), None);
        assert_eq!(a.refusal(&q, OPS, CAROL, &unmoved), None);
        // The escalation route's chat moved: its approvers answer in the new chat.
        let moved = |r: &str| (r == "esc").then_some(-300);
        assert_eq!(a.refusal(&q, -300, CAROL, &moved), None);
        assert_eq!(
            a.refusal(&q, ESC, CAROL, &moved),
            Some(Refusal::NotAnApprover)
        );
    }

    #[test]
    fn in_a_private_chat_only_its_person_answers_and_only_where_it_was_sent() {
        let a = authority();
        let mut q = for_people(&[]);
        q.route = "nowhere".into();
        q.chat_id = CAROL as i64;
        assert_eq!(a.refusal(&q, CAROL as i64, CAROL, &unmoved), None);
        assert_eq!(
            a.refusal(&q, CAROL as i64, ALICE, &unmoved),
            Some(Refusal::NotAnApprover)
        );
        assert_eq!(
            a.refusal(&q, ALICE as i64, ALICE, &unmoved),
            Some(Refusal::NotAnApprover)
        );
    }

    #[test]
    fn target_humans_resolve_through_people_or_by_id() {
        let a = authority();
        let q = for_people(&["alice"]);
        assert_eq!(a.refusal(&q, OPS, ALICE, &unmoved), None);
        assert_eq!(a.refusal(&q, OPS, BOB, &unmoved), Some(Refusal::NotATarget));
        let q = for_people(&[&BOB.to_string()]);
        assert_eq!(a.refusal(&q, OPS, BOB, &unmoved), None);
        // Another configuration maps the name to someone else: Alice is not it there.
        let mut other = a.clone();
        other.people.insert("alice".into(), BOB);
        let q = for_people(&["alice"]);
        assert_eq!(
            other.refusal(&q, OPS, ALICE, &unmoved),
            Some(Refusal::NotATarget)
        );
    }

    #[test]
    fn an_owner_may_not_decide_their_own_request_where_the_route_forbids_it() {
        let mut a = authority();
        let q = question("alice-owner");
        assert_eq!(
            a.refusal(&q, OPS, ALICE, &unmoved),
            Some(Refusal::OwnRequest)
        );
        assert_eq!(a.refusal(&q, OPS, BOB, &unmoved), None);
        if let Some(r) = a.routes.get_mut("ops") {
            r.forbid_self_approval = false;
        }
        assert_eq!(a.refusal(&q, OPS, ALICE, &unmoved), None);
    }

    #[test]
    fn commands_need_the_route_in_that_chat_and_topic_and_the_person_approving_it() {
        let mut a = authority();
        assert!(a.approves_in_chat("ops", OPS, None, ALICE, &unmoved));
        assert!(!a.approves_in_chat("ops", OPS, None, CAROL, &unmoved));
        assert!(!a.approves_in_chat("ops", ESC, None, ALICE, &unmoved));
        assert!(!a.approves_in_chat("gone", OPS, None, ALICE, &unmoved));
        if let Some(r) = a.routes.get_mut("ops") {
            r.topic_id = Some(7);
        }
        assert!(a.approves_in_chat("ops", OPS, Some(7), ALICE, &unmoved));
        assert!(!a.approves_in_chat("ops", OPS, Some(8), ALICE, &unmoved));
        let moved = |r: &str| (r == "ops").then_some(-400);
        assert!(a.approves_in_chat("ops", -400, Some(7), ALICE, &moved));
        assert!(a.approves("ops", BOB) && !a.approves("ops", CAROL) && !a.approves("x", BOB));
    }

    #[test]
    fn one_configuration_has_one_fingerprint_and_any_change_gives_another() {
        let a = authority();
        assert_eq!(a.fingerprint(), authority().fingerprint());
        assert!(Fingerprint::parse(a.fingerprint().as_str()).is_some());
        assert_eq!(a.fingerprint().short().len(), 12);
        let back: Authority = serde_json::from_str(&a.canonical_json()).unwrap();
        assert_eq!(back, a);
        let mut b = a.clone();
        if let Some(r) = b.routes.get_mut("ops") {
            r.approvers.insert(CAROL);
        }
        assert_ne!(a.fingerprint(), b.fingerprint());
        let mut c = a.clone();
        c.people.insert("carol".into(), CAROL);
        assert_ne!(a.fingerprint(), c.fingerprint());
        for bad in ["", "abc", &"A".repeat(64), &"g".repeat(64)] {
            assert!(Fingerprint::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn differences_name_what_differs_by_name_and_show_the_ids_only_in_full() {
        let a = authority();
        assert!(a.differences(&a).is_empty());
        let mut b = a.clone();
        if let Some(r) = b.routes.get_mut("ops") {
            r.approvers.remove(&BOB);
            r.approvers.insert(CAROL);
        }
        b.routes.insert("new".into(), route(-500, &[ALICE]));
        b.people.remove("bob");
        if let Some(agent) = b.agents.get_mut("agent") {
            agent.routes.insert("new".into());
        }
        let found = a.differences(&b);
        let summaries: Vec<String> = found.iter().map(Difference::summary).collect();
        assert_eq!(
            summaries,
            [
                "route 'new': defined",
                "route 'ops': approvers",
                "agent 'agent': routes",
                "person 'bob': telegram id",
            ]
        );
        assert_eq!(
            found[1].to_string(),
            "route 'ops' approvers: [1, 2] here, [1, 3] there"
        );
        assert!(summaries.iter().all(|s| !s.contains('3')), "{summaries:?}");
        // The other way round, here and there swap.
        assert_eq!(b.differences(&a)[1].here, "[1, 3]");
    }
}
