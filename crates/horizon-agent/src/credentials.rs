//! What the agent proves itself with and checks others against, kept current: its CA,
//! certificate and key, the player keys, and the key it signs its game servers' tokens with.
//! They are read again on SIGHUP or when one of their files changes; a set that does not load
//! changes nothing (docs/security.md).

use std::time::{Duration, SystemTime};

use horizon_proto::{ChannelId, Name, PlayerId};
use horizon_transport::credential::{Keyring, Kind, Resumption, SharedKeyring};
use horizon_transport::reload::{self, ReloadCause};
use horizon_transport::tls::{self, Identity, Roots};
use horizon_transport::{Limits, ServerTls};
use tokio::sync::mpsc;

use crate::config::AgentConfig;
use crate::events::{AgentError, Event};
use crate::machine;

/// How long a token the agent mints for one of its game servers is valid. The key that
/// signs it lives only in this agent's memory, so the token dies with the agent anyway.
const SERVER_TOKEN_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// How long a resumption credential is valid: a client asks its gateway for a fresh one
/// (`gateway::Request::Credential`) well within it (docs/protocol.md).
pub(crate) const RESUME_TTL: Duration = Duration::from_secs(3600);

/// What a reload touches: the files (from the config), the listeners, the keyrings.
pub(crate) struct Credentials {
    pub(crate) cfg: AgentConfig,
    /// Each listener, its channel, and whether it asks clients for a certificate.
    pub(crate) listener_tls: [(ServerTls, ChannelId, bool); 3],
    pub(crate) player_keys: SharedKeyring,
    pub(crate) server_keys: SharedKeyring,
}

/// Everything read again, ready to be put in place.
pub(crate) struct Reloaded {
    roots: Roots,
    identity: Identity,
    /// One per listener, in [`Credentials::listener_tls`]'s order.
    servers: Vec<quinn::ServerConfig>,
    control: quinn::ClientConfig,
    transfer: quinn::ClientConfig,
    keys: Keyring,
}

/// What the caller puts in place itself, once [`Credentials::install`] did the rest.
pub(crate) struct Installed {
    pub(crate) roots: Roots,
    pub(crate) identity: Identity,
    /// For the link to the core.
    pub(crate) control: quinn::ClientConfig,
    /// For the links to other agents.
    pub(crate) transfer: quinn::ClientConfig,
    /// The id of the player key that signs now.
    pub(crate) signing: String,
}

impl Credentials {
    /// A token for game server `name`, signed with this agent's own key.
    pub(crate) fn server_token(&self, name: &str) -> Result<String, String> {
        let until = SystemTime::now() + SERVER_TOKEN_TTL;
        self.server_keys.current().mint(Kind::Server, name, until).map_err(|e| e.to_string())
    }

    /// A resumption credential for `player` of `account`, homed at this site, signed with the
    /// site's player keys (any gateway of the site verifies it, a restarted one too).
    pub(crate) fn resume_credential(
        &self,
        player: PlayerId,
        account: &Name,
    ) -> Result<String, String> {
        let r = Resumption {
            site: self.cfg.site.to_string(),
            player: player.0,
            account: account.to_string(),
        };
        let until = SystemTime::now() + RESUME_TTL;
        self.player_keys.current().mint_resume(&r, until).map_err(|e| e.to_string())
    }

    /// What a resumption credential claims, if it is signed with the site's player keys and
    /// current; why not otherwise.
    pub(crate) fn check_resume(&self, token: &str) -> Result<machine::Resumption, String> {
        let r = self
            .player_keys
            .current()
            .verify_resume(token, SystemTime::now())
            .map_err(|e| e.to_string())?;
        let name = |s: String| Name::new(s).map_err(|e| e.to_string());
        Ok(machine::Resumption {
            site: name(r.site)?,
            player: PlayerId(r.player),
            account: name(r.account)?,
        })
    }

    /// Reads every file again and builds the TLS settings from them; why not, naming the file.
    pub(crate) fn load(&self, limits: &Limits) -> Result<Reloaded, String> {
        let (roots, identity, keys) = load_files(&self.cfg).map_err(|e| e.to_string())?;
        let mut servers = Vec::new();
        for (_, channel, mutual) in &self.listener_tls {
            let ca = mutual.then_some(&roots);
            servers.push(
                tls::server_config(&identity, ca, *channel, limits).map_err(|e| e.to_string())?,
            );
        }
        let client = |channel, limits: &Limits| {
            tls::client_config(&roots, Some(&identity), channel, limits).map_err(|e| e.to_string())
        };
        let control = client(ChannelId::Control, &Limits::control())?;
        let transfer = client(ChannelId::Transfer, limits)?;
        Ok(Reloaded { roots, identity, servers, control, transfer, keys })
    }

    /// Puts the listeners' settings and the player keys of `r` in place; the rest is for the
    /// caller (its links, what it dials with).
    pub(crate) fn install(&self, r: Reloaded) -> Installed {
        for ((handle, _, _), config) in self.listener_tls.iter().zip(r.servers) {
            handle.set(config);
        }
        let signing = r.keys.signing_id().to_owned();
        self.player_keys.replace(r.keys);
        Installed {
            roots: r.roots,
            identity: r.identity,
            control: r.control,
            transfer: r.transfer,
            signing,
        }
    }
}

/// The agent's files, read and checked as its peers will check them: the CA; the certificate
/// with its key, chaining to the CA and naming this site (as a server to its game servers and
/// players, as a client to the core and the other sites); the player keys. At start, at each
/// reload, and for `horizon agent --check`.
pub fn load_files(cfg: &AgentConfig) -> Result<(Roots, Identity, Keyring), AgentError> {
    let roots = Roots::load(&cfg.ca)?;
    let identity = Identity::load(&cfg.cert, &cfg.key)?;
    identity.verify(&roots, &horizon_transport::site_dns_name(&cfg.site), true).map_err(|e| {
        AgentError::Certificate { cert: cfg.cert.clone(), site: cfg.site.clone(), why: e }
    })?;
    let keys = Keyring::load(&cfg.player_keys)?;
    Ok((roots, identity, keys))
}

/// Forwards every reason to reload (SIGHUP, a file of `cfg` changed) into the agent's loop,
/// until the loop ends. Registers SIGHUP before it returns.
pub(crate) fn forward_reloads(cfg: &AgentConfig, events: mpsc::Sender<Event>) {
    let files = vec![cfg.ca.clone(), cfg.cert.clone(), cfg.key.clone(), cfg.player_keys.clone()];
    let mut causes = reload::watch(files, reload::POLL_EVERY);
    tokio::spawn(async move {
        loop {
            // Ends with the agent's loop (its queue closed).
            let cause: ReloadCause = tokio::select! {
                _ = events.closed() => break,
                c = causes.recv() => match c { Some(c) => c, None => break },
            };
            if events.send(Event::Reload(cause)).await.is_err() {
                break;
            }
        }
    });
}
