//! This site's game servers: the warm pool, their connections, their state items, updates fanned out to the players' homes, crashes.

use super::*;

impl Agent {
    pub(super) fn top_up_pool(&mut self) {
        let spare =
            self.servers.values().filter(|s| s.bubbles.is_empty()).count() + self.starting.len();
        // The warm pool, or more while orders wait for several servers at once.
        let demand = self.waiting.iter().map(|(_, r)| self.servers_needed(&r.body)).max();
        let want = self.cfg.warm_pool.max(demand.unwrap_or(0));
        for _ in spare..want {
            let name = format!("{}-gs-{}", self.cfg.site.to_ascii_lowercase(), self.next_server);
            self.next_server += 1;
            match self.driver.start(&name, self.servers_addr) {
                Ok(()) => {
                    self.starting.insert(name, Instant::now());
                }
                Err(e) => {
                    tracing::warn!(site = %self.site, error = %e, "cannot start a game server");
                    break;
                }
            }
        }
    }

    pub(super) fn server_up(&mut self, peer: Peer<Server>) {
        let name = peer.hello.peer.clone();
        let id = peer.conn.id();
        let conn = peer.conn;
        let (n, m) = (name.clone(), name.clone());
        pump(
            peer.inbound,
            self.events.clone(),
            move |item| Event::ServerItem(n.clone(), item),
            move |i| Event::ServerInbound(m.clone(), id, i),
            Event::ServerGone(name.clone(), id),
        );
        let out = open_stream_task(conn.clone());
        self.starting.remove(name.as_str());
        self.servers.insert(
            name,
            Srv { conn, out, ready: false, tps: 0.0, players: 0, bubbles: Vec::new() },
        );
        self.stats.servers.store(self.servers.len() as u64, Ordering::Relaxed);
    }

    pub(super) fn server_inbound(&mut self, name: Name, id: u64, inbound: Inbound<Server>) {
        let Inbound::Request(req) = inbound else { return };
        let Some(srv) = self.servers.get_mut(&name).filter(|s| s.conn.id() == id) else { return };
        let reply = match &req.body {
            server::Request::Register { .. } => {
                Ok(server::Reply::Registered { load_every_ms: 1000 })
            }
            server::Request::Ready => {
                srv.ready = true;
                tracing::info!(site = %self.site, server = %name, "game server ready");
                if let Some((received, waiting)) = self.waiting.pop_front() {
                    let events = self.events.clone();
                    tokio::spawn(async move {
                        let _ = events.send(Event::Waited(received, waiting)).await;
                    });
                }
                Ok(server::Reply::Done)
            }
            server::Request::Load { tps, players, .. } => {
                srv.tps = *tps;
                srv.players = *players;
                Ok(server::Reply::Done)
            }
            _ => Err(Fault::new(ErrorCode::Unexpected, "an agent request, sent by a server")),
        };
        tokio::spawn(req.reply(reply));
    }

    pub(super) fn server_item(&mut self, server: &Name, item: StateItem) {
        match item {
            StateItem::Update(update) => self.fan_out(server, update),
            StateItem::Snapshot(s) if !self.mirrors.contains_key(&s.bubble) => {
                let lease = LeaseRef { bubble: s.bubble, epoch: s.epoch };
                let (tick, index, total, bytes) = (s.tick, s.index, s.total, s.bytes);
                // After a whole copy's last chunk: the inputs it includes (those acknowledged
                // by the update of its tick), so the players' gateways may forget them.
                let covers = self
                    .bubbles
                    .get(&s.bubble)
                    .filter(|b| {
                        b.extra.is_empty() && b.lease.epoch == s.epoch && index + 1 == total
                    })
                    .and_then(|b| b.acked_at.as_ref())
                    .filter(|(at, _)| *at == tick)
                    .map(|(_, acked)| control::Backup::Covers {
                        lease,
                        tick,
                        acked: acked.clone(),
                    });
                let spread = self.bubbles.get(&s.bubble).filter(|b| !b.extra.is_empty());
                let chunk = match spread {
                    None => control::Backup::Chunk { lease, tick, index, total, bytes },
                    Some(local) => {
                        let Some(part) = local.servers().position(|n| n == server) else { return };
                        let parts = 1 + local.extra.len() as u32;
                        let part = part as u32;
                        control::Backup::Part { lease, part, parts, tick, index, total, bytes }
                    }
                };
                if let Some(out) = &self.backups
                    && out.try_send(chunk).is_ok()
                    && let Some(covers) = covers
                {
                    let _ = out.try_send(covers);
                }
            }
            StateItem::Snapshot(ref s) => self.mirror(s.bubble, item.clone()),
            StateItem::Delta(ref d) => self.mirror(d.bubble, item.clone()),
            StateItem::Seal(ref s) => {
                tracing::info!(site = %self.site, bubble = s.bubble.0, tick = s.tick.0, "sealed; seal sent to the target");
                self.mirror(s.bubble, item.clone())
            }
            StateItem::Inputs(_) => {}
        }
    }

    pub(super) fn mirror(&mut self, bubble: BubbleId, item: StateItem) {
        if let Some((handover, tx)) = self.mirrors.get(&bubble)
            && tx.try_send(item).is_err()
        {
            tracing::warn!(handover = handover.0, "handover stream full or closed");
        }
    }

    /// A server's update goes to every member's home gateway: directly for this site's
    /// players, one copy per other home site.
    pub(super) fn fan_out(&mut self, server: &Name, update: Update) {
        let Some(local) = self.bubbles.get_mut(&update.bubble) else { return };
        if !local.servers().any(|s| s == server) || update.epoch != local.lease.epoch {
            return;
        }
        if local.extra.is_empty() {
            local.acked_at = Some((update.tick, update.acked.clone()));
        }
        if Instant::now() > local.valid_until + WRITE_ALLOWANCE {
            self.stats.writes_after_lease.fetch_add(1, Ordering::Relaxed);
        }
        if local.phase == Phase::Restoring {
            local.phase = Phase::Running;
            tracing::info!(site = %self.site, bubble = update.bubble.0, tick = update.tick.0, "restored bubble running");
            if let Some((_, req)) = self.pending_restore.remove(&update.bubble) {
                tokio::spawn(req.reply(Ok(control::Reply::Done)));
            }
        }
        if let Phase::Standby { handover } = local.phase {
            // The first update under the new epoch: the target runs. Tell the core.
            local.phase = Phase::Running;
            let started = control::Request::Started {
                handover,
                bubble: update.bubble,
                epoch: update.epoch,
                tick: update.tick,
            };
            tracing::info!(site = %self.site, bubble = update.bubble.0, tick = update.tick.0, "handover target started");
            let core = self.core.clone();
            tokio::spawn(async move {
                if let Err(e) = core.request(&started).await {
                    tracing::warn!(error = %e, "started not delivered");
                }
            });
        }
        let mut remote: Vec<Name> = Vec::new();
        for (player, _) in &update.acked {
            if let Some(home) = local.members.get(player)
                && home != &self.site
                && !remote.contains(home)
            {
                remote.push(home.clone());
            }
        }
        for home in remote {
            if let Some(peer) = self.peers.get(&home) {
                let _ = peer.out.try_send(StateItem::Update(update.clone()));
            }
        }
        let here = self.site.clone();
        self.deliver(&update, &here);
    }

    /// Hands an update from `site` to this site's players it concerns. An update of the
    /// player's bubble under a newer epoch comes from its new holder (epochs fence: only the
    /// current holder's server writes under the newest one): the route follows it — the core
    /// may not be able to tell us (a failover while this site is cut from it) — and every input
    /// kept is sent there, since a restored holder may lack some already applied.
    pub(super) fn deliver(&mut self, update: &Update, site: &Name) {
        let mut resend = Vec::new();
        let now = Instant::now();
        for (player, acked) in &update.acked {
            let Some(gw) = self.players.get_mut(player) else { continue };
            match gw.session.on_update(update.bubble, update.epoch, *acked, site, now) {
                UpdateVerdict::NotTheirs => continue,
                UpdateVerdict::Deliver { resend_all } => {
                    if resend_all {
                        resend.push(*player);
                    }
                }
            }
            let item = gateway::Item::Update {
                bubble: update.bubble,
                tick: update.tick,
                acked: *acked,
                bytes: update.bytes.clone(),
            };
            if gw.out.try_send(item).is_ok() {
                self.stats.updates_delivered.fetch_add(1, Ordering::Relaxed);
            }
        }
        for player in resend {
            self.resend(player, true);
        }
    }

    pub(super) fn server_gone(&mut self, name: Name, id: u64) {
        if self.servers.get(&name).is_none_or(|s| s.conn.id() != id) {
            return;
        }
        self.server_lost(&name, "connection closed");
    }

    /// A game server is gone (its process exited, or its connection ended): its bubbles stop
    /// here and the core is told at once, so it restores them from their latest copy on a
    /// spare server of this site, or on another site (SPEC section 6).
    pub(super) fn server_lost(&mut self, name: &Name, why: &str) {
        let Some(srv) = self.servers.remove(name) else { return };
        self.stats.servers.store(self.servers.len() as u64, Ordering::Relaxed);
        self.driver.stop(name.as_str());
        let mut lost = Vec::new();
        for bubble in srv.bubbles {
            tracing::error!(site = %self.site, server = %name, bubble = bubble.0, %why, "server gone with its bubble");
            let Some(local) = self.bubbles.remove(&bubble) else { continue };
            self.mirrors.remove(&bubble);
            if let Some((_, req)) = self.pending_restore.remove(&bubble) {
                let fault = Fault::new(ErrorCode::NotReady, "the restored bubble's server is gone");
                tokio::spawn(req.reply(Err(fault)));
            }
            let lease = LeaseRef { bubble, epoch: local.lease.epoch };
            if matches!(local.phase, Phase::Running) {
                lost.push(lease);
            }
            for other in local.servers().filter(|s| *s != name) {
                if let Some(srv) = self.servers.get_mut(other) {
                    srv.bubbles.retain(|b| *b != bubble);
                    let conn = srv.conn.clone();
                    tokio::spawn(async move {
                        let _ = conn.request(&server::Request::Release { lease }).await;
                    });
                }
            }
        }
        self.stats.bubbles.store(self.bubbles.len() as u64, Ordering::Relaxed);
        if !lost.is_empty() {
            let core = self.core.clone();
            let request =
                control::Request::Lost { leases: lost, reason: format!("server {name}: {why}") };
            tokio::spawn(async move {
                if let Err(e) = core.request(&request).await {
                    tracing::warn!(error = %e, "lost bubbles not reported (their leases run out at the core)");
                }
            });
        }
        self.top_up_pool();
    }
}
