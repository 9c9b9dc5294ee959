-- The operator's side of the conversation (issue 15):
-- * `denial_reason`: what an operator who tapped "Deny with reason" replied; returned to
--   the agent in a field of its own. `answers.reason` keeps it with the answer too.
-- * `extensions`: how many times an approver tapped "+N min" (each moved `expires_at`).
-- * `reminders_sent`: how many of the route's `remind_after` points were passed: a
--   reminder is claimed here before it is sent, so a restart neither repeats it nor
--   skips the next.
-- * `reasons_requested`: how many times an approver tapped "Deny with reason".
-- * `escalated_at`: when the question was also posted to the route's `escalate_to`
--   route (claimed here, once).
-- * `reason_requests`: an approver asked to deny with a reason; their reply (to the
--   prompt, or to the question) ends the question. `prompt_message_id` is NULL until
--   Telegram took the prompt.

ALTER TABLE confirmations ADD COLUMN denial_reason TEXT;
ALTER TABLE confirmations ADD COLUMN extensions INTEGER NOT NULL DEFAULT 0;
ALTER TABLE confirmations ADD COLUMN reminders_sent INTEGER NOT NULL DEFAULT 0;
ALTER TABLE confirmations ADD COLUMN escalated_at INTEGER;
ALTER TABLE confirmations ADD COLUMN reasons_requested INTEGER NOT NULL DEFAULT 0;
ALTER TABLE answers ADD COLUMN reason TEXT;

CREATE TABLE reason_requests (
    question_id       TEXT NOT NULL REFERENCES confirmations (id),
    user_id           INTEGER NOT NULL,
    chat_id           INTEGER NOT NULL,
    prompt_message_id INTEGER,
    asked_at          INTEGER NOT NULL,
    PRIMARY KEY (question_id, user_id)
);
CREATE INDEX reason_requests_prompt ON reason_requests (chat_id, prompt_message_id);
