"""What every dagrun process agrees on in the database itself, checked or used before any
statement is rendered: the schema's version (``engine`` reads it without loading the
schema's tables) and the channel that announces queued work."""

#: Bump when the schema changes, and add the step to ``migrations.MIGRATIONS``.
SCHEMA_VERSION = 12

#: A transaction that leaves queued tasks for others on PostgreSQL (it queued more than it
#: claimed itself) sends one notification on this channel when it commits, so an idle
#: worker claims them at once, not at its next poll.
WORK_CHANNEL = "dagrun_work"
