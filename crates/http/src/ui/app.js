// Switchboard status page: polls /status and /trust every second and renders them (the trust
// panel says so when the caller may not see it). Every
// value from the gateway (backend names, tool names, error messages) is set as text, never
// as markup. A bearer token, when the gateway needs one, comes from the URL fragment
// (#token=...: fragments are never sent to a server) or the field, and stays in this tab.
"use strict";

const POLL_MS = 1000;
const MAX_ERRORS = 20;
let token = sessionStorage.getItem("switchboard-token") || "";
// Backend name → the last error shown for it (bounded by the number of backends).
const lastErrors = new Map();

function fromFragment() {
  const m = /(?:^|[#&])token=([^&]*)/.exec(location.hash);
  if (m) {
    try {
      token = decodeURIComponent(m[1]);
      sessionStorage.setItem("switchboard-token", token);
    } catch (e) {
      // A malformed fragment must not stop the page: it is ignored.
    }
    history.replaceState(null, "", location.pathname);
  }
}

function headers(extra) {
  const h = Object.assign({ Accept: "application/json" }, extra || {});
  if (token) h.Authorization = "Bearer " + token;
  return h;
}

async function getJson(path) {
  const r = await fetch(path, { headers: headers(), cache: "no-store" });
  if (r.status === 401) throw Object.assign(new Error("unauthorized"), { auth: true });
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) tr.appendChild(c instanceof Node ? c : el("td", c));
  return tr;
}

// A missing value (a backend not started, a list never fetched) shows as a dash.
const DASH = "\u2013";

function count(v) {
  return v === null || v === undefined ? DASH : String(v);
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return DASH;
  const s = Math.floor(seconds);
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " m " + (s % 60) + " s";
  if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " m";
  return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
}

function ms(v) {
  if (v === null || v === undefined) return DASH;
  if (v >= 1000) return (v / 1000).toFixed(2) + " s";
  return (v < 10 ? v.toFixed(2) : v.toFixed(0)) + " ms";
}

// One cell: the text shown, and the raw value from /status it was made from (data-value),
// so what the page shows can be checked against /status.
function cell(field, value, text, cls) {
  const td = el("td", text, cls);
  td.dataset.field = field;
  td.dataset.value = value === null || value === undefined ? "" : String(value);
  return td;
}

function breakerCell(b) {
  if (!b.breaker) {
    const td = cell("breaker", "", DASH);
    td.title = "not started: no breaker yet";
    return td;
  }
  const word = b.breaker.state;
  let text = word;
  // Unhealthy is only ever shown behind an open breaker; a closed one beside a state that
  // does not serve is the credential being refused, which the breaker does not judge.
  if (word === "closed" && b.state === "unauthenticated") text = "closed (credential refused)";
  const td = cell("breaker", word, text, "breaker " + word);
  td.title = b.breaker.consecutiveFailures + " failure(s) in a row";
  return td;
}

function backendRow(b) {
  const minute = b.lastMinute || {};
  const items = b.items || {};
  const state = cell("state", b.state, b.state, "state " + b.state);
  state.dataset.backend = b.name;
  const err = b.lastError ? b.lastError.message : "";
  const tr = row([
    cell("name", b.name, b.name),
    state,
    cell("era", b.era, count(b.era)),
    cell("transport", b.transport, count(b.transport)),
    breakerCell(b),
    cell("restarts", b.restarts, count(b.restarts), "num"),
    cell("uptimeSeconds", b.uptimeSeconds, duration(b.uptimeSeconds), "num"),
    cell("pid", b.pid, count(b.pid), "num"),
    cell("inFlight", b.inFlight, count(b.inFlight), "num"),
    cell("tools", items.tools, count(items.tools), "num"),
    cell("prompts", items.prompts, count(items.prompts), "num"),
    cell("resources", items.resources, count(items.resources), "num"),
    cell("perSecond", minute.perSecond, count(minute.perSecond), "num"),
    cell("p50Ms", minute.p50Ms, ms(minute.p50Ms), "num"),
    cell("p99Ms", minute.p99Ms, ms(minute.p99Ms), "num"),
    cell("lastError", err, err, "error"),
  ]);
  tr.dataset.backend = b.name;
  return tr;
}

function renderPrincipals(sessions) {
  const body = document.querySelector("#principals tbody");
  body.replaceChildren();
  const listed = sessions.byPrincipal || [];
  for (const p of listed) {
    const tr = row([
      cell("issuer", p.issuer, p.issuer),
      cell("subject", p.subject, p.subject),
      cell("streamableHttp", p.streamableHttp, count(p.streamableHttp), "num"),
      cell("sse", p.sse, count(p.sse), "num"),
    ]);
    tr.dataset.principal = p.issuer + "/" + p.subject;
    body.appendChild(tr);
  }
  document.getElementById("no-sessions").hidden = listed.length > 0;
  const more = document.getElementById("principals-more");
  more.hidden = !sessions.principalsNotListed;
  more.textContent = "and " + sessions.principalsNotListed + " more principals";
}

function renderLinks(links) {
  if (!links) return;
  document.getElementById("link-metrics").hidden = !links.metrics;
  const docs = document.getElementById("link-docs");
  if (links.docs) {
    docs.href = links.docs;
    docs.textContent = "Docs";
    docs.title = "";
  }
}

function renderStatus(s) {
  const ready = document.getElementById("ready");
  ready.textContent = s.ready ? "ready" : "not ready";
  ready.className = "pill " + (s.ready ? "ready" : "not-ready");
  document.getElementById("sessions-streamable").textContent = s.sessions.streamableHttp;
  document.getElementById("sessions-sse").textContent = s.sessions.sse;
  let inFlight = 0;
  let rate = 0;
  const body = document.querySelector("#backends tbody");
  body.replaceChildren();
  for (const b of s.backends) {
    inFlight += b.inFlight || 0;
    rate += (b.lastMinute && b.lastMinute.perSecond) || 0;
    body.appendChild(backendRow(b));
    if (b.lastError) noteError(b.name, b.lastError);
  }
  document.getElementById("in-flight").textContent = inFlight;
  document.getElementById("rate").textContent = rate.toFixed(2);
  renderPrincipals(s.sessions);
  renderLinks(s.links);
}

function noteError(backend, e) {
  // One entry each time a backend's last error changes (the status repeats the last one,
  // with a growing age, on every poll).
  if (lastErrors.get(backend) === e.message) return;
  lastErrors.set(backend, e.message);
  const list = document.getElementById("errors");
  const when = new Date(Date.now() - e.secondsAgo * 1000).toLocaleTimeString();
  list.insertBefore(el("li", when + " " + backend + ": " + e.message), list.firstChild);
  while (list.children.length > MAX_ERRORS) list.removeChild(list.lastChild);
}

// /trust is for trust approvers only (403 otherwise) and for aggregating gateways: its refusal
// must not hide the status, which every caller who may read /status sees.
async function getTrust() {
  const r = await fetch("/trust", { headers: headers(), cache: "no-store" });
  if (r.status === 401) throw Object.assign(new Error("unauthorized"), { auth: true });
  if (r.status === 403) {
    return { note: "The trust panel needs an approver: this caller is not listed in trust.approvers." };
  }
  if (!r.ok) return { note: "Tool trust is not available here (HTTP " + r.status + ")." };
  return r.json();
}

function renderTrust(t) {
  const held = document.getElementById("quarantined");
  if (t.note) {
    document.getElementById("trust-mode").textContent = t.note;
    held.hidden = true;
    document.getElementById("none-quarantined").hidden = true;
    return;
  }
  held.hidden = false;
  document.getElementById("trust-mode").textContent =
    "Trust mode: " + t.mode + (t.newTools ? ", new tools: " + t.newTools : "") +
    (t.pins !== undefined ? ", " + t.pins + " pinned" : "");
  const body = document.querySelector("#quarantined tbody");
  body.replaceChildren();
  const pending = (t.pending || []).filter((p) => p.quarantined);
  for (const p of pending) {
    const button = el("button", "Approve");
    button.type = "button";
    button.dataset.key = p.backend + "/" + p.tool;
    button.addEventListener("click", () => approve(p.backend, p.tool, p.digest, button));
    const action = el("td");
    action.appendChild(button);
    const tr = row([p.backend, p.tool, p.reason, (p.changed || []).join(", "), p.seenAt, action]);
    tr.className = "quarantined";
    tr.dataset.key = p.backend + "/" + p.tool;
    body.appendChild(tr);
  }
  document.getElementById("none-quarantined").hidden = pending.length > 0;
}

async function approve(backend, tool, digest, button) {
  button.disabled = true;
  try {
    const r = await fetch("/trust/approve", {
      method: "POST",
      headers: headers({ "Content-Type": "application/json" }),
      body: JSON.stringify({ backend, tool, digest }),
    });
    if (!r.ok) throw new Error("approve " + backend + "/" + tool + ": HTTP " + r.status);
    await poll();
  } catch (e) {
    lastErrors.delete("ui");
    noteError("ui", { message: e.message, secondsAgo: 0 });
    button.disabled = false;
  }
}

async function poll() {
  try {
    const [status, trust] = await Promise.all([getJson("/status"), getTrust()]);
    document.getElementById("auth").hidden = true;
    renderStatus(status);
    renderTrust(trust);
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    if (e.auth) {
      document.getElementById("auth").hidden = false;
      document.getElementById("auth-error").textContent = token ? "token refused" : "";
    } else {
      document.getElementById("updated").textContent = "unreachable: " + e.message;
    }
  }
}

document.addEventListener("DOMContentLoaded", () => {
  fromFragment();
  document.getElementById("use-token").addEventListener("click", () => {
    token = document.getElementById("token").value;
    sessionStorage.setItem("switchboard-token", token);
    poll();
  });
  poll();
  setInterval(poll, POLL_MS);
});
