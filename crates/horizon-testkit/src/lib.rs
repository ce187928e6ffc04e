//! # horizon-testkit — the whole mesh in one process tree
//!
//! [`Sandbox`] starts a real core, one real agent per site and, through each agent's process
//! driver, real `horizon gameserver` processes; every link between sites goes through the WAN
//! emulator (`horizon_transport::netem`) with the configured backbone RTT, and players reach
//! their home agent through one more emulated access link. [`bots`] are simulated players that
//! speak the gateway protocol and measure what a player sees. The tests and `horizon demo` use
//! exactly this; nothing here is a mock.

pub mod bots;
mod cut;
mod etcd;
mod ports;
mod sandbox;
pub mod stats;
mod tapped;

pub use cut::TcpCut;
pub use etcd::{EtcdCluster, EtcdServer, EtcdTls};
pub use ports::ReservedPort;
pub use sandbox::{DriverFactory, MakeDriver, Sandbox, SandboxError, SandboxOptions};
pub use tapped::TappedDriver;
