//! The [`LeaseStore`] methods of the Redis store: each one script call (arguments in,
//! reply decoded by [`super::reply`]), plus the replica acknowledgement a grant or a
//! re-registration waits for.
//!
//! Invariant: every method is exactly one script run (the atomicity boundary; `super` doc),
//! except the acknowledgement wait after it and the best-effort withdrawal of a grant too
//! few replicas hold.

use async_trait::async_trait;
use redis::Value;

use super::{
    RedisStore,
    reply::{get, int, items, lease_reply, refusal, state_of, text, u32_of},
};
use crate::{
    model::{
        AcquireParams, AcquireResult, ClassLine, HealthPolicy, KeyStatus, Lease, LeaseId,
        LeaseToken, PoolSpec, PoolStatus, ReportParams, ReportResult, TicketState,
    },
    store::{Handover, LeaseStore, StoreError, StoreResult},
};

#[async_trait]
impl LeaseStore for RedisStore {
    async fn seed(&self, pools: &[PoolSpec]) -> StoreResult<()> {
        for spec in pools {
            self.wake.follow(&spec.pool);
            let mut args = vec![
                self.options.recovery_window_ms.to_string(),
                spec.batch_max_share.to_string(),
                if spec.adaptive { "1" } else { "0" }.to_owned(),
                spec.keys.len().to_string(),
            ];
            for k in &spec.keys {
                args.push(k.key_id.clone());
                args.push(k.capacity.to_string());
                args.push(
                    k.quota
                        .map(|q| format!("{}:{}", q.characters, q.per.as_str()))
                        .unwrap_or_default(),
                );
            }
            self.run(&self.scripts.seed, &spec.pool, args).await?;
        }
        Ok(())
    }

    async fn acquire(&self, p: &AcquireParams) -> StoreResult<AcquireResult> {
        let mut args = vec![
            p.token.as_str().to_owned(),
            p.ttl_ms.to_string(),
            format!("{:.12}", rand::random::<f64>()),
            p.exclude_keys.len().to_string(),
        ];
        args.extend(p.exclude_keys.iter().cloned());
        args.push(p.upstream_ids.len().to_string());
        args.extend(p.upstream_ids.iter().cloned());
        args.push(p.priority.as_str().to_owned());
        args.push(p.tenant.clone());
        args.push(if p.join_line { "1" } else { "0" }.to_owned());
        args.push(p.ticket_ttl_ms.to_string());
        args.push(p.characters.to_string());
        let reply = items(self.run(&self.scripts.acquire, &p.pool, args).await?)?;
        if text(get(&reply, 0)?)? == "queued" {
            return Ok(AcquireResult::Queued(refusal(&reply[1..])?));
        }
        match text(get(&reply, 0)?)?.as_str() {
            "ok" => {
                let lease = lease_reply(p.lease_id(), &reply)?;
                let online = int(get(&reply, 6)?)?;
                if p.idempotent {
                    // Not withdrawn: a concurrent Acquire with the same key may already have
                    // been answered this lease (a replay whose own WAIT succeeded), and the
                    // caller's retry with its key replays it once replicas hold it. Releasing
                    // it here would let that retry take a second slot for one logical Acquire.
                    // A caller that gives up frees it by (pool, idempotency key), else its TTL.
                    self.replicated(&lease.id.pool, "the grant", online).await?;
                } else {
                    self.withdrawn_unless_replicated(&lease, "the grant", online)
                        .await?;
                }
                Ok(AcquireResult::Granted(lease))
            }
            "unseeded" => Err(StoreError::NotSeeded(p.pool.clone())),
            _ => Ok(AcquireResult::Refused(refusal(&reply)?)),
        }
    }

    async fn release_granted(&self, id: &LeaseId, granted_at_ms: Option<i64>) -> StoreResult<bool> {
        let reply = self
            .run(
                &self.scripts.release,
                &id.pool,
                vec![
                    id.token.as_str().to_owned(),
                    granted_at_ms.unwrap_or(-1).to_string(),
                ],
            )
            .await?;
        let reply = items(reply)?;
        self.handed_here(&id.pool, reply.get(1..).unwrap_or_default());
        Ok(int(get(&reply, 0)?)? == 1)
    }

    async fn renew_granted(
        &self,
        id: &LeaseId,
        ttl_ms: u64,
        key_id: Option<&str>,
        granted_at_ms: Option<i64>,
    ) -> StoreResult<Option<Lease>> {
        let reply = items(
            self.run(
                &self.scripts.renew,
                &id.pool,
                vec![
                    id.token.as_str().to_owned(),
                    ttl_ms.to_string(),
                    key_id.unwrap_or_default().to_owned(),
                    self.options.recovery_lease_ttl_ms.to_string(),
                    granted_at_ms.unwrap_or(-1).to_string(),
                ],
            )
            .await?,
        )?;
        match text(get(&reply, 0)?)?.as_str() {
            "ok" => {}
            "reregistered" => {
                let online = int(get(&reply, 6)?)?;
                self.replicated(&id.pool, "the re-registered lease", online)
                    .await?;
            }
            "unseeded" => return Err(StoreError::NotSeeded(id.pool.clone())),
            _ => return Ok(None),
        }
        Ok(Some(lease_reply(id.clone(), &reply)?))
    }

    async fn report(
        &self,
        r: &ReportParams,
        policy: &HealthPolicy,
    ) -> StoreResult<Option<ReportResult>> {
        let args = vec![
            r.id.token.as_str().to_owned(),
            r.outcome.as_str().to_owned(),
            r.retry_after_ms.to_string(),
            if r.release { "1" } else { "0" }.to_owned(),
            r.key_id.clone().unwrap_or_default(),
            policy.rate_limit_cooldown_ms.to_string(),
            policy.failure_threshold.to_string(),
            policy.failure_backoff_base_ms.to_string(),
            policy.failure_backoff_max_ms.to_string(),
            policy.credential_cooldown_ms.to_string(),
            policy.adaptive_decrease.to_string(),
            policy.adaptive_hold_ms.to_string(),
            policy.adaptive_increase_ms.to_string(),
            r.characters.to_string(),
            policy.adaptive_increase_max_ms.to_string(),
            r.granted_at_ms.unwrap_or(-1).to_string(),
        ];
        let reply = items(self.run(&self.scripts.report, &r.id.pool, args).await?)?;
        if text(get(&reply, 0)?)? != "ok" {
            return Ok(None);
        }
        let result = ReportResult {
            key_id: text(get(&reply, 1)?)?,
            state: state_of(&text(get(&reply, 2)?)?)?,
            cooldown_until_ms: int(get(&reply, 3)?)?,
            released: int(get(&reply, 4)?)? == 1,
            effective_change: {
                let (before, after) = (u32_of(get(&reply, 5)?)?, u32_of(get(&reply, 6)?)?);
                (before != after).then_some((before, after))
            },
            applied: int(get(&reply, 7)?)? == 1,
        };
        self.handed_here(&r.id.pool, reply.get(8..).unwrap_or_default());
        Ok(Some(result))
    }

    async fn status(&self, pool: &str) -> StoreResult<Option<PoolStatus>> {
        let reply = items(self.run(&self.scripts.status, pool, vec![]).await?)?;
        let now_ms = int(get(&reply, 0)?)?;
        let recovering_until_ms = int(get(&reply, 1)?)?;
        let batch_in_flight = int(get(&reply, 2)?)?.max(0) as u64;
        let batch_max_share = text(get(&reply, 3)?)?
            .parse::<f64>()
            .map_err(|e| StoreError::Protocol(format!("batch share: {e}")))?;
        let mut line = [ClassLine::default(); 3];
        for (i, class) in line.iter_mut().enumerate() {
            class.waiters = int(get(&reply, 4 + 2 * i)?)?.max(0) as u64;
            class.oldest_since_ms = int(get(&reply, 5 + 2 * i)?)?;
        }
        if reply.len() == 10 {
            return Ok(None);
        }
        let keys = reply[10..]
            .chunks(10)
            .map(|c| {
                Ok(KeyStatus {
                    key_id: text(get(c, 0)?)?,
                    capacity: u32_of(get(c, 1)?)?,
                    effective_capacity: u32_of(get(c, 6)?)?,
                    in_flight: u32_of(get(c, 2)?)?,
                    state: state_of(&text(get(c, 3)?)?)?,
                    cooldown_until_ms: int(get(c, 4)?)?,
                    consecutive_failures: u32_of(get(c, 5)?)?,
                    quota_used: int(get(c, 7)?)?.max(0) as u64,
                    quota_limit: int(get(c, 8)?)?.max(0) as u64,
                    quota_resets_at_ms: int(get(c, 9)?)?,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(Some(PoolStatus {
            pool: pool.to_owned(),
            keys,
            now_ms,
            recovering_until_ms,
            batch_in_flight,
            batch_max_share,
            line,
        }))
    }

    async fn set_capacity(
        &self,
        pool: &str,
        key_id: &str,
        capacity: u32,
    ) -> StoreResult<Option<KeyStatus>> {
        self.admin(pool, "capacity", key_id, capacity).await
    }

    async fn set_disabled(
        &self,
        pool: &str,
        key_id: &str,
        disabled: bool,
    ) -> StoreResult<Option<KeyStatus>> {
        self.admin(pool, if disabled { "disable" } else { "enable" }, key_id, 0)
            .await
    }

    async fn lease_secret(
        &self,
        candidate: &voxpool_domain::secret::Secret,
    ) -> StoreResult<voxpool_domain::secret::Secret> {
        let key = format!("{}:lease-secret", self.options.key_prefix);
        let mut set = redis::cmd("SET");
        set.arg(&key).arg(candidate.expose()).arg("NX");
        self.bounded("SET NX", self.conn.query(&set)).await?;
        let mut get = redis::cmd("GET");
        get.arg(&key);
        match self.bounded("GET", self.conn.query(&get)).await? {
            Value::BulkString(bytes) => String::from_utf8(bytes)
                .map(voxpool_domain::secret::Secret::new)
                .map_err(|_| {
                    StoreError::Protocol("the lease secret in the store is not text".into())
                }),
            // Deleted between the two calls: keep ours, the next refresh stores it again.
            Value::Nil => Ok(candidate.clone()),
            _ => Err(StoreError::Protocol(
                "unexpected reply reading the lease secret".into(),
            )),
        }
    }

    async fn ping(&self) -> StoreResult<()> {
        self.bounded("PING", self.conn.ping()).await
    }

    async fn claim(&self, pool: &str, token: &LeaseToken, ttl_ms: u64) -> StoreResult<TicketState> {
        let (online, mut states) = self
            .tickets(pool, "claim", std::slice::from_ref(token), ttl_ms)
            .await?;
        let state = states.pop().unwrap_or(TicketState::Gone);
        if let TicketState::Granted(lease) = &state {
            self.withdrawn_unless_replicated(lease, "the hand-over", online)
                .await?;
        }
        Ok(state)
    }

    async fn keep_waiting(
        &self,
        pool: &str,
        tokens: &[LeaseToken],
        ttl_ms: u64,
    ) -> StoreResult<Vec<TicketState>> {
        Ok(self.tickets(pool, "renew", tokens, ttl_ms).await?.1)
    }

    async fn leave(&self, pool: &str, token: &LeaseToken, keep_lease: bool) -> StoreResult<()> {
        let args = vec![
            "leave".to_owned(),
            token.as_str().to_owned(),
            if keep_lease { "1" } else { "0" }.to_owned(),
        ];
        self.run(&self.scripts.waiting, pool, args)
            .await
            .map(|_| ())
    }

    fn handovers(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Handover>> {
        self.wake.take()
    }

    async fn forget_pool(&self, pool: &str) -> StoreResult<()> {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(&self.keys(pool));
        self.bounded("DEL", self.conn.query(&cmd)).await?;
        Ok(())
    }

    async fn advance_clock(&self, pool: &str, ms: u64) -> StoreResult<()> {
        let [_, _, _, _, _, _, _, _, _, _, clock, ..] = self.keys(pool);
        let mut cmd = redis::cmd("INCRBY");
        cmd.arg(clock).arg(ms);
        self.bounded("INCRBY", self.conn.query(&cmd)).await?;
        Ok(())
    }
}

impl RedisStore {
    /// Runs `waiting.lua` in `mode` (`claim` or `renew`) for `tokens`: the replicas in sync
    /// with the primary (to acknowledge a claim) and each token's state.
    async fn tickets(
        &self,
        pool: &str,
        mode: &str,
        tokens: &[LeaseToken],
        ttl_ms: u64,
    ) -> StoreResult<(i64, Vec<TicketState>)> {
        let mut args = vec![
            mode.to_owned(),
            ttl_ms.to_string(),
            tokens.len().to_string(),
        ];
        args.extend(tokens.iter().map(|t| t.as_str().to_owned()));
        let reply = items(self.run(&self.scripts.waiting, pool, args).await?)?;
        if matches!(reply.first(), Some(v) if text(v).is_ok_and(|t| t == "unseeded")) {
            return Err(StoreError::NotSeeded(pool.to_owned()));
        }
        let online = int(get(&reply, 0)?)?;
        let mut out = Vec::with_capacity(tokens.len());
        for (token, answer) in tokens.iter().zip(reply.into_iter().skip(1)) {
            let answer = items(answer)?;
            out.push(match text(get(&answer, 0)?)?.as_str() {
                "granted" => TicketState::Granted(lease_reply(
                    LeaseId {
                        pool: pool.to_owned(),
                        token: token.clone(),
                    },
                    &answer,
                )?),
                "handed" => TicketState::Handed,
                "waiting" => TicketState::Waiting,
                "gone" => TicketState::Gone,
                other => return Err(StoreError::Protocol(format!("{mode} replied {other:?}"))),
            });
        }
        if out.len() != tokens.len() {
            return Err(StoreError::Protocol(format!(
                "{mode} answered {} of {} tickets",
                out.len(),
                tokens.len()
            )));
        }
        Ok((online, out))
    }

    /// Tells this replica's own waiters among `tokens` (a script's hand-overs) at once; the
    /// pub/sub message reaches them too, later (a repeat they ignore).
    fn handed_here(&self, pool: &str, tokens: &[Value]) {
        for token in tokens {
            if let Ok(token) = text(token) {
                self.wake.announce(Handover {
                    pool: pool.to_owned(),
                    token,
                });
            }
        }
    }

    async fn admin(
        &self,
        pool: &str,
        op: &str,
        key_id: &str,
        capacity: u32,
    ) -> StoreResult<Option<KeyStatus>> {
        let reply = items(
            self.run(
                &self.scripts.admin,
                pool,
                vec![op.to_owned(), key_id.to_owned(), capacity.to_string()],
            )
            .await?,
        )?;
        if text(get(&reply, 0)?)? != "ok" {
            return Ok(None);
        }
        Ok(Some(KeyStatus {
            key_id: text(get(&reply, 1)?)?,
            capacity: u32_of(get(&reply, 2)?)?,
            effective_capacity: u32_of(get(&reply, 7)?)?,
            in_flight: u32_of(get(&reply, 3)?)?,
            state: state_of(&text(get(&reply, 4)?)?)?,
            cooldown_until_ms: int(get(&reply, 5)?)?,
            consecutive_failures: u32_of(get(&reply, 6)?)?,
            quota_used: int(get(&reply, 8)?)?.max(0) as u64,
            quota_limit: int(get(&reply, 9)?)?.max(0) as u64,
            quota_resets_at_ms: int(get(&reply, 10)?)?,
        }))
    }
}
