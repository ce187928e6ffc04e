//! The core: started (and restarted) on its simulated store, its inputs, and its effects
//! carried out over the simulated links and on the store.

use super::*;

impl World {
    /// The core starts (or restarts) on its store, under the next generation.
    pub(super) fn start_core(&mut self) {
        let generation = self.store.next_generation();
        self.checker.generation(self.time.now(), generation);
        self.stats.core_generations = generation;
        let cfg = core::MachineConfig {
            sites: self.sites.clone(),
            thresholds: self.thresholds().clone(),
            zones: Vec::new(),
            stage: self.stage,
            delegations: Vec::new(),
        };
        match CoreMachine::new(cfg, generation, self.store.state(), self.core_now()) {
            Ok(mut machine) => {
                machine.take_kept_copies(self.store.pinned());
                self.core = Some(machine);
            }
            Err(e) => unreachable!("core configuration: {e:?}"),
        }
        self.note(format!("core up, generation {generation}"));
        self.lead();
        self.after_core();
    }

    /// One input to the core, and everything it does then.
    pub(super) fn core_input(&mut self, input: core::Input) {
        let Some(core) = self.core.as_mut() else { return };
        core.handle(input, Time::from_ms(self.time.now() / 1000));
        self.check_leads("an input");
        self.after_core();
    }

    /// The core's effects carried out: orders and replies over the links, writes to the
    /// store (each taking its time: the core does nothing else meanwhile), and its next timer.
    pub(super) fn after_core(&mut self) {
        let mut cursor = self.time.now();
        while let Some(effect) = self.core.as_mut().and_then(CoreMachine::poll_effect) {
            match effect {
                core::Effect::Send { site, conn, lane, order, request } => {
                    let site = self.site_index(site);
                    self.core_send(site, conn, lane, order, request, cursor);
                }
                core::Effect::Reply { token, reply } => {
                    let Some((site, conn, pending, renew)) = self.core_calls.remove(&token) else {
                        continue;
                    };
                    if let (Some((sent, _)), Ok(control::Reply::Renewed { ttl_ms, granted, .. })) =
                        (&renew, &reply)
                    {
                        for l in granted {
                            let until = sent + u64::from(*ttl_ms) * 1000;
                            self.checker.granted(site, l.bubble, l.epoch, until);
                        }
                    }
                    let result = reply.map_err(Failure::Refused);
                    let input = agent::Input::CoreReplied { pending, result };
                    self.send_to_agent(site, conn, input, cursor);
                }
                core::Effect::Persist(record) => {
                    cursor += self.write_us();
                    let _ = self.store.append(record);
                }
                core::Effect::PutBackup { bubble, epoch, tick, part, bytes } => {
                    cursor += self.write_us();
                    self.checker.stored(self.time.now(), bubble, Epoch(epoch));
                    let _ = match part {
                        None => self.store.put_backup(bubble.0, epoch, tick, &bytes),
                        Some(part) => {
                            self.store.put_backup_part(bubble.0, epoch, part, tick, &bytes)
                        }
                    };
                }
                core::Effect::ReadBackup { bubble } => {
                    let copy = self.store.latest_copy(bubble.0);
                    let now = self.core_now();
                    if let Some(core) = self.core.as_mut() {
                        core.handle(core::Input::BackupRead { bubble, copy }, now);
                    }
                }
                core::Effect::PinBackup { at, players } => {
                    let _ = self.store.pin_backup(at, &players);
                }
                core::Effect::UnpinBackup { at } => self.store.unpin_backup(at),
                core::Effect::ReadPinned { adopt } => {
                    let copy = self.store.pinned_backup(adopt.from);
                    let now = self.core_now();
                    if let Some(core) = self.core.as_mut() {
                        core.handle(core::Input::PinnedRead { adopt, copy }, now);
                    }
                }
                core::Effect::Close { conn, .. } => {
                    if let Some(site) = self.control_site_of(conn) {
                        self.control_down(site, "closed by the core");
                    }
                }
            }
        }
        self.core_busy_until = self.core_busy_until.max(cursor);
        if let Some(core) = &self.core {
            let at = core.poll_timeout().as_ms() * 1000;
            if at < self.core_timer_at {
                self.core_timer_at = at;
                self.schedule_at(at, Event::CoreTimer);
            }
        }
    }

    /// Adds the running core's zone splits and merges to the run's (before it stops).
    pub(super) fn count_zone_changes(&mut self) {
        if let Some(core) = &self.core {
            let (splits, merges) = core.zone_changes();
            self.stats.zone_splits += splits;
            self.stats.zone_merges += merges;
            let (carves, dissolves) = core.carves();
            self.stats.carves += carves;
            self.stats.dissolves += dissolves;
        }
    }

    /// Whether a core runs (none between its death and its restart, or a standby's lead).
    pub(super) fn core_up(&self) -> bool {
        self.core.is_some()
    }

    /// Until when (global µs) the core is busy writing its store, if it is now.
    pub(super) fn core_busy(&self) -> Option<u64> {
        (self.time.now() < self.core_busy_until).then_some(self.core_busy_until)
    }

    /// The core's timer fired: it runs its timeout if one is due.
    pub(super) fn core_timer(&mut self) {
        if self.time.now() >= self.core_timer_at
            && let Some(core) = self.core.as_mut()
        {
            self.core_timer_at = u64::MAX;
            core.handle_timeout(Time::from_ms(self.time.now() / 1000));
            self.check_leads("its timer");
            self.after_core();
        }
    }

    /// An agent's request goes to the core under `token`; its answer goes back as `call` says.
    pub(super) fn core_call(&mut self, token: u64, call: CoreCall) {
        self.core_calls.insert(token, call);
    }

    /// The agent requests at the core that came over `conn`, which is gone: what waited on
    /// each, in token order.
    pub(super) fn core_calls_lost(&mut self, conn: u64) -> Vec<Pending> {
        let tokens: Vec<u64> =
            self.core_calls.iter().filter(|(_, v)| v.1 == conn).map(|(t, _)| *t).collect();
        tokens.into_iter().filter_map(|t| self.core_calls.remove(&t)).map(|c| c.2).collect()
    }

    /// How long a store write takes now: a slow disk's, or (the leader cut from the store) a
    /// full election TTL, by which time it has fenced itself.
    pub(super) fn write_us(&self) -> u64 {
        self.disk_us + if self.store_cut() { election::TTL_US } else { 0 }
    }

    /// The store's disk takes `us` per write from now on (0: a healthy disk).
    pub(super) fn slow_disk(&mut self, us: u64) {
        self.disk_us = us;
    }

    /// The core dies (or, with a standby, fences itself); its store stays. Agents see their
    /// connections refused within a second.
    pub(super) fn kill_core(&mut self) {
        self.count_zone_changes();
        self.core = None;
        self.core_timer_at = u64::MAX;
        self.core_busy_until = 0;
        self.note("core killed".into());
        for site in 0..SITES.len() {
            self.control_down(site, "core killed");
        }
        self.core_calls.clear();
        self.forget_orders();
        self.leader_gone();
    }
}
