//! What a client connection reads from and writes to: a TCP socket, or the
//! node's end of a socket pair whose other end a TLS session feeds
//! (`tls.rs`). The connection drives its socket by readiness and
//! non-blocking calls (`conn.rs`), which both kinds offer under the same
//! names; this trait names them once.

use std::future::Future;
use std::io;
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

pub(super) trait Socket: Send + Sync + 'static {
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send;
    fn writable(&self) -> impl Future<Output = io::Result<()>> + Send;
    fn try_write(&self, buf: &[u8]) -> io::Result<usize>;
    /// Reads what the socket has into `buf`'s spare room. A read that
    /// leaves room unused drained the socket, so it also clears the
    /// socket's read readiness: the next pass waits for new bytes instead
    /// of making a `recv` that can only say `EAGAIN` (one such call per
    /// pass before: half of a loaded node's `recvfrom`s). Tokio's own
    /// `poll_read` does the same (tokio#5866); it is sound with epoll,
    /// which reports bytes that arrive after this read as a new edge with a
    /// newer readiness tick, which this clear leaves alone.
    fn read_draining(&self, buf: &mut Vec<u8>) -> io::Result<usize>;
}

macro_rules! socket {
    ($t:ty) => {
        impl Socket for $t {
            fn readable(&self) -> impl Future<Output = io::Result<()>> + Send {
                <$t>::readable(self)
            }

            fn writable(&self) -> impl Future<Output = io::Result<()>> + Send {
                <$t>::writable(self)
            }

            fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
                <$t>::try_write(self, buf)
            }

            fn read_draining(&self, buf: &mut Vec<u8>) -> io::Result<usize> {
                let room = buf.capacity() - buf.len();
                let mut got = 0;
                let r = self.try_io(Interest::READABLE, || {
                    got = self.try_read_buf(buf)?;
                    if got > 0 && got < room {
                        // Not an error: the one way to have tokio clear readiness.
                        return Err(io::ErrorKind::WouldBlock.into());
                    }
                    Ok(got)
                });
                match r {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock && got > 0 => Ok(got),
                    r => r,
                }
            }
        }
    };
}

socket!(TcpStream);
socket!(UnixStream);
