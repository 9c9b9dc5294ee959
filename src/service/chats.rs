//! Where a route's messages go: the chat Telegram may have moved it to (a group upgraded
//! to a supergroup, remembered in the database so it survives restarts), the routes a
//! chat holds, and the bot's own name, which addresses commands and the console's link.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::{Review, now};
use crate::config::{Config, Route};
use crate::domain::question::Question;
use crate::storage::{Messages, StorageError};

/// The routes' chats as they are now, and who the bot is in them.
pub struct Chats {
    config: Arc<Config>,
    messages: Arc<dyn Messages>,
    /// Routes whose chat moved (group upgraded to supergroup), over the config's chat.
    moved: Mutex<HashMap<String, i64>>,
    /// The bot's Telegram username, once known (operator commands addressed to it).
    bot_username: OnceLock<String>,
}

impl Chats {
    pub(super) fn new(config: Arc<Config>, messages: Arc<dyn Messages>) -> Self {
        Chats {
            config,
            messages,
            moved: Mutex::new(HashMap::new()),
            bot_username: OnceLock::new(),
        }
    }

    /// The chat a route posts to now: the config's, unless Telegram moved it.
    pub(super) fn chat_of(&self, route: &str, configured: i64) -> i64 {
        self.moved_chat(route).unwrap_or(configured)
    }

    /// Where `route`'s chat is now, when Telegram moved it (the same for every
    /// configuration asked: it is the database's knowledge).
    pub(super) fn moved_chat(&self, route: &str) -> Option<i64> {
        self.moved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(route)
            .copied()
    }

    /// After a (re)start: the route chats moved before it, from the database.
    pub(super) async fn reload_moved(&self) -> Result<(), StorageError> {
        let moved = self.messages.route_chats().await?;
        let mut map = self.moved.lock().unwrap_or_else(|e| e.into_inner());
        map.extend(moved);
        Ok(())
    }

    /// Telegram moved the route's group to a supergroup: remember the new chat (in the
    /// database, so it survives restarts) and move the route's pending requests there.
    pub(super) async fn move_route_chat(
        &self,
        record: &Question,
        to: i64,
    ) -> Result<(), StorageError> {
        tracing::warn!(route = %record.route, from = record.chat_id, to,
            "the route's group became a supergroup; using the new chat id (update the config)");
        self.messages
            .move_route_chat(&record.route, record.chat_id, to, now())
            .await?;
        self.moved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(record.route.clone(), to);
        Ok(())
    }

    /// The routes whose chat is `chat_id` now (several routes may share one chat), in
    /// forum topic `thread`: a route that names a topic is only there.
    pub(super) fn routes_in_chat(&self, chat_id: i64, thread: Option<i32>) -> Vec<Arc<Route>> {
        let mut routes: Vec<Arc<Route>> = self
            .config
            .routes
            .values()
            .filter(|r| self.chat_of(&r.name, r.chat_id) == chat_id)
            .filter(|r| r.topic_id.is_none() || r.topic_id == thread)
            .cloned()
            .collect();
        routes.sort_by(|a, b| a.name.cmp(&b.name));
        routes
    }

    /// Remembers the bot's Telegram username (from `getMe`), so commands addressed as
    /// `/cmd@<username>` are recognised. Set once; later calls change nothing.
    pub fn set_bot_username(&self, username: String) {
        let _ = self.bot_username.set(username);
    }

    /// The bot's Telegram username, once `getMe` answered.
    pub fn bot_username(&self) -> Option<&str> {
        self.bot_username.get().map(String::as_str)
    }

    /// The bot's own user id: the digits of its token (`None` for a token of another
    /// shape, as in some tests; then its username tells, once `getMe` answered).
    pub fn bot_id(&self) -> Option<u64> {
        crate::config::bot_id_of_token(self.config.bot_token())
    }

    /// The console's button under `record` in `chat_id`: a `web_app` button in a private
    /// chat; in a group a link to the app registered with @BotFather (when its
    /// `short_name` and the bot's username are known). None when the console is off or
    /// the question ended.
    pub(super) fn review_of(&self, record: &Question, chat_id: i64) -> Option<Review> {
        let app = self.config.mini_app.as_ref()?;
        if record.is_terminal() {
            return None;
        }
        if chat_id > 0 {
            return Some(Review::WebApp(format!(
                "{}/app?q={}",
                app.public_url, record.id
            )));
        }
        let bot = self.bot_username.get()?;
        let short = app.short_name.as_ref()?;
        Some(Review::Link(format!(
            "https://t.me/{bot}/{short}?startapp={}",
            record.id
        )))
    }
}
