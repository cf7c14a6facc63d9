//! ListJobs' pages: a tenant's jobs newest first, by a cursor (creation time, id) so jobs
//! created while a caller pages never shift the pages after its cursor.

use super::{JobStore, StoreError, StoreResult};
use crate::model::JobRecord;

impl JobStore {
    /// At most `limit` of the tenant's jobs, newest first, after `after` (from the newest when
    /// `None`), and the cursor of the next page when more follow.
    pub async fn list_jobs(
        &self,
        tenant: &str,
        after: Option<&Cursor>,
        limit: usize,
    ) -> StoreResult<(Vec<JobRecord>, Option<Cursor>)> {
        let key = self.tenant_key(tenant);
        // Newest first: by creation time, then by id (both descending), so a job created
        // while a caller pages never shifts the pages after the cursor. Jobs created in the
        // cursor's millisecond that come at or before it are skipped (at most `TIES` of them).
        const TIES: usize = 64;
        let max = after.map_or_else(|| "+inf".to_owned(), |c| c.created_ms.to_string());
        let rows: Vec<(String, f64)> = redis::from_redis_value(
            self.query(
                redis::cmd("ZREVRANGEBYSCORE")
                    .arg(&key)
                    .arg(max)
                    .arg("-inf")
                    .arg("WITHSCORES")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(limit + 1 + if after.is_some() { TIES } else { 0 }),
            )
            .await?,
        )
        .map_err(|e| StoreError::Protocol(e.to_string()))?;
        let rows: Vec<Cursor> = rows
            .into_iter()
            .map(|(id, score)| Cursor {
                created_ms: score as i64,
                id,
            })
            .filter(|c| after.is_none_or(|a| c.created_ms < a.created_ms || c.id < a.id))
            .collect();
        let more = rows.len() > limit;
        let mut jobs = Vec::with_capacity(limit);
        let mut last = None;
        for row in rows.into_iter().take(limit) {
            match self.record(&row.id).await? {
                Some(job) => jobs.push(job),
                // Expired or deleted: drop it from the index too.
                None => {
                    self.query(redis::cmd("ZREM").arg(&key).arg(&row.id))
                        .await?;
                }
            }
            last = Some(row);
        }
        Ok((jobs, last.filter(|_| more)))
    }
}

/// Where a ListJobs page ended: the last job's creation time (Redis clock, ms) and id. Its
/// token form is `<ms>.<id>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    /// The job's score in its tenant's index.
    pub created_ms: i64,
    /// The job's id.
    pub id: String,
}

impl Cursor {
    /// The page token.
    pub fn token(&self) -> String {
        format!("{}.{}", self.created_ms, self.id)
    }

    /// A token this service gave, or `None`.
    pub fn parse(token: &str) -> Option<Self> {
        let (ms, id) = token.split_once('.')?;
        let created_ms = ms.parse().ok()?;
        crate::model::parse_job_name(&format!("jobs/{id}")).ok()?;
        Some(Self {
            created_ms,
            id: id.to_owned(),
        })
    }
}
