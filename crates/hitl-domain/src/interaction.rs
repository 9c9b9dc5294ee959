//! AI-Parrot's human interaction model (`HumanInteraction` in, `HumanResponse` out), as
//! this service reads and answers it, and the consensus rules that decide when a question
//! asked of several people is settled.
//!
//! Pure: parsing takes hostile JSON and returns either a checked [`Interaction`] or the
//! first field at fault; [`consensus`] takes the answers so far and says whether they
//! settle the question.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use super::grant::GrantTerms;
use super::ids::all_visible;
use super::question::Operator;
use super::text;

/// Bounds on what an agent may ask, so one interaction cannot flood a chat or the database.
pub const MAX_INTERACTION_ID_CHARS: usize = 200;
pub const MAX_QUESTION_CHARS: usize = 4096;
pub const MAX_CONTEXT_CHARS: usize = 4096;
pub const MAX_OPTIONS: usize = 50;
pub const MAX_OPTION_KEY_CHARS: usize = 100;
pub const MAX_OPTION_LABEL_CHARS: usize = 200;
pub const MAX_TARGET_HUMANS: usize = 100;
pub const MAX_FREE_TEXT_CHARS: usize = 4096;
/// AI-Parrot's default `timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(7200);

macro_rules! wire_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $wire:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [&'static str] = &[$($wire),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $wire),+ }
            }

            pub fn parse(s: &str) -> Option<Self> {
                match s { $($wire => Some($name::$variant),)+ _ => None }
            }
        }
    };
}

wire_enum!(
    /// What kind of answer the question wants.
    InteractionType {
        FreeText = "free_text",
        SingleChoice = "single_choice",
        MultiChoice = "multi_choice",
        Approval = "approval",
        Form = "form",
        Poll = "poll",
    }
);

impl InteractionType {
    /// The kind as the operator reads it, in the chat's `/pending` and in the console:
    /// `free-text`, `single-choice`, `approval`, ... (a question "of this kind").
    pub fn in_words(self) -> &'static str {
        match self {
            InteractionType::FreeText => "free-text",
            InteractionType::SingleChoice => "single-choice",
            InteractionType::MultiChoice => "multi-choice",
            InteractionType::Approval => "approval",
            InteractionType::Form => "form",
            InteractionType::Poll => "poll",
        }
    }
}

wire_enum!(
    /// When a question asked of several people is settled.
    ConsensusMode {
        FirstResponse = "first_response",
        AllRequired = "all_required",
        Majority = "majority",
        Quorum = "quorum",
    }
);

wire_enum!(
    /// What the agent wants done when nobody answered in time.
    TimeoutAction {
        Cancel = "cancel",
        Default = "default",
        Escalate = "escalate",
        Retry = "retry",
    }
);

wire_enum!(
    Severity {
        Low = "low",
        Normal = "normal",
        High = "high",
        Critical = "critical",
    }
);

/// One choice of a `single_choice`, `multi_choice` or `poll` question.
#[derive(Debug, Clone, PartialEq)]
pub struct ChoiceOption {
    pub key: String,
    pub label: String,
    pub description: Option<String>,
}

/// A checked `HumanInteraction`.
#[derive(Debug, Clone, PartialEq)]
pub struct Interaction {
    pub interaction_id: String,
    pub kind: InteractionType,
    pub question: String,
    pub context: Option<String>,
    pub options: Vec<ChoiceOption>,
    /// The values a `form` is approved with: `form_schema["current_values"]`, else the
    /// schema's fields with their defaults.
    pub form_values: Map<String, Value>,
    pub default_response: Value,
    pub target_humans: Vec<String>,
    pub consensus: ConsensusMode,
    /// How many matching answers settle a `quorum` question, when the interaction says.
    pub quorum: Option<u32>,
    pub timeout: Duration,
    pub timeout_action: TimeoutAction,
    pub severity: Severity,
    pub source_agent: Option<String>,
    /// The terms of a grant question (`grant`): set, the question asks a person for a
    /// grant on these terms, and their yes stores it (see [`super::grant`]). Only ever
    /// read from this field, never from the question's words.
    pub grant: Option<GrantTerms>,
    /// The object exactly as the agent sent it (less nothing): echoed back, so the fields
    /// this service does not act on survive the round trip.
    pub raw: Map<String, Value>,
}

/// The first field at fault, named by its path (`interaction.options[2].key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub reason: String,
}

fn err(field: impl Into<String>, reason: impl Into<String>) -> FieldError {
    FieldError {
        field: format!("interaction.{}", field.into()),
        reason: reason.into(),
    }
}

/// A string field; `null` and absent are `None`.
fn opt_str(o: &Map<String, Value>, name: &str, max: usize) -> Result<Option<String>, FieldError> {
    match o.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.chars().count() <= max => Ok(Some(s.clone())),
        Some(Value::String(_)) => Err(err(name, format!("must be at most {max} characters"))),
        Some(_) => Err(err(name, "must be a string")),
    }
}

fn enum_field<T>(
    o: &Map<String, Value>,
    name: &str,
    parse: fn(&str) -> Option<T>,
    all: &[&str],
    default: T,
) -> Result<T, FieldError> {
    match o.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::String(s)) => {
            parse(s).ok_or_else(|| err(name, format!("must be one of: {}", all.join(", "))))
        }
        Some(_) => Err(err(name, format!("must be one of: {}", all.join(", ")))),
    }
}

/// A checked positive number of seconds.
fn seconds(v: &Value, name: &str) -> Result<Duration, FieldError> {
    match v.as_f64() {
        Some(s) if s.is_finite() && s > 0.0 => {
            // Rounded to the microsecond first, so 2.007 is 2007 ms and not 2006.999.
            Ok(Duration::from_micros((s * 1e6).round() as u64))
        }
        _ => Err(err(name, "must be a number of seconds greater than 0")),
    }
}

/// The agent's own id for the interaction, checked as a path segment it must be.
fn interaction_id(o: &Map<String, Value>) -> Result<String, FieldError> {
    let interaction_id = opt_str(o, "interaction_id", MAX_INTERACTION_ID_CHARS)?
        .ok_or_else(|| err("interaction_id", "is required"))?;
    if interaction_id.is_empty() || interaction_id.chars().any(char::is_control) {
        return Err(err(
            "interaction_id",
            "must be non-empty and free of control characters",
        ));
    }
    // The id is a path segment of /v1/interactions/{interaction_id}, percent-encoded by
    // every client of ours; but URL parsers (WHATWG's, reqwest's, yarl's) resolve a `.`
    // or `..` segment even when its dots are encoded, so no client could read or
    // withdraw it: refused here rather than asked and then unreachable.
    if matches!(interaction_id.as_str(), "." | "..") {
        return Err(err(
            "interaction_id",
            "cannot be \".\" or \"..\": a URL path cannot carry it (GET and DELETE \
             /v1/interactions/{interaction_id} could never reach it)",
        ));
    }
    Ok(interaction_id)
}

/// Who the agent asked to answer, by name (none: the route's deciders).
fn target_humans(o: &Map<String, Value>) -> Result<Vec<String>, FieldError> {
    Ok(match o.get("target_humans") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) if items.len() <= MAX_TARGET_HUMANS => items
            .iter()
            .enumerate()
            .map(|(i, t)| match t {
                Value::String(s) if !s.is_empty() && s.chars().count() <= 200 => Ok(s.clone()),
                _ => Err(err(
                    format!("target_humans[{i}]"),
                    "must be a non-empty string of at most 200 characters",
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(err(
                "target_humans",
                format!("must be a list of at most {MAX_TARGET_HUMANS} strings"),
            ));
        }
    })
}

/// The interaction's timeout: the default when absent, never past the service's maximum.
fn timeout(o: &Map<String, Value>, max_timeout_seconds: f64) -> Result<Duration, FieldError> {
    Ok(match o.get("timeout") {
        None | Some(Value::Null) => Duration::try_from_secs_f64(max_timeout_seconds)
            .map_or(DEFAULT_TIMEOUT, |max| DEFAULT_TIMEOUT.min(max)),
        // AI-Parrot always sends its default (7200 s): a longer timeout than the service
        // allows is shortened to the maximum rather than refused; the agent sees the
        // deadline in the record and gets `timeout` at it.
        Some(v) => seconds(v, "timeout")?
            .min(Duration::try_from_secs_f64(max_timeout_seconds).unwrap_or(Duration::MAX)),
    })
}

/// Parses a `HumanInteraction` object. Unknown fields are kept (in `raw`) and ignored.
pub fn parse(v: &Value, max_timeout_seconds: f64) -> Result<Interaction, FieldError> {
    let Some(o) = v.as_object() else {
        return Err(FieldError {
            field: "interaction".into(),
            reason: "must be a JSON object (AI-Parrot's HumanInteraction)".into(),
        });
    };
    let interaction_id = interaction_id(o)?;
    let question = free_text(opt_str(o, "question", MAX_QUESTION_CHARS)?, "question")?
        .filter(|q| !q.trim().is_empty())
        .ok_or_else(|| err("question", "is required (a non-empty string)"))?;
    let context = free_text(opt_str(o, "context", MAX_CONTEXT_CHARS)?, "context")?;
    let kind = enum_field(
        o,
        "interaction_type",
        InteractionType::parse,
        InteractionType::ALL,
        InteractionType::FreeText,
    )?;
    let options = parse_options(o.get("options"))?;
    if matches!(
        kind,
        InteractionType::SingleChoice | InteractionType::MultiChoice | InteractionType::Poll
    ) && options.is_empty()
    {
        return Err(err(
            "options",
            format!("must list at least one option for {}", kind.as_str()),
        ));
    }
    let form_values = match o.get("form_schema") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(schema)) => form_values(schema),
        Some(_) => return Err(err("form_schema", "must be an object")),
    };
    let target_humans = target_humans(o)?;
    let consensus = enum_field(
        o,
        "consensus_mode",
        ConsensusMode::parse,
        ConsensusMode::ALL,
        ConsensusMode::FirstResponse,
    )?;
    let timeout = timeout(o, max_timeout_seconds)?;
    let timeout_action = enum_field(
        o,
        "timeout_action",
        TimeoutAction::parse,
        TimeoutAction::ALL,
        TimeoutAction::Cancel,
    )?;
    let severity = enum_field(
        o,
        "severity",
        Severity::parse,
        Severity::ALL,
        Severity::Normal,
    )?;
    let default_response = o.get("default_response").cloned().unwrap_or(Value::Null);
    let quorum = quorum_of(o)?;
    let grant = GrantTerms::of_interaction(
        o.get("grant"),
        kind == InteractionType::Approval,
        timeout_action == TimeoutAction::Default && default_response == Value::Bool(true),
    )
    .map_err(|e| err(e.field, e.reason))?;
    Ok(Interaction {
        interaction_id,
        kind,
        question,
        context,
        options,
        form_values,
        default_response,
        target_humans,
        consensus,
        quorum,
        timeout,
        timeout_action,
        severity,
        source_agent: source_agent(o)?,
        grant,
        raw: o.clone(),
    })
}

/// An interaction read back from storage: checked as [`parse`] checks it, without the
/// timeout cap (the configuration may have changed since). A `grant` this service did
/// not store as terms (a field of that name an agent sent before grant questions
/// existed, kept as unknown fields are) is read as none: it grants nothing, and the row
/// still loads.
pub fn parse_stored(v: &Value) -> Result<Interaction, FieldError> {
    match parse(v, f64::MAX) {
        Err(e) if e.field.starts_with("interaction.grant") => {
            let mut without = v.clone();
            if let Some(o) = without.as_object_mut() {
                o.remove("grant");
            }
            let mut i = parse(&without, f64::MAX)?;
            i.raw = v.as_object().cloned().unwrap_or_default();
            Ok(i)
        }
        read => read,
    }
}

/// Text shown to the humans: other invisible characters are shown to them as escapes;
/// NUL and ESC are refused (see [`text::has_nul_or_esc`]).
fn free_text(value: Option<String>, name: &str) -> Result<Option<String>, FieldError> {
    match value {
        Some(v) if text::has_nul_or_esc(&v) => {
            Err(err(name, "must not contain NUL or ESC characters"))
        }
        v => Ok(v),
    }
}

/// `source_agent`: the name the humans are told is asking, so every character of it must
/// be visible (a bidi override could make one agent's name read as another's).
fn source_agent(o: &Map<String, Value>) -> Result<Option<String>, FieldError> {
    let name = opt_str(o, "source_agent", 200)?;
    if let Some(n) = &name {
        all_visible(n).map_err(|e| err("source_agent", e.0))?;
    }
    Ok(name)
}

fn parse_options(v: Option<&Value>) -> Result<Vec<ChoiceOption>, FieldError> {
    let items = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) if items.len() <= MAX_OPTIONS => items,
        Some(_) => {
            return Err(err(
                "options",
                format!("must be a list of at most {MAX_OPTIONS} options"),
            ));
        }
    };
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Some(o) = item.as_object() else {
            return Err(err(
                format!("options[{i}]"),
                "must be an object with key and label",
            ));
        };
        let field = |name: &str| format!("options[{i}].{name}");
        let key = match o.get("key") {
            Some(Value::String(k))
                if !k.is_empty() && k.chars().count() <= MAX_OPTION_KEY_CHARS =>
            {
                k.clone()
            }
            _ => {
                return Err(err(
                    field("key"),
                    format!(
                        "must be a non-empty string of at most {MAX_OPTION_KEY_CHARS} characters"
                    ),
                ));
            }
        };
        if !seen.insert(key.clone()) {
            return Err(err(field("key"), format!("repeats the key {key:?}")));
        }
        let label = match o.get("label") {
            Some(Value::String(l))
                if !l.trim().is_empty() && l.chars().count() <= MAX_OPTION_LABEL_CHARS =>
            {
                l.clone()
            }
            _ => {
                return Err(err(
                    field("label"),
                    format!(
                        "must be a non-empty string of at most {MAX_OPTION_LABEL_CHARS} characters"
                    ),
                ));
            }
        };
        let description = match o.get("description") {
            None | Some(Value::Null) => None,
            Some(Value::String(d)) if d.chars().count() <= 1000 => Some(d.clone()),
            Some(_) => {
                return Err(err(
                    field("description"),
                    "must be a string of at most 1000 characters",
                ));
            }
        };
        out.push(ChoiceOption {
            key,
            label,
            description,
        });
    }
    Ok(out)
}

/// The values a `form` stands for: `current_values` when the schema has them (what
/// AI-Parrot's confirmation guard sends), else each property's `default` (or `null`).
fn form_values(schema: &Map<String, Value>) -> Map<String, Value> {
    if let Some(Value::Object(current)) = schema.get("current_values") {
        return current.clone();
    }
    let fields = schema
        .get("properties")
        .or_else(|| schema.get("fields"))
        .and_then(Value::as_object);
    let mut out = Map::new();
    if let Some(fields) = fields {
        for (name, spec) in fields {
            let default = spec.get("default").cloned().unwrap_or(Value::Null);
            out.insert(name.clone(), default);
        }
    }
    out
}

/// `quorum` from the interaction: `policy.quorum` or `metadata.quorum` (a positive
/// integer), when present.
fn quorum_of(o: &Map<String, Value>) -> Result<Option<u32>, FieldError> {
    for holder in ["policy", "metadata"] {
        if let Some(q) = o.get(holder).and_then(|p| p.get("quorum")) {
            return match q.as_u64() {
                Some(n) if (1..=1000).contains(&n) => Ok(Some(n as u32)),
                _ => Err(err(
                    format!("{holder}.quorum"),
                    "must be an integer from 1 to 1000",
                )),
            };
        }
    }
    Ok(None)
}

/// One person's answer, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// What AI-Parrot sees as `respondent`: a name from `target_humans`, or the Telegram
    /// user id in decimal; `system` for a default applied on timeout.
    pub respondent: String,
    /// The Telegram user, when a person answered.
    pub by: Option<Operator>,
    pub value: Value,
    /// True for a `default_response` applied on timeout.
    pub is_default: bool,
    /// An approval given with "Approve once" (only offered for a call with a window).
    pub once: bool,
    /// A "no" given with "Deny with reason": what the person replied.
    pub reason: Option<String>,
    pub at: OffsetDateTime,
}

/// What an approving answer to an interaction's call allowed: `once`, or the window
/// for this many seconds. AI-Parrot's guard over our Python package reads it from the
/// response's metadata to record (or not) its own window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Once,
    Window(u64),
}

/// The `HumanResponse` JSON for `answer`: exactly AI-Parrot's fields, since its model
/// forbids extra ones.
pub fn human_response(
    interaction_id: &str,
    kind: InteractionType,
    answer: &Answer,
    scope: Option<Scope>,
) -> Value {
    let mut metadata = Map::new();
    metadata.insert("channel".into(), json!("telegram"));
    match scope {
        Some(Scope::Once) => {
            metadata.insert("approved_scope".into(), json!("once"));
            metadata.insert("window_seconds".into(), json!(0));
        }
        Some(Scope::Window(seconds)) => {
            metadata.insert("approved_scope".into(), json!("window"));
            metadata.insert("window_seconds".into(), json!(seconds));
        }
        None => {}
    }
    if let Some(by) = &answer.by {
        metadata.insert("telegram_user_id".into(), json!(by.id));
        metadata.insert("telegram_name".into(), json!(by.name));
        if let Some(u) = &by.username {
            metadata.insert("telegram_username".into(), json!(u));
        }
    }
    if answer.is_default {
        metadata.insert("default".into(), json!(true));
        metadata.insert("reason".into(), json!("timeout"));
    }
    if let Some(reason) = &answer.reason {
        metadata.insert("reason".into(), json!(reason));
        metadata.insert("denial_reason".into(), json!(reason));
    }
    // AI-Parrot's `form` responses must hold a dict, so a cancelled form (no values) is
    // sent as the `free_text` answer its manager also accepts for a form; its
    // ConfirmationGuard reads the `null` as "cancelled by the user".
    let response_type = match (kind, &answer.value) {
        (InteractionType::Form, Value::Null) => InteractionType::FreeText,
        _ => kind,
    };
    json!({
        "interaction_id": interaction_id,
        "respondent": answer.respondent,
        "response_type": response_type.as_str(),
        "value": answer.value,
        "timestamp": iso8601(answer.at),
        "metadata": metadata,
    })
}

/// The `HumanResponse` JSON that tells an AI-Parrot agent the question `item` (a queued
/// `HumanInteraction`, as far as it could be read) was refused and never asked, so it
/// stops waiting instead of timing out: the "no" of its type (`false` for an approval,
/// no selection for a multi-choice, `null` for the others, a form's sent as the
/// `free_text` its manager also accepts for one, as for a cancelled form), from
/// `respondent`, with `metadata.refused: true` and the reason. `None` when the item
/// names no `interaction_id` the answer could be for. Exactly AI-Parrot's fields.
pub fn refusal_response(
    item: &Value,
    respondent: &str,
    reason: &str,
    at: OffsetDateTime,
) -> Option<Value> {
    let o = item.as_object()?;
    let id = o
        .get("interaction_id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())?;
    let kind = o
        .get("interaction_type")
        .and_then(Value::as_str)
        .and_then(InteractionType::parse)
        .unwrap_or(InteractionType::FreeText);
    let (kind, value) = match kind {
        InteractionType::Approval => (kind, json!(false)),
        InteractionType::MultiChoice => (kind, json!([])),
        InteractionType::Form => (InteractionType::FreeText, Value::Null),
        other => (other, Value::Null),
    };
    Some(json!({
        "interaction_id": id,
        "respondent": respondent,
        "response_type": kind.as_str(),
        "value": value,
        "timestamp": iso8601(at),
        "metadata": {
            "channel": "telegram",
            "refused": true,
            "reason": format!("refused by hitl-telegram and never asked: {reason}"),
        },
    }))
}

/// `2026-11-30T12:00:00.123000Z`: what pydantic reads as an aware UTC datetime.
pub fn iso8601(t: OffsetDateTime) -> String {
    let f = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
    );
    t.to_offset(time::UtcOffset::UTC)
        .format(&f)
        .unwrap_or_default()
}

/// Where consensus stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Consensus {
    /// Not settled yet.
    Open,
    /// Settled on this value.
    Settled(Value),
    /// Settled without agreement (a conflict under `all_required`, or no value can reach
    /// a majority or the quorum any more).
    NoAgreement(String),
}

/// Two answers agree when their values are equal; a multi-choice selection is a set.
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Array(x), Value::Array(y)) => {
            let x: BTreeSet<String> = x.iter().map(Value::to_string).collect();
            let y: BTreeSet<String> = y.iter().map(Value::to_string).collect();
            x == y
        }
        _ => a == b,
    }
}

/// Decides whether `answers` (one per person, oldest first) settle a question asked of
/// `eligible` people. `quorum` is the number of matching answers a `quorum` question
/// needs (a simple majority when unknown).
pub fn consensus(
    mode: ConsensusMode,
    answers: &[Value],
    eligible: usize,
    quorum: Option<u32>,
) -> Consensus {
    let Some(first) = answers.first() else {
        return Consensus::Open;
    };
    let eligible = eligible.max(answers.len()).max(1);
    // Groups of agreeing answers, largest first (ties: the earliest answered first).
    let mut groups: Vec<(Value, usize)> = Vec::new();
    for a in answers {
        match groups.iter_mut().find(|(v, _)| same_value(v, a)) {
            Some((_, n)) => *n += 1,
            None => groups.push((a.clone(), 1)),
        }
    }
    groups.sort_by_key(|g| std::cmp::Reverse(g.1));
    let outstanding = eligible - answers.len();
    let needed = match mode {
        ConsensusMode::FirstResponse => return Consensus::Settled(first.clone()),
        ConsensusMode::AllRequired => {
            if groups.len() > 1 {
                return Consensus::NoAgreement(
                    "the answers differ and all were required to agree".into(),
                );
            }
            if outstanding == 0 {
                return Consensus::Settled(first.clone());
            }
            return Consensus::Open;
        }
        ConsensusMode::Majority => eligible / 2 + 1,
        ConsensusMode::Quorum => quorum
            .map(|q| q as usize)
            .unwrap_or(eligible / 2 + 1)
            .clamp(1, eligible),
    };
    let (top, count) = &groups[0];
    if *count >= needed {
        return Consensus::Settled(top.clone());
    }
    // Even if every outstanding answer joined the largest group it could not get there.
    if count + outstanding < needed {
        return Consensus::NoAgreement(format!("no answer can reach the {needed} needed any more"));
    }
    Consensus::Open
}

#[cfg(test)]
mod tests;
