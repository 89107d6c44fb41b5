"""Is the system healthy: ``/health`` in Airflow's shape, and the banner every page shows
when no scheduler is alive while runs wait for one.

``/health`` answers 200 whatever it finds, as Airflow's does: the body says what is
healthy, for a monitor or a load balancer to read (``"metadatabase"``: the database
answers a read; ``"scheduler"``: a scheduler beat less than ``ALIVE_SECONDS`` ago, by the
store's clock). It needs no login.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dagrun.errors import StoreError
from dagrun.store import Store, heartbeats
from dagrun.store.heartbeats import Role, Stall
from dagrun.webapp.http import Request, Response, json_response

if TYPE_CHECKING:
    from dagrun.webapp.app import Site

log = logging.getLogger("dagrun.web")

HEALTHY = "healthy"
UNHEALTHY = "unhealthy"


def health(site: Site, request: Request) -> Response:
    """``{"metadatabase": {"status"}, "scheduler": {"status", "latest_scheduler_heartbeat"}}``."""
    database, scheduler, latest = UNHEALTHY, UNHEALTHY, None
    try:
        with site.store.read() as conn:
            newest = heartbeats.newest(conn, Role.SCHEDULER)
            now = site.store.now(conn)
    except StoreError as exc:
        log.warning("health check: the database does not answer: %s", exc)
    else:
        database = HEALTHY
        if newest is not None:
            latest = newest.beat_at.isoformat()
            if heartbeats.is_alive(newest.beat_at, now):
                scheduler = HEALTHY
    return json_response(
        {
            "metadatabase": {"status": database},
            "scheduler": {"status": scheduler, "latest_scheduler_heartbeat": latest},
        }
    )


def scheduler_stall(store: Store) -> Stall | None:
    """What the page's banner says: no scheduler alive while runs wait (None: nothing to
    say, or the database does not answer, which the page itself then says)."""
    try:
        with store.read() as conn:
            return heartbeats.scheduler_stall(conn)
    except StoreError:
        return None
