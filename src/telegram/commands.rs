//! Operator commands typed in a chat: their syntax (`/start`, `/pending`, `/windows`,
//! `/revoke <id>`, `/help`, optionally addressed as `/pending@<bot>`), how their answers
//! read (HTML within Telegram's 4096 characters), and registering them with Telegram at
//! start (`getMe` for the bot's username, `setMyCommands` for the clients' menu).
//!
//! Which commands there are ([`Command`]), who may use them and what they do is the
//! service's business (`crate::service::commands`); this module only knows Telegram's
//! side: it reads a message's text into a `Command`, as `updates` reads a tap's callback
//! data into a `Button`.

use std::sync::Arc;

use teloxide::prelude::*;
use teloxide::types::BotCommand;
use teloxide::utils::html::escape;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::domain::grant::{Grant, scope_in_words};
use crate::domain::ids::{GrantId, QuestionId};
use crate::domain::question::{Question, operator_time as date_time};
use crate::domain::text::{self, Layout};
use crate::service::{
    Command, CommandError, CommandReply, MAX_STATS_DAYS, RevokeTarget, Service, Setup,
};
use crate::storage::{LiveWindow, WindowUse};

/// The commands, their descriptions (Telegram's menu and `/help`) and what they take.
pub const COMMANDS: [(&str, &str, &str); 11] = [
    (
        "start",
        "Show this chat's id, your user id and whether this chat is a route",
        "",
    ),
    (
        "pending",
        "List this chat's open requests with links to them",
        "",
    ),
    (
        "windows",
        "List live confirmation windows opened from this chat",
        "",
    ),
    (
        "grants",
        "List live grants from this chat, each with a Revoke button",
        "",
    ),
    (
        "revoke",
        "Close a confirmation window or revoke a grant now",
        " <window or grant id>",
    ),
    (
        "stats",
        "Who decided what and how fast, per person and tool (7 days by default)",
        " [days]",
    ),
    (
        "suggest",
        "Rules proposed from what this chat decided, to try or enforce",
        "",
    ),
    (
        "rules",
        "List the rules accepted in this chat, to enforce or remove",
        "",
    ),
    (
        "away",
        "Away until a time: reminders skip you; name a delegate to stand in",
        " until <time> [delegate]",
    ),
    ("back", "End your /away now", ""),
    ("help", "What these commands do, and what /start says", ""),
];

/// A command's description in Telegram's menu, which shows no arguments: with its usage
/// when it takes some (`/help` shows the usage beside the name instead).
fn menu_description(name: &str, description: &str, args: &str) -> String {
    if args.is_empty() {
        description.to_owned()
    } else {
        format!("{description}: /{name}{args}")
    }
}

/// What a message's text is to the service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Not a command of ours: ordinary chatter, or a reply that may answer a question.
    NotACommand,
    /// A command addressed to another bot (`/pending@other_bot`): none of our business.
    ForAnotherBot,
    /// One of our commands, or an attempt at one.
    Ours(Result<Command, CommandError>),
}

/// Reads a message's text the way Telegram does: a command is `/name` at the very start,
/// optionally `@username` of the bot it is for, then its arguments after whitespace.
/// Names are case-sensitive, as Telegram's are; usernames are not, as Telegram's are
/// not. `me` is this bot's username, `None` until `getMe` answered: until then a command
/// addressed to any bot is not taken as ours (fail closed), bare ones still are.
///
/// An unknown bare `/name` is not a command of ours (in a group it may be another bot's;
/// as a reply it may be a free-text answer such as "/var is full"); an unknown name
/// addressed to us gets an error.
pub fn parse(text: &str, me: Option<&str>) -> Parsed {
    let Some(rest) = text.strip_prefix('/') else {
        return Parsed::NotACommand;
    };
    let mut words = rest.split_whitespace();
    let head = match rest.chars().next() {
        Some(c) if !c.is_whitespace() => words.next().unwrap_or(""),
        _ => return Parsed::NotACommand,
    };
    let (name, addressed) = match head.split_once('@') {
        Some((name, to)) => match me {
            Some(me) if to.eq_ignore_ascii_case(me) => (name, true),
            _ => return Parsed::ForAnotherBot,
        },
        None => (head, false),
    };
    let command = match name {
        "start" => Ok(Command::Start),
        "pending" => Ok(Command::Pending),
        "windows" => Ok(Command::Windows),
        "grants" => Ok(Command::Grants),
        "help" => Ok(Command::Help),
        "suggest" => Ok(Command::Suggest),
        "rules" => Ok(Command::Rules),
        "away" => match words.next() {
            Some("until") => Ok(Command::Away(words.map(str::to_owned).take(4).collect())),
            _ => Err(CommandError::AwayWithoutUntil),
        },
        "back" => match words.next() {
            None => Ok(Command::Back),
            Some(_) => Err(CommandError::BackWithWords),
        },
        "stats" => match (words.next(), words.next()) {
            (None, _) => Ok(Command::Stats(7)),
            (Some(days), None) => match days.parse::<u32>() {
                Ok(n) if (1..=MAX_STATS_DAYS).contains(&n) => Ok(Command::Stats(n)),
                _ => Err(CommandError::StatsDays(cut(days, 20))),
            },
            (Some(_), Some(_)) => Err(CommandError::StatsDays(cut(rest, 40))),
        },
        "revoke" => match (words.next(), words.next()) {
            (None, _) => Err(CommandError::RevokeWithoutId),
            (Some(_), Some(_)) => Err(CommandError::RevokeTooManyIds),
            (Some(id), None) => QuestionId::parse(id)
                .map(RevokeTarget::Window)
                .or_else(|_| GrantId::parse(id).map(RevokeTarget::Grant))
                .map(Command::Revoke)
                .map_err(|_| CommandError::MalformedId(cut(id, 40))),
        },
        _ if addressed => Err(CommandError::Unknown(cut(name, 40))),
        _ => return Parsed::NotACommand,
    };
    Parsed::Ours(command)
}

/// At most `n` characters of `s`, marked when cut (an operator's typo is echoed back).
/// Agent text as operators must see it (invisible characters as escapes, see
/// [`crate::domain::text`]), cut to `n` characters with a visible "…".
fn cut(s: &str, n: usize) -> String {
    let s = text::visible(s, Layout::Line);
    if s.chars().count() <= n {
        s
    } else {
        s.chars().take(n).collect::<String>() + "…"
    }
}

/// [`cut`] at a length no name reaches, then HTML-escaped.
fn shown(s: &str) -> String {
    escape(&cut(s, 256))
}

/// Asks Telegram for the bot's username (commands addressed `/cmd@<bot>` need it) and
/// registers [`COMMANDS`] for the clients' menu, each call retried until it succeeds
/// or `stop` fires ([`super::startup::until_ok`]).
pub async fn register(bot: Bot, service: Arc<Service>, stop: CancellationToken) {
    let metrics = service.metrics();
    let me = super::startup::until_ok(&stop, metrics, "getMe", || bot.get_me().send()).await;
    let Some(me) = me else { return };
    match me.user.username {
        Some(username) => service.chats().set_bot_username(username),
        None => tracing::warn!("Telegram reports no username for the bot; /cmd@bot is ignored"),
    }
    let commands: Vec<BotCommand> = COMMANDS
        .iter()
        .map(|(name, description, args)| {
            BotCommand::new(*name, menu_description(name, description, args))
        })
        .collect();
    if super::startup::until_ok(&stop, metrics, "setMyCommands", || {
        bot.set_my_commands(commands.clone()).send()
    })
    .await
    .is_some()
    {
        tracing::info!("operator commands registered with Telegram");
    }
    // The console ([mini_app]): the bot's menu button opens it in private chats.
    let console = service
        .config()
        .mini_app
        .as_ref()
        .and_then(|app| format!("{}/app", app.public_url).parse().ok());
    if let Some(url) = console {
        let button = teloxide::types::MenuButton::WebApp {
            text: "Console".to_owned(),
            web_app: teloxide::types::WebAppInfo { url },
        };
        if super::startup::until_ok(&stop, metrics, "setChatMenuButton", || {
            bot.set_chat_menu_button()
                .menu_button(button.clone())
                .send()
        })
        .await
        .is_some()
        {
            tracing::info!("the console is the bot's menu button in private chats");
        }
    }
}

/// How many entries a list shows before "and N more".
const LIST_CAP: usize = 20;
/// The room a list's entries may take, leaving space under Telegram's 4096 for the
/// heading and the "and N more" line.
const LIST_BUDGET: usize = 3600;
/// How much of an interaction's question an entry quotes.
const QUESTION_EXCERPT: usize = 80;

/// The answer to a command, as HTML for Telegram's HTML parse mode. Everything that came
/// from an agent or an operator is escaped.
pub fn render(reply: &CommandReply, now: OffsetDateTime) -> String {
    match reply {
        CommandReply::Pending(items) if items.is_empty() => {
            "No open requests in this chat.".to_owned()
        }
        CommandReply::Pending(items) => list(
            &format!("<b>Open requests ({})</b>, oldest first:", items.len()),
            items.iter().map(|r| pending_entry(r, now)),
        ),
        CommandReply::Windows(windows) if windows.is_empty() => {
            "No live confirmation windows from this chat.".to_owned()
        }
        CommandReply::Windows(windows) => list(
            &format!(
                "<b>Live confirmation windows ({})</b>, soonest to close first. \
                 Close one with /revoke &lt;id&gt;:",
                windows.len()
            ),
            windows.iter().map(|(w, u)| window_entry(w, *u, now)),
        ),
        CommandReply::Revoked { window, by } => format!(
            "🔒 Window <code>{}</code> closed by {}: {} for owner <code>{}</code> (agent {}) \
             would have run without asking until {}. The next identical call asks again.",
            escape(window.window.opened_by.as_str()),
            shown(&by.to_string()),
            tool(window.window.key.tool.as_str()),
            shown(window.window.key.owner_id.as_str()),
            shown(&window.window.key.agent),
            date_time(window.window.expires_at),
        ),
        CommandReply::Grants(grants) if grants.is_empty() => {
            "No live grants from this chat.".to_owned()
        }
        CommandReply::Grants(grants) => list(
            &format!(
                "<b>Live grants ({})</b>, soonest to end first. Tap Revoke below (or \
                 /revoke &lt;id&gt;) to end one now:",
                grants.len()
            ),
            grants.iter().map(|g| grant_entry(g, now)),
        ),
        CommandReply::GrantRevoked { grant, by } => format!(
            "🔒 Grant <code>{}</code> revoked by {}: {} can no longer run {} for owner \
             <code>{}</code> without asking (it ran until {}). Its next such call is asked again.",
            escape(grant.grant_id.as_str()),
            shown(&by.to_string()),
            shown(&grant.agent),
            escape(&scope_in_words(&grant.scope)),
            escape(&cut(grant.owner_id.as_str(), 60)),
            date_time(grant.expires_at),
        ),
        CommandReply::Stats { days, routes } => super::stats::text(*days, routes),
        CommandReply::Suggestions(offers) => super::render::suggestions_text(offers),
        CommandReply::ChatRules { routes, configured } => {
            super::render::chat_rules_text(routes, *configured)
        }
        CommandReply::ChatRuleMoved { rule, from, by } => {
            super::render::moved_text(rule, *from, by)
        }
        CommandReply::Away(set) => away_text(set),
        CommandReply::Back { was_away: true } => {
            "👋 Welcome back: reminders mention you again, and your delegate no longer stands in."
                .to_owned()
        }
        CommandReply::Back { was_away: false } => "You were not away: nothing changed.".to_owned(),
        CommandReply::Setup(setup) => setup_text(setup),
        CommandReply::Refused(text) => format!("⛔ {}", escape(text)),
        CommandReply::Invalid(text) => format!("⚠️ {}", escape(text)),
    }
}

/// The answer to `/away`: until when, who stands in, what happens meanwhile.
fn away_text(s: &crate::service::AwaySet) -> String {
    let until = date_time(s.until);
    let mut out = format!("🌴 You are away until {until}: reminders do not mention you");
    match &s.delegate {
        Some(d) => out.push_str(&format!(
            "; {} is mentioned in your place, and gets in a private chat any question that \
             nobody but people away could answer.",
            shown(&d.name)
        )),
        None => out.push('.'),
    }
    if !s.alone_on.is_empty() && s.delegate.is_none() {
        out.push_str(&format!(
            " ⚠️ Nobody else approves route(s) {}: their questions wait for you. Name a \
             delegate: /away until … <name>.",
            s.alone_on
                .iter()
                .map(|r| format!("<code>{}</code>", escape(r)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    out.push_str(" /back ends it early.");
    out
}

/// The answer to `/start` and `/help`: the commands (for an approver's `/help`), then
/// the ids and what this chat is, each with the configuration line to add when missing.
fn setup_text(s: &Setup) -> String {
    let mut out = String::new();
    if s.commands {
        out.push_str(&help());
        out.push_str("\n\n");
    }
    out.push_str(&format!(
        "Chat id: <code>{}</code>\nYour user id: <code>{}</code>\n",
        s.chat_id, s.user_id
    ));
    if s.demo {
        out.push_str(&demo_setup_text(s));
        return out;
    }
    match s.routes.as_slice() {
        [] => out.push_str(&format!(
            "This chat is not a route: add <code>chat_id = {}</code> to a \
             <code>[[routes]]</code> entry of the configuration, with the approvers' \
             user ids in its <code>approvers</code>.",
            s.chat_id
        )),
        [one] => out.push_str(&format!(
            "This chat is the chat of route {}.",
            route_name(one)
        )),
        many => out.push_str(&format!(
            "This chat is the chat of routes {}.",
            many.iter()
                .map(|r| route_name(r))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
    if !s.routes.is_empty() && !s.approves_here {
        out.push_str(&format!(
            " You are not one of its approvers: to make you one, add <code>{}</code> to \
             its <code>approvers</code>.",
            s.user_id
        ));
    }
    match s.approver_of.as_deref() {
        None => {}
        Some([]) => out.push_str(&format!(
            "\nYou are not an approver of any route: to make you one, add \
             <code>{}</code> to a route's <code>approvers</code>.",
            s.user_id
        )),
        Some(routes) => out.push_str(&format!(
            "\nYou are an approver of {} {}.",
            if routes.len() == 1 { "route" } else { "routes" },
            routes
                .iter()
                .map(|r| route_name(r))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
    if !s.commands {
        out.push_str(
            "\nOperator commands (/pending, /windows, /grants, /revoke) work for a route's \
             approvers in its chat; /help there lists them.",
        );
    }
    out
}

/// What a chat and a person are to `serve --demo`, whose one route is its approver's
/// private chat: nothing here is changed by editing `[[routes]]`, which the demo does
/// not read.
fn demo_setup_text(s: &Setup) -> String {
    if s.approves_here {
        return "This chat is the demo's route: the questions of the agent <b>demo</b> come \
                here, and you decide them. Operator commands (/pending, /windows, /grants, \
                /revoke) work here; /help lists them."
            .to_owned();
    }
    if s.chat_id > 0 {
        format!(
            "This bot runs the demo (<code>serve --demo</code>), and its approver is someone \
             else: questions go only to their private chat with the bot, and you cannot \
             decide them. To have the demo ask you, start it with \
             <code>HITL_DEMO_OPERATOR_ID={}</code>.",
            s.user_id
        )
    } else {
        format!(
            "This bot runs the demo (<code>serve --demo</code>), which asks only its approver, \
             in their private chat with the bot, never in a group. To have questions come to \
             this group, run the service without <code>--demo</code>, from a configuration \
             file with a route whose <code>chat_id = {}</code> (the README's \"Set up a group \
             route\").",
            s.chat_id
        )
    }
}

/// A route's name, as configured (escaped: it is the operator's own text, but HTML).
fn route_name(route: &str) -> String {
    format!("<b>{}</b>", shown(route))
}

fn help() -> String {
    let mut out = String::from("<b>Operator commands</b> (approvers of this chat's route):\n");
    for (name, description, args) in COMMANDS {
        out.push_str(&format!(
            "/{name}{} — {}\n",
            escape(args),
            escape(description)
        ));
    }
    out.push_str(
        "A window id is the id of the approved request that opened it (cf_…), as /windows shows; a grant id (gr_…) is as /grants shows.",
    );
    out
}

/// A heading, then entries one per line, at most [`LIST_CAP`] and within
/// [`LIST_BUDGET`], then how many were left out.
fn list(heading: &str, entries: impl ExactSizeIterator<Item = String>) -> String {
    let total = entries.len();
    let mut out = String::from(heading);
    let mut shown = 0;
    let mut used = 0;
    for entry in entries {
        let n = entry.encode_utf16().count() + 1;
        if shown == LIST_CAP || used + n > LIST_BUDGET {
            break;
        }
        out.push('\n');
        out.push_str(&entry);
        used += n;
        shown += 1;
    }
    if shown < total {
        out.push_str(&format!("\n… and {} more.", total - shown));
    }
    out
}

fn pending_entry(r: &Question, now: OffsetDateTime) -> String {
    let what = match &r.interaction {
        Some(i) => format!(
            "❓ {} question “{}”",
            i.kind.in_words(),
            escape(&cut(&r.briefing, QUESTION_EXCERPT))
        ),
        None => format!(
            "🔧 {} for owner <code>{}</code>",
            tool(r.tool.as_str()),
            escape(&cut(r.owner_id.as_str(), 60))
        ),
    };
    // The approver is warned before opening it: this agent's last run of the tool failed,
    // went unreported, or was reported as not known to have run (a reporter's `unknown`
    // always has words; the overdue one has none).
    let warned = match &r.recalled {
        Some(c) if c.status == "failed" => " · ⚠️ <b>last run failed</b>",
        Some(c) if c.words.is_some() => " · ⚠️ <b>last run: not known whether it ran</b>",
        Some(_) => " · ⚠️ <b>last run unreported</b>",
        None => "",
    };
    format!(
        "• {what}{warned} · agent {} · {} left · {}",
        shown(&r.agent),
        left(r.expires_at - now),
        link(r.chat_id, r.message_id)
    )
}

fn window_entry(w: &LiveWindow, used: WindowUse, now: OffsetDateTime) -> String {
    let calls = match used.calls {
        1 => "1 call".to_owned(),
        n => format!("{n} calls"),
    };
    let failed = match used.failed {
        0 => String::new(),
        n => format!(", ⚠️ {n} failed"),
    };
    // A window is the server's too (issue 48): the same tool through another server is
    // another call.
    let server = match &w.window.key.server {
        Some(s) => format!(" via MCP server <code>{}</code>", escape(s.as_str())),
        None => String::new(),
    };
    format!(
        "• <code>{}</code>: {}{server} for owner <code>{}</code> · agent {} · let through {calls}{failed} · until {} ({} left)",
        escape(w.window.opened_by.as_str()),
        tool(w.window.key.tool.as_str()),
        escape(&cut(w.window.key.owner_id.as_str(), 60)),
        shown(&w.window.key.agent),
        date_time(w.window.expires_at),
        left(w.window.expires_at - now),
    )
}

fn grant_entry(g: &Grant, now: OffsetDateTime) -> String {
    format!(
        "• <code>{}</code>: {} may run {} for owner <code>{}</code> · granted by {} · until {} ({} left)",
        escape(g.grant_id.as_str()),
        shown(&g.agent),
        escape(&cut(&scope_in_words(&g.scope), 80)),
        escape(&cut(g.owner_id.as_str(), 60)),
        shown(&g.granted_by.to_string()),
        date_time(g.expires_at),
        left(g.expires_at - now),
    )
}

/// The buttons under a command's answer: a Revoke button for each grant `/grants`
/// listed (as many as the list shows).
pub fn keyboard(reply: &CommandReply) -> Option<teloxide::types::InlineKeyboardMarkup> {
    use teloxide::types::{InlineKeyboardButton, InlineKeyboardMarkup};
    let grants = match reply {
        CommandReply::Grants(grants) => grants,
        CommandReply::Suggestions(offers) => return super::render::suggestions_keyboard(offers),
        CommandReply::ChatRules { routes, .. } => {
            return super::render::chat_rules_keyboard(routes);
        }
        _ => return None,
    };
    if grants.is_empty() {
        return None;
    }
    let rows = grants.iter().take(LIST_CAP).map(|g| {
        vec![InlineKeyboardButton::callback(
            format!(
                "🔒 Revoke {} for {}",
                cut(g.scope.as_str(), 30),
                cut(g.owner_id.as_str(), 20)
            ),
            super::render::grant_revoke_data(&g.grant_id),
        )]
    });
    Some(InlineKeyboardMarkup::new(rows))
}

fn tool(name: &str) -> String {
    format!("<b>{}</b>", escape(&cut(name, 64)))
}

/// A link to a message. Only supergroups and channels (ids `-100…`) have message links
/// (`t.me/c/<id without -100>/<message>`); elsewhere the message id is named instead.
fn link(chat_id: i64, message_id: Option<i32>) -> String {
    /// Telegram writes supergroup and channel ids as -(10^12 + internal id).
    const SUPERGROUP_BASE: i64 = 1_000_000_000_000;
    match message_id {
        None => "not delivered yet".to_owned(),
        Some(m) if chat_id < -SUPERGROUP_BASE => {
            let internal = -chat_id - SUPERGROUP_BASE;
            format!("<a href=\"https://t.me/c/{internal}/{m}\">open</a>")
        }
        Some(m) => format!("message #{m}"),
    }
}

/// "45 s", "12 min", "3 h 5 min"; "0 s" once past.
fn left(d: time::Duration) -> String {
    let secs = d.whole_seconds().max(0);
    match secs {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min", s / 60),
        s => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: Option<&str> = Some("hitl_test_bot");
    const ID: &str = "cf_0123456789abcdef0123456789abcdef";

    fn ours(c: Command) -> Parsed {
        Parsed::Ours(Ok(c))
    }

    #[test]
    fn bare_and_addressed_commands_are_ours() {
        assert_eq!(parse("/pending", ME), ours(Command::Pending));
        assert_eq!(parse("/windows", ME), ours(Command::Windows));
        assert_eq!(parse("/stats", ME), ours(Command::Stats(7)));
        assert_eq!(parse("/stats 30", ME), ours(Command::Stats(30)));
        for bad in ["/stats 0", "/stats 91", "/stats week", "/stats 7 8"] {
            assert!(
                matches!(
                    parse(bad, ME),
                    Parsed::Ours(Err(CommandError::StatsDays(_)))
                ),
                "{bad}"
            );
        }
        assert_eq!(parse("/help", ME), ours(Command::Help));
        assert_eq!(parse("/start", ME), ours(Command::Start));
        // A deep link (t.me/<bot>?start=payload) arrives as "/start payload".
        assert_eq!(parse("/start setup", ME), ours(Command::Start));
        assert_eq!(parse("/pending@hitl_test_bot", ME), ours(Command::Pending));
        assert_eq!(parse("/pending@HITL_Test_Bot", ME), ours(Command::Pending));
        assert_eq!(
            parse(&format!("/revoke@hitl_test_bot  {ID} "), ME),
            ours(Command::Revoke(RevokeTarget::Window(
                QuestionId::parse(ID).unwrap()
            )))
        );
    }

    #[test]
    fn commands_for_another_bot_or_before_get_me_are_not_ours() {
        assert_eq!(parse("/pending@other_bot", ME), Parsed::ForAnotherBot);
        assert_eq!(parse("/pending@hitl_test_bot", None), Parsed::ForAnotherBot);
        assert_eq!(parse("/pending", None), ours(Command::Pending));
    }

    #[test]
    fn names_are_case_sensitive_and_unknown_bare_names_are_chatter() {
        assert_eq!(parse("/Pending", ME), Parsed::NotACommand);
        assert_eq!(parse("/Start", ME), Parsed::NotACommand);
        assert_eq!(parse("/var/log is full", ME), Parsed::NotACommand);
        assert_eq!(parse("pending", ME), Parsed::NotACommand);
        assert_eq!(parse("/ pending", ME), Parsed::NotACommand);
        assert_eq!(parse("/", ME), Parsed::NotACommand);
        assert_eq!(
            parse("/stop@hitl_test_bot", ME),
            Parsed::Ours(Err(CommandError::Unknown("stop".into())))
        );
    }

    #[test]
    fn revoke_says_what_is_wrong_with_its_id() {
        assert_eq!(
            parse("/revoke", ME),
            Parsed::Ours(Err(CommandError::RevokeWithoutId))
        );
        assert_eq!(
            parse("/revoke cf_123", ME),
            Parsed::Ours(Err(CommandError::MalformedId("cf_123".into())))
        );
        assert_eq!(
            parse(&format!("/revoke {ID} {ID}"), ME),
            Parsed::Ours(Err(CommandError::RevokeTooManyIds))
        );
        // Ids are lowercase, as the service writes them.
        assert!(matches!(
            parse(&ID.to_uppercase().replace("CF_", "/revoke cf_"), ME),
            Parsed::Ours(Err(CommandError::MalformedId(_)))
        ));
    }

    #[test]
    fn links_exist_only_for_supergroups() {
        assert_eq!(
            link(-1_001_000_000_001, Some(42)),
            "<a href=\"https://t.me/c/1000000001/42\">open</a>"
        );
        assert_eq!(link(-4_000_123, Some(42)), "message #42");
        assert_eq!(link(12345, Some(7)), "message #7");
        assert_eq!(link(-1_001_000_000_001, None), "not delivered yet");
    }

    #[test]
    fn a_long_list_stops_at_the_cap_and_says_how_many_more() {
        let entries: Vec<String> = (0..30).map(|i| format!("entry {i}")).collect();
        let text = list("head", entries.into_iter());
        assert_eq!(text.lines().count(), 1 + LIST_CAP + 1);
        assert!(text.ends_with("… and 10 more."), "{text}");
    }

    #[test]
    fn a_list_of_long_entries_stays_under_telegrams_limit() {
        let entries: Vec<String> = (0..20).map(|_| "x".repeat(1000)).collect();
        let text = list("head", entries.into_iter());
        assert!(text.encode_utf16().count() <= 4096);
        assert!(text.ends_with("… and 17 more."), "{text}");
    }

    #[test]
    fn time_left_reads_short() {
        assert_eq!(left(time::Duration::seconds(45)), "45 s");
        assert_eq!(left(time::Duration::seconds(750)), "12 min");
        assert_eq!(left(time::Duration::seconds(3 * 3600 + 300)), "3 h 5 min");
        assert_eq!(left(time::Duration::seconds(-5)), "0 s");
    }

    #[test]
    fn help_names_every_command() {
        let text = help();
        for (name, _, _) in COMMANDS {
            assert!(text.contains(&format!("/{name}")), "{text}");
        }
        assert!(!text.contains("<window id>"), "escaped: {text}");
        assert_eq!(
            text.matches("/revoke").count(),
            1,
            "usage said once: {text}"
        );
    }

    #[test]
    fn the_menu_shows_a_commands_usage_in_its_description() {
        let (name, description, args) = COMMANDS[4];
        assert_eq!(name, "revoke");
        assert_eq!(
            menu_description(name, description, args),
            "Close a confirmation window or revoke a grant now: /revoke <window or grant id>"
        );
        assert_eq!(menu_description("help", "What", ""), "What");
    }

    fn setup(routes: &[&str], approves_here: bool, approver_of: Option<&[&str]>) -> Setup {
        let names = |r: &[&str]| r.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Setup {
            commands: false,
            chat_id: -1_001_000_000_001,
            user_id: 42,
            routes: names(routes),
            approves_here,
            approver_of: approver_of.map(names),
            demo: false,
        }
    }

    #[test]
    fn setup_in_demo_mode_speaks_of_the_demo_and_never_of_routes_in_a_file() {
        let demo = |chat_id: i64, routes: &[&str], approves_here: bool| Setup {
            chat_id,
            demo: true,
            ..setup(routes, approves_here, (chat_id > 0).then_some(routes))
        };
        let mine = setup_text(&demo(42, &["demo"], true));
        assert!(mine.contains("This chat is the demo's route"), "{mine}");
        let theirs = setup_text(&demo(43, &[], false));
        assert!(theirs.contains("its approver is someone else"), "{theirs}");
        assert!(theirs.contains("HITL_DEMO_OPERATOR_ID=42"), "{theirs}");
        let group = setup_text(&demo(-1_001_000_000_001, &[], false));
        assert!(group.contains("without <code>--demo</code>"), "{group}");
        assert!(group.contains("chat_id = -1001000000001"), "{group}");
        for text in [mine, theirs, group] {
            assert!(!text.contains("[[routes]]"), "{text}");
            assert!(!text.contains("add <code>"), "{text}");
        }
    }

    #[test]
    fn setup_says_the_ids_and_how_to_make_the_chat_a_route() {
        let text = setup_text(&setup(&[], false, None));
        assert!(
            text.contains("Chat id: <code>-1001000000001</code>"),
            "{text}"
        );
        assert!(text.contains("Your user id: <code>42</code>"), "{text}");
        assert!(
            text.contains("add <code>chat_id = -1001000000001</code> to a <code>[[routes]]</code>"),
            "{text}"
        );
        let text = setup_text(&setup(&["ops", "<b>x"], false, None));
        assert!(
            text.contains("routes <b>ops</b>, <b>&lt;b&gt;x</b>"),
            "{text}"
        );
        assert!(text.contains("add <code>42</code> to its"), "{text}");
        let text = setup_text(&setup(&["ops"], true, Some(&[])));
        assert!(!text.contains("its <code>approvers"), "{text}");
        assert!(text.contains("not an approver of any route"), "{text}");
        let text = setup_text(&setup(&[], false, Some(&["ops"])));
        assert!(
            text.contains("You are an approver of route <b>ops</b>."),
            "{text}"
        );
    }
}
