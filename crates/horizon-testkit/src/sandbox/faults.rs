//! What drills and tests do to a running sandbox: a core, an agent or a standby restarted or
//! killed, the leader cut from its store, links between sites cut or made lossy.

use super::*;

impl Sandbox {
    /// The leading core dies as its machine would ([`SandboxOptions::standby`]): every agent's
    /// link to it goes silent, and it stops with its election lease left to expire. Its
    /// standby leads once the lease lapses ([`Sandbox::standby_leads`]).
    pub async fn kill_leader(&mut self) {
        if let Some(slot) = self.cores.get(self.leader) {
            for &i in &slot.links {
                self.netems[i].handle().partition(true);
            }
        }
        self.core.kill().await;
    }

    /// Cuts (or heals) the leading core's links to every etcd member, both ways: it fences
    /// itself before its election lease could lapse, and its standby leads once it has. False
    /// without a standby.
    pub fn cut_leader_from_store(&self, cut: bool) -> bool {
        let Some(slot) = self.cores.get(self.leader) else { return false };
        slot.store_cuts.iter().for_each(|c| c.cut(cut));
        true
    }

    /// Waits (at most `within`) for the standby core to lead, and makes it the sandbox's core.
    /// The former leader (dead, or fenced) is stopped for good: [`Sandbox::restart_standby`]
    /// starts it again, as its supervisor would.
    pub async fn standby_leads(&mut self, within: Duration) -> Result<(), SandboxError> {
        let (index, task) = self
            .standby
            .take()
            .ok_or_else(|| SandboxError::Setup("no standby core in this sandbox".into()))?;
        let elected = tokio::time::timeout(within, task)
            .await
            .map_err(|_| {
                SandboxError::Setup(format!("the standby did not lead within {within:?}"))
            })?
            .map_err(|e| setup("standby core")(&e))?
            .map_err(|e| setup("standby core")(&e))?;
        let mut former = std::mem::replace(&mut self.core, elected);
        self.leader = index;
        former.kill().await;
        Ok(())
    }

    /// Starts the core that led before the last takeover again, as a standby on its own ports
    /// (as its supervisor restarts a core that died or fenced itself): its links to the agents
    /// and to etcd healed first. Fails without a standby, or with one already campaigning.
    pub async fn restart_standby(&mut self) -> Result<(), SandboxError> {
        if self.standby.is_some() {
            return Err(SandboxError::Setup("a standby core is already campaigning".into()));
        }
        let index = 1 - self.leader;
        let slot = self
            .cores
            .get(index)
            .ok_or_else(|| SandboxError::Setup("no standby core in this sandbox".into()))?;
        for &i in &slot.links {
            self.netems[i].handle().partition(false);
        }
        slot.store_cuts.iter().for_each(|c| c.cut(false));
        // Its admin port is free once its loop has ended (at most a moment after its stop).
        let admin = slot.config.listen_admin;
        let until = tokio::time::Instant::now() + Duration::from_secs(5);
        while std::net::TcpListener::bind(admin).is_err() && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.standby = Some((index, tokio::spawn(horizon_core::start(slot.config.clone()))));
        Ok(())
    }

    /// Kills a site's agent as a crash would ([`AgentHandle::kill`]: its game servers with it,
    /// nobody told) and starts it again with nothing, on the same ports, after `down_for`.
    pub async fn restart_agent(
        &mut self,
        site: &str,
        down_for: Duration,
    ) -> Result<(), SandboxError> {
        let i = self
            .agents
            .iter()
            .position(|a| a.site == site)
            .ok_or_else(|| SandboxError::Setup(format!("no agent at {site}")))?;
        let (cfg, process) = self
            .agent_setups
            .get(site)
            .cloned()
            .ok_or_else(|| SandboxError::Setup(format!("no agent at {site}")))?;
        let old = self.agents.remove(i);
        self.retired.push((old.site.clone(), old.stats.clone()));
        old.kill().await;
        tokio::time::sleep(down_for).await;
        let ports = [cfg.listen_servers, cfg.listen_players, cfg.listen_transfer];
        let ports = ports.into_iter().chain(cfg.listen_admin).chain(cfg.listen_beacon);
        until_free(&ports.collect::<Vec<_>>()).await.map_err(|e| setup("restart")(&e))?;
        let driver = make_driver(self.drivers.as_ref(), &process)?;
        let handle = horizon_agent::start(cfg, driver).await.map_err(|e| setup("agent")(&e))?;
        self.agents.insert(i, handle);
        Ok(())
    }

    /// Cuts (or restores) the agent-to-agent link between two sites, both directions; their
    /// links to the core are untouched. False if there is no such pair.
    pub fn partition_transfer(&self, a: &str, b: &str, cut: bool) -> bool {
        let Some(&i) = self.transfer_links.get(&pair(a, b)) else { return false };
        self.netems[i].handle().partition(cut);
        true
    }

    /// Cuts (or restores) a relay site's agent-to-core link, both directions; its links to the
    /// other agents are untouched. False for the core site (its agent is not behind the
    /// emulator) or an unknown site.
    pub fn partition_core(&self, site: &str, cut: bool) -> bool {
        let Some(links) = self.core_links.get(site) else { return false };
        links.iter().for_each(|&i| self.netems[i].handle().partition(cut));
        true
    }

    /// Sets the loss rate (0–1, both ways) of a relay site's agent-to-core link. False for
    /// the core site or an unknown site.
    pub fn core_link_loss(&self, site: &str, rate: f64) -> bool {
        let Some(links) = self.core_links.get(site) else { return false };
        let line = format!("loss {rate}");
        links
            .iter()
            .all(|&i| horizon_transport::netem::command(self.netems[i].handle(), &line).is_ok())
    }

    /// Stops the core (its connections close) and starts it again on the same store and ports
    /// after `down_for`: a new generation, what it held taken back from the store.
    pub async fn restart_core(&mut self, down_for: Duration) -> Result<(), SandboxError> {
        self.core.stop().await;
        tokio::time::sleep(down_for).await;
        let ports = [self.core_config.listen_control, self.core_config.listen_admin];
        until_free(&ports).await.map_err(|e| setup("restart")(&e))?;
        self.core =
            horizon_core::start(self.core_config.clone()).await.map_err(|e| setup("core")(&e))?;
        Ok(())
    }

    /// [`Sandbox::restart_core`] with the core configured for `stage` from then on (agents and
    /// game servers stay up): a rollout moving on, or back.
    pub async fn restart_core_at(
        &mut self,
        stage: Stage,
        down_for: Duration,
    ) -> Result<(), SandboxError> {
        self.restart_core_with(|config| config.stage = stage, down_for).await
    }

    /// [`Sandbox::restart_core`] with the core's configuration changed by `change` from then
    /// on (a stage and its delegations, say).
    pub async fn restart_core_with(
        &mut self,
        change: impl FnOnce(&mut CoreConfig),
        down_for: Duration,
    ) -> Result<(), SandboxError> {
        change(&mut self.core_config);
        self.restart_core(down_for).await
    }
}
