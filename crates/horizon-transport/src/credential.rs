//! Signed credentials: a token names one subject (a player's account, a game server's name)
//! and is signed with HMAC-SHA256 by a key of a [`Keyring`], so a holder can speak only as
//! that subject. The format is documented for studios' auth services in docs/security.md:
//!
//! ```text
//! hz1.<kind>.<subject>.<not_after>.<key_id>.<mac>
//! ```
//!
//! `kind` is `player`, `server` or `resume`; `subject` is 1 to 64 of `A–Z a–z 0–9 _ - @ :`
//! (for `resume`, `<site>:<player id>:<account>`, up to 160: see [`Resumption`]); `not_after`
//! is a Unix time in seconds (the token is refused after it); `key_id` names the key that
//! signed; `mac` is the unpadded base64url of HMAC-SHA256(key, everything before the last
//! dot). The first key of a ring signs, every key of it verifies: rotating is adding a key at
//! the top, and removing the old one once the tokens it signed expired.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use horizon_proto::{ErrorCode, Fault, Hello, Name};
use ring::hmac;

use crate::handshake::Authenticator;

/// The version prefix of every token.
const PREFIX: &str = "hz1";
/// The fewest bytes of a key's secret.
pub const MIN_SECRET_BYTES: usize = 32;
/// The longest subject.
pub const MAX_SUBJECT_BYTES: usize = 64;
/// The longest subject of a resumption credential (site, player id and account).
pub const MAX_RESUME_SUBJECT_BYTES: usize = 160;
/// The longest token read (longer is refused before any work).
pub const MAX_TOKEN_BYTES: usize = 320;
/// The most keys in one ring.
pub const MAX_KEYS: usize = 16;

/// What a token is for: a token of one kind is never accepted as the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A player's account, at a gateway.
    Player,
    /// A game server's name, at an agent's server port.
    Server,
    /// A player's session at one site, which a gateway of that site resumes (a
    /// [`Resumption`]).
    Resume,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Player => "player",
            Kind::Server => "server",
            Kind::Resume => "resume",
        }
    }

    /// The longest subject a token of this kind may name.
    fn max_subject(self) -> usize {
        match self {
            Kind::Player | Kind::Server => MAX_SUBJECT_BYTES,
            Kind::Resume => MAX_RESUME_SUBJECT_BYTES,
        }
    }
}

/// What a resumption credential says: player `player` of account `account` plays a session
/// homed at `site`. A gateway gives one with every `Joined`, signed with the site's player
/// keys (so any gateway of the site, or the same one restarted, verifies it without having
/// seen it); it checks the rest (the site is its own, the hello's account is `account`, the
/// player is still in the game) itself. Its subject is `<site>:<player>:<account>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resumption {
    pub site: String,
    pub player: u64,
    pub account: String,
}

impl Resumption {
    fn subject(&self) -> String {
        format!("{}:{}:{}", self.site, self.player, self.account)
    }

    fn parse(subject: &str) -> Option<Resumption> {
        let (site, rest) = subject.split_once(':')?;
        let (player, account) = rest.split_once(':')?;
        let digits = player.bytes().all(|b| b.is_ascii_digit());
        let player = player.parse().ok().filter(|_| digits)?;
        let ok = valid_subject(account) && valid_subject(site);
        ok.then(|| Resumption { site: site.to_owned(), player, account: account.to_owned() })
    }
}

/// Why a keyring file or a token was refused.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("{path}: {why}")]
    File { path: PathBuf, why: String },
    #[error("{0}")]
    Token(&'static str),
}

/// Keys that sign and verify tokens: the first signs, all verify.
pub struct Keyring {
    keys: Vec<(String, hmac::Key)>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(id, _)| id.as_str()).collect();
        f.debug_struct("Keyring").field("key_ids", &ids).finish()
    }
}

fn is_subject_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '@' | ':')
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 32
        && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Checks a subject: 1 to [`MAX_SUBJECT_BYTES`] of `A–Z a–z 0–9 _ - @ :`.
pub fn valid_subject(subject: &str) -> bool {
    valid_subject_of(subject, Kind::Player)
}

fn valid_subject_of(subject: &str, kind: Kind) -> bool {
    !subject.is_empty()
        && subject.len() <= kind.max_subject()
        && subject.chars().all(is_subject_char)
}

impl Keyring {
    /// A ring of one fresh random key (for credentials an agent mints for its own game
    /// servers, which nobody else needs to verify).
    pub fn random(id: &str) -> Self {
        let rng = ring::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng).expect("the system's random source");
        Keyring { keys: vec![(id.to_owned(), key)] }
    }

    /// A new key file's text: one key with a fresh random secret, named `id`.
    pub fn generate_file(id: &str) -> String {
        let mut secret = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret)
            .expect("the system's random source");
        format!(
            "# Horizon signing keys: `<key id> <base64url secret>` per line; the first signs, all verify.\n{id} {}\n",
            URL_SAFE_NO_PAD.encode(secret)
        )
    }

    /// Parses a key file: `<id> <base64url secret of ≥ 32 bytes>` per line, `#` comments.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut keys: Vec<(String, hmac::Key)> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (id, secret) = line
                .split_once(char::is_whitespace)
                .ok_or_else(|| format!("line {}: expected `<key id> <secret>`", n + 1))?;
            if !valid_id(id) {
                return Err(format!("line {}: key id must be 1 to 32 of A-Z a-z 0-9 _ -", n + 1));
            }
            if keys.iter().any(|(k, _)| k == id) {
                return Err(format!("line {}: key id {id} given twice", n + 1));
            }
            let secret = URL_SAFE_NO_PAD
                .decode(secret.trim().trim_end_matches('='))
                .map_err(|e| format!("line {}: the secret is not base64url: {e}", n + 1))?;
            if secret.len() < MIN_SECRET_BYTES {
                return Err(format!(
                    "line {}: a secret of {} bytes is too short (at least {MIN_SECRET_BYTES})",
                    n + 1,
                    secret.len()
                ));
            }
            keys.push((id.to_owned(), hmac::Key::new(hmac::HMAC_SHA256, &secret)));
        }
        if keys.is_empty() {
            return Err("no key in the file".to_owned());
        }
        if keys.len() > MAX_KEYS {
            return Err(format!("{} keys, at most {MAX_KEYS}", keys.len()));
        }
        Ok(Keyring { keys })
    }

    /// Reads and parses a key file.
    pub fn load(path: &Path) -> Result<Self, CredentialError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CredentialError::File { path: path.to_owned(), why: e.to_string() })?;
        Keyring::parse(&text).map_err(|why| CredentialError::File { path: path.to_owned(), why })
    }

    /// The id of the key that signs.
    pub fn signing_id(&self) -> &str {
        &self.keys[0].0
    }

    /// A token of `kind` for `subject`, valid until `not_after`.
    pub fn mint(
        &self,
        kind: Kind,
        subject: &str,
        not_after: SystemTime,
    ) -> Result<String, CredentialError> {
        if !valid_subject_of(subject, kind) {
            return Err(CredentialError::Token("a subject is 1 to 64 of A-Z a-z 0-9 _ - @ :"));
        }
        let secs = not_after.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let (id, key) = &self.keys[0];
        let body = format!("{PREFIX}.{}.{subject}.{secs}.{id}", kind.as_str());
        let mac = URL_SAFE_NO_PAD.encode(hmac::sign(key, body.as_bytes()).as_ref());
        Ok(format!("{body}.{mac}"))
    }

    /// The subject of a valid token of `kind` at `now`; why not otherwise.
    pub fn verify(
        &self,
        token: &str,
        kind: Kind,
        now: SystemTime,
    ) -> Result<String, CredentialError> {
        let bad = CredentialError::Token;
        if token.len() > MAX_TOKEN_BYTES {
            return Err(bad("token too long"));
        }
        let (body, mac) = token.rsplit_once('.').ok_or(bad("not a Horizon token"))?;
        let mut parts = body.split('.');
        let (Some(prefix), Some(k), Some(subject), Some(secs), Some(id), None) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("not a Horizon token"));
        };
        if prefix != PREFIX {
            return Err(bad("not a Horizon token of version hz1"));
        }
        if k != kind.as_str() {
            return Err(bad("a token of another kind"));
        }
        let key = self.keys.iter().find(|(i, _)| i == id).ok_or(bad("signed by an unknown key"))?;
        let mac = URL_SAFE_NO_PAD.decode(mac).map_err(|_| bad("bad signature"))?;
        // ring compares in constant time.
        hmac::verify(&key.1, body.as_bytes(), &mac).map_err(|_| bad("bad signature"))?;
        let secs: u64 = secs.parse().map_err(|_| bad("bad expiry"))?;
        if now > UNIX_EPOCH + Duration::from_secs(secs) {
            return Err(bad("token expired"));
        }
        if !valid_subject_of(subject, kind) {
            return Err(bad("bad subject"));
        }
        Ok(subject.to_owned())
    }

    /// A resumption credential for `r`, valid until `not_after`.
    pub fn mint_resume(
        &self,
        r: &Resumption,
        not_after: SystemTime,
    ) -> Result<String, CredentialError> {
        if Resumption::parse(&r.subject()).as_ref() != Some(r) {
            return Err(CredentialError::Token(
                "a site and an account are each 1 to 64 of A-Z a-z 0-9 _ - @, the site without :",
            ));
        }
        self.mint(Kind::Resume, &r.subject(), not_after)
    }

    /// What a valid resumption credential says at `now`; why not otherwise.
    pub fn verify_resume(
        &self,
        token: &str,
        now: SystemTime,
    ) -> Result<Resumption, CredentialError> {
        let subject = self.verify(token, Kind::Resume, now)?;
        Resumption::parse(&subject).ok_or(CredentialError::Token("bad subject"))
    }
}

/// A keyring that can be swapped while in use (a reload on SIGHUP or on a file change).
#[derive(Clone, Debug)]
pub struct SharedKeyring(Arc<RwLock<Arc<Keyring>>>);

impl SharedKeyring {
    pub fn new(ring: Keyring) -> Self {
        SharedKeyring(Arc::new(RwLock::new(Arc::new(ring))))
    }

    pub fn current(&self) -> Arc<Keyring> {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    pub fn replace(&self, ring: Keyring) {
        *self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(ring);
    }
}

/// Gateways and server ports: the hello's token must be a valid signed token of this kind.
/// For game servers the token's subject must be the hello's `peer` (a server speaks only
/// under the name it was given); for players the subject is the player's account, which the
/// gateway takes as who the client is (the hello's `peer` is only a label).
#[derive(Clone, Debug)]
pub struct SignedToken {
    pub keys: SharedKeyring,
    pub kind: Kind,
}

impl Authenticator for SignedToken {
    fn check(&self, hello: &Hello, _: &quinn::Connection) -> Result<Option<Name>, Fault> {
        let token = hello.token.as_deref().unwrap_or_default();
        let subject = self
            .keys
            .current()
            .verify(token, self.kind, SystemTime::now())
            .map_err(|e| Fault::new(ErrorCode::Unauthorized, e.to_string()))?;
        if self.kind == Kind::Server && subject != hello.peer.as_str() {
            return Err(Fault::new(
                ErrorCode::Unauthorized,
                format!("this token is for server {subject}, not {}", hello.peer),
            ));
        }
        Name::new(subject).map(Some).map_err(|e| Fault::new(ErrorCode::Unauthorized, e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(text: &str) -> Keyring {
        Keyring::parse(text).unwrap()
    }

    const A: &str = "a AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    const B: &str = "b BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBA";

    fn later() -> SystemTime {
        SystemTime::now() + Duration::from_secs(60)
    }

    #[test]
    fn a_minted_token_verifies_for_its_subject_and_kind_only() {
        let keys = ring(A);
        let token = keys.mint(Kind::Player, "alice", later()).unwrap();
        assert_eq!(keys.verify(&token, Kind::Player, SystemTime::now()).unwrap(), "alice");
        assert!(keys.verify(&token, Kind::Server, SystemTime::now()).is_err());
        // Another subject with the same signature: refused.
        let forged = token.replace("alice", "bobby");
        assert!(keys.verify(&forged, Kind::Player, SystemTime::now()).is_err());
        // Another key: refused.
        assert!(ring(B).verify(&token, Kind::Player, SystemTime::now()).is_err());
    }

    #[test]
    fn an_expired_token_is_refused() {
        let keys = ring(A);
        let token = keys.mint(Kind::Server, "srv-1", SystemTime::now()).unwrap();
        let after = SystemTime::now() + Duration::from_secs(2);
        assert!(matches!(
            keys.verify(&token, Kind::Server, after),
            Err(CredentialError::Token("token expired"))
        ));
    }

    #[test]
    fn rotation_a_new_key_on_top_signs_and_the_old_one_still_verifies() {
        let old = ring(A);
        let token = old.mint(Kind::Player, "alice", later()).unwrap();
        let both = ring(&format!("{B}\n{A}\n"));
        assert_eq!(both.signing_id(), "b");
        assert_eq!(both.verify(&token, Kind::Player, SystemTime::now()).unwrap(), "alice");
        let new = both.mint(Kind::Player, "alice", later()).unwrap();
        assert!(old.verify(&new, Kind::Player, SystemTime::now()).is_err());
        assert!(ring(B).verify(&new, Kind::Player, SystemTime::now()).is_ok());
    }

    #[test]
    fn bad_key_files_say_which_line_and_why() {
        let e = |t: &str| Keyring::parse(t).unwrap_err();
        assert!(e("").contains("no key"));
        assert!(e("a").contains("line 1"));
        assert!(e("a c2hvcnQ").contains("too short"));
        assert!(e(&format!("{A}\n{A}")).contains("twice"));
        assert!(e("a b@d!").contains("base64url"));
        assert!(e(&format!("bad.id {}", &A[2..])).contains("key id"));
        assert!(Keyring::parse(&Keyring::generate_file("k1")).is_ok());
    }

    #[test]
    fn garbage_tokens_are_refused_without_panicking() {
        let keys = ring(A);
        for t in [
            "",
            ".",
            "hz1",
            "hz1.player.a.1.a.",
            "hz2.player.a.99999999999.a.x",
            "hz1.player..1.a.x",
            &"x".repeat(300),
        ] {
            assert!(keys.verify(t, Kind::Player, SystemTime::now()).is_err(), "{t}");
        }
        assert!(keys.mint(Kind::Player, "a.b", later()).is_err());
        assert!(keys.mint(Kind::Player, "", later()).is_err());
    }

    fn alice_at_mtl() -> Resumption {
        Resumption { site: "MTL".into(), player: 4097, account: "alice@studio".into() }
    }

    #[test]
    fn a_resumption_credential_names_its_site_player_and_account_and_nothing_else_verifies_it() {
        let keys = ring(A);
        let token = keys.mint_resume(&alice_at_mtl(), later()).unwrap();
        assert!(token.starts_with("hz1.resume.MTL:4097:alice@studio."), "{token}");
        assert_eq!(keys.verify_resume(&token, SystemTime::now()).unwrap(), alice_at_mtl());
        // Not a player's token, nor a server's; a player's token is not one either.
        assert!(keys.verify(&token, Kind::Player, SystemTime::now()).is_err());
        let player = keys.mint(Kind::Player, "alice", later()).unwrap();
        assert!(keys.verify_resume(&player, SystemTime::now()).is_err());
        // Another player id under the same signature: forged.
        let forged = token.replace(":4097:", ":4098:");
        assert!(matches!(
            keys.verify_resume(&forged, SystemTime::now()),
            Err(CredentialError::Token("bad signature"))
        ));
        // Another site's keys: refused.
        assert!(ring(B).verify_resume(&token, SystemTime::now()).is_err());
        // Expired.
        let after = SystemTime::now() + Duration::from_secs(120);
        assert!(matches!(
            keys.verify_resume(&token, after),
            Err(CredentialError::Token("token expired"))
        ));
    }

    #[test]
    fn a_resumption_of_the_longest_names_fits_and_a_site_with_a_colon_is_refused() {
        let keys = ring(A);
        let long = Resumption { site: "s".repeat(64), player: u64::MAX, account: "a".repeat(64) };
        let token = keys.mint_resume(&long, later()).unwrap();
        assert!(token.len() <= MAX_TOKEN_BYTES, "{}", token.len());
        assert_eq!(keys.verify_resume(&token, SystemTime::now()).unwrap(), long);
        let colon = Resumption { site: "a:b".into(), ..alice_at_mtl() };
        assert!(keys.mint_resume(&colon, later()).is_err());
        let dotted = Resumption { account: "a.b".into(), ..alice_at_mtl() };
        assert!(keys.mint_resume(&dotted, later()).is_err());
    }
}
