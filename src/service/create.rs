//! The first stage: an agent's request becomes a stored question (or is settled at
//! once by a rule, a grant or a live window, in the order of [`super::gate`], or found
//! again by its idempotency key) and is handed to delivery.

use std::sync::Arc;

use time::OffsetDateTime;

use super::gate::{Gates, PresentedGrant};
use super::{
    Destination, INTERACTION_TOOL, NewConfirmation, NewInteraction, Service, ServiceError, now,
};
use super::{deliver, grants};
use crate::config::{Agent, Config, Route};
use crate::domain::args_hash::ArgsHash;
use crate::domain::briefing;
use crate::domain::ids::{OwnerId, ToolName};
use crate::domain::interaction::InteractionType;
use crate::domain::python::value::PyDict;
use crate::domain::question::{Question, Seed, Via};
use crate::domain::run_report::REMEMBERED_FOR;
use crate::domain::text;
use crate::storage::Inserted;

impl Service {
    /// Creates a request: an idempotent repeat returns the original, a rule, a grant or a
    /// live window settles it at once ([`super::gate`]), anything else is stored pending
    /// and handed to Telegram. A `grant_scope` that does not cover the call's tool is
    /// refused before anything is read or stored.
    pub async fn create(
        self: &Arc<Self>,
        agent: &Agent,
        new: NewConfirmation,
    ) -> Result<Question, ServiceError> {
        let route_name = new
            .route
            .clone()
            .unwrap_or_else(|| agent.default_route.clone());
        let route = match self.config.route(&route_name) {
            Some(r) if agent.routes.contains(&route_name) => r.clone(),
            _ => return Err(ServiceError::RouteNotAllowed(route_name)),
        };
        let grant = new
            .grant
            .as_ref()
            .map(|check| PresentedGrant::new(agent, &route, &new.tool, check))
            .transpose()?;
        let now = now();
        let args_hash = ArgsHash::of(&new.params);
        if let Some(key) = &new.idempotency_key
            && let Some(existing) = self
                .store
                .find_by_idempotency_key(&agent.name, key, now)
                .await?
        {
            return same_request(existing, &new, &args_hash);
        }

        let mut record =
            Question::pending(self.confirmation_seed(agent, &route, &new, args_hash, now));
        // Deny rule, grant, window, allow rule: the first that settles the call ends it
        // here (the admission, holding a rate's gate, lives until the record is stored).
        let admission = self
            .gate
            .admit(&mut record, Gates::ALL, grant.as_ref(), now)
            .await?;
        if admission.ended {
            return match self.store_ended(&record, now).await? {
                Inserted::New(r) => Ok(r),
                Inserted::Existing(e) => same_request(e, &new, &record.args_hash),
            };
        }
        drop(admission);

        // Checked after the idempotency and window paths: retrying a request that exists,
        // or a call a window confirms, never adds a pending one.
        if self.store.count_pending(&agent.name).await? >= u64::from(agent.max_pending) {
            return Err(ServiceError::TooManyPending(agent.max_pending));
        }
        // The person asked is told when this agent's last approved run of the tool failed
        // or went unreported: looked up only when someone is asked (never on a window
        // hit or a rule's answer, the paths that must stay fast).
        record.recalled = self
            .store
            .recall_run(&agent.name, &record.tool, now - REMEMBERED_FOR)
            .await?;
        let stored = match self.store.insert(&record, now).await? {
            Inserted::New(r) => r,
            Inserted::Existing(e) => return same_request(e, &new, &record.args_hash),
        };
        tracing::info!(id = %stored.id, agent = %stored.agent, tool = %stored.tool,
            route = %stored.route, "confirmation requested");
        self.metrics.request_created(&stored);
        // Delivery runs detached from the HTTP request: an agent that hangs up must not
        // cancel the question halfway.
        self.take_on(&stored);
        Ok(stored)
    }

    /// What a confirmation of `new` on `route` begins as.
    fn confirmation_seed(
        &self,
        agent: &Agent,
        route: &Route,
        new: &NewConfirmation,
        args_hash: ArgsHash,
        now: OffsetDateTime,
    ) -> Seed {
        // The route caps what one tap may allow; the cut is kept and shown.
        let window_seconds = new.window_seconds.min(route.max_window_seconds);
        Seed {
            agent: agent.name.clone(),
            route: route.name.clone(),
            chat_id: self.chats.chat_of(&route.name, route.chat_id),
            tool: new.tool.clone(),
            owner_id: new.owner_id.clone(),
            args_hash,
            params_json: new.params_json.clone(),
            // Rendered as Python renders it; stored with any NUL as the escape the
            // operator is shown anyway (see `text::without_nul`).
            briefing: text::without_nul(
                &briefing::render(new.template.as_deref(), new.tool.as_str(), &new.params).text,
            )
            .into_owned(),
            context: new.context.clone(),
            allow_edit: new.allow_edit,
            window_seconds,
            window_requested_seconds: (window_seconds < new.window_seconds)
                .then_some(new.window_seconds),
            has_call: false,
            idempotency_key: new.idempotency_key.clone(),
            callback_url: new.callback_url.clone(),
            created_at: now,
            expires_at: now + new.timeout,
            interaction: None,
            expect_outcome_seconds: route.expect_outcome_seconds,
            // Kept only while the console is on: the schema serves its edit form, and a
            // question says it can be edited only where it can be.
            args_schema: self
                .config
                .mini_app
                .as_ref()
                .and(new.args_schema.as_ref())
                .map(|s| s.as_str().to_owned()),
            server: new.server.clone(),
            annotations: new.annotations.clone(),
        }
    }

    /// Stores a request that ended as it came (a window hit, a rule's `allow` or `deny`):
    /// no message, counted and audited like any outcome, its webhook queued.
    async fn store_ended(
        &self,
        record: &Question,
        now: OffsetDateTime,
    ) -> Result<Inserted, ServiceError> {
        let inserted = self.store.insert(record, now).await?;
        if let Inserted::New(stored) = &inserted {
            // Debug, not info, for a window: an agent looping over an approved call
            // would otherwise log a line per call (the audit trail and the metrics count
            // every hit anyway). A rule's decision names the rule, worth a line.
            if matches!(stored.via, Some(Via::Rule | Via::Grant)) {
                tracing::info!(id = %stored.id, agent = %stored.agent, tool = %stored.tool,
                    status = stored.status.as_str(), reason = %stored.reason, "decided before asking (rules or a grant)");
            } else {
                tracing::debug!(id = %stored.id, agent = %stored.agent, tool = %stored.tool,
                    "confirmed by a live window");
            }
            self.metrics.request_created(stored);
            self.metrics.request_decided(stored);
            if stored.callback_url.is_some() {
                self.outbox_wake.notify_one();
            }
            self.changes.changed(&stored.id);
        }
        Ok(inserted)
    }

    /// Asks an interaction. The same `interaction_id` again (AI-Parrot sends one per
    /// recipient) lands on the same record, adding a private-chat copy for a new person.
    /// Returns the record and whether it is new.
    pub async fn create_interaction(
        self: &Arc<Self>,
        agent: &Agent,
        mut new: NewInteraction,
    ) -> Result<(Question, bool), ServiceError> {
        let dest = Destination::of(
            &self.config,
            agent,
            new.route.as_deref(),
            new.recipient.as_deref(),
        )?;
        if let Some(terms) = grants::grant_terms_on(agent, &new, &dest)? {
            // Stored with the question as the route cut them: what the person is shown
            // and what their yes stores.
            new.interaction
                .raw
                .insert("grant".to_owned(), terms.to_json());
            new.interaction.grant = Some(terms);
        }
        if let Some(existing) = self
            .store
            .find_interaction(&agent.name, &new.interaction.interaction_id)
            .await?
        {
            return self.add_recipient(existing, &new, dest).await;
        }
        let i = &new.interaction;
        if let Destination::Route(route) = &dest
            && !i.target_humans.is_empty()
            && !route
                .approvers
                .iter()
                .any(|uid| self.agree.authority().is_target(i, *uid))
        {
            return Err(ServiceError::NobodyMayAnswer(format!(
                "none of target_humans is an approver of route '{}' (names map to Telegram ids through [people])",
                route.name
            )));
        }
        let now = now();
        let mut record = Question::pending(self.interaction_seed(agent, &new, &dest, now)?);
        // The gates the interaction names (the rules, for the call it carries) in the
        // one order of `gate`; the admission lives until an ended record is stored.
        let admission = self.gate.admit(&mut record, new.gates(), None, now).await?;
        if admission.ended {
            return match self.store_ended(&record, now).await? {
                Inserted::New(r) => Ok((r, true)),
                Inserted::Existing(e) => self.add_recipient(e, &new, dest).await,
            };
        }
        drop(admission);
        if self.store.count_pending(&agent.name).await? >= u64::from(agent.max_pending) {
            return Err(ServiceError::TooManyPending(agent.max_pending));
        }
        let stored = match self.store.insert(&record, now).await? {
            Inserted::New(r) => r,
            Inserted::Existing(e) => return self.add_recipient(e, &new, dest).await,
        };
        tracing::info!(id = %stored.id, agent = %stored.agent, kind = new.interaction.kind.as_str(),
            route = %stored.route, "interaction requested");
        self.metrics.request_created(&stored);
        self.changes.changed(&stored.id);
        self.take_on(&stored);
        Ok((stored, true))
    }

    /// What an interaction `new` to `dest` begins as: its call's, when it carries one
    /// (shown like a confirmation), else a question under [`INTERACTION_TOOL`].
    fn interaction_seed(
        &self,
        agent: &Agent,
        new: &NewInteraction,
        dest: &Destination,
        now: OffsetDateTime,
    ) -> Result<Seed, ServiceError> {
        let i = &new.interaction;
        let (route, chat_id, max_window) = match dest {
            Destination::Route(r) => (
                r.name.clone(),
                self.chats.chat_of(&r.name, r.chat_id),
                r.max_window_seconds,
            ),
            Destination::Person { name, user_id } => (
                format!("@{name}"),
                i64::try_from(*user_id).unwrap_or(0),
                crate::config::DEFAULT_MAX_WINDOW_SECONDS,
            ),
        };
        let (tool, owner_id, params, params_json, asked_window) = match &new.call {
            Some(c) => (
                c.tool.clone(),
                c.owner_id.clone(),
                c.params.clone(),
                c.params_json.clone(),
                c.window_seconds,
            ),
            None => (
                ToolName::parse(INTERACTION_TOOL).map_err(|_| ServiceError::NotFound)?,
                OwnerId::anonymous(),
                PyDict::new(),
                "{}".to_owned(),
                0,
            ),
        };
        let window_seconds = match &new.call {
            Some(_) => asked_window.min(max_window),
            None if i.kind == InteractionType::Approval => new.agent_window_seconds,
            None => 0,
        };
        Ok(Seed {
            agent: agent.name.clone(),
            route,
            chat_id,
            tool,
            owner_id,
            args_hash: ArgsHash::of(&params),
            params_json,
            briefing: i.question.clone(),
            context: i.context.clone(),
            allow_edit: i.kind == InteractionType::Form,
            window_seconds,
            window_requested_seconds: (window_seconds < asked_window).then_some(asked_window),
            has_call: new.call.is_some(),
            idempotency_key: None,
            callback_url: new.callback_url.clone(),
            created_at: now,
            expires_at: now + i.timeout,
            interaction: Some(Arc::new(i.clone())),
            // An approval carrying a call (AI-Parrot's guard) is owed its report like a
            // confirmation, when the route expects one.
            expect_outcome_seconds: match (dest, &new.call) {
                (Destination::Route(r), Some(_)) => r.expect_outcome_seconds,
                _ => None,
            },
            args_schema: self
                .config
                .mini_app
                .as_ref()
                .and(new.call.as_ref())
                .and_then(|c| c.args_schema.as_ref())
                .map(|s| s.as_str().to_owned()),
            // An interaction's call comes from an agent's own guard, never through a
            // gateway: it names no server.
            server: None,
            annotations: None,
        })
    }

    /// A repeat of an interaction already asked: the same question, perhaps for another
    /// person, who then gets their own copy in a private chat.
    pub(super) async fn add_recipient(
        self: &Arc<Self>,
        existing: Question,
        new: &NewInteraction,
        dest: Destination,
    ) -> Result<(Question, bool), ServiceError> {
        let same = existing.interaction.as_deref().is_some_and(|i| {
            i.kind == new.interaction.kind
                && i.question == new.interaction.question
                && match (&i.grant, &new.interaction.grant) {
                    (None, None) => true,
                    (Some(was), Some(now)) => was.same_ask(now),
                    _ => false,
                }
        });
        if !same {
            return Err(ServiceError::InteractionMismatch(
                new.interaction.interaction_id.clone(),
            ));
        }
        if let Destination::Person { name, user_id } = dest
            && !existing.is_terminal()
        {
            let chat_id = i64::try_from(user_id).unwrap_or(0);
            if self
                .store
                .add_copy(&existing.id, &name, chat_id, now())
                .await?
            {
                let me = self.clone();
                let queued = deliver::Queued::copy(&existing, chat_id);
                self.tasks.spawn(async move { me.deliver(queued).await });
            }
        }
        let record = self.store.get(&existing.id).await?.unwrap_or(existing);
        Ok((record, false))
    }

    /// Sends a one-way message (AI-Parrot's `send_notification`) to a route or a person.
    pub async fn notify(
        &self,
        agent: &Agent,
        route: Option<&str>,
        recipient: Option<&str>,
        message: &str,
    ) -> Result<(i64, i32), ServiceError> {
        let chat_id = match Destination::of(&self.config, agent, route, recipient)? {
            Destination::Route(r) => self.chats.chat_of(&r.name, r.chat_id),
            Destination::Person { user_id, .. } => i64::try_from(user_id).unwrap_or(0),
        };
        let message_id = self
            .messenger
            .send_notification(chat_id, &agent.name, message)
            .await
            .map_err(|e| match e.paced_until {
                // Our own pacing held it back: not Telegram's refusal, and worth sending
                // again once the slot is free.
                Some(at) => {
                    let wait = (at - now()).as_seconds_f64().ceil();
                    ServiceError::Paced {
                        message: e.reason,
                        retry_after_secs: (wait as u64).max(1),
                    }
                }
                None => ServiceError::Undeliverable(e.reason),
            })?;
        tracing::info!(agent = %agent.name, chat_id, "notification sent");
        Ok((chat_id, message_id))
    }
}

/// An idempotent repeat must be the same call (to the same server, with the same
/// annotations, which the rules may have read); anything else is the agent's mistake.
pub(super) fn same_request(
    existing: Question,
    new: &NewConfirmation,
    args_hash: &ArgsHash,
) -> Result<Question, ServiceError> {
    if existing.tool == new.tool
        && existing.owner_id == new.owner_id
        && existing.asked_args_hash() == args_hash
        && existing.server == new.server
        && existing.annotations == new.annotations
    {
        Ok(existing)
    } else {
        Err(ServiceError::IdempotencyMismatch)
    }
}

impl NewInteraction {
    /// The gates of [`super::gate`] this interaction passes: the rules judge the call it
    /// carries (neither a grant nor a window confirms it: its agent keeps its own); an
    /// interaction without a call asks a person something no rule is about.
    fn gates(&self) -> Gates {
        match self.call {
            Some(_) => Gates::RULES,
            None => Gates::NONE,
        }
    }
}

impl Destination {
    /// Where a question or notification goes: the route given, else the person named as
    /// recipient (in their private chat), else the agent's default route.
    pub(super) fn of(
        config: &Config,
        agent: &Agent,
        route: Option<&str>,
        recipient: Option<&str>,
    ) -> Result<Self, ServiceError> {
        let route_name = match (route, recipient) {
            (Some(r), _) => r.to_owned(),
            (None, Some(person)) => {
                return match config.person(person) {
                    Some(user_id) => Ok(Destination::Person {
                        name: person.to_owned(),
                        user_id,
                    }),
                    None => Err(ServiceError::UnknownRecipient(person.to_owned())),
                };
            }
            (None, None) => agent.default_route.clone(),
        };
        match config.route(&route_name) {
            Some(r) if agent.routes.contains(&route_name) => Ok(Destination::Route(r.clone())),
            _ => Err(ServiceError::RouteNotAllowed(route_name)),
        }
    }
}
