"""The Starlette application of `jobtpu serve` (docs/reference/commands.md §2.29).

Every request passes `Guard` first (gate.py): a loopback Host (or the --bind address), then the
person's cookie (only /login takes the secret itself, once, from the printed link), and for a POST a
same-origin Origin and a Content-Length within the cap; the form's CSRF token is checked where the
form is read. Every answer carries a
Content-Security-Policy that allows this server's own script and style files only. Pages render
from templates with autoescaping on; no template is chosen or built from request data.

Live updates: each page asks `/fresh` every `serve_poll` seconds with If-None-Match (a 304 while
nothing changed: short requests, so eight tabs never hold the six connections a browser allows one
host); when the watcher's generation moved, it asks for its page's part again."""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import jinja2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from jobtpu import timing
from jobtpu.errors import JobtpuError, NotFoundError, UsageError
from jobtpu.web import acts, guard, pages
from jobtpu.web.gate import MAX_FORM, Config, Guard

HERE = Path(__file__).resolve().parent


class Site:
    """The pages and endpoints of one server, each a method: the home's watcher, the templates and
    the form token they share."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.watcher = pages.Watcher(config.home)
        self.watcher.look()
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                                      undefined=jinja2.StrictUndefined)
        self.env.filters["shown"] = _shown
        self.env.filters["clock"] = _clock
        self.env.filters["blank"] = _blank
        self.csrf = guard.csrf_token(config.secret)
        self.poll = timing.current().serve_poll
        self._made: dict[str, tuple[tuple[int, float, str], Any]] = {}  # once_per_change's

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_watch, self.watcher)
            yield
            tasks.cancel_scope.cancel()

    async def in_thread(self, work: Callable[[], Any]) -> Any:
        """Reading the home (and acting) off the event loop: a slow read or an act waiting for a
        running pass never holds up another page."""
        from jobtpu.home.actor import Actor, acting_for

        def as_user() -> Any:
            with acting_for(Actor(os.getuid(), self.config.account, self.config.user)):
                return work()
        return await anyio.to_thread.run_sync(as_user)

    def fresh_line(self) -> tuple[str, bool]:
        """status's freshness line, or what is wrong with state.json (red)."""
        from jobtpu.commands.common import error_text
        from jobtpu.commands.freshness import freshness

        try:
            return freshness(self.watcher.state().last_pass)
        except JobtpuError as e:
            return error_text(e).replace("\n", " "), True

    def render(self, request: Request, name: str, title: str, **values: Any) -> Response:
        line, stale = self.fresh_line()
        from jobtpu.home.settings import viewer_settings, viewer_zone

        values = {"zone": viewer_zone(viewer_settings(self.config.home)), "title": title, "user": self.config.user, "account": self.config.account, "fresh": line, "stale": stale,
                  "csrf": self.csrf, "read_only": self.config.read_only, "poll": self.poll, "gen": self.watcher.generation, **values}
        part = request.headers.get("x-jobtpu-part") == "1"
        template = self.env.get_template(name)
        if part:  # the page's live part alone, which the script puts in place of the old one
            return HTMLResponse("".join(template.blocks["live"](template.new_context(values))))
        return HTMLResponse(template.render(**values), headers={"etag": f'"{self.watcher.generation}"'})

    def page(self, handler: Callable[[Request], Response]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if request.headers.get("x-jobtpu-part") == "1" and \
                    request.headers.get("if-none-match") == f'"{self.watcher.generation}"':
                return Response(status_code=304, headers={"etag": f'"{self.watcher.generation}"'})
            try:
                # A page looks at the home's files itself too: just after a pass's save it shows
                # the save, without waiting for the watcher's next look.
                response: Response = await self.in_thread(lambda: (self.watcher.look(), handler(request))[1])
            except JobtpuError as e:
                return self.error_page(request, e)
            response.headers["etag"] = f'"{self.watcher.generation}"'
            return response
        return endpoint

    def error_page(self, request: Request, e: JobtpuError) -> Response:
        line, stale = self.fresh_line()
        html = self.env.get_template("error.html").render(
            title="error", user=self.config.user, account=self.config.account, fresh=line, stale=stale, csrf=self.csrf,
            read_only=self.config.read_only, poll=self.poll, gen=self.watcher.generation, message=e.message, hint=e.hint or "")
        return HTMLResponse(html, status_code=400 if isinstance(e, UsageError) else 404 if isinstance(e, NotFoundError)
                            else 503)  # the home cannot be read as it is: a state.json broken by hand

    def jobs(self, request: Request) -> Response:
        from jobtpu.commands.status import viewer_name
        from jobtpu.commands.values import selection

        q = request.query_params
        sel = selection(q.getlist("id"), q.getlist("tag"), q.getlist("name"), q.getlist("status"),
                        [_number(s, "sweep") for s in q.getlist("sweep")], q.get("user") or None,
                        q.get("all_users") == "1", q.get("history") == "1")
        view = pages.jobs_page(self.config.home, self.watcher.state(), sel, q.get("all") == "1",
                               _number(q.get("page", "1"), "page"), viewer_name())
        selectors = [("sel_tag", v) for v in sel.tags] + [("sel_name", v) for v in sel.names] + \
            [("sel_status", v) for v in sel.statuses] + [("sel_sweep", str(v)) for v in sel.sweeps] + \
            ([("sel_user", sel.user)] if sel.user else []) + ([("sel_all_users", "1")] if sel.all_users else [])
        links = {"prev": _with(q, page=str(view.page - 1)), "next": _with(q, page=str(view.page + 1))}
        from jobtpu.home.settings import viewer_settings, viewer_zone
        from jobtpu.web import chart_pages

        zone = viewer_zone(viewer_settings(self.config.home))
        summary = self.summary(zone)
        sweep = chart_pages.sweep_chart(self.config.home, [j for j in self.watcher.state().jobs if j.sweep in sel.sweeps],
                                        q.get("metric")) if len(sel.sweeps) == 1 else (None, [], "")
        return self.render(request, "jobs.html", "jobs", view=view, selectors=selectors, query=q, links=links,
                           filtered=bool(sel.given), summary=summary, sweep=sweep)

    def once_per_change(self, what: str, zone: Any, make: Callable[[], Any]) -> Any:
        """`make()` once per generation of the home (and day, and time zone), shared by every tab: a
        page asked again while nothing changed walks no job, and the charts read no event log."""
        from jobtpu.web.charts import day_start

        key = (self.watcher.generation, day_start(time.time(), zone), str(zone))
        held = self._made.get(what)
        if held is None or held[0] != key:
            held = self._made[what] = (key, make())
        return held[1]

    def summary(self, zone: Any) -> Any:
        from jobtpu.web import chart_pages

        return self.once_per_change("summary", zone, lambda: chart_pages.summary(
            self.config.home, self.watcher.state(), zone, time.time()))

    def charts(self, request: Request) -> Response:
        from jobtpu.home.settings import viewer_settings, viewer_zone
        from jobtpu.web.chart_pages import overview_charts

        zone = viewer_zone(viewer_settings(self.config.home))
        made = self.once_per_change("charts", zone, lambda: overview_charts(self.config.home, self.watcher.state(), zone))
        return self.render(request, "charts.html", "charts", charts=made)

    def job(self, request: Request) -> Response:
        job_id = _number(request.path_params["id"], "job id")
        view = pages.job_page(self.config.home, self.watcher.state(), job_id)
        return self.render(request, "job.html", f"job {job_id}", view=view)

    def machines(self, request: Request) -> Response:
        return self.render(request, "machines.html", "machines", view=pages.machines_page(self.config.home, self.watcher.state()))

    def events(self, request: Request) -> Response:
        from jobtpu.decide.events import parse_since

        q = request.query_params
        since = q.get("since") or None
        job_id = _number(q["job"], "job") if q.get("job") else None
        try:
            since_at = parse_since(since) if since else None
        except ValueError as e:
            raise UsageError(f"since: {e}", hint="a duration ago (10m, 2h, 1d) or an ISO time (2026-01-31T12:00)") from None
        lines, older = pages.events_page(self.config.home, job_id, q.get("machine") or None, since_at)
        return self.render(request, "events.html", "events", lines=lines, older=older, query=q)

    def submit(self, request: Request) -> Response:
        from jobtpu.web.submit_form import form_defaults

        if self.config.read_only:
            raise UsageError("this server shows the home read-only (--read-only)", hint="submit with `jobtpu submit`")
        form = form_defaults(self.config.home, self.config.user, request.query_params.get("dir", "").strip())
        return self.render(request, "submit.html", "submit", form=form)

    async def fresh(self, request: Request) -> Response:
        """The freshness line and the generation: what every open page asks for each poll."""
        line, stale = await anyio.to_thread.run_sync(self.fresh_line) if self.watcher.stale_cache else self.fresh_line()
        tag = '"' + hashlib.sha256(f"{self.watcher.generation}|{line}".encode()).hexdigest()[:16] + '"'
        if request.headers.get("if-none-match") == tag:
            return Response(status_code=304, headers={"etag": tag})
        return JSONResponse({"line": line, "stale": stale, "gen": self.watcher.generation}, headers={"etag": tag})

    async def log(self, request: Request) -> Response:
        """A worker's log past `from` (following), or the LOG_TAIL bytes before `before` (older parts):
        by job, attempt and worker number, never a path."""
        from jobtpu.render.text import printable_lines

        q = request.query_params
        try:
            job_id = _number(request.path_params["id"], "job id")
            attempt, worker = _number(q.get("attempt", ""), "attempt"), _number(q.get("worker", "0"), "worker")
            before = _number(q["before"], "before") if "before" in q else None
            after = _number(q.get("from", "0"), "from")
        except JobtpuError as e:
            return PlainTextResponse(f"jobtpu: error: {e.message}\n", status_code=400)
        if before is not None:
            got = await anyio.to_thread.run_sync(lambda: pages.log_tail(self.config.home, job_id, attempt, worker, before))
            return JSONResponse({"text": printable_lines(got.text), "start": got.start})
        text, end = await anyio.to_thread.run_sync(lambda: pages.log_since(self.config.home, job_id, attempt, worker, after))
        return JSONResponse({"text": printable_lines(text), "end": end})

    async def act(self, request: Request) -> Response:
        if self.config.read_only:
            return PlainTextResponse("refused: this server shows the home read-only (--read-only)\n", status_code=403)
        body = await request.body()
        if len(body) > MAX_FORM:
            return PlainTextResponse("refused: the form is too large\n", status_code=413)
        form = urllib.parse.parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        if not guard.same_secret(next(iter(form.get("csrf") or []), None), self.csrf):
            return PlainTextResponse("refused: the form's token is missing or wrong (reload the page)\n", status_code=403)
        try:
            words = acts.act_words(form)
        except JobtpuError as e:
            return self.error_page(request, e)
        fields = [(k, v) for k, values in form.items() if k not in ("csrf", "confirm") for v in values]
        from jobtpu.web import fleet_acts

        # a machine's name goes after "--" only to stay a name; the other acts show their words whole
        shown = fleet_acts.shown_words(words) if fleet_acts.is_machine_act(words) else " ".join(words)
        if (form.get("confirm") or [""])[0] != "1":
            dry = acts.preview_words(words)
            code, lines = (await self.in_thread(lambda: acts.run(self.config.home, dry, self.config.user))) if dry else \
                (await self.in_thread(lambda: fleet_acts.preview(self.config.home, words))) \
                if fleet_acts.is_machine_act(words) else (0, ["would run: jobtpu " + shown])
            return await self.in_thread(lambda: self.render(request, "confirm.html", "confirm", words=shown,
                                                  lines=lines, code=code, fields=fields,
                                                  forced="--force" in words))
        code, lines = await self.in_thread(lambda: acts.run(self.config.home, words, self.config.user))
        return await self.in_thread(lambda: self.render(request, "done.html", "done", words=shown, lines=lines,
                                              code=code, back=request.headers.get("referer") or "/"))

    async def login(self, request: Request) -> Response:
        if not guard.same_secret(request.query_params.get("k"), self.config.secret):
            return PlainTextResponse("not logged in: open the link `jobtpu serve` printed\n", status_code=401)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(self.config.cookie, self.config.secret, httponly=True, samesite="strict", path="/")
        return response

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        kinds = {"page.js": "text/javascript", "page.css": "text/css", "charts.js": "text/javascript",
                 "uplot.min.js": "text/javascript", "uplot.min.css": "text/css"}
        if name not in kinds:  # a fixed list: no path from the request reaches the file system
            return PlainTextResponse("not found\n", status_code=404)
        return Response((HERE / "static" / name).read_bytes(), media_type=kinds[name])

    async def metrics(self, request: Request) -> Response:
        from jobtpu.commands.metrics import metrics_text

        try:
            text = await self.in_thread(lambda: metrics_text(self.config.home, self.watcher.state()))
        except JobtpuError as e:
            return PlainTextResponse(f"jobtpu: error: {e.message}\n", status_code=503)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


def make_app(config: Config) -> Starlette:
    site = Site(config)
    routes = [Route("/", site.page(site.jobs)), Route("/job/{id}", site.page(site.job)),
              Route("/machines", site.page(site.machines)),
              Route("/charts", site.page(site.charts)), Route("/submit", site.page(site.submit)), Route("/events", site.page(site.events)),
              Route("/fresh", site.fresh), Route("/job/{id}/log", site.log),
              Route("/act", site.act, methods=["POST"]), Route("/login", site.login),
              Route("/static/{name}", site.static), Route("/metrics", site.metrics)]
    app = Starlette(routes=routes, lifespan=site.lifespan)
    app.add_middleware(Guard, config=config)
    return app


async def _watch(watcher: pages.Watcher) -> None:
    """The server's one watcher of the home's files."""
    every = timing.current().serve_watch
    while True:
        if watcher.look():  # a few stats: cheaper here than a thread's hop (an idle server stays idle)
            with contextlib.suppress(JobtpuError, OSError):  # a broken state.json: each page says so
                await anyio.to_thread.run_sync(watcher.state)  # read once here, not by the first page asking
        await anyio.sleep(every)


def _number(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{what}: {text[:40]!r} is not a whole number", hint="fix the address") from None
    if value < 0:
        raise UsageError(f"{what}: {value} is below 0", hint="fix the address")
    return value


def _with(query: Any, **changes: str) -> str:
    items = [(k, v) for k, v in query.multi_items() if k not in changes]
    return "?" + urllib.parse.urlencode([*items, *changes.items()])


@jinja2.pass_context
def _clock(context: Any, seconds: float | None) -> str:
    """A time as the viewer's `time_zone` reads it (the terminal views' clock)."""
    from jobtpu.render.text import clock

    return "" if seconds is None else clock(float(seconds), context.get("zone"))


def _blank(value: object, instead: str = "") -> object:
    """A value the record has not got yet (a running attempt's exit code) as `instead`, never `None`."""
    return instead if value is None else value


def _shown(text: object) -> str:
    """Text from the home as the terminal would show it: control characters (ANSI) as their escapes."""
    from jobtpu.render.text import printable_lines

    return printable_lines(str(text if text is not None else ""))

