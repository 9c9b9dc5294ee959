//! Rules suggested and accepted in a chat (issue 50), as the chat reads them: the
//! proposals (each with the rule verbatim, in the configuration's syntax), `/rules`, the
//! note after a tap, and their buttons' callback data (`cr:<d|e|x>:<id>`).

use teloxide::types::{InlineKeyboardButton, InlineKeyboardMarkup};
use teloxide::utils::html::escape;

use crate::domain::question::{Operator, operator_time as date_time};
use crate::domain::rules::{ChatRuleRecord, ChatRuleState, Effect};
use crate::domain::text::{self, Layout};
use crate::service::{ChatRuleAction, ChatRuleTap, Offer};

/// The most of a rule's TOML a message shows; a longer one (many parameters) is cut,
/// and says so: the whole is in `/rules` and the audit trail once accepted.
const TOML_SHOWN: usize = 700;
/// The most rules `/rules` lists per route (each has buttons; Telegram allows 100).
pub const RULES_LISTED: usize = 20;

pub const DRY_RUN_LABEL: &str = "🧪 Try as dry run";
pub const ENFORCE_LABEL: &str = "✅ Enforce";
pub const REMOVE_LABEL: &str = "🗑 Remove";

/// A chat-rule button's callback data: 21 bytes of Telegram's 64.
pub fn chat_rule_data(action: ChatRuleAction, id: &str) -> String {
    let tag = match action {
        ChatRuleAction::DryRun => "d",
        ChatRuleAction::Enforce => "e",
        ChatRuleAction::Remove => "x",
    };
    format!("cr:{tag}:{id}")
}

/// The chat-rule button `data` is; `None` for anything else (the id must be what
/// [`crate::domain::rules::chat::chat_rule_id`] makes: 16 lowercase hex digits).
pub fn parse_chat_rule(data: &str) -> Option<ChatRuleTap> {
    let rest = data.strip_prefix("cr:")?;
    let (tag, id) = rest.split_once(':')?;
    let action = match tag {
        "d" => ChatRuleAction::DryRun,
        "e" => ChatRuleAction::Enforce,
        "x" => ChatRuleAction::Remove,
        _ => return None,
    };
    let hex = id.len() == 16 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    hex.then(|| ChatRuleTap {
        action,
        id: id.to_owned(),
    })
}

/// Text the history holds (tool names, values), escaped, with the backticks the
/// summary puts around names and values as code.
fn summary_html(summary: &str) -> String {
    summary
        .split('`')
        .enumerate()
        .map(|(i, part)| {
            let part = escape(&text::visible(part, Layout::Line));
            if i % 2 == 1 {
                format!("<code>{part}</code>")
            } else {
                part
            }
        })
        .collect()
}

fn toml_html(toml: &str) -> String {
    let shown = text::visible(toml, Layout::Quoted);
    let cut: String = shown.chars().take(TOML_SHOWN).collect();
    let more = if cut.len() < shown.len() {
        "\n# … (cut here: the whole rule is stored)"
    } else {
        ""
    };
    format!("<pre>{}{more}</pre>", escape(&cut))
}

/// The proposals of `/suggest` (or of the schedule), each route's in turn.
pub fn suggestions_text(offers: &[Offer]) -> String {
    let mut out = String::new();
    for offer in offers {
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        let route = escape(&offer.route);
        if offer.proposals.is_empty() {
            out.push_str(&format!(
                "💡 Route <b>{route}</b>: nothing to suggest from the last {} day(s). A \
                 proposal needs the same call decided the same way many times, and no \
                 rule deciding it already.",
                offer.days
            ));
            continue;
        }
        out.push_str(&format!(
            "💡 <b>Rules suggested for route {route}</b>, from the last {} day(s):",
            offer.days
        ));
        for (n, p) in offer.proposals.iter().enumerate() {
            let (did, never, what) = match p.rule.effect {
                Effect::Deny => ("cancelled", "approved", "deny it without asking"),
                _ => ("approved", "cancelled", "allow it without asking"),
            };
            out.push_str(&format!(
                "\n\n<b>{}.</b> You {did} {} {} time(s) and never {never} it: {what}?\n{}",
                n + 1,
                summary_html(&p.summary),
                p.count,
                toml_html(&p.toml)
            ));
        }
        out.push_str(&match offer.editors.as_slice() {
            [] => format!(
                "\n\nNobody can accept these here: route {route} lists no \
                 <code>rule_editors</code>. Add the user ids of the approvers who may \
                 (in the route's <code>[[routes]]</code> entry) and ask /suggest again."
            ),
            editors => format!(
                "\n\n🧪 tries a rule as a dry run (its calls still ask, and their message \
                 says what it would have decided); ✅ enforces it. Rules come after the \
                 configuration's, which always decide first. Who may accept: the rule \
                 editors ({}).",
                editors
                    .iter()
                    .map(|(id, name)| match name {
                        Some(name) => format!("{} (<code>{id}</code>)", escape(name)),
                        None => format!("<code>{id}</code>"),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    out
}

/// The buttons under proposals: for each (when the route has editors) a dry run and an
/// enforce, numbered as the text numbers them.
pub fn suggestions_keyboard(offers: &[Offer]) -> Option<InlineKeyboardMarkup> {
    let rows: Vec<Vec<InlineKeyboardButton>> = offers
        .iter()
        .filter(|o| !o.editors.is_empty())
        .flat_map(|o| o.proposals.iter().enumerate())
        .map(|(n, p)| {
            vec![
                InlineKeyboardButton::callback(
                    format!("{DRY_RUN_LABEL} #{}", n + 1),
                    chat_rule_data(ChatRuleAction::DryRun, &p.id),
                ),
                InlineKeyboardButton::callback(
                    format!("{ENFORCE_LABEL} #{}", n + 1),
                    chat_rule_data(ChatRuleAction::Enforce, &p.id),
                ),
            ]
        })
        .collect();
    (!rows.is_empty()).then(|| InlineKeyboardMarkup::new(rows))
}

fn by_line(r: &ChatRuleRecord) -> String {
    let person = |(who, at): &(Operator, time::OffsetDateTime)| {
        format!("{} on {}", escape(&who.to_string()), date_time(*at))
    };
    let mut line = match &r.added {
        Some(added) => format!("added by {}", person(added)),
        None => "added by nobody known".to_owned(),
    };
    if let Some(changed) = r.changed.as_ref().filter(|c| Some(*c) != r.added.as_ref()) {
        line.push_str(&format!(", last changed by {}", person(changed)));
    }
    line
}

/// `/rules`: the chat rules in force per route, each with who added it and when.
pub fn chat_rules_text(routes: &[(String, Vec<ChatRuleRecord>)], configured: usize) -> String {
    let mut out = format!(
        "<b>Rules accepted in this chat</b>. The configuration's {configured} rule(s) \
         come first: a chat rule decides only calls none of them decides."
    );
    for (route, rules) in routes {
        out.push_str(&format!("\n\n<b>Route {}</b>:", escape(route)));
        if rules.is_empty() {
            out.push_str(" none. /suggest proposes some from the route's history.");
            continue;
        }
        for r in rules.iter().take(RULES_LISTED) {
            let state = match r.state {
                ChatRuleState::DryRun => "🧪 dry run",
                _ => "✅ enforced",
            };
            out.push_str(&format!(
                "\n• <code>{}</code> ({state}): {} {}; {}",
                escape(&r.rule.name),
                r.rule.effect,
                summary_html(&r.summary),
                by_line(r)
            ));
        }
        if rules.len() > RULES_LISTED {
            out.push_str(&format!("\n… and {} more.", rules.len() - RULES_LISTED));
        }
    }
    out
}

/// Under `/rules`: Enforce for each dry run, Remove for each rule.
pub fn chat_rules_keyboard(
    routes: &[(String, Vec<ChatRuleRecord>)],
) -> Option<InlineKeyboardMarkup> {
    let short = |name: &str| -> String { name.chars().take(40).collect() };
    let rows: Vec<Vec<InlineKeyboardButton>> = routes
        .iter()
        .flat_map(|(_, rules)| rules.iter().take(RULES_LISTED))
        .map(|r| {
            let mut row = Vec::new();
            if r.state == ChatRuleState::DryRun {
                row.push(InlineKeyboardButton::callback(
                    format!("{ENFORCE_LABEL} {}", short(&r.rule.name)),
                    chat_rule_data(ChatRuleAction::Enforce, &r.id),
                ));
            }
            row.push(InlineKeyboardButton::callback(
                format!("{REMOVE_LABEL} {}", short(&r.rule.name)),
                chat_rule_data(ChatRuleAction::Remove, &r.id),
            ));
            row
        })
        .collect();
    (!rows.is_empty()).then(|| InlineKeyboardMarkup::new(rows))
}

/// What the chat is told after a tap moved a rule.
pub fn moved_text(rule: &ChatRuleRecord, from: ChatRuleState, by: &Operator) -> String {
    let name = escape(&rule.rule.name);
    let by = escape(&by.to_string());
    let what = match (from, rule.state) {
        (_, ChatRuleState::DryRun) => format!(
            "🧪 Rule <code>{name}</code> added as a dry run by {by}: its calls still ask, \
             and their messages say what it would have decided. Enforce it from /rules."
        ),
        (ChatRuleState::DryRun, ChatRuleState::Enforce) => format!(
            "✅ Rule <code>{name}</code> enforced by {by}: it decides its calls from now on."
        ),
        (_, ChatRuleState::Enforce) => format!(
            "✅ Rule <code>{name}</code> added and enforced by {by}: it decides its calls \
             from now on."
        ),
        (_, ChatRuleState::Removed) => {
            format!("🗑 Rule <code>{name}</code> removed by {by}: its calls ask again.")
        }
        (_, ChatRuleState::Proposed) => format!("Rule <code>{name}</code> is a proposal again."),
    };
    format!("{what}\n{}", toml_html(&rule.toml))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_rule_button_reads_back_and_nothing_else_does() {
        let id = "0123456789abcdef";
        for action in [
            ChatRuleAction::DryRun,
            ChatRuleAction::Enforce,
            ChatRuleAction::Remove,
        ] {
            let data = chat_rule_data(action, id);
            assert!(data.len() <= 64);
            assert_eq!(
                parse_chat_rule(&data),
                Some(ChatRuleTap {
                    action,
                    id: id.into()
                })
            );
        }
        for bad in [
            "cr:d:0123456789ABCDEF",
            "cr:d:0123456789abcde",
            "cr:q:0123456789abcdef",
            "cr:d:0123456789abcdef0",
            "g:gr_x",
        ] {
            assert_eq!(parse_chat_rule(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_summary_shows_names_and_values_as_code_and_escaped() {
        assert_eq!(
            summary_html("`read_report` with `env = <b>`"),
            "<code>read_report</code> with <code>env = &lt;b&gt;</code>"
        );
    }
}
