// The Numaplane dashboard: a table of every rollout and a page per rollout, both fed by
// server-sent events that the server pushes from its watches. No polling, no page reload.
"use strict";

const main = document.getElementById("main");
const live = document.getElementById("live");
const notesBox = document.getElementById("notes");
const scopeBox = document.getElementById("scope");

// Every open stream; closed when the view changes.
let stream = null;
// The table's rows by key, its filter and sort.
const rows = new Map();
const table = { filter: "", sort: "namespace", desc: false };
let info = null;

// This run's token, from the address the dashboard printed (`/?token=...`): every API call sends
// it, as a header where the browser allows one and in the query for event streams.
const token = new URLSearchParams(location.search).get("token") || "";
const auth = { Authorization: `Bearer ${token}` };
function withToken(url) {
  return `${url}${url.includes("?") ? "&" : "?"}token=${encodeURIComponent(token)}`;
}

// The page cannot work without the token, or with the token of another run: say so, and stop.
function refused(why) {
  if (stream) { stream.close(); stream = null; }
  live.textContent = "refused";
  live.className = "live off";
  main.replaceChildren();
  const p = document.createElement("p");
  p.className = "error";
  p.id = "no-token";
  p.textContent = `${why} Open the address that \`kubectl numaplane dashboard\` printed, with its ?token=.`;
  main.append(p);
}

function esc(v) {
  return String(v ?? "").replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
  })[c]);
}

// "3m 20s" style durations; the server's clock and the browser's are assumed close.
function duration(secs) {
  secs = Math.max(0, Math.floor(secs));
  const d = Math.floor(secs / 86400), h = Math.floor(secs / 3600) % 24;
  const m = Math.floor(secs / 60) % 60, s = secs % 60;
  if (d) return `${d}d${h}h`;
  if (h) return `${h}h${m}m`;
  if (m) return `${m}m${s}s`;
  return `${s}s`;
}

function age(ts) {
  if (!ts) return "";
  return duration((Date.now() - Date.parse(ts)) / 1000);
}

// A countdown element: ticks every second (see tick()).
function countdown(until, id) {
  if (!until) return "";
  const attr = id ? ` id="${id}"` : "";
  return `<span class="countdown"${attr} data-until="${esc(until)}">${esc(left(until))}</span>`;
}

function left(until) {
  const secs = (Date.parse(until) - Date.now()) / 1000;
  return secs > 0 ? `${duration(secs)} left` : "due now";
}

function tick() {
  for (const el of document.querySelectorAll(".countdown")) {
    const secs = Math.max(0, Math.floor((Date.parse(el.dataset.until) - Date.now()) / 1000));
    el.dataset.seconds = String(secs);
    el.textContent = left(el.dataset.until);
  }
  for (const el of document.querySelectorAll("[data-created]")) {
    el.textContent = age(el.dataset.created);
  }
}
setInterval(tick, 1000);

function follow(url, handlers) {
  if (stream) stream.close();
  stream = new EventSource(withToken(url));
  stream.onopen = () => { live.textContent = "live"; live.className = "live on"; };
  stream.onerror = async () => {
    live.textContent = "reconnecting…";
    live.className = "live off";
    // An event stream does not tell why it failed: ask whether the token is the reason.
    const resp = await fetch("/api/info", { headers: auth }).catch(() => null);
    if (resp && resp.status === 401) refused("This dashboard refused the token (it changes every run).");
  };
  for (const [name, fn] of Object.entries(handlers)) {
    stream.addEventListener(name, (e) => fn(JSON.parse(e.data)));
  }
}

function showNotes(list) {
  notesBox.innerHTML = (list || []).map((n) => `<div class="note">${esc(n)}</div>`).join("");
}

// ---- the table ------------------------------------------------------------------------------

const COLUMNS = [
  ["kind", "Kind"], ["namespace", "Namespace"], ["name", "Name"], ["phase", "Phase"],
  ["strategy", "In progress"], ["waiting", "Waiting for"], ["until", "Until"], ["created", "Age"],
];

function kindArg(kind) { return kind.toLowerCase(); }

function rolloutHref(r) {
  return `#/rollout/${kindArg(r.kind)}/${encodeURIComponent(r.namespace)}/${encodeURIComponent(r.name)}`;
}

function showTable() {
  main.innerHTML = `
    <div class="toolbar">
      <input id="filter" type="search" placeholder="filter: name, namespace, kind, phase…" value="${esc(table.filter)}">
      <span id="count"></span>
    </div>
    <table id="rollouts" class="grid">
      <thead><tr>${COLUMNS.map(([k, t]) => `<th data-sort="${k}">${t}</th>`).join("")}</tr></thead>
      <tbody></tbody>
    </table>`;
  const filter = document.getElementById("filter");
  filter.addEventListener("input", () => { table.filter = filter.value; drawRows(); });
  for (const th of main.querySelectorAll("th[data-sort]")) {
    th.addEventListener("click", () => {
      const k = th.dataset.sort;
      table.desc = table.sort === k ? !table.desc : false;
      table.sort = k;
      drawRows();
    });
  }
  follow("/api/rollouts/stream", {
    rows: (msg) => {
      rows.clear();
      for (const r of msg.rows) rows.set(r.key, r);
      info = msg.info;
      scopeBox.textContent = info ? `rollouts of ${info.scope}` : "";
      showNotes(info && info.notes);
      drawRows();
    },
    upsert: (r) => { rows.set(r.key, r); drawSoon(); },
    remove: (m) => { rows.delete(m.key); drawSoon(); },
  });
  drawRows();
}

let pending = false;
function drawSoon() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => { pending = false; drawRows(); });
}

function drawRows() {
  const body = main.querySelector("#rollouts tbody");
  if (!body) return;
  const words = table.filter.toLowerCase().split(/\s+/).filter(Boolean);
  const shown = [...rows.values()].filter((r) => {
    const text = `${r.kind} ${r.namespace} ${r.name} ${r.phase} ${r.strategy} ${r.waiting}`.toLowerCase();
    return words.every((w) => text.includes(w));
  });
  const k = table.sort;
  shown.sort((a, b) => {
    // Age sorts newest first when ascending, like kubectl.
    const x = k === "created" ? b[k] || "" : a[k] || "";
    const y = k === "created" ? a[k] || "" : b[k] || "";
    const c = x.localeCompare(y) || a.key.localeCompare(b.key);
    return table.desc ? -c : c;
  });
  for (const th of main.querySelectorAll("th[data-sort]")) {
    th.className = th.dataset.sort === k ? (table.desc ? "sorted desc" : "sorted") : "";
  }
  body.innerHTML = shown.map((r) => `
    <tr data-key="${esc(r.key)}" class="phase-${esc(r.phase)}">
      <td>${esc(r.kind)}</td>
      <td>${esc(r.namespace)}</td>
      <td><a href="${rolloutHref(r)}">${esc(r.name)}</a></td>
      <td><span class="badge ${esc(r.phase)}">${esc(r.phase || "–")}</span>${r.healthy === "False" ? ' <span class="badge Failed">unhealthy</span>' : ""}</td>
      <td>${esc(r.strategy)}</td>
      <td class="waiting">${esc(r.waiting)}</td>
      <td>${countdown(r.until)}</td>
      <td data-created="${esc(r.created)}">${esc(age(r.created))}</td>
    </tr>`).join("");
  const count = document.getElementById("count");
  if (count) {
    const syncing = info && !info.synced ? " (loading…)" : "";
    count.textContent = `${shown.length} of ${rows.size} rollouts${syncing}`;
  }
}

// ---- one rollout ----------------------------------------------------------------------------

const ACTIONS = {
  promote: { label: "Promote", kinds: ["PipelineRollout", "MonoVertexRollout", "ISBServiceRollout"], trial: true,
             ask: "Force-promote the trial now, even if its assessment failed?" },
  abort: { label: "Abort", kinds: ["PipelineRollout", "MonoVertexRollout", "ISBServiceRollout"], trial: true,
           ask: "Abort the progressive upgrade now? The trial fails and the promoted child gets its scale back." },
  pause: { label: "Pause", kinds: ["PipelineRollout", "MonoVertexRollout"],
           ask: "Pause the rollout's child (desiredPhase: Paused)?" },
  resume: { label: "Resume", kinds: ["PipelineRollout", "MonoVertexRollout"],
            ask: "Resume the rollout's child (desiredPhase: Running)?" },
  "allow-data-loss": { label: "Allow data loss", kinds: ["PipelineRollout"],
                       ask: "Let pause-and-drain proceed without waiting for the pipeline to pause? Data in flight may be lost." },
};

function showRollout(kind, ns, name) {
  main.innerHTML = `<p class="muted">Loading ${esc(ns)}/${esc(name)}…</p>`;
  scopeBox.textContent = "";
  showNotes([]);
  const base = `/api/rollouts/${encodeURIComponent(kind)}/${encodeURIComponent(ns)}/${encodeURIComponent(name)}`;
  follow(`${base}/stream`, {
    detail: (d) => drawRollout(base, d),
    failure: (f) => {
      main.innerHTML = `<p><a href="#/">← all rollouts</a></p><div class="error" id="failure" data-status="${f.status}">${esc(f.message)}</div>`;
    },
  });
}

function conditionsTable(conds) {
  if (!conds.length) return '<p class="muted">No conditions yet.</p>';
  return `<table class="grid small"><thead><tr><th>Type</th><th>Status</th><th>Reason</th><th>Message</th></tr></thead><tbody>${
    conds.map((c) => `<tr><td>${esc(c.type)}</td><td><span class="badge cond-${esc(c.status)}">${esc(c.status)}</span></td><td>${esc(c.reason)}</td><td>${esc(c.message)}</td></tr>`).join("")
  }</tbody></table>`;
}

function childBlock(c) {
  const pods = c.pods ? `<span class="pods" data-ready="${c.pods.ready}" data-desired="${c.pods.desired}">${c.pods.ready}/${c.pods.desired} pods ready</span>` : "";
  const state = c.upgradeState ? `<span class="badge state-${esc(c.upgradeState)}">${esc(c.upgradeState)}</span>` : "";
  const result = c.progressiveResult ? `<span class="badge result-${esc(c.progressiveResult)}">${esc(c.progressiveResult)}</span>` : "";
  let drain = "";
  if (c.pause && (c.pause.desiredPhase !== "Running" || c.pause.phase === "Pausing" || c.pause.phase === "Paused" || c.pause.drainedOnPause !== undefined)) {
    const drained = c.pause.drainedOnPause === undefined ? "" : c.pause.drainedOnPause ? ", drained" : ", not drained yet";
    const what = (c.upgradeState || "").startsWith("recyclable") ? "draining" : "pause";
    drain = `<div class="drain">${what}: desired ${esc(c.pause.desiredPhase)}, now ${esc(c.pause.phase)}${drained}</div>`;
  }
  const unhealthy = c.unhealthyConditions.length
    ? `<ul class="problems">${c.unhealthyConditions.map((u) => `<li>${esc(u)}</li>`).join("")}</ul>` : "";
  const runs = c.analysisRuns.length
    ? `<div class="runs">${c.analysisRuns.map((r) => `AnalysisRun ${esc(r.name)}: <b>${esc(r.phase)}</b>`).join("<br>")}</div>` : "";
  return `<li class="child" data-name="${esc(c.name)}" data-state="${esc(c.upgradeState || "")}">
      <div><b>${esc(c.kind)}/${esc(c.name)}</b> ${state} ${result}
        <span class="badge ${esc(c.phase)}">${esc(c.phase || "–")}</span>
        <span class="badge health-${esc(c.health)}">${esc(c.health)}</span> ${pods}
        <span class="muted">${esc(c.age || "")}</span></div>
      ${drain}${unhealthy}${runs}
    </li>`;
}

function runsBlock(runs) {
  if (!runs.length) return "";
  return `<section><h2>Analysis</h2>${runs.map((r) => `
    <div class="run" data-name="${esc(r.name)}"><h3>AnalysisRun ${esc(r.name)} <span class="muted">(of ${esc(r.child)})</span>
      <span class="badge ${esc(r.phase)}">${esc(r.phase || "Pending")}</span></h3>
      ${r.message ? `<p>${esc(r.message)}</p>` : ""}
      <table class="grid small"><thead><tr><th>Metric</th><th>Phase</th><th>Count</th><th>Successful</th><th>Failed</th><th>Last measurements (oldest first)</th></tr></thead><tbody>
      ${r.metrics.map((m) => `<tr class="metric" data-name="${esc(m.name)}"><td>${esc(m.name)}</td><td>${esc(m.phase)}</td><td>${m.count}</td><td>${m.successful}</td><td>${m.failed}</td>
        <td>${m.measurements.map((x) => `<span class="measure ${esc(x.phase)}" title="${esc(x.finishedAt)}">${esc(x.value || x.phase)}</span>`).join(" ")}</td></tr>`).join("")}
      </tbody></table></div>`).join("")}</section>`;
}

function eventsBlock(events) {
  if (!events.length) return '<section><h2>Events</h2><p class="muted">No Events.</p></section>';
  return `<section><h2>Events</h2><table class="grid small" id="events"><thead><tr><th>Age</th><th>Type</th><th>Reason</th><th>Object</th><th>Message</th></tr></thead><tbody>${
    events.map((e) => `<tr class="event-${esc(e.type)}"><td data-created="${esc(e.time)}">${esc(age(e.time))}</td><td>${esc(e.type)}</td><td>${esc(e.reason)}</td><td>${esc(e.object)}</td><td>${esc(e.note)}${e.count > 1 ? ` <span class="muted">×${e.count}</span>` : ""}</td></tr>`).join("")
  }</tbody></table></section>`;
}

function historyBlock(history) {
  if (!history || !history.length) return '<section><h2>History</h2><p class="muted">No upgrade recorded yet.</p></section>';
  return `<section><h2>History</h2><table class="grid small" id="history"><thead><tr><th>#</th><th>Child</th><th>Strategy</th><th>Started</th><th>Took</th><th>Outcome</th><th>Why</th><th>Changed fields</th></tr></thead><tbody>${
    history.map((h, i) => {
      const took = h.endTime ? duration((Date.parse(h.endTime) - Date.parse(h.startTime)) / 1000) : "running";
      return `<tr data-outcome="${esc(h.outcome || "")}"><td>${i + 1}</td><td>${esc(h.child)}${h.previousChild ? ` <span class="muted">(after ${esc(h.previousChild)})</span>` : ""}</td>
        <td>${esc(h.strategy || "direct")}</td><td data-created="${esc(h.startTime)}">${esc(age(h.startTime))}</td><td>${esc(took)}</td>
        <td><span class="badge outcome-${esc(h.outcome || "")}">${esc(h.outcome || "in progress")}</span></td>
        <td>${(h.reasons || []).map(esc).join("<br>")}</td><td>${(h.changedFields || []).map(esc).join("<br>")}</td></tr>`;
    }).join("")
  }</tbody></table></section>`;
}

function drawRollout(base, d) {
  const r = d.rollout;
  const trial = r.trial;
  const result = document.getElementById("action-result");
  const keep = result ? result.outerHTML : '<div id="action-result"></div>';
  const actions = Object.entries(ACTIONS)
    .filter(([, a]) => a.kinds.includes(r.kind))
    .map(([name, a]) => {
      const disabled = a.trial && !trial ? " disabled title=\"no progressive upgrade in progress\"" : "";
      return `<button class="action" data-action="${name}"${disabled}>${esc(a.label)}</button>`;
    }).join(" ");
  const trialBox = trial ? `
    <section class="trial" id="trial"><h2>Progressive upgrade: trial ${esc(trial.name)}</h2>
      <p>Assessment: <b id="assessment-result">${esc(trial.assessmentResult || "Unknown")}</b>
      ${trial.analysisPhase ? ` · analysis <b>${esc(trial.analysisPhase)}</b>` : ""}
      ${d.until && r.upgradeInProgress === "Progressive" ? ` · waiting at most until ${esc(d.until)}: ${countdown(d.until, "countdown")}` : ""}
      ${trial.basicAssessmentEndTime ? ` · assessment ended ${esc(trial.basicAssessmentEndTime)}` : ""}</p>
      ${trial.failureReasons.length ? `<ul class="problems">${trial.failureReasons.map((f) => `<li>${esc(f)}</li>`).join("")}</ul>` : ""}
    </section>` : "";
  main.innerHTML = `
    <p><a href="#/">← all rollouts</a></p>
    <h1>${esc(r.kind)} <span class="muted">${esc(r.namespace)}/</span>${esc(r.name)}</h1>
    <div class="summary">
      <span class="badge ${esc(r.phase)}" id="phase">${esc(r.phase || "–")}</span>
      ${r.upgradeInProgress ? `<span class="badge strategy" id="strategy">${esc(r.upgradeInProgress)}</span>` : ""}
      ${r.summary.map((s) => `<span class="badge">${esc(s)}</span>`).join(" ")}
      <span class="muted">generation ${r.generation}, observed ${r.observedGeneration}</span>
      ${r.allowDataLoss ? '<span class="badge Failed">allow-data-loss</span>' : ""}
    </div>
    ${d.waiting ? `<p class="waiting" id="waiting">Waiting for: ${esc(d.waiting)}${d.until ? ` (until ${countdown(d.until)})` : ""}</p>` : ""}
    ${r.lastUpgrade ? `<p class="muted">Last upgrade: ${esc(r.lastUpgrade)}</p>` : ""}
    <div class="actions">${actions}</div>
    ${keep}
    ${trialBox}
    <section><h2>Children</h2>${r.children.length ? `<ul class="tree" id="children">${r.children.map(childBlock).join("")}</ul>` : '<p class="muted">No children.</p>'}</section>
    ${r.riders.length ? `<section><h2>Riders</h2><ul id="riders">${r.riders.map((x) => `<li>${esc(x.kind)}/${esc(x.name)}</li>`).join("")}</ul></section>` : ""}
    ${runsBlock(d.analysisRuns)}
    <section><h2>Conditions</h2>${conditionsTable(r.conditions)}</section>
    ${eventsBlock(d.events)}
    ${historyBlock(d.history)}`;
  showNotes(d.notes);
  for (const b of main.querySelectorAll("button.action")) {
    b.addEventListener("click", () => ask(base, r, b.dataset.action));
  }
}

let asking = null;
function ask(base, r, action) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent =
    `${ACTIONS[action].ask}\n\n${r.kind} ${r.namespace}/${r.name}`;
  asking = { base, action };
  // A dialog closed without a button (Escape) may keep its last value: never an old "yes".
  dialog.returnValue = "";
  dialog.showModal();
}

document.getElementById("confirm").addEventListener("close", async () => {
  const dialog = document.getElementById("confirm");
  const todo = asking;
  asking = null;
  if (!todo || dialog.returnValue !== "yes") return;
  const out = document.getElementById("action-result");
  if (out) { out.className = "pending"; out.textContent = `${todo.action}: sending…`; }
  let status = 0, message = "";
  try {
    const resp = await fetch(`${todo.base}/actions/${todo.action}`, {
      method: "POST", headers: { ...auth, "X-Numaplane-Dashboard": "1" },
    });
    status = resp.status;
    const body = await resp.json().catch(() => ({ message: resp.statusText }));
    message = body.message || resp.statusText;
  } catch (e) {
    message = `the dashboard did not answer: ${e}`;
  }
  const el = document.getElementById("action-result");
  if (!el) return;
  el.dataset.status = String(status);
  el.className = status === 200 ? "ok" : "error";
  const verdict = status === 200 ? "done" : status === 403 ? "forbidden (403)" : `refused (${status || "no answer"})`;
  el.textContent = `${todo.action}: ${verdict}: ${message}`;
});

// ---- routing --------------------------------------------------------------------------------

function route() {
  if (!token) {
    refused("This address has no token.");
    return;
  }
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "rollout" && parts.length === 4) {
    showRollout(parts[1], parts[2], parts[3]);
  } else {
    showTable();
  }
}
window.addEventListener("hashchange", route);
route();
