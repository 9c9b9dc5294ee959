//! The operator's console (the Telegram Mini App, issue 37): what one Telegram user may
//! see and do there. Exactly what they could answer by tapping in a chat: the same
//! approver rules, routes, escalation and targets ([`Agree::may_not_answer`](super::Agree::may_not_answer), every
//! live replica's configuration included); anything else is not found. A decision goes
//! through the same interpretation of its button as a tap ([`super::interpret`]).

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::Value;

use super::interpret::{Meaning, Said, interpret};
use super::{CommandReply, Service, ServiceError, TapAction, judge, now};
use crate::config::{Config, Route};
use crate::domain::args_hash::ArgsHash;
use crate::domain::audit::{self, AuditEvent};
use crate::domain::edit::{ArgsSchema, FieldError};
use crate::domain::grant::Grant;
use crate::domain::ids::{GrantId, QuestionId};
use crate::domain::interaction::InteractionType;
use crate::domain::python::value::{PyDict, PyValue};
use crate::domain::question::{EditApplied, Operator, Question, reason_text};
use crate::domain::rules::{Effect, RuleCall};
use crate::storage::{
    Audit, EndedCursor, Grants, LiveWindow, Questions, Runs, StorageError, WindowUse, Windows,
};

/// The most ended questions one page of the console holds.
pub const CONSOLE_PAGE_MAX: u32 = 50;

/// How many times one page of ended questions reads the store (each read
/// [`CONSOLE_PAGE_MAX`] questions) looking for ones the user could answer: a user who
/// may answer few of many questions gets a short page rather than a request that reads
/// the whole history.
const CONSOLE_PAGE_READS: usize = 10;

/// What the console's API asks of the service, for the Telegram user each call names:
/// the storage roles it reads and writes, and the service for who may answer and for
/// the pipeline a decision goes through.
pub struct Console<'a> {
    service: &'a Arc<Service>,
    config: &'a Config,
    questions: &'a dyn Questions,
    audit: &'a dyn Audit,
    windows: &'a dyn Windows,
    runs: &'a dyn Runs,
    grants: &'a dyn Grants,
}

impl Service {
    /// The console (`/app/api/`).
    pub fn console(self: &Arc<Self>) -> Console<'_> {
        Console {
            service: self,
            config: &self.config,
            questions: self.store.as_ref(),
            audit: self.store.as_ref(),
            windows: self.store.as_ref(),
            runs: self.store.as_ref(),
            grants: self.store.as_ref(),
        }
    }
}

/// What the console's decision asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsoleAction {
    /// Approve this call only.
    Approve,
    /// Approve with the window the question offers.
    ApproveWindow,
    Cancel,
    /// Deny, saying why (as "Deny with reason" and a reply would): the reason as
    /// [`reason_text`] keeps it.
    Deny(String),
}

/// Why the page's `action` names no [`ConsoleAction`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotAnAction {
    /// None of `approve`, `approve_window`, `cancel` or `deny`.
    Unknown,
    /// `deny` without a reason.
    NoReason,
}

impl ConsoleAction {
    /// The action the page names (`action`), with its `reason` as sent.
    pub fn named(action: Option<&str>, reason: Option<&str>) -> Result<Self, NotAnAction> {
        match action {
            Some("approve") => Ok(ConsoleAction::Approve),
            Some("approve_window") => Ok(ConsoleAction::ApproveWindow),
            Some("cancel") => Ok(ConsoleAction::Cancel),
            Some("deny") => reason
                .and_then(reason_text)
                .map(ConsoleAction::Deny)
                .ok_or(NotAnAction::NoReason),
            _ => Err(NotAnAction::Unknown),
        }
    }

    /// The page's (and the audit's) name of the action.
    fn as_str(&self) -> &'static str {
        match self {
            ConsoleAction::Approve => "approve",
            ConsoleAction::ApproveWindow => "approve_window",
            ConsoleAction::Cancel => "cancel",
            ConsoleAction::Deny(_) => "deny",
        }
    }

    /// Whether it approves (the only actions edited parameters go with).
    pub fn approves(&self) -> bool {
        matches!(self, ConsoleAction::Approve | ConsoleAction::ApproveWindow)
    }

    /// The button a tap in the chat would press for it, and the reason that goes with
    /// its no.
    fn as_tap(&self) -> (TapAction, Option<String>) {
        match self {
            ConsoleAction::Approve => (TapAction::Approve, None),
            ConsoleAction::ApproveWindow => (TapAction::ApproveWindow, None),
            ConsoleAction::Cancel => (TapAction::Cancel, None),
            ConsoleAction::Deny(why) => (TapAction::Cancel, Some(why.clone())),
        }
    }
}

/// An answer from the console, as [`Service::answer`] stores it: the edit it approves
/// the call with, if any, and its `console_decision` event, audited in the same write as
/// the answer (and the decision it settles).
pub(super) struct ConsoleAnswer {
    pub(super) edit: Option<EditApplied>,
    pub(super) audited: audit::NewEvent,
}

/// Parameters an operator edited in the console, as the page sent them.
#[derive(Debug, Clone)]
pub struct EditedParams {
    /// Python's view of them (for the argument hash).
    pub params: PyDict,
    /// The object exactly as sent: what the agent is handed back.
    pub params_json: String,
    /// The same, as JSON for the schema's check (the rules read `params`).
    pub value: Value,
}

impl Console<'_> {
    /// The first chat (in posting order) where `user` may answer `record`, if any.
    async fn chat_for(
        &self,
        record: &Question,
        user: &Operator,
    ) -> Result<Option<i64>, StorageError> {
        let chats: Vec<i64> = record.messages().map(|(chat, _)| chat).collect();
        for chat in chats {
            if self
                .service
                .agree
                .may_not_answer(&self.service.chats, record, chat, user, false)
                .await?
                .is_none()
            {
                return Ok(Some(chat));
            }
        }
        Ok(None)
    }

    /// Every chat a question is first posted in: the routes' (as they now are) and the
    /// people's private chats, `user`'s own among them.
    fn post_chats(&self, user: &Operator) -> Vec<i64> {
        let mut chats: Vec<i64> = self
            .config
            .routes
            .values()
            .map(|r| self.service.chats.chat_of(&r.name, r.chat_id))
            .chain(
                self.config
                    .people
                    .values()
                    .filter_map(|id| i64::try_from(*id).ok()),
            )
            .chain(i64::try_from(user.id).ok())
            .collect();
        chats.sort_unstable();
        chats.dedup();
        chats
    }

    /// The pending questions `user` may answer, soonest deadline first.
    pub async fn pending(&self, user: &Operator) -> Result<Vec<Question>, ServiceError> {
        let chats = self.post_chats(user);
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for chat in chats {
            for r in self.questions.pending_in_chat(chat).await? {
                if seen.insert(r.id.clone()) && self.chat_for(&r, user).await?.is_some() {
                    out.push(r);
                }
            }
        }
        out.sort_by(|a, b| (a.expires_at, &a.id).cmp(&(b.expires_at, &b.id)));
        Ok(out)
    }

    /// A page of at most `limit` (1 to [`CONSOLE_PAGE_MAX`]) of the ended questions
    /// `user` could have answered, the latest decision first, after `before` (the
    /// previous page's cursor); with the cursor of the next page, `None` once there is no
    /// more. The store's pages are of every question posted in the chats, and the ones
    /// this user could not answer are left out, so a page is read on until it is full,
    /// for a bounded number of reads of the store: a page may then come back short, with
    /// a cursor to go on from.
    pub async fn ended(
        &self,
        user: &Operator,
        before: Option<EndedCursor>,
        limit: u32,
    ) -> Result<(Vec<Question>, Option<EndedCursor>), ServiceError> {
        let limit = limit.clamp(1, CONSOLE_PAGE_MAX);
        let chats = self.post_chats(user);
        let mut cursor = before;
        let mut out = Vec::new();
        for read in 0..CONSOLE_PAGE_READS {
            // The page itself first: usually every question is this user's to see. When
            // some were not, the rest is read in the largest pages.
            let size = if read == 0 { limit } else { CONSOLE_PAGE_MAX };
            let page = self
                .questions
                .ended_in_chats(&chats, cursor.as_ref(), size)
                .await?;
            let exhausted = page.len() < size as usize;
            let got = page.len();
            for (i, r) in page.into_iter().enumerate() {
                if let Some(after) = EndedCursor::after(&r) {
                    cursor = Some(after);
                }
                if self.chat_for(&r, user).await?.is_some() {
                    out.push(r);
                }
                if out.len() == limit as usize {
                    let more = !exhausted || i + 1 < got;
                    return Ok((out, cursor.filter(|_| more)));
                }
            }
            if exhausted {
                return Ok((out, None));
            }
        }
        Ok((out, cursor))
    }

    /// One question `user` may answer (pending or ended), with its audit trail so far;
    /// not found when they could not answer it by tapping.
    pub async fn question(
        &self,
        user: &Operator,
        id: &QuestionId,
    ) -> Result<(Question, Vec<AuditEvent>), ServiceError> {
        let Some(record) = self.questions.get(id).await? else {
            return Err(ServiceError::NotFound);
        };
        if self.chat_for(&record, user).await?.is_none() {
            return Err(ServiceError::NotFound);
        }
        let events = self.audit.events_for(id).await?;
        Ok((record, events))
    }

    /// Decides question `id` as `user`, through the same pipeline as a tap (one
    /// conditional write: the first answer wins; every copy in the chat is edited), only
    /// if `args_hash` is the call's: the page showed this very call. A question that
    /// ended is `AlreadyDecided`; another call, `QuestionChanged`.
    ///
    /// `edited`: an approval with changes (edit before execute). Only a question that
    /// takes edits ([`Question::editable`]) takes them, only parameters that fit the
    /// tool's schema and that no `deny` rule forbids (else `InvalidEdit`, nothing
    /// decided); parameters equal to the asked ones are a plain approval.
    pub async fn decide(
        &self,
        user: &Operator,
        id: &QuestionId,
        action: ConsoleAction,
        args_hash: &str,
        edited: Option<EditedParams>,
    ) -> Result<Question, ServiceError> {
        let record = self.decidable(user, id, args_hash).await?;
        let edit = match edited {
            Some(e) => self.check_edit(&record, e)?,
            None => None,
        };
        let (tap, reason) = action.as_tap();
        let said = match interpret(&record, tap) {
            Meaning::Answer(said) => Said { reason, ..said },
            _ => return Err(ServiceError::NotInConsole(record.kind().as_str())),
        };
        let (edit, edited_value) = match edit {
            Some((e, value)) => (Some(e), Some(value)),
            None => (None, None),
        };
        let said = said.in_console(&record, edited_value);
        let was_edited = edit.is_some();
        let audited = |counted| {
            let action = action.as_str();
            audit::console_decision(
                id.as_str(),
                user,
                action,
                args_hash,
                was_edited,
                counted,
                now(),
            )
        };
        let console = ConsoleAnswer {
            edit,
            audited: audited(true),
        };
        let judged = self
            .service
            .answer(record, user, said, Some(console))
            .await?;
        self.service.then(judged.after);
        let Some(now_stored) = self.questions.get(id).await? else {
            return Err(ServiceError::NotFound);
        };
        let ours = now_stored
            .answers
            .iter()
            .any(|a| a.by.as_ref().is_some_and(|by| by.id == user.id));
        if !ours {
            // Another answer came first: nothing of this one was stored, so its attempt
            // is the only thing to audit.
            if let Err(e) = self.audit.record_event(audited(false)).await {
                tracing::warn!(id = %id, error = %e, "could not audit a console decision that did not count");
            }
            return Err(ServiceError::AlreadyDecided(Box::new(now_stored)));
        }
        Ok(now_stored)
    }

    /// Question `id`, if `user` may decide it from the console now: one they could
    /// answer by tapping, still pending, on the call the page showed (`args_hash`), and
    /// of a kind the console decides (a confirmation, an approval, a form with a call).
    async fn decidable(
        &self,
        user: &Operator,
        id: &QuestionId,
        args_hash: &str,
    ) -> Result<Question, ServiceError> {
        let Some(record) = self.questions.get(id).await? else {
            return Err(ServiceError::NotFound);
        };
        if self.chat_for(&record, user).await?.is_none() {
            return Err(ServiceError::NotFound);
        }
        if record.is_terminal() {
            return Err(ServiceError::AlreadyDecided(Box::new(record)));
        }
        if record.args_hash.as_str() != args_hash {
            return Err(ServiceError::QuestionChanged(Box::new(record)));
        }
        let kind = record.kind();
        let in_console = match &record.interaction {
            None => true,
            Some(_) => {
                kind == InteractionType::Approval
                    || (kind == InteractionType::Form && record.has_call)
            }
        };
        if !in_console {
            return Err(ServiceError::NotInConsole(kind.as_str()));
        }
        Ok(record)
    }

    /// The edit `e` of `record`, checked: the edit to apply and the answer's value, or
    /// `None` when the parameters are the asked ones.
    fn check_edit(
        &self,
        record: &Question,
        e: EditedParams,
    ) -> Result<Option<(EditApplied, Value)>, ServiceError> {
        if !record.editable() {
            return Err(ServiceError::NotEditable(
                if !record.allow_edit && record.interaction.is_none() {
                    "are not taken: the agent did not allow edits (allow_edit)".into()
                } else if record.args_schema.is_none() {
                    "are not taken: the agent sent no args_schema to check an edit against".into()
                } else {
                    "are not taken on this question (it needs more than one answer)".into()
                },
            ));
        }
        let schema = record
            .args_schema
            .as_deref()
            .map(ArgsSchema::parse)
            .transpose()
            .map_err(|why| {
                tracing::error!(id = %record.id, reason = %why.0, "a stored args_schema does not load");
                ServiceError::NotEditable("are not taken: the stored args_schema does not load".into())
            })?
            .ok_or_else(|| ServiceError::NotEditable("are not taken: no args_schema".into()))?;
        schema.check(&e.value).map_err(ServiceError::InvalidEdit)?;
        let args_hash = ArgsHash::of(&e.params);
        if args_hash == record.args_hash {
            return Ok(None);
        }
        // A person may change a call, not its rules: an edit a `deny` rule forbids is
        // refused as the call itself would be.
        let params = PyValue::Dict(e.params.clone());
        let call = RuleCall {
            tool: record.tool.as_str(),
            agent: &record.agent,
            owner: Some(record.owner_id.as_str()),
            params: &params,
            server: record.server.as_ref().map(|s| s.as_str()),
            annotations: record.annotations.as_ref(),
        };
        let (verdict, _) = self.service.rules().policy().judge(&call, &record.route);
        if verdict.effect == Effect::Deny && verdict.enforced {
            return Err(ServiceError::InvalidEdit(vec![FieldError {
                field: String::new(),
                message: format!(
                    "the edited call is {}; change it or cancel",
                    judge::rule_reason(&verdict)
                ),
            }]));
        }
        Ok(Some((
            EditApplied {
                params_json: e.params_json,
                args_hash,
            },
            e.value,
        )))
    }

    /// The routes `user` approves: whose windows and grants they see and may revoke in
    /// the console, as they may in those routes' chats.
    fn routes(&self, user: &Operator) -> Vec<Arc<Route>> {
        let mut routes: Vec<Arc<Route>> = self
            .config
            .routes
            .values()
            .filter(|r| r.may_decide(user.id))
            .cloned()
            .collect();
        routes.sort_by(|a, b| a.name.cmp(&b.name));
        routes
    }

    /// The statistics of `user`'s routes over the last `days` (`/stats` in the console).
    pub async fn stats(
        &self,
        user: &Operator,
        days: u32,
    ) -> Result<Vec<(String, crate::domain::stats::Stats)>, ServiceError> {
        let routes = self.routes(user);
        Ok(super::commands::route_stats(self.questions, &routes, days, self.config, now()).await?)
    }

    /// The live windows of `user`'s routes, soonest to close first, each with what it let
    /// through.
    pub async fn live_windows(
        &self,
        user: &Operator,
    ) -> Result<Vec<(LiveWindow, WindowUse)>, ServiceError> {
        let now = now();
        let mut live = Vec::new();
        for route in self.routes(user) {
            live.extend(self.windows.live_windows(&route.name, now).await?);
        }
        live.sort_by(|a, b| {
            (a.window.expires_at, &a.window.opened_by)
                .cmp(&(b.window.expires_at, &b.window.opened_by))
        });
        let mut out = Vec::with_capacity(live.len());
        for w in live {
            let used = self.runs.window_use(&w.window.opened_by).await?;
            out.push((w, used));
        }
        Ok(out)
    }

    /// Closes the window `opened_by` opened, as `user` would with `/revoke` in its route's
    /// chat; not found when it is not live or not of a route they approve.
    pub async fn revoke_window(
        &self,
        user: &Operator,
        opened_by: &QuestionId,
    ) -> Result<LiveWindow, ServiceError> {
        let now = now();
        let Some(w) = self.windows.live_window_opened_by(opened_by, now).await? else {
            return Err(ServiceError::NotFound);
        };
        let Some(route) = self.routes(user).into_iter().find(|r| r.name == w.route) else {
            return Err(ServiceError::NotFound);
        };
        let chat = self.service.chats.chat_of(&route.name, route.chat_id);
        let revoked = self
            .windows
            .revoke_window(opened_by, user, chat, now)
            .await?
            .ok_or(ServiceError::NotFound)?;
        tracing::info!(id = %opened_by, user_id = user.id, route = %revoked.route,
            "confirmation window revoked from the console");
        Ok(revoked)
    }

    /// The live grants of `user`'s routes, soonest to end first.
    pub async fn live_grants(&self, user: &Operator) -> Result<Vec<Grant>, ServiceError> {
        let now = now();
        let mut live = Vec::new();
        for route in self.routes(user) {
            live.extend(
                self.grants
                    .live_grants(None, Some(&route.name), now)
                    .await?,
            );
        }
        live.sort_by(|a, b| (a.expires_at, &a.grant_id).cmp(&(b.expires_at, &b.grant_id)));
        Ok(live)
    }

    /// Revokes grant `id` as `user` would with its Revoke button; not found when it is
    /// not live or not of a route they approve.
    pub async fn revoke_grant(&self, user: &Operator, id: &GrantId) -> Result<Grant, ServiceError> {
        let mine: Vec<String> = self
            .routes(user)
            .into_iter()
            .map(|r| r.name.clone())
            .collect();
        match self
            .service
            .commands
            .revoke_grant_as(id, user, |route| mine.iter().any(|m| m == route))
            .await?
        {
            CommandReply::GrantRevoked { grant, .. } => Ok(*grant),
            _ => Err(ServiceError::NotFound),
        }
    }
}
