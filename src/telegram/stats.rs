//! `/stats` as the chat shows it: a route's figures, then its people and tools. Names
//! and tools come from people and agents, so they are escaped; the wording is factual.

use std::time::Duration;

use teloxide::utils::html::escape;

use crate::domain::stats::{Figures, Stats};
use crate::domain::text::{self, Layout};

/// How many people and tools a route lists at most (the most active first), so the
/// answer stays under Telegram's 4096 characters.
const TOP: usize = 8;

/// The answer to `/stats`.
pub(super) fn text(days: u32, routes: &[(String, Stats)]) -> String {
    let mut out = format!(
        "📊 <b>Decisions in the last {days} day{}</b>",
        if days == 1 { "" } else { "s" }
    );
    for (route, stats) in routes {
        out.push_str(&format!("\n\n<b>Route {}</b>: ", shown(route, 64)));
        if stats.total.asked == 0 {
            out.push_str("no calls ended in this period.");
            continue;
        }
        out.push_str(&summary(&stats.total));
        if !stats.people.is_empty() {
            out.push_str("\n<b>People</b>");
        }
        for p in stats.people.iter().take(TOP) {
            let f = &p.figures;
            out.push_str(&format!(
                "\n• {}: {} decided{} · {} approved, {} cancelled",
                shown(&p.name, 64),
                f.by_people,
                times(f),
                f.approved,
                f.cancelled
            ));
            if p.rubber_stamp {
                out.push_str(&format!(
                    "\n  ⚠️ approved {} questions and cancelled none, half of them in under {}",
                    f.approved,
                    span(f.median.unwrap_or_default())
                ));
            }
        }
        out.push_str("\n<b>Tools</b>");
        for (tool, f) in stats.tools.iter().take(TOP) {
            out.push_str(&format!(
                "\n• <code>{}</code>: {}",
                shown(tool, 64),
                summary(f)
            ));
        }
        let more = stats.tools.len().saturating_sub(TOP);
        if more > 0 {
            out.push_str(&format!("\n… and {more} more tools"));
        }
    }
    out
}

/// One group's figures in a line: how many, how fast, how they ended.
fn summary(f: &Figures) -> String {
    let mut parts = vec![format!(
        "{} call{}, {} decided by a person{}",
        f.asked,
        if f.asked == 1 { "" } else { "s" },
        f.by_people,
        times(f)
    )];
    for (n, what) in [
        (f.approved, "✅ approved"),
        (f.cancelled, "❌ cancelled"),
        (f.timed_out, "⏰ timed out"),
        (f.by_rule, "📏 by rules"),
        (f.by_window, "🪟 by windows"),
        (f.by_grant, "🎫 by grants"),
        (f.failed_runs, "🔴 failed after a yes"),
    ] {
        if n > 0 {
            parts.push(format!("{what} {n} ({}%)", percent(n, f.asked)));
        }
    }
    parts.join(" · ")
}

/// ` (median 12 s, 90th percentile 45 s)`, or nothing when nobody decided.
fn times(f: &Figures) -> String {
    match (f.median, f.p90) {
        (Some(m), Some(p)) => format!(" (median {}, 90th percentile {})", span(m), span(p)),
        _ => String::new(),
    }
}

fn percent(n: u64, of: u64) -> u64 {
    (n * 100 + of / 2).checked_div(of).unwrap_or(0)
}

/// `0.8 s`, `12 s`, `4 min 5 s`, `2 h 10 min`.
fn span(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 10.0 {
        format!("{:.1} s", (s * 10.0).round() / 10.0)
    } else if s < 60.0 {
        format!("{} s", s.round() as u64)
    } else if s < 3600.0 {
        let s = s.round() as u64;
        format!("{} min {} s", s / 60, s % 60)
    } else {
        let m = (s / 60.0).round() as u64;
        format!("{} h {} min", m / 60, m % 60)
    }
}

fn shown(s: &str, max: usize) -> String {
    let s = text::visible(s, Layout::Line);
    let cut: String = s.chars().take(max).collect();
    escape(&if cut.len() < s.len() {
        cut + "…"
    } else {
        cut
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_naturally() {
        assert_eq!(span(Duration::from_millis(800)), "0.8 s");
        assert_eq!(span(Duration::from_secs(12)), "12 s");
        assert_eq!(span(Duration::from_secs(245)), "4 min 5 s");
        assert_eq!(span(Duration::from_secs(7800)), "2 h 10 min");
        assert_eq!(percent(1, 3), 33);
        assert_eq!(percent(2, 3), 67);
    }
}
