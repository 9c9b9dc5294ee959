-- Approvers away (issue 50): the table of the SQLite migration of the same name, whose
-- header says what each column is for, with PostgreSQL's types.
CREATE TABLE away (
    person        BIGINT PRIMARY KEY,
    until         BIGINT NOT NULL,
    delegate_id   BIGINT,
    delegate_name TEXT,
    set_at        BIGINT NOT NULL,
    CHECK ((delegate_id IS NULL) = (delegate_name IS NULL))
);
