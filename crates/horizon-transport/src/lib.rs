//! Horizon's QUIC transport (design.md §6 and §7), over quinn and rustls with TLS 1.3.
//!
//! - [`tls`]: the site CA, certificates (`horizon certs`), and quinn configs per channel ALPN;
//!   sites use mutual TLS, game servers and players a token in the hello.
//! - [`Listener`] (server side) and [`Link`] (client side): **one connection per peer**. A link
//!   reconnects as a whole with backoff and reports [`LinkEvent::Up`] so its owner resyncs; a
//!   listener hands out each (re)connected [`Peer`] and closes the connection it replaces.
//! - [`Conn`]: typed requests on their own bidirectional streams (with ids: a retry is answered
//!   from memory, never run twice), long-lived streams, datagrams, RTT and loss.
//! - [`netem`]: a user-space WAN emulator (delay, jitter, loss, partition) for tests and the
//!   local mesh.
//!
//! Every queue, frame and wait is bounded by [`Limits`].

mod conn;
pub mod credential;
mod error;
mod handshake;
mod limits;
mod link;
mod listener;
pub mod metrics;
pub mod netem;
pub mod plumbing;
pub mod reload;
mod target;
pub mod tls;

pub use conn::{
    Conn, Counters, Inbound, InboundRequest, LinkStats, SentRequest, StreamReceiver, StreamSender,
};
pub use credential::{Keyring, SharedKeyring, SignedToken};
pub use error::Error;
pub use handshake::{Authenticator, HelloParams, SharedToken, SiteCertificate};
pub use limits::{Limits, MAX_UDP_PAYLOAD_BYTES};
pub use link::{Dial, Link, LinkEvent, LinkParts, client_endpoint};
pub use listener::{Listener, Peer, ServerTls};
pub use metrics::{Refusal, TransportStats};
pub use target::{BadTarget, Target};
pub use tls::site_dns_name;
