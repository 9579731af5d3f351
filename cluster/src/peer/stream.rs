//! A connection between peers: plain TCP, or TCP under mutual TLS when the
//! node has a peer certificate (`tls.rs`). Everything above the socket (the
//! preamble, the secret handshake, data frames, ractor_cluster's control
//! sessions) runs on either alike.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A read half, boxed (ractor_cluster takes its sessions' halves so).
pub type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
/// A write half, boxed.
pub type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

pub enum PeerStream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::TlsStream<TcpStream>>),
}

impl PeerStream {
    /// The socket's remote address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        match self {
            PeerStream::Plain(s) => s.peer_addr(),
            PeerStream::Tls(s) => s.get_ref().0.peer_addr(),
        }
    }

    /// Reading and writing halves, each usable on its own task. Writers
    /// must flush: a TLS record may wait in the session until then.
    pub fn split(self) -> (BoxRead, BoxWrite) {
        match self {
            PeerStream::Plain(s) => {
                let (r, w) = s.into_split();
                (Box::new(r), Box::new(w))
            }
            PeerStream::Tls(s) => {
                let (r, w) = tokio::io::split(s);
                (Box::new(r), Box::new(w))
            }
        }
    }
}

impl AsyncRead for PeerStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            PeerStream::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for PeerStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            PeerStream::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_flush(cx),
            PeerStream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            PeerStream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
