//! The one pipeline every question goes through:
//! create -> (window hit | deliver) -> answer -> decide -> notify.
//!
//! One file per stage: [`create`] (a request becomes a stored question, or is settled
//! at once in the one order of [`gate`]: a `deny` rule, a grant, a window, an `allow`
//! rule), [`deliver`] (it is posted in Telegram), [`answer`] (a tap or reply becomes an answer), [`decide`]
//! (the outcome is stored and shown), [`runs`] (what happened after the yes: the agent's
//! report of running the call, shown where it was decided), [`wait`] (what agents read
//! and wait on) and [`recover`] (what a restart resumes). Beside them, [`lead`] says which replica does
//! the work that must happen once, and [`agree`] who may decide while replicas run
//! different configurations. This file holds the types they share and the ports.
//!
//! The service owns no I/O of its own: storage is a [`Store`], Telegram is a
//! [`Messenger`], deadlines are [`Deadlines`]. It decides *what* happens; every outcome is
//! written by one conditional update
//! ([`Questions::decide`](crate::storage::Questions::decide)), so a tap racing a timeout or
//! a withdrawal ends in exactly one outcome, and each loser is shown the stored one.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use time::OffsetDateTime;
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use serde_json::Value;

use crate::config::{Agent, Config, Route};
use crate::domain::audit;
use crate::domain::edit::ArgsSchema;
use crate::domain::ids::{CallbackToken, ConfirmationId, IdempotencyKey, OwnerId, ToolName};
use crate::domain::interaction::{ConsensusMode, Interaction, TimeoutAction};
use crate::domain::python::value::PyDict;
use crate::domain::question::{Operator, Outcome, Question, Via};
use crate::metrics::Metrics;
use crate::scheduler::Deadlines;
use crate::storage::{
    Administration, AgentEvents, Audit, Change, Decided, Outbox, Questions, Shown, StorageError,
    Store,
};

mod agree;
mod answer;
mod commands;
mod console;
mod create;
mod decide;
mod deliver;
mod gate;
mod grants;
mod interpret;
mod judge;
mod lead;
mod recover;
mod runs;
mod steps;
mod wait;
pub use agree::ConfigReport;
pub use commands::{Command, CommandError, CommandMessage, CommandReply, RevokeTarget, Setup};
pub use console::{CONSOLE_PAGE_MAX, Console, ConsoleAction, EditedParams, NotAnAction};
pub use grants::{GrantBook, GrantCheck, GrantRequest};
pub use steps::{MAX_MENTIONS, Mention};

/// Why Telegram could not carry a message.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{reason}")]
pub struct DeliveryError {
    /// A sentence for the agent and the logs; never contains the bot token.
    pub reason: String,
    /// Telegram says the group became a supergroup with this chat id: the message was
    /// not sent, and should be sent again there.
    pub migrated_to: Option<i64>,
    /// Nothing was refused, but the message could not get through before its deadline
    /// (the chat's queue under Telegram's limits, a `retry_after` or a backoff past it):
    /// a question so ends `timeout`, not fail-closed.
    pub missed_deadline: bool,
    /// Nothing was sent, and Telegram was not called: the bot's own pacing under
    /// Telegram's limits had no slot for the chat before the message's deadline, and this
    /// is when the first one is free (as things stood: it can only get later). A
    /// notification so refused is the agent's to send again then, not Telegram's refusal.
    pub paced_until: Option<OffsetDateTime>,
}

impl DeliveryError {
    pub fn new(reason: impl Into<String>) -> Self {
        DeliveryError {
            reason: reason.into(),
            migrated_to: None,
            missed_deadline: false,
            paced_until: None,
        }
    }
}

/// A question's send slot in a chat, promised by [`Messenger::question_turn`] and used by
/// [`Messenger::send_question`]. Opaque to the service: what it holds is the messenger's
/// (the Telegram adapter's rate-limiter reservation). Dropped unused, the slot goes back
/// to those queued behind it.
pub struct Turn(Box<dyn std::any::Any + Send>);

impl Turn {
    /// Wraps a messenger's own slot.
    pub fn new(slot: impl std::any::Any + Send) -> Self {
        Turn(Box::new(slot))
    }

    /// The messenger's slot back, if this turn holds one of type `T`.
    pub fn into_slot<T: std::any::Any>(self) -> Option<T> {
        self.0.downcast().ok().map(|slot| *slot)
    }
}

/// The port to the operators' chat. Implemented by the Telegram adapter; the service
/// never sees a Telegram type.
#[async_trait]
pub trait Messenger: Send + Sync + 'static {
    /// Waits until a question of `agent` may be posted in `chat_id`: the chat's limits,
    /// the agent's turn among those posting there. Takes only these keys, not the
    /// question, so that thousands of questions queued behind the limits hold no more
    /// than that while they wait. A question that cannot get its turn before
    /// `deadline` hears so at once (`missed_deadline`).
    async fn question_turn(
        &self,
        chat_id: i64,
        agent: &str,
        deadline: OffsetDateTime,
    ) -> Result<Turn, DeliveryError>;
    /// Posts the question with its buttons in `chat_id`, in `turn` (taken for that chat:
    /// a turn for another chat goes back, and the question waits for one in `chat_id`);
    /// returns the message id.
    async fn send_question(
        &self,
        record: &Question,
        chat_id: i64,
        view: &View,
        turn: Turn,
    ) -> Result<i32, DeliveryError>;
    /// Re-renders a message of the question as it stands: progress and live buttons while
    /// it is pending, the outcome without buttons once it ended.
    async fn update_message(
        &self,
        record: &Question,
        chat_id: i64,
        message_id: i32,
        view: &View,
    ) -> Result<(), DeliveryError>;
    /// Sends a one-way message (a notification) from `agent`, framed as its words;
    /// returns its message id.
    async fn send_notification(
        &self,
        chat_id: i64,
        agent: &str,
        text: &str,
    ) -> Result<i32, DeliveryError>;
    /// When the question's message had to cut something, sends the full parameters as a
    /// file replying to it (`reply_to`); `Ok(false)` when nothing was cut.
    async fn send_attachment(
        &self,
        record: &Question,
        chat_id: i64,
        reply_to: i32,
    ) -> Result<bool, DeliveryError>;
    /// Answers a button tap with a toast (or an alert the operator must dismiss).
    async fn answer_tap(
        &self,
        query_id: &str,
        text: &str,
        alert: bool,
    ) -> Result<(), DeliveryError>;
    /// Answers an operator command in `chat_id`, as a reply to its message.
    async fn send_command_reply(
        &self,
        chat_id: i64,
        thread: Option<i32>,
        reply_to: i32,
        reply: &CommandReply,
    ) -> Result<i32, DeliveryError>;
    /// Asks `from`, who tapped "Deny with reason", for their reason: a message only they
    /// can answer (a ForceReply addressed to them), replying to the question's message.
    async fn send_reason_prompt(
        &self,
        record: &Question,
        chat_id: i64,
        thread: Option<i32>,
        reply_to: i32,
        from: &Operator,
    ) -> Result<i32, DeliveryError>;
    /// Reminds the people in `waiting` of the still pending question, replying to its
    /// message.
    async fn send_reminder(
        &self,
        record: &Question,
        chat_id: i64,
        thread: Option<i32>,
        reply_to: i32,
        waiting: &[Mention],
    ) -> Result<i32, DeliveryError>;
}

/// What a message shows besides the record itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct View {
    /// How many answers the question waits for (for "2 of 3 answered").
    pub expected: usize,
    /// A multi-choice selection in progress, shown on the toggles.
    pub selection: Vec<String>,
    /// The chat is a group (poll tallies are shown there).
    pub group: bool,
    /// The forum topic the message goes to (`message_thread_id`), if any.
    pub thread: Option<i32>,
    /// What a "+N min" tap would add now, in seconds; `None`: no such button.
    pub extend_seconds: Option<u64>,
    /// The question was escalated (shown on its messages).
    pub escalation: Option<EscalationView>,
    /// The console's button under a pending question, when `[mini_app]` is on.
    pub review: Option<Review>,
}

/// The button that opens the console on a question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Review {
    /// A `web_app` button (private chats: Telegram refuses them in groups) to this URL.
    WebApp(String),
    /// A link to the app (`https://t.me/<bot>/<short_name>?startapp=<id>`), for groups.
    Link(String),
}

/// Where a question was escalated, as its messages say.
#[derive(Debug, Clone, PartialEq)]
pub struct EscalationView {
    pub from_route: String,
    pub to_route: String,
    pub at: OffsetDateTime,
    /// This message is the escalation route's copy.
    pub here: bool,
}

/// A validated interaction (AI-Parrot's `HumanInteraction`) to ask.
#[derive(Debug, Clone)]
pub struct NewInteraction {
    pub interaction: Interaction,
    pub route: Option<String>,
    /// The person (a `[people]` name) AI-Parrot addressed this copy to.
    pub recipient: Option<String>,
    /// Already checked against the agent's allow-list.
    pub callback_url: Option<String>,
    /// The tool call an approval is about, when the agent sent it (AI-Parrot's guard
    /// through our Python package): shown like a confirmation's.
    pub call: Option<Call>,
    /// Without a call: the window the asking agent's own guard opens on approval, when
    /// known from the configuration (the Redis bridge's `agent_window_seconds`). Shown
    /// to the operator as it is: the agent enforces it, so no cap here can shorten it.
    pub agent_window_seconds: u64,
}

/// A tool call attached to an interaction.
#[derive(Debug, Clone)]
pub struct Call {
    pub tool: ToolName,
    pub params: PyDict,
    /// The `params` object exactly as the agent sent it.
    pub params_json: String,
    pub owner_id: OwnerId,
    /// The window the agent's guard records on approval (before the route's cap).
    pub window_seconds: u64,
    /// The tool's argument schema (`call.args_schema`): with a `form` interaction, the
    /// console's edit form and its check.
    pub args_schema: Option<ArgsSchema>,
}

/// A message sent in reply to one of the bot's messages (a free-text answer).
#[derive(Debug, Clone)]
pub struct Reply {
    pub chat_id: i64,
    pub reply_to: i32,
    /// The request whose reason prompt (the bot's own message asking "why deny?") the
    /// reply answers, read from the prompt's text; `None` for a reply to any other
    /// message, even one naming a request.
    pub reason_prompt_of: Option<ConfirmationId>,
    pub from: Operator,
    pub from_is_bot: bool,
    pub text: String,
}

/// The `tool` column of an interaction (which has none).
pub const INTERACTION_TOOL: &str = "human_interaction";

/// Where a question is posted.
enum Destination {
    Route(Arc<Route>),
    Person { name: String, user_id: u64 },
}

/// A validated request to ask a human.
#[derive(Debug, Clone)]
pub struct NewConfirmation {
    pub tool: ToolName,
    pub params: PyDict,
    /// The `params` object exactly as the agent sent it.
    pub params_json: String,
    pub owner_id: OwnerId,
    pub template: Option<String>,
    pub window_seconds: u64,
    pub allow_edit: bool,
    pub timeout: Duration,
    pub route: Option<String>,
    pub idempotency_key: Option<IdempotencyKey>,
    pub context: Option<String>,
    /// Already checked against the agent's allow-list.
    pub callback_url: Option<String>,
    /// `grant_scope`: the grant the call presents, checked after the `deny` rules and
    /// before the window, the `allow` rules and any person ([`gate`]).
    pub grant: Option<GrantCheck>,
    /// The tool's argument schema: with `allow_edit`, the console's edit form and its
    /// check.
    pub args_schema: Option<ArgsSchema>,
}

/// What a button means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapAction {
    /// Approve (approval, form); "Approve once" when the question offers a window.
    Approve,
    /// "Approve for <window>": approve and open the question's window (confirmations
    /// and calls that ask for one).
    ApproveWindow,
    /// Cancel or Reject.
    Cancel,
    /// "Deny with reason": ask the person why, and let their reply deny.
    DenyWithReason,
    /// "+N min": move the deadline.
    Extend,
    /// Pick option `n` (single choice, poll).
    Choose(u8),
    /// Toggle option `n` (multi choice).
    Toggle(u8),
    /// Send the multi-choice selection.
    Done,
}

/// One of our buttons: what it means and which question it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Button {
    pub action: TapAction,
    pub token: CallbackToken,
}

/// A button tap as the chat reported it, its callback data already read by the adapter.
#[derive(Debug, Clone)]
pub struct Tap {
    pub query_id: String,
    /// `None` when the callback data is none the service produced (a modified client).
    pub button: Option<Button>,
    pub chat_id: Option<i64>,
    pub message_id: Option<i32>,
    /// The tapped message is one the bot itself sent (not a forward of it) and its own
    /// keyboard, as Telegram reports it, holds this very button: only such a message can
    /// be a copy of the question the service has not heard of yet.
    pub carries_button: bool,
    pub from: Operator,
    pub from_is_bot: bool,
    /// A grant's Revoke button (`/grants`), instead of a question's.
    pub revoke_grant: Option<crate::domain::ids::GrantId>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("route '{0}' is not allowed for this agent")]
    RouteNotAllowed(String),
    #[error("no confirmation with this id")]
    NotFound,
    #[error("the confirmation is already decided")]
    AlreadyDecided(Box<Question>),
    #[error(
        "idempotency_key was already used for a different request (tool, owner_id or params differ)"
    )]
    IdempotencyMismatch,
    #[error("the service is shutting down; retry with the same idempotency_key")]
    ShuttingDown,
    #[error("too many pending requests (max {0})")]
    TooManyPending(u32),
    #[error("recipient '{0}' is not in [people]; add them to the config or pass a route")]
    UnknownRecipient(String),
    #[error(
        "interaction_id '{0}' already names a different interaction (question, type or grant terms differ)"
    )]
    InteractionMismatch(String),
    #[error("{0}")]
    NobodyMayAnswer(String),
    #[error("Telegram did not take the message: {0}")]
    Undeliverable(String),
    /// A notification the bot's own pacing had no slot for within its wait: not sent,
    /// Telegram never called. `message` says so and when the next slot is free; the agent
    /// may send it again after `retry_after_secs`.
    #[error("{message}")]
    Paced {
        message: String,
        retry_after_secs: u64,
    },
    /// A grant that cannot be stored as asked: `field` is the request's field at fault.
    #[error("{field}: {reason}")]
    GrantRefused { field: String, reason: String },
    /// A `grant_scope` that does not cover the call's tool (why, naming both): nothing
    /// was read or stored.
    #[error("grant_scope: {0}")]
    ScopeNotCovering(String),
    /// Grant terms that cannot be asked as they are (not shown whole, not on a route,
    /// with a call): `field` is the request's field at fault.
    #[error("{field}: {reason}")]
    InvalidGrant { field: String, reason: String },
    /// An outcome report the confirmation does not take: `why` says why (it was not
    /// confirmed, or a different report was taken); `record` is as stored.
    #[error("{why}")]
    OutcomeRefused { why: String, record: Box<Question> },
    /// The console named another call than the question's (its args hash differs).
    #[error("the question changed since the page showed it")]
    QuestionChanged(Box<Question>),
    /// A question the console cannot decide (a choice, a form, free text): in the chat.
    #[error("a {0} question is answered in the chat, not in the console")]
    NotInConsole(&'static str),
    /// An edit the question does not take (why, in a sentence completing "parameters …").
    #[error("parameters {0}")]
    NotEditable(String),
    /// Edited parameters that do not fit the tool's schema (or that a `deny` rule
    /// forbids): each field at fault; nothing was decided.
    #[error("the edited parameters are invalid")]
    InvalidEdit(Vec<crate::domain::edit::FieldError>),
    /// A call's tool whose name only looks like one a rule names (the sentence says
    /// which, and why that is refused).
    #[error("{0}")]
    LookAlikeTool(String),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Current time, truncated to the millisecond precision that storage keeps, so a record
/// reads back exactly as it was written.
pub fn now() -> OffsetDateTime {
    let t = OffsetDateTime::now_utc();
    t.replace_nanosecond(t.nanosecond() / 1_000_000 * 1_000_000)
        .unwrap_or(t)
}

/// Converts a wall-clock deadline to the monotonic clock the scheduler sleeps on.
fn instant_at(at: OffsetDateTime, now: OffsetDateTime) -> Instant {
    let left = at - now;
    Instant::now() + left.try_into().unwrap_or(Duration::ZERO)
}

/// Parked agents waiting for a request to end. One watch channel per waited-on id; a
/// change fires it and removes it, so the map only holds requests someone is waiting
/// on that are still pending. A decision this process committed hands its record to
/// the waiters with the wake-up ([`Waiters::decided`]): the record the decision's own
/// transaction read back, so an agent blocked on the question is answered without
/// reading it again (one read of four statements less between a tap and its agent's
/// answer, BENCHMARKS.md B3). Any other wake-up carries nothing and the waiter reads.
#[derive(Default)]
struct Waiters {
    map: Mutex<HashMap<ConfirmationId, watch::Sender<Handed>>>,
}

/// What a wake-up hands a waiter: the decided record, when the wake-up is a decision
/// this process committed.
type Handed = Option<Arc<Question>>;

impl Waiters {
    fn subscribe(&self, id: &ConfirmationId) -> watch::Receiver<Handed> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(id.clone())
            .or_insert_with(|| watch::channel(None).0)
            .subscribe()
    }

    fn notify(&self, id: &ConfirmationId) {
        self.wake(id, || None);
    }

    /// Wakes the waiters of `r`, just decided by this process, handing them `r`. Decided
    /// is final: no later write changes what a waiter answers with (its status and
    /// outcome), so the record is as good as a read after the wake-up.
    fn decided(&self, r: &Question) {
        debug_assert!(r.is_terminal());
        // The copy is made only when someone waits.
        self.wake(&r.id, || Some(Arc::new(r.clone())));
    }

    fn wake(&self, id: &ConfirmationId, handed: impl FnOnce() -> Handed) {
        let sender = self
            .map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        if let Some(s) = sender {
            s.send_replace(handed());
        }
    }

    /// Wakes every waiter, to look again at whatever it waits for.
    fn notify_all(&self) {
        let all = std::mem::take(&mut *self.map.lock().unwrap_or_else(|e| e.into_inner()));
        for s in all.into_values() {
            s.send_replace(None);
        }
    }
}

/// How long `GET /v1/events` can resume from: a listener away for longer re-reads the
/// interactions it cares about instead.
pub const AGENT_EVENT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// How long past its deadline a waiting agent lets a request stay pending before it
/// applies the timeout itself. The scheduler normally wins by far; this only guards
/// against a stalled scheduler leaving an agent blocked forever.
const WAITER_GRACE: Duration = Duration::from_secs(2);

pub struct Service {
    config: Arc<Config>,
    store: Arc<dyn Store>,
    messenger: Arc<dyn Messenger>,
    deadlines: Deadlines,
    waiters: Waiters,
    /// Background work (deliveries, message edits) that shutdown waits for.
    tasks: TaskTracker,
    /// Wakes the webhook worker when a decision queued a delivery.
    outbox_wake: Notify,
    /// Routes whose chat moved (group upgraded to supergroup), over the config's chat.
    moved_chats: Mutex<HashMap<String, i64>>,
    /// Ticks after every change that may have written an agent event.
    events: watch::Sender<u64>,
    /// The bot's Telegram username, once known (operator commands addressed to it).
    bot_username: std::sync::OnceLock<String>,
    /// What `GET /metrics` reports; shared with the Telegram adapter.
    metrics: Arc<Metrics>,
    /// Whether this replica does the work that must happen once ([`lead`]).
    lead: lead::Lead,
    /// The messages (question, chat) this process is delivering ([`deliver`]).
    posting: Mutex<HashSet<(ConfirmationId, i64)>>,
    /// What this replica's configuration, and every other live replica's, says about
    /// who may decide ([`agree`]).
    agree: agree::Agree,
    /// The rules in force ([`judge`]); replaced whole on a reload.
    rules: std::sync::RwLock<Arc<crate::domain::rules::Policy>>,
    /// Held from counting an `allow` rule's rate to storing the call it let through.
    rate_gate: tokio::sync::Mutex<()>,
    /// Held while the messages of a question are edited to show how it ended ([`runs`]).
    edits: runs::EditStripes,
}

impl Service {
    pub fn new(config: Arc<Config>, store: Arc<dyn Store>, messenger: Arc<dyn Messenger>) -> Self {
        Service {
            agree: agree::Agree::new(&config),
            rules: std::sync::RwLock::new(config.rules.clone()),
            rate_gate: tokio::sync::Mutex::new(()),
            edits: runs::EditStripes::default(),
            config,
            store,
            messenger,
            deadlines: Deadlines::new(),
            waiters: Waiters::default(),
            tasks: TaskTracker::new(),
            outbox_wake: Notify::new(),
            moved_chats: Mutex::new(HashMap::new()),
            events: watch::channel(0).0,
            bot_username: std::sync::OnceLock::new(),
            metrics: Arc::new(Metrics::new()),
            lead: lead::Lead::default(),
            posting: Mutex::new(HashSet::new()),
        }
    }

    /// Counts into `metrics` (the application's, shared with the Telegram adapter)
    /// instead of a set of its own.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    // The store by role, for the adapters around the service: each reads or writes
    // through the one role it uses, never the whole store (the service itself, the
    // pipeline every question goes through, holds the union).

    /// The questions as stored (the outbox's and the Redis bridge's records).
    pub fn questions(&self) -> &dyn Questions {
        self.store.as_ref()
    }

    /// The webhook outbox (its worker, `crate::outbox`).
    pub fn outbox(&self) -> &dyn Outbox {
        self.store.as_ref()
    }

    /// The audit trail (what `GET /v1/confirmations/{id}/events` reads).
    pub fn audit(&self) -> &dyn Audit {
        self.store.as_ref()
    }

    /// The agents' event streams (SSE and the Redis bridge).
    pub fn agent_events(&self) -> &dyn AgentEvents {
        self.store.as_ref()
    }

    /// The database itself: `/healthz`'s ping and `/metrics`' gauges.
    pub fn administration(&self) -> &dyn Administration {
        self.store.as_ref()
    }

    pub fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    pub fn outbox_wake(&self) -> &Notify {
        &self.outbox_wake
    }

    /// The chat a route posts to now: the config's, unless Telegram moved it.
    fn chat_of(&self, route: &str, configured: i64) -> i64 {
        self.moved_chat(route).unwrap_or(configured)
    }

    /// Wakes whoever waits on the question and the agents' event streams.
    fn changed(&self, id: &ConfirmationId) {
        self.waiters.notify(id);
        self.tick_events();
    }

    /// [`Service::changed`] for a decision this process committed: its waiters are
    /// handed `r` (see [`Waiters`]).
    fn decided_now(&self, r: &Question) {
        self.waiters.decided(r);
        self.tick_events();
    }

    /// Wakes the agents' event streams to read what may have been written.
    fn tick_events(&self) {
        self.events.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Wakes this process's waiters and event streams for what other processes sharing
    /// the database commit
    /// ([`Coordination::follow_changes`](crate::storage::Coordination::follow_changes)),
    /// until `stop` or the feed ends. Its own changes come back too; waking a waiter twice
    /// only costs it a read.
    pub async fn follow_changes(
        self: Arc<Self>,
        mut changes: mpsc::Receiver<Change>,
        stop: CancellationToken,
    ) {
        loop {
            let change = tokio::select! {
                c = changes.recv() => c,
                _ = stop.cancelled() => return,
            };
            match change {
                Some(Change::Question { id, ended, ours }) => {
                    self.changed(&id);
                    // What another replica did may leave the leader work: a question
                    // asked there is the leader's to post; one decided there, its
                    // outcome to show and its webhook to send.
                    if self.leading() && !ours {
                        if ended {
                            self.outbox_wake.notify_one();
                            self.tasks.spawn(self.clone().show_ended(id));
                        } else {
                            self.tasks.spawn(self.clone().adopt(id));
                        }
                    }
                }
                Some(Change::Other) => self.tick_events(),
                Some(Change::Missed) => {
                    self.waiters.notify_all();
                    self.tick_events();
                    // What was asked meanwhile is found among the pending questions.
                    if self.leading() {
                        let me = self.clone();
                        self.tasks.spawn(async move {
                            if let Err(e) = me.take_over().await {
                                tracing::warn!(error = %e, "cannot look for questions asked while the change feed was lost");
                            }
                        });
                    }
                }
                None => return,
            }
        }
    }

    /// Ticks whenever an agent event may have been written (`GET /v1/events` listens).
    pub fn subscribe_events(&self) -> watch::Receiver<u64> {
        self.events.subscribe()
    }

    /// What a message of `record` in `chat_id` shows besides the record.
    fn view(&self, record: &Question, chat_id: i64) -> View {
        // Progress is only worth showing when more than one answer is awaited.
        let several = record
            .interaction
            .as_ref()
            .is_some_and(|i| i.consensus != ConsensusMode::FirstResponse);
        View {
            expected: if several {
                answer::expected_answers(&self.config, record)
            } else {
                1
            },
            selection: Vec::new(),
            group: chat_id < 0,
            thread: self.thread_of(record, chat_id),
            extend_seconds: answer::extension_to(&self.config, record)
                .map(|to| u64::try_from((to - record.expires_at).whole_seconds()).unwrap_or(0)),
            escalation: self.escalated_to(record).and_then(|(_, to)| {
                Some(EscalationView {
                    from_route: record.route.clone(),
                    to_route: to.name.clone(),
                    at: record.progress.escalated_at?,
                    here: chat_id != record.chat_id
                        && chat_id == self.chat_of(&to.name, to.chat_id),
                })
            }),
            review: self.review_of(record, chat_id),
        }
    }

    /// The console's button under `record` in `chat_id`: a `web_app` button in a private
    /// chat; in a group a link to the app registered with @BotFather (when its
    /// `short_name` and the bot's username are known). None when the console is off or
    /// the question ended.
    fn review_of(&self, record: &Question, chat_id: i64) -> Option<Review> {
        let app = self.config.mini_app.as_ref()?;
        if record.is_terminal() {
            return None;
        }
        if chat_id > 0 {
            return Some(Review::WebApp(format!(
                "{}/app?q={}",
                app.public_url, record.id
            )));
        }
        let bot = self.bot_username.get()?;
        let short = app.short_name.as_ref()?;
        Some(Review::Link(format!(
            "https://t.me/{bot}/{short}?startapp={}",
            record.id
        )))
    }
}
