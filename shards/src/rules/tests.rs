use super::*;
use proptest::prelude::*;

const ANDROID: &[u8] = b"Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Mobile Safari/537.36";
const IPHONE: &[u8] = b"Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1";
const WINDOWS: &[u8] = b"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36";
const MAC: &[u8] = b"Mozilla/5.0 (Macintosh; Intel Mac OS X 14_1) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15";
const LINUX: &[u8] = b"Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0";
const CROS: &[u8] = b"Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36";

fn classes(ua: &[u8]) -> Vec<&'static str> {
    let bits = device_classes(ua);
    Device::ALL
        .into_iter()
        .filter(|d| bits & d.bit() != 0)
        .map(Device::as_str)
        .collect()
}

#[test]
fn user_agents_fall_in_the_classes_shlink_names() {
    assert_eq!(classes(ANDROID), ["android", "mobile"]);
    assert_eq!(classes(IPHONE), ["ios", "mobile"]);
    assert_eq!(classes(WINDOWS), ["windows", "desktop"]);
    assert_eq!(classes(MAC), ["macos", "desktop"]);
    assert_eq!(classes(LINUX), ["linux", "desktop"]);
    assert_eq!(classes(CROS), ["chromeos", "desktop"]);
    assert!(classes(b"curl/8.5.0").is_empty());
    assert!(classes(b"").is_empty());
}

#[test]
fn languages_match_by_language_and_region_with_shlinks_quality_floor() {
    let h = b"es-ES, en-US;q=0.95, de;q=0.8, fr;q=0";
    assert!(accepts_language(h, b"es"));
    assert!(accepts_language(h, b"es-es"));
    assert!(!accepts_language(h, b"es-mx"));
    assert!(accepts_language(h, b"en"), "q=0.95 is at least 0.9");
    assert!(!accepts_language(h, b"de"), "q=0.8 is below the floor");
    assert!(!accepts_language(h, b"fr"), "q=0 refuses");
    assert!(!accepts_language(b"*", b"en"));
    assert!(!accepts_language(b"", b"en"));
    assert!(accepts_language(b"EN", b"en"), "case-insensitive");
    assert!(
        !accepts_language(b"en;q=x", b"en"),
        "a malformed q is no match"
    );
    assert!(accepts_language(b"en;q=1.000", b"en"));
    assert!(!accepts_language(b"en;q=1.5", b"en"));
}

#[test]
fn query_conditions_read_decoded_names_and_values_and_the_last_repeat() {
    let q = b"utm_source=mail&lang=de&lang=fr&flag&empty=&na%6De=x+y";
    assert_eq!(last_param(q, b"lang"), Some(Some(&b"fr"[..])));
    assert_eq!(last_param(q, b"flag"), Some(None));
    assert_eq!(last_param(q, b"empty"), Some(Some(&b""[..])));
    assert_eq!(last_param(q, b"name"), Some(Some(&b"x+y"[..])));
    assert!(decoded_eq(b"x+y", b"x y"));
    assert!(decoded_eq(b"%41%zz", b"A%zz"));
    assert_eq!(last_param(q, b"missing"), None);
}

fn rule(target: &str, conditions: Vec<Condition>) -> Rule {
    Rule {
        target: target.into(),
        conditions,
    }
}

fn visitor<'a>(ua: &'a [u8], lang: &'a [u8], query: &'a [u8], ip: &str, now_s: u64) -> Visitor<'a> {
    Visitor {
        user_agent: ua,
        accept_language: lang,
        query,
        ip: ip16(ip.parse().unwrap()),
        now_s,
    }
}

#[test]
fn the_first_rule_whose_conditions_all_match_wins() {
    let rules = vec![
        rule(
            "https://a.example/android-de",
            vec![
                Condition::Device(Device::Android),
                Condition::Language("de".into()),
            ],
        ),
        rule(
            "https://a.example/android",
            vec![Condition::Device(Device::Android)],
        ),
        rule(
            "https://a.example/office",
            vec![parse_ip_condition("10.0.0.0/8").unwrap()],
        ),
        rule(
            "https://a.example/v6",
            vec![parse_ip_condition("2001:db8::/32").unwrap()],
        ),
        rule(
            "https://a.example/promo",
            vec![
                Condition::QueryEquals {
                    key: "promo".into(),
                    value: "x y".into(),
                },
                Condition::After(100),
                Condition::Before(200),
            ],
        ),
        rule("https://a.example/fr", vec![Condition::Country(*b"FR")]),
    ];
    let program = encode(&rules).unwrap();
    let set = RuleSet::parse(&program).unwrap();
    let mut no_geo = |_: &[u8; 16]| None;
    let at = |v: &Visitor<'_>, geo: &mut dyn FnMut(&[u8; 16]) -> Option<[u8; 2]>| {
        set.first_match(v, geo)
            .map(|m| (m.index, String::from_utf8(m.target.to_vec()).unwrap()))
    };
    let v = visitor(ANDROID, b"de-DE,de;q=0.9", b"", "192.0.2.1", 0);
    assert_eq!(
        at(&v, &mut no_geo),
        Some((0, "https://a.example/android-de".into()))
    );
    let v = visitor(ANDROID, b"en", b"", "192.0.2.1", 0);
    assert_eq!(at(&v, &mut no_geo).unwrap().0, 1);
    let v = visitor(WINDOWS, b"en", b"", "10.1.2.3", 0);
    assert_eq!(at(&v, &mut no_geo).unwrap().0, 2);
    let v = visitor(WINDOWS, b"en", b"", "2001:db8::7", 0);
    assert_eq!(at(&v, &mut no_geo).unwrap().0, 3);
    let v = visitor(WINDOWS, b"en", b"a=1&promo=x%20y", "192.0.2.1", 150);
    assert_eq!(at(&v, &mut no_geo).unwrap().0, 4);
    let v = visitor(WINDOWS, b"en", b"promo=x%20y", "192.0.2.1", 200);
    assert_eq!(at(&v, &mut no_geo), None, "before-date is strict");
    let mut asked = 0;
    let mut fr = |_: &[u8; 16]| {
        asked += 1;
        Some(*b"FR")
    };
    let v = visitor(WINDOWS, b"en", b"", "192.0.2.1", 0);
    assert_eq!(at(&v, &mut fr).unwrap().0, 5);
    assert_eq!(asked, 1);
    let mut asked = 0;
    let mut never = |_: &[u8; 16]| {
        asked += 1;
        None
    };
    let v = visitor(ANDROID, b"en", b"", "192.0.2.1", 0);
    at(&v, &mut never);
    assert_eq!(asked, 0, "no country lookup when an earlier rule matched");
}

#[test]
fn ip_conditions_parse_as_shlink_writes_them() {
    assert_eq!(
        parse_ip_condition("192.168.*.*").unwrap(),
        parse_ip_condition("192.168.0.0/16").unwrap()
    );
    assert_eq!(
        parse_ip_condition("1.2.3.4").unwrap(),
        parse_ip_condition("1.2.3.4/32").unwrap()
    );
    for bad in [
        "1.2.*.4",
        "*.*.*.*.*",
        "10.0.0.1/8",
        "1.2.3.4/33",
        "::1/129",
        "x",
        "1.2.3",
    ] {
        assert!(parse_ip_condition(bad).is_err(), "{bad}");
    }
    for s in [
        "10.0.0.0/8",
        "1.2.3.4",
        "2001:db8::/32",
        "::1",
        "0.0.0.0/0",
        "::/0",
    ] {
        let Condition::Ip { addr, prefix } = parse_ip_condition(s).unwrap() else {
            panic!()
        };
        assert_eq!(format_ip_condition(&addr, prefix), s);
    }
}

#[test]
fn limits_are_refused_naming_the_field() {
    let one = rule("https://a.example/", vec![Condition::Device(Device::Ios)]);
    let many = vec![one.clone(); MAX_RULES_PER_LINK + 1];
    assert!(encode(&many).unwrap_err().0.contains("at most 16"));
    let wide = rule(
        "https://a.example/",
        vec![Condition::Device(Device::Ios); 9],
    );
    assert!(encode(&[wide])
        .unwrap_err()
        .0
        .starts_with("redirect_rules[0].conditions"));
    let none = rule("https://a.example/", vec![]);
    assert!(encode(&[none]).is_err());
    let long = format!(
        "https://a.example/{}",
        "x".repeat(MAX_RULE_TARGET_BYTES - 18)
    );
    let big = rule(&long, vec![Condition::Device(Device::Ios)]);
    let e = encode(&vec![big; 9]).unwrap_err().0;
    assert!(e.contains("bytes"), "{e}");
    assert!(parse_condition("language", None, "e").is_err());
    assert!(parse_condition("language", None, "es_ES").is_ok());
    assert!(parse_condition("query-param", None, "x").is_err());
    assert!(parse_condition("geolocation-country-code", None, "fra").is_err());
    assert!(parse_condition("weather", None, "rain").is_err());
    assert!(parse_condition("before-date", None, "tomorrow").is_err());
}

fn any_condition() -> impl Strategy<Value = Condition> {
    prop_oneof![
        (1u8..=8).prop_map(|d| Condition::Device(Device::from_byte(d).unwrap())),
        "[a-z]{2,3}(-[a-z0-9]{1,8})?".prop_map(Condition::Language),
        ("[a-z_%+]{1,12}", ".{0,20}")
            .prop_map(|(key, value)| Condition::QueryEquals { key, value }),
        "[a-z]{1,12}".prop_map(Condition::QueryPresent),
        "[a-z]{1,12}".prop_map(Condition::QueryValueless),
        (any::<[u8; 16]>(), 0u8..=128).prop_map(|(a, p)| Condition::Ip {
            addr: masked(&a, p),
            prefix: p
        }),
        "[A-Z]{2}".prop_map(|c| Condition::Country(c.as_bytes().try_into().unwrap())),
        (0..=MAX_DATE_S).prop_map(Condition::Before),
        (0..=MAX_DATE_S).prop_map(Condition::After),
    ]
}

fn any_rules() -> impl Strategy<Value = Vec<Rule>> {
    proptest::collection::vec(
        (
            "https://[a-z]{1,10}\\.example/[a-z]{0,10}",
            proptest::collection::vec(any_condition(), 1..=MAX_CONDITIONS_PER_RULE),
        )
            .prop_map(|(target, conditions)| Rule { target, conditions }),
        0..=4,
    )
}

proptest! {
    #[test]
    fn programs_round_trip_through_bytes_json_and_blocks(rules in any_rules()) {
        let program = encode(&rules).unwrap();
        let set = RuleSet::parse(&program).unwrap();
        prop_assert_eq!(set.decode().unwrap(), rules.clone());
        let mut block = Vec::new();
        encode_block(set, &mut block);
        prop_assert_eq!(block.len(), block_len(set));
        if !rules.is_empty() {
            prop_assert_eq!(decode_block(&block).unwrap(), (set, block.len()));
        }
        // JSON, as exports and the API write it, reads back to the same rules.
        let json = to_json(&rules);
        let back: Vec<Rule> = json.as_array().unwrap().iter().map(|r| Rule {
            target: r["target"].as_str().unwrap().into(),
            conditions: r["conditions"].as_array().unwrap().iter().map(|c| parse_condition(
                c["type"].as_str().unwrap(), c["key"].as_str(), c["value"].as_str().unwrap()).unwrap()).collect(),
        }).collect();
        prop_assert_eq!(back, rules);
    }

    /// Only canonical programs parse, and whatever parses evaluates without a panic.
    #[test]
    fn any_bytes_parse_or_fail_and_evaluate_without_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), q in ".{0,40}") {
        if let Ok(set) = RuleSet::parse(&bytes) {
            prop_assert_eq!(encode(&set.decode().unwrap()).unwrap(), bytes.clone());
        }
        let v = Visitor { query: q.as_bytes(), ..Visitor::default() };
        let _ = RuleSet::trusted(&bytes).first_match(&v, &mut |_| Some(*b"DE"));
    }
}

proptest! {
    /// The query split once per evaluation finds what a scan of the raw query finds.
    #[test]
    fn split_parameters_agree_with_a_scan(q in "([a-c%+2=&]{0,6}){0,24}", key in "[a-c% +]{0,3}") {
        let p = Params::split(q.as_bytes());
        prop_assert_eq!(p.last(key.as_bytes()), last_param(q.as_bytes(), key.as_bytes()));
    }
}
