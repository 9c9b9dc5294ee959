-- Whether a decided request's Telegram message already shows its outcome. A restart
-- re-shows the outcomes it had not shown yet, so no message keeps live buttons after
-- its request ended. Rows decided before this column existed count as shown.

ALTER TABLE confirmations ADD COLUMN outcome_shown INTEGER NOT NULL DEFAULT 0;

UPDATE confirmations SET outcome_shown = 1 WHERE status <> 'pending';

CREATE INDEX confirmations_unshown ON confirmations (decided_at)
    WHERE status <> 'pending' AND outcome_shown = 0 AND message_id IS NOT NULL;
