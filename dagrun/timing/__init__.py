"""Time: cron expressions, timetables, instants and zones, and retry backoff.

Pure functions of their inputs (the clock is passed in), so the daylight-saving rules and
the schedule arithmetic are tested exactly, with no database and no process. Every other
stage imports from here; this stage imports only ``dagrun.errors``.
"""
