//! Jobs as the API sees them: create (idempotent per tenant and request id, acknowledged by
//! replicas before it answers), read, list, cancel, delete.

use std::collections::HashMap;

use redis::Value;
use sha2::{Digest as _, Sha256};

use super::{JobStore, StoreError, StoreResult, int, text};
use crate::model::{ItemResult, ItemState, JobRecord, JobSpec, JobState};

/// Why a job cannot be deleted yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotDeletable {
    /// Items are queued or running (the job's state).
    Running(JobState),
    /// Every item ended; the summary is not written yet.
    Finishing,
}

/// What [`JobStore::create`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Created {
    /// A new job with this id.
    New(String),
    /// The tenant's request id named this job already.
    Existing(String),
    /// The tenant's request id names this job, created with other items, format or sample
    /// rate.
    Reused(String),
}

/// What claiming a request id came to.
enum Claim {
    /// The id is this call's now.
    Ours,
    /// It names a job whose first call died before writing it: this call writes it.
    Unwritten(String),
    /// It names a written job: this is the answer.
    Answered(Created),
}

/// An item row of ListJobItems.
#[derive(Clone, Debug)]
pub struct ItemRow {
    /// Item id.
    pub id: String,
    /// State.
    pub state: ItemState,
    /// Spec bytes (for the characters).
    pub spec: Vec<u8>,
    /// Result, once ended.
    pub result: Option<ItemResult>,
    /// Synthesize calls made.
    pub attempts: i64,
}

impl JobStore {
    /// Creates job `id` as `job` with `items` (in submission order: id and encoded spec)
    /// unless the tenant's `request_id` (when not empty) already names one; indexes it for the
    /// workers and ListJobs. Errors: `NotReplicated` when fewer replicas than configured
    /// acknowledged it in time (a retry with the same request id answers it).
    pub async fn create(
        &self,
        id: &str,
        job: &JobSpec,
        items: &[(String, Vec<u8>)],
    ) -> StoreResult<Created> {
        let request_key = (!job.request_id.is_empty()).then(|| {
            let digest = Sha256::digest(format!("{}\n{}", job.tenant, job.request_id));
            self.global(&format!("req:{}", hex::encode(digest)))
        });
        let mut id = id.to_owned();
        let fingerprint = fingerprint(job, items);
        if let Some(key) = &request_key {
            match self
                .claim_request(key, &id, &job.tenant, &fingerprint)
                .await?
            {
                Claim::Ours => {}
                // The first call died before writing its job: write it under that id now.
                Claim::Unwritten(first) => id = first,
                Claim::Answered(created) => return Ok(created),
            }
        }
        let fields: Vec<(&str, String)> = vec![
            ("tenant", job.tenant.clone()),
            ("priority", job.priority.code().to_string()),
            ("format", job.format.code().to_string()),
            ("sample_rate_hz", job.sample_rate_hz.to_string()),
            ("request_id", job.request_id.clone()),
            ("request_key", request_key.clone().unwrap_or_default()),
            ("webhook_url", job.webhook_url.clone()),
            ("blob_store", job.blob_store.clone()),
            ("characters", job.characters.to_string()),
            ("fingerprint", fingerprint),
        ];
        let n = fields.len().to_string();
        let mut args: Vec<&[u8]> = vec![super::GROUP.as_bytes(), n.as_bytes()];
        for (k, v) in &fields {
            args.push(k.as_bytes());
            args.push(v.as_bytes());
        }
        for (item, spec) in items {
            args.push(item.as_bytes());
            args.push(spec);
        }
        let reply = self.run(&self.scripts.create, &id, &args).await?;
        let create_ms = int(reply.first())?;
        let generation = self.conn.generation();
        let created = if create_ms == 0 {
            Created::Existing(id.clone())
        } else {
            Created::New(id.clone())
        };
        let score = if create_ms == 0 {
            self.record(&id).await?.map_or(0, |r| r.create_ms)
        } else {
            create_ms
        };
        // Indexed before the acknowledgement is awaited: a job written but not acknowledged in
        // time still runs and lists (the caller is told its name), never an orphan record.
        self.activate(&id, score).await?;
        self.query(
            redis::cmd("ZADD")
                .arg(self.tenant_key(&job.tenant))
                .arg(score)
                .arg(&id),
        )
        .await?;
        self.await_replicas(&id, generation).await?;
        Ok(created)
    }

    /// Claims `tenant`'s request id (its key `key`) for job `id`, unless a concurrent or
    /// earlier call's job holds it: that job answers (the same request, or another one under
    /// the same id), or, when that call died before writing it, is written now under its id.
    async fn claim_request(
        &self,
        key: &str,
        id: &str,
        tenant: &str,
        fingerprint: &str,
    ) -> StoreResult<Claim> {
        let set = self
            .query(
                redis::cmd("SET")
                    .arg(key)
                    .arg(id)
                    .arg("NX")
                    .arg("GET")
                    .arg("PX")
                    .arg(self.retention_ms().saturating_add(86_400_000)),
            )
            .await?;
        let Value::BulkString(first) = set else {
            return Ok(Claim::Ours);
        };
        let first = String::from_utf8_lossy(&first).into_owned();
        let Some(existing) = self.record(&first).await? else {
            return Ok(Claim::Unwritten(first));
        };
        let theirs = self.field(&first, "fingerprint").await?;
        if !theirs.is_empty() && theirs != fingerprint {
            return Ok(Claim::Answered(Created::Reused(first)));
        }
        // The first call may have died between writing the job and indexing it.
        if !existing.has_ended() {
            self.activate(&first, existing.create_ms).await?;
        }
        self.query(
            redis::cmd("ZADD")
                .arg(self.tenant_key(tenant))
                .arg(existing.create_ms)
                .arg(&first),
        )
        .await?;
        Ok(Claim::Answered(Created::Existing(first)))
    }

    /// Waits for the configured replicas to acknowledge job `id`'s record (written on
    /// connection `generation`). Errors: `NotReplicated` when fewer did in time.
    async fn await_replicas(&self, id: &str, generation: u64) -> StoreResult<()> {
        if self.replica_acks == 0 {
            return Ok(());
        }
        let key = self.job_keys(id)[0].clone();
        // Half the store's response timeout: WAIT answers before the connection gives up.
        let wait = self.timeout / 2;
        let acked = self
            .conn
            .wait_replicas(&key, self.replica_acks, wait, generation)
            .await
            .map_err(super::map_err)?;
        if acked < i64::from(self.replica_acks) {
            return Err(StoreError::NotReplicated {
                job: id.to_owned(),
                acked,
                wanted: self.replica_acks,
                waited: wait,
            });
        }
        Ok(())
    }

    pub(super) fn tenant_key(&self, tenant: &str) -> String {
        self.global(&format!("tenant:{}", hex::encode(tenant.as_bytes())))
    }

    /// The record of job `id`, or `None` when there is none (never created, deleted, expired).
    pub async fn record(&self, id: &str) -> StoreResult<Option<JobRecord>> {
        let h = self.hash(&self.job_keys(id)[0]).await?;
        if h.is_empty() {
            return Ok(None);
        }
        JobRecord::from_hash(id, &h).map(Some).ok_or_else(|| {
            StoreError::Protocol(format!("job {id}: a record this code did not write"))
        })
    }

    /// Items `offset..offset + limit` in submission order (`state` only, when given), and the
    /// offset to continue from (`None` at the end).
    pub async fn list_items(
        &self,
        id: &str,
        offset: usize,
        limit: usize,
        state: Option<ItemState>,
    ) -> StoreResult<(Vec<ItemRow>, Option<usize>)> {
        const WINDOW: usize = 1000;
        let keys = self.job_keys(id);
        let mut rows: Vec<(usize, String, ItemState)> = Vec::new();
        let mut at = offset;
        loop {
            let ids: Vec<String> = redis::from_redis_value(
                self.query(
                    redis::cmd("LRANGE")
                        .arg(&keys[4])
                        .arg(at)
                        .arg(at + WINDOW - 1),
                )
                .await?,
            )
            .map_err(|e| StoreError::Protocol(e.to_string()))?;
            if ids.is_empty() {
                return Ok((self.fill(id, rows).await?, None));
            }
            let states = self.hmget(&keys[2], &ids).await?;
            for (i, item) in ids.iter().enumerate() {
                let s = ItemState::from_code(&text(states.get(i))?).ok_or_else(|| {
                    StoreError::Protocol(format!("job {id}: item {item} has no state"))
                })?;
                if state.is_none_or(|want| want == s) {
                    rows.push((at + i, item.clone(), s));
                }
                if rows.len() == limit {
                    break;
                }
            }
            let read = ids.len();
            if rows.len() == limit {
                let next = rows.last().map(|(pos, _, _)| pos + 1);
                return Ok((self.fill(id, rows).await?, next));
            }
            at += read;
            if read < WINDOW {
                return Ok((self.fill(id, rows).await?, None));
            }
        }
    }

    async fn fill(
        &self,
        id: &str,
        rows: Vec<(usize, String, ItemState)>,
    ) -> StoreResult<Vec<ItemRow>> {
        let keys = self.job_keys(id);
        let ids: Vec<String> = rows.iter().map(|(_, item, _)| item.clone()).collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let specs = self.hmget(&keys[1], &ids).await?;
        let results = self.hmget(&keys[3], &ids).await?;
        let counters: Vec<String> = ids.iter().map(|i| format!("a:{i}")).collect();
        let attempts = self.hmget(&keys[6], &counters).await?;
        let mut out = Vec::with_capacity(rows.len());
        for (i, (_, item, state)) in rows.into_iter().enumerate() {
            let result = match results.get(i) {
                Some(Value::BulkString(b)) => Some(serde_json::from_slice(b).map_err(|e| {
                    StoreError::Protocol(format!("job {id}: item {item}'s result: {e}"))
                })?),
                _ => None,
            };
            out.push(ItemRow {
                spec: match specs.get(i) {
                    Some(Value::BulkString(b)) => b.clone(),
                    _ => Vec::new(),
                },
                attempts: match attempts.get(i) {
                    Some(Value::Nil) | None => 0,
                    v => int(v)?,
                },
                id: item,
                state,
                result,
            });
        }
        Ok(out)
    }

    /// One item's state and result. `None` when the job has no such item.
    pub async fn item(
        &self,
        id: &str,
        item: &str,
    ) -> StoreResult<Option<(ItemState, Option<ItemResult>)>> {
        let keys = self.job_keys(id);
        let ids = [item.to_owned()];
        let state = text(self.hmget(&keys[2], &ids).await?.first())?;
        let Some(state) = ItemState::from_code(&state) else {
            return Ok(None);
        };
        let result = match self.hmget(&keys[3], &ids).await?.first() {
            Some(Value::BulkString(b)) => serde_json::from_slice(b).ok(),
            _ => None,
        };
        Ok(Some((state, result)))
    }

    async fn hmget(&self, key: &str, fields: &[String]) -> StoreResult<Vec<Value>> {
        super::items(self.query(redis::cmd("HMGET").arg(key).arg(fields)).await?)
    }

    /// Cancels job `id` (`cancel.lua`). Returns the state it is in now and, when the cancel
    /// ended it, that state; `Err(state)` inside when it had already SUCCEEDED or FAILED;
    /// `None` when there is no such job.
    pub async fn cancel(
        &self,
        id: &str,
    ) -> StoreResult<Option<Result<Option<JobState>, JobState>>> {
        let retention = self.retention_ms().to_string();
        let reply = self
            .run(&self.scripts.cancel, id, &[retention.as_bytes()])
            .await?;
        let state =
            |v: Option<&Value>| -> StoreResult<Option<JobState>> { Ok(JobState::parse(&text(v)?)) };
        match text(reply.first())?.as_str() {
            "gone" => Ok(None),
            "finished" => Ok(Some(Err(
                state(reply.get(1))?.unwrap_or(JobState::Succeeded)
            ))),
            "cancelled" => {
                let ended = state(reply.get(1))?;
                if ended.is_some() {
                    self.ended(id).await?;
                }
                Ok(Some(Ok(ended)))
            }
            other => Err(StoreError::Protocol(format!("cancel answered {other:?}"))),
        }
    }

    /// Deletes ended job `id`'s keys and index entries (`delete.lua`); its blobs are the
    /// caller's. `Ok(Err(_))` while it has items queued or running, or its summary is not
    /// written yet; `Ok(Ok(false))` when there is no such job.
    pub async fn delete(&self, id: &str) -> StoreResult<Result<bool, NotDeletable>> {
        let reply = self.run(&self.scripts.delete, id, &[]).await?;
        match text(reply.first())?.as_str() {
            "gone" => Ok(Ok(false)),
            "busy" => Ok(Err(NotDeletable::Running(
                JobState::parse(&text(reply.get(1))?).unwrap_or(JobState::Running),
            ))),
            "finishing" => Ok(Err(NotDeletable::Finishing)),
            "deleted" => {
                let tenant_hex = text(reply.get(1))?;
                let request_key = text(reply.get(2))?;
                self.query(redis::cmd("ZREM").arg(self.tenant_key(&tenant_hex)).arg(id))
                    .await?;
                if !request_key.is_empty() {
                    self.query(redis::cmd("DEL").arg(&request_key)).await?;
                }
                for queue in ["active", "finalize", "webhooks"] {
                    self.query(redis::cmd("ZREM").arg(self.global(queue)).arg(id))
                        .await?;
                }
                Ok(Ok(true))
            }
            other => Err(StoreError::Protocol(format!("delete answered {other:?}"))),
        }
    }

    /// Counters of job `id` as a map (tests and the summary).
    pub async fn counters(&self, id: &str) -> StoreResult<HashMap<String, String>> {
        self.hash(&self.job_keys(id)[6]).await
    }
}

/// What makes two creates the same request: the items (ids and specs, in order), the format
/// and the sample rate: hex SHA-256, each part length-prefixed. The priority and webhook
/// change no audio and are left out (as in voxctl's default request id).
fn fingerprint(job: &JobSpec, items: &[(String, Vec<u8>)]) -> String {
    let mut hash = Sha256::new();
    let mut part = |bytes: &[u8]| {
        hash.update((bytes.len() as u64).to_be_bytes());
        hash.update(bytes);
    };
    part(&job.format.code().to_be_bytes());
    part(&job.sample_rate_hz.to_be_bytes());
    for (id, spec) in items {
        part(id.as_bytes());
        part(spec);
    }
    hex::encode(hash.finalize())
}
