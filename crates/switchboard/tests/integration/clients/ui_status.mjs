// Drives the gateway's status page (/ui) in headless Chromium through playwright-core, in
// steps the Rust test (ui.rs) paces over stdin/stdout: each step waits for DOM text with a
// deadline, prints what it saw, and waits for the test's "next" line before the following
// one. Usage: node ui_status.mjs BASE_URL CHROMIUM NODE_MODULES SCREENSHOT
import { createRequire } from "node:module";
import { createInterface } from "node:readline";

const [base, executablePath, modules, screenshot, mode] = process.argv.slice(2);
// "viewer": a caller who is not a trust approver (its /trust is a 403, which is expected).
const viewer = mode === "viewer";
const require = createRequire(modules + "/");
const { chromium } = require("playwright-core");
const T = 20000;
const input = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function next() {
  const line = await input.next();
  if (line.done) throw new Error("the test closed stdin");
}

const browser = await chromium.launch({
  executablePath,
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});
try {
  const page = await browser.newPage();
  // A script or style the Content-Security-Policy blocked, or an error in the page, fails it.
  // (A failed load is judged by its response below: the browser's own favicon probe 404s.)
  page.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) {
      console.log("PAGE-ERROR " + m.text());
    }
  });
  page.on("response", (r) => {
    const refusedTrust = viewer && r.status() === 403 && r.url().endsWith("/trust");
    if (r.status() >= 400 && !r.url().endsWith("/favicon.ico") && !refusedTrust) {
      console.log("PAGE-ERROR HTTP " + r.status() + " " + r.url());
    }
  });
  page.on("pageerror", (e) => console.log("PAGE-ERROR " + e.message));
  await page.goto(base + "/ui");
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
  await page.locator("#sessions-streamable").filter({ hasText: /^[1-9]/ }).waitFor({ timeout: T });
  console.log("HEALTHY");
  await next();
  await state("beta").filter({ hasText: /^unhealthy$/ }).waitFor({ timeout: T });
  await page.locator("#errors li").filter({ hasText: "beta" }).first().waitFor({ timeout: T });
  console.log("UNHEALTHY");
  await next();
  const row = page.locator('#quarantined tr[data-key="alpha/echo"]');
  await row.waitFor({ timeout: T });
  console.log("QUARANTINED " + (await row.innerText()).replace(/\s+/g, " "));
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
