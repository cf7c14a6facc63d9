// voxpool console: the pools page's live feed and the market's audition player. Every page
// works without this script (the pools page then refreshes on reload).
"use strict";

function livePools(el) {
  const rows = new Map();
  document.querySelectorAll("tr[data-key]").forEach((tr) => rows.set(tr.dataset.key, tr));
  const pools = new Map();
  document.querySelectorAll("section[data-pool]").forEach((s) => pools.set(s.dataset.pool, s));
  const source = new EventSource(el.dataset.live);
  let updates = 0;
  source.onmessage = (message) => {
    const status = JSON.parse(message.data);
    if (status.error) {
      el.textContent = "Live updates paused: " + status.error;
      el.classList.add("error");
      return;
    }
    el.classList.remove("error");
    updates += 1;
    el.textContent = "Live: updated " + new Date().toLocaleTimeString() + ".";
    el.dataset.updates = String(updates);
    for (const p of status.pools) {
      const section = pools.get(p.pool);
      if (section) {
        for (const f of ["in_flight", "capacity", "waiting"]) {
          const node = section.querySelector('.summary [data-f="' + f + '"]');
          if (node) node.textContent = String(p[f]);
        }
      }
      for (const [key, inFlight, effective, capacity, state, coolingMs] of p.keys) {
        const tr = rows.get(p.pool + "|" + key);
        if (!tr) continue;
        const meter = tr.querySelector("meter");
        meter.max = capacity;
        meter.high = effective;
        meter.value = inFlight;
        tr.querySelector('[data-f="sat"]').textContent = inFlight + " / " + effective + " / " + capacity;
        const cell = tr.querySelector('[data-f="state"]');
        cell.className = "state-" + state.replace(" ", "-");
        cell.dataset.cooling = String(coolingMs);
        cell.textContent = coolingMs > 0 ? "cooling, " + Math.ceil(coolingMs / 1000) + " s left" : state;
      }
    }
  };
  source.onerror = () => {
    el.textContent = "Live updates lost the console; retrying…";
  };
}

document.addEventListener("DOMContentLoaded", () => {
  const live = document.querySelector("[data-live]");
  if (live) livePools(live);
  document.querySelectorAll("form[data-confirm]").forEach((form) => {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  });
});
