//! One SO_REUSEPORT listening socket per core, after making sure no stranger holds the address.
//!
//! Three checks, because SO_REUSEPORT would silently split traffic with any other socket in
//! the group:
//! 1. the **port lock**: an abstract Unix socket named after the port, bound for the life of
//!    the process. Of two servers starting at once exactly one gets it; the kernel frees it
//!    when the process dies, even by `kill -9`.
//! 2. the **probe**: a plain bind fails while anything listens on the address. A listener
//!    that no live process holds (a killed server's, whose io_uring outlives it by tens of
//!    milliseconds) is waited for, up to [`ORPHAN_LISTENER_WAIT`]; one a live process holds
//!    is refused at once.
//! 3. after binding, every listener on the address must be one of ours (a stranger that is
//!    not a ricochet can still pass the probe in the same instant).

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::SocketAddr;
use std::os::fd::{IntoRawFd, RawFd};
use std::time::{Duration, Instant};

/// Pending-connection queue of each listener (the kernel caps it at `net.core.somaxconn`).
pub const LISTEN_BACKLOG: i32 = 4096;
/// How long a start waits for a listener on its address that no live process holds: a killed
/// server's socket, closed once its io_uring is torn down (about 20 ms after the process is
/// reaped here), so a supervisor that restarts at once gets a server that comes up.
pub const ORPHAN_LISTENER_WAIT: Duration = Duration::from_secs(2);
/// How often the wait above looks again.
const ORPHAN_POLL: Duration = Duration::from_millis(5);

/// Why the listeners could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("{addr} is already in use by another process; refusing to share it (SO_REUSEPORT would silently split traffic with it)")]
    InUse { addr: SocketAddr },
    #[error("{addr} is already in use by another ricochet on port {port} (it holds the port lock); refusing to share it")]
    Locked { addr: SocketAddr, port: u16 },
    #[error("{addr} is still held by a listening socket no live process owns after {waited_ms} ms (a killed server's, not yet torn down); refusing to share it")]
    Orphan { addr: SocketAddr, waited_ms: u128 },
    #[error("cannot listen on {addr}: {source}")]
    Io {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// The port lock: held for as long as this value lives (the server keeps it to its exit).
#[derive(Debug)]
pub struct PortLock {
    _socket: Option<Socket>,
}

/// What [`open`] returns: the listeners' raw fds (owned by the caller from here on), the bound
/// address (the real port when the address asked for port 0) and the port lock.
#[derive(Debug)]
pub struct Listeners {
    pub fds: Vec<RawFd>,
    pub bound: SocketAddr,
    pub lock: PortLock,
}

/// Takes the port lock of `addr`'s port (none for port 0: the kernel picks a free one).
fn lock_port(addr: SocketAddr) -> Result<PortLock, ListenError> {
    if addr.port() == 0 {
        return Ok(PortLock { _socket: None });
    }
    let io = |source| ListenError::Io { addr, source };
    let name = format!("ricochet-listen-port-{}", addr.port());
    let sock = Socket::new(Domain::UNIX, Type::STREAM, None).map_err(io)?;
    let sa = abstract_addr(&name).map_err(io)?;
    match sock.bind(&sa) {
        Ok(()) => Ok(PortLock {
            _socket: Some(sock),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(ListenError::Locked {
            addr,
            port: addr.port(),
        }),
        Err(e) => Err(io(e)),
    }
}

/// An abstract-namespace Unix address (a leading NUL: no file, gone with its last holder).
fn abstract_addr(name: &str) -> std::io::Result<SockAddr> {
    let mut path = Vec::with_capacity(name.len() + 1);
    path.push(0u8);
    path.extend_from_slice(name.as_bytes());
    use std::os::unix::ffi::OsStrExt;
    SockAddr::unix(std::ffi::OsStr::from_bytes(&path))
}

/// Opens `cores` listeners on `addr`, all sharing it through SO_REUSEPORT (see the module doc
/// for the checks before and after).
pub fn open(addr: SocketAddr, cores: usize) -> Result<Listeners, ListenError> {
    let io = |source| ListenError::Io { addr, source };
    let lock = lock_port(addr)?;
    if addr.port() != 0 {
        wait_free(addr)?;
    }
    let mut fds = Vec::with_capacity(cores);
    let mut bound = addr;
    for _ in 0..cores {
        let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
            .map_err(io)?;
        sock.set_reuse_address(true).map_err(io)?;
        sock.set_reuse_port(true).map_err(io)?;
        // Accepted sockets inherit TCP_NODELAY: we write once per read batch, and Nagle would
        // hold back a response behind a delayed ACK.
        sock.set_nodelay(true).map_err(io)?;
        sock.set_nonblocking(true).map_err(io)?;
        sock.bind(&bound.into()).map_err(io)?;
        sock.listen(LISTEN_BACKLOG).map_err(io)?;
        if bound.port() == 0 {
            bound = sock
                .local_addr()
                .map_err(io)?
                .as_socket()
                .expect("a TCP socket has an inet address");
        }
        fds.push(sock.into_raw_fd());
    }
    // The probe above and these binds are not atomic: another server starting at the same
    // moment can pass the probe too and join the SO_REUSEPORT group. Once listening, every
    // listener on the address must be one of ours, else refuse (both racers do: neither
    // serves half the traffic).
    if addr.port() != 0 {
        if let Err(e) = only_ours(bound, &fds) {
            for fd in fds {
                // SAFETY: these fds were created above and are closed once, here.
                unsafe { libc::close(fd) };
            }
            return Err(e);
        }
    }
    Ok(Listeners { fds, bound, lock })
}

/// Waits until nothing listens on `addr`: refused at once if a live process holds a listener
/// there, waited for up to [`ORPHAN_LISTENER_WAIT`] if none does.
fn wait_free(addr: SocketAddr) -> Result<(), ListenError> {
    let start = Instant::now();
    loop {
        match probe_free(addr) {
            Err(ListenError::InUse { .. }) => {}
            other => return other,
        }
        let inodes = listeners_on(addr).map_err(|source| ListenError::Io { addr, source })?;
        if inodes.iter().any(|&i| held_by_a_process(i)) {
            return Err(ListenError::InUse { addr });
        }
        if start.elapsed() >= ORPHAN_LISTENER_WAIT {
            return Err(ListenError::Orphan {
                addr,
                waited_ms: start.elapsed().as_millis(),
            });
        }
        std::thread::sleep(ORPHAN_POLL);
    }
}

/// Whether some process has socket `inode` open (a process whose fds we may not read counts
/// as not holding it; such a listener is then waited for and refused after the wait).
fn held_by_a_process(inode: u64) -> bool {
    if inode == 0 {
        return false; // No file: a socket already released by every process.
    }
    let want = format!("socket:[{inode}]");
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return true; // No procfs: cannot tell, so do not wait on it.
    };
    for p in procs.flatten() {
        let name = p.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == want.as_str()) {
                return true;
            }
        }
    }
    false
}

/// The inodes of the sockets listening on `addr`'s port (on the same address or a wildcard),
/// from `/proc/net/tcp` and `/proc/net/tcp6`.
fn listeners_on(addr: SocketAddr) -> std::io::Result<Vec<u64>> {
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = match std::fs::read_to_string(table) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let (Some(local), Some(state), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else {
                continue;
            };
            if *state != "0A" {
                continue; // not LISTEN
            }
            let Some((ip, port)) = parse_proc_addr(local) else {
                continue;
            };
            let same_addr = ip == addr.ip() || ip.is_unspecified() || addr.ip().is_unspecified();
            if port == addr.port() && same_addr {
                out.push(inode.parse().unwrap_or(0));
            }
        }
    }
    Ok(out)
}

/// Checks that every socket listening on `addr`'s port (on the same address or a wildcard) is
/// one of `ours`.
fn only_ours(addr: SocketAddr, ours: &[RawFd]) -> Result<(), ListenError> {
    let io = |source| ListenError::Io { addr, source };
    let mut inodes = Vec::with_capacity(ours.len());
    for &fd in ours {
        // SAFETY: a zeroed stat is a valid out-parameter; fstat writes at most its size.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is an open socket we own; `st` is valid for writes.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(io(std::io::Error::last_os_error()));
        }
        inodes.push(st.st_ino);
    }
    match listeners_on(addr)
        .map_err(io)?
        .iter()
        .all(|i| inodes.contains(i))
    {
        true => Ok(()),
        false => Err(ListenError::InUse { addr }),
    }
}

/// `0100007F:1F90` (IPv4) or 32 hex digits `:PORT` (IPv6), as `/proc/net/tcp*` writes them:
/// the address in host-order 32-bit words, the port in hex.
fn parse_proc_addr(s: &str) -> Option<(std::net::IpAddr, u16)> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Option<Vec<u32>> = (0..ip.len() / 8)
        .map(|i| u32::from_str_radix(&ip[i * 8..i * 8 + 8], 16).ok())
        .collect();
    let words = words?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let ip = match bytes.len() {
        4 => std::net::IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?),
        16 => {
            let v6 = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?);
            match v6.to_ipv4_mapped() {
                Some(v4) => std::net::IpAddr::V4(v4),
                None => std::net::IpAddr::V6(v6),
            }
        }
        _ => return None,
    };
    Some((ip, port))
}

/// Binds a plain socket (SO_REUSEADDR, so TIME_WAIT leftovers don't count, but no
/// SO_REUSEPORT) to `addr`: that fails exactly when some socket is listening there.
fn probe_free(addr: SocketAddr) -> Result<(), ListenError> {
    let io = |source| ListenError::Io { addr, source };
    let probe =
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(io)?;
    probe.set_reuse_address(true).map_err(io)?;
    match probe.bind(&addr.into()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(ListenError::InUse { addr }),
        Err(e) => Err(io(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_a_taken_port_and_shares_among_our_cores() {
        let stranger = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = stranger.local_addr().unwrap();
        match open(addr, 2) {
            Err(ListenError::InUse { .. }) => {}
            other => panic!("expected InUse, got {other:?}"),
        }
        drop(stranger);
        let l = open(addr, 2).unwrap();
        assert_eq!(l.fds.len(), 2);
        assert_eq!(l.bound, addr);
        match open(addr, 1) {
            Err(ListenError::Locked { .. }) => {}
            other => panic!("expected Locked while the first holds the port, got {other:?}"),
        }
        for fd in l.fds {
            // SAFETY: we own these fds and close each once.
            unsafe { libc::close(fd) };
        }
    }

    #[test]
    fn a_stranger_in_our_reuseport_group_is_seen() {
        // A stranger that also set SO_REUSEPORT passes the probe (the race); the check after
        // binding still finds it.
        let Listeners {
            fds, bound: addr, ..
        } = open("127.0.0.1:0".parse().unwrap(), 1).unwrap();
        let stranger = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        stranger.set_reuse_port(true).unwrap();
        stranger.bind(&addr.into()).unwrap();
        stranger.listen(16).unwrap();
        assert!(matches!(
            only_ours(addr, &fds),
            Err(ListenError::InUse { .. })
        ));
        drop(stranger);
        only_ours(addr, &fds).unwrap();
        for fd in fds {
            // SAFETY: we own these fds and close each once.
            unsafe { libc::close(fd) };
        }
    }

    #[test]
    fn a_live_stranger_is_refused_at_once_and_its_socket_is_found_held() {
        let stranger = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = stranger.local_addr().unwrap();
        let t = Instant::now();
        assert!(matches!(wait_free(addr), Err(ListenError::InUse { .. })));
        assert!(
            t.elapsed() < ORPHAN_LISTENER_WAIT / 2,
            "no wait for a live holder"
        );
        let inodes = listeners_on(addr).unwrap();
        assert_eq!(inodes.len(), 1);
        assert!(held_by_a_process(inodes[0]));
        drop(stranger);
        wait_free(addr).unwrap();
    }

    #[test]
    fn proc_addresses_parse() {
        assert_eq!(
            parse_proc_addr("0100007F:1F90"),
            Some(("127.0.0.1".parse().unwrap(), 8080))
        );
        assert_eq!(
            parse_proc_addr("00000000000000000000000000000000:0050"),
            Some(("::".parse().unwrap(), 80))
        );
    }

    #[test]
    fn port_zero_gets_one_real_port_for_all_cores() {
        let l = open("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        assert_ne!(l.bound.port(), 0);
        for fd in l.fds {
            // SAFETY: we own these fds and close each once.
            unsafe { libc::close(fd) };
        }
    }
}
