//! The fleet-wide queues: jobs with work (`P:active`), ended jobs whose summary is due
//! (`P:finalize`, scored by when the next try is due), finalized jobs whose webhook is due
//! (`P:webhooks`, scored the same way, polled only by replicas holding the webhook secret),
//! ended jobs by expiry (`P:ended`). Any replica serves any entry; a due entry is leased to one
//! replica at a time by pushing its score past the lease (`LEASE_DUE`), so a replica that dies
//! mid-way leaves the entry to another once the lease ends.

use std::time::Duration;

use redis::Script;

use super::{JobStore, StoreError, StoreResult, text};

/// Takes up to ARGV[2] members of zset KEYS[1] due now (score <= Redis time) and pushes each
/// one's score ARGV[1] ms into the future: leased to the caller until then.
const LEASE_DUE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, m in ipairs(due) do
  redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), m)
end
return due
";

impl JobStore {
    /// Puts job `id` in the workers' round.
    pub(super) async fn activate(&self, id: &str, score: i64) -> StoreResult<()> {
        self.query(
            redis::cmd("ZADD")
                .arg(self.global("active"))
                .arg(score)
                .arg(id),
        )
        .await
        .map(drop)
    }

    /// Jobs in the workers' round, oldest first.
    pub async fn active(&self) -> StoreResult<Vec<String>> {
        redis::from_redis_value(
            self.query(
                redis::cmd("ZRANGE")
                    .arg(self.global("active"))
                    .arg(0)
                    .arg(-1),
            )
            .await?,
        )
        .map_err(|e| StoreError::Protocol(e.to_string()))
    }

    /// Job `id` ended: queue its summary and webhook (at once, unless already queued).
    pub async fn ended(&self, id: &str) -> StoreResult<()> {
        self.query(
            redis::cmd("ZADD")
                .arg(self.global("finalize"))
                .arg("NX")
                .arg(0)
                .arg(id),
        )
        .await
        .map(drop)
    }

    /// Leases up to `n` due jobs of `queue` (`finalize` or `ended`) for `lease`.
    async fn lease_due(&self, queue: &str, lease: Duration, n: usize) -> StoreResult<Vec<String>> {
        let script = Script::new(LEASE_DUE);
        let mut inv = script.prepare_invoke();
        inv.key(self.global(queue))
            .arg(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX))
            .arg(n);
        let reply = self.conn.invoke(&inv).await.map_err(super::map_err)?;
        redis::from_redis_value(reply).map_err(|e| StoreError::Protocol(e.to_string()))
    }

    /// Leases up to `n` jobs whose finalizing is due.
    pub async fn due_finalize(&self, lease: Duration, n: usize) -> StoreResult<Vec<String>> {
        self.lease_due("finalize", lease, n).await
    }

    /// Leases up to `n` finalized jobs whose webhook is due.
    pub async fn due_webhooks(&self, lease: Duration, n: usize) -> StoreResult<Vec<String>> {
        self.lease_due("webhooks", lease, n).await
    }

    /// Queues job `id`'s webhook (due at once, unless already queued).
    pub async fn queue_webhook(&self, id: &str) -> StoreResult<()> {
        self.query(
            redis::cmd("ZADD")
                .arg(self.global("webhooks"))
                .arg("NX")
                .arg(0)
                .arg(id),
        )
        .await
        .map(drop)
    }

    /// Tries finalizing job `id` again in `after`.
    pub async fn retry_finalize(&self, id: &str, after: Duration) -> StoreResult<()> {
        self.due_again("finalize", id, after).await
    }

    /// Tries job `id`'s webhook again in `after`.
    pub async fn retry_webhook(&self, id: &str, after: Duration) -> StoreResult<()> {
        self.due_again("webhooks", id, after).await
    }

    /// Job `id`'s webhook is done with (delivered, abandoned, or its job gone).
    pub async fn webhook_done(&self, id: &str) -> StoreResult<()> {
        self.query(redis::cmd("ZREM").arg(self.global("webhooks")).arg(id))
            .await
            .map(drop)
    }

    /// Makes `id` due in `queue` `after` from now (when it is still queued there).
    async fn due_again(&self, queue: &str, id: &str, after: Duration) -> StoreResult<()> {
        let now = self.now_ms().await?;
        let at = now + i64::try_from(after.as_millis()).unwrap_or(i64::MAX / 2);
        self.query(
            redis::cmd("ZADD")
                .arg(self.global(queue))
                .arg("XX")
                .arg(at)
                .arg(id),
        )
        .await
        .map(drop)
    }

    /// Job `id` is finalized: out of the finalize queue and the workers' round, into the
    /// expiry queue at `expire_ms`; its request id expires with it. A queued webhook stays
    /// queued.
    pub async fn finalized(&self, id: &str, expire_ms: i64, request_key: &str) -> StoreResult<()> {
        self.query(
            redis::cmd("ZADD")
                .arg(self.global("ended"))
                .arg(expire_ms)
                .arg(id),
        )
        .await?;
        for queue in ["finalize", "active"] {
            self.query(redis::cmd("ZREM").arg(self.global(queue)).arg(id))
                .await?;
        }
        if !request_key.is_empty() {
            self.query(redis::cmd("PEXPIREAT").arg(request_key).arg(expire_ms))
                .await?;
        }
        Ok(())
    }

    /// Takes job `id` out of the workers' round (it is gone).
    pub async fn deactivate(&self, id: &str) -> StoreResult<()> {
        self.query(redis::cmd("ZREM").arg(self.global("active")).arg(id))
            .await
            .map(drop)
    }

    /// Leases up to `n` jobs past their retention (their blobs are due for deletion).
    pub async fn due_expired(&self, lease: Duration, n: usize) -> StoreResult<Vec<String>> {
        self.lease_due("ended", lease, n).await
    }

    /// Job `id`'s blobs are deleted: out of the expiry queue.
    pub async fn expired(&self, id: &str) -> StoreResult<()> {
        self.query(redis::cmd("ZREM").arg(self.global("ended")).arg(id))
            .await
            .map(drop)
    }

    /// Sets field `field` of job `id`'s record.
    pub async fn mark(&self, id: &str, field: &str, value: &str) -> StoreResult<()> {
        let key = self.job_keys(id)[0].clone();
        // HSET only on a record that exists: an expired job is not brought back as a stub.
        let script = Script::new(
            "if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end return 1",
        );
        let mut inv = script.prepare_invoke();
        inv.key(key).arg(field).arg(value);
        self.conn
            .invoke(&inv)
            .await
            .map_err(super::map_err)
            .map(drop)
    }

    /// Adds 1 to counter `field` of job `id`'s record; its new value (0 when the record is
    /// gone: none is brought back as a stub).
    pub async fn count(&self, id: &str, field: &str) -> StoreResult<i64> {
        let key = self.job_keys(id)[0].clone();
        let script = Script::new(
            "if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('HINCRBY', KEYS[1], ARGV[1], 1) end return 0",
        );
        let mut inv = script.prepare_invoke();
        inv.key(key).arg(field);
        let v = self.conn.invoke(&inv).await.map_err(super::map_err)?;
        super::int(Some(&v))
    }

    /// Field `field` of job `id`'s record (empty when unset).
    pub async fn field(&self, id: &str, field: &str) -> StoreResult<String> {
        let key = self.job_keys(id)[0].clone();
        text(Some(
            &self.query(redis::cmd("HGET").arg(key).arg(field)).await?,
        ))
    }

    /// Redis's clock, Unix ms.
    pub async fn now_ms(&self) -> StoreResult<i64> {
        let v: (i64, i64) = redis::from_redis_value(self.query(&redis::cmd("TIME")).await?)
            .map_err(|e| StoreError::Protocol(e.to_string()))?;
        Ok(v.0 * 1000 + v.1 / 1000)
    }
}
