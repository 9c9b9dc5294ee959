//! A route's keys for rules suggested from its history (issue 50): who may accept them
//! (`rule_editors`), which tools are never proposed (`never_suggest`), and how much
//! history makes a proposal and how often the chat is offered them.

use std::collections::HashSet;

use super::{ConfigError, invalid};
use crate::domain::rules::Glob;
use crate::domain::rules::suggest::Thresholds;

/// See [`Suggesting::days`].
pub const DEFAULT_SUGGEST_DAYS: u32 = 7;
/// See [`Thresholds::min_decisions`].
pub const DEFAULT_SUGGEST_MIN_DECISIONS: u32 = 10;
/// The longest history a proposal is drawn from.
pub const MAX_SUGGEST_DAYS: u32 = 90;

/// What the route's chat is proposed, and who may accept it.
#[derive(Debug, Clone)]
pub struct Suggesting {
    /// Who may accept a proposal (as a dry run or enforced), enforce a dry run and
    /// remove a chat rule: approvers of the route, none by default.
    pub editors: HashSet<u64>,
    /// Tools never proposed, whatever the history.
    pub never: Vec<Glob>,
    /// The days of history a proposal is drawn from.
    pub days: u32,
    /// How often the chat is offered proposals unasked, in days (`None`: only on
    /// `/suggest`).
    pub every_days: Option<u32>,
    pub thresholds: Thresholds,
}

impl Suggesting {
    pub fn may_edit(&self, user_id: u64) -> bool {
        self.editors.contains(&user_id)
    }
}

/// The keys as the file writes them.
pub(super) struct SuggestKeys<'a> {
    pub rule_editors: &'a [u64],
    pub never_suggest: &'a [String],
    pub suggest_days: u32,
    pub suggest_every_days: u32,
    pub suggest_min_decisions: u32,
}

/// Checks a route's suggestion keys; `approvers` are the route's, which every editor
/// must be (an editor decides what the route's approvers are no longer asked).
pub(super) fn checked(
    key: &str,
    k: SuggestKeys<'_>,
    approvers: &HashSet<u64>,
) -> Result<Suggesting, ConfigError> {
    if let Some(id) = k.rule_editors.iter().find(|id| !approvers.contains(id)) {
        return Err(invalid(
            format!("{key}.rule_editors"),
            format!("{id} is not one of the route's approvers: a rule editor must be one"),
        ));
    }
    let never = k
        .never_suggest
        .iter()
        .enumerate()
        .map(|(j, g)| {
            Glob::parse(g).map_err(|e| invalid(format!("{key}.never_suggest[{j}]"), e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if !(1..=MAX_SUGGEST_DAYS).contains(&k.suggest_days) {
        return Err(invalid(
            format!("{key}.suggest_days"),
            format!("must be from 1 to {MAX_SUGGEST_DAYS}"),
        ));
    }
    if k.suggest_every_days > 366 {
        return Err(invalid(
            format!("{key}.suggest_every_days"),
            "must be from 0 (only on /suggest) to 366",
        ));
    }
    if k.suggest_min_decisions < 2 {
        return Err(invalid(
            format!("{key}.suggest_min_decisions"),
            "must be at least 2: one decision is no pattern",
        ));
    }
    Ok(Suggesting {
        editors: k.rule_editors.iter().copied().collect(),
        never,
        days: k.suggest_days,
        every_days: (k.suggest_every_days > 0).then_some(k.suggest_every_days),
        thresholds: Thresholds {
            min_decisions: k.suggest_min_decisions,
        },
    })
}

pub(super) fn default_suggest_days() -> u32 {
    DEFAULT_SUGGEST_DAYS
}

pub(super) fn default_suggest_every_days() -> u32 {
    DEFAULT_SUGGEST_DAYS
}

pub(super) fn default_suggest_min_decisions() -> u32 {
    DEFAULT_SUGGEST_MIN_DECISIONS
}
