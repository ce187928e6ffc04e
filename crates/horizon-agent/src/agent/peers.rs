//! The other sites' agents: transfer links, crossings, handover streams, backbone probes.

use super::*;

impl Agent {
    pub(super) fn peer_up(
        &mut self,
        conn: Conn<Transfer>,
        inbound: Option<mpsc::Receiver<Inbound<Transfer>>>,
    ) {
        let site = conn.peer().clone();
        let id = conn.id();
        if let Some(inbound) = inbound {
            let (a, b) = (site.clone(), site.clone());
            pump(
                inbound,
                self.events.clone(),
                move |item| Event::PeerItem(a.clone(), item),
                move |i| Event::PeerInbound(b.clone(), i),
                Event::PeerGone(site.clone(), id),
            );
        }
        let out = open_stream_task(conn.clone());
        tracing::info!(site = %self.site, peer = %site, "transfer link up");
        self.peers
            .insert(site, PeerLink { conn, out, rtt_ms: None, probes_sent: 0, probes_back: 0 });
    }

    pub(super) async fn peer_inbound(&mut self, site: Name, inbound: Inbound<Transfer>) {
        match inbound {
            Inbound::Request(req) => {
                let reply = self.peer_request(&req.body).await;
                tokio::spawn(req.reply(reply));
            }
            Inbound::Stream(rx) => {
                forward_stream(rx, self.events.clone(), move |item| {
                    Event::PeerItem(site.clone(), item)
                });
            }
            Inbound::Datagram(probe) => {
                let Some(peer) = self.peers.get_mut(&site) else { return };
                match probe {
                    transfer::Probe::Ping { seq, sent_us } => {
                        let _ = peer.conn.send_datagram(&transfer::Probe::Echo { seq, sent_us });
                    }
                    transfer::Probe::Echo { sent_us, .. } => {
                        let rtt = (now_us().saturating_sub(sent_us)) as f32 / 1000.0;
                        peer.probes_back += 1;
                        peer.rtt_ms = Some(peer.rtt_ms.map_or(rtt, |r| 0.8 * r + 0.2 * rtt));
                    }
                }
            }
        }
    }

    pub(super) async fn peer_request(
        &mut self,
        body: &transfer::Request,
    ) -> Result<transfer::Reply, Fault> {
        match body {
            transfer::Request::Open { handover, bubble, epoch } => {
                let local = self
                    .bubbles
                    .get(bubble)
                    .filter(|b| b.phase == Phase::Standby { handover: *handover });
                let local = local.ok_or_else(|| {
                    Fault::new(
                        ErrorCode::NotReady,
                        format!("no standby for handover {}", handover.0),
                    )
                })?;
                if *epoch >= local.lease.epoch {
                    return Err(Fault::new(
                        ErrorCode::StaleEpoch,
                        "the source's epoch is not older",
                    ));
                }
                Ok(transfer::Reply::Accepted { from_tick: Tick(0) })
            }
            transfer::Request::Cross { player, to, epoch, last_applied, state, .. } => {
                let here = self.bubbles.get(to).filter(|b| b.lease.epoch == *epoch);
                if here.is_some() && self.awaiting.get(player) == Some(to) {
                    self.awaiting.remove(player);
                    let local = &self.bubbles[to];
                    let lease = LeaseRef { bubble: *to, epoch: *epoch };
                    if let Some(conn) = self.servers.get(&local.server).map(|s| s.conn.clone()) {
                        self.join(&conn, lease, *player, *last_applied, state.clone()).await;
                    }
                } else if self.crossings.len() < MAX_CROSSINGS {
                    self.crossings.insert(
                        *player,
                        Crossing {
                            at: Instant::now(),
                            to: *to,
                            last_applied: *last_applied,
                            state: state.clone(),
                        },
                    );
                } else {
                    return Err(Fault::new(ErrorCode::Busy, "too many crossings waiting"));
                }
                Ok(transfer::Reply::Done)
            }
        }
    }

    pub(super) fn peer_item(&mut self, site: &Name, item: StateItem) {
        match item {
            StateItem::Inputs(inputs) => self.to_servers(inputs),
            StateItem::Update(update) => self.deliver(&update, site),
            StateItem::Snapshot(ref s) => self.feed_standby(site, s.bubble, item.clone()),
            StateItem::Delta(ref d) => self.feed_standby(site, d.bubble, item.clone()),
            StateItem::Seal(ref s) => {
                tracing::info!(site = %self.site, bubble = s.bubble.0, tick = s.tick.0, "seal received");
                self.feed_standby(site, s.bubble, item.clone())
            }
        }
    }

    pub(super) fn feed_standby(&mut self, from: &Name, bubble: BubbleId, item: StateItem) {
        let Some(local) = self.bubbles.get(&bubble) else { return };
        if !matches!(local.phase, Phase::Standby { .. }) {
            tracing::warn!(peer = %from, bubble = bubble.0, "state for a bubble not standing by");
            return;
        }
        if let Some(srv) = self.servers.get(&local.server) {
            let _ = srv.out.try_send(item);
        }
    }
}
