//! The one pipeline every question goes through:
//! create -> (window hit | deliver) -> answer -> decide -> notify.
//!
//! One file per stage: [`create`] (stored, or settled at once in the order of [`gate`]),
//! [`deliver`], [`answer`], [`decide`], [`runs`] (the agent's report after the yes),
//! [`wait`] and [`recover`]. Each feature's state lives in a small owner of its own,
//! holding the storage roles it uses: [`Rules`] ([`judge`]), [`Lead`] ([`lead`]: which
//! replica does the work that must happen once), [`Agree`] ([`agree`]: who may decide
//! while replicas run different configurations), [`Chats`], the reminders' timeline
//! ([`steps`]), the operator commands ([`commands`]) and the questions' messages as they
//! stand ([`board`]). `Service` keeps the pipeline.
//!
//! Every outcome is written by one conditional update
//! ([`Questions::decide`](crate::storage::Questions::decide)), so a tap racing a timeout or
//! a withdrawal ends in exactly one outcome, and each loser is shown the stored one.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use time::OffsetDateTime;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, Route};
use crate::domain::edit::ArgsSchema;
use crate::domain::ids::{CallbackToken, IdempotencyKey, OwnerId, QuestionId, ToolName};
use crate::domain::interaction::Interaction;
use crate::domain::mcp_call::{Annotations, ServerName};
use crate::domain::python::value::PyDict;
use crate::domain::question::{Operator, Question};
use crate::metrics::Metrics;
use crate::storage::{
    Administration, AgentEvents, Audit, Change, Outages, Outbox, Questions, Runs, StorageError,
    Store, Windows,
};

mod agree;
mod answer;
mod away;
mod board;
mod chats;
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
mod outage;
mod pins;
mod recover;
mod runs;
mod steps;
mod suggest;
mod wait;
pub use agree::{Agree, ConfigReport};
pub use away::{Absentees, AwaySet};
pub use chats::Chats;
pub use commands::{
    Command, CommandError, CommandMessage, CommandReply, MAX_STATS_DAYS, RevokeTarget, Setup,
};
pub use console::{CONSOLE_PAGE_MAX, Console, ConsoleAction, EditedParams, NotAnAction};
pub use grants::{GrantBook, GrantCheck, GrantRequest};
pub use judge::Rules;
pub use lead::Lead;
pub use pins::{NoticeKind, PinNotice, ToolListing};
pub use recover::run_window_purge;
pub use steps::{MAX_MENTIONS, Mention};
pub use suggest::{CHAT_RULES_REFRESH, ChatRuleAction, ChatRuleTap, OFFER_CHECK_EVERY, Offer};
pub use wait::{Asked, Changes};

use board::{Board, BoardParts};
use commands::{CommandStores, Commands};
use gate::Gate;
use steps::Timeline;

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
    /// Answers an operator command in `chat_id`, as a reply to its message (`None`: a
    /// message of the service's own, such as the proposals offered on a schedule).
    async fn send_command_reply(
        &self,
        chat_id: i64,
        thread: Option<i32>,
        reply_to: Option<i32>,
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
    /// Posts a message about an MCP server's tools in `chat_id` (in forum topic
    /// `thread`), with its Allow button when it shows something held; returns its id.
    async fn send_pin_notice(
        &self,
        chat_id: i64,
        thread: Option<i32>,
        notice: &PinNotice,
    ) -> Result<i32, DeliveryError>;
    /// Shows the message about an MCP server's tools as it stands now (allowed: who and
    /// when, without its button).
    async fn show_pin_notice(
        &self,
        chat_id: i64,
        message_id: i32,
        notice: &PinNotice,
    ) -> Result<(), DeliveryError>;
    /// Whether Telegram answers at all (`getMe`, once, within `within`): `Err` says why
    /// not, in a sentence without the token. What the leader's outage watch asks.
    async fn probe(&self, within: std::time::Duration) -> Result<(), String>;
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
    /// The route's SLA mark on a pending question, and when its SLA ends.
    pub sla: Option<(crate::domain::sla::SlaMark, OffsetDateTime)>,
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
    pub reason_prompt_of: Option<QuestionId>,
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
    /// The MCP server the call goes to (a gateway's upstream): shown, matched by the
    /// rules' `servers`, part of the window's key.
    pub server: Option<ServerName>,
    /// The tool's MCP annotations: shown, matched by the rules' `annotations`.
    pub annotations: Option<Annotations>,
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
    /// The Allow button under held MCP tool definitions (its token), instead of a
    /// question's.
    pub allow_tools: Option<CallbackToken>,
    /// A button of a rule proposed or accepted in the chat, instead of a question's.
    pub chat_rule: Option<ChatRuleTap>,
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
        "idempotency_key was already used for a different request (tool, owner_id, params, server or annotations differ)"
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
    RunReportRefused { why: String, record: Box<Question> },
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

/// How long `GET /v1/events` can resume from: a listener away for longer re-reads the
/// interactions it cares about instead.
pub const AGENT_EVENT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// The store by role, for the adapters around the service: each reads or writes through
/// the one role it uses, never the whole store (the service itself, the pipeline every
/// question goes through, holds the union).
pub struct StoreRoles {
    /// The questions as stored (the outbox's and the Redis bridge's records).
    pub questions: Arc<dyn Questions>,
    /// The webhook outbox (its worker, `crate::outbox`).
    pub outbox: Arc<dyn Outbox>,
    /// The outage alerts (their delivery, `crate::outbox::alerts`).
    pub outages: Arc<dyn Outages>,
    /// The audit trail (what `GET /v1/confirmations/{id}/events` reads).
    pub audit: Arc<dyn Audit>,
    /// The agents' event streams (SSE and the Redis bridge).
    pub agent_events: Arc<dyn AgentEvents>,
    /// The database itself: `/healthz`'s ping and `/metrics`' gauges.
    pub administration: Arc<dyn Administration>,
    /// What the calls a window let through did (a confirmation's `window_use`).
    pub runs: Arc<dyn Runs>,
    /// The confirmation windows (their periodic purge).
    pub windows: Arc<dyn Windows>,
}

pub struct Service {
    config: Arc<Config>,
    store: Arc<dyn Store>,
    /// The same store by role, for the adapters ([`Service::roles`]).
    roles: StoreRoles,
    messenger: Arc<dyn Messenger>,
    /// Who waits for a question to change, and the agents' event streams ([`wait`]).
    changes: Changes,
    /// What an agent reads of its own questions ([`wait`]).
    asked: Asked,
    /// Background work (deliveries, message edits) that shutdown waits for.
    tasks: TaskTracker,
    /// Wakes the webhook worker when a decision queued a delivery.
    outbox_wake: Notify,
    /// What `GET /metrics` reports; shared with the Telegram adapter.
    metrics: Arc<Metrics>,
    /// Whether this replica does the work that must happen once, and its deadlines
    /// ([`lead`]).
    lead: Arc<Lead>,
    /// The messages (question, chat) this process is delivering ([`deliver`]).
    posting: Mutex<HashSet<(QuestionId, i64)>>,
    /// What this replica's configuration, and every other live replica's, says about
    /// who may decide ([`agree`]).
    agree: Arc<Agree>,
    /// The rules in force and their rate gate ([`judge`]), and what else settles a
    /// call before anyone is asked ([`gate`]).
    gate: Gate,
    /// The routes' chats as they are now, and the bot's name ([`chats`]).
    chats: Arc<Chats>,
    /// A question's reminders, escalation and deadline by its route, and its reminders
    /// ([`steps`]).
    timeline: Arc<Timeline>,
    /// The operator commands ([`commands`]).
    commands: Commands,
    /// The questions' messages, showing progress, outcome and run ([`board`]).
    board: Arc<Board>,
    /// The approvers away, as last read ([`away`]).
    absentees: Arc<Absentees>,
}

/// Puts the service together: each feature's owner with the storage roles it uses.
fn assemble(
    config: Arc<Config>,
    store: Arc<dyn Store>,
    messenger: Arc<dyn Messenger>,
    metrics: Arc<Metrics>,
) -> Service {
    let holder = lead::new_holder();
    let chats = Arc::new(Chats::new(config.clone(), store.clone()));
    let agree = Arc::new(Agree::new(
        &config,
        holder.clone(),
        store.clone(),
        metrics.clone(),
    ));
    let rules = Arc::new(Rules::new(
        config.rules.clone(),
        store.clone(),
        store.clone(),
        metrics.clone(),
    ));
    let stores = CommandStores {
        away: store.clone(),
        rules: rules.clone(),
        chat_rules: store.clone(),
        questions: store.clone(),
        windows: store.clone(),
        grants: store.clone(),
        runs: store.clone(),
        audit: store.clone(),
    };
    let roles = StoreRoles {
        questions: store.clone(),
        outbox: store.clone(),
        outages: store.clone(),
        audit: store.clone(),
        agent_events: store.clone(),
        administration: store.clone(),
        runs: store.clone(),
        windows: store.clone(),
    };
    let lead = Arc::new(Lead::new(
        holder,
        config.lease,
        store.clone(),
        metrics.clone(),
    ));
    let absentees = Arc::new(Absentees::default());
    let timeline = Arc::new(Timeline::new(
        config.clone(),
        chats.clone(),
        agree.clone(),
        messenger.clone(),
        absentees.clone(),
    ));
    let tasks = TaskTracker::new();
    let board = Arc::new(Board::new(BoardParts {
        config: config.clone(),
        questions: store.clone(),
        messages: store.clone(),
        runs: store.clone(),
        messenger: messenger.clone(),
        chats: chats.clone(),
        timeline: timeline.clone(),
        lead: lead.clone(),
        tasks: tasks.clone(),
    }));
    Service {
        asked: Asked::new(store.clone()),
        roles,
        lead,
        gate: Gate::new(rules, store.clone(), store.clone()),
        commands: Commands::new(
            config.clone(),
            chats.clone(),
            agree.clone(),
            stores,
            metrics.clone(),
        ),
        timeline,
        agree,
        chats,
        config,
        store,
        messenger,
        changes: Changes::default(),
        tasks,
        board,
        outbox_wake: Notify::new(),
        metrics,
        posting: Mutex::new(HashSet::new()),
        absentees,
    }
}

impl Service {
    pub fn new(config: Arc<Config>, store: Arc<dyn Store>, messenger: Arc<dyn Messenger>) -> Self {
        assemble(config, store, messenger, Arc::new(Metrics::new()))
    }

    /// Counts into `metrics` (the application's, shared with the Telegram adapter)
    /// instead of a set of its own.
    pub fn with_metrics(self, metrics: Arc<Metrics>) -> Self {
        assemble(self.config, self.store, self.messenger, metrics)
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Whether this replica leads, and giving the lead up ([`lead`]).
    pub fn lead(&self) -> &Lead {
        &self.lead
    }

    /// This replica's record of its configuration, and the others' ([`agree`]).
    pub fn agreement(&self) -> &Arc<Agree> {
        &self.agree
    }

    /// The rules in force ([`judge`]).
    pub fn rules(&self) -> &Rules {
        self.gate.rules()
    }

    /// Who waits for a question to change, and the agents' event streams ([`wait`]).
    pub fn changes(&self) -> &Changes {
        &self.changes
    }

    /// What an agent reads of its own questions ([`wait`]).
    pub fn asked(&self) -> &Asked {
        &self.asked
    }

    /// The routes' chats and the bot's name ([`chats`]).
    pub fn chats(&self) -> &Chats {
        &self.chats
    }

    /// The store by role, for the adapters around the service.
    pub fn roles(&self) -> &StoreRoles {
        &self.roles
    }

    pub fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    pub fn outbox_wake(&self) -> &Notify {
        &self.outbox_wake
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
                    self.changes.changed(&id);
                    // What another replica did may leave the leader work: a question
                    // asked there is the leader's to post; one decided there, its
                    // outcome to show and its webhook to send.
                    if self.lead.leading() && !ours {
                        if ended {
                            self.outbox_wake.notify_one();
                            self.tasks.spawn(self.clone().show_ended(id));
                        } else {
                            self.tasks.spawn(self.clone().adopt(id));
                        }
                    }
                }
                Some(Change::Other) => self.changes.tick(),
                Some(Change::Missed) => {
                    self.changes.wake_all();
                    // What was asked meanwhile is found among the pending questions.
                    if self.lead.leading() {
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
}
