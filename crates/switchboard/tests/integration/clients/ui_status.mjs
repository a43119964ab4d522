// Drives the gateway's status page (/ui) in headless Chromium through playwright-core, in
// steps the Rust test (ui.rs) paces over stdin/stdout: each step waits for DOM text with a
// deadline, prints what it saw, and waits for the test's "next" line before the following
// one. Usage: node ui_status.mjs BASE_URL CHROMIUM NODE_MODULES SCREENSHOT [viewer | TOKEN]
import { createRequire } from "node:module";
import { createInterface } from "node:readline";

const [base, executablePath, modules, screenshot, mode] = process.argv.slice(2);
// "viewer": a caller who is not a trust approver (its /trust is a 403, which is expected).
// Otherwise the approver's bearer token, given to the page in the URL fragment.
const viewer = mode === "viewer";
const token = viewer ? "" : mode || "";
const require = createRequire(modules + "/");
const { chromium } = require("playwright-core");
const T = 20000;
const input = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function next() {
  const line = await input.next();
  if (line.done) throw new Error("the test closed stdin");
}
// Set while the page is made to run an inline script, which the CSP must refuse.
let expectCspRefusal = false;
let cspRefused = false;

const browser = await chromium.launch({
  executablePath,
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1500, height: 900 } });
  // A script or style the Content-Security-Policy blocked, or an error in the page, fails it.
  // (A failed load is judged by its response below: the browser's own favicon probe 404s.)
  page.on("console", (m) => {
    if (m.type() !== "error" || m.text().startsWith("Failed to load resource")) return;
    if (expectCspRefusal && m.text().includes("Content Security Policy")) {
      cspRefused = true;
      return;
    }
    console.log("PAGE-ERROR " + m.text());
  });
  page.on("response", (r) => {
    const refusedTrust = viewer && r.status() === 403 && r.url().endsWith("/trust");
    if (r.status() >= 400 && !r.url().endsWith("/favicon.ico") && !refusedTrust) {
      console.log("PAGE-ERROR HTTP " + r.status() + " " + r.url());
    }
  });
  page.on("pageerror", (e) => console.log("PAGE-ERROR " + e.message));
  await page.goto(base + "/ui" + (token ? "#token=" + encodeURIComponent(token) : ""));
  const state = (name) => page.locator(`#backends tr[data-backend="${name}"] td.state`);
  if (viewer) {
    await state("alpha").filter({ hasText: /^healthy$/ }).waitFor({ timeout: T });
    await state("beta").filter({ hasText: /^healthy$/ }).waitFor({ timeout: T });
    const note = page.locator("#trust-mode").filter({ hasText: "needs an approver" });
    await note.waitFor({ timeout: T });
    await page.screenshot({ path: screenshot, fullPage: true });
    console.log("VIEWER " + (await note.innerText()));
    process.exit(0);
  }
  await state("beta").filter({ hasText: /^healthy$/ }).waitFor({ timeout: T });
  await page.locator("#principals tbody tr").nth(1).waitFor({ timeout: T });
  console.log("HEALTHY");
  await next();
  await state("beta").filter({ hasText: /^unhealthy$/ }).waitFor({ timeout: T });
  await page.locator("#errors li").filter({ hasText: "beta" }).first().waitFor({ timeout: T });
  console.log("UNHEALTHY");
  await next();
  const row = page.locator('#quarantined tr[data-key="alpha/echo"]');
  await row.waitFor({ timeout: T });
  console.log("QUARANTINED " + (await row.innerText()).replace(/\s+/g, " "));
  console.log("CHECKED " + (await checkAgainstStatus(page)));
  expectCspRefusal = true;
  await page.addScriptTag({ content: "window.inlineRan = true;" }).catch(() => {});
  const ran = await page.evaluate(() => window.inlineRan === true);
  expectCspRefusal = false;
  if (ran || !cspRefused) throw new Error("an inline script was not refused by the CSP");
  console.log("CSP-REFUSES-INLINE");
  await page.screenshot({ path: screenshot, fullPage: true });
  await row.locator("button").click();
  await row.waitFor({ state: "detached", timeout: T });
  console.log("APPROVED");
} catch (e) {
  console.log("FAILED " + e.message.split("\n")[0]);
  process.exitCode = 1;
} finally {
  await browser.close();
}
// The stdin reader would keep node alive.
process.exit(process.exitCode ?? 0);

// Every field the page shows, against a /status read now: equal (uptime within 3 s, which
// moves between the page's poll and this read). The page polls every second, so a
// difference is retried for a few seconds before it fails. Returns the fields compared.
async function checkAgainstStatus(page) {
  let problems = [];
  for (let attempt = 0; attempt < 10; attempt++) {
    const r = await fetch(base + "/status", { headers: { Authorization: "Bearer " + token } });
    const status = await r.json();
    await page.waitForTimeout(1100);
    const dom = await page.evaluate(readPage);
    problems = [];
    const compared = compare(status, dom, problems);
    if (problems.length === 0) return compared + " fields";
  }
  throw new Error("the page differs from /status: " + problems.join("; "));
}

// What the page shows: each cell's text and the /status value it was made from.
function readPage() {
  const cells = (tr) => {
    const out = {};
    for (const td of tr.querySelectorAll("td[data-field]")) {
      out[td.dataset.field] = { value: td.dataset.value, text: td.textContent };
    }
    return out;
  };
  const rows = {};
  for (const tr of document.querySelectorAll("#backends tbody tr")) rows[tr.dataset.backend] = cells(tr);
  const principals = {};
  for (const tr of document.querySelectorAll("#principals tbody tr")) {
    principals[tr.dataset.principal] = cells(tr);
  }
  const link = (id) => {
    const a = document.getElementById(id);
    return { href: a.getAttribute("href"), hidden: a.hidden, text: a.textContent };
  };
  return {
    rows,
    principals,
    streamable: document.getElementById("sessions-streamable").textContent,
    sse: document.getElementById("sessions-sse").textContent,
    links: { status: link("link-status"), metrics: link("link-metrics"), docs: link("link-docs") },
  };
}

function compare(status, dom, problems) {
  const str = (v) => (v === null || v === undefined ? "" : String(v));
  const shown = (v) => (v === null || v === undefined ? "\u2013" : String(v));
  let compared = 0;
  const expect = (what, got, want) => {
    compared++;
    if (got !== want) problems.push(`${what}: page ${JSON.stringify(got)}, /status ${JSON.stringify(want)}`);
  };
  for (const b of status.backends) {
    const row = dom.rows[b.name];
    if (!row) {
      problems.push("no row for " + b.name);
      continue;
    }
    const items = b.items || {};
    const minute = b.lastMinute || {};
    const plain = {
      name: b.name, state: b.state, era: b.era, transport: b.transport,
      restarts: b.restarts, pid: b.pid, inFlight: b.inFlight,
      tools: items.tools, prompts: items.prompts, resources: items.resources,
      perSecond: minute.perSecond,
    };
    for (const [field, v] of Object.entries(plain)) {
      expect(`${b.name}.${field} value`, row[field].value, str(v));
      expect(`${b.name}.${field} text`, row[field].text, shown(v));
    }
    expect(`${b.name}.breaker`, row.breaker.value, str(b.breaker && b.breaker.state));
    expect(`${b.name}.p50Ms`, row.p50Ms.value, str(minute.p50Ms));
    expect(`${b.name}.p99Ms`, row.p99Ms.value, str(minute.p99Ms));
    if (minute.p50Ms !== null && !/ m?s$/.test(row.p50Ms.text)) problems.push(`${b.name}.p50 text ${row.p50Ms.text}`);
    expect(`${b.name}.lastError`, row.lastError.text, b.lastError ? b.lastError.message : "");
    const up = Number(row.uptimeSeconds.value);
    compared++;
    if (Math.abs(up - b.uptimeSeconds) > 3) problems.push(`${b.name}.uptime ${up} vs ${b.uptimeSeconds}`);
    if (row.state.text === "unhealthy" && row.breaker.text === "closed") {
      problems.push(`${b.name} shown unhealthy behind a closed breaker`);
    }
  }
  expect("backend rows", Object.keys(dom.rows).length, status.backends.length);
  expect("sessions streamable", dom.streamable, String(status.sessions.streamableHttp));
  expect("sessions sse", dom.sse, String(status.sessions.sse));
  for (const p of status.sessions.byPrincipal) {
    const key = p.issuer + "/" + p.subject;
    const row = dom.principals[key];
    if (!row) {
      problems.push("no row for principal " + key);
      continue;
    }
    expect(key + " streamable", row.streamableHttp.text, String(p.streamableHttp));
    expect(key + " sse", row.sse.text, String(p.sse));
  }
  expect("principal rows", Object.keys(dom.principals).length, status.sessions.byPrincipal.length);
  expect("status link", dom.links.status.href, status.links.status);
  expect("metrics link", dom.links.metrics.href, status.links.metrics);
  expect("metrics link shown", dom.links.metrics.hidden, !status.links.metrics);
  if (status.links.docs) expect("docs link", dom.links.docs.href, status.links.docs);
  else expect("docs in source", dom.links.docs.text.includes(status.links.docsInSource), true);
  return compared;
}
