//! A TCP forwarder on loopback that can be cut, for a core's link to its store (the drill
//! `partition_core_store`). Cut, it passes nothing either way and keeps every socket open, as a
//! partition does to a TCP connection (a keep-alive stream looks alive, nothing arrives); new
//! connections are accepted and wait. Healed, what waited flows on, in order: nothing is lost or
//! reordered, as TCP would after its retransmissions.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// Bytes read from one side before they are passed on.
const CHUNK_BYTES: usize = 16 * 1024;

/// A running forwarder. Its connections close when it is dropped.
#[derive(Debug)]
pub struct TcpCut {
    addr: SocketAddr,
    cut: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Drop for TcpCut {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TcpCut {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<TcpCut> {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let (cut, cut_rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((inbound, _)) = accepted else { continue };
                        connections.spawn(forward(inbound, upstream, cut_rx.clone()));
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        Ok(TcpCut { addr, cut, task })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts (`true`) or heals the link.
    pub fn cut(&self, on: bool) {
        self.cut.send_replace(on);
    }
}

/// Waits while the link is cut.
async fn healed(cut: &mut watch::Receiver<bool>) {
    let _ = cut.wait_for(|on| !on).await;
}

async fn forward(inbound: TcpStream, upstream: SocketAddr, mut cut: watch::Receiver<bool>) {
    healed(&mut cut).await;
    let Ok(outbound) = TcpStream::connect(upstream).await else { return };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (in_read, in_write) = inbound.into_split();
    let (out_read, out_write) = outbound.into_split();
    // Either direction ending ends the connection (the other half is dropped with it).
    tokio::select! {
        _ = pump(in_read, out_write, cut.clone()) => {}
        _ = pump(out_read, in_write, cut) => {}
    }
}

async fn pump(
    mut from: impl AsyncReadExt + Unpin,
    mut to: impl AsyncWriteExt + Unpin,
    mut cut: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        healed(&mut cut).await;
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Read as the cut began: held until it heals.
        healed(&mut cut).await;
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cut, nothing passes and the connection stays open; healed, what was sent arrives.
    #[tokio::test]
    async fn a_cut_holds_bytes_until_it_heals() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let mut buf = [0u8; 64];
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    return;
                }
                s.write_all(&buf[..n]).await.unwrap();
            }
        });
        let cut = TcpCut::start(upstream).await.unwrap();
        let mut client = TcpStream::connect(cut.local_addr()).await.unwrap();
        let mut buf = [0u8; 5];
        client.write_all(b"hello").await.unwrap();
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hello");
        cut.cut(true);
        client.write_all(b"again").await.unwrap();
        let waited =
            tokio::time::timeout(std::time::Duration::from_millis(300), client.read(&mut buf));
        assert!(waited.await.is_err(), "nothing passes a cut");
        cut.cut(false);
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"again");
    }
}
