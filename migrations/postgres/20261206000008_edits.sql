-- Edit before execute (issue 37); see migrations/20261206000014_edits.sql.
ALTER TABLE confirmations ADD COLUMN args_schema TEXT;
ALTER TABLE confirmations ADD COLUMN original_params_json TEXT;
ALTER TABLE confirmations ADD COLUMN original_args_hash TEXT;
