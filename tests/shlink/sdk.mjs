// Drives ricochet's Shlink REST API (/rest/v3) through Shlink's official JS SDK, with both of
// its HTTP clients (fetch, which sends Content-Length, and Node's http, which sends bodies
// chunked), asserting what the SDK returns. Usage: node sdk.mjs BASE_URL API_KEY. Prints "ok" and exits 0, or
// prints the first failed expectation and exits 1. Run by tests/shlink_sdk.rs.
import assert from 'node:assert/strict';
import { ShlinkApiClient } from '@shlinkio/shlink-js-sdk';
import { FetchHttpClient } from '@shlinkio/shlink-js-sdk/fetch';
import { NodeHttpClient } from '@shlinkio/shlink-js-sdk/node';

const [baseUrl, apiKey] = process.argv.slice(2);
const rejectsWith = async (promise, type) => {
  try {
    await promise;
  } catch (e) {
    assert.equal(e.type, `https://shlink.io/api/error/${type}`, JSON.stringify(e));
    return e;
  }
  assert.fail(`expected an error of type ${type}`);
};

const results = {};
for (const [name, makeClient] of [['fetch', () => new FetchHttpClient()], ['node', () => new NodeHttpClient()]]) {
  const api = new ShlinkApiClient(makeClient(), { baseUrl, apiKey });
  const health = await api.health();
  assert.equal(health.status, 'pass');
  // The Shlink API version ricochet answers as (the web client enables features by it).
  assert.equal(health.version, '4.5.0');
  await rejectsWith(api.mercureInfo(), 'mercure-not-configured');

  const slug = `sdk-${name}-${Date.now()}`;
  const made = await api.createShortUrl({ longUrl: 'https://example.com/sdk/a', customSlug: slug });
  // Lists of individual visits: ricochet keeps counts only, and says so.
  for (const call of [
    () => api.getShortUrlVisits({ shortCode: slug }),
    () => api.deleteShortUrlVisits({ shortCode: slug }),
    () => api.getOrphanVisits(),
    () => api.getNonOrphanVisits(),
    () => api.getTagVisits('news'),
    () => api.getDomainVisits('DEFAULT'),
  ]) {
    const e = await call().then(() => assert.fail('visits listed'), (e) => e);
    assert.equal(e.type, 'https://ricochet.dev/problems/visit-log-off', JSON.stringify(e));
    assert.equal(e.status, 501);
  }
  assert.equal(made.shortCode, slug);
  assert.equal(made.longUrl, 'https://example.com/sdk/a');
  assert.ok(made.shortUrl.endsWith(`/${slug}`), made.shortUrl);
  assert.deepEqual(made.tags, []);
  assert.equal(made.crawlable, false);
  // crawlable: set on create and by an edit; the domain's robots.txt allows the link.
  const crawled = await api.createShortUrl({ longUrl: 'https://example.com/sdk/crawl', customSlug: `${slug}-c`, crawlable: true });
  assert.equal(crawled.crawlable, true);
  assert.equal((await api.updateShortUrl({ shortCode: slug }, { crawlable: true })).crawlable, true);
  assert.equal((await api.updateShortUrl({ shortCode: slug }, { crawlable: false })).crawlable, false);
  if (name === 'fetch') {
    // The first robots.txt of this server (a core keeps a text for a minute afterwards).
    const robots = await (await fetch(`${baseUrl}/robots.txt`)).text();
    assert.ok(robots.includes(`\nAllow: /${slug}-c$\n`), robots);
  }

  // Redirect rules (Shlink 4): set, read back, and followed by a visit from an Android phone.
  const rules = await api.setShortUrlRedirectRules({ shortCode: slug }, { redirectRules: [
    { longUrl: 'https://example.com/sdk/android', conditions: [{ type: 'device', matchKey: null, matchValue: 'android' }] },
    { longUrl: 'https://example.com/sdk/promo', conditions: [
      { type: 'query-param', matchKey: 'promo', matchValue: 'yes' },
      { type: 'language', matchKey: null, matchValue: 'es' }] },
  ] });
  assert.equal(rules.defaultLongUrl, 'https://example.com/sdk/a');
  assert.deepEqual(rules.redirectRules.map((r) => [r.priority, r.longUrl]),
    [[1, 'https://example.com/sdk/android'], [2, 'https://example.com/sdk/promo']]);
  assert.deepEqual(rules.redirectRules[1].conditions[0], { type: 'query-param', matchKey: 'promo', matchValue: 'yes' });
  assert.deepEqual(await api.getShortUrlRedirectRules({ shortCode: slug }), rules);
  assert.equal((await api.getShortUrl({ shortCode: slug })).hasRedirectRules, true);
  // HEAD: the rules pick the Location, and no click is counted (the figures below stay 0).
  const visit = async (query, headers) => (await fetch(`${baseUrl}/${slug}${query}`, { method: 'HEAD', redirect: 'manual', headers })).headers.get('location');
  assert.equal(await visit('', { 'user-agent': 'Mozilla/5.0 (Linux; Android 14; Pixel 8) Mobile Safari' }), 'https://example.com/sdk/android');
  assert.equal(await visit('?promo=yes', { 'accept-language': 'es-ES,es;q=0.9' }), 'https://example.com/sdk/promo');
  assert.equal(await visit('?promo=yes', { 'accept-language': 'en' }), 'https://example.com/sdk/a');
  await rejectsWith(api.setShortUrlRedirectRules({ shortCode: slug }, { redirectRules: [
    { longUrl: 'https://x.example/', conditions: [{ type: 'device', matchKey: null, matchValue: 'toaster' }] }] }), 'invalid-data');
  await rejectsWith(api.getShortUrlRedirectRules({ shortCode: 'no-such-code' }), 'short-url-not-found');

  // Domains: the same slug on another domain is another short URL.
  const domains = await api.listDomains();
  assert.deepEqual(domains.data.map((d) => [d.domain, d.isDefault]), [['sho.rt', true], ['go.brand.com', false]]);
  assert.equal(domains.data[1].redirects.invalidShortUrlRedirect, 'https://brand.example/');
  // A domain's redirects changed: those named change, the others stay; an unknown domain
  // and a URL that is not one are invalid data.
  const home = `https://brand.example/home-${name}`;
  const redirects = await api.editDomainRedirects({ domain: 'GO.brand.com', baseUrlRedirect: home, regular404Redirect: null });
  assert.deepEqual(redirects, { baseUrlRedirect: home, regular404Redirect: null, invalidShortUrlRedirect: 'https://brand.example/' });
  assert.equal((await api.listDomains()).data[1].redirects.baseUrlRedirect, home);
  await rejectsWith(api.editDomainRedirects({ domain: 'nope.example', baseUrlRedirect: null }), 'invalid-data');
  await rejectsWith(api.editDomainRedirects({ domain: 'go.brand.com', baseUrlRedirect: 'ftp://x' }), 'invalid-data');
  const branded = await api.createShortUrl({ longUrl: 'https://example.com/sdk/brand', customSlug: slug, domain: 'go.brand.com' });
  assert.equal(branded.domain, 'go.brand.com');
  assert.equal(branded.shortUrl, `https://go.brand.com/${slug}`);
  assert.equal((await api.getShortUrl({ shortCode: slug, domain: 'go.brand.com' })).longUrl, 'https://example.com/sdk/brand');
  assert.equal((await api.getShortUrl({ shortCode: slug })).longUrl, 'https://example.com/sdk/a');
  const onBrand = await api.listShortUrls({ domain: 'go.brand.com', itemsPerPage: 50 });
  assert.ok(onBrand.data.every((s) => s.domain === 'go.brand.com'), JSON.stringify(onBrand.data));
  assert.ok(onBrand.data.some((s) => s.shortCode === slug));
  const onDefault = await api.listShortUrls({ domain: 'DEFAULT', itemsPerPage: 50 });
  assert.ok(onDefault.data.every((s) => s.domain === null), JSON.stringify(onDefault.data));
  await rejectsWith(api.createShortUrl({ longUrl: 'https://example.com/sdk/x', domain: 'nope.example' }), 'invalid-data');
  await api.deleteShortUrl({ shortCode: slug, domain: 'go.brand.com' });
  await rejectsWith(api.getShortUrl({ shortCode: slug, domain: 'go.brand.com' }), 'short-url-not-found');

  const generated = await api.createShortUrl({ longUrl: 'https://example.com/sdk/b' });
  assert.match(generated.shortCode, /^[0-9A-Za-z]{7}$/);

  const read = await api.getShortUrl({ shortCode: slug });
  assert.equal(read.longUrl, 'https://example.com/sdk/a');
  assert.equal(read.dateCreated, made.dateCreated);

  const edited = await api.updateShortUrl(
    { shortCode: slug },
    { longUrl: 'https://example.com/sdk/edited', validUntil: '2030-01-02T03:04:05Z' },
  );
  assert.equal(edited.longUrl, 'https://example.com/sdk/edited');
  assert.equal(edited.meta.validUntil, '2030-01-02T03:04:05Z');

  const all = await api.listShortUrls({ itemsPerPage: 50 });
  const codes = all.data.map((s) => s.shortCode);
  assert.ok(codes.includes(slug) && codes.includes(generated.shortCode), codes.join(','));
  assert.equal(all.pagination.currentPage, 1);
  assert.ok(all.pagination.totalItems >= 2);

  const first = await api.listShortUrls({ itemsPerPage: 1, page: '1' });
  const second = await api.listShortUrls({ itemsPerPage: 1, page: '2' });
  assert.equal(first.data.length, 1);
  assert.equal(second.data.length, 1);
  assert.notEqual(first.data[0].shortCode, second.data[0].shortCode);
  assert.ok(first.pagination.pagesCount >= 2);

  await rejectsWith(api.createShortUrl({ longUrl: 'https://example.com/sdk/c', customSlug: slug }), 'non-unique-slug');
  await rejectsWith(api.createShortUrl({ longUrl: 'https://example.com/sdk/d', tags: ['x'.repeat(65)] }), 'invalid-data');

  // Titles and tags, and the tag endpoints.
  const tagged = await api.createShortUrl({ longUrl: 'https://example.com/sdk/t', title: ' SDK title ', tags: [`Tag ${name}`, 'b'] });
  assert.equal(tagged.title, 'SDK title');
  assert.deepEqual(tagged.tags, ['b', `tag-${name}`]);
  const retagged = await api.updateShortUrl({ shortCode: tagged.shortCode }, { tags: [`tag-${name}`] });
  assert.deepEqual([retagged.title, retagged.tags], ["SDK title", [`tag-${name}`]]);
  assert.ok((await api.listTags()).data.includes(`tag-${name}`));
  const stat = (await api.tagsStats()).data.find((t) => t.tag === `tag-${name}`);
  assert.deepEqual([stat.shortUrlsCount, stat.visitsSummary.total], [1, 0]);
  await api.editTag({ oldName: `tag-${name}`, newName: `renamed-${name}` });
  assert.deepEqual((await api.getShortUrl({ shortCode: tagged.shortCode })).tags, [`renamed-${name}`]);
  const byTag = await api.listShortUrls({ tags: [`renamed-${name}`] });
  assert.deepEqual(byTag.data.map((s) => s.shortCode), [tagged.shortCode]);
  await api.deleteTags([`renamed-${name}`]);
  assert.deepEqual((await api.getShortUrl({ shortCode: tagged.shortCode })).tags, []);
  await rejectsWith(api.editTag({ oldName: 'never-a-tag', newName: 'x' }), 'tag-not-found');
  await api.deleteShortUrl({ shortCode: tagged.shortCode });
  await rejectsWith(api.createShortUrl({ longUrl: 'not a url' }), 'invalid-data');

  await api.deleteShortUrl({ shortCode: generated.shortCode });
  await rejectsWith(api.getShortUrl({ shortCode: generated.shortCode }), 'short-url-not-found');

  // Visit figures come from the click aggregators (no clicks in this run: zeros, in shape).
  const overview = await api.getVisitsOverview();
  assert.deepEqual(overview.nonOrphanVisits, { total: 0, nonBots: 0, bots: 0 });
  assert.deepEqual(overview.orphanVisits, { total: 0, nonBots: 0, bots: 0 });
  assert.deepEqual((await api.getShortUrl({ shortCode: slug })).visitsSummary, { total: 0, nonBots: 0, bots: 0 });

  const intruder = new ShlinkApiClient(makeClient(), { baseUrl, apiKey: 'wrong-key' });
  await rejectsWith(intruder.listShortUrls(), 'invalid-api-key');
  results[name] = { slug, deleted: generated.shortCode };
}
console.log(JSON.stringify({ ok: true, ...results }));
