// The stats page: no per-key content is served; this script reads the key from the path,
// asks for an API key (kept in sessionStorage only), and calls the JSON API.
"use strict";

const KEY_STORE = "ricochet-api-key";

function linkKey() {
  const parts = location.pathname.split("/");
  return decodeURIComponent(parts[parts.length - 1] || "");
}

function fill(id, text) {
  document.getElementById(id).textContent = String(text);
}

function table(id, rows) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren();
  if (rows.length === 0) {
    const tr = body.insertRow();
    const td = tr.insertCell();
    td.colSpan = 2;
    td.textContent = "none";
    return;
  }
  for (const r of rows) {
    const tr = body.insertRow();
    tr.insertCell().textContent = r.value;
    const n = tr.insertCell();
    n.className = "n";
    n.textContent = String(r.clicks);
  }
}

function chart(days) {
  const svg = document.getElementById("chart");
  svg.replaceChildren();
  const max = Math.max(1, ...days.map((d) => d.clicks));
  const w = 600 / days.length;
  days.forEach((d, i) => {
    const h = (d.clicks / max) * 150;
    const rect = document.createElementNS("http://www.w3.org/2000/svg", "rect");
    rect.setAttribute("x", String(i * w + 1));
    rect.setAttribute("y", String(160 - h));
    rect.setAttribute("width", String(Math.max(1, w - 2)));
    rect.setAttribute("height", String(h));
    rect.dataset.day = d.day;
    rect.dataset.clicks = String(d.clicks);
    const title = document.createElementNS("http://www.w3.org/2000/svg", "title");
    title.textContent = `${d.day}: ${d.clicks}`;
    rect.appendChild(title);
    svg.appendChild(rect);
  });
}

async function load() {
  const apiKey = sessionStorage.getItem(KEY_STORE);
  if (!apiKey) {
    return;
  }
  const bots = document.getElementById("bots").value;
  const key = linkKey();
  fill("status", "loading…");
  let res;
  try {
    res = await fetch(`/api/v1/urls/${encodeURIComponent(key)}/stats?bots=${bots}`, {
      headers: { Authorization: `Bearer ${apiKey}` },
    });
  } catch (e) {
    fill("status", `cannot reach the server: ${e}`);
    return;
  }
  if (!res.ok) {
    let detail = res.statusText;
    try {
      detail = (await res.json()).detail || detail;
    } catch (_) {
      // not a problem document
    }
    if (res.status === 401) {
      sessionStorage.removeItem(KEY_STORE);
    }
    fill("status", `${res.status}: ${detail}`);
    return;
  }
  const s = await res.json();
  fill("status", "");
  fill("card-clicks", s.summary.clicks);
  fill("card-humans", s.summary.human_clicks);
  fill("card-bots", s.summary.bot_clicks);
  fill("card-uniques", s.summary.unique_visitors);
  fill("range", `${s.from} to ${s.to}`);
  chart(s.days);
  table("referrers", s.referrers);
  table("countries", s.countries);
  table("browsers", s.browsers);
  table("os", s.os);
  fill(
    "note",
    `Complete until ${s.complete_until}. Unique visitors: ${s.summary.unique_visitors_method}. ` +
      `Clicks dropped by the server since start: ${s.dropped_clicks}.`,
  );
  document.getElementById("stats").hidden = false;
}

document.addEventListener("DOMContentLoaded", () => {
  fill("key", linkKey());
  document.getElementById("auth").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(KEY_STORE, document.getElementById("api-key").value);
    load();
  });
  document.getElementById("bots").addEventListener("change", load);
  load();
});
