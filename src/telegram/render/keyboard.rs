//! The buttons under a message and the callback data they carry (`a:<token>` ...),
//! read back when tapped: what each tap does is decided by the data, never the label.

use teloxide::types::{InlineKeyboardButton, InlineKeyboardMarkup};

use crate::domain::ids::{CallbackToken, GrantId};
use crate::domain::interaction::Interaction;
use crate::domain::text::{self, Layout};
use crate::service::{TapAction, View};

use super::{approve_for_label, window_duration};

/// `a:<token>`, `w:<token>`, `c:<token>`, `d:<token>`, `o:<token>:<n>` or
/// `t:<token>:<n>`: at most 38 bytes, within Telegram's 64, and nothing in it says
/// anything about the question.
pub fn callback_data(action: TapAction, token: &CallbackToken) -> String {
    let token = token.as_str();
    match action {
        TapAction::Approve => format!("a:{token}"),
        TapAction::ApproveWindow => format!("w:{token}"),
        TapAction::Cancel => format!("c:{token}"),
        TapAction::DenyWithReason => format!("r:{token}"),
        TapAction::Extend => format!("x:{token}"),
        TapAction::Done => format!("d:{token}"),
        TapAction::Choose(n) => format!("o:{token}:{n}"),
        TapAction::Toggle(n) => format!("t:{token}:{n}"),
    }
}

/// Parses callback data from a tap; `None` for anything we did not produce.
pub fn parse_callback_data(data: &str) -> Option<(TapAction, CallbackToken)> {
    let (tag, rest) = data.split_once(':')?;
    let option = |rest: &str| -> Option<(u8, CallbackToken)> {
        let (token, n) = rest.split_once(':')?;
        // Only the canonical decimal form: "07" or "+7" were not produced here.
        let n: u8 = n.parse().ok().filter(|v: &u8| v.to_string() == n)?;
        Some((n, CallbackToken::parse(token).ok()?))
    };
    let (action, token) = match tag {
        "a" => (TapAction::Approve, CallbackToken::parse(rest).ok()?),
        "w" => (TapAction::ApproveWindow, CallbackToken::parse(rest).ok()?),
        "c" => (TapAction::Cancel, CallbackToken::parse(rest).ok()?),
        "r" => (TapAction::DenyWithReason, CallbackToken::parse(rest).ok()?),
        "x" => (TapAction::Extend, CallbackToken::parse(rest).ok()?),
        "d" => (TapAction::Done, CallbackToken::parse(rest).ok()?),
        "o" => option(rest).map(|(n, t)| (TapAction::Choose(n), t))?,
        "t" => option(rest).map(|(n, t)| (TapAction::Toggle(n), t))?,
        _ => return None,
    };
    Some((action, token))
}

/// The callback data of a grant's Revoke button (`/grants`): `g:` and the grant's id,
/// 35 bytes of Telegram's 64.
pub fn grant_revoke_data(id: &GrantId) -> String {
    format!("g:{id}")
}

/// The grant a Revoke button names; `None` for anything else.
pub fn parse_grant_revoke(data: &str) -> Option<GrantId> {
    GrantId::parse(data.strip_prefix("g:")?).ok()
}

pub const APPROVE_LABEL: &str = "✅ Approve";
pub const APPROVE_ONCE_LABEL: &str = "✅ Approve once";
pub const CANCEL_LABEL: &str = "❌ Cancel";
pub const DENY_WITH_REASON_LABEL: &str = "✋ Deny with reason";

pub const REJECT_LABEL: &str = "❌ Reject";
pub const DONE_LABEL: &str = "✔️ Done";

/// Approve and `no` (Cancel or Reject), "Deny with reason" beside the no, and "+N min"
/// when the route offers more time. A question that offers a window has two approve
/// buttons, so the scope is the operator's explicit choice: "Approve once" beside
/// "Approve for 10 min", with the refusals on a row of their own.
pub(super) fn approve_keyboard(
    token: &CallbackToken,
    no: &str,
    window_seconds: u64,
    view: &View,
) -> InlineKeyboardMarkup {
    let no = InlineKeyboardButton::callback(no, callback_data(TapAction::Cancel, token));
    let deny = InlineKeyboardButton::callback(
        DENY_WITH_REASON_LABEL,
        callback_data(TapAction::DenyWithReason, token),
    );
    let mut rows = if window_seconds == 0 {
        vec![
            vec![
                InlineKeyboardButton::callback(
                    APPROVE_LABEL,
                    callback_data(TapAction::Approve, token),
                ),
                no,
            ],
            vec![deny],
        ]
    } else {
        vec![
            vec![
                InlineKeyboardButton::callback(
                    APPROVE_ONCE_LABEL,
                    callback_data(TapAction::Approve, token),
                ),
                InlineKeyboardButton::callback(
                    approve_for_label(window_seconds),
                    callback_data(TapAction::ApproveWindow, token),
                ),
            ],
            vec![no, deny],
        ]
    };
    if let Some(seconds) = view.extend_seconds {
        rows.push(vec![InlineKeyboardButton::callback(
            extend_label(seconds),
            callback_data(TapAction::Extend, token),
        )]);
    }
    InlineKeyboardMarkup::new(rows)
}

/// The label of the button that moves the deadline.
pub fn extend_label(seconds: u64) -> String {
    format!("⏳ +{}", window_duration(seconds))
}

/// An option's label on a button (plain text, no HTML): invisible characters as escapes,
/// and a ⚠ in front when its words mix scripts.
pub(super) fn button_label(label: &str) -> String {
    let shown = text::visible(label, Layout::Line);
    if text::mixes_scripts(label) {
        format!("⚠ {shown}")
    } else {
        shown
    }
}

/// Option buttons in rows that fit a phone: three short labels, two medium, else one.
pub(super) fn rows(
    i: &Interaction,
    buttons: Vec<InlineKeyboardButton>,
) -> Vec<Vec<InlineKeyboardButton>> {
    let longest = i
        .options
        .iter()
        .map(|o| o.label.chars().count())
        .max()
        .unwrap_or(0);
    let per_row = match longest {
        0..=10 => 3,
        11..=20 => 2,
        _ => 1,
    };
    buttons.chunks(per_row).map(<[_]>::to_vec).collect()
}
