//! `clickmem`: memory of the click store per link-day, for the capacity report. Merges
//! N link-days (distinct generated 7-character keys, one day each) into a `ClickStore` the way
//! an owner's aggregator does, in `counts` shape (clicks only) or `full` shape (two unique
//! visitors and five facet values per link-day), and prints the resident memory it took, then
//! freezes the day (`shards::clicks::frozen`) and prints its file's bytes per link-day.
//!
//!   clickmem [N=1000000]

use shards::clicks::{hll, ClickStore, Delta, FacetCount, FacetKind, ShortKey};
use std::sync::Arc;

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").expect("procfs");
    let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map_or(1_000_000, |s| s.parse().expect("a count"));
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
}
