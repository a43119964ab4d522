// Clicks the gateway's OAuth start page in headless Chromium (playwright-core), as a user
// does, and follows the test authorization server (which signs the browser in at once) back
// to the gateway's callback. Prints "AT <callback url>" and "DONE <its page text>", or
// "FAILED <why>". Usage: node oauth_click.mjs START_URL CHROMIUM NODE_MODULES
import { createRequire } from "node:module";

const [start, executablePath, modules] = process.argv.slice(2);
const require = createRequire(modules + "/");
const { chromium } = require("playwright-core");
const T = 20000;

const browser = await chromium.launch({
  executablePath,
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});
try {
  const page = await browser.newPage();
  await page.goto(start, { timeout: T });
  await page.getByRole("button", { name: "Continue to sign in" }).click({ timeout: T });
  // A refused click stays on the start page (a 400 page): the wait then fails. The test
  // authorization server signs the browser in at once and sends it to the callback.
  await page.waitForURL((u) => u.pathname.endsWith("/callback"), { timeout: T });
  await page.waitForLoadState("load", { timeout: T });
  console.log("AT " + page.url());
  console.log("DONE " + (await page.textContent("body")).replace(/\s+/g, " "));
} catch (e) {
  console.log("FAILED " + String(e).split("\n")[0]);
} finally {
  await browser.close();
}
