// API key roles through Shlink's official JS SDK (issue 26): an author-only key sees, edits and
// deletes only its own short URLs; a read-only key reads everything and writes nothing; a
// domain-only key lists only its domain and may not create elsewhere. Usage:
// node roles.mjs BASE_URL AUTHOR_KEY OTHER_AUTHOR_KEY READER_KEY BRAND_KEY. Prints a JSON line
// with "ok": true, or the first failed expectation and exits 1. Run by tests/shlink_sdk.rs.
import assert from 'node:assert/strict';
import { ShlinkApiClient } from '@shlinkio/shlink-js-sdk';
import { FetchHttpClient } from '@shlinkio/shlink-js-sdk/fetch';

const [baseUrl, authorKey, otherKey, readerKey, brandKey] = process.argv.slice(2);
const client = (apiKey) => new ShlinkApiClient(new FetchHttpClient(), { baseUrl, apiKey });
const rejectsWith = async (promise, status, typeEnd) => {
  try {
    await promise;
  } catch (e) {
    assert.equal(e.status, status, JSON.stringify(e));
    assert.ok(e.type.endsWith(`/${typeEnd}`), JSON.stringify(e));
    return e;
  }
  assert.fail(`expected a ${status} ${typeEnd}`);
};
const codes = (list) => list.data.map((s) => s.shortCode).sort();

const author = client(authorKey);
const other = client(otherKey);
const reader = client(readerKey);
const brand = client(brandKey);

const mine = await author.createShortUrl({ longUrl: 'https://example.com/roles/mine', customSlug: 'roles-mine' });
const theirs = await other.createShortUrl({ longUrl: 'https://example.com/roles/theirs', customSlug: 'roles-theirs' });
assert.equal(mine.shortCode, 'roles-mine');

// Author-only: its own links only, everywhere; another's is "not found", never "forbidden".
assert.deepEqual(codes(await author.listShortUrls({ itemsPerPage: 50 })), ['roles-mine']);
assert.deepEqual(codes(await other.listShortUrls({ itemsPerPage: 50 })), ['roles-theirs']);
await rejectsWith(author.getShortUrl({ shortCode: theirs.shortCode }), 404, 'short-url-not-found');
await rejectsWith(author.updateShortUrl({ shortCode: theirs.shortCode }, { longUrl: 'https://evil.example/' }), 404, 'short-url-not-found');
await rejectsWith(author.deleteShortUrl({ shortCode: theirs.shortCode }), 404, 'short-url-not-found');
const edited = await author.updateShortUrl({ shortCode: mine.shortCode }, { longUrl: 'https://example.com/roles/mine2' });
assert.equal(edited.longUrl, 'https://example.com/roles/mine2');

// Read-only: reads all, writes nothing.
assert.deepEqual(codes(await reader.listShortUrls({ itemsPerPage: 50 })), ['roles-mine', 'roles-theirs']);
assert.equal((await reader.getShortUrl({ shortCode: theirs.shortCode })).longUrl, 'https://example.com/roles/theirs');
await rejectsWith(reader.createShortUrl({ longUrl: 'https://example.com/roles/r' }), 403, 'read-only-key');
await rejectsWith(reader.deleteShortUrl({ shortCode: mine.shortCode }), 403, 'read-only-key');

// Domain-only: its domain's links and domain list; no creates elsewhere.
const branded = await brand.createShortUrl({ longUrl: 'https://example.com/roles/brand', domain: 'go.brand.com' });
assert.equal(branded.domain, 'go.brand.com');
assert.deepEqual((await brand.listDomains()).data.map((d) => d.domain), ['go.brand.com']);
assert.deepEqual(codes(await brand.listShortUrls({ itemsPerPage: 50 })), [branded.shortCode]);
await rejectsWith(brand.createShortUrl({ longUrl: 'https://example.com/roles/x' }), 403, 'domain-not-allowed');
await rejectsWith(brand.getShortUrl({ shortCode: mine.shortCode }), 404, 'short-url-not-found');
// Changing a domain's redirects is for admin keys only, even on the key's own domain.
await rejectsWith(brand.editDomainRedirects({ domain: 'go.brand.com', baseUrlRedirect: null }), 403, 'admin-only');
await rejectsWith(reader.editDomainRedirects({ domain: 'go.brand.com', baseUrlRedirect: null }), 403, 'admin-only');

// The other author deletes its own; the first author's link is untouched.
await other.deleteShortUrl({ shortCode: theirs.shortCode });
assert.equal((await author.getShortUrl({ shortCode: mine.shortCode })).longUrl, 'https://example.com/roles/mine2');
console.log(JSON.stringify({ ok: true, mine: mine.shortCode, theirs: theirs.shortCode }));
