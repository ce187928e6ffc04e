//! What waits on the answers to the machine's requests: the continuations the shell hands
//! back with each result ([`Pending`]), and what a server taking a bubble is for.

use super::*;

/// What waits on the answer to a request the machine sent. Opaque: the shell hands it back
/// with the result ([`Input::CoreReplied`], [`Input::ServerReplied`], [`Input::PeerReplied`]).
#[derive(Debug)]
pub struct Pending(pub(super) Then);

#[derive(Debug)]
pub(super) enum Then {
    /// Nothing: a failure is logged with what the request was.
    Nothing(&'static str),
    Registered,
    Renewed {
        sent: Instant,
    },
    PlayerIds,
    /// A server took (or refused) a bubble for `job`.
    Assigned {
        server: Name,
        job: AssignJob,
    },
    /// A server let a player go; its state goes on as `then` says.
    Left {
        bubble: BubbleId,
        player: PlayerId,
        then: AfterLeave,
    },
    /// A server let a bubble the core revoked go: the `Revoke` (`token`) is answered once
    /// every server it asked has (or is gone), so that an order after it on the core's lane
    /// (a new epoch of that bubble here) never finds the old one still ticking.
    Released {
        token: Token,
    },
    /// One of the servers of a bubble being re-granted answered.
    Regranted {
        bubble: BubbleId,
    },
    Frozen {
        token: Token,
        handover: HandoverId,
        bubble: BubbleId,
    },
    /// A handover source's server started its snapshot and deltas.
    Copying {
        token: Token,
        handover: HandoverId,
        bubble: BubbleId,
    },
    Joined {
        player: PlayerId,
    },
    /// Another site took (or not) a player's crossing.
    Crossed {
        player: PlayerId,
    },
    /// The next hop answered a request passed on for another site: the answer goes back on
    /// `token`.
    Relayed {
        token: Token,
    },
    /// A handover target answered an `Open` that went round through `via`.
    MirrorRelayed {
        handover: HandoverId,
        target: Name,
        via: Name,
    },
    /// A step of a region's move to another server of this site (`rehome.rs`).
    Rehome {
        bubble: BubbleId,
        awaited: rehome::Awaited,
    },
}

/// What a server taking a bubble is for.
#[derive(Debug)]
pub(super) enum AssignJob {
    Create {
        token: Token,
        region: Region,
        lease: Lease,
        received: Instant,
    },
    Restore(RestoreJob),
    Standby {
        token: Token,
        handover: HandoverId,
        source: Name,
        lease: Lease,
        received: Instant,
    },
    /// A new part of a bubble being spread, or the new server of a region moved whole (its
    /// ticks go on from `from_tick`: `server::Request::Continue`).
    Part {
        lease: LeaseRef,
        from_tick: Option<Tick>,
    },
    /// The new server of a region moved whole with its state, standing by under `lease` (the
    /// core's newer epoch) for the old server's snapshot and seal (`rehome.rs`).
    Rehome {
        lease: LeaseRef,
    },
}

impl AssignJob {
    /// The lease a server takes to hold a bubble of its own (a creation, a restore, a
    /// handover target); `None` for a part or a move within the site, under a lease held here.
    pub(super) fn held_lease(&self) -> Option<LeaseRef> {
        let lease = match self {
            AssignJob::Create { lease, .. }
            | AssignJob::Restore(RestoreJob { lease, .. })
            | AssignJob::Standby { lease, .. } => lease,
            AssignJob::Part { .. } | AssignJob::Rehome { .. } => return None,
        };
        Some(LeaseRef { bubble: lease.bubble, epoch: lease.epoch })
    }

    /// The core's order it answers, if any.
    pub(super) fn token(&self) -> Option<Token> {
        match self {
            AssignJob::Create { token, .. }
            | AssignJob::Restore(RestoreJob { token, .. })
            | AssignJob::Standby { token, .. } => Some(*token),
            AssignJob::Part { .. } | AssignJob::Rehome { .. } => None,
        }
    }
}

/// A failover's restore: the copy to feed the server once it took the bubble.
#[derive(Debug)]
pub(super) struct RestoreJob {
    pub(super) token: Token,
    pub(super) region: Region,
    pub(super) lease: Lease,
    pub(super) copy: BackupCopy,
    pub(super) received: Instant,
}

/// A bubble's copy from the universe backup, to restore it from.
#[derive(Debug)]
pub(super) struct BackupCopy {
    /// The epoch and tick of the copy (of part 0's, when spread).
    pub(super) from: Epoch,
    pub(super) tick: Tick,
    pub(super) copy: Blob,
    /// The other parts' copies, when the copy was taken spread over several servers.
    pub(super) parts: Vec<Blob>,
}

#[derive(Debug)]
pub(super) enum AfterLeave {
    /// Nothing more (the core's members said so).
    Nothing,
    /// The player crossed into another bubble: its state goes there. `from`: the lease the
    /// bubble it leaves was held under.
    Cross { d: control::Departure, from: LeaseRef },
    /// Another part of the same bubble takes it.
    Part { to: Name },
}
