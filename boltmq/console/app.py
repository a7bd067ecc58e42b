"""The console's web application: routes, login, CSRF, and the pages.

Every page is rendered on the server (Jinja2, ``templates/``); the browser runs
only ``static/console.js`` (table search, body views, the Overview's live chart
with uPlot, served from ``static/vendor/``: nothing is fetched from elsewhere;
the Content-Security-Policy allows this origin only).

Route                          | Method | What
-------------------------------+--------+---------------------------------------------
/login, /logout                | GET/POST | an ACL account's access key and secret
/                              | GET    | Overview; /api/rates answers its chart's points
/topics, /topics/{name}        | GET    | list (``q``: search), one topic
/topics (create/update)        | POST   | ``name``, ``queues``, ``perm``, ``order``
/topics/{name}/delete, /send   | POST   | delete; send a test message
/groups, /groups/{name}        | GET    | list, one group
/groups/{name}/reset|resend|retry | POST | reset offsets, resend dead letters, retry settings
/messages                      | GET    | ``by`` id, key or time
/access, /access/account, /access/{key}/delete | GET/POST | accounts (admin)

Every POST carries the session's CSRF token (form field ``csrf``) or is refused
(403) before anything is called; an account that may not change things (not an
admin) sees no button that does, and its POSTs are refused too. Cookies are
``HttpOnly``, ``SameSite=Strict``, and ``Secure`` when the console serves TLS.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from boltmq.console import access, groups, messages, overview, topics
from boltmq.console.calls import ConsoleError, NotSignedIn
from boltmq.console.sessions import Session, Sessions, TooManyLogins

HERE = Path(__file__).parent
VENDOR_CHART = HERE / "static" / "vendor" / "uPlot.iife.min.js"
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

Page = Callable[[Request, Session], Awaitable[Response]]


class Console:
    """The application and what its handlers share."""

    def __init__(
        self,
        sessions: Sessions,
        *,
        secure_cookies: bool = False,
        watermarks: tuple[int, int] = (
            overview.CLEAN_WATERMARK,
            overview.FORCE_CLEAN_WATERMARK,
        ),
    ) -> None:
        self.sessions = sessions
        self.watermarks = watermarks
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.globals["chart_installed"] = VENDOR_CHART.exists
        self.templates.env.globals["iso_ms"] = messages.iso_ms
        self.templates.env.globals["perm_text"] = topics.perm_text
        routes = [
            Route("/login", self.login_form, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Route("/", self._page(self.overview_page)),
            Route("/api/rates", self._page(self.rates)),
            Route("/topics", self._page(self.topics_page)),
            Route("/topics", self._change(self.topic_upsert), methods=["POST"]),
            Route("/topics/{name}", self._page(self.topic_page)),
            Route("/topics/{name}/delete", self._change(self.topic_delete), methods=["POST"]),
            Route("/topics/{name}/send", self._change(self.topic_send), methods=["POST"]),
            Route("/groups", self._page(self.groups_page)),
            Route("/groups/{name}", self._page(self.group_page)),
            Route("/groups/{name}/reset", self._change(self.group_reset), methods=["POST"]),
            Route("/groups/{name}/resend", self._change(self.group_resend), methods=["POST"]),
            Route("/groups/{name}/retry", self._change(self.group_retry), methods=["POST"]),
            Route("/messages", self._page(self.messages_page)),
            Route("/access", self._page(self.access_page)),
            Route("/access/account", self._change(self.account_set), methods=["POST"]),
            Route("/access/{key}/delete", self._change(self.account_delete), methods=["POST"]),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ]
        self.app = Starlette(
            routes=routes,
            middleware=[
                Middleware(
                    SessionMiddleware,
                    secret_key=secrets.token_urlsafe(32),
                    session_cookie="boltmq_console",
                    same_site="strict",
                    https_only=secure_cookies,
                )
            ],
        )
        self.app.add_middleware(_Headers)

    # ------------------------------------------------------------------ plumbing
    def _render(
        self, request: Request, name: str, context: dict[str, Any], status: int = 200
    ) -> Response:
        session: Session | None = context.get("session")
        context.setdefault("error", "")
        context["csrf"] = _csrf(request)
        context["notice"] = request.session.pop("notice", None)
        context["can_change"] = bool(session and session.admin)
        context["account"] = session.access_key if session else ""
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    def _session(self, request: Request) -> Session | None:
        return self.sessions.get(request.session.get("sid")) or self.sessions.anonymous()

    def _page(self, build: Page) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            try:
                session = await run_in_threadpool(self._session, request)
            except ConsoleError as exc:
                return self._render(request, "error.html", {"error": str(exc)}, 503)
            if session is None:
                if request.url.path.startswith("/api/"):
                    return JSONResponse({"error": "log in first"}, status_code=401)
                return RedirectResponse("/login", status_code=303)
            return await build(request, session)

        return handler

    def _change(self, act: Page) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            form = await request.form()
            token = str(form.get("csrf", ""))
            if not token or not hmac.compare_digest(token, request.session.get("csrf", "")):
                return Response("missing or wrong CSRF token", status_code=403)
            session = await run_in_threadpool(self._session, request)
            if session is None:
                return RedirectResponse("/login", status_code=303)
            if not session.admin:
                return Response("this account may not change anything", status_code=403)
            request.state.form = form
            return await act(request, session)

        return handler

    def _done(self, request: Request, to: str, lines: list[str] | str) -> Response:
        request.session["notice"] = lines if isinstance(lines, list) else [lines]
        return RedirectResponse(to, status_code=303)

    async def _show(
        self, request: Request, session: Session, name: str, build: Callable[[], dict[str, Any]]
    ) -> Response:
        context: dict[str, Any] = {"session": session}
        try:
            context.update(await run_in_threadpool(build))
        except ConsoleError as exc:
            context["error"] = str(exc)
        return self._render(request, name, context)

    async def _act(self, request: Request, to: str, act: Callable[[], list[str] | str]) -> Response:
        try:
            lines = await run_in_threadpool(act)
        except ConsoleError as exc:
            request.session["notice"] = [f"refused: {exc}"]
            return RedirectResponse(to, status_code=303)
        return self._done(request, to, lines)

    # ------------------------------------------------------------------ login
    async def login_form(self, request: Request) -> Response:
        return self._render(request, "login.html", {})

    async def login(self, request: Request) -> Response:
        form = await request.form()
        token = str(form.get("csrf", ""))
        if not token or not hmac.compare_digest(token, request.session.get("csrf", "")):
            return Response("missing or wrong CSRF token", status_code=403)
        client = request.client.host if request.client else "-"
        try:
            sid, _ = await run_in_threadpool(
                self.sessions.login,
                str(form.get("access_key", "")),
                str(form.get("secret_key", "")),
                client,
            )
        except TooManyLogins as exc:
            return self._render(request, "login.html", {"error": str(exc)}, 429)
        except (NotSignedIn, ConsoleError) as exc:
            return self._render(request, "login.html", {"error": str(exc)}, 401)
        self.sessions.logout(request.session.get("sid"))
        request.session.clear()
        request.session["sid"] = sid  # a new id and a new CSRF token at every login
        request.session["csrf"] = secrets.token_urlsafe(32)
        return RedirectResponse("/", status_code=303)

    async def logout(self, request: Request) -> Response:
        form = await request.form()
        token = str(form.get("csrf", ""))
        if not token or not hmac.compare_digest(token, request.session.get("csrf", "")):
            return Response("missing or wrong CSRF token", status_code=403)
        self.sessions.logout(request.session.get("sid"))
        request.session.clear()
        return RedirectResponse("/login", status_code=303)

    # ------------------------------------------------------------------ pages
    async def overview_page(self, request: Request, session: Session) -> Response:
        def build() -> dict[str, Any]:
            return {"members": overview.members(session.calls), "watermarks": self.watermarks}

        return await self._show(request, session, "overview.html", build)

    async def rates(self, request: Request, session: Session) -> Response:
        return JSONResponse(await run_in_threadpool(overview.rates, session.calls))

    async def topics_page(self, request: Request, session: Session) -> Response:
        search = request.query_params.get("q", "")
        system = request.query_params.get("system") == "1"

        def build() -> dict[str, Any]:
            rows = topics.topic_rows(session.calls, search, system)
            return {"topics": rows, "q": search, "system": system}

        return await self._show(request, session, "topics.html", build)

    async def topic_page(self, request: Request, session: Session) -> Response:
        name = request.path_params["name"]
        return await self._show(
            request, session, "topic.html", lambda: topics.topic_page(session.calls, name)
        )

    async def topic_upsert(self, request: Request, session: Session) -> Response:
        form = request.state.form
        name = str(form.get("name", ""))
        try:
            queues, perm = int(form.get("queues", "")), int(form.get("perm", ""))
        except ValueError:
            return self._done(request, "/topics", "refused: queues and perm are numbers")
        order = form.get("order") == "on"
        to = _at("/topics", name) if topics.is_topic_name(name) else "/topics"
        return await self._act(
            request, to, lambda: topics.upsert_topic(session.calls, name, queues, perm, order)
        )

    async def topic_delete(self, request: Request, session: Session) -> Response:
        name = request.path_params["name"]
        return await self._act(request, "/topics", lambda: topics.delete_topic(session.calls, name))

    async def topic_send(self, request: Request, session: Session) -> Response:
        name, form = request.path_params["name"], request.state.form
        return await self._act(
            request,
            _at("/topics", name),
            lambda: topics.send_test_message(
                session.calls,
                self.sessions.registry,
                name,
                str(form.get("body", "")),
                str(form.get("tags", "")),
                str(form.get("keys", "")),
            ),
        )

    async def groups_page(self, request: Request, session: Session) -> Response:
        search = request.query_params.get("q", "")
        return await self._show(
            request,
            session,
            "groups.html",
            lambda: {"groups": groups.group_rows(session.calls, search), "q": search},
        )

    async def group_page(self, request: Request, session: Session) -> Response:
        name = request.path_params["name"]
        return await self._show(
            request, session, "group.html", lambda: groups.group_page(session.calls, name)
        )

    async def group_reset(self, request: Request, session: Session) -> Response:
        name, form = request.path_params["name"], request.state.form
        to = str(form.get("to", ""))
        try:
            when = parse_local_time(str(form.get("time", ""))) if to == "time" else None
        except ValueError as exc:
            return self._done(request, _at("/groups", name), f"refused: {exc}")
        topic = str(form.get("topic", ""))
        return await self._act(
            request,
            _at("/groups", name),
            lambda: groups.reset_offset(session.calls, name, topic, to, when),
        )

    async def group_resend(self, request: Request, session: Session) -> Response:
        name, form = request.path_params["name"], request.state.form
        chosen: dict[str, list[int]] = {}
        for item in form.getlist("letter"):
            broker, _, offset = str(item).partition(":")
            if not offset.isdigit():
                return self._done(request, _at("/groups", name), f"refused: bad letter {item!r}")
            chosen.setdefault(broker, []).append(int(offset))
        if not chosen:
            return self._done(request, _at("/groups", name), "refused: choose dead letters first")
        return await self._act(
            request, _at("/groups", name), lambda: groups.resend(session.calls, name, chosen)
        )

    async def group_retry(self, request: Request, session: Session) -> Response:
        name, form = request.path_params["name"], request.state.form
        try:
            times = int(form.get("retry_max_times", ""))
        except ValueError:
            return self._done(request, _at("/groups", name), "refused: retry max times is a number")
        return await self._act(
            request, _at("/groups", name), lambda: groups.update_retry(session.calls, name, times)
        )

    async def messages_page(self, request: Request, session: Session) -> Response:
        q = request.query_params

        def build() -> dict[str, Any]:
            by = q.get("by", "")
            context: dict[str, Any] = {"q": dict(q), "found": None}
            if by == "id":
                context["found"] = messages.with_tracks(
                    session.calls,
                    messages.by_id(session.calls, q.get("id", ""), q.get("topic", "")),
                )
            elif by == "key":
                context["found"] = messages.with_tracks(
                    session.calls,
                    messages.by_key(session.calls, q.get("topic", ""), q.get("key", "")),
                )
            elif by == "time":
                try:
                    begin = parse_local_time(q.get("begin", ""))
                    end = parse_local_time(q.get("end", ""))
                except ValueError as exc:
                    raise ConsoleError(str(exc)) from None
                context["found"] = messages.by_time(
                    session.calls, q.get("topic", ""), begin, end, q.get("group", "")
                )
            elif by:
                raise ConsoleError(f"look up by id, key or time, not {by!r}")
            return context

        return await self._show(request, session, "messages.html", build)

    async def access_page(self, request: Request, session: Session) -> Response:
        if not session.admin:
            return self._render(
                request,
                "error.html",
                {"session": session, "error": "accounts and rights: an admin account only"},
                403,
            )
        return await self._show(
            request, session, "access.html", lambda: access.accounts(session.calls)
        )

    async def account_set(self, request: Request, session: Session) -> Response:
        form = request.state.form
        return await self._act(
            request,
            "/access",
            lambda: access.set_account(
                session.calls,
                str(form.get("access_key", "")),
                str(form.get("secret_key", "")),
                form.get("admin") == "on",
                str(form.get("default_topic_perm", "DENY")),
                str(form.get("default_group_perm", "DENY")),
                str(form.get("topic_perms", "")),
                str(form.get("group_perms", "")),
            ),
        )

    async def account_delete(self, request: Request, session: Session) -> Response:
        key = request.path_params["key"]
        return await self._act(
            request, "/access", lambda: access.delete_account(session.calls, key)
        )


def _at(prefix: str, name: str) -> str:
    return f"{prefix}/{quote(name, safe='')}"


def _csrf(request: Request) -> str:
    token = request.session.get("csrf")
    if not token:
        token = request.session["csrf"] = secrets.token_urlsafe(32)
    return str(token)


def parse_local_time(text: str) -> int:
    """A form's time as epoch ms: ``datetime-local`` (UTC, as the page says), ISO-8601
    with a zone, or epoch ms; ValueError naming what is wrong."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a time (2026-01-01T00:00 UTC, or epoch ms)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


class _Headers:
    """Adds SECURITY_HEADERS to every answer."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)
