"""The login of a web server that listens off loopback: sessions, bearer tokens, the login
form, and the slow-down of failed logins.

Who must log in is decided by the address the server is bound to, not by the client's: on a
loopback address ``dagrun web`` makes no ``Gate`` and nobody logs in; on any other address
every request passes the gate, from 127.0.0.1 too (a proxy on the same host makes every
request come from there). What passes without a login: the probes (``/health``,
``/healthz``: a load balancer asks them, and they tell only whether the service and the
database answer), the login form and the static files it uses.

A browser logs in with the form and then sends a session cookie: signed with the store's
session key (``accounts.session_key``, itsdangerous), valid for ``SESSION_SECONDS``, and
bound to the account's password hash, so deleting an account, or adding it again with a new
password, ends its sessions at their next request. ``HttpOnly`` keeps it from scripts,
``SameSite=Strict`` from every request another site starts, and ``Secure`` is set when a
trusted proxy says it serves HTTPS (``X-Forwarded-Proto``; trusted only with
``--trusted-proxy``, since any client can send that header). Logging out clears the cookie;
a copy taken before stays valid until it expires, as the cookie is the whole session.

Cross-site request forgery: the only requests that change anything are the two forms'
POSTs (``/login``, ``/logout``), and each carries a form token the site alone can know: the
login form's matches a cookie set with the form (a double submit), the logout form's is
derived from the session cookie. ``Origin`` is not what is checked because the site's
``Referrer-Policy: no-referrer`` makes browsers send ``Origin: null`` with a form, and a
proxy may rewrite ``Host``.

An API client sends ``Authorization: Bearer TOKEN`` instead (``dagrun users token NAME``);
without either, a page answers 302 to the login form and a JSON route 401 with
``WWW-Authenticate: Bearer``. Failed logins are counted per client address, in memory
(``FailedLogins``); every login, failed login and logout is audited.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

from itsdangerous import BadSignature, TimestampSigner, URLSafeTimedSerializer

from dagrun.store import accounts, audit
from dagrun.webapp.http import Forbidden, Request, Response, Unauthorized, Visitor
from dagrun.webapp.templates import render

if TYPE_CHECKING:
    from dagrun.webapp.app import Site

SESSION_COOKIE = "dagrun_session"
LOGIN_COOKIE = "dagrun_login"
SESSION_SECONDS = 12 * 3600
#: How long a login form may be left open before it is sent.
LOGIN_FORM_SECONDS = 3600
LOGIN, LOGOUT = "/login", "/logout"
PROBES = frozenset({"/health", "/healthz"})
STATIC = "/static/"
BEARER_REALM = 'Bearer realm="dagrun"'


# ---------------------------------------------------------------- sessions


class Sessions:
    """Session cookies: issued at login, read at each request, and the form token of the
    pages a session sees. ``clock`` is injected for the tests of expiry."""

    def __init__(
        self, key: bytes, seconds: int = SESSION_SECONDS, clock: Callable[[], float] = time.time
    ):
        class Signer(TimestampSigner):
            def get_timestamp(self) -> int:
                return int(clock())

        self._key = key
        self._cookies = URLSafeTimedSerializer(key, salt="dagrun.web.session", signer=Signer)
        self.seconds = seconds

    def issue(self, name: str, password_hash: str) -> str:
        return self._cookies.dumps([name, fingerprint(password_hash)])

    def read(self, cookie: str) -> tuple[str, str] | None:
        """(account, password fingerprint) of a cookie this key signed less than
        ``seconds`` ago; None for any other."""
        try:
            name, print_ = self._cookies.loads(cookie, max_age=self.seconds)
        except (BadSignature, ValueError, TypeError):
            return None
        return (name, print_) if isinstance(name, str) and isinstance(print_, str) else None

    def form_token(self, cookie: str) -> str:
        """What the session's forms carry: derived from its cookie, unknown to other sites."""
        return hmac.new(self._key, b"form:" + cookie.encode(), hashlib.sha256).hexdigest()


def fingerprint(password_hash: str) -> str:
    """Short, and different for each password set: a new salt makes a new hash."""
    return hashlib.sha256(password_hash.encode()).hexdigest()[:16]


# ---------------------------------------------------------------- the slow-down


@dataclass
class _Failures:
    """A client's failed logins: how many, the last, and until when it waits."""

    count: int
    last: float
    until: float


class FailedLogins:
    """Failed logins per client address, in memory: after ``allowed`` failures with no
    ``quiet`` seconds between them, the address must wait before its next try, twice as long
    after each further failure (``first_wait``, then doubled, at most ``longest_wait``). As
    ``longest_wait`` is shorter than ``quiet``, waiting out a block does not start the count
    again: a guesser keeps the longest wait, a dozen tries an hour. A success forgets the
    address. At most ``most_addresses`` are remembered, the oldest forgotten first."""

    def __init__(
        self,
        *,
        allowed: int = 5,
        quiet: float = 600.0,
        first_wait: float = 2.0,
        longest_wait: float = 300.0,
        most_addresses: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.allowed, self.quiet = allowed, quiet
        self.first_wait, self.longest_wait = first_wait, longest_wait
        self.most_addresses = most_addresses
        self.clock = clock
        self._seen: OrderedDict[str, _Failures] = OrderedDict()
        self._lock = threading.Lock()

    def wait(self, address: str) -> float:
        """Seconds before ``address`` may try again (0: now)."""
        with self._lock:
            found = self._seen.get(address)
            return max(0.0, found.until - self.clock()) if found else 0.0

    def failed(self, address: str) -> float:
        """Count a failure; the seconds ``address`` must now wait (0: none yet)."""
        now = self.clock()
        with self._lock:
            found = self._seen.pop(address, None)
            if found is None or now - found.last >= self.quiet:
                found = _Failures(0, now, now)
            found.count += 1
            over = found.count - self.allowed
            wait = 0.0 if over < 0 else min(self.longest_wait, self.first_wait * 2**over)
            found.last, found.until = now, now + wait
            self._seen[address] = found
            while len(self._seen) > self.most_addresses:
                self._seen.popitem(last=False)
            return wait

    def succeeded(self, address: str) -> None:
        with self._lock:
            self._seen.pop(address, None)


# ---------------------------------------------------------------- the gate


class Gate:
    """What a server off loopback asks of each request: ``admit`` answers the login and
    logout forms itself, turns away a request with neither session nor token, and gives
    the others on with their ``visitor``."""

    def __init__(
        self,
        key: bytes,
        *,
        trusted_proxy: bool = False,
        sessions: Sessions | None = None,
        failures: FailedLogins | None = None,
    ):
        self.sessions = sessions or Sessions(key)
        self.failures = failures or FailedLogins()
        self.trusted_proxy = trusted_proxy

    def admit(self, site: Site, request: Request) -> Request | Response:
        if request.path == LOGIN:
            if request.method == "POST":
                return self._log_in(site, request)
            return self._form(site, request)
        if request.path == LOGOUT:
            return self._log_out(site, request)
        if request.path in PROBES or request.path.startswith(STATIC):
            return request
        visitor = self._visitor(site, request)
        if visitor is not None:
            return replace(request, visitor=visitor)
        if request.wants_json:
            raise Unauthorized(
                "log in first: send Authorization: Bearer TOKEN "
                "(`dagrun users token NAME` makes one)",
                [("WWW-Authenticate", BEARER_REALM)],
            )
        return redirect(f"{LOGIN}?next={quote(_target(request), safe='/')}", HTTPStatus.FOUND)

    # ------------------------------------------------------------ who is asking

    def _visitor(self, site: Site, request: Request) -> Visitor | None:
        authorization = request.headers.get("authorization")
        if authorization is not None:
            return Visitor(self._token_owner(site, authorization))
        return self._session(site, request)

    def _token_owner(self, site: Site, authorization: str) -> str:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized(
                "the Authorization header must be: Bearer TOKEN",
                [("WWW-Authenticate", f'{BEARER_REALM}, error="invalid_request"')],
            )
        with site.store.read() as conn:
            found = accounts.find_token(conn, token.strip())
        if found is None:
            raise Unauthorized(
                "unknown or revoked token (`dagrun users token NAME` makes a new one)",
                [("WWW-Authenticate", f'{BEARER_REALM}, error="invalid_token"')],
            )
        if accounts.is_stale(found, site.store.now()):
            with site.store.write() as conn:
                accounts.touch_token(conn, found.id, site.store.now(conn))
        return found.account

    def _session(self, site: Site, request: Request) -> Visitor | None:
        cookie = cookie_value(request, SESSION_COOKIE)
        claim = self.sessions.read(cookie) if cookie else None
        if claim is None:
            return None
        with site.store.read() as conn:
            stored = accounts.password_hash(conn, claim[0])
        if stored is None or not hmac.compare_digest(fingerprint(stored), claim[1]):
            return None
        return Visitor(claim[0], self.sessions.form_token(cookie))

    def client_address(self, request: Request) -> str:
        """The client's address: the last a trusted proxy appended to X-Forwarded-For
        (behind a proxy every request comes from the proxy), else the peer's."""
        forwarded = request.headers.get("x-forwarded-for", "")
        if self.trusted_proxy and forwarded.strip():
            return forwarded.split(",")[-1].strip()
        return request.remote_addr

    def _over_tls(self, request: Request) -> bool:
        proto = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
        return self.trusted_proxy and proto == "https"

    # ------------------------------------------------------------ the forms

    def _form(
        self,
        site: Site,
        request: Request,
        status: int = HTTPStatus.OK,
        error: str = "",
        name: str = "",
    ) -> Response:
        """The login form, with a fresh form token in it and in its cookie. A session that
        is still good goes on to ``next`` at once."""
        target = local_target(request.query.get("next") or request.form.get("next"))
        if request.method != "POST" and self._session(site, request) is not None:
            return redirect(target, HTTPStatus.FOUND)
        token = secrets.token_urlsafe(24)
        response = render(
            site.env,
            "login.html",
            request,
            status,
            mode="login",
            next=target,
            error=error,
            name=name,
            form_token=token,
            bounce=_came_from_another_site(request),
        )
        response.headers.append(self._cookie(request, LOGIN_COOKIE, token, LOGIN_FORM_SECONDS))
        return response

    def _log_in(self, site: Site, request: Request) -> Response:
        address = self.client_address(request)
        name = request.form.get("name", "")[:64]
        if not _same(request.form.get("form_token"), cookie_value(request, LOGIN_COOKIE)):
            message = "the login form expired or came from another site; log in again"
            return self._form(site, request, HTTPStatus.FORBIDDEN, message, name)
        wait = self.failures.wait(address)
        if wait:
            slowed = _slowed(address, wait)
            response = self._form(site, request, HTTPStatus.TOO_MANY_REQUESTS, slowed, name)
            return _retry_after(response, wait)
        with site.store.read() as conn:
            stored = accounts.password_hash(conn, name)
        if not accounts.login_matches(request.form.get("password", ""), stored):
            return self._failed(site, request, address, name)
        assert stored is not None  # a password matched the account's hash
        self.failures.succeeded(address)
        with site.store.write() as conn:
            audit.record_visit(site.store, conn, "login", f"{name}@{address}")
        response = redirect(local_target(request.form.get("next")), HTTPStatus.SEE_OTHER)
        session = self.sessions.issue(name, stored)
        response.headers.append(self._cookie(request, SESSION_COOKIE, session, SESSION_SECONDS))
        response.headers.append(self._cookie(request, LOGIN_COOKIE, "", 0))
        return response

    def _failed(self, site: Site, request: Request, address: str, name: str) -> Response:
        wait = self.failures.failed(address)
        detail: dict[str, Any] = {"reason": "wrong name or password"}
        if wait:
            detail["slowed_for"] = math.ceil(wait)
        with site.store.write() as conn:
            audit.record_visit(site.store, conn, "login_failed", f"{name}@{address}", **detail)
        message = "wrong name or password"
        if wait:
            message += f"; {_slowed(address, wait)}"
        response = self._form(site, request, HTTPStatus.FORBIDDEN, message, name)
        return _retry_after(response, wait) if wait else response

    def _log_out(self, site: Site, request: Request) -> Response:
        visitor = self._session(site, request)
        if visitor is None:
            response = redirect(LOGIN, HTTPStatus.SEE_OTHER)
        elif request.method != "POST":
            return render(site.env, "login.html", request, mode="logout", visitor=visitor)
        elif not _same(request.form.get("form_token"), visitor.form_token):
            raise Forbidden("the log-out form expired or came from another site; reload the page")
        else:
            address = self.client_address(request)
            with site.store.write() as conn:
                who = f"{visitor.name}@{address}"
                audit.record_visit(site.store, conn, "logout", who)
            response = redirect(LOGIN, HTTPStatus.SEE_OTHER)
        response.headers.append(self._cookie(request, SESSION_COOKIE, "", 0))
        return response

    def _cookie(self, request: Request, name: str, value: str, seconds: int) -> tuple[str, str]:
        """A Set-Cookie header: HttpOnly, SameSite=Strict, Secure over TLS; 0 s deletes."""
        path = LOGIN if name == LOGIN_COOKIE else "/"
        parts = [f"{name}={value}", f"Path={path}", f"Max-Age={seconds}", "HttpOnly"]
        parts.append("SameSite=Strict")
        if self._over_tls(request):
            parts.append("Secure")
        return ("Set-Cookie", "; ".join(parts))


def redirect(location: str, status: int) -> Response:
    return Response(b"", "text/plain; charset=utf-8", status, [("Location", location)])


def cookie_value(request: Request, name: str) -> str:
    """The value of cookie ``name`` of the request, empty when it has none (or a header
    that does not parse)."""
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(request.headers.get("cookie", ""))
    except CookieError:
        return ""
    found = jar.get(name)
    return found.value if found is not None else ""


def local_target(target: str | None) -> str:
    """Where to go after logging in: a path of this site, never another site's address
    (``//host``, ``/\\host``, a scheme, or a control character a browser would drop)."""
    if not target or not target.startswith("/") or target.startswith(("//", LOGIN, LOGOUT)):
        return "/"
    if "\\" in target or any(ord(c) < 0x21 for c in target):
        return "/"
    parts = urlsplit(target)
    return "/" if parts.scheme or parts.netloc else target


def _target(request: Request) -> str:
    query = urlencode(request.query)
    return quote(request.path) + (f"?{query}" if query else "")


def _same(sent: str | None, expected: str) -> bool:
    return bool(sent) and bool(expected) and hmac.compare_digest(sent or "", expected)


def _came_from_another_site(request: Request) -> bool:
    """A link from another site (a chat, a mail) brings no SameSite=Strict cookie: the login
    page then loads itself again once, as a request of this site, which brings it."""
    return (
        request.headers.get("sec-fetch-site") == "cross-site" and request.query.get("again") != "1"
    )


def _slowed(address: str, wait: float) -> str:
    return f"too many failed logins from {address}: try again in {math.ceil(wait)} s"


def _retry_after(response: Response, wait: float) -> Response:
    response.headers.append(("Retry-After", str(math.ceil(wait))))
    return response
