//! What synthesis tells the catalog about a READY clone it spoke with: the vendor said the
//! clone is gone from its scope (MarkGone), or a synthesis on it succeeded (MarkUsed).
//!
//! Both are conditional updates on the row holding the vendor id synthesis used, so they are
//! idempotent and never undo newer work: a clone already cloned again (another vendor id) or
//! no longer READY is left alone.

use sea_orm::{
    ColumnTrait, Condition, EntityTrait, QueryFilter,
    sea_query::{Expr, ExprTrait},
};

use super::{
    CloneError, Clones, micros_now,
    model::{CloneState, VoiceClone, Work},
    store::{CloneStore, pk},
    transition::error_text,
};
use crate::{error::CatalogError, repo::entity::voice_clone};

fn ready_with(pack_id: &str, scope: &str, vendor_voice_id: &str) -> Condition {
    Condition::all()
        .add(pk(pack_id, scope))
        .add(voice_clone::Column::State.eq(CloneState::Ready.as_str()))
        .add(voice_clone::Column::VendorVoiceId.eq(vendor_voice_id))
}

impl CloneStore {
    /// Turns the READY clone holding `vendor_voice_id` EXPIRED with `error` (vendor id, lease
    /// and due work cleared, so a keep-alive step mid-run cannot make it READY again).
    /// `true` when this call changed it.
    pub async fn mark_gone(
        &self,
        pack_id: &str,
        scope: &str,
        vendor_voice_id: &str,
        error: &str,
        now_us: i64,
    ) -> Result<bool, CatalogError> {
        use voice_clone::Column;
        let none: Option<String> = None;
        let no_time: Option<i64> = None;
        let changed = voice_clone::Entity::update_many()
            .col_expr(Column::State, Expr::value(CloneState::Expired.as_str()))
            .col_expr(Column::VendorVoiceId, Expr::value(none.clone()))
            .col_expr(Column::Error, Expr::value(error_text(error)))
            .col_expr(Column::ExpiresAtUs, Expr::value(no_time))
            .col_expr(Column::Work, Expr::value(Work::None.as_str()))
            .col_expr(Column::DueAtUs, Expr::value(now_us))
            .col_expr(Column::Attempts, Expr::value(0))
            .col_expr(Column::LeaseOwner, Expr::value(none.clone()))
            .col_expr(Column::LeaseToken, Expr::value(none))
            .col_expr(Column::LeaseUntilUs, Expr::value(no_time))
            .col_expr(Column::UpdatedAtUs, Expr::value(now_us))
            .filter(ready_with(pack_id, scope, vendor_voice_id))
            .exec(self.db())
            .await?;
        Ok(changed.rows_affected == 1)
    }

    /// Records a use of the READY clone holding `vendor_voice_id` at `now_us`; with a
    /// keep-alive rule, its KEEPALIVE step (when no worker holds it) moves to `now_us +
    /// keep_alive_us`. `true` when this call changed it.
    pub async fn mark_used(
        &self,
        pack_id: &str,
        scope: &str,
        vendor_voice_id: &str,
        keep_alive_us: Option<i64>,
        now_us: i64,
    ) -> Result<bool, CatalogError> {
        use voice_clone::Column;
        let changed = voice_clone::Entity::update_many()
            .col_expr(Column::LastUsedAtUs, Expr::value(Some(now_us)))
            .col_expr(Column::UpdatedAtUs, Expr::value(now_us))
            .filter(ready_with(pack_id, scope, vendor_voice_id))
            .exec(self.db())
            .await?;
        if let Some(every) = keep_alive_us {
            voice_clone::Entity::update_many()
                .col_expr(Column::DueAtUs, Expr::value(now_us.saturating_add(every)))
                .filter(ready_with(pack_id, scope, vendor_voice_id))
                .filter(Column::Work.eq(Work::KeepAlive.as_str()))
                .filter(
                    Condition::any()
                        .add(Column::LeaseUntilUs.is_null())
                        .add(Column::LeaseUntilUs.lte(now_us)),
                )
                .filter(Expr::col(Column::DueAtUs).lt(now_us.saturating_add(every)))
                .exec(self.db())
                .await?;
        }
        Ok(changed.rows_affected == 1)
    }
}

impl Clones {
    async fn existing(&self, pack_id: &str, scope: &str) -> Result<VoiceClone, CatalogError> {
        self.store()?.get(pack_id, scope).await?.ok_or_else(|| {
            CloneError::NotFound {
                pack_id: pack_id.to_owned(),
                scope: scope.to_owned(),
            }
            .into()
        })
    }

    /// A vendor answered a synthesis that it does not hold `vendor_voice_id` in `scope`: the
    /// READY clone holding that id turns EXPIRED (cloned again on the next need). Answers the
    /// clone as it stands. Errors: [`CloneError::NotFound`].
    pub async fn mark_gone(
        &self,
        pack_id: &str,
        scope: &str,
        vendor_voice_id: &str,
        error: &str,
    ) -> Result<VoiceClone, CatalogError> {
        let store = self.store()?;
        let changed = store
            .mark_gone(pack_id, scope, vendor_voice_id, error, micros_now())
            .await?;
        if changed {
            tracing::info!(pack_id, scope, "clone reported gone by the vendor: expired");
        }
        self.existing(pack_id, scope).await
    }

    /// A synthesis on the READY clone holding `vendor_voice_id` in `scope` succeeded. Answers
    /// the clone as it stands. Errors: [`CloneError::NotFound`].
    pub async fn mark_used(
        &self,
        pack_id: &str,
        scope: &str,
        vendor_voice_id: &str,
    ) -> Result<VoiceClone, CatalogError> {
        let pack = self.repo.get(pack_id).await?;
        let keep_alive_us = self
            .pools
            .clone_scope(&pack.spec.tts_model_id, scope)
            .and_then(|s| s.keep_alive)
            .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        self.store()?
            .mark_used(pack_id, scope, vendor_voice_id, keep_alive_us, micros_now())
            .await?;
        self.existing(pack_id, scope).await
    }
}
