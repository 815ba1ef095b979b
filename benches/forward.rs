//! Cross-core forward round trip: core A sends `RedirectMsg::Lookup` to core B through the mesh
//! queues, B answers with `RedirectMsg::Answer`, A receives it. Two threads pinned to different
//! CPUs, both polling (as serving cores do under load). This is the extra latency a request for
//! a key another core owns pays over a local hit, before the asking core's LRU has the answer.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ricochet::base::key::InlineKey;
use ricochet::mesh::{Answer, Doorbells, Mesh, MeshMsg, MeshQueues, RedirectMsg, ReplyTo};
use ricochet::owner::store::Store;
use shards::link::RedirectStatus;
use shards::table::{write_table, OwnedLink, Table};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The target every answer carries: read once from a one-link table, then copied into every
/// answer (the responder does no lookup: this is the mesh alone).
const TARGET: &str = "https://example.com/some/long/path/42?utm_source=bench";

/// An answer pointing into a real table, as an owner sends it; the store must outlive it.
fn table_answer(dir: &std::path::Path) -> (Store, Answer) {
    let path = dir.join("00000.tbl");
    let link = OwnedLink {
        key: "aB3xZ9kq".into(),
        target: TARGET.into(),
        status: RedirectStatus::Found,
        expires_at_s: 0,
        created_at_s: 1_700_000_000,
        flags: 0,
        author: shards::link::Author::NONE,
        behaviour: shards::behaviour::Behaviour::NONE,
        rules: shards::rules::Rules::NONE,
        labels: shards::labels::Labels::NONE,
    };
    write_table(&path, 0, 1, 0, [link]).expect("write table");
    let store = Store::new(vec![Some(Table::open(&path).expect("open table"))]);
    let answer = store.get(0, b"aB3xZ9kq", 0).expect("the link");
    (store, answer)
}

/// The CPUs this process may run on, in order.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is this thread.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    assert_eq!(
        rc,
        0,
        "sched_getaffinity: {}",
        std::io::Error::last_os_error()
    );
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE and `set` is initialised.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

/// Pins the calling thread to `cpu`.
fn pin(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (it came from `allowed_cpus`).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is this thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    assert_eq!(
        rc,
        0,
        "sched_setaffinity({cpu}): {}",
        std::io::Error::last_os_error()
    );
}

/// Core B: answers every lookup until `stop`.
fn responder(mut mesh: Mesh, stop: Arc<AtomicBool>, answer: Answer) {
    while !stop.load(Ordering::Relaxed) {
        while let Some(msg) = mesh.pop() {
            if let MeshMsg::Redirect(RedirectMsg::Lookup { reply, key, .. }) = msg {
                let answer = Some(answer.clone());
                mesh.send(reply.core(), RedirectMsg::Answer { reply, key, answer });
            }
        }
        std::hint::spin_loop();
    }
}

fn forward(c: &mut Criterion) {
    let cpus = allowed_cpus();
    if cpus.len() < 2 {
        eprintln!("forward: needs 2 CPUs, this process may use {cpus:?}; skipped");
        return;
    }
    let queues = Arc::new(MeshQueues::new(2));
    let bells = Arc::new(Doorbells::new(2).expect("eventfd"));
    let mut a = Mesh::new(0, queues.clone(), bells.clone());
    let b = Mesh::new(1, queues, bells);
    let stop = Arc::new(AtomicBool::new(false));
    let (b_cpu, a_cpu) = (cpus[1], cpus[0]);
    let dir = tempfile::tempdir().expect("temp dir");
    let (_store, answer) = table_answer(dir.path());
    let responder_thread = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            pin(b_cpu);
            responder(b, stop, answer)
        })
    };
    // Criterion measures on this thread: it is core A.
    pin(a_cpu);
    let key = InlineKey::new(b"aB3xZ9kq").expect("short key");

    let mut g = c.benchmark_group("mesh_forward");
    g.throughput(Throughput::Elements(1));
    g.bench_function("round_trip_2cpu", |bench| {
        bench.iter_custom(|iters| {
            let start = Instant::now();
            for seq in 0..iters {
                let reply = ReplyTo::request(0, 1, 1, seq as u32);
                a.send(
                    1,
                    RedirectMsg::Lookup {
                        reply,
                        key,
                        visit: true,
                    },
                );
                loop {
                    match a.pop() {
                        Some(MeshMsg::Redirect(RedirectMsg::Answer {
                            reply: r, answer, ..
                        })) => {
                            assert_eq!(r, reply);
                            assert!(answer.is_some());
                            break;
                        }
                        None => std::hint::spin_loop(),
                        Some(other) => unreachable!("core 0 only gets answers: {other:?}"),
                    }
                }
            }
            start.elapsed()
        })
    });
    g.finish();
    stop.store(true, Ordering::Relaxed);
    responder_thread.join().expect("responder");
}

criterion_group! {
    name = benches;
    // Each sample is a short burst of round trips; fewer, longer samples smooth scheduler noise.
    config = Criterion::default().measurement_time(Duration::from_secs(5));
    targets = forward
}
criterion_main!(benches);
