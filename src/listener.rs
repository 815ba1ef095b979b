//! One SO_REUSEPORT listening socket per core, after making sure no stranger holds the address.

use socket2::{Domain, Protocol, Socket, Type};
use std::net::SocketAddr;
use std::os::fd::{IntoRawFd, RawFd};

/// Pending-connection queue of each listener (the kernel caps it at `net.core.somaxconn`).
pub const LISTEN_BACKLOG: i32 = 4096;

/// Why the listeners could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("{addr} is already in use by another process; refusing to share it (SO_REUSEPORT would silently split traffic with it)")]
    InUse { addr: SocketAddr },
    #[error("cannot listen on {addr}: {source}")]
    Io {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Opens `cores` listeners on `addr`, all sharing it through SO_REUSEPORT, and returns their
/// raw fds (owned by the caller from here on) and the bound address (the real port when
/// `addr` asked for port 0).
pub fn open(addr: SocketAddr, cores: usize) -> Result<(Vec<RawFd>, SocketAddr), ListenError> {
    let io = |source| ListenError::Io { addr, source };
    if addr.port() != 0 {
        probe_free(addr)?;
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
    Ok((fds, bound))
}

/// Checks `/proc/net/tcp` and `/proc/net/tcp6` for listening sockets on `addr`'s port (on the
/// same address or a wildcard) that are not among `ours`.
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
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = match std::fs::read_to_string(table) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(e)),
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
            let inode: u64 = inode.parse().unwrap_or(0);
            if port == addr.port() && same_addr && !inodes.contains(&inode) {
                return Err(ListenError::InUse { addr });
            }
        }
    }
    Ok(())
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
        let (fds, bound) = open(addr, 2).unwrap();
        assert_eq!(fds.len(), 2);
        assert_eq!(bound, addr);
        for fd in fds {
            // SAFETY: we own these fds and close each once.
            unsafe { libc::close(fd) };
        }
    }

    #[test]
    fn a_stranger_in_our_reuseport_group_is_seen() {
        // A stranger that also set SO_REUSEPORT passes the probe (the race); the check after
        // binding still finds it.
        let (fds, addr) = open("127.0.0.1:0".parse().unwrap(), 1).unwrap();
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
        let (fds, bound) = open("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        assert_ne!(bound.port(), 0);
        for fd in fds {
            // SAFETY: we own these fds and close each once.
            unsafe { libc::close(fd) };
        }
    }
}
