//! Error codes: one number space for refused requests and for QUIC connection close codes.

use std::fmt;

/// Why a request was refused or a connection closed. On the wire it is a `u16`; a code this
/// version does not know decodes as [`ErrorCode::Other`] instead of failing, so a newer peer's
/// codes never break an older one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(from = "u16", into = "u16")]
pub enum ErrorCode {
    /// No protocol version in common (hello), or a frame of another version than negotiated.
    VersionMismatch,
    /// A frame that does not decode: bad magic, truncated, trailing bytes, invalid field.
    Malformed,
    /// A frame or message over its size limit.
    TooLarge,
    /// Bad or missing token / certificate, or a certificate that does not name the peer.
    Unauthorized,
    /// A frame for another channel than the connection's ALPN.
    WrongChannel,
    /// The request names a bubble the receiver does not know.
    UnknownBubble,
    /// The request carries an epoch older than the newest the receiver has seen (fencing).
    StaleEpoch,
    /// The holder's lease ran out before the request could be served.
    LeaseExpired,
    /// Queue full: retry later with the same request id.
    Busy,
    /// No answer within the request's deadline.
    Timeout,
    /// The receiver cannot serve this yet (no ready server, not registered, still syncing).
    NotReady,
    /// The same request id was used for a different request.
    Conflict,
    /// The message is valid but not allowed in this state or from this side.
    Unexpected,
    /// The peer is shutting down; reconnect elsewhere or later.
    ShuttingDown,
    /// A bug on the receiver's side. The message says more.
    Internal,
    /// This core stands by for another: the message ends with the leader's control address
    /// (`host:port`, [`Fault::leader`]), which the agent dials next.
    NotLeader,
    /// A code this version does not know.
    Other(u16),
}

impl ErrorCode {
    /// Every named code, in wire order (for docs and tests).
    pub const ALL: [ErrorCode; 16] = [
        ErrorCode::VersionMismatch,
        ErrorCode::Malformed,
        ErrorCode::TooLarge,
        ErrorCode::Unauthorized,
        ErrorCode::WrongChannel,
        ErrorCode::UnknownBubble,
        ErrorCode::StaleEpoch,
        ErrorCode::LeaseExpired,
        ErrorCode::Busy,
        ErrorCode::Timeout,
        ErrorCode::NotReady,
        ErrorCode::Conflict,
        ErrorCode::Unexpected,
        ErrorCode::ShuttingDown,
        ErrorCode::Internal,
        ErrorCode::NotLeader,
    ];

    /// The number on the wire (and the QUIC application close code).
    pub fn to_u16(self) -> u16 {
        match self {
            ErrorCode::VersionMismatch => 1,
            ErrorCode::Malformed => 2,
            ErrorCode::TooLarge => 3,
            ErrorCode::Unauthorized => 4,
            ErrorCode::WrongChannel => 5,
            ErrorCode::UnknownBubble => 6,
            ErrorCode::StaleEpoch => 7,
            ErrorCode::LeaseExpired => 8,
            ErrorCode::Busy => 9,
            ErrorCode::Timeout => 10,
            ErrorCode::NotReady => 11,
            ErrorCode::Conflict => 12,
            ErrorCode::Unexpected => 13,
            ErrorCode::ShuttingDown => 14,
            ErrorCode::Internal => 15,
            ErrorCode::NotLeader => 16,
            ErrorCode::Other(code) => code,
        }
    }

    /// A short stable name, for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::VersionMismatch => "version_mismatch",
            ErrorCode::Malformed => "malformed",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::WrongChannel => "wrong_channel",
            ErrorCode::UnknownBubble => "unknown_bubble",
            ErrorCode::StaleEpoch => "stale_epoch",
            ErrorCode::LeaseExpired => "lease_expired",
            ErrorCode::Busy => "busy",
            ErrorCode::Timeout => "timeout",
            ErrorCode::NotReady => "not_ready",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Unexpected => "unexpected",
            ErrorCode::ShuttingDown => "shutting_down",
            ErrorCode::Internal => "internal",
            ErrorCode::NotLeader => "not_leader",
            ErrorCode::Other(_) => "other",
        }
    }
}

impl From<u16> for ErrorCode {
    fn from(code: u16) -> Self {
        ErrorCode::ALL
            .into_iter()
            .find(|known| known.to_u16() == code)
            .unwrap_or(ErrorCode::Other(code))
    }
}

impl From<ErrorCode> for u16 {
    fn from(code: ErrorCode) -> u16 {
        code.to_u16()
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorCode::Other(code) => write!(f, "error code {code}"),
            known => write!(f, "{} ({})", known.as_str(), known.to_u16()),
        }
    }
}

/// A refused request: a code to act on and a message for humans.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Fault {
    pub code: ErrorCode,
    pub message: String,
}

impl Fault {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Fault { code, message: message.into() }
    }

    /// A standby's answer: this core does not lead, the one at `leader` (`host:port`) does.
    pub fn not_leader(leader: &str) -> Self {
        Fault::new(ErrorCode::NotLeader, format!("this core stands by; the leader is at {leader}"))
    }

    /// The leader's control address a [`ErrorCode::NotLeader`] fault names: its message's
    /// last word. `None` for another fault.
    pub fn leader(&self) -> Option<&str> {
        if self.code != ErrorCode::NotLeader {
            return None;
        }
        self.message.rsplit(' ').next().filter(|a| a.contains(':'))
    }
}

/// Why a request got no reply, in the kinds a state machine acts on differently. The shells
/// turn their transport's errors into these (`horizon_transport::Error` converts); the
/// machines never see a transport type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// Nothing to send it on: not connected, or the connection could not be made. The peer
    /// never saw the request.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The peer answered with a fault: it saw the request and said no.
    #[error("refused: {0}")]
    Refused(Fault),
    /// No answer within the deadline: the peer may have acted on it.
    #[error("no answer within {ms} ms")]
    TimedOut { ms: u64 },
    /// The connection ended (lost, closed, shut down) before the answer: the peer may have
    /// acted on it.
    #[error("connection gone: {0}")]
    Gone(String),
}

impl Failure {
    /// Whether the peer may have carried the request out (no answer came): only a refusal or a
    /// request that never left is known not to have happened.
    pub fn may_have_acted(&self) -> bool {
        matches!(self, Failure::TimedOut { .. } | Failure::Gone(_))
    }

    /// The code to pass on: the peer's own when it refused, else what happened here.
    pub fn code(&self) -> ErrorCode {
        match self {
            Failure::Refused(fault) => fault.code,
            Failure::TimedOut { .. } => ErrorCode::Timeout,
            Failure::Unreachable(_) | Failure::Gone(_) => ErrorCode::NotReady,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_codes_survive() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::from(code.to_u16()), code);
        }
        assert_eq!(ErrorCode::from(999), ErrorCode::Other(999));
        assert_eq!(ErrorCode::Other(999).to_u16(), 999);
    }

    #[test]
    fn a_not_leader_fault_names_the_leader_and_no_other_fault_does() {
        let fault = Fault::not_leader("core-1.horizon:7400");
        assert_eq!((fault.code.to_u16(), fault.code.as_str()), (16, "not_leader"));
        assert_eq!(fault.leader(), Some("core-1.horizon:7400"));
        assert_eq!(Fault::new(ErrorCode::NotReady, "wait at 1.2.3.4:5").leader(), None);
        assert_eq!(Fault::new(ErrorCode::NotLeader, "nobody leads").leader(), None);
    }
}
