-- tollgate: a key's own enforcement mode (issue 20). Apply after 001 with:
--   psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -f migrations/002_api_keys_mode.sql
-- Idempotent. NULL (the default): the key follows its plan's mode or cohort
-- (plans.<name>.enforce_percent). 'enforce' or 'shadow' decides for this key alone, e.g. to
-- enforce your own internal keys before any customer's. The gateway reads the column when it is
-- there and does without it when it is not, so the gateway may be upgraded first.
BEGIN;

ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS mode text NULL;

DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'api_keys_mode_check') THEN
    ALTER TABLE api_keys
      ADD CONSTRAINT api_keys_mode_check CHECK (mode IS NULL OR mode IN ('enforce', 'shadow'));
  END IF;
END
$$;

COMMIT;
