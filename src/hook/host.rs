//! The hosts a hook runs under, and what each reads as an answer.
//!
//! Every host sends JSON on stdin and reads the hook's answer from stdout and its exit
//! code, each in its own words: the adapters in `hosts` turn a host's event into the
//! one [`HookEvent`] the rest of the hook works on, and an [`Answer`] back into what
//! that host reads. Which event names each host sends before and after a call, what it
//! does with each exit code and how long it lets a hook run: docs/hooks.md.

use super::HookResult;
use super::event::HookEvent;
use super::hosts::{claude, codex, cursor, gemini};

/// A coding agent whose hooks this command answers (`--for`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Host {
    /// Claude Code (`PermissionRequest`, `PostToolUse`, `PostToolUseFailure`).
    Claude,
    /// OpenAI Codex (`PermissionRequest`, `PreToolUse`, `PostToolUse`).
    Codex,
    /// Cursor (`beforeShellExecution`, `beforeMCPExecution`, `preToolUse` and their
    /// after events).
    Cursor,
    /// Gemini CLI (`BeforeTool`, `AfterTool`).
    Gemini,
}

/// What the hook decided, before a host's wording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The call runs as it was shown.
    Allow,
    /// The call does not run; the message says why, to the model and the person.
    Deny(String),
    /// The host's own prompt decides (`--fallback ask`); why the hook did not, for
    /// stderr. A host, or an event, with no prompt of its own gets a deny instead.
    AskTheHost(String),
}

impl Host {
    /// The host as people call it, on the card and in messages.
    pub fn display(self) -> &'static str {
        match self {
            Host::Claude => "Claude Code",
            Host::Codex => "Codex",
            Host::Cursor => "Cursor",
            Host::Gemini => "Gemini CLI",
        }
    }

    /// The `--for` value.
    pub fn flag(self) -> &'static str {
        match self {
            Host::Claude => "claude",
            Host::Codex => "codex",
            Host::Cursor => "cursor",
            Host::Gemini => "gemini",
        }
    }

    /// How long a host lets a hook run, in seconds, unless its settings say otherwise
    /// (from each host's documentation; `--host-timeout` when they do).
    pub fn default_host_timeout_seconds(self) -> f64 {
        match self {
            Host::Claude | Host::Codex => 600.0,
            Host::Cursor => cursor::DEFAULT_HOOK_TIMEOUT_SECONDS,
            Host::Gemini => 60.0,
        }
    }

    /// How long the approvers get by default: two minutes, or less where the host's
    /// own default would stop the hook sooner.
    pub fn default_timeout_seconds(self) -> f64 {
        let room = self.default_host_timeout_seconds()
            - answer_margin(self.default_host_timeout_seconds())
            - 5.0;
        room.min(120.0)
    }

    /// The events this host sends before a call, that this hook answers.
    pub fn before_events(self) -> &'static [&'static str] {
        match self {
            Host::Claude => claude::BEFORE,
            Host::Codex => codex::BEFORE,
            Host::Cursor => cursor::BEFORE,
            Host::Gemini => gemini::BEFORE,
        }
    }

    /// The events this host sends after a call, that this hook reports from.
    pub fn after_events(self) -> &'static [&'static str] {
        match self {
            Host::Claude => claude::AFTER,
            Host::Codex => codex::AFTER,
            Host::Cursor => cursor::AFTER,
            Host::Gemini => gemini::AFTER,
        }
    }

    /// The event named `name`, read as this host writes it. `strict` refuses a field
    /// the host does not document (the hook cannot show the approvers what it does not
    /// understand); after events are always read leniently.
    pub fn parse(self, name: &str, bytes: &[u8], strict: bool) -> Result<HookEvent, String> {
        match self {
            Host::Claude => claude::parse(name, bytes, strict),
            Host::Codex => codex::parse(name, bytes, strict),
            Host::Cursor => cursor::parse(name, bytes, strict),
            Host::Gemini => gemini::parse(name, bytes, strict),
        }
    }

    /// `answer` to the before event `name`, in this host's words.
    pub fn answer(self, name: &str, answer: Answer) -> HookResult {
        match self {
            Host::Claude => claude::answer(name, answer),
            Host::Codex => codex::answer(name, answer),
            Host::Cursor => cursor::answer(name, answer),
            Host::Gemini => gemini::answer(name, answer),
        }
    }

    /// What an after event prints on stdout: nothing, or the no-op a host that reads
    /// an empty answer as a failure wants (`{}`).
    pub fn after_stdout(self) -> Option<String> {
        match self {
            Host::Claude | Host::Codex => None,
            Host::Cursor | Host::Gemini => Some("{}".to_owned()),
        }
    }

    /// The answer when the hook cannot read which event it was given: what every
    /// event of this host that can block reads as "no".
    pub fn unreadable(self, why: String) -> HookResult {
        match self {
            // Claude Code's PermissionRequest reads a deny on stdout; exit 2 blocks
            // its other events too, and the JSON is ignored there.
            Host::Claude => claude::block(why),
            Host::Codex | Host::Cursor | Host::Gemini => HookResult::block(why),
        }
    }
}

/// How long before the host's own limit the hook answers: five seconds, or a tenth of a
/// short limit, so that a host starting the hook slowly still reads the answer.
pub fn answer_margin(host_timeout_seconds: f64) -> f64 {
    (host_timeout_seconds / 10.0).min(5.0)
}
