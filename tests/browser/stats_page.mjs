// Opens ricochet's stats page in Debian's chromium through playwright-core, enters the API
// key, and prints what the page shows as JSON (cards, a referrer table, the chart's bars),
// with every console error, page error and failed request. Used by tests/browser.rs.
//
//   node stats_page.mjs BASE_URL KEY API_KEY SCREENSHOT.png
import { chromium } from "playwright-core";

const [base, key, apiKey, shot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-quic", "--no-first-run", "--disable-component-update", "--disable-sync",
  ],
});
const errors = [];
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 900 } });
  page.on("console", (m) => { if (m.type() === "error") errors.push(`console: ${m.text()}`); });
  page.on("pageerror", (e) => errors.push(`page: ${e.message}`));
  page.on("requestfailed", (r) => errors.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  const res = await page.goto(`${base}/stats/${key}`);
  const csp = res.headers()["content-security-policy"] || "";
  await page.fill("#api-key", apiKey);
  await page.selectOption("#bots", "include");
  await page.click("button[type=submit]");
  await page.waitForSelector("#stats:not([hidden])", { timeout: 10000 });
  const text = async (sel) => (await page.textContent(sel)).trim();
  const rows = async (id) => page.$$eval(`#${id} tbody tr`, (trs) =>
    trs.map((tr) => Array.from(tr.cells).map((c) => c.textContent)));
  const out = {
    csp,
    key: await text("#key"),
    cards: {
      clicks: await text("#card-clicks"),
      humans: await text("#card-humans"),
      bots: await text("#card-bots"),
      uniques: await text("#card-uniques"),
    },
    referrers: await rows("referrers"),
    browsers: await rows("browsers"),
    countries: await rows("countries"),
    os: await rows("os"),
    bars: await page.$$eval("#chart rect", (rs) => rs.map((r) => [r.dataset.day, Number(r.dataset.clicks)])),
    stored: await page.evaluate(() => sessionStorage.getItem("ricochet-api-key") !== null),
    errors,
  };
  await page.screenshot({ path: shot, fullPage: true });
  console.log(JSON.stringify(out));
} finally {
  await browser.close();
}
