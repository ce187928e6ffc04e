//! The process driver with a test's hand on it: every call goes to the real
//! [`ProcessDriver`], except where the test asked otherwise.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use horizon_agent::{DriverError, ProcessDriver, ProcessOptions, ServerDriver};

/// A [`ProcessDriver`] of which a test may take one server name ([`TappedDriver::taking`]:
/// that server is not started, its token goes to the test, which speaks as it) and whose
/// readiness a test may hold ([`TappedDriver::gated`]: standing for a pod's `Ready`
/// condition). Everything else, stopping and terminating included, is the process driver's.
pub struct TappedDriver {
    inner: ProcessDriver,
    taken: Option<(String, Arc<Mutex<Option<String>>>)>,
    ready: Option<Arc<AtomicBool>>,
}

impl std::fmt::Debug for TappedDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("TappedDriver")
            .field("taken", &self.taken.as_ref().map(|(name, _)| name))
            .field("gated", &self.ready.is_some())
            .finish_non_exhaustive()
    }
}

impl TappedDriver {
    pub fn new(opts: &ProcessOptions) -> Self {
        TappedDriver { inner: ProcessDriver::new(opts.clone()), taken: None, ready: None }
    }

    /// Server `name` is not started; the token the agent gave it is put in `token`.
    pub fn taking(mut self, name: &str, token: Arc<Mutex<Option<String>>>) -> Self {
        self.taken = Some((name.to_owned(), token));
        self
    }

    /// Every server is ready by the platform's account only while `ready` holds.
    pub fn gated(mut self, ready: Arc<AtomicBool>) -> Self {
        self.ready = Some(ready);
        self
    }
}

impl ServerDriver for TappedDriver {
    fn start(&mut self, name: &str, agent: SocketAddr, token: &str) -> Result<(), DriverError> {
        if let Some((taken, slot)) = &self.taken
            && taken == name
        {
            *slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some(token.to_owned());
            return Ok(());
        }
        self.inner.start(name, agent, token)
    }
    fn stop(&mut self, name: &str) {
        self.inner.stop(name)
    }
    fn poll_ended(&mut self) -> Vec<(String, String)> {
        self.inner.poll_ended()
    }
    fn stop_all(&mut self) {
        self.inner.stop_all()
    }
    fn terminate_all(&mut self) {
        self.inner.terminate_all()
    }
    fn running(&self) -> usize {
        self.inner.running()
    }
    fn ready(&self, name: &str) -> bool {
        self.ready.as_ref().is_none_or(|r| r.load(Ordering::SeqCst)) && self.inner.ready(name)
    }
    fn set_hosting(&mut self, name: &str, hosting: bool) {
        self.inner.set_hosting(name, hosting)
    }
}
