//! Tenants whose items wait for a spent budget, fleet-wide: `P:pause:<hex of the tenant>` holds the
//! budget wait's JSON and expires when the workers may try that tenant again. Every replica's
//! dispatcher reads it, so no replica calls synthesis for a paused tenant before then.

use std::time::Duration;

use super::{JobStore, StoreResult};

impl JobStore {
    fn pause_key(&self, tenant: &str) -> String {
        self.global(&format!("pause:{}", hex::encode(tenant.as_bytes())))
    }

    /// Pauses `tenant`'s items for `pause` fleet-wide (`why`: what the key keeps, for an
    /// operator reading Redis).
    pub async fn pause_tenant(&self, tenant: &str, pause: Duration, why: &str) -> StoreResult<()> {
        let ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX).max(1);
        self.query(
            redis::cmd("SET")
                .arg(self.pause_key(tenant))
                .arg(why)
                .arg("PX")
                .arg(ms),
        )
        .await
        .map(drop)
    }

    /// How long `tenant`'s items still wait (`None`: not paused).
    pub async fn tenant_pause(&self, tenant: &str) -> StoreResult<Option<Duration>> {
        let v = self
            .query(redis::cmd("PTTL").arg(self.pause_key(tenant)))
            .await?;
        let ms = super::int(Some(&v))?;
        Ok(u64::try_from(ms)
            .ok()
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis))
    }
}
