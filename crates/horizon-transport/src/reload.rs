//! Credentials rotated without a restart: a daemon reloads its certificate, key, CA and
//! signing keys when it gets SIGHUP or when one of their files changes (a Kubernetes Secret
//! mounted as files changes in place). A reload that fails keeps what was loaded before.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc;

/// How often the files are looked at.
pub const POLL_EVERY: Duration = Duration::from_secs(2);

/// Why a reload is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReloadCause {
    Signal,
    FileChanged,
}

impl ReloadCause {
    pub fn as_str(self) -> &'static str {
        match self {
            ReloadCause::Signal => "SIGHUP",
            ReloadCause::FileChanged => "a file changed",
        }
    }
}

/// The contents of `paths`, digested (a missing file digests as missing).
fn digest(paths: &[PathBuf]) -> u64 {
    let mut h = DefaultHasher::new();
    for p in paths {
        std::fs::read(p).ok().hash(&mut h);
    }
    h.finish()
}

/// Watches `paths` and the process's SIGHUP; each cause arrives on the receiver (at most one
/// waits: a burst of changes is one reload). Ends when the receiver is dropped. Call it within
/// a tokio runtime.
pub fn watch(paths: Vec<PathBuf>, every: Duration) -> mpsc::Receiver<ReloadCause> {
    let (tx, rx) = mpsc::channel(1);
    // Registered before this returns: from then on SIGHUP reloads, never stops, the process.
    #[cfg(unix)]
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let mut seen = digest(&paths);
    tokio::spawn(async move {
        loop {
            #[cfg(unix)]
            let signalled = async {
                match hup.as_mut() {
                    Some(s) => s.recv().await,
                    None => std::future::pending().await,
                }
            };
            #[cfg(not(unix))]
            let signalled = std::future::pending::<Option<()>>();
            let cause = tokio::select! {
                _ = signalled => Some(ReloadCause::Signal),
                _ = tokio::time::sleep(every) => {
                    let now = digest(&paths);
                    (now != seen).then(|| { seen = now; ReloadCause::FileChanged })
                }
                _ = tx.closed() => return,
            };
            if let Some(cause) = cause {
                if cause == ReloadCause::Signal {
                    seen = digest(&paths);
                }
                let _ = tx.try_send(cause);
            }
        }
    });
    rx
}
