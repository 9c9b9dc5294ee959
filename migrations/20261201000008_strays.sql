-- Messages of a question the service learned of only from a tap on them (issue 13): a
-- crash, or a connection lost after Telegram took `sendMessage`, kept the message id
-- from being stored, and the question was posted again. Such a message carries the
-- question's buttons, so a tap on it counts, and it is edited to the outcome like any
-- other message of the question.
CREATE TABLE strays (
    question_id   TEXT NOT NULL REFERENCES confirmations (id),
    chat_id       INTEGER NOT NULL,
    message_id    INTEGER NOT NULL,
    outcome_shown INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (question_id, chat_id, message_id)
);
-- Replies to a learned message find their question (free-text answers).
CREATE INDEX strays_message ON strays (chat_id, message_id);

-- Whether the question's first message has had its file with the full parameters sent
-- (or needed none). A crash between posting the message and sending the file left a
-- question saying "attached below" with nothing below; recovery sends it then.
ALTER TABLE confirmations ADD COLUMN attached INTEGER NOT NULL DEFAULT 0;
