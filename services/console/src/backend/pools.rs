//! The scheduler's part of the facade: every pool's status (one ListPools call for all of
//! them) and the key admin actions.

use voxpool_proto::scheduler::v1 as spb;

use super::{Backend, BackendError, Service, convert, failed};
use crate::view::{KeyView, PoolView};

/// An admin action on one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyAction {
    /// Out of rotation until enabled.
    Disable,
    /// Back in rotation, cooldown and failures cleared.
    Enable,
    /// A new live capacity (0 disables it).
    SetCapacity(i32),
}

impl Backend {
    /// Every configured pool, sorted by id (one ListPools call).
    pub async fn pools(&self) -> Result<Vec<PoolView>, BackendError> {
        let mut pools: Vec<PoolView> = self
            .scheduler
            .clone()
            .list_pools(Self::request(spb::ListPoolsRequest {}))
            .await
            .map_err(failed(Service::Scheduler))?
            .into_inner()
            .pools
            .into_iter()
            .map(convert::pool)
            .collect();
        pools.sort_by(|a, b| a.pool.cmp(&b.pool));
        Ok(pools)
    }

    /// Applies `action` to `key` of `pool` (admin). Answers the key's new status.
    pub async fn key_action(
        &self,
        pool: &str,
        key: &str,
        action: &KeyAction,
    ) -> Result<KeyView, BackendError> {
        let mut client = self.scheduler.clone();
        let (pool, key_id) = (pool.to_owned(), key.to_owned());
        let answer = match action {
            KeyAction::Disable => {
                client
                    .disable_key(self.admin_request(spb::DisableKeyRequest { pool, key_id }))
                    .await
            }
            KeyAction::Enable => {
                client
                    .enable_key(self.admin_request(spb::EnableKeyRequest { pool, key_id }))
                    .await
            }
            KeyAction::SetCapacity(capacity) => {
                client
                    .set_key_capacity(self.admin_request(spb::SetKeyCapacityRequest {
                        pool,
                        key_id,
                        capacity: *capacity,
                    }))
                    .await
            }
        };
        let status = answer.map_err(failed(Service::Scheduler))?.into_inner();
        let pool = convert::pool(spb::PoolStatus {
            keys: vec![status],
            ..Default::default()
        });
        pool.keys.into_iter().next().ok_or_else(|| BackendError {
            service: Service::Scheduler,
            code: tonic::Code::Internal,
            message: "answered no key status".to_owned(),
            fields: Vec::new(),
        })
    }
}
