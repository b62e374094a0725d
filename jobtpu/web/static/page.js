// jobtpu serve: keeps an open page up to date. Every few seconds it asks /fresh (a 304 while nothing
// changed); when the home changed, it asks for this page's live part again; a log on the page is
// followed from where it ended. Short requests only: eight tabs never hold a connection each.
"use strict";
(function () {
  const every = Number(document.body.dataset.poll || "1") * 1000;
  const fresh = document.getElementById("fresh");
  const live = document.getElementById("live");
  const following = location.pathname !== "/act" && location.pathname !== "/submit";  // a form being written stays
  let tag = null;

  async function freshness() {
    const r = await fetch("/fresh", {cache: "no-store", headers: tag ? {"If-None-Match": tag} : {}});
    if (r.status !== 200) return;
    tag = r.headers.get("ETag");
    const d = await r.json();
    fresh.textContent = d.line;
    fresh.className = d.stale ? "stale" : "fresh";
    if (following && String(d.gen) !== live.dataset.gen) await redraw(d.gen);
  }

  async function redraw(gen) {
    const typing = document.activeElement;
    if (typing && live.contains(typing) && /^(INPUT|SELECT|TEXTAREA)$/.test(typing.tagName) && typing.type !== "checkbox") {
      return;  // not under the cursor of someone writing a note: the next poll redraws
    }
    const r = await fetch(location.pathname + location.search,
      {cache: "no-store", headers: {"X-Jobtpu-Part": "1", "If-None-Match": '"' + live.dataset.gen + '"'}});
    if (r.status !== 200) return;
    const ticked = new Set(Array.from(live.querySelectorAll("input[name=id]:checked"), (b) => b.value));
    const typed = Array.from(live.querySelectorAll("input[type=text]"), (t) => t.value);
    const html = await r.text();
    live.innerHTML = html;  // the server's escaped HTML: no script in it runs (and the CSP allows none)
    live.dataset.gen = String(gen);
    live.querySelectorAll("input[name=id]").forEach((b) => { b.checked = ticked.has(b.value); });
    live.querySelectorAll("input[type=text]").forEach((t, i) => { if (typed[i]) t.value = typed[i]; });
    document.dispatchEvent(new Event("jobtpu:redrawn"));  // charts.js draws the new part's charts
  }

  async function logs() {
    for (const pre of document.querySelectorAll("pre.log")) {
      const r = await fetch(pre.dataset.url + "&from=" + pre.dataset.end, {cache: "no-store"});
      if (r.status !== 200) continue;
      const d = await r.json();
      if (d.text) {
        const bottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        pre.append(document.createTextNode(d.text));
        if (bottom) pre.scrollTop = pre.scrollHeight;
      }
      pre.dataset.end = String(d.end);
    }
  }

  document.addEventListener("click", async (e) => {
    const older = e.target.closest("button.older");
    if (older) {
      const r = await fetch(older.dataset.url + "&before=" + older.dataset.before, {cache: "no-store"});
      if (r.status !== 200) return;
      const d = await r.json();
      const pre = older.nextElementSibling;
      pre.prepend(document.createTextNode(d.text));
      older.dataset.before = String(d.start);
      if (d.start === 0) older.remove();
    }
  });
  document.addEventListener("change", (e) => {
    if (e.target.id === "whole-view") {
      document.querySelectorAll("input.selector").forEach((s) => { s.disabled = !e.target.checked; });
    }
  });

  async function tick() {
    try {
      await freshness();
      if (following) await logs();
    } catch (err) {
      fresh.className = "stale";
    }
    setTimeout(tick, every);
  }
  setTimeout(tick, every);
})();
