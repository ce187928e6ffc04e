//! This site's side of a handover (design.md §5): a target's server standing by for the
//! state, a source's server copying its snapshot and deltas onto the handover's stream
//! (directly, or relayed round through a third site), its freeze and seal, and an abort.
//! Who plays which role is kept in `roles.rs`; the bubbles themselves in `bubbles.rs`.

use super::*;

impl AgentMachine {
    /// Stands a server by for a handover's state. `Ok(false)`: already standing by (answer
    /// at once); `Ok(true)`: answered when the server took it.
    pub(super) fn prepare_target(
        &mut self,
        token: Token,
        handover: HandoverId,
        bubble: BubbleId,
        source: Name,
        lease: Lease,
        now: Instant,
    ) -> Result<bool, Fault> {
        if self.bubbles.get(&bubble).is_some_and(|b| b.phase() == Phase::Standby { handover }) {
            return Ok(false);
        }
        let region = Region { world: WorldId(0), bounds: None };
        let job = AssignJob::Standby { token, handover, source, lease, received: now };
        self.assign(lease, region, 1, true, job, now, now)?;
        Ok(true)
    }

    /// A handover source: asks the target for a stream, then its server for a snapshot and
    /// deltas onto it. Answered when both are under way.
    pub(super) fn prepare_source(
        &mut self,
        token: Token,
        handover: HandoverId,
        bubble: BubbleId,
        target: Name,
        lease: Lease,
    ) {
        if self.bubbles.get(&bubble).is_none_or(|b| b.lease().epoch != lease.epoch) {
            self.answer(token, Err(unknown(bubble)));
            return;
        }
        // The state goes over this site's one transfer connection to the target (the core's
        // `target_addr` is what a fresh link would dial; the link exists once both registered),
        // or round through a third site while that link is down (`routes.rs`).
        if !self.reaches(&target) {
            let fault = Fault::new(ErrorCode::NotReady, format!("no transfer link to {target}"));
            self.answer(token, Err(fault));
            return;
        }
        self.sources.opening(handover, bubble, token);
        let open = transfer::Request::Open { handover, bubble, epoch: lease.epoch };
        match self.relay_towards(&target) {
            Some(via) => {
                tracing::info!(site = %self.cfg.site, %target, %via, handover = handover.0, "handover state goes round through a third site");
                let then = Then::MirrorRelayed { handover, target: target.clone(), via };
                self.ask_peer(&target, Pending(then), open);
            }
            None => self.effects.push_back(Effect::OpenMirror {
                site: target,
                handover,
                bubble,
                epoch: lease.epoch,
            }),
        }
    }

    /// The target answered a handover's `Open` that went round through `via`: its state
    /// follows the same way (pinned: a route that changes meanwhile must not reorder it).
    pub(super) fn mirror_relayed(
        &mut self,
        handover: HandoverId,
        target: Name,
        via: Name,
        result: Result<transfer::Reply, Failure>,
    ) {
        let result = match result {
            Ok(transfer::Reply::Accepted { .. }) => {
                self.sources.relayed(handover, target, via);
                Ok(())
            }
            Ok(other) => Err(Failure::Refused(Fault::new(
                ErrorCode::Unexpected,
                format!("unexpected reply to open: {other:?}"),
            ))),
            Err(e) => Err(e),
        };
        self.mirror_opened(handover, result);
    }

    /// A handover's state stream ends: the shell's, or the relayed one's record.
    fn close_mirror(&mut self, handover: HandoverId) {
        if !self.sources.close(handover) {
            self.effects.push_back(Effect::CloseMirror { handover });
        }
    }

    pub(super) fn mirror_opened(&mut self, handover: HandoverId, result: Result<(), Failure>) {
        let Some((bubble, token)) = self.sources.opened(handover) else {
            // Abandoned meanwhile (a regrant): the stream is not needed.
            self.close_mirror(handover);
            return;
        };
        let local = match (result, self.bubbles.get_mut(&bubble)) {
            (Ok(()), Some(local)) => local,
            (Err(e), _) => {
                let fault = Fault::new(ErrorCode::NotReady, format!("transfer to target: {e}"));
                self.close_mirror(handover);
                self.answer(token, Err(fault));
                return;
            }
            (Ok(()), None) => {
                self.close_mirror(handover);
                self.answer(token, Err(unknown(bubble)));
                return;
            }
        };
        local.leaving(handover);
        let lease = local.lease_ref();
        let server = local.server().clone();
        self.sources.stream(bubble, handover);
        let then = Then::Copying { token, handover, bubble };
        self.ask_server(&server, then, server::Request::Copy { lease, deltas: true });
    }

    /// The source's server answered the handover's `Copy`.
    pub(super) fn copying(
        &mut self,
        token: Token,
        handover: HandoverId,
        bubble: BubbleId,
        result: Result<server::Reply, Failure>,
    ) {
        match result {
            Ok(_) => self.answer(token, Ok(control::Reply::Done)),
            Err(e) => {
                self.stop_mirror(bubble);
                if let Some(local) = self.bubbles.get_mut(&bubble)
                    && local.phase() == (Phase::Leaving { handover })
                {
                    local.running();
                }
                self.answer(token, Err(Fault::new(ErrorCode::NotReady, format!("snapshot: {e}"))));
            }
        }
    }

    pub(super) fn stop_mirror(&mut self, bubble: BubbleId) {
        if let Some(handover) = self.sources.stop(bubble) {
            self.close_mirror(handover);
        }
    }

    pub(super) fn freeze(&mut self, token: Token, handover: HandoverId) -> Result<(), Fault> {
        let bubble = self.bubble_in(|p| p == Phase::Leaving { handover }).ok_or_else(|| {
            Fault::new(ErrorCode::Unexpected, format!("no handover {} here", handover.0))
        })?;
        let local = &self.bubbles[&bubble];
        let lease = local.lease_ref();
        let server = local.server().clone();
        if !self.fleet.contains(&server) {
            return Err(Fault::new(ErrorCode::NotReady, "the bubble's server is gone"));
        }
        let then = Then::Frozen { token, handover, bubble };
        self.ask_server(&server, then, server::Request::Freeze { lease });
        Ok(())
    }

    pub(super) fn frozen(
        &mut self,
        token: Token,
        handover: HandoverId,
        bubble: BubbleId,
        result: Result<server::Reply, Failure>,
    ) {
        let result = match result {
            Ok(server::Reply::Frozen { tick }) => {
                if let Some(local) = self.bubbles.get_mut(&bubble)
                    && local.phase() == (Phase::Leaving { handover })
                {
                    local.sealed(handover);
                }
                Ok(control::Reply::Frozen { handover, tick })
            }
            Ok(other) => Err(Fault::new(ErrorCode::Internal, format!("server replied {other:?}"))),
            Err(e) => Err(Fault::new(e.code(), format!("freeze: {e}"))),
        };
        self.answer(token, result);
    }

    pub(super) fn abort(&mut self, handover: HandoverId, reason: &str) {
        tracing::warn!(handover = handover.0, %reason, "handover aborted");
        if let Some(b) = self.bubble_in(|p| p == Phase::Standby { handover }) {
            self.drop_bubble(b);
        }
        if let Some(b) = self.bubble_in(|p| p == Phase::Leaving { handover }) {
            self.stop_mirror(b);
            if let Some(local) = self.bubbles.get_mut(&b) {
                local.running();
            }
        }
        if let Some(b) = self.bubble_in(|p| p == Phase::Sealed { handover }) {
            tracing::error!(
                bubble = b.0,
                "abort after the seal: the bubble stays sealed until revoked"
            );
        }
    }
}
