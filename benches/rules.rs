//! Redirect rules (`shards::rules`): a link with 5 rules of 3 conditions each, evaluated for
//! one visit (issue 27 asks for at most 100 ns). The visitor sends what a desktop browser
//! sends. Cases:
//! - `5x3_none_match`: in every rule two conditions match and a query value fails (a visit
//!   learns the device, the address, the dates and the query; no rule needs its languages
//!   once the query is known);
//! - `5x3_last_matches`: the same, the fifth rule matching;
//! - `5x3_every_kind`: every rule fails, each at a different kind of fact (a language, a
//!   date, an address) after its other two match: a visit works out every kind of fact but
//!   countries (the compiled form's worst case: each kind once);
//! - `5x3_device_fails`: each rule's device condition fails (the common case of device
//!   targeting);
//! - `device_classes`: the `User-Agent` classification alone.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use shards::rules::{encode, ip16, parse_condition, Condition, Rule, RuleSet, Visitor};

const UA: &[u8] = b"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";
const LANG: &[u8] = b"en-US,en;q=0.9,de;q=0.8";
const QUERY: &[u8] = b"utm_source=newsletter&utm_medium=email&utm_campaign=winter&ref=abc123";

fn c(t: &str, key: Option<&str>, v: &str) -> Condition {
    parse_condition(t, key, v).expect("a valid condition")
}

/// 5 rules; in each, `first` and `second` match the visitor and the third (a query value) does
/// not, unless `last_matches` makes the fifth rule's third condition match.
fn program(last_matches: bool) -> Vec<u8> {
    let conds = [
        (c("device", None, "desktop"), c("language", None, "en")),
        (
            c("ip-address", None, "192.0.2.0/24"),
            c("after-date", None, "2001-01-01T00:00:00Z"),
        ),
        (
            c("device", None, "windows"),
            c("any-value-query-param", Some("ref"), ""),
        ),
        (
            c("language", None, "en-us"),
            c("ip-address", None, "192.0.2.7"),
        ),
        (
            c("before-date", None, "9000-01-01T00:00:00Z"),
            c("device", None, "desktop"),
        ),
    ];
    let rules: Vec<Rule> = conds
        .into_iter()
        .enumerate()
        .map(|(i, (a, b))| {
            let value = if last_matches && i == 4 {
                "winter".to_string()
            } else {
                format!("spring{i}")
            };
            Rule {
                target: format!("https://rule{i}.example/landing?campaign={i}"),
                conditions: vec![a, b, c("query-param", Some("utm_campaign"), &value)],
            }
        })
        .collect();
    encode(&rules).expect("within the limits")
}

/// 5 rules of 3 conditions whose first condition (a device) fails for this visitor.
fn mobile_program() -> Vec<u8> {
    let rules: Vec<Rule> = ["android", "ios", "mobile", "android", "ios"]
        .iter()
        .enumerate()
        .map(|(i, d)| Rule {
            target: format!("https://app{i}.example/"),
            conditions: vec![
                c("device", None, d),
                c("language", None, "de"),
                c("query-param", Some("k"), "v"),
            ],
        })
        .collect();
    encode(&rules).expect("within the limits")
}

/// 5 rules of 3 conditions, each failing at a different kind of fact after its other two
/// match; together they need every kind of fact but countries.
fn every_kind_program() -> Vec<u8> {
    let kinds = [
        (
            c("device", None, "desktop"),
            c("query-param", Some("utm_campaign"), "winter"),
            c("language", None, "fr"),
        ),
        (
            c("device", None, "desktop"),
            c("any-value-query-param", Some("ref"), ""),
            c("before-date", None, "2001-01-01T00:00:00Z"),
        ),
        (
            c("device", None, "windows"),
            c("query-param", Some("utm_source"), "newsletter"),
            c("ip-address", None, "10.0.0.0/8"),
        ),
        (
            c("after-date", None, "2001-01-01T00:00:00Z"),
            c("ip-address", None, "192.0.2.0/24"),
            c("language", None, "it"),
        ),
        (
            c("device", None, "windows"),
            c("any-value-query-param", Some("ref"), ""),
            c("language", None, "nl"),
        ),
    ];
    let rules: Vec<Rule> = kinds
        .into_iter()
        .enumerate()
        .map(|(i, (a, b, z))| Rule {
            target: format!("https://k{i}.example/"),
            conditions: vec![a, b, z],
        })
        .collect();
    encode(&rules).expect("within the limits")
}

fn rules(cr: &mut Criterion) {
    let visitor = Visitor {
        user_agent: UA,
        accept_language: LANG,
        query: QUERY,
        ip: ip16("192.0.2.7".parse().expect("an address")),
        now_s: 1_790_000_000,
    };
    let none = program(false);
    let last = program(true);
    let mobile = mobile_program();
    let every_kind = every_kind_program();
    let mut g = cr.benchmark_group("rules");
    for (name, p) in [
        ("5x3_none_match", &none),
        ("5x3_last_matches", &last),
        ("5x3_every_kind", &every_kind),
        ("5x3_device_fails", &mobile),
    ] {
        let set = RuleSet::parse(p).expect("canonical");
        g.bench_function(name, |b| {
            b.iter(|| black_box(set).first_match(black_box(&visitor), &mut |_| None));
        });
    }
    assert!(RuleSet::parse(&none)
        .unwrap()
        .first_match(&visitor, &mut |_| None)
        .is_none());
    assert!(RuleSet::parse(&every_kind)
        .unwrap()
        .first_match(&visitor, &mut |_| None)
        .is_none());
    assert_eq!(
        RuleSet::parse(&last)
            .unwrap()
            .first_match(&visitor, &mut |_| None)
            .map(|m| m.index),
        Some(4)
    );
    g.bench_function("device_classes", |b| {
        b.iter(|| shards::rules::device_classes(black_box(UA)));
    });
    g.finish();
}

criterion_group!(benches, rules);
criterion_main!(benches);
