//! `clickmem`: memory of the click store per link-day, for the capacity report. Merges
//! N link-days (distinct generated 7-character keys, one day each) into a `ClickStore` the way
//! an owner's aggregator does, in `counts` shape (clicks only) or `full` shape (two unique
//! visitors and five facet values per link-day), and prints the resident memory it took, then
//! freezes the day (`shards::clicks::frozen`) and prints its file's bytes per link-day.
//!
//! Then the traffic workloads the latency benchmarks send (`loadgen --click-headers`): M clicks
//! (default 3 N) over N links with uniform and with Zipf(1.1) popularity, each click one delta
//! as an owner aggregator merges it: the visitor (one of 65,536 addresses and six user agents)
//! in the sketch, and its referrer (five hosts or none), country, browser, OS and device
//! (a crawler's as bot clicks). It prints the bytes per link-day held.
//!
//!   clickmem [N=1000000] [M=3N]

use clap::Parser;
use ricochet_tools::loadgen::zipf::{KeyDist, KeySampler};
use ricochet_tools::rng::Rng;
use shards::clicks::{hll, ClickStore, Delta, FacetCount, FacetKind, ShortKey};
use std::sync::Arc;

/// Memory of the click store per link-day.
#[derive(Parser)]
#[command(name = "clickmem")]
struct Args {
    /// Link-days of the fixed-shape workloads, and links of the traffic workloads.
    #[arg(default_value_t = 1_000_000)]
    links: u64,
    /// Clicks of the traffic workloads (default: 3 per link).
    clicks: Option<u64>,
}

/// Resident bytes now, after giving freed memory back (a workload measured after another must
/// not reuse its freed pages unseen).
fn rss_bytes() -> u64 {
    // SAFETY: malloc_trim has no preconditions.
    unsafe { libc::malloc_trim(0) };
    let s = std::fs::read_to_string("/proc/self/statm").expect("procfs");
    let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// The classes of the user agents `loadgen --click-headers` rotates through: browser, OS,
/// device, and whether it is a crawler.
const UA_CLASSES: [(&str, &str, &str, bool); 6] = [
    ("Chrome", "Windows", "desktop", false),
    ("Safari", "macOS", "desktop", false),
    ("Firefox", "Linux", "desktop", false),
    ("Mobile Safari", "iOS", "mobile", false),
    ("Chrome Mobile", "Android", "mobile", false),
    ("Googlebot", "Other", "bot", true),
];
/// The referrer hosts it rotates through, and none.
const REFERRERS: [&str; 6] = [
    "www.google.com",
    "t.co",
    "news.ycombinator.com",
    "www.reddit.com",
    "mail.example.com",
    "(direct)",
];

/// M clicks over N links with `dist` popularity, merged one delta per click; prints the
/// resident bytes per link-day held.
#[expect(
    clippy::too_many_lines,
    reason = "one measurement: RSS read before and after, with everything it allocates between the two readings"
)]
fn traffic(n: u64, m: u64, dist: &str) {
    let sampler = KeySampler::new(n, dist.parse::<KeyDist>().expect("a distribution"));
    let mut rng = Rng::new(1);
    let intern = |v: &str| -> Arc<str> { Arc::from(v) };
    let uas: Vec<[Arc<str>; 3]> = UA_CLASSES
        .iter()
        .map(|(b, o, d, _)| [intern(b), intern(o), intern(d)])
        .collect();
    let refs: Vec<Arc<str>> = REFERRERS.iter().map(|r| intern(r)).collect();
    let country = intern("ZZ");
    let before = rss_bytes();
    let mut store = ClickStore::default();
    let t0 = std::time::Instant::now();
    for c in 0..m {
        let i = sampler.sample(&mut rng);
        let key = format!("{:07x}", i.wrapping_mul(0x9E37_79B9) & 0xfff_ffff);
        let mix = c.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let ua = (mix >> 60) as usize % UA_CLASSES.len();
        let referrer = &refs[(mix >> 40) as usize % refs.len()];
        let ip = (mix >> 16) & 0xffff;
        let bot = UA_CLASSES[ua].3;
        let visitor = hll::update_of(
            (ip << 8 | ua as u64 ^ i.rotate_left(17)).wrapping_mul(0xff51_afd7_ed55_8ccd),
        );
        let facets = [
            (FacetKind::Referrer, referrer),
            (FacetKind::Country, &country),
            (FacetKind::Browser, &uas[ua][0]),
            (FacetKind::Os, &uas[ua][1]),
            (FacetKind::Device, &uas[ua][2]),
        ];
        store.merge(&Delta {
            key: ShortKey::new(key.as_bytes()),
            day: 20_000,
            clicks: 1,
            bot_clicks: u64::from(bot),
            humans: if bot { vec![] } else { vec![visitor] },
            bots: if bot { vec![visitor] } else { vec![] },
            facets: facets
                .iter()
                .map(|(kind, v)| FacetCount {
                    kind: *kind,
                    bot,
                    value: (*v).clone(),
                    count: 1,
                })
                .collect(),
        });
    }
    let merge_ns = t0.elapsed().as_nanos() as f64 / m as f64;
    let mut sink = Vec::new();
    store.encode_dirty(&mut sink);
    drop(sink);
    let after = rss_bytes();
    println!(
        "full, {dist}: {m} clicks on {} link-days, {:.0} bytes resident per link-day, {merge_ns:.0} ns per merge (one click, building its delta included)",
        store.link_days(),
        (after.saturating_sub(before)) as f64 / store.link_days() as f64,
    );
    // A restart: the same link-days read back from their state records (summed facets, no
    // longer one click's shape).
    let records: Vec<_> = store.to_records().collect();
    let days = store.link_days();
    drop(store);
    let before = rss_bytes();
    let mut restarted = ClickStore::default();
    for r in &records {
        restarted.apply(r);
    }
    let after = rss_bytes();
    // Click log bytes: the state records as written (a profile as a run of its five values)
    // and as they would be with every value once (the link-day's view).
    let (mut written, mut once) = (Vec::new(), Vec::new());
    for r in &records {
        shards::clicks::codec::encode(r, &mut written);
        if let shards::clicks::Record::State(d) = r {
            for (day, l) in restarted.days(&d.key, d.day, d.day) {
                shards::clicks::codec::encode_state(&d.key, day, &l, &mut once);
            }
        }
    }
    drop(records);
    println!(
        "full, {dist}, read back after a restart: {} link-days, {:.0} bytes resident per link-day; click log {:.0} bytes per link-day ({:.0} with each value once)",
        restarted.link_days(),
        (after.saturating_sub(before)) as f64 / days as f64,
        written.len() as f64 / days as f64,
        once.len() as f64 / days as f64,
    );
}

#[expect(
    clippy::too_many_lines,
    reason = "one measurement per mode: RSS read before and after, with everything it allocates between the two readings"
)]
fn main() {
    let args = Args::parse();
    let n = args.links;
    let m = args.clicks.unwrap_or(3 * n);
    let values: Vec<Arc<str>> = ["t.co", "ZZ", "Chrome", "Windows 10", "desktop"]
        .iter()
        .map(|v| Arc::from(*v))
        .collect();
    for full in [false, true] {
        let before = rss_bytes();
        let mut store = ClickStore::default();
        for i in 0..n {
            let key = format!("{:07x}", i.wrapping_mul(0x9E37_79B9) & 0xfff_ffff);
            let mut d = Delta {
                key: ShortKey::new(key.as_bytes()),
                day: 20_000,
                clicks: 3,
                ..Delta::default()
            };
            if full {
                d.humans = vec![
                    hll::update_of(i.wrapping_mul(31)),
                    hll::update_of(i ^ 0xdead_beef),
                ];
                let kinds = [
                    FacetKind::Referrer,
                    FacetKind::Country,
                    FacetKind::Browser,
                    FacetKind::Os,
                    FacetKind::Device,
                ];
                d.facets = kinds
                    .iter()
                    .zip(&values)
                    .map(|(&kind, v)| FacetCount {
                        kind,
                        bot: false,
                        value: v.clone(),
                        count: 3,
                    })
                    .collect();
            }
            store.merge(&d);
        }
        // What a group commit leaves: nothing dirty.
        let mut sink = Vec::new();
        store.encode_dirty(&mut sink);
        let snapshot_bytes = sink.len();
        drop(sink);
        let after = rss_bytes();
        println!(
            "{}: {} link-days, {:.0} bytes resident per link-day, {:.0} bytes per link-day in the click log",
            if full { "full" } else { "counts" },
            store.link_days(),
            (after.saturating_sub(before)) as f64 / store.link_days() as f64,
            snapshot_bytes as f64 / store.link_days() as f64
        );
        // Frozen: the day moved into its immutable file (what a snapshot does once the day has
        // been closed for `FREEZE_AFTER_DAYS`); memory keeps none of it.
        let dir = tempfile::tempdir().expect("a temp dir");
        let days = store.link_days();
        store
            .freeze(dir.path(), 0, 20_000, 1)
            .expect("freezing the day");
        let file = dir
            .path()
            .join(shards::clicks::frozen::file_name(0, 20_000, 1));
        let bytes = std::fs::metadata(&file).expect("the frozen file").len();
        println!(
            "{}: frozen, {:.0} bytes per link-day on disk, {} link-days left in memory",
            if full { "full" } else { "counts" },
            bytes as f64 / days as f64,
            store.link_days()
        );
        drop(store);
    }
    for dist in ["uniform", "zipf:1.1"] {
        traffic(n, m, dist);
    }
}
