//! The other sites' agents: transfer links, crossings, handover streams, backbone probes.

use super::*;

/// What became of a state crossing into a bubble here ([`AgentMachine::take_crossing`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Took {
    /// Joined into the bubble, which expected the player.
    Joined,
    /// The player left that bubble before it came: kept here, and sent on to where they went
    /// (a crossing of its own, which keeps what it sent).
    SentOn,
    /// Kept until the core says the player comes.
    Kept,
}

impl AgentMachine {
    pub(super) fn peer_up(&mut self, site: Name, conn: ConnId, now: Instant) {
        tracing::info!(site = %self.cfg.site, peer = %site, "transfer link up");
        let link = PeerLink { conn, rtt_ms: None, probes_sent: 0, probes_back: 0, last_echo: now };
        self.peers.insert(site, link);
        self.reroute(now);
    }

    /// The transfer link to `site` on `conn` closed (a newer link's late close changes nothing).
    pub(super) fn peer_down(&mut self, site: Name, conn: ConnId, now: Instant) {
        if self.peers.get(&site).is_some_and(|p| p.conn == conn) {
            self.peers.remove(&site);
            tracing::warn!(site = %self.cfg.site, peer = %site, "transfer link down");
            self.reroute(now);
        }
    }

    /// A transfer link to `site` is up (it may be silent: see [`Self::link_live`]).
    pub(super) fn linked(&self, site: &Name) -> bool {
        self.peers.contains_key(site)
    }

    /// Whether this agent's own link to `site` answers its probes.
    pub(super) fn link_live(&self, site: &Name, now: Instant) -> bool {
        self.peers
            .get(site)
            .is_some_and(|p| now.saturating_duration_since(p.last_echo) <= LINK_SILENT_AFTER)
    }

    /// The round trip measured to `site`'s agent, if any.
    pub(super) fn peer_rtt_ms(&self, site: &str) -> Option<f32> {
        self.peers.iter().find(|(name, _)| name.as_str() == site).and_then(|(_, l)| l.rtt_ms)
    }

    /// Every transfer link up, with its round trip if measured.
    pub(super) fn peer_links(&self) -> Vec<(Name, Option<f32>)> {
        self.peers.iter().map(|(site, p)| (site.clone(), p.rtt_ms)).collect()
    }

    /// This site's links as the core's report carries them: a silent one is down (the core's
    /// `Links` tell the other sites to go round), with the share of probes lost.
    pub(super) fn backbone_samples(&self, now: Instant) -> Vec<control::BackboneSample> {
        self.peers
            .iter()
            .map(|(site, p)| control::BackboneSample {
                site: site.clone(),
                rtt_ms: p
                    .rtt_ms
                    .filter(|_| now.saturating_duration_since(p.last_echo) <= LINK_SILENT_AFTER),
                loss: if p.probes_sent == 0 {
                    0.0
                } else {
                    1.0 - p.probes_back.min(p.probes_sent) as f32 / p.probes_sent as f32
                },
            })
            .collect()
    }

    /// A probe to every other site's agent.
    pub(super) fn probe(&mut self, now: Instant) {
        let sent_us = self.stamp_us(now);
        for (site, peer) in self.peers.iter_mut() {
            peer.probes_sent += 1;
            let probe = transfer::Probe::Ping { seq: peer.probes_sent, sent_us };
            self.effects.push_back(Effect::PeerDatagram { site: site.clone(), probe });
        }
    }

    pub(super) fn peer_probe(&mut self, site: &Name, probe: transfer::Probe, now: Instant) {
        let now_us = self.stamp_us(now);
        let Some(peer) = self.peers.get_mut(site) else { return };
        match probe {
            transfer::Probe::Ping { seq, sent_us } => {
                let probe = transfer::Probe::Echo { seq, sent_us };
                self.effects.push_back(Effect::PeerDatagram { site: site.clone(), probe });
            }
            transfer::Probe::Echo { sent_us, .. } => {
                let rtt = now_us.saturating_sub(sent_us) as f32 / 1000.0;
                let was_silent = now.saturating_duration_since(peer.last_echo) > LINK_SILENT_AFTER;
                peer.probes_back += 1;
                peer.last_echo = now;
                peer.rtt_ms = Some(peer.rtt_ms.map_or(rtt, |r| 0.8 * r + 0.2 * rtt));
                if was_silent {
                    // Back: direct again now, not at the next probe.
                    self.reroute(now);
                }
            }
        }
    }

    pub(super) fn peer_request(
        &mut self,
        request: &transfer::Request,
        now: Instant,
    ) -> Result<transfer::Reply, Fault> {
        match request {
            transfer::Request::Open { handover, bubble, epoch } => {
                let local = self
                    .bubbles
                    .get(bubble)
                    .filter(|b| b.phase() == Phase::Standby { handover: *handover });
                let local = local.ok_or_else(|| {
                    Fault::new(
                        ErrorCode::NotReady,
                        format!("no standby for handover {}", handover.0),
                    )
                })?;
                if *epoch >= local.lease().epoch {
                    return Err(Fault::new(
                        ErrorCode::StaleEpoch,
                        "the source's epoch is not older",
                    ));
                }
                Ok(transfer::Reply::Accepted { from_tick: Tick(0) })
            }
            transfer::Request::Cross { player, to, .. } => {
                if self.take_crossing(request, now)? != Took::Kept {
                    Ok(transfer::Reply::Done)
                } else {
                    // Kept, and used as soon as the core says the player comes; the sender
                    // keeps it too and tries again (the bubble may move meanwhile).
                    let why = format!("player {} is not expected in bubble {} yet", player.0, to.0);
                    Err(Fault::new(ErrorCode::NotReady, why))
                }
            }
            transfer::Request::Relay { .. } => {
                Err(Fault::new(ErrorCode::Malformed, "a relayed request inside a relayed request"))
            }
        }
    }

    /// A player's state crossing into a bubble here: joined now if the core already said so,
    /// sent on if the player left that bubble since, else kept until the core says so.
    pub(super) fn take_crossing(
        &mut self,
        request: &transfer::Request,
        now: Instant,
    ) -> Result<Took, Fault> {
        let transfer::Request::Cross { player, to, epoch, last_applied, state, .. } = request
        else {
            return Ok(Took::Kept);
        };
        self.transit.newer_state(*player, *last_applied);
        // The crossing names the target's epoch when the player left; a target restored since
        // (a newer epoch) still takes the player's state, which its server keeps if it holds
        // more of the player's inputs than what is there.
        let here = self.bubbles.get(to).filter(|b| b.lease().epoch >= *epoch);
        let expected = self.transit.awaits(*player, *to)
            || here
                .is_some_and(|b| b.members().contains_key(player) && b.phase() == Phase::Running);
        // The player left that bubble before this state came: it goes on to where they went
        // last (where it replaces an older state of theirs). It is kept here too, in case the
        // player is on their way back (the member list saying so not here yet). Each bubble
        // forwards once: a state never circles between sites.
        let forward = self.transit.forward_from(*player, *to, expected);
        if let Some(local) = here
            && expected
        {
            self.transit.arrived(*player);
            let lease = local.lease_ref();
            let server = local.server_of(*player).clone();
            if !self.fleet.contains(&server) {
                return Err(Fault::new(ErrorCode::NotReady, format!("server {server} is gone")));
            }
            self.join(&server, lease, *player, *last_applied, state.clone());
            // A player homed here follows their state at once: the core's `Route` says the same
            // but comes a round trip behind the member lists, and until then their gateway
            // would drop the new bubble's updates. (Safe: a route elsewhere comes from the core
            // after the list that takes them out of this bubble, so none was taken yet.)
            let site = self.cfg.site.clone();
            self.follow_route(*player, *to, site, now);
            Ok(Took::Joined)
        } else if self.transit.stash(*player, *to, *last_applied, state, now) {
            // Kept (of two states of one player, the one that applied more of its inputs).
            if let Some(d) = forward {
                self.cross(*player, *to, d, *last_applied, state.clone(), now);
                return Ok(Took::SentOn);
            }
            Ok(Took::Kept)
        } else {
            Err(Fault::new(ErrorCode::Busy, "too many crossings waiting"))
        }
    }

    pub(super) fn peer_item(&mut self, site: &Name, item: StateItem, now: Instant) {
        match item {
            StateItem::Inputs(inputs) => self.inputs_to_servers(inputs),
            StateItem::Update(update) => self.deliver(&update, site, now),
            StateItem::Own(own) => self.deliver_own(&own, site),
            StateItem::Snapshot(ref s) => {
                let bubble = s.bubble;
                self.feed_standby(site, bubble, item)
            }
            StateItem::Delta(ref d) => {
                let bubble = d.bubble;
                self.feed_standby(site, bubble, item)
            }
            StateItem::Seal(ref s) => {
                let bubble = s.bubble;
                tracing::info!(site = %self.cfg.site, bubble = bubble.0, tick = s.tick.0, "seal received");
                self.feed_standby(site, bubble, item)
            }
            StateItem::Relay(relayed) => self.relayed_item(site, *relayed, now),
            // Only the agent sends these, to its own servers.
            StateItem::PartSnapshot(_) | StateItem::Adopt(_) => {
                tracing::warn!(peer = %site, "a part snapshot or adopted copy from a peer: ignored");
            }
        }
    }

    pub(super) fn feed_standby(&mut self, from: &Name, bubble: BubbleId, item: StateItem) {
        let Some(local) = self.bubbles.get(&bubble) else { return };
        if !matches!(local.phase(), Phase::Standby { .. }) {
            tracing::warn!(peer = %from, bubble = bubble.0, "state for a bubble not standing by");
            return;
        }
        let server = local.server().clone();
        self.effects.push_back(Effect::ServerStream { server, item });
    }
}
