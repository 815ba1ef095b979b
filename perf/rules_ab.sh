#!/usr/bin/env bash
# Redirect rules' evaluation (issue 27), two versions side by side in ONE binary: criterion's
# `benches/rules.rs` swings by 10-40% between runs on a shared VM, more than the changes it
# should judge. This builds a scratch crate (outside the workspace) holding the rules module
# (`shards/src/rules.rs`, or `shards/src/rules/` since 2026-12-08) of two revisions as two
# modules, and times the bench's cases for each, alternating, in rounds: per case, 300 batches
# of 2,000 evaluations, the fastest batch printed (the least disturbed).
#
#   perf/rules_ab.sh OLD_REV [NEW_REV]     NEW_REV defaults to the working tree
#
# Cases (the bench's programs and visitor: a desktop Chrome, `en-US,en;q=0.9,de;q=0.8`, a
# 4-parameter UTM query): 5x3 with no rule matching (all 15 conditions evaluated), the last
# matching, each rule's first condition (a device) failing; every rule failing at a different
# kind of fact after its other two match (every kind of fact but countries worked out, in either
# form); 15 date conditions (the walk alone); `device_classes` alone. Prints every round's lines, then per case the fastest of each side
# and the median of the per-round new/old ratios.
#
# Settings: ROUNDS=8, CPU=1 (taskset), WORK=${TMPDIR:-/tmp}/ricochet-rules-ab.
set -euo pipefail

old="${1:?usage: perf/rules_ab.sh OLD_REV [NEW_REV]}"
new="${2:-}"
rounds="${ROUNDS:-8}"
cpu="${CPU:-1}"
repo="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
work="${WORK:-${TMPDIR:-/tmp}/ricochet-rules-ab}"
mkdir -p "$work/src"

# A revision's rules as a module named OUT: `shards/src/rules.rs` (one file, before
# 2026-12-08) or `shards/src/rules/*.rs` (a directory); their `crate::` paths point at the
# shards crate.
module() { # REV|"" OUT
    local rev="$1" out="$2" files f src other
    rm -rf "$work/src/$out" "$work/src/$out.rs"
    if [[ -n "$rev" ]]; then
        files="$(git -C "$repo" ls-tree -r --name-only "$rev" -- shards/src/rules.rs shards/src/rules/)"
    else
        files="$(cd "$repo" && ls shards/src/rules.rs shards/src/rules/*.rs 2>/dev/null || true)"
    fi
    [[ -n "$files" ]] || { echo "rules_ab.sh: no shards/src/rules at ${rev:-the working tree}" >&2; exit 1; }
    for f in $files; do
        if [[ -n "$rev" ]]; then src="$(git -C "$repo" show "$rev:$f")"; else src="$(cat "$repo/$f")"; fi
        other="$(grep -o 'crate::[a-z_]*' <<<"$src" | sort -u | grep -v -e '^crate::link$' -e '^crate::timefmt$' -e '^crate::rules$' || true)"
        if [[ -n "$other" ]]; then
            echo "rules_ab.sh: $f at ${rev:-the working tree} uses $other; teach this script to map it" >&2
            exit 1
        fi
        case "$f" in
            shards/src/rules.rs) dest="$work/src/$out.rs" ;;
            *) mkdir -p "$work/src/$out"; dest="$work/src/$out/${f#shards/src/rules/}" ;;
        esac
        sed "s/crate::link::/shards::link::/g; s/crate::timefmt::/shards::timefmt::/g; s/crate::rules\\b/crate::$out/g" <<<"$src" >"$dest"
    done
}
module "$old" rules_old
module "$new" rules_new

cat >"$work/Cargo.toml" <<EOF
[package]
name = "rules-ab"
version = "0.1.0"
edition = "2021"
publish = false

[dependencies]
shards = { package = "ricochet-shards", path = "$repo/shards" }
serde = { version = "1", features = ["derive"] }
serde_json = "1"
memchr = "2"

# As the workspace's release profile.
[profile.release]
debug = 1
lto = "thin"
codegen-units = 4

[workspace]
EOF

cat >"$work/src/main.rs" <<'EOF'
#![allow(dead_code, unused_imports, clippy::all)]
mod rules_new;
mod rules_old;
use std::hint::black_box;

const UA: &[u8] = b"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";
const LANG: &[u8] = b"en-US,en;q=0.9,de;q=0.8";
const QUERY: &[u8] = b"utm_source=newsletter&utm_medium=email&utm_campaign=winter&ref=abc123";

fn time<F: FnMut()>(name: &str, mut f: F) {
    let mut per = Vec::with_capacity(300);
    for _ in 0..300 {
        let t = std::time::Instant::now();
        for _ in 0..2000 {
            f();
        }
        per.push(t.elapsed().as_nanos() as f64 / 2000.0);
    }
    per.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("{name:24} min {:7.1} ns  median {:7.1} ns", per[0], per[per.len() / 2]);
}

// Each side's evaluation in a function of its own, as the server's `Visit::first_match` holds
// it: inlined into one big `main`, the two sides' code came out differently from either.
macro_rules! evaluator {
    ($name:ident, $m:ident) => {
        #[inline(never)]
        fn $name(set: $m::RuleSet<'_>, v: &$m::Visitor<'_>) -> Option<u8> {
            set.first_match(v, &mut |_| None).map(|m| m.index)
        }
    };
}
evaluator!(evaluate_old, rules_old);
evaluator!(evaluate_new, rules_new);

// The bench's programs (benches/rules.rs), built with each side's own encoder.
macro_rules! side {
    ($m:ident, $evaluate:ident, $label:literal) => {{
        use $m as r;
        let c = |t: &str, k: Option<&str>, v: &str| r::parse_condition(t, k, v).unwrap();
        let program = |last: bool| {
            let conds = [
                (c("device", None, "desktop"), c("language", None, "en")),
                (c("ip-address", None, "192.0.2.0/24"), c("after-date", None, "2001-01-01T00:00:00Z")),
                (c("device", None, "windows"), c("any-value-query-param", Some("ref"), "")),
                (c("language", None, "en-us"), c("ip-address", None, "192.0.2.7")),
                (c("before-date", None, "9000-01-01T00:00:00Z"), c("device", None, "desktop")),
            ];
            let rules: Vec<r::Rule> = conds
                .into_iter()
                .enumerate()
                .map(|(i, (a, b))| {
                    let v = if last && i == 4 { "winter".to_string() } else { format!("spring{i}") };
                    r::Rule {
                        target: format!("https://rule{i}.example/landing?campaign={i}"),
                        conditions: vec![a, b, c("query-param", Some("utm_campaign"), &v)],
                    }
                })
                .collect();
            r::encode(&rules).unwrap()
        };
        let mobile: Vec<r::Rule> = ["android", "ios", "mobile", "android", "ios"]
            .iter()
            .enumerate()
            .map(|(i, d)| r::Rule {
                target: format!("https://app{i}.example/"),
                conditions: vec![c("device", None, d), c("language", None, "de"), c("query-param", Some("k"), "v")],
            })
            .collect();
        // Every rule fails, each at a different kind of fact, after its other two match: a
        // visit works out every kind of fact but countries, in either form (benches/rules.rs).
        let kinds = [
            (c("device", None, "desktop"), c("query-param", Some("utm_campaign"), "winter"), c("language", None, "fr")),
            (c("device", None, "desktop"), c("any-value-query-param", Some("ref"), ""), c("before-date", None, "2001-01-01T00:00:00Z")),
            (c("device", None, "windows"), c("query-param", Some("utm_source"), "newsletter"), c("ip-address", None, "10.0.0.0/8")),
            (c("after-date", None, "2001-01-01T00:00:00Z"), c("ip-address", None, "192.0.2.0/24"), c("language", None, "it")),
            (c("device", None, "windows"), c("any-value-query-param", Some("ref"), ""), c("language", None, "nl")),
        ];
        let kinds: Vec<r::Rule> = kinds
            .into_iter()
            .enumerate()
            .map(|(i, (a, b, z))| r::Rule {
                target: format!("https://k{i}.example/"),
                conditions: vec![a, b, z],
            })
            .collect();
        let dates: Vec<r::Rule> = (0..5)
            .map(|i| r::Rule {
                target: format!("https://d{i}.example/"),
                conditions: vec![r::Condition::After(1), r::Condition::After(2), r::Condition::Before(3)],
            })
            .collect();
        let v = r::Visitor {
            user_agent: UA,
            accept_language: LANG,
            query: QUERY,
            ip: r::ip16("192.0.2.7".parse().unwrap()),
            now_s: 1_790_000_000,
        };
        let (none, last) = (program(false), program(true));
        let (mobile, dates) = (r::encode(&mobile).unwrap(), r::encode(&dates).unwrap());
        let kinds = r::encode(&kinds).unwrap();
        assert!(r::RuleSet::parse(&kinds).unwrap().first_match(&v, &mut |_| None).is_none());
        assert!(r::RuleSet::parse(&none).unwrap().first_match(&v, &mut |_| None).is_none());
        assert_eq!(r::RuleSet::parse(&last).unwrap().first_match(&v, &mut |_| None).map(|m| m.index), Some(4));
        for (name, p) in [("5x3_none_match", &none), ("5x3_last_matches", &last), ("5x3_device_fails", &mobile), ("5x3_every_kind", &kinds), ("15_dates_walk_only", &dates)] {
            let set = r::RuleSet::parse(p).unwrap();
            time(&format!("{} {name}", $label), || {
                black_box($evaluate(black_box(set), black_box(&v)));
            });
        }
        time(&format!("{} device_classes", $label), || {
            black_box(r::device_classes(black_box(UA)));
        });
    }};
}

fn main() {
    let rounds: usize = std::env::var("ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(8);
    for round in 1..=rounds {
        println!("-- round {round}");
        // Alternate which side goes first.
        if round % 2 == 1 {
            side!(rules_old, evaluate_old, "old");
            side!(rules_new, evaluate_new, "new");
        } else {
            side!(rules_new, evaluate_new, "new");
            side!(rules_old, evaluate_old, "old");
        }
    }
}
EOF

(cd "$work" && CARGO_TARGET_DIR="$work/target" cargo build --release --quiet)
echo "old = $old ($(git -C "$repo" rev-parse --short "$old")), new = ${new:-the working tree}; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), CPU $cpu, $rounds rounds"
ROUNDS="$rounds" taskset -c "$cpu" "$work/target/release/rules-ab" | tee "$work/out.txt"
echo "-- per case: fastest batch of each side, and the median of the per-round new/old"
awk '
    /^-- round/ { r = $3; next }
    { side = $1; c = $2; v = $4; t[r, side, c] = v; cases[c] = 1; if (r > n) n = r
      if (!((side, c) in best) || v < best[side, c]) best[side, c] = v }
    END {
        for (c in cases) {
            k = 0
            for (i = 1; i <= n; i++) if (t[i, "old", c] > 0) ratio[++k] = t[i, "new", c] / t[i, "old", c]
            # insertion sort, then the median
            for (i = 2; i <= k; i++) { x = ratio[i]; j = i - 1; while (j > 0 && ratio[j] > x) { ratio[j + 1] = ratio[j]; j-- } ratio[j + 1] = x }
            m = (k % 2) ? ratio[(k + 1) / 2] : (ratio[k / 2] + ratio[k / 2 + 1]) / 2
            printf "%-20s old %7.1f ns  new %7.1f ns  new/old median %.3f\n", c, best["old", c], best["new", c], m
        }
    }' "$work/out.txt" | sort
