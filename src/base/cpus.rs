//! CPU sets: the CPUs this process may use, operator CPU lists (`--service-cpus 6,7` or
//! `6-7`), and pinning a thread to a set.
//!
//! `--service-cpus` gives the click aggregators CPUs of their own: the cores run on the other
//! CPUs the process may use, so a core never shares its CPU with an aggregator and the
//! aggregators never need to step aside (`analytics::step_aside`). Without it (the default)
//! they share the cores' CPUs in `SCHED_IDLE` and step aside ([`yield_thread_to_cores`]).

/// The most CPUs a list may name (the kernel's `cpu_set_t` holds this many).
pub const MAX_CPUS: usize = libc::CPU_SETSIZE as usize;

/// The CPUs this process may run on.
pub fn allowed() -> std::io::Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; the pointer and size describe `set`.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((0..MAX_CPUS)
        // SAFETY: `i` is below CPU_SETSIZE and `set` is initialized.
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .collect())
}

/// A CPU list as a flag takes it (`--service-cpus 6,7`): sorted, no repeats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

impl std::str::FromStr for CpuList {
    type Err = String;
    fn from_str(s: &str) -> Result<CpuList, String> {
        parse_list(s).map(CpuList)
    }
}

/// Parses a CPU list as `taskset -c` and cpusets write it: `0,2,4-7`. Sorted, no repeats.
pub fn parse_list(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let num = |x: &str| -> Result<usize, String> {
            let n: usize = x
                .parse()
                .map_err(|_| format!("'{part}' is not a CPU number or range (like 6 or 6-7)"))?;
            if n >= MAX_CPUS {
                return Err(format!("CPU {n} is past the last one ({})", MAX_CPUS - 1));
            }
            Ok(n)
        };
        let (lo, hi) = (num(lo)?, num(hi)?);
        if lo > hi {
            return Err(format!("'{part}' is a range that runs backwards"));
        }
        out.extend(lo..=hi);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Pins the calling thread to `cpus`.
pub fn pin_current_thread(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        assert!(c < MAX_CPUS, "CPU lists are checked when parsed");
        // SAFETY: `c` is below CPU_SETSIZE.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; `set` lives across the call.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The cores' CPUs and the service CPUs, from what the process may use and `--service-cpus`:
/// every service CPU must be one it may use, and at least one must be left for the cores.
pub fn split(allowed: &[usize], service: Option<&[usize]>) -> Result<Vec<usize>, String> {
    let Some(service) = service else {
        return Ok(allowed.to_vec());
    };
    if service.is_empty() {
        return Err("--service-cpus names no CPU".into());
    }
    if let Some(c) = service.iter().find(|c| !allowed.contains(c)) {
        return Err(format!(
            "--service-cpus: CPU {c} is not one this process may use ({allowed:?})"
        ));
    }
    let cores: Vec<usize> = allowed
        .iter()
        .copied()
        .filter(|c| !service.contains(c))
        .collect();
    if cores.is_empty() {
        return Err(format!(
            "--service-cpus {service:?} leaves none of this process's CPUs ({allowed:?}) for the cores"
        ));
    }
    Ok(cores)
}

/// The aggregators' nice value: the lowest, so a busy core keeps nearly all of its CPU (at
/// 10 they took ~3% of a saturated core's; perf/reports/2026-12-01-cbe994046c-clicks.md).
pub const AGGREGATOR_NICE: libc::c_int = 19;

/// Puts the calling thread in `SCHED_IDLE`: it runs only when no core thread on its CPU wants
/// to, and a core that wakes up preempts it at once. Measured (perf/clicks.sh): at normal
/// priority a batch's classification and merge ran on the core's CPU for milliseconds at a
/// time and the core's requests waited behind it (p99 from 60 us to 2-4 ms at 5k-20k req/s).
/// The cost: a core saturated for long leaves its aggregator little CPU, its batches are not
/// returned, and clicks are dropped (counted) rather than redirects slowed.
///
/// [`AGGREGATOR_NICE`] counts should the policy be refused. Used by the click aggregators,
/// the fleet click flusher and stats thread, a fleet regeneration's import. A core thread that wakes on a CPU where such a thread runs
/// preempts it at once; at nice 19 alone the scheduler may let it finish its slice first, and
/// the core's requests wait behind it. `who` names it in the report if either call fails.
/// Returns whether the thread is in `SCHED_IDLE`.
pub fn yield_thread_to_cores(who: &str) -> bool {
    // SAFETY: setpriority on the calling thread (who 0 with PRIO_PROCESS is the caller's
    // thread id on Linux); no pointers.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, AGGREGATOR_NICE) };
    if rc != 0 {
        eprintln!(
            "{who}: cannot lower the thread's priority ({}); it competes with the cores",
            std::io::Error::last_os_error()
        );
    }
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` outlives the call.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if rc != 0 {
        eprintln!(
            "{who}: cannot enter SCHED_IDLE ({}); it runs at nice {AGGREGATOR_NICE}",
            std::io::Error::last_os_error()
        );
    }
    rc == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_as_taskset_writes_them() {
        assert_eq!(parse_list("3").unwrap(), vec![3]);
        assert_eq!(parse_list("0,2,4-6").unwrap(), vec![0, 2, 4, 5, 6]);
        assert_eq!(parse_list("5-5, 1 ,1").unwrap(), vec![1, 5]);
        assert!(parse_list("").unwrap_err().contains("not a CPU"));
        assert!(parse_list("a").unwrap_err().contains("'a'"));
        assert!(parse_list("7-2").unwrap_err().contains("backwards"));
        assert!(parse_list("99999").unwrap_err().contains("past the last"));
    }

    #[test]
    fn service_cpus_are_taken_from_the_cores_and_must_leave_some() {
        let all = [0, 1, 2, 3];
        assert_eq!(split(&all, None).unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(split(&all, Some(&[3])).unwrap(), vec![0, 1, 2]);
        assert!(split(&all, Some(&[4]))
            .unwrap_err()
            .contains("CPU 4 is not one"));
        assert!(split(&all, Some(&[0, 1, 2, 3]))
            .unwrap_err()
            .contains("leaves none"));
    }
}
