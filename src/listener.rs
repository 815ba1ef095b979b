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
    Ok((fds, bound))
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
    fn port_zero_gets_one_real_port_for_all_cores() {
        let (fds, bound) = open("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        assert_ne!(bound.port(), 0);
        for fd in fds {
            // SAFETY: we own these fds and close each once.
            unsafe { libc::close(fd) };
        }
    }
}
