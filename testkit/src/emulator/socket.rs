//! Accepted TCP connections that a fault can cut: the "dropped connection" fault shuts the
//! socket down under hyper's feet, so the client sees a real broken connection (no gRPC status,
//! no trailers), not a polite error.

use std::io;
use std::net::{Shutdown, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::server::Connected;

/// Cuts one accepted connection. Reaches the request handler as a request extension.
#[derive(Debug, Clone)]
pub(crate) struct KillSwitch {
    socket: Arc<std::net::TcpStream>,
    pub(crate) peer: SocketAddr,
}

impl KillSwitch {
    /// Shuts the socket down both ways: the client's next read or write fails.
    pub(crate) fn kill(&self) {
        // An error here means the socket is already gone, which is what we wanted.
        let _ = self.socket.shutdown(Shutdown::Both);
    }

    /// A handle that does not keep the socket open: it can cut it while the connection lives.
    pub(crate) fn watch(&self) -> Watch {
        Watch(Arc::downgrade(&self.socket))
    }
}

/// A weak [`KillSwitch`], for cutting every live connection at once.
#[derive(Debug, Clone)]
pub(crate) struct Watch(std::sync::Weak<std::net::TcpStream>);

impl Watch {
    /// Whether the connection is still open.
    pub(crate) fn alive(&self) -> bool {
        self.0.strong_count() > 0
    }

    /// Cuts the connection if it is still open.
    pub(crate) fn kill(&self) {
        if let Some(socket) = self.0.upgrade() {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

/// An accepted connection with its kill switch.
#[derive(Debug)]
pub(crate) struct KillableStream {
    inner: TcpStream,
    switch: KillSwitch,
}

impl KillableStream {
    fn new(inner: TcpStream, peer: SocketAddr) -> io::Result<KillableStream> {
        let std = inner.into_std()?;
        let clone = std.try_clone()?;
        let inner = TcpStream::from_std(std)?;
        inner.set_nodelay(true)?;
        Ok(KillableStream {
            inner,
            switch: KillSwitch {
                socket: Arc::new(clone),
                peer,
            },
        })
    }
}

impl Connected for KillableStream {
    type ConnectInfo = KillSwitch;
    fn connect_info(&self) -> KillSwitch {
        self.switch.clone()
    }
}

impl AsyncRead for KillableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for KillableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The listener as a stream of killable connections (what `serve_with_incoming` takes).
pub(crate) fn incoming(
    listener: TcpListener,
) -> impl Stream<Item = io::Result<KillableStream>> + Send + 'static {
    futures::stream::unfold(listener, |listener| async move {
        let next = match listener.accept().await {
            Ok((stream, peer)) => KillableStream::new(stream, peer),
            Err(e) => Err(e),
        };
        Some((next, listener))
    })
}
