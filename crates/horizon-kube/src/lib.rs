//! Game servers as Kubernetes pods.
//!
//! [`KubernetesDriver`] is the agent's [`horizon_agent::ServerDriver`] for a cluster: it
//! creates one pod per game server from the pod template of the agent's configuration
//! ([`pod`]), watches them with kube-runtime's watcher and reflector, and tells the agent
//! when one ended and why ([`status`]: an exit, OOMKilled, an eviction, a deletion).
//!
//! [`fake`] is an API server of our own, honest enough for kube-runtime (resourceVersions,
//! list + watch with bookmarks, 410 Gone after compaction, label selectors, ownerReference
//! garbage collection), with a fake kubelet that runs each pod's container command as a
//! local process. `horizon demo --driver kube` and this crate's tests run on it; what it does
//! not model is listed in its module documentation.

pub mod driver;
pub mod fake;
pub mod options;
pub mod pod;
pub mod status;

pub use driver::{KubeError, KubernetesDriver};
pub use options::KubeOptions;
