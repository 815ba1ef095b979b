//! `/livez`, `/healthz`, `/readyz`: what the seed's "Kubernetes Probes" ask, over the shared
//! counters every core publishes at its sweep. Cold path: answers are formatted here.
//!
//! - **live**: every core's loop made progress (its sweep heartbeat) within
//!   [`LIVENESS_STALL_MS`]. A stalled or deadlocked core fails it; a slow database does not.
//!   `/healthz` is the same check with the plain answer it always had.
//! - **ready** (`/readyz`): safe to take redirect traffic: every core opened its shards,
//!   joined the mesh and armed its listener, and the server is not draining.
//! - **ready for creates** (`/readyz?creates`): also every core holds an ID range (so the
//!   authority answered) and the fleet authority is not fenced. Kept apart on purpose: gating
//!   redirect readiness on the allocator would take a node's redirects out of rotation during a
//!   database outage, the opposite of what fleet mode promises; route creates by this one.
//!
//! Readiness is damped ([`Damped`]): it falls only after its checks failed for
//! [`READY_FALL_MS`] (draining, a missing core and a regeneration fall at once) and rises again only after they
//! passed for [`READY_RISE_MS`]; the first rise after start is immediate. `?verbose` (with or
//! without `creates`) answers JSON with one entry per check.

pub use crate::base::damped::{Damped, READY_FALL_MS, READY_RISE_MS};
use crate::node::shared::Shared;
use std::sync::atomic::Ordering;

/// A core whose sweep heartbeat is older than this is stalled: `/livez` fails. Sweeps run every
/// 100 ms and a parked core wakes at least every `PARK_MAX_MS` (100 ms): 2 s is 10 missed
/// sweeps, far from a busy core and well inside a typical probe period.
pub const LIVENESS_STALL_MS: u64 = 2_000;

/// One probe check.
struct Check {
    name: &'static str,
    ok: bool,
    detail: String,
}

/// What a probe answers: status 200 or 503, content type and body.
pub struct ProbeAnswer {
    pub ok: bool,
    pub json: bool,
    pub body: Vec<u8>,
}

/// Answers a probe path (`/livez`, `/healthz`, `/readyz`), or `None` for any other path.
pub fn answer(
    path: &[u8],
    query: Option<&[u8]>,
    shared: &Shared,
    blocklist: &crate::api::blocklist::Blocklist,
) -> Option<ProbeAnswer> {
    let params = query.unwrap_or_default();
    let has = |p: &[u8]| {
        params
            .split(|&b| b == b'&')
            .any(|kv| kv == p || kv.starts_with(&[p, b"="].concat()))
    };
    let verbose = has(b"verbose");
    let now_ms = shared.uptime_ms();
    let (ok, checks) = match path {
        b"/livez" | b"/healthz" => {
            let checks = vec![liveness(shared, now_ms)];
            (checks[0].ok, checks)
        }
        b"/readyz" => {
            let creates = has(b"creates");
            let mut checks = readiness_checks(shared, creates);
            checks.extend(blocklist_check(blocklist));
            let raw = checks.iter().all(|c| c.ok);
            // A regeneration (the `feed` check fails only then) may be serving links deleted
            // elsewhere: out of rotation at once, like a drain.
            let urgent = checks
                .iter()
                .any(|c| !c.ok && matches!(c.name, "draining" | "cores" | "feed"));
            let damped = if creates {
                &shared.ready_for_creates
            } else {
                &shared.ready
            };
            (damped.update(raw, urgent, now_ms), checks)
        }
        _ => return None,
    };
    let body = if verbose {
        let list: Vec<serde_json::Value> = checks
            .iter()
            .map(|c| serde_json::json!({"name": c.name, "ok": c.ok, "detail": c.detail}))
            .collect();
        serde_json::to_vec(&serde_json::json!({"ok": ok, "checks": list})).expect("json")
    } else if ok {
        let fenced = checks
            .iter()
            .find(|c| c.name == "fleet" && !c.detail.is_empty());
        match fenced {
            Some(c) if path == b"/readyz" => format!("ok\n{}\n", c.detail).into_bytes(),
            _ => b"ok\n".to_vec(),
        }
    } else {
        let failed: Vec<String> = checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| format!("{}: {}", c.name, c.detail))
            .collect();
        let failed = if failed.is_empty() {
            "recovering (checks pass; waiting out the rise delay)".to_string()
        } else {
            failed.join("\n")
        };
        format!("not ok\n{failed}\n").into_bytes()
    };
    Some(ProbeAnswer {
        ok,
        json: verbose,
        body,
    })
}

/// The abuse blocklist, if one is configured: reported, never gating (a list with bad lines
/// still loaded the rest, and one that cannot be read again keeps the last in force).
fn blocklist_check(b: &crate::api::blocklist::Blocklist) -> Option<Check> {
    if b.sources.is_empty() {
        return None;
    }
    let mut detail = format!("{} entries from {}", b.len(), b.sources.join(" and "));
    if b.bad_count > 0 {
        let lines: Vec<String> = b
            .bad
            .iter()
            .map(|l| format!("{}:{}: {}", l.source, l.line, l.reason))
            .collect();
        detail.push_str(&format!(
            "; {} bad lines skipped: {}",
            b.bad_count,
            lines.join("; ")
        ));
    }
    Some(Check {
        name: "blocklist",
        ok: true,
        detail,
    })
}

fn liveness(shared: &Shared, now_ms: u64) -> Check {
    let stalled: Vec<String> = shared
        .counters
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let beat = c.heartbeat_ms.load(Ordering::Relaxed);
            let age = now_ms.saturating_sub(beat);
            (beat != 0 && age > LIVENESS_STALL_MS)
                .then(|| format!("core {i}: no progress for {age} ms"))
        })
        .collect();
    Check {
        name: "loops",
        ok: stalled.is_empty(),
        detail: if stalled.is_empty() {
            format!(
                "all {} core loops made progress within {LIVENESS_STALL_MS} ms",
                shared.cores
            )
        } else {
            stalled.join("; ")
        },
    }
}

fn readiness_checks(shared: &Shared, creates: bool) -> Vec<Check> {
    let serving = shared.ready_cores.load(Ordering::Acquire);
    let draining = shared.draining.load(Ordering::Relaxed);
    let mut checks = vec![
        Check {
            name: "cores",
            ok: serving == shared.cores,
            detail: format!(
                "{serving} of {} cores opened their shards, joined the mesh and armed their listener",
                shared.cores
            ),
        },
        Check {
            name: "draining",
            ok: !draining,
            detail: if draining { "draining (SIGTERM): finishing in-flight requests" } else { "not draining" }.into(),
        },
    ];
    if let Some(f) = &shared.fleet {
        checks.push(feed_check(&f.snapshot()));
        if let Some(r) = f.refused() {
            // Redirects of held links are safe: reported; gating only `?creates`.
            checks.push(Check {
                name: "fleet-database",
                ok: !creates,
                detail: format!("fleet database refused ({}): {}", r.slug(), r.explain()),
            });
        }
    }
    let fenced = shared.fleet.as_ref().is_some_and(|f| f.is_fenced());
    if creates {
        let empty: Vec<usize> = shared
            .counters
            .iter()
            .enumerate()
            .filter(|(_, c)| c.ids_remaining.load(Ordering::Relaxed) == 0)
            .map(|(i, _)| i)
            .collect();
        checks.push(Check {
            name: "ids",
            ok: empty.is_empty(),
            detail: if empty.is_empty() {
                "every core holds an ID range".into()
            } else {
                format!(
                    "no ID range on core(s) {empty:?}: the allocation authority has not answered"
                )
            },
        });
        checks.push(Check {
            name: "fleet",
            ok: !fenced,
            detail: if fenced { FENCED.into() } else { String::new() },
        });
    } else if fenced {
        // Redirects are safe when fenced: reported, not gating.
        checks.push(Check {
            name: "fleet",
            ok: true,
            detail: FENCED.into(),
        });
    }
    checks
}

/// Fleet mode: how far behind the change feed is. Reported, not gating: a node whose feed
/// lags (or whose database is down) still serves every link it holds, which is what fleet mode
/// promises during an outage; the lag is for the operator (and `/metrics`). It gates once the
/// feed's cursor cannot be continued and the node regenerates its links from a snapshot
/// (`fleet_mode::regen`): until the swap it may be serving links deleted elsewhere.
fn feed_check(f: &fleet::FleetStatsSnapshot) -> Check {
    if f.regenerating {
        return Check {
            name: "feed",
            ok: false,
            detail: "change feed REGENERATING: this node's cursor cannot be continued (behind \
                     the tombstone horizon, or ahead of a restored database); its links are \
                     being rebuilt from a database snapshot and swapped in while it serves"
                .into(),
        };
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut detail = match f.feed_caught_up_ms {
        0 => "change feed: not caught up yet since start".to_owned(),
        t => format!(
            "change feed: caught up {} ms ago; {} rows applied, {} failed polls or applies",
            now_ms.saturating_sub(t),
            f.feed_rows,
            f.feed_failures
        ),
    };
    if f.feed_rows_unusable != 0 {
        detail.push_str(&format!(
            "; {} feed rows NOT APPLIED: not links this node can hold (see the log)",
            f.feed_rows_unusable
        ));
    }
    if f.feed_held_by_pid != 0 {
        detail.push_str(&format!(
            "; HELD BACK by the open transaction of database backend pid {} (open {} s): rows \
             committed after it wait until it ends (pg_stat_activity.backend_xid)",
            f.feed_held_by_pid, f.feed_held_for_s
        ));
    }
    Check {
        name: "feed",
        ok: true,
        detail,
    }
}

const FENCED: &str = "fleet allocation: fenced (the authority lost confirmed allocations; generated-key creates refused, see docs/fleet.md)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_falls_late_rises_late_but_first_rise_is_at_once() {
        let d = Damped::default();
        assert!(!d.update(false, false, 10));
        assert!(d.update(true, false, 20), "first rise at once");
        // A short failure does not flip it.
        assert!(d.update(false, false, 100));
        assert!(d.update(false, false, 100 + READY_FALL_MS - 1));
        assert!(d.update(true, false, 100 + READY_FALL_MS));
        // A long one does.
        assert!(d.update(false, false, 5_000));
        assert!(!d.update(false, false, 5_000 + READY_FALL_MS));
        // Rising again needs the checks to pass for READY_RISE_MS.
        assert!(!d.update(true, false, 8_000));
        assert!(!d.update(true, false, 8_000 + READY_RISE_MS - 1));
        assert!(d.update(true, false, 8_000 + READY_RISE_MS));
        // Urgent failures fall at once.
        assert!(!d.update(false, true, 20_000));
    }
}
