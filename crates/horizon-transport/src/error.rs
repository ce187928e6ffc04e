//! What can go wrong on a link, in words a caller can act on.

use horizon_proto::{DecodeError, EncodeError, ErrorCode, Fault};

/// A transport error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The endpoint could not be set up (bad address, socket in use, TLS config).
    #[error("endpoint: {0}")]
    Setup(String),
    /// The QUIC/TLS handshake failed (unreachable, untrusted certificate, no common ALPN).
    #[error("connect to {addr}: {why}")]
    Connect { addr: String, why: String },
    /// The peer refused the hello (version mismatch, unauthorized, …).
    #[error("hello refused: {0}")]
    Refused(Fault),
    /// The peer answered a request with a fault.
    #[error("request refused: {0}")]
    Fault(Fault),
    /// The connection was closed with an error code (by the peer or by us).
    #[error("connection closed with {code}: {reason}")]
    Closed { code: ErrorCode, reason: String },
    /// The connection was lost (timeout, reset, endpoint gone). A [`crate::Link`] reconnects.
    #[error("connection lost: {0}")]
    Lost(String),
    /// No answer in time (reconnections included).
    #[error("no answer within {ms} ms")]
    Timeout { ms: u64 },
    /// The peer sent bytes that are not a valid frame; the connection is closed with its code.
    #[error("bad frame from peer: {0}")]
    Frame(#[from] DecodeError),
    /// We tried to send something over a limit.
    #[error("cannot send: {0}")]
    Encode(#[from] EncodeError),
    /// The link was shut down by its owner.
    #[error("link shut down")]
    Shutdown,
}

impl Error {
    /// The connection is gone and a new one may succeed (a retry by id is safe).
    pub fn is_connection_lost(&self) -> bool {
        matches!(self, Error::Lost(_) | Error::Closed { .. })
    }

    /// The code to report to the peer or to metrics.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Refused(fault) | Error::Fault(fault) => fault.code,
            Error::Closed { code, .. } => *code,
            Error::Timeout { .. } => ErrorCode::Timeout,
            Error::Frame(e) => e.code(),
            Error::Encode(e) => e.code(),
            Error::Shutdown => ErrorCode::ShuttingDown,
            Error::Setup(_) | Error::Connect { .. } | Error::Lost(_) => ErrorCode::Internal,
        }
    }
}

impl From<quinn::ConnectionError> for Error {
    fn from(e: quinn::ConnectionError) -> Self {
        match e {
            quinn::ConnectionError::ApplicationClosed(close) => {
                let code = stream_code(close.error_code);
                Error::Closed { code, reason: String::from_utf8_lossy(&close.reason).into_owned() }
            }
            other => Error::Lost(other.to_string()),
        }
    }
}

impl From<quinn::WriteError> for Error {
    fn from(e: quinn::WriteError) -> Self {
        match e {
            quinn::WriteError::ConnectionLost(e) => e.into(),
            quinn::WriteError::Stopped(code) => {
                Error::Fault(Fault::new(stream_code(code), "the peer stopped the stream"))
            }
            other => Error::Lost(other.to_string()),
        }
    }
}

impl From<quinn::ReadError> for Error {
    fn from(e: quinn::ReadError) -> Self {
        match e {
            quinn::ReadError::ConnectionLost(e) => e.into(),
            // The peer gave up on this stream (e.g. dropped a request without replying): the
            // connection is fine, so this is an answer, not a reason to reconnect and retry.
            quinn::ReadError::Reset(code) => {
                Error::Fault(Fault::new(stream_code(code), "the peer reset the stream"))
            }
            other => Error::Lost(other.to_string()),
        }
    }
}

impl From<Error> for horizon_proto::Failure {
    fn from(e: Error) -> Self {
        use horizon_proto::Failure;
        match e {
            Error::Setup(_) | Error::Connect { .. } => Failure::Unreachable(e.to_string()),
            Error::Refused(fault) | Error::Fault(fault) => Failure::Refused(fault),
            Error::Timeout { ms } => Failure::TimedOut { ms },
            Error::Closed { .. } | Error::Lost(_) | Error::Shutdown => Failure::Gone(e.to_string()),
            // A frame we could not read or send is an answer of sorts: refused, with its code.
            Error::Frame(_) | Error::Encode(_) => {
                Failure::Refused(Fault::new(e.code(), e.to_string()))
            }
        }
    }
}

/// A stream or connection error code as ours (codes beyond `u16` are not ours).
fn stream_code(code: quinn::VarInt) -> ErrorCode {
    u16::try_from(code.into_inner()).map_or(ErrorCode::Other(u16::MAX), ErrorCode::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use horizon_proto::Failure;

    #[test]
    fn a_transport_error_becomes_the_failure_a_machine_acts_on() {
        let refused = Fault::new(ErrorCode::StaleEpoch, "newer epoch");
        let cases = [
            (Error::Connect { addr: "a:1".into(), why: "no route".into() }, "unreachable", false),
            (Error::Fault(refused.clone()), "refused", false),
            (Error::Refused(refused.clone()), "refused", false),
            (Error::Timeout { ms: 5_000 }, "timed out", true),
            (Error::Lost("reset".into()), "gone", true),
            (Error::Closed { code: ErrorCode::Timeout, reason: "idle".into() }, "gone", true),
            (Error::Shutdown, "gone", true),
        ];
        for (error, kind, may_have_acted) in cases {
            let failure = Failure::from(error);
            let got = match &failure {
                Failure::Unreachable(_) => "unreachable",
                Failure::Refused(_) => "refused",
                Failure::TimedOut { .. } => "timed out",
                Failure::Gone(_) => "gone",
            };
            assert_eq!((got, failure.may_have_acted()), (kind, may_have_acted), "{failure}");
        }
        assert_eq!(Failure::from(Error::Fault(refused)).code(), ErrorCode::StaleEpoch);
    }
}
