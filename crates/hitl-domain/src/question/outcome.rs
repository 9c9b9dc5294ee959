//! What ends a question once it is pending ([`Ending`]), and the one write that stores
//! it ([`Decision`]).

use std::time::Duration;

use serde_json::Value;
use time::OffsetDateTime;

use super::{EditApplied, Operator, Status, Via, human_duration};
use crate::interaction::TimeoutAction;
use crate::text;

/// What ended a request. Each maps to exactly one (status, via) pair.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// An operator approved; `once`: without opening the request's window.
    Approved {
        by: Operator,
        once: bool,
    },
    Cancelled(Operator),
    /// An operator denied and said why ("Deny with reason").
    Denied {
        by: Operator,
        reason: String,
    },
    TimedOut {
        after: Duration,
    },
    /// Nothing refused the question, but it could not reach its chat before its deadline
    /// (the chat's fair queue under Telegram's limits, a `retry_after` past it): a
    /// timeout, saying why.
    Unreachable {
        why: String,
    },
    Withdrawn,
    FailedClosed {
        reason: String,
    },
    /// An interaction settled on a value (or, with `value` null, without agreement);
    /// `denial`: the reason given by the operator whose "no" settled it.
    Completed {
        value: Value,
        by: Option<Operator>,
        reason: String,
        denial: Option<String>,
    },
    /// Nobody answered an interaction in time and it asked for its `default_response`.
    DefaultOnTimeout {
        value: Value,
        after: Duration,
    },
    /// Nobody answered in time and the agent asked to escalate or retry: reported back as
    /// `timeout`, with the action, for the agent's manager to take.
    TimedOutWithAction {
        after: Duration,
        action: TimeoutAction,
    },
}

/// A decision, ready to be stored with one conditional update.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub status: Status,
    pub via: Via,
    pub reason: String,
    pub decided_by: Option<Operator>,
    pub decided_at: OffsetDateTime,
    pub result: Option<Value>,
    pub timeout_action: Option<TimeoutAction>,
    /// "Approve once": the approval opens no window.
    pub once: bool,
    /// The operator's reason for a no, when they gave one.
    pub denial_reason: Option<String>,
    /// The parameters an operator approved in place of the agent's (edit before
    /// execute, from the console).
    pub edit: Option<EditApplied>,
}

impl Ending {
    pub fn decide(self, at: OffsetDateTime) -> Decision {
        match self {
            Ending::Approved { .. }
            | Ending::Cancelled(_)
            | Ending::Denied { .. }
            | Ending::Completed { .. } => self.by_a_person(at),
            _ => self.unattended(at),
        }
    }

    /// The outcomes a person's answer settles.
    fn by_a_person(self, at: OffsetDateTime) -> Decision {
        match self {
            Ending::Approved { by, once } => {
                let scope = if once { " once" } else { "" };
                Decision {
                    once,
                    ..Decision::plain(
                        (Status::Confirmed, Via::Operator),
                        format!("approved{scope} by {by}"),
                        Some(by),
                        at,
                    )
                }
            }
            Ending::Cancelled(op) => Decision::plain(
                (Status::Cancelled, Via::Operator),
                format!("cancelled by {op} (not executed; do not retry this call as it is)"),
                Some(op),
                at,
            ),
            Ending::Denied { by, reason } => {
                let text = format!(
                    "denied by {by}; {} (not executed; do not retry this call as it is)",
                    text::their_words(&reason)
                );
                Decision {
                    denial_reason: Some(reason),
                    ..Decision::plain((Status::Cancelled, Via::Operator), text, Some(by), at)
                }
            }
            Ending::Completed {
                value,
                by,
                reason,
                denial,
            } => Decision {
                result: Some(value),
                denial_reason: denial,
                ..Decision::plain((Status::Completed, Via::Operator), reason, by, at)
            },
            other => other.unattended(at),
        }
    }

    /// The outcomes nobody answered: a deadline, the agent, or a failure.
    fn unattended(self, at: OffsetDateTime) -> Decision {
        let timeout = (Status::Timeout, Via::Timeout);
        match self {
            Ending::TimedOut { after } => Decision::plain(
                timeout,
                format!(
                    "no operator decided within {}: not executed",
                    human_duration(after)
                ),
                None,
                at,
            ),
            Ending::Unreachable { why } => Decision::plain(
                timeout,
                format!(
                    "the question could not reach the chat before its deadline ({why}): not executed"
                ),
                None,
                at,
            ),
            Ending::Withdrawn => Decision::plain(
                (Status::Cancelled, Via::Withdrawn),
                "withdrawn by the agent".to_owned(),
                None,
                at,
            ),
            Ending::FailedClosed { reason } => Decision::plain(
                (Status::Cancelled, Via::FailClosed),
                format!("not executed: {reason}"),
                None,
                at,
            ),
            Ending::DefaultOnTimeout { value, after } => Decision {
                result: Some(value),
                ..Decision::plain(
                    (Status::Completed, Via::Timeout),
                    format!(
                        "nobody answered within {}: completed with the default response",
                        human_duration(after)
                    ),
                    None,
                    at,
                )
            },
            Ending::TimedOutWithAction { after, action } => Decision {
                timeout_action: Some(action),
                ..Decision::plain(
                    timeout,
                    format!(
                        "nobody answered within {}: the agent asked to {}",
                        human_duration(after),
                        action.as_str()
                    ),
                    None,
                    at,
                )
            },
            other => other.by_a_person(at),
        }
    }
}

impl Decision {
    /// A decision that is only its (status, via), reason and decider: no value, no
    /// timeout action, no "once", no operator's reason, no edit.
    fn plain(
        (status, via): (Status, Via),
        reason: String,
        decided_by: Option<Operator>,
        decided_at: OffsetDateTime,
    ) -> Decision {
        Decision {
            status,
            via,
            reason,
            decided_by,
            decided_at,
            result: None,
            timeout_action: None,
            once: false,
            denial_reason: None,
            edit: None,
        }
    }
}
