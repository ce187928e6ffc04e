//! The hello: first exchange of every connection, on its first bidirectional stream. It
//! negotiates the protocol version and authenticates the client (certificate or token).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use horizon_proto::frame::{decode_header_any_version, decode_payload, to_frame};
use horizon_proto::{
    Channel, ErrorCode, Fault, Hello, MAX_HELLO_BYTES, MIN_PROTOCOL_VERSION, Name,
    PROTOCOL_VERSION, Welcome, negotiate,
};

use crate::conn::{Conn, ReadFailure, read_payload};
use crate::error::Error;
use crate::limits::Limits;
use crate::metrics::TransportStats;
use crate::tls::certificate_names_site;

/// What a client says in its hello.
#[derive(Clone, Debug)]
pub struct HelloParams {
    pub peer: Name,
    pub token: Option<String>,
    pub min_version: u8,
    pub max_version: u8,
    /// Random per process: tells the server a restarted client from a reconnecting one.
    pub session: u64,
}

impl HelloParams {
    /// A hello for this build's versions, with a fresh session id.
    pub fn new(peer: Name) -> Self {
        HelloParams {
            peer,
            token: None,
            min_version: MIN_PROTOCOL_VERSION,
            max_version: PROTOCOL_VERSION,
            session: fastrand::u64(..),
        }
    }

    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }
}

/// Decides whether a client may talk to us, and who it proved to be: `Some(identity)` when
/// its credential names it (a signed token's subject), `None` when the hello's `peer` is all
/// there is (a site's certificate proves that `peer`; a shared token proves nothing more).
pub trait Authenticator: Send + Sync + 'static {
    fn check(&self, hello: &Hello, connection: &quinn::Connection) -> Result<Option<Name>, Fault>;
}

/// Sites: the hello's peer must be the site named by the client's verified certificate.
#[derive(Clone, Copy, Debug, Default)]
pub struct SiteCertificate;

impl Authenticator for SiteCertificate {
    fn check(&self, hello: &Hello, connection: &quinn::Connection) -> Result<Option<Name>, Fault> {
        if certificate_names_site(connection, hello.peer.as_str()) {
            Ok(None)
        } else {
            Err(Fault::new(
                ErrorCode::Unauthorized,
                format!("the client certificate does not name site {}", hello.peer),
            ))
        }
    }
}

/// Tests: the hello must carry this shared token (the daemons use [`crate::SignedToken`]).
#[derive(Clone)]
pub struct SharedToken(pub Arc<str>);

impl std::fmt::Debug for SharedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedToken(…)")
    }
}

impl Authenticator for SharedToken {
    fn check(&self, hello: &Hello, _: &quinn::Connection) -> Result<Option<Name>, Fault> {
        let given = hello.token.as_deref().unwrap_or_default().as_bytes();
        let wanted = self.0.as_bytes();
        // Compare every byte whatever the first difference, so timing tells nothing.
        let same = given.len() == wanted.len()
            && given.iter().zip(wanted).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
        if same {
            Ok(None)
        } else {
            Err(Fault::new(ErrorCode::Unauthorized, "bad or missing token"))
        }
    }
}

/// Reads the hello-sized frame that starts a connection (any version in its header). A stream
/// that ends or fails before a whole frame is a lost connection; a bad header is a bad frame.
async fn read_hello_frame<C: Channel>(recv: &mut quinn::RecvStream) -> Result<Vec<u8>, Error> {
    let check = |head: &[u8]| decode_header_any_version(head, C::ID, MAX_HELLO_BYTES);
    match read_payload(recv, check).await {
        Ok(Some(payload)) => Ok(payload),
        Ok(None) => {
            Err(Error::Lost("reading the hello: stream finished early (0 bytes read)".to_owned()))
        }
        Err(ReadFailure::Frame(e @ horizon_proto::DecodeError::Truncated { .. })) => {
            Err(Error::Lost(format!("reading the hello: {e}")))
        }
        Err(ReadFailure::Frame(e)) => Err(Error::Frame(e)),
        Err(ReadFailure::Read(e)) => Err(Error::Lost(format!("reading the hello: {e}"))),
    }
}

fn close_with(quic: &quinn::Connection, code: ErrorCode, reason: &str) {
    quic.close(quinn::VarInt::from(code.to_u16()), reason.as_bytes());
}

/// Client side: says hello and reads the welcome.
pub(crate) async fn client<C: Channel>(
    quic: quinn::Connection,
    hello: &HelloParams,
    limits: Arc<Limits>,
    ids: Arc<AtomicU64>,
    stats: TransportStats,
) -> Result<Conn<C>, Error> {
    let run = async {
        let (mut send, mut recv) = quic.open_bi().await?;
        let frame = Hello {
            min_version: hello.min_version,
            max_version: hello.max_version,
            peer: hello.peer.clone(),
            token: hello.token.clone(),
            session: hello.session,
        };
        send.write_all(&to_frame(&frame, hello.max_version, C::ID, MAX_HELLO_BYTES)?).await?;
        let _ = send.finish();
        let payload = read_hello_frame::<C>(&mut recv).await?;
        decode_payload::<Welcome>(&payload).map_err(Error::from)
    };
    let welcome = match tokio::time::timeout(limits.handshake_timeout, run).await {
        Ok(Ok(welcome)) => welcome,
        Ok(Err(e)) => {
            // The server may have closed with a precise code before we read its welcome.
            let e = match quic.close_reason() {
                Some(reason) => Error::from(reason),
                None => e,
            };
            close_with(&quic, e.code(), &e.to_string());
            return Err(e);
        }
        Err(_) => {
            close_with(&quic, ErrorCode::Timeout, "no welcome in time");
            return Err(Error::Timeout { ms: limits.handshake_timeout.as_millis() as u64 });
        }
    };
    match welcome {
        Welcome::Accepted { version, peer, .. }
            if (hello.min_version..=hello.max_version).contains(&version) =>
        {
            Ok(Conn::new(quic, version, peer, limits, ids, stats))
        }
        Welcome::Accepted { version, .. } => {
            let fault = Fault::new(
                ErrorCode::VersionMismatch,
                format!("server chose version {version}, not offered"),
            );
            close_with(&quic, fault.code, &fault.message);
            Err(Error::Refused(fault))
        }
        Welcome::Refused(fault) => {
            close_with(&quic, fault.code, &fault.message);
            Err(Error::Refused(fault))
        }
    }
}

/// Server side: reads the hello, negotiates, authenticates, welcomes or refuses.
pub(crate) async fn server<C: Channel>(
    quic: quinn::Connection,
    ours: &Name,
    session: u64,
    auth: &dyn Authenticator,
    limits: Arc<Limits>,
    ids: Arc<AtomicU64>,
    stats: TransportStats,
) -> Result<(Conn<C>, Hello, Option<Name>), Error> {
    let read = async {
        let (send, mut recv) = quic.accept_bi().await?;
        let payload = read_hello_frame::<C>(&mut recv).await?;
        Ok::<_, Error>((send, decode_payload::<Hello>(&payload)?))
    };
    let (mut send, hello) = match tokio::time::timeout(limits.handshake_timeout, read).await {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => {
            close_with(&quic, e.code(), &e.to_string());
            return Err(e);
        }
        Err(_) => {
            close_with(&quic, ErrorCode::Timeout, "no hello in time");
            return Err(Error::Timeout { ms: limits.handshake_timeout.as_millis() as u64 });
        }
    };
    let ours_range = (MIN_PROTOCOL_VERSION, PROTOCOL_VERSION);
    let verdict = match negotiate(ours_range, (hello.min_version, hello.max_version)) {
        None => Err(Fault::new(
            ErrorCode::VersionMismatch,
            format!(
                "no common protocol version: we speak {}..={}, the client {}..={}",
                ours_range.0, ours_range.1, hello.min_version, hello.max_version
            ),
        )),
        Some(version) => auth.check(&hello, &quic).map(|identity| (version, identity)),
    };
    match verdict {
        Ok((version, identity)) => {
            let welcome = Welcome::Accepted { version, peer: ours.clone(), session };
            send.write_all(&to_frame(&welcome, version, C::ID, MAX_HELLO_BYTES)?).await?;
            let _ = send.finish();
            Ok((Conn::new(quic, version, hello.peer.clone(), limits, ids, stats), hello, identity))
        }
        Err(fault) => {
            tracing::info!(channel = C::ID.as_str(), peer = %hello.peer, code = fault.code.as_str(), "hello refused");
            let welcome = Welcome::Refused(fault.clone());
            if let Ok(frame) = to_frame(&welcome, PROTOCOL_VERSION, C::ID, MAX_HELLO_BYTES) {
                let _ = send.write_all(&frame).await;
                let _ = send.finish();
                // Let the client read why before the connection goes; it closes first.
                let _ =
                    tokio::time::timeout(std::time::Duration::from_secs(1), quic.closed()).await;
            }
            close_with(&quic, fault.code, &fault.message);
            Err(Error::Refused(fault))
        }
    }
}
