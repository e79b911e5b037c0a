// Live updates for the recent-calls page: the server pushes the store's newest position over SSE
// (/events); on a change the table (and, at most every few seconds, the charts) is fetched again as
// server-rendered HTML. Nothing else runs here.
"use strict";
(function () {
  const body = document.body;
  if (body.dataset.live !== "1" || !window.EventSource) return;
  const base = body.dataset.base || "";
  const status = document.getElementById("live-status");
  let head = Number(body.dataset.head || "0");
  let busy = false, again = false, chartsAt = Date.now();
  const CHARTS_EVERY_MS = 5000;

  function say(text, live) {
    if (!status) return;
    status.textContent = text;
    status.classList.toggle("live", live);
  }

  async function fetchInto(path, id) {
    const response = await fetch(base + path + window.location.search, { credentials: "same-origin" });
    if (!response.ok) throw new Error(response.status === 401 ? "signed out" : "HTTP " + response.status);
    const target = document.getElementById(id);
    if (target) target.innerHTML = await response.text();
  }

  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const before = new Set(Array.from(document.querySelectorAll("tr.call")).map((row) => row.dataset.key));
      await fetchInto("/fragment/calls", "calls");
      document.querySelectorAll("tr.call").forEach((row) => {
        if (!before.has(row.dataset.key)) row.classList.add("fresh");
      });
      if (Date.now() - chartsAt > CHARTS_EVERY_MS) {
        chartsAt = Date.now();
        await fetchInto("/fragment/charts", "charts");
      }
      say("live: updated " + new Date().toLocaleTimeString(), true);
    } catch (error) {
      say("live: " + error.message, false);
    } finally {
      busy = false;
      if (again) { again = false; refresh(); }
    }
  }

  const events = new EventSource(base + "/events");
  events.addEventListener("open", () => say("live", true));
  events.addEventListener("error", () => say("live: reconnecting…", false));
  events.addEventListener("problem", (event) => say("live: " + event.data, false));
  events.addEventListener("head", (event) => {
    const next = Number(event.data);
    if (next !== head) { head = next; refresh(); }
  });
})();
