//! The whole pipeline without sockets: cores' combiners, three aggregators routing to each
//! other by owner, merges and queries, against a `HashMap` oracle of clicks per key (proptest),
//! with purges among the clicks.

use super::combiner::ClickFields;
use super::stats::{Bots, StatsQuery};
use super::*;
use crate::key::InlineKey;
use crate::mesh::Doorbells;
use crate::router::Router;
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const CORES: usize = 3;

/// What happens on the cores.
#[derive(Clone, Debug)]
enum Step {
    /// Core `core` answers a redirect for key `k` (a bot when `bot`).
    Click { core: usize, k: u8, bot: bool },
    /// Every core hands off what it counted.
    Sweep,
    /// The link `k` is deleted: each core cuts its clicks, its owner's aggregator purges.
    Purge(u8),
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        20 => (0..CORES, 0u8..12, prop::bool::weighted(0.2)).prop_map(|(core, k, bot)| Step::Click { core, k, bot }),
        2 => Just(Step::Sweep),
        1 => (0u8..12).prop_map(Step::Purge),
    ]
}

fn key(k: u8) -> String {
    format!("key{k}")
}

struct Rig {
    cores: Vec<CoreClicks>,
    aggs: Option<Aggregators>,
    router: Router,
    _dir: tempfile::TempDir,
}

impl Rig {
    fn new() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let router = Router::new(64, CORES);
        let bells = Arc::new(Doorbells::new(CORES).unwrap());
        let cfg = AnalyticsConfig::default();
        let (cores, aggs) = start(
            &cfg,
            dir.path(),
            router,
            bells,
            Arc::new(ClickStats::new(CORES)),
            None,
        )
        .unwrap()
        .unwrap();
        Rig {
            cores,
            aggs: Some(aggs),
            router,
            _dir: dir,
        }
    }

    fn reply(seq: u32) -> crate::mesh::ReplyTo {
        crate::mesh::ReplyTo {
            core: 0,
            slot: 0,
            gen: 0,
            seq,
        }
    }

    /// Waits for a message in core 0's inbox.
    fn next_reply(&self) -> ToCore {
        self.cores[0]
            .inbox
            .recv_timeout(Duration::from_secs(10))
            .expect("an aggregator answered")
    }

    fn purge(&mut self, k: u8, token: u64) {
        let cutoffs: Box<[u64]> = self.cores.iter_mut().map(|c| c.combiner.cut()).collect();
        let owner = self.router.owner(key(k).as_bytes()).core;
        let msg = Control::Purge {
            key: InlineKey::new(key(k).as_bytes()).unwrap(),
            cutoffs,
            token,
            reply_core: 0,
        };
        self.cores[0].control[owner].send(msg).unwrap();
        match self.next_reply() {
            ToCore::Purged { token: t } => assert_eq!(t, token),
            _ => panic!("expected the purge's answer"),
        }
    }

    /// Clicks of `k` (bots included) once every core's clicks are in.
    fn clicks(&mut self, k: u8) -> (u64, u64) {
        let owner = self.router.owner(key(k).as_bytes()).core;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            for c in &mut self.cores {
                c.combiner.sweep();
            }
            let since = combiner::unix_ms();
            std::thread::sleep(Duration::from_millis(5));
            for c in &mut self.cores {
                c.combiner.sweep();
            }
            let today = shards::clicks::day_of(shards::timefmt::now_s());
            let query = StatsQuery {
                key: InlineKey::new(key(k).as_bytes()).unwrap(),
                from: today,
                to: today,
                bots: Bots::Include,
            };
            let msg = Control::Stats {
                reply: Rig::reply(1),
                query,
            };
            self.cores[0].control[owner].send(msg).unwrap();
            let ToCore::Stats {
                body: Some(body), ..
            } = self.next_reply()
            else {
                panic!("expected stats");
            };
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let until = v["complete_until"].as_str().unwrap();
            let until_ms = shards::timefmt::parse_rfc3339_s(&format!("{}Z", &until[..19])).unwrap()
                * 1000
                + until[20..23].parse::<u64>().unwrap();
            // `complete_until` is a whole millisecond: every click answered before it is in.
            // A click answered in the millisecond `since` was read in is covered only by a
            // later one (`>=` took a seal from earlier in that same millisecond for enough).
            if until_ms > since {
                let s = &v["summary"];
                return (
                    s["clicks"].as_u64().unwrap(),
                    s["bot_clicks"].as_u64().unwrap(),
                );
            }
            assert!(
                Instant::now() < deadline,
                "complete_until never passed {since}: {v}"
            );
        }
    }

    fn close(mut self) {
        for c in &mut self.cores {
            c.combiner.close();
        }
        self.aggs.take().unwrap().join();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Clicks recorded on any core end up, once each, with their key's owner; a purge
    /// forgets exactly the clicks before it, even those still in flight.
    #[test]
    fn the_pipeline_counts_like_a_map(steps in prop::collection::vec(arb_step(), 1..120)) {
        let mut rig = Rig::new();
        let mut oracle: HashMap<u8, (u64, u64)> = HashMap::new();
        let now_s = shards::timefmt::now_s();
        let mut token = 0;
        for st in &steps {
            match *st {
                Step::Click { core, k, bot } => {
                    let ua: &[u8] = if bot { b"Googlebot/2.1" } else { b"Mozilla/5.0 Firefox/121.0" };
                    let c = &mut rig.cores[core].combiner;
                    let fields = ClickFields { peer: [k; 16], forwarded_for: None, user_agent: Some(ua), referer: None };
                    let click = c.take(ClientIp::Peer, &fields, now_s);
                    let dropped = c.tally.dropped;
                    c.record(key(k).as_bytes(), &click, now_s);
                    // Dropped when no clean batch was free (the aggregators are behind): by
                    // design, and counted; the oracle counts what the combiner took.
                    if c.tally.dropped == dropped {
                        let e = oracle.entry(k).or_default();
                        e.0 += 1;
                        e.1 += u64::from(bot);
                    }
                }
                Step::Sweep => {
                    for c in &mut rig.cores {
                        c.combiner.sweep();
                    }
                }
                Step::Purge(k) => {
                    token += 1;
                    let dropped: u64 = rig.cores.iter().map(|c| c.combiner.tally.dropped).sum();
                    rig.purge(k, token);
                    let after: u64 = rig.cores.iter().map(|c| c.combiner.tally.dropped).sum();
                    prop_assert_eq!(after, dropped, "a cut hands its batch off");
                    oracle.remove(&k);
                }
            }
        }
        for k in 0..12u8 {
            let want = oracle.get(&k).copied().unwrap_or((0, 0));
            prop_assert_eq!(rig.clicks(k), want, "key{}", k);
        }
        rig.close();
    }
}
