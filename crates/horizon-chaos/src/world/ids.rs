//! The run's numbering: connection ids and request tokens, each handed out once.

/// The next connection id and request token (both from 1; 0 means none).
#[derive(Debug, Default)]
pub(super) struct Ids {
    conn: u64,
    token: u64,
}

impl Ids {
    /// A new connection's id.
    pub(super) fn conn(&mut self) -> u64 {
        self.conn += 1;
        self.conn
    }

    /// A new request's token.
    pub(super) fn token(&mut self) -> u64 {
        self.token += 1;
        self.token
    }
}
