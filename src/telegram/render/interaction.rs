//! An interaction's message (a choice, a vote, a form): its question, context, options,
//! progress and deadline, and the call it carries shown as a confirmation shows it.

use serde_json::Value;

use crate::domain::grant::{GrantTerms, scope_reach};
use crate::domain::interaction::{
    ConsensusMode, Interaction, InteractionType, Severity, TimeoutAction,
};
use crate::domain::question::{Question, operator_time as date_time};
use crate::service::View;

use super::params::params_block;
use super::question::{Parts, attached_note, context_block, rule_note, summary, window_disclosure};
use super::{
    BRIEFING_BUDGET, OUTCOME_RESERVE, TELEGRAM_MAX_CHARS, cut_note, escalation_line, flag, quoted,
    shown, shown_within, sla_line, units, window_duration,
};

/// What happens when nobody answers by the deadline, when that is not simply "nothing":
/// silence must never be a hidden yes.
fn timeout_disclosure(r: &Question, i: &Interaction) -> String {
    let deadline = date_time(r.expires_at);
    match i.timeout_action {
        TimeoutAction::Default => {
            let value = &i.default_response;
            let approves = match (i.kind, value) {
                (InteractionType::Approval, Value::Bool(b)) => *b,
                (InteractionType::Approval, _) => false,
                // A form's default is its values: silence approves them.
                (InteractionType::Form, v) => !v.is_null(),
                _ => false,
            };
            let shown_value = match (i.kind, value) {
                (InteractionType::Approval, Value::Bool(true)) => "Approve".to_owned(),
                (InteractionType::Approval, _) => "Reject".to_owned(),
                _ => summary(r, value),
            };
            let warn = if approves { "⚠️ " } else { "" };
            format!(
                "\n\n{warn}<b>If nobody answers by {deadline}: {shown_value}</b>{}",
                if approves { " (silence approves)" } else { "" }
            )
        }
        TimeoutAction::Escalate => {
            format!("\n\n<i>If nobody answers by {deadline}, the agent escalates.</i>")
        }
        TimeoutAction::Retry => {
            format!("\n\n<i>If nobody answers by {deadline}, the agent asks again.</i>")
        }
        TimeoutAction::Cancel => String::new(),
    }
}

/// The call an interaction carries, shown as a confirmation shows it: tool, owner,
/// every parameter and the window disclosure. Returns the block and whether it cut
/// anything (then the file goes along).
fn call_block(r: &Question, budget: usize) -> (String, bool) {
    let mut out = format!(
        "\n\n🔧 Tool: <code>{}</code>{}\n👤 Owner: <code>{}</code>{}\n<b>Parameters</b>\n",
        shown(r.tool.as_str()),
        flag(r.tool.as_str()),
        shown(r.owner_id.as_str()),
        flag(r.owner_id.as_str()),
    );
    let attached = attached_note(r);
    let mut disclosure =
        if r.interaction.as_ref().map(|i| i.kind) == Some(InteractionType::Approval) {
            window_disclosure(r)
        } else {
            String::new()
        };
    disclosure.push_str(&rule_note(r));
    let room = budget.saturating_sub(units(&out) + units(&attached) + units(&disclosure));
    let (block, cut) = params_block(&r.params_json, room);
    out.push_str(&block);
    if cut {
        out.push_str(&attached);
    }
    out.push_str(&disclosure);
    (out, cut)
}

/// The most UTF-16 units a grant question's agent text (its question) and its terms
/// share: with the context, the disclosures and the outcome's reserve, the message stays
/// within Telegram's limit however long the agent's text is. The terms come first (they
/// are never cut; the service refused, when asked, terms longer than
/// `GrantTerms::MAX_SHOWN_UNITS`), the question gets the rest, up to its usual budget.
const QUESTION_AND_TERMS_BUDGET: usize = 1550;

/// A grant question's terms, on lines of the service's own under 🔑, whole: the person
/// reads exactly what their yes stores (the agent, the scope, the owner, how long from
/// the tap), whatever the agent's own text says or wherever it was cut.
fn grant_block(r: &Question, terms: &GrantTerms) -> String {
    let cut = match terms.requested_window_seconds {
        Some(asked) => format!(
            " (the agent asked for {}; the route allows at most this)",
            window_duration(asked)
        ),
        None => String::new(),
    };
    let latest_end = r.expires_at + std::time::Duration::from_secs(terms.window_seconds);
    format!(
        "\n\n🔑 <b>Grant: approving lets <code>{}</code>{} act on these terms only, without asking for each call where a grant is enough (deny rules still apply)</b>\nScope: <code>{}</code>{} ({})\nOwner: <code>{}</code>{}\nDuration: {} from your tap{cut}, so until {} at the latest\n<i>Listed in /grants from your tap; revoke it there any time.</i>",
        shown(&r.agent),
        flag(&r.agent),
        shown(terms.scope.as_str()),
        flag(terms.scope.as_str()),
        scope_reach(&terms.scope),
        shown(terms.owner_id.as_str()),
        flag(terms.owner_id.as_str()),
        window_duration(terms.window_seconds),
        date_time(latest_end),
    )
}

/// The text of an interaction: question, context, options, progress and deadline.
pub(super) fn interaction_text(r: &Question, i: &Interaction, view: &View) -> String {
    interaction_parts(r, i, view).text
}

/// An interaction's message, and whether its call's parameters were cut (then the file
/// goes along).
pub(super) fn interaction_parts(r: &Question, i: &Interaction, view: &View) -> Parts {
    let terms = i.grant.as_ref().map(|t| grant_block(r, t));
    let (mut text, question_cut) = question_block(r, i, terms.as_deref());
    text.push_str(&context_block(i.context.as_deref()));
    let cut = push_what_is_asked(&mut text, r, i, terms.as_deref(), question_cut);
    text.push_str(&answer_hint(i));
    text.push_str(&progress_block(r, i, view));
    text.push_str(&timeout_disclosure(r, i));
    text.push_str(&format!("\n\n⏳ Deadline: {}", date_time(r.expires_at)));
    text.push_str(&escalation_line(view));
    text.push_str(&sla_line(r, view));
    Parts { text, cut }
}

/// The agent's question under its header (severity badge, sender), cut to the room a
/// grant's terms leave it; and whether it was cut.
fn question_block(r: &Question, i: &Interaction, terms: Option<&str>) -> (String, bool) {
    let badge = match i.severity {
        Severity::Critical => "🚨 ",
        Severity::High => "⚠️ ",
        Severity::Low | Severity::Normal => "",
    };
    let from = i.source_agent.as_deref().unwrap_or(&r.agent);
    // The agent's text is cut first: a grant's terms take their room whole.
    let question_budget = match terms {
        Some(block) => BRIEFING_BUDGET.min(QUESTION_AND_TERMS_BUDGET.saturating_sub(units(block))),
        None => BRIEFING_BUDGET,
    };
    quoted(
        &format!(
            "{badge}❓ <b>Question</b> from <code>{}</code>{}",
            shown_within(from, 200).0,
            flag(from)
        ),
        &i.question,
        question_budget,
        "the question",
    )
}

/// What a yes would allow: the call with its parameters, a grant's terms, or the note
/// that the agent sent no parameters. Returns whether anything was cut.
fn push_what_is_asked(
    text: &mut String,
    r: &Question,
    i: &Interaction,
    terms: Option<&str>,
    question_cut: bool,
) -> bool {
    let mut cut = false;
    if r.has_call {
        let (block, call_cut) = call_block(
            r,
            TELEGRAM_MAX_CHARS.saturating_sub(units(text) + OUTCOME_RESERVE + 600),
        );
        text.push_str(&block);
        cut = call_cut || question_cut;
    } else if let Some(block) = terms {
        text.push_str(block);
    } else if i.kind == InteractionType::Approval {
        text.push_str(
            "\n\nℹ️ <i>The agent sent no parameters: only its question is shown. Approve only what the question itself says.</i>",
        );
        if r.window_seconds > 0 {
            let duration = window_duration(r.window_seconds);
            text.push_str(&format!(
                "\n\n🪟 <b>Approving also lets identical calls through for {duration}</b> after your tap: the agent keeps this window itself, so it cannot be shortened or revoked from here."
            ));
        }
    }
    cut
}

/// How to answer, by kind: the options' descriptions, a form's values, a reply hint.
fn answer_hint(i: &Interaction) -> String {
    let mut text = String::new();
    match i.kind {
        InteractionType::SingleChoice | InteractionType::MultiChoice | InteractionType::Poll => {
            let described: Vec<String> = i
                .options
                .iter()
                .filter_map(|o| {
                    let d = o.description.as_deref()?;
                    Some(format!(
                        "• <b>{}</b>{}: {}",
                        shown_within(&o.label, 100).0,
                        flag(&o.label),
                        shown_within(d, 200).0
                    ))
                })
                .collect();
            if !described.is_empty() {
                text.push_str("\n\n");
                text.push_str(&described.join("\n"));
            }
            if i.kind == InteractionType::MultiChoice {
                text.push_str("\n\n☑ <i>Tick every option that applies, then tap Done.</i>");
            }
        }
        InteractionType::FreeText => {
            text.push_str("\n\n💬 <i>Reply to this message with your answer.</i>");
        }
        InteractionType::Form => {
            let values = Value::Object(i.form_values.clone());
            let pretty = serde_json::to_string_pretty(&values).unwrap_or_default();
            let (shown, omitted) = shown_within(&pretty, 1500);
            text.push_str("\n\n<b>Values</b>\n<pre>");
            text.push_str(&shown);
            text.push_str("</pre>");
            if omitted > 0 {
                text.push_str(&cut_note(omitted, "values"));
            }
            text.push_str(
                "\n✏️ <i>Editing is not available in Telegram: Approve answers with the values shown; Cancel answers with none.</i>",
            );
        }
        InteractionType::Approval => {}
    }
    text
}

/// How many answered of how many expected and, for a poll in a group, the tally.
fn progress_block(r: &Question, i: &Interaction, view: &View) -> String {
    let mut text = String::new();
    if view.expected > 1 || !r.answers.is_empty() {
        let people = r.answers.iter().filter(|a| !a.is_default).count();
        if view.expected > 1 {
            text.push_str(&format!("\n\n👥 {people} of {} answered", view.expected));
            if i.consensus == ConsensusMode::Quorum && i.kind == InteractionType::Approval {
                text.push_str(" · one no ends it (veto)");
            }
        }
        if i.kind == InteractionType::Poll && view.group && people > 0 {
            text.push_str("\n📊 ");
            let tally: Vec<String> = i
                .options
                .iter()
                .map(|o| {
                    let n = r
                        .answers
                        .iter()
                        .filter(|a| a.value.as_str() == Some(o.key.as_str()))
                        .count();
                    format!("{}: {n}", shown_within(&o.label, 60).0)
                })
                .collect();
            text.push_str(&tally.join(" · "));
        }
    }
    text
}
