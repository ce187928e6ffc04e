//! Credentials rotated without a restart: a daemon reloads its certificate, key, CA and
//! signing keys when it gets SIGHUP or when one of their files changes (a Kubernetes Secret
//! mounted as files changes in place). A reload that fails keeps what was loaded before.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::mpsc;

/// How often the files are looked at.
pub const POLL_EVERY: Duration = Duration::from_secs(2);

/// Once a change is seen, how long the files must stay as they are before the reload: a
/// certificate and its key are two files, written one after the other (`horizon certs add`),
/// and a reload between the two would fail (and raise an alert) for nothing. A file that
/// never stays still is reloaded after [`SETTLE_TRIES`] of these anyway.
pub const SETTLE: Duration = Duration::from_millis(300);
pub const SETTLE_TRIES: usize = 10;

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

/// Writes `text` beside `path` (`<path>.new`, with permissions `mode`), then renames it over
/// `path`: a daemon reloading the file never reads half of it. What `horizon certs` and
/// `horizon keys` write their files with.
pub fn replace_file(path: &Path, text: &str, mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut aside = path.as_os_str().to_owned();
    aside.push(".new");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&aside)?;
    file.write_all(text.as_bytes())?;
    std::fs::rename(&aside, path)
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
                    let mut now = digest(&paths);
                    if now != seen {
                        // Settled: the same for SETTLE (a writer still at work is waited for).
                        for _ in 0..SETTLE_TRIES {
                            tokio::time::sleep(SETTLE).await;
                            let then = digest(&paths);
                            if then == now {
                                break;
                            }
                            now = then;
                        }
                    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A certificate then its key, written 100 ms apart as one command writes them, are one
    /// reload, seen once both are written.
    #[tokio::test]
    async fn files_written_one_after_the_other_are_one_reload_once_all_are_written() {
        let dir = std::env::temp_dir().join(format!("horizon-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let (cert, key) = (dir.join("site.pem"), dir.join("site.key"));
        std::fs::write(&cert, "cert 1").expect("cert");
        std::fs::write(&key, "key 1").expect("key");
        let mut causes = watch(vec![cert.clone(), key.clone()], Duration::from_millis(50));
        tokio::time::sleep(Duration::from_millis(120)).await;
        std::fs::write(&cert, "cert 2").expect("cert");
        tokio::time::sleep(Duration::from_millis(100)).await;
        std::fs::write(&key, "key 2").expect("key");
        let written = tokio::time::Instant::now();
        let first = tokio::time::timeout(Duration::from_secs(2), causes.recv()).await;
        let after = written.elapsed();
        let second = tokio::time::timeout(Duration::from_millis(800), causes.recv()).await;
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(first.ok().flatten(), Some(ReloadCause::FileChanged));
        assert!(after < Duration::from_secs(1), "reloaded {after:?} after the last write");
        assert!(second.is_err(), "one reload, not one per file: {second:?}");
    }
}
