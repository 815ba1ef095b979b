// Renders Shlink's web UI (app.jsx, bundled here by esbuild, styled by app.css through Tailwind) in Debian's chromium through
// playwright-core, served from an origin of its own (another port: every call to ricochet is
// cross-origin, as from Shlink's hosted client), and walks it section by section as a user
// would. Prints what each step saw as one JSON object, with every API call made (method,
// path, status), every page error and failed request. tests/shlink_web_ui.rs asserts on it.
//
//   node drive.mjs BASE_URL API_KEY SCREENSHOT_DIR [visits-off]
//
// With `visits-off` it only opens `bravo`'s visits page of a server without the visit log
// and says what the page shows.
//
// The links it expects (made by the test through the API first): `alpha`, `bravo` (clicked)
// and `charlie`, created in that order.
import { execFileSync } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';
import { chromium } from 'playwright-core';

const [baseUrl, apiKey, shots, mode] = process.argv.slice(2);
const here = path.dirname(fileURLToPath(import.meta.url));

const bundle = await esbuild.build({
  entryPoints: [path.join(here, 'app.jsx')],
  bundle: true,
  write: false,
  format: 'esm',
  jsx: 'automatic',
  target: 'chrome120',
  define: { 'process.env.NODE_ENV': '"production"' },
  logLevel: 'error',
});
const js = bundle.outputFiles[0].contents;
const css = execFileSync(path.join(here, 'node_modules/.bin/tailwindcss'), ['-i', 'app.css', '-o', '-'], {
  cwd: here, stdio: ['ignore', 'pipe', 'ignore'],
});
const html = `<!doctype html><html><head><meta charset="utf-8"><title>Shlink web UI on ricochet</title>
<link rel="stylesheet" href="/app.css"></head>
<body><div id="root"></div><script>window.RICOCHET=${JSON.stringify({ baseUrl, apiKey })}</script>
<script type="module" src="/app.js"></script></body></html>`;
// Every path but the bundle and its styles gets the page: the component routes on the client
// side.
const files = { '/app.js': ['text/javascript', js], '/app.css': ['text/css', css] };
const site = http.createServer((req, res) => {
  const [type, body] = files[req.url] ?? ['text/html', html];
  res.writeHead(200, { 'content-type': type });
  res.end(body);
});
await new Promise((resolve) => site.listen(0, '127.0.0.1', resolve));
const origin = `http://127.0.0.1:${site.address().port}`;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: [
    '--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
    '--disable-quic', '--no-first-run', '--disable-component-update', '--disable-sync',
  ],
});
const out = { origin, api: [], pageErrors: [], failedRequests: [] };
const apiPath = (url) => url.slice(baseUrl.length);
try {
  // UTC, so that the form's local date-times are the instants the test asserts.
  const page = await browser.newPage({ viewport: { width: 1300, height: 1000 }, timezoneId: 'UTC' });
  page.setDefaultTimeout(10000);
  page.on('pageerror', (e) => out.pageErrors.push(e.message));
  // A request still in flight when a step navigates away is aborted by the browser
  // (`net::ERR_ABORTED`), not failed by the server; any other failure (a refused
  // connection, a CORS refusal: `net::ERR_FAILED`) is kept.
  page.on('requestfailed', (r) => {
    const why = r.failure()?.errorText;
    if (why !== 'net::ERR_ABORTED') out.failedRequests.push(`${r.method()} ${r.url()} ${why}`);
  });
  page.on('response', (r) => {
    if (r.url().startsWith(baseUrl)) {
      out.api.push({ method: r.request().method(), path: apiPath(r.url()), status: r.status() });
    }
  });
  const answered = (method, prefix) => page.waitForResponse(
    (r) => r.request().method() === method && apiPath(r.url()).startsWith(prefix),
  );
  const shot = (name) => page.screenshot({ path: path.join(shots, `webui-${name}.png`), fullPage: true });
  const rows = async () => page.$$eval('tbody tr', (trs) => trs.map((tr) => {
    const cell = (c) => tr.querySelector(`td[data-column="${c}:"]`)?.innerText.trim() ?? null;
    return { shortUrl: cell('Short URL'), longUrl: cell('Long URL'), visits: cell('Visits') };
  }));
  const listed = async (request) => {
    await request;
    await page.waitForSelector('tbody tr td[data-column="Short URL:"]');
    return rows();
  };

  if (mode === 'visits-off') {
    // The visit log is off: the visits page says so (Shlink's problem's detail).
    const request = answered('GET', '/rest/v3/short-urls/bravo/visits');
    await page.goto(`${origin}/short-code/bravo/visits`);
    out.visitsOff = { status: (await request).status() };
    await page.waitForSelector('text=visit log is off');
    out.visitsOff.text = (await page.innerText('#root')).replace(/\s+/g, ' ');
    await shot('visits-off');
    throw 'done';
  }

  // The overview: its cards and the recently created links.
  await page.goto(`${origin}/overview`);
  await page.waitForSelector('tbody tr td[data-column="Short URL:"]');
  out.overview = { text: (await page.innerText('main, #root')).replace(/\s+/g, ' '), rows: await rows() };
  await shot('overview');

  // The list in its default order (newest first), then sorted by short code, then searched.
  let request = answered('GET', '/rest/v3/short-urls?');
  await page.goto(`${origin}/list-short-urls/1`);
  out.list = await listed(request);
  request = answered('GET', '/rest/v3/short-urls?page=1&orderBy=shortCode-ASC');
  await page.click('th:has-text("Short URL")');
  out.sorted = await listed(request);
  // Sorted by visits: the first click on the column ascends, the second descends.
  request = answered('GET', '/rest/v3/short-urls?page=1&orderBy=visits-ASC');
  await page.click('th:has-text("Visits")');
  await request;
  request = answered('GET', '/rest/v3/short-urls?page=1&orderBy=visits-DESC');
  await page.click('th:has-text("Visits")');
  out.byVisits = await listed(request);
  // The other columns: created (oldest first), long URL, title.
  request = answered('GET', '/rest/v3/short-urls?page=1&orderBy=dateCreated-ASC');
  await page.click('th:has-text("Created at")');
  out.byCreated = await listed(request);
  request = answered('GET', '/rest/v3/short-urls?page=1&orderBy=longUrl-ASC');
  await page.getByText('Long URL', { exact: true }).click();
  out.byLongUrl = await listed(request);
  request = answered('GET', '/rest/v3/short-urls?page=1&orderBy=title-ASC');
  await page.locator('th').getByText('Title', { exact: true }).click();
  out.byTitle = await listed(request);
  request = page.waitForResponse((r) => apiPath(r.url()).startsWith('/rest/v3/short-urls?') && r.url().includes('searchTerm=bravo'));
  await page.fill('input[placeholder="Search..."]', 'bravo');
  await request;
  await page.waitForFunction(() => document.querySelectorAll('tbody tr').length === 1);
  out.searched = await rows();
  await shot('list');

  // Create through the form, with the component's defaults (forwardQuery on), a title, two
  // tags typed into the tag box, maximum visits and an "enabled since" date-time (past, so
  // the link redirects).
  await page.goto(`${origin}/create-short-url`);
  await page.fill('input[placeholder="URL to be shortened"]', 'https://example.org/from-ui');
  await page.fill('input[placeholder="Custom slug"]', 'from-ui');
  await page.fill('input[placeholder="Title"]', 'Made in the UI');
  await page.fill('input[placeholder="25..."]', '5');
  await page.getByLabel('Enabled since:').fill('2025-01-02T03:04');
  for (const tag of ['Web UI', 'launch']) {
    await page.fill('input[placeholder="Add tags to the URL"]', tag);
    await page.keyboard.press('Enter');
  }
  request = answered('POST', '/rest/v3/short-urls');
  await page.click('form[name=shortUrlForm] button[type=submit]');
  out.create = { status: (await request).status() };
  await page.waitForSelector('text=The short URL is');
  out.create.result = (await page.innerText('text=The short URL is')).trim();
  await shot('create');

  // The list shows the new link's title and tags; filtered by a tag from its row.
  request = answered('GET', '/rest/v3/short-urls?');
  await page.goto(`${origin}/list-short-urls/1`);
  await listed(request);
  const made = page.locator('tbody tr', { hasText: '/from-ui' });
  out.madeRow = (await made.innerText()).replace(/\s+/g, ' ').trim();

  // The tags page: each tag with its links and visits; a tag renamed from its menu.
  request = answered('GET', '/rest/v3/tags/stats');
  await page.goto(`${origin}/manage-tags`);
  await request;
  await page.waitForSelector('tbody tr');
  const tagRows = async () => page.$$eval('tbody tr', (trs) => trs.map((tr) => Array.from(tr.cells).slice(0, 3).map((c) => c.innerText.trim())));
  out.tags = await tagRows();
  await page.locator('tbody tr', { hasText: 'launch' }).locator('button[aria-label=Options]').click();
  await page.click('text=Edit');
  await page.fill('dialog[open] input[placeholder=Tag]', 'go-live');
  request = answered('PUT', '/rest/v3/tags');
  await page.click('dialog[open] button[type=submit]');
  out.renameTag = { status: (await request).status() };
  await page.waitForFunction(() => [...document.querySelectorAll('tbody tr')].some((tr) => tr.innerText.includes('go-live')));
  out.tagsAfterRename = await tagRows();
  await shot('tags');
  // `web-ui` deleted from its menu, confirmed in the dialog.
  await page.locator('tbody tr', { hasText: 'web-ui' }).locator('button[aria-label=Options]').click();
  await page.click('text=Delete');
  request = answered('DELETE', '/rest/v3/tags');
  await page.click('dialog[open] button[type=submit]');
  out.deleteTag = { status: (await request).status() };
  await page.waitForFunction(() => ![...document.querySelectorAll('tbody tr')].some((tr) => tr.innerText.includes('web-ui')));
  out.tagsAfterDelete = await tagRows();

  // Edit `alpha`'s long URL.
  await page.goto(`${origin}/short-code/alpha/edit`);
  const long = 'input[placeholder="URL to be shortened"]';
  await page.waitForFunction((sel) => document.querySelector(sel)?.value !== '', long);
  out.edit = { before: await page.inputValue(long) };
  await page.fill(long, 'https://example.com/alpha-edited');
  request = answered('PATCH', '/rest/v3/short-urls/alpha');
  await page.click('form[name=shortUrlForm] button[type=submit]');
  out.edit.status = (await request).status();

  // Delete `charlie` from its row's menu, typing the confirmation.
  request = answered('GET', '/rest/v3/short-urls?');
  await page.goto(`${origin}/list-short-urls/1`);
  await listed(request);
  const row = page.locator('tbody tr', { hasText: '/charlie' });
  await row.locator('button[aria-label=Options]').click();
  await page.click('text=Delete short URL');
  await page.fill('dialog[open] input[placeholder=delete]', 'delete');
  request = answered('DELETE', '/rest/v3/short-urls/charlie');
  await page.click('dialog[open] button[type=submit]');
  out.delete = { status: (await request).status() };
  await page.waitForFunction(() => ![...document.querySelectorAll('tbody tr')].some((tr) => tr.innerText.includes('/charlie')));
  out.afterDelete = await rows();

  // bravo's QR code, from its row's menu.
  await page.locator('tbody tr', { hasText: '/bravo' }).locator('button[aria-label=Options]').click();
  await page.click('text=QR code');
  await page.waitForSelector('dialog[open] canvas, dialog[open] svg image, dialog[open] img, dialog[open] svg rect');
  out.qr = { dialog: (await page.innerText('dialog[open]')).replace(/\s+/g, ' ').trim() };
  await page.waitForTimeout(500); // The dialog's fade-in, for the screenshot.
  await shot('qr-code');
  await page.keyboard.press('Escape');

  // The domains, and the page's check of each (the domain's own `/rest/v3/health`): its
  // status icon turns from a spinner to a check mark (or a cross).
  await page.goto(`${origin}/manage-domains`);
  await page.waitForSelector('td[data-column="Status:"] svg:not([data-icon=circle-notch])');
  out.domains = await page.$$eval('tbody tr', (trs) => trs.map((tr) => ({
    domain: tr.querySelector('td[data-column="Domain:"]').innerText.trim(),
    status: tr.querySelector('td[data-column="Status:"] svg').dataset.icon,
  })));
  await shot('domains');

  // A link's redirect rules page.
  request = answered('GET', '/rest/v3/short-urls/bravo/redirect-rules');
  await page.goto(`${origin}/short-code/bravo/redirect-rules`);
  out.rules = { status: (await request).status() };
  await page.waitForSelector('text=https://example.com/bravo');
  // A rule added (Android visitors to another URL), saved, and there after a reload.
  await page.click('text=Add rule');
  await page.fill('dialog[open] input[placeholder="https://www.example.com"]', 'https://example.com/bravo-android');
  await page.click('dialog[open] button[aria-label="Add condition"]');
  await page.locator('dialog[open] select').nth(1).selectOption('android');
  await page.click('dialog[open] button:has-text("Confirm")');
  request = answered('POST', '/rest/v3/short-urls/bravo/redirect-rules');
  await page.click('[data-testid=save-button]');
  out.rules.saved = (await request).status();
  request = answered('GET', '/rest/v3/short-urls/bravo/redirect-rules');
  await page.reload();
  await request;
  await page.waitForSelector('text=https://example.com/bravo-android');
  out.rules.reloaded = (await page.innerText('#root')).replace(/\s+/g, ' ');
  await shot('rules');

  // A link's visits (bravo's 3, from the visit log): the charts by context, then the list.
  request = answered('GET', '/rest/v3/short-urls/bravo/visits');
  await page.goto(`${origin}/short-code/bravo/visits/by-context`);
  out.visits = { status: (await request).status() };
  await page.waitForSelector('text=Operating systems');
  await page.waitForFunction(() => document.querySelectorAll('main canvas, main svg.recharts-surface, #root canvas, #root svg.recharts-surface').length > 0);
  await page.waitForTimeout(1000); // The pies' drawing animation, for the screenshot.
  out.visits.charts = await page.$$eval('canvas, svg.recharts-surface', (cs) => cs.length);
  out.visits.byContext = (await page.innerText('#root')).replace(/\s+/g, ' ');
  await shot('visits-charts');
  await page.goto(`${origin}/short-code/bravo/visits/list`);
  await page.waitForFunction(() => document.querySelectorAll('tbody tr').length >= 3);
  out.visits.list = await page.$$eval('tbody tr', (trs) => trs.map((tr) => tr.innerText.replace(/\s+/g, ' ').trim()));
  await shot('visits-list');

  // The orphan visits (a GET of a short code no link has), listed.
  request = answered('GET', '/rest/v3/visits/orphan');
  await page.goto(`${origin}/orphan-visits/list`);
  out.orphans = { status: (await request).status() };
  await page.waitForFunction(() => document.querySelectorAll('tbody tr').length >= 1 && document.querySelector('tbody').innerText.includes('/nope'));
  out.orphans.list = await page.$$eval('tbody tr', (trs) => trs.map((tr) => tr.innerText.replace(/\s+/g, ' ').trim()));
  await shot('orphan-visits');
  // Deleted from the page's options (a click, then another to confirm), then listed again.
  await page.goto(`${origin}/orphan-visits/options`);
  await page.click('button:has-text("Delete visits")');
  request = answered('DELETE', '/rest/v3/visits/orphan');
  await page.click('button:has-text("Click again to confirm")');
  out.orphans.deleted = { status: (await request).status() };
  request = answered('GET', '/rest/v3/visits/orphan');
  await page.goto(`${origin}/orphan-visits/list`);
  await request;
  await page.waitForSelector('text=There are no visits matching current filter');
  out.orphans.after = (await page.innerText('#root')).replace(/\s+/g, ' ');
  await shot('orphan-visits-deleted');
} catch (e) {
  // What the steps saw so far goes out with the error: the test prints it.
  if (e !== 'done') out.error = String(e.stack ?? e);
  await browser.contexts()[0]?.pages()[0]?.screenshot({ path: path.join(shots, 'webui-failed.png'), fullPage: true });
} finally {
  await browser.close();
  site.close();
}
console.log(JSON.stringify(out));
