//! Items as the workers see them: take a new one, reclaim one whose worker went silent, keep
//! holding one (heartbeat), count a Synthesize call, end one.

use std::time::Duration;

use super::{JobStore, StoreError, StoreResult, bytes, int, text};
use crate::{
    model::{ItemResult, ItemState, JobState},
    usage::{BudgetWait, Usage},
};

/// An item a worker holds.
#[derive(Clone, Debug)]
pub struct Claimed {
    /// Job id.
    pub job: String,
    /// Stream entry id (what XACK and the heartbeat name).
    pub entry: String,
    /// Item id.
    pub id: String,
    /// `JobItemSpec` bytes.
    pub spec: Vec<u8>,
    /// Times the item was delivered to a worker, this one included (above 1: a worker that
    /// held it died or went silent).
    pub deliveries: i64,
}

/// What [`JobStore::take`] found.
#[derive(Clone, Debug)]
pub enum Taken {
    /// An item to run.
    Item(Claimed),
    /// No new item now.
    Empty,
    /// The job starts no item any more (cancelled or ended); `running` are still in flight.
    Closed {
        /// Items in flight.
        running: i64,
    },
    /// No such job (deleted or expired).
    Gone,
}

impl JobStore {
    fn claimed(&self, job: &str, reply: &[redis::Value]) -> StoreResult<Claimed> {
        Ok(Claimed {
            job: job.to_owned(),
            entry: text(reply.get(1))?,
            id: text(reply.get(2))?,
            spec: bytes(reply.get(3))?,
            deliveries: int(reply.get(4))?,
        })
    }

    /// Takes job `job`'s next new item for `consumer` (`take.lua`).
    pub async fn take(&self, job: &str, consumer: &str) -> StoreResult<Taken> {
        let group = super::GROUP.as_bytes();
        loop {
            let reply = self
                .run(&self.scripts.take, job, &[group, consumer.as_bytes()])
                .await?;
            return match text(reply.first())?.as_str() {
                "item" => Ok(Taken::Item(self.claimed(job, &reply)?)),
                "empty" => Ok(Taken::Empty),
                "closed" => Ok(Taken::Closed {
                    running: int(reply.get(1)).unwrap_or(0),
                }),
                "gone" => Ok(Taken::Gone),
                // An entry of an item that ended already: acknowledged, look again.
                "skip" => continue,
                other => Err(StoreError::Protocol(format!("take answered {other:?}"))),
            };
        }
    }

    /// Reclaims for `consumer` one item of `job` whose holder was silent for `idle`
    /// (`claim.lua`); an item delivered more than `max_deliveries` times ends FAILED with
    /// `failed` instead. Returns the item to run, or `None`; `Ok(None)` also when the claim
    /// failed an item, after the job's end (if it ended) was queued for finalizing.
    pub async fn claim(
        &self,
        job: &str,
        consumer: &str,
        idle: Duration,
        max_deliveries: u32,
        failed: &ItemResult,
    ) -> StoreResult<Option<Claimed>> {
        let idle = idle.as_millis().to_string();
        let max = max_deliveries.to_string();
        let failed =
            serde_json::to_string(failed).map_err(|e| StoreError::Protocol(e.to_string()))?;
        let retention = self.retention_ms().to_string();
        let reply = self
            .run(
                &self.scripts.claim,
                job,
                &[
                    super::GROUP.as_bytes(),
                    consumer.as_bytes(),
                    idle.as_bytes(),
                    max.as_bytes(),
                    failed.as_bytes(),
                    retention.as_bytes(),
                ],
            )
            .await?;
        match text(reply.first())?.as_str() {
            "item" => Ok(Some(self.claimed(job, &reply)?)),
            "failed" => {
                let item = text(reply.get(1))?;
                tracing::warn!(job, item = %voxpool_domain::untrusted::quote(&item), max_deliveries, "item failed: delivered too many times without ending");
                if !text(reply.get(2))?.is_empty() {
                    self.ended(job).await?;
                }
                Ok(None)
            }
            "none" | "gone" => Ok(None),
            other => Err(StoreError::Protocol(format!("claim answered {other:?}"))),
        }
    }

    /// Tells the group that `consumer` still works on `entries` of `job` (resets their idle
    /// time, so no other replica reclaims them).
    pub async fn heartbeat(
        &self,
        job: &str,
        consumer: &str,
        entries: &[String],
    ) -> StoreResult<()> {
        if entries.is_empty() {
            return Ok(());
        }
        self.set_idle(job, consumer, entries, Duration::ZERO).await
    }

    /// Hands entry `entry` of `job`, held by `consumer`, back at once: its idle time is set
    /// to `idle` (at least the visibility timeout), so the next look of any replica's
    /// dispatcher reclaims it (the delivery count is not raised here, the reclaim raises it).
    pub async fn release(
        &self,
        job: &str,
        consumer: &str,
        entry: &str,
        idle: Duration,
    ) -> StoreResult<()> {
        self.set_idle(job, consumer, &[entry.to_owned()], idle)
            .await
    }

    /// `XCLAIM … IDLE <idle> JUSTID` of `entries` for `consumer`: who holds them stays, their
    /// idle time becomes `idle`, their delivery count is unchanged.
    async fn set_idle(
        &self,
        job: &str,
        consumer: &str,
        entries: &[String],
        idle: Duration,
    ) -> StoreResult<()> {
        let keys = self.job_keys(job);
        self.query(
            redis::cmd("XCLAIM")
                .arg(&keys[5])
                .arg(super::GROUP)
                .arg(consumer)
                .arg(0)
                .arg(entries)
                .arg("IDLE")
                .arg(u64::try_from(idle.as_millis()).unwrap_or(u64::MAX))
                .arg("JUSTID"),
        )
        .await
        .map(drop)
    }

    /// Counts one Synthesize call for item `item` of `job`.
    pub async fn count_attempt(&self, job: &str, item: &str) -> StoreResult<()> {
        let keys = self.job_keys(job);
        self.query(
            redis::cmd("HINCRBY")
                .arg(&keys[6])
                .arg(format!("a:{item}"))
                .arg(1),
        )
        .await
        .map(drop)
    }

    /// Job `job`'s state now (`None`: gone).
    pub async fn job_state(&self, job: &str) -> StoreResult<Option<JobState>> {
        let keys = self.job_keys(job);
        let v = self
            .query(redis::cmd("HGET").arg(&keys[0]).arg("state"))
            .await?;
        Ok(JobState::parse(&text(Some(&v))?))
    }

    /// Ends `claimed` with `outcome` (`finish.lua`), adding its result's usage to the job's
    /// in the same step; when that ended the job, queues it for finalizing. Returns the job's
    /// terminal state if this ended it. A second end of the same item (another worker ended
    /// it) changes nothing.
    pub async fn finish(
        &self,
        claimed: &Claimed,
        outcome: ItemState,
        result: &ItemResult,
        characters: i64,
        all_cached: bool,
    ) -> StoreResult<Option<JobState>> {
        let result_json =
            serde_json::to_string(result).map_err(|e| StoreError::Protocol(e.to_string()))?;
        let usage = result
            .usage
            .as_ref()
            .map(Usage::increments)
            .unwrap_or_default();
        let characters = characters.to_string();
        let retention = self.retention_ms().to_string();
        let mut args: Vec<&[u8]> = vec![
            super::GROUP.as_bytes(),
            claimed.entry.as_bytes(),
            claimed.id.as_bytes(),
            outcome.code().as_bytes(),
            result_json.as_bytes(),
            characters.as_bytes(),
            if all_cached { b"1" } else { b"0" },
            retention.as_bytes(),
        ];
        args.extend(usage.iter().map(String::as_bytes));
        let reply = self.run(&self.scripts.finish, &claimed.job, &args).await?;
        match text(reply.first())?.as_str() {
            "dup" => Ok(None),
            "ended" => {
                let ended = JobState::parse(&text(reply.get(1))?);
                if ended.is_some() {
                    self.ended(&claimed.job).await?;
                }
                Ok(ended)
            }
            other => Err(StoreError::Protocol(format!("finish answered {other:?}"))),
        }
    }

    /// Sends `claimed` back to wait for a spent budget (`wait.lua`): queued again, still in
    /// the stream's pending list (a reclaim after the pause runs it), the refused call
    /// spending neither an attempt nor a delivery; `wait` shown on the job until an item
    /// succeeds. `false` when the item was not running any more (ended or gone).
    pub async fn wait_for_budget(&self, claimed: &Claimed, wait: &BudgetWait) -> StoreResult<bool> {
        let json = serde_json::to_string(wait).map_err(|e| StoreError::Protocol(e.to_string()))?;
        let reply = self
            .run(
                &self.scripts.wait,
                &claimed.job,
                &[claimed.id.as_bytes(), json.as_bytes()],
            )
            .await?;
        Ok(text(reply.first())? == "ok")
    }
}
